/*
 * test_nsfile - the SSD tier's namespaces file (storage/ssd/nsfile.c): an
 * entry is byte for byte the HELLO payload of protocol version 1 that
 * files were written with before the codec existed (so they load as they
 * are); round trips; a torn or bad entry ends the list and is trimmed;
 * names with a NUL are refused; entries carry their namespace id, and a
 * file of the old format (no ids: positional) or of both loads with the
 * ids the old daemon gave (a missing entry shifts no id after it).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvs_check.h"
#include "kvs_nsfile.h"
#include "kvs_wire.h"

static kvs_ns_layout of_layout(const kvs_layout *l)
{
	return (kvs_ns_layout){
		.model = l->model, .model_len = (uint32_t)strlen(l->model),
		.adapter = l->adapter ? l->adapter : "",
		.adapter_len = l->adapter ? (uint32_t)strlen(l->adapter) : 0,
		.salt = (const uint8_t *)l->salt,
		.salt_len = l->salt ? (uint32_t)strlen(l->salt) : 0,
		.layers = l->layers, .kv_heads = l->kv_heads,
		.head_dim = l->head_dim, .block_tokens = l->block_tokens,
		.tp_rank = l->tp_rank, .tp_size = l->tp_size, .dtype = l->dtype };
}

static uint32_t ids[8];

static int ids_fn(void *arg, const kvs_ns_layout *ns)
{
	int *n = arg;

	if (*n < 8)
		ids[*n] = ns->id;
	(*n)++;
	return 0;
}

static int count_fn(void *arg, const kvs_ns_layout *ns)
{
	(*(int *)arg)++;
	return ns->layers == 99; /* stop after a layer count of 99 */
}

/* Each layout encodes as the HELLO payload behind a 4-byte entry header,
 * and decodes back; one byte short is -EAGAIN. */
static void ns_codec_is_hello(const kvs_layout *ls, size_t nls, uint8_t *a,
			      uint8_t *b)
{
	kvs_ns_layout ns;
	int n, m;

	for (size_t i = 0; i < nls; i++) {
		kvs_ns_layout in = of_layout(&ls[i]);

		n = kvs_ns_encode(&in, a, KVS_NS_ENTRY_MAX);
		m = kvs_wire_hello_encode(&ls[i], b, KVS_NS_ENTRY_MAX);
		CHECK(n > 4 && m > 0);
		CHECK_EQ(n, m + 4);
		CHECK(memcmp(a + 4, b, (size_t)m) == 0);
		CHECK_EQ(kvs_ns_decode(a, (size_t)n, &ns), n);
		CHECK(ns.model_len == in.model_len && memcmp(ns.model, in.model, in.model_len) == 0);
		CHECK(ns.salt_len == in.salt_len);
		CHECK(ns.layers == in.layers && ns.dtype == in.dtype && ns.tp_rank == in.tp_rank);
		CHECK_EQ(kvs_ns_decode(a, (size_t)n - 1, &ns), -EAGAIN);
	}
}

/* A name with a NUL is refused; bad flags end an entry. */
static void ns_bad_entries(const kvs_layout *ls, uint8_t *a)
{
	kvs_ns_layout ns;
	int n;

	ns = of_layout(&ls[0]);
	ns.model = "a\0b";
	ns.model_len = 3;
	CHECK_EQ(kvs_ns_encode(&ns, a, KVS_NS_ENTRY_MAX), -EINVAL);
	ns = of_layout(&ls[0]);
	n = kvs_ns_encode(&ns, a, KVS_NS_ENTRY_MAX);
	a[4] = 2; /* flags: 0 or KVS_NS_F_ID */
	CHECK_EQ(kvs_ns_decode(a, (size_t)n, &ns), -EBADMSG);
	a[4] = 1; /* says it has an id, but is no longer */
	CHECK_EQ(kvs_ns_decode(a, (size_t)n, &ns), -EBADMSG);
}

/* With its id: 4 bytes more, the same layout; id 0 with the flag is
 * refused. */
