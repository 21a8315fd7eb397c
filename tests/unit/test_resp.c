/*
 * test_resp - the RESP2 parser and encoders (storage/remote/resp.c): every reply
 * type, input split at every byte, expected bulks into caller buffers (and
 * read "directly"), limits and malformed input, the encoders' bytes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_check.h"
#include "kvs_resp.h"

/* Render value @v as text: the shape and content of a reply in one string. */
static void render(const kvs_resp_parser *p, const kvs_resp_val *v, char *out,
		   size_t cap)
{
	size_t len = strlen(out);

	switch (v->type) {
	case KVS_RESP_STATUS:
		snprintf(out + len, cap - len, "+%s", v->str);
		break;
	case KVS_RESP_ERROR:
		snprintf(out + len, cap - len, "-%s", v->str);
		break;
	case KVS_RESP_INT:
		snprintf(out + len, cap - len, ":%lld", (long long)v->n);
		break;
	case KVS_RESP_NIL:
		snprintf(out + len, cap - len, "nil");
		break;
	case KVS_RESP_BULK:
		if (v->str && !(v->flags & KVS_RESP_DIRECT))
			snprintf(out + len, cap - len, "$%.*s", (int)v->n, v->str);
		else
			snprintf(out + len, cap - len, "$<%lld%s%s>", (long long)v->n,
				 v->flags & KVS_RESP_DIRECT ? " direct" : "",
				 v->flags & KVS_RESP_DROPPED ? " dropped" : "");
		break;
	case KVS_RESP_ARRAY:
		snprintf(out + len, cap - len, "[");
		for (int64_t i = 0; i < v->n; i++) {
			if (i)
				strncat(out, ",", cap - strlen(out) - 1);
			render(p, kvs_resp_elem(p, v, (size_t)i), out, cap);
		}
		strncat(out, "]", cap - strlen(out) - 1);
		break;
	default:
		snprintf(out + len, cap - len, "?");
	}
}

/*
 * Parse @in fed @chunk bytes at a time (0: all at once); every complete
 * reply is rendered into @out, separated by ' '. Returns the parse error,
 * or 0; *@partial is whether a reply was left incomplete.
 */
static int parse_all(kvs_resp_parser *p, const char *in, size_t n, size_t chunk,
		     char *out, size_t cap, int *partial)
{
	size_t pos = 0;

	out[0] = '\0';
	*partial = 0;
	kvs_resp_reset(p);
	while (pos < n) {
		size_t k = chunk && n - pos > chunk ? chunk : n - pos, used;
		size_t off = 0;

		while (off < k) {
			int rc = kvs_resp_parse(p, (const uint8_t *)in + pos + off,
						k - off, &used);

			if (rc < 0)
				return rc;
			off += used;
			*partial = rc == 0;
			if (rc == 1) {
				if (out[0])
					strncat(out, " ", cap - strlen(out) - 1);
				render(p, kvs_resp_reply(p), out, cap);
			}
		}
		pos += k;
	}
	return 0;
}

/* @in parses to @want whole and split at every chunk size. */
static void check_parse(kvs_resp_parser *p, const char *in, size_t n,
			const char *want)
{
	char out[4096];
	int partial;

	for (size_t chunk = 0; chunk <= n; chunk++) {
		int rc = parse_all(p, in, n, chunk, out, sizeof(out), &partial);

		CHECK_EQ(rc, 0);
		CHECK_EQ(partial, 0);
		if (strcmp(out, want) != 0) {
			fprintf(stderr, "chunk %zu: got %s want %s\n", chunk, out, want);
			CHECK(0);
			return;
		}
	}
}

static void check_bad(kvs_resp_parser *p, const char *in, size_t n)
{
	char out[4096];
	int partial;

	for (size_t chunk = 0; chunk <= n; chunk++)
		CHECK_EQ(parse_all(p, in, n, chunk, out, sizeof(out), &partial),
			 -EPROTO);
}

#define S(lit) lit, sizeof(lit) - 1

