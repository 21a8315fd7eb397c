/*
 * test_badinput_attach - bad attaches and leases, sent on raw sockets: the
 * daemon answers the documented error, counts it in errors.total and
 * errors.<kind>, and keeps serving a good client, checked after every case
 * with a full lookup/reserve/commit round trip.
 *
 *  attach:   operations before HELLO or on a control-only connection
 *            (NOTATTACHED), a second HELLO with another layout (ATTACHED),
 *            invalid layouts (LAYOUT).
 *  leases:   another connection's lease (NOTOWNER), unknown or ended leases
 *            (NOLEASE), commit/abort of a read lease (LEASEKIND), too many
 *            leases (LIMIT).
 * Finally errors.total equals the sum of the per-kind counters.
 */
#include "badinput.h"

/* ---- attach ---------------------------------------------------------------- */

static void not_attached(void)
{
	static const uint16_t ops[] = { KVS_OP_LOOKUP, KVS_OP_RESERVE, KVS_OP_COMMIT,
					KVS_OP_ABORT, KVS_OP_RELEASE };
	kvs_client *ctl;
	kvs_hash h[2];
	kvs_lease lease = 0;
	kvs_block b[2];

	th_chain(&L, next_seed++, 2, 0, 0, h);
	for (int control = 0; control <= 1; control++)
		for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
			bad_case bc;
			char name[80];
			int fd = raw_plain();

			snprintf(name, sizeof(name), "%s %s", kvs_wire_opcode_name(ops[i]),
				 control ? "on a control-only connection" : "before HELLO");
			case_begin(&bc, name);
			if (control)
				CHECK_RC(th_raw_hello(fd, NULL, 1), 0);
			if (ops[i] == KVS_OP_LOOKUP || ops[i] == KVS_OP_RESERVE)
				CHECK_RC(send_hashes(fd, ops[i], 70, h, 2), 0);
			else
				CHECK_RC(send_lease(fd, ops[i], 70, 12345), 0);
			expect_reply(fd, ops[i], 70, KVS_E_NOTATTACHED, NULL, 0, bc.name);
			if (!control) {
				/* The connection stays: attach now and work. */
				CHECK_RC(th_raw_hello(fd, &L, 71), 0);
				raw_usable(fd, 72, bc.name);
			}
			close(fd);
			case_end(&bc, "notattached", 1);
		}
	/* Through the library: a control-only client cannot look up. */
	ctl = th_connect(&d, NULL);
	CHECK_RC(kvs_lookup(ctl, h, 2, &lease, b), KVS_E_NOTATTACHED);
	CHECK_RC(kvs_hash_tokens(ctl, (const uint32_t *)h, 0, h, 2), KVS_E_NOTATTACHED);
	kvs_close(ctl);
}

static void second_hello(void)
{
	kvs_layout other = L;
	bad_case bc;
	int fd;

	other.layers = 3;
	case_begin(&bc, "second HELLO with another layout");
	fd = raw_attached();
	CHECK_RC(th_raw_hello(fd, &other, 80), KVS_E_ATTACHED);
	raw_usable(fd, 81, bc.name); /* still attached with the first layout */
	close(fd);
	case_end(&bc, "layout", 1);
}

static void bad_layouts(void)
{
	struct {
		const char *name;
		kvs_layout l;
	} cases[8];
	int n = 0;
	kvs_client *c = NULL;

#define BAD_LAYOUT(what, field, value)                  \
	do {                                            \
		cases[n].name = what;                   \
		cases[n].l = L;                         \
		cases[n].l.field = value;               \
		n++;                                    \
	} while (0)
	BAD_LAYOUT("layout with 0 layers", layers, 0);
	BAD_LAYOUT("layout with 0 KV heads", kv_heads, 0);
	BAD_LAYOUT("layout with head_dim 0", head_dim, 0);
	BAD_LAYOUT("layout with 0 tokens per block", block_tokens, 0);
	BAD_LAYOUT("layout with tp_size 0", tp_size, 0);
	BAD_LAYOUT("layout with an unknown dtype", dtype, (kvs_dtype)99);
	/* 2 x 2 x 2 x 4M x 16 x 2 bytes: a block far bigger than the arena. */
	BAD_LAYOUT("layout with a block bigger than the arena", head_dim, 4u << 20);
	BAD_LAYOUT("layout whose block size overflows", layers, UINT32_MAX);
#undef BAD_LAYOUT
	for (int i = 0; i < n; i++) {
		bad_case bc;
		int fd = raw_plain();

		case_begin(&bc, cases[i].name);
		CHECK_RC(th_raw_hello(fd, &cases[i].l, 90), KVS_E_LAYOUT);
		close(fd);
		case_end(&bc, "layout", 1);
	}
	/* The library refuses a zero layout by itself. */
	CHECK_RC(kvs_connect(d.socket, &cases[0].l, &c), KVS_E_LAYOUT);
	CHECK(c == NULL);
}

