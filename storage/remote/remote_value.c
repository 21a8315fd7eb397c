/* remote_value.c - keys, value headers and their MAC in the remote tier
 * (see kvs_remote_value.h). */
#include "kvs_remote_value.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <xxhash.h>

#include "kvs_le.h"

struct kvs_rval_mac {
	/* Keyed once; each MAC works on a copy (EVP_MAC_CTX_dup), so that
	 * this one is only read and threads may share it. */
	EVP_MAC_CTX *tmpl;
	EVP_MAC *poly;  /* Poly1305, keyed anew for every value */
	uint64_t id;
	int version;    /* what seal writes */
};

/* The one-time key's label: no version 2 input starts with it (those start
 * with the magic "KVR2"), nor does the key id's message. */
static const char otk_label[] = "kvshare rval v3 otk";

/* The HMAC-SHA-256 of @a[@alen] then @b[@blen] under @m into @out. */
static int mac_of(const kvs_rval_mac *m, const void *a, size_t alen,
		  const void *b, size_t blen, uint8_t out[KVS_RVAL_MAC_BYTES])
{
	EVP_MAC_CTX *c = EVP_MAC_CTX_dup(m->tmpl);
	size_t n = 0;
	int ok;

	if (!c)
		return -ENOMEM;
	ok = EVP_MAC_update(c, a, alen) && (!blen || EVP_MAC_update(c, b, blen)) &&
	     EVP_MAC_final(c, out, &n, KVS_RVAL_MAC_BYTES) && n == KVS_RVAL_MAC_BYTES;
	EVP_MAC_CTX_free(c);
	return ok ? 0 : -EIO;
}

/*
 * The version 3 tag of header @hdr (its first KVS_RVAL_V3_SIGNED_BYTES,
 * the nonce included) and @payload[@len] into @out: Poly1305 under the key
 * HMAC-SHA-256(secret, otk_label || header), used for this header only.
 */
static int tag_of(const kvs_rval_mac *m, const uint8_t *hdr, const void *payload,
		  size_t len, uint8_t out[KVS_RVAL_TAG_BYTES])
{
	uint8_t otk[KVS_RVAL_MAC_BYTES];
	EVP_MAC_CTX *c;
	size_t n = 0;
	int rc, ok;

	rc = mac_of(m, otk_label, sizeof(otk_label) - 1, hdr, KVS_RVAL_V3_SIGNED_BYTES, otk);
	if (rc < 0)
		return rc;
	c = EVP_MAC_CTX_new(m->poly);
	if (!c) {
		OPENSSL_cleanse(otk, sizeof(otk));
		return -ENOMEM;
	}
	ok = EVP_MAC_init(c, otk, sizeof(otk), NULL) &&
	     EVP_MAC_update(c, hdr, KVS_RVAL_V3_SIGNED_BYTES) &&
	     (!len || EVP_MAC_update(c, payload, len)) &&
	     EVP_MAC_final(c, out, &n, KVS_RVAL_TAG_BYTES) && n == KVS_RVAL_TAG_BYTES;
	EVP_MAC_CTX_free(c);
	OPENSSL_cleanse(otk, sizeof(otk));
	return ok ? 0 : -EIO;
}

int kvs_rval_mac_create(const void *secret, size_t len, kvs_rval_mac **out)
{
	static const char id_msg[] = "kvshare remote value key id";
	static const uint8_t none[1];
	char digest[] = "SHA256";
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
		OSSL_PARAM_construct_end() };
	uint8_t idmac[KVS_RVAL_MAC_BYTES];
	kvs_rval_mac *m;
	EVP_MAC *hmac;
	int rc;

	if (len > 0 && len < KVS_RVAL_SECRET_MIN)
		return -EINVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	m->tmpl = hmac ? EVP_MAC_CTX_new(hmac) : NULL;
	EVP_MAC_free(hmac); /* the context keeps its own reference */
	m->poly = EVP_MAC_fetch(NULL, "POLY1305", NULL);
	m->version = KVS_RVAL_V_POLY1305;
	/* OpenSSL refuses a NULL key; an empty one is a valid HMAC key. */
	if (!m->tmpl || !m->poly ||
	    !EVP_MAC_init(m->tmpl, len ? secret : none, len, params)) {
		kvs_rval_mac_free(m);
		return -EIO;
	}
	if (len > 0) {
		rc = mac_of(m, id_msg, sizeof(id_msg) - 1, NULL, 0, idmac);
		if (rc < 0) {
			kvs_rval_mac_free(m);
			return rc;
		}
		/* 0 is the unauthenticated key's */
		m->id = get64(idmac) ? get64(idmac) : 1;
	}
	*out = m;
	return 0;
}

uint64_t kvs_rval_mac_id(const kvs_rval_mac *m)
{
	return m->id;
}

int kvs_rval_mac_set_version(kvs_rval_mac *m, int version)
{
	if (version != KVS_RVAL_V_POLY1305 && version != KVS_RVAL_V_HMAC)
		return -EINVAL;
	m->version = version;
	return 0;
}

int kvs_rval_mac_version(const kvs_rval_mac *m)
{
	return m->version;
}

void kvs_rval_mac_free(kvs_rval_mac *m)
{
	if (!m)
		return;
	EVP_MAC_CTX_free(m->tmpl); /* wipes the key it holds */
	EVP_MAC_free(m->poly);
	free(m);
}