static void ns_with_id(const kvs_layout *ls, uint8_t *a, uint8_t *b)
{
	kvs_ns_layout ns;
	int n, m;

	ns = of_layout(&ls[1]);
	ns.id = 7;
	n = kvs_ns_encode(&ns, a, KVS_NS_ENTRY_MAX);
	m = kvs_ns_encode(&(kvs_ns_layout){ .id = 0, .model = ns.model,
		.model_len = ns.model_len, .adapter = ns.adapter,
		.adapter_len = ns.adapter_len, .salt = ns.salt,
		.salt_len = ns.salt_len, .layers = ns.layers,
		.kv_heads = ns.kv_heads, .head_dim = ns.head_dim,
		.block_tokens = ns.block_tokens, .tp_rank = ns.tp_rank,
		.tp_size = ns.tp_size, .dtype = ns.dtype }, b,
		KVS_NS_ENTRY_MAX);
	CHECK_EQ(n, m + 4);
	memset(&ns, 0, sizeof(ns));
	CHECK_EQ(kvs_ns_decode(a, (size_t)n, &ns), n);
	CHECK(ns.id == 7 && ns.salt_len == 8 && memcmp(ns.salt, "tenant-b", 8) == 0);
	CHECK(ns.adapter_len == 6 && memcmp(ns.adapter, "lora-7", 6) == 0);
	a[4 + 40] = 0; /* id 0 with the flag */
	a[4 + 41] = a[4 + 42] = a[4 + 43] = 0;
	CHECK_EQ(kvs_ns_decode(a, (size_t)n, &ns), -EBADMSG);
}

/* A file: two entries, then a torn third (the first bytes of a), which
 * the load trims; then the old format and ids mixed. */
static void ns_file(const kvs_layout *ls, const uint8_t *a, uint8_t *b)
{
	const char *tmp = getenv("TMPDIR");
	char dir[256], path[300];
	kvs_ns_layout ns;
	struct stat st;
	int count, whole = 0;
	FILE *f;

	snprintf(dir, sizeof(dir), "%s/kvs-test-nsfile-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	CHECK(mkdtemp(dir) != NULL);
	count = 0;
	CHECK_EQ(kvs_nsfile_load(dir, count_fn, &count), 0); /* no file */
	for (size_t i = 0; i < 2; i++) {
		ns = of_layout(&ls[i]);
		CHECK_EQ(kvs_nsfile_append(dir, &ns), 0);
		whole += kvs_ns_encode(&ns, b, KVS_NS_ENTRY_MAX);
	}
	snprintf(path, sizeof(path), "%s/" KVS_NSFILE_NAME, dir);
	CHECK(stat(path, &st) == 0);
	f = fopen(path, "ab");
	CHECK(f != NULL);
	if (f) {
		fwrite(a, 1, 10, f); /* a torn entry */
		fclose(f);
	}
	CHECK_EQ(kvs_nsfile_load(dir, count_fn, &count), 2);
	CHECK_EQ(count, 2);
	CHECK(stat(path, &st) == 0 && st.st_size == whole); /* trimmed */
	count = 0;
	CHECK_EQ(kvs_nsfile_load(dir, count_fn, &count), 2);
	/* The old format, then an entry with id 5 (ids 3 and 4 never
	 * written), then an old one again: 1, 2, 5, 6. */
	ns = of_layout(&ls[0]);
	ns.id = 5;
	CHECK_EQ(kvs_nsfile_append(dir, &ns), 0);
	ns.id = 0;
	CHECK_EQ(kvs_nsfile_append(dir, &ns), 0);
	count = 0;
	CHECK_EQ(kvs_nsfile_load(dir, ids_fn, &count), 4);
	CHECK(ids[0] == 1 && ids[1] == 2 && ids[2] == 5 && ids[3] == 6);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const kvs_layout ls[] = {
		{ .model = "llama", .layers = 32, .kv_heads = 8, .head_dim = 128,
		  .block_tokens = 16, .tp_size = 1, .dtype = KVS_DTYPE_FP16 },
		{ .model = "m", .adapter = "lora-7", .salt = "tenant-b",
		  .layers = 2, .kv_heads = 1, .head_dim = 64, .block_tokens = 8,
		  .tp_rank = 1, .tp_size = 2, .dtype = KVS_DTYPE_INT8 },
	};
	uint8_t a[KVS_NS_ENTRY_MAX], b[KVS_NS_ENTRY_MAX];

	ns_codec_is_hello(ls, sizeof(ls) / sizeof(ls[0]), a, b);
	ns_bad_entries(ls, a);
	ns_with_id(ls, a, b);
	ns_file(ls, a, b);
	return check_summary("test_nsfile");
}