/* ---- leases ---------------------------------------------------------------- */

static void lease_errors(void)
{
	kvs_client *other = th_connect(&d, &L);
	kvs_hash h[2], pub[2];
	kvs_block b[2];
	kvs_lease wl = 0, rl = 0;
	bad_case bc;
	int fd;

	th_chain(&L, next_seed++, 2, 0, 0, h);
	th_chain(&L, next_seed++, 2, 0, 0, pub);
	CHECK_RC(th_publish(good, pub, 2, NULL), 2);
	CHECK_RC(kvs_reserve(good, h, 2, &wl, b), 2);
	CHECK_RC(kvs_lookup(good, pub, 2, &rl, b), 2);

	/* Another connection's leases: through the library and raw. */
	case_begin(&bc, "another connection's lease");
	CHECK_RC(kvs_commit(other, wl), KVS_E_NOTOWNER);
	CHECK_RC(kvs_abort(other, wl), KVS_E_NOTOWNER);
	CHECK_RC(kvs_release(other, wl), KVS_E_NOTOWNER);
	CHECK_RC(kvs_release(other, rl), KVS_E_NOTOWNER);
	fd = raw_attached();
	CHECK_RC(send_lease(fd, KVS_OP_COMMIT, 100, wl), 0);
	expect_reply(fd, KVS_OP_COMMIT, 100, KVS_E_NOTOWNER, NULL, 0, bc.name);
	raw_usable(fd, 101, bc.name);
	close(fd);
	case_end(&bc, "lease", 5);

	case_begin(&bc, "commit of a read lease");
	CHECK_RC(kvs_commit(good, rl), KVS_E_LEASEKIND);
	CHECK_RC(kvs_abort(good, rl), KVS_E_LEASEKIND);
	case_end(&bc, "lease", 2);

	/* The owner's leases were not disturbed by any of it. */
	CHECK_RC(kvs_release(good, rl), 0);
	CHECK_RC(kvs_commit(good, wl), 2);
	CHECK_RC(th_probe(other, h, 2), 2);

	case_begin(&bc, "unknown and ended leases");
	CHECK_RC(kvs_commit(good, wl), KVS_E_NOLEASE); /* ended by its commit */
	CHECK_RC(kvs_release(good, rl), KVS_E_NOLEASE); /* ended by its release */
	CHECK_RC(kvs_abort(good, 0x5eed0000beefull), KVS_E_NOLEASE);
	CHECK_RC(kvs_release(good, 0x5eed0000beefull), KVS_E_NOLEASE);
	case_end(&bc, "lease", 4);
	kvs_close(other);
}

static void lease_limit(void)
{
	kvs_client *c = th_connect(&d, &L);
	kvs_lease leases[MAX_LEASES + 1];
	kvs_hash h[1];
	kvs_block b[1];
	bad_case bc;

	th_chain(&L, next_seed++, 1, 0, 0, h);
	CHECK_RC(th_publish(c, h, 1, NULL), 1);
	for (int i = 0; i < MAX_LEASES; i++)
		CHECK_RC(kvs_lookup(c, h, 1, &leases[i], b), 1);
	case_begin(&bc, "one lease more than --max-leases");
	CHECK_RC(kvs_lookup(c, h, 1, &leases[MAX_LEASES], b), KVS_E_LIMIT);
	case_end(&bc, "limit", 1);
	for (int i = 0; i < MAX_LEASES; i++)
		CHECK_RC(kvs_release(c, leases[i]), 0);
	CHECK_RC(kvs_lookup(c, h, 1, &leases[0], b), 1);
	CHECK_RC(kvs_release(c, leases[0]), 0);
	kvs_close(c);
}

int main(void)
{
	badinput_begin("test_badinput_attach");
	not_attached();
	second_hello();
	bad_layouts();
	lease_errors();
	lease_limit();
	check_error_sum();
	return badinput_end();
}