uint64_t kvs_rval_ns_fp(const kvs_ns_layout *ns)
{
	uint8_t buf[KVS_NS_ENTRY_MAX];
	kvs_ns_layout layout = *ns;
	int n;

	/* The layout only, as the old format encodes it: the id is this
	 * daemon's name for it, not the same on every machine. */
	layout.id = 0;
	n = kvs_ns_encode(&layout, buf, sizeof(buf));
	/* the entry without its length word; | 1: never 0 */
	return n > 4 ? (XXH3_64bits(buf + 4, (size_t)n - 4) | 1) : 0;
}

void kvs_rval_key(uint8_t key[KVS_RVAL_KEY_BYTES], uint64_t ns_fp, kvs_hash hash)
{
	size_t n = sizeof(KVS_RVAL_KEY_PREFIX) - 1;

	memcpy(key, KVS_RVAL_KEY_PREFIX, n);
	put64(key + n, ns_fp);
	puth(key + n + 8, hash);
}

void kvs_rval_encode(uint8_t hdr[KVS_RVAL_HDR_BYTES], const kvs_rval_info *info)
{
	put32(hdr, KVS_RVAL_MAGIC);
	put16(hdr + 4, info->version ? info->version : KVS_RVAL_V_POLY1305);
	put16(hdr + 6, KVS_RVAL_HDR_BYTES);
	put64(hdr + 8, info->block_bytes);
	put64(hdr + 16, info->ns_fp);
	puth(hdr + 24, info->hash);
	puth(hdr + 40, info->parent);
	put64(hdr + 56, info->key_id);
	memcpy(hdr + KVS_RVAL_SIGNED_BYTES, info->mac, KVS_RVAL_MAC_BYTES);
}

int kvs_rval_decode(const uint8_t hdr[KVS_RVAL_HDR_BYTES], kvs_rval_info *info)
{
	uint16_t v = get16(hdr + 4);

	if (get32(hdr) != KVS_RVAL_MAGIC || (v != KVS_RVAL_V_HMAC && v != KVS_RVAL_V_POLY1305) ||
	    get16(hdr + 6) != KVS_RVAL_HDR_BYTES)
		return -EBADMSG;
	info->version = v;
	info->block_bytes = get64(hdr + 8);
	info->ns_fp = get64(hdr + 16);
	info->hash = geth(hdr + 24);
	info->parent = geth(hdr + 40);
	info->key_id = get64(hdr + 56);
	memcpy(info->mac, hdr + KVS_RVAL_SIGNED_BYTES, KVS_RVAL_MAC_BYTES);
	return 0;
}

int kvs_rval_seal(const kvs_rval_mac *m, const kvs_rval_info *info,
		  const void *payload, uint8_t hdr[KVS_RVAL_HDR_BYTES])
{
	kvs_rval_info h = *info;

	h.version = (uint16_t)m->version;
	h.key_id = m->id;
	memset(h.mac, 0, sizeof(h.mac));
	if (m->version == KVS_RVAL_V_HMAC) {
		kvs_rval_encode(hdr, &h);
		return mac_of(m, hdr, KVS_RVAL_SIGNED_BYTES, payload, info->block_bytes,
			      hdr + KVS_RVAL_SIGNED_BYTES);
	}
	/* 128 random bits: the one-time key is of the whole header, so it
	 * repeats only if a nonce repeats for the same block and parent */
	if (RAND_bytes(h.mac, KVS_RVAL_NONCE_BYTES) != 1)
		return -EIO;
	kvs_rval_encode(hdr, &h);
	return tag_of(m, hdr, payload, info->block_bytes, hdr + KVS_RVAL_V3_SIGNED_BYTES);
}

int kvs_rval_verify(const kvs_rval_mac *m, const uint8_t hdr[KVS_RVAL_HDR_BYTES],
		    const void *payload, size_t len, const kvs_rval_info *want,
		    kvs_rval_info *got)
{
	uint8_t mac[KVS_RVAL_MAC_BYTES];
	const uint8_t *have;
	size_t maclen;
	kvs_rval_info h;
	int rc;

	if (kvs_rval_decode(hdr, &h) < 0)
		return -EBADMSG;
	if (got)
		*got = h;
	if (h.block_bytes != len || h.block_bytes != want->block_bytes ||
	    h.ns_fp != want->ns_fp || h.hash.lo != want->hash.lo ||
	    h.hash.hi != want->hash.hi)
		return -EBADMSG;
	if (h.key_id != m->id)
		return -EKEYREJECTED;
	if (h.version == KVS_RVAL_V_HMAC) {
		have = hdr + KVS_RVAL_SIGNED_BYTES;
		maclen = KVS_RVAL_MAC_BYTES;
		rc = mac_of(m, hdr, KVS_RVAL_SIGNED_BYTES, payload, len, mac);
	} else {
		have = hdr + KVS_RVAL_V3_SIGNED_BYTES;
		maclen = KVS_RVAL_TAG_BYTES;
		rc = tag_of(m, hdr, payload, len, mac);
	}
	if (rc < 0)
		return rc;
	/* constant time: a byte-wise early exit would tell a forger how much
	 * of a guessed MAC was right */
	return CRYPTO_memcmp(mac, have, maclen) ? -EKEYREJECTED : 0;
}
