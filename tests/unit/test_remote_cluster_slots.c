/*
 * test_remote_cluster_slots - CRC16 and key slots on Redis's known vectors (hash
 * tags included), and the CLUSTER SLOTS decoder on good and bad replies.
 */
#include <errno.h>
#include <string.h>

#include "kvs_check.h"
#include "kvs_remote_cluster_slots.h"
#include "kvs_resp.h"

static void test_slots(void)
{
	/* The CRC16 reference check value, and CLUSTER KEYSLOT answers. */
	CHECK_EQ(kvs_slot_crc16("123456789", 9), 0x31c3);
	CHECK_EQ(kvs_slot_of("foo", 3), 12182);
	CHECK_EQ(kvs_slot_of("bar", 3), 5061);
	CHECK_EQ(kvs_slot_of("somekey", 7), 11058);
	CHECK_EQ(kvs_slot_of("", 0), 0);
	/* Hash tags (Redis cluster spec examples). */
	CHECK_EQ(kvs_slot_of("{user1000}.following", 20), kvs_slot_of("user1000", 8));
	CHECK_EQ(kvs_slot_of("{user1000}.followers", 20), kvs_slot_of("user1000", 8));
	CHECK_EQ(kvs_slot_of("foo{}{bar}", 10), kvs_slot_crc16("foo{}{bar}", 10) & 16383);
	CHECK_EQ(kvs_slot_of("foo{{bar}}zap", 13), kvs_slot_of("{bar", 4) == 0 ? 0 :
		 (kvs_slot_crc16("{bar", 4) & 16383));
	CHECK_EQ(kvs_slot_of("foo{bar}{zap}", 13), kvs_slot_of("bar", 3));
	CHECK_EQ(kvs_slot_of("{foo", 4), kvs_slot_crc16("{foo", 4) & 16383);
	/* Binary keys: a NUL is a byte like any other. */
	CHECK(kvs_slot_of("a\0b", 3) < KVS_SLOTS);
	CHECK(kvs_slot_of("a\0b", 3) != kvs_slot_of("a", 1));
}

/* Parse @in whole; the reply. */
static const kvs_resp_val *parse(kvs_resp_parser *p, const char *in)
{
	size_t used;

	kvs_resp_reset(p);
	if (kvs_resp_parse(p, (const uint8_t *)in, strlen(in), &used) != 1)
		return NULL;
	return kvs_resp_reply(p);
}

static void test_decode(void)
{
	kvs_resp_parser *p;
	kvs_slot_range r[4];
	size_t n;
	const char *good =
		"*2\r\n"
		"*4\r\n:0\r\n:5460\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$3\r\nid1\r\n"
		"*3\r\n$9\r\n127.0.0.1\r\n:7003\r\n$3\r\nid4\r\n"
		"*3\r\n:5461\r\n:16383\r\n*4\r\n$0\r\n\r\n:7001\r\n$3\r\nid2\r\n*0\r\n";

	CHECK_EQ(kvs_resp_parser_create(1024, &p), 0);
	CHECK_EQ(kvs_slot_map_decode(p, parse(p, good), r, 4, &n), 0);
	CHECK_EQ(n, 2);
	CHECK_EQ(r[0].first, 0);
	CHECK_EQ(r[0].last, 5460);
	CHECK_EQ(r[0].port, 7000);
	CHECK(!strcmp(r[0].host, "127.0.0.1"));
	CHECK_EQ(r[1].first, 5461);
	CHECK_EQ(r[1].last, 16383);
	CHECK_EQ(r[1].port, 7001);
	CHECK(!strcmp(r[1].host, ""));
	CHECK_EQ(kvs_slot_map_decode(p, parse(p, good), r, 1, &n), -ENOSPC);
	CHECK_EQ(kvs_slot_map_decode(p, parse(p, "*0\r\n"), r, 4, &n), 0);
	CHECK_EQ(n, 0);

	static const char *const bad[] = {
		"-ERR This instance has cluster support disabled\r\n",
		":1\r\n",
		"*1\r\n:1\r\n",
		"*1\r\n*2\r\n:0\r\n:1\r\n",                                 /* no node */
		"*1\r\n*3\r\n:5\r\n:4\r\n*2\r\n$1\r\nh\r\n:1\r\n",          /* first > last */
		"*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n",      /* slot range */
		"*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n:0\r\n",          /* port 0 */
		"*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n:65536\r\n",      /* port */
		"*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n:1\r\n:1\r\n",               /* host type */
		"*1\r\n*3\r\n:-1\r\n:1\r\n*2\r\n$1\r\nh\r\n:1\r\n",         /* negative */
		"*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$3\r\nh\0h\r\n:1\r\n",       /* NUL in host (parsed short) */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK_EQ(kvs_slot_map_decode(p, parse(p, bad[i]), r, 4, &n), -EPROTO);
	kvs_resp_parser_free(p);
}

int main(void)
{
	test_slots();
	test_decode();
	return check_summary("test_remote_cluster_slots");
}