static void test_types(kvs_resp_parser *p)
{
	check_parse(p, S("+OK\r\n"), "+OK");
	check_parse(p, S("+\r\n"), "+");
	check_parse(p, S("-ERR unknown command\r\n"), "-ERR unknown command");
	check_parse(p, S("-MOVED 3999 127.0.0.1:6381\r\n"),
		    "-MOVED 3999 127.0.0.1:6381");
	check_parse(p, S(":0\r\n"), ":0");
	check_parse(p, S(":-42\r\n"), ":-42");
	check_parse(p, S(":9223372036854775807\r\n"), ":9223372036854775807");
	check_parse(p, S("$3\r\nfoo\r\n"), "$foo");
	check_parse(p, S("$0\r\n\r\n"), "$");
	check_parse(p, S("$-1\r\n"), "nil");
	check_parse(p, S("*-1\r\n"), "nil");
	check_parse(p, S("*0\r\n"), "[]");
	check_parse(p, S("$4\r\na\r\nb\r\n"), "$a\r\nb"); /* CRLF inside a bulk */
	check_parse(p, S("*3\r\n:1\r\n$2\r\nhi\r\n*2\r\n+a\r\n$-1\r\n"),
		    "[:1,$hi,[+a,nil]]");
	/* CLUSTER SLOTS shaped */
	check_parse(p,
		    S("*2\r\n*3\r\n:0\r\n:5460\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n"
		      "$4\r\nabcd\r\n*3\r\n:5461\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n"
		      ":7001\r\n$4\r\nefgh\r\n"),
		    "[[:0,:5460,[$127.0.0.1,:7000,$abcd]],[:5461,:16383,[$127.0.0.1,"
		    ":7001,$efgh]]]");
	/* several replies in one buffer (pipelining) */
	check_parse(p, S("+OK\r\n$-1\r\n:1\r\n$1\r\nx\r\n"), "+OK nil :1 $x");
}

static void test_bad(kvs_resp_parser *p)
{
	char line[KVS_RESP_LINE_MAX + 16];

	check_bad(p, S("?what\r\n"));
	check_bad(p, S("+OK\n"));          /* LF without CR */
	check_bad(p, S(":12a\r\n"));
	check_bad(p, S(":\r\n"));
	check_bad(p, S(":-\r\n"));
	check_bad(p, S(":99999999999999999999\r\n"));
	check_bad(p, S("$-2\r\n"));
	check_bad(p, S("$3\r\nfooXY"));    /* no CRLF after the payload */
	check_bad(p, S("$536870913\r\n")); /* over 512 MiB */
	check_bad(p, S("*-2\r\n"));
	check_bad(p, S("*1048577\r\n"));
	check_bad(p, S("\r\n"));
	check_bad(p, S("*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n"));
	memset(line, 'x', sizeof(line));
	line[0] = '+';
	memcpy(line + sizeof(line) - 2, "\r\n", 2);
	check_bad(p, line, sizeof(line));
	/* after an error, a reset parser works again */
	check_parse(p, S("+OK\r\n"), "+OK");
}

static void test_keep_limit(void)
{
	kvs_resp_parser *p;
	char out[256];
	int partial;

	CHECK_EQ(kvs_resp_parser_create(4, &p), 0);
	CHECK_EQ(parse_all(p, S("$4\r\nabcd\r\n$5\r\nabcde\r\n"), 1, out, sizeof(out),
			   &partial), 0);
	CHECK(!strcmp(out, "$abcd $<5 dropped>"));
	kvs_resp_parser_free(p);
}

/* An expected bulk lands in the caller's buffers, split over two. */
static void test_expect(kvs_resp_parser *p)
{
	char a[3], b[4], out[256];
	struct iovec iov[2] = { { a, sizeof(a) }, { b, sizeof(b) } };
	const char *in = "$7\r\nabcdefg\r\n";
	size_t used;
	int rc;

	for (size_t chunk = 1; chunk <= strlen(in); chunk++) {
		size_t pos = 0;

		kvs_resp_reset(p);
		memset(a, 0, sizeof(a));
		memset(b, 0, sizeof(b));
		CHECK_EQ(kvs_resp_expect(p, iov, 2), 0);
		rc = 0;
		while (pos < strlen(in) && rc == 0) {
			size_t k = strlen(in) - pos < chunk ? strlen(in) - pos : chunk;

			rc = kvs_resp_parse(p, (const uint8_t *)in + pos, k, &used);
			pos += used;
			if (rc == 0 && pos < 4)
				CHECK_EQ(kvs_resp_expect(p, NULL, 0), pos ? -EBUSY : 0);
		}
		CHECK_EQ(rc, 1);
		CHECK(!memcmp(a, "abc", 3) && !memcmp(b, "defg", 4));
		CHECK(kvs_resp_reply(p)->flags & KVS_RESP_DIRECT);
		CHECK(kvs_resp_reply(p)->str == a);
	}
	/* the expectation is for one reply only */
	CHECK_EQ(kvs_resp_parse(p, (const uint8_t *)S("$3\r\nxyz\r\n"), &used), 1);
	out[0] = '\0';
	render(p, kvs_resp_reply(p), out, sizeof(out));
	CHECK(!strcmp(out, "$xyz"));

	/* another length: skipped, flagged, buffers untouched here */
	kvs_resp_reset(p);
	memset(a, 'q', sizeof(a));
	CHECK_EQ(kvs_resp_expect(p, iov, 2), 0);
	CHECK_EQ(kvs_resp_parse(p, (const uint8_t *)S("$8\r\nabcdefgh\r\n"), &used), 1);
	CHECK(kvs_resp_reply(p)->flags & KVS_RESP_DROPPED);
	CHECK(kvs_resp_reply(p)->str == NULL);
	CHECK_EQ(kvs_resp_reply(p)->n, 8);
	CHECK_EQ(a[0], 'q');

	/* nil and errors pass through an expectation */
	CHECK_EQ(kvs_resp_expect(p, iov, 2), 0);
	CHECK_EQ(kvs_resp_parse(p, (const uint8_t *)S("$-1\r\n"), &used), 1);
	CHECK_EQ(kvs_resp_reply(p)->type, KVS_RESP_NIL);
	CHECK_EQ(kvs_resp_expect(p, iov, 2), 0);
	CHECK_EQ(kvs_resp_parse(p, (const uint8_t *)S("-MOVED 1 h:1\r\n"), &used), 1);
	CHECK_EQ(kvs_resp_reply(p)->type, KVS_RESP_ERROR);
	CHECK_EQ(kvs_resp_expect(p, iov, KVS_RESP_IOV_MAX + 1), -EINVAL);
}

/* The caller reads the payload itself (kvs_resp_direct), the parser sees
 * only the header and the CRLF. */
static void test_direct(kvs_resp_parser *p)
{
	char a[5], b[5];
	struct iovec iov[2] = { { a, sizeof(a) }, { b, sizeof(b) } }, d[4];
	const char *payload = "0123456789";
	size_t used, done = 0;
	int n;

	kvs_resp_reset(p);
	CHECK_EQ(kvs_resp_direct(p, d, 4), 0);
	CHECK_EQ(kvs_resp_expect(p, iov, 2), 0);
	/* header plus the first 3 payload bytes arrive together */
	CHECK_EQ(kvs_resp_parse(p, (const uint8_t *)S("$10\r\n012"), &used), 0);
	CHECK_EQ(used, 8);
	done = 3;
	while ((n = kvs_resp_direct(p, d, 4)) > 0) {
		/* "read" 4 bytes at most into the offered buffers */
		size_t want = 4, got = 0;

		for (int i = 0; i < n && got < want; i++) {
			size_t k = d[i].iov_len < want - got ? d[i].iov_len : want - got;

			memcpy(d[i].iov_base, payload + done + got, k);
			got += k;
		}
		CHECK(got > 0);
		kvs_resp_direct_done(p, got);
		done += got;
	}
	CHECK_EQ(done, 10);
	CHECK_EQ(kvs_resp_parse(p, (const uint8_t *)S("\r\n"), &used), 1);
	CHECK(!memcmp(a, "01234", 5) && !memcmp(b, "56789", 5));
	CHECK(kvs_resp_reply(p)->flags & KVS_RESP_DIRECT);
}

static void test_encode(void)
{
	uint8_t buf[128];
	const char *argv[] = { "SET", "k", "v" };
	int n;

	n = kvs_resp_encode_cmd(buf, sizeof(buf), 3, argv, NULL);
	CHECK_EQ(n, 27);
	CHECK(!memcmp(buf, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n", 27));
	CHECK_EQ(kvs_resp_encode_cmd(buf, 20, 3, argv, NULL), -ENOSPC);
	CHECK_EQ(kvs_resp_encode_bulk_hdr(buf, sizeof(buf), 1048576), 10);
	CHECK(!memcmp(buf, "$1048576\r\n", 10));
	CHECK_EQ(kvs_resp_encode_array(buf, 4, 12), -ENOSPC);
	CHECK_EQ(kvs_resp_encode_array(buf, 5, 12), 5);
	CHECK_EQ(kvs_resp_encode_bulk(buf, sizeof(buf), "a\0b", 3), 9);
	CHECK(!memcmp(buf, "$3\r\na\0b\r\n", 9));

	/* what the encoder writes, the parser reads back */
	{
		kvs_resp_parser *p;
		size_t used;

		CHECK_EQ(kvs_resp_parser_create(64, &p), 0);
		n = kvs_resp_encode_cmd(buf, sizeof(buf), 3, argv, NULL);
		CHECK_EQ(kvs_resp_parse(p, buf, (size_t)n, &used), 1);
		CHECK_EQ(used, (size_t)n);
		CHECK_EQ(kvs_resp_reply(p)->n, 3);
		CHECK(!strcmp(kvs_resp_elem(p, kvs_resp_reply(p), 2)->str, "v"));
		kvs_resp_parser_free(p);
	}
}

/* Limits by command (kvs_resp_limit): kept until changed, checked at the
 * header, before anything is reserved or skipped. */
static void test_limits(void)
{
	kvs_resp_limits one = { .bytes = 64, .elems = 1, .depth = 0 };
	kvs_resp_limits slots = { .bytes = 1000, .elems = 8, .depth = 2 };
	kvs_resp_parser *p;
	size_t before;

	CHECK_EQ(kvs_resp_parser_create(4096, &p), 0);
	CHECK_EQ(kvs_resp_limit(p, &(kvs_resp_limits){ .depth = KVS_RESP_DEPTH_MAX + 1 }),
		 -EINVAL);
	CHECK_EQ(kvs_resp_limit(p, &one), 0);
	/* no arrays at all, not even an empty one */
	check_bad(p, S("*0\r\n"));
	check_bad(p, S("*1\r\n:1\r\n"));
	check_bad(p, S("*1000000\r\n"));
	check_parse(p, S(":1\r\n$-1\r\n+OK\r\n"), ":1 nil +OK");
	/* the byte budget: a bulk past it is refused at its header */
	check_parse(p, S("$57\r\n123456789012345678901234567890123456789012345678901234567\r\n"),
		    "$123456789012345678901234567890123456789012345678901234567");
	check_bad(p, S("$58\r\n"));
	check_bad(p, S("$536870912\r\n"));
	/* and a line past it */
	check_bad(p, S("-ERR 0123456789012345678901234567890123456789012345678901234567890\r\n"));
	/* arrays: nesting, values, and elements the bytes left cannot carry */
	CHECK_EQ(kvs_resp_limit(p, &slots), 0);
	check_parse(p, S("*2\r\n*1\r\n:1\r\n:2\r\n"), "[[:1],:2]");
	check_bad(p, S("*1\r\n*1\r\n*0\r\n"));      /* 3 deep */
	check_bad(p, S("*8\r\n"));                    /* 9 values */
	CHECK_EQ(kvs_resp_limit(p, &(kvs_resp_limits){ .bytes = 20, .depth = 1 }), 0);
	check_parse(p, S("*5\r\n+\r\n+\r\n+\r\n+\r\n+\r\n"), "[+,+,+,+,+]");
	check_bad(p, S("*6\r\n"));                    /* 4 + 6 x 3 > 20 */
	/* NULL: the fixed limits again */
	CHECK_EQ(kvs_resp_limit(p, NULL), 0);
	check_parse(p, S("*1\r\n*1\r\n*0\r\n"), "[[[]]]");
	/* mid-reply: refused */
	{
		size_t used;

		CHECK_EQ(kvs_resp_parse(p, (const uint8_t *)"*2\r\n", 4, &used), 0);
		CHECK_EQ(kvs_resp_limit(p, &one), -EBUSY);
		kvs_resp_reset(p);
	}
	/* A large reply's memory is given back when the next one starts. */
	before = kvs_resp_parser_mem(p);
	{
		static char big[200000];
		size_t o = (size_t)snprintf(big, sizeof(big), "*10000\r\n"), used;

		for (int i = 0; i < 10000; i++)
			o += (size_t)snprintf(big + o, sizeof(big) - o, "$4\r\nh%03d\r\n", i % 1000);
		CHECK_EQ(kvs_resp_parse(p, (const uint8_t *)big, o, &used), 1);
		CHECK_EQ(kvs_resp_reply(p)->n, 10000);
		CHECK(kvs_resp_parser_mem(p) > before + 10000 * sizeof(kvs_resp_val));
		CHECK_EQ(kvs_resp_parse(p, (const uint8_t *)":1\r\n", 4, &used), 1);
		CHECK(kvs_resp_parser_mem(p) <= before + KVS_RESP_KEEP_ARENA +
			KVS_RESP_KEEP_VALS * (sizeof(kvs_resp_val) + sizeof(size_t)));
	}
	kvs_resp_parser_free(p);
}

int main(void)
{
	kvs_resp_parser *p;

	CHECK_EQ(kvs_resp_parser_create(1 << 16, &p), 0);
	test_types(p);
	test_bad(p);
	test_keep_limit();
	test_expect(p);
	test_direct(p);
	test_encode();
	test_limits();
	kvs_resp_parser_free(p);
	return check_summary("test_resp");
}
