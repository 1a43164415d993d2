/* SPDX-License-Identifier: MIT */
/*
 * The peer message codec (ckptd/peerwire.c): every type round-trips with
 * and without a key; a tag under another key, or none, is refused; every
 * bit flip and every truncation is refused; and each range check of the
 * decoder refuses what it is there to refuse, while the boundary values
 * next to it still decode. Messages are altered either as structs (encoded
 * as they are: the encoder checks sizes only) or as bytes, resealed with a
 * tag computed here.
 */
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "peer-sample.h"
#include "peerwire.h"

static const uint8_t *const key = peer_sample_key;
static const size_t keylen = sizeof(peer_sample_key);

static const uint8_t other_key[32] = {
	0x6b, 0x65, 0x79, 0x2d, 0x6f, 0x66, 0x2d, 0x74, 0x68, 0x65, 0x2d, 0x66,
	0x75, 0x7a, 0x7a, 0x65, 0x72, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06,
	0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0f, /* the last byte differs */
};

/* Writes the length field and the tag of buf[0..len) again, under k. */
static void reseal(uint8_t *buf, size_t len, const uint8_t *k, size_t klen)
{
	unsigned char md[32];
	unsigned int mdlen = 0;

	for (int i = 0; i < 4; i++)
		buf[8 + i] = (uint8_t)(len >> (8 * i));
	if (klen == 0) {
		memset(buf + len - PEER_MAC_BYTES, 0, PEER_MAC_BYTES);
		return;
	}
	if (!HMAC(EVP_sha256(), k, (int)klen, buf, len - PEER_MAC_BYTES, md, &mdlen))
		abort();
	memcpy(buf + len - PEER_MAC_BYTES, md, PEER_MAC_BYTES);
}

static int decode(const uint8_t *buf, size_t len, const uint8_t *k, size_t klen,
		  struct peer_msg *out)
{
	char err[256] = "";
	int r = peer_decode(buf, len, k, klen, out, err, sizeof(err));

	/* A refusal always says why. */
	if (r < 0 && !err[0]) {
		fprintf(stderr, "peer_decode returned %d without a reason\n", r);
		check_failures++;
	}
	return r;
}

/* Encodes m as it is (the encoder must take it), then decodes it with and
 * without a key: the expected result both times (0: equal to m). */
static void expect(const struct peer_msg *m, int want, const char *what)
{
	uint8_t buf[PEER_MSG_MAX];
	struct peer_msg out;

	for (int keyed = 0; keyed <= 1; keyed++) {
		const uint8_t *k = keyed ? key : NULL;
		size_t kl = keyed ? keylen : 0;
		int n = peer_encode(m, k, kl, buf, sizeof(buf));
		if (n < 0) {
			fprintf(stderr, "%s: peer_encode: %d\n", what, n);
			check_failures++;
			return;
		}
		int r = decode(buf, (size_t)n, k, kl, &out);
		if (r != want) {
			fprintf(stderr, "%s (%s key): peer_decode %d, expected %d\n", what,
				keyed ? "with a" : "without a", r, want);
			check_failures++;
		} else if (want == 0 && !peer_msg_equal(m, &out)) {
			fprintf(stderr, "%s: decoded fields differ\n", what);
			check_failures++;
		}
	}
}

#define BAD(m, what) expect(m, -EBADMSG, what)
#define GOOD(m, what) expect(m, 0, what)

static void test_round_trip(void)
{
	struct peer_msg m, out;
	uint8_t buf[PEER_MSG_MAX];

	for (unsigned t = 1; t < PEER_TYPE_MAX; t++) {
		peer_sample(&m, t);
		GOOD(&m, peer_type_name(t));
		/* The length is the whole message and the tag is zeros without a key. */
		int n = peer_encode(&m, NULL, 0, buf, sizeof(buf));
		CHECK(n >= PEER_HDR_BYTES + PEER_MAC_BYTES && n <= PEER_MSG_MAX);
		if (n < 0)
			continue;
		CHECK_EQ(buf[8] | buf[9] << 8 | buf[10] << 16 | (uint32_t)buf[11] << 24, n);
		CHECK_EQ(buf[6] | buf[7] << 8, t);
		for (int i = 0; i < PEER_MAC_BYTES; i++)
			CHECK_EQ(buf[n - PEER_MAC_BYTES + i], 0);
		CHECK_EQ(decode(buf, (size_t)n, NULL, 0, &out), 0);
		CHECK_EQ(out.h.length, n);
	}

	/* Every variable field at its largest, binary bytes in the address,
	 * the extremes of every integer. */
	peer_sample(&m, PEER_HELLO);
	m.h.from_node = 65534;
	m.h.to_node = 0;
	m.h.nodes = 65535;
	m.h.from_epoch = UINT64_MAX;
	m.h.seq = UINT64_MAX;
	m.h.cluster = UINT64_MAX;
	for (int i = 0; i < PEER_ADDR_MAX; i++)
		m.addr[i] = (uint8_t)i;
	m.addr_len = PEER_ADDR_MAX;
	memset(m.cluster_id, 'c', PEER_CLUSTER_MAX);
	m.cluster_id[PEER_CLUSTER_MAX] = '\0';
	memset(m.reason, 'r', CKPT_REASON_MAX);
	m.reason[CKPT_REASON_MAX] = '\0';
	GOOD(&m, "HELLO, largest fields");

	peer_sample(&m, PEER_VOTE);
	memset(m.job, 'j', CKPT_JOB_NAME_MAX);
	m.job[CKPT_JOB_NAME_MAX] = '\0';
	m.step = CKPT_STEP_MAX;
	m.world_size = PEER_WORLD_MAX;
	m.rank = PEER_WORLD_MAX - 1;
	m.shard_bytes = UINT64_MAX;
	m.blob_bytes = UINT64_MAX;
	m.index_bytes = PEER_INDEX_MAX;
	m.blob_crc32c = UINT32_MAX;
	memset(m.index_sha256, 0xff, 32);
	m.status = INT32_MIN;
	strcpy(m.reason, "UTF-8 is text: \xc3\xa9\xe2\x82\xac");
	GOOD(&m, "VOTE, largest fields");
	m.status = INT32_MAX;
	GOOD(&m, "VOTE, status INT32_MAX");

	/* Boundaries that are still valid. */
	peer_sample(&m, PEER_COPY_OFFER);
	m.xfer = PEER_XFER_MASK;
	m.piece_bytes = 4096;
	m.shard_bytes = 4096ull * ((1u << PEER_TAG_PIECE_BITS) - 1);
	GOOD(&m, "COPY_OFFER, largest xfer, smallest pieces, most pieces");
	m.piece_bytes = 1u << 30;
	GOOD(&m, "COPY_OFFER, largest pieces");
	m.xfer = 1;
	m.shard_bytes = 0;
	m.blob_bytes = 0;
	GOOD(&m, "COPY_OFFER, smallest xfer, empty shard");

	peer_sample(&m, PEER_FETCH);
	m.world_size = 0;
	m.rank = 77; /* a FETCH need not know the world size */
	GOOD(&m, "FETCH of world size 0");
	peer_sample(&m, PEER_FETCH_HAVE);
	m.status = 0;
	m.shard_bytes = m.blob_bytes = m.index_bytes = 0;
	m.piece_bytes = 0;
	m.world_size = 0;
	memset(m.index_sha256, 0, 32);
	GOOD(&m, "FETCH_HAVE, does not hold it");
	peer_sample(&m, PEER_HELLO_ACK);
	m.h.to_epoch = 0;
	GOOD(&m, "HELLO_ACK to an unknown epoch");
	peer_sample(&m, PEER_HELLO);
	m.h.to_epoch = 5;
	GOOD(&m, "HELLO to a known epoch");
	peer_sample(&m, PEER_VOTE);
	m.rank = m.world_size - 1;
	m.blob_bytes = m.shard_bytes;
	GOOD(&m, "VOTE of the last rank, blob as large as the shard");
	peer_sample(&m, PEER_HEARTBEAT);
	m.h.from_node = 0;
	m.h.to_node = 1;
	m.h.nodes = 2;
	GOOD(&m, "HEARTBEAT between 2 nodes");
}

static void test_keys(void)
{
	uint8_t buf[PEER_MSG_MAX];
	struct peer_msg m, out;

	for (unsigned t = 1; t < PEER_TYPE_MAX; t++) {
		peer_sample(&m, t);
		int n = peer_encode(&m, key, keylen, buf, sizeof(buf));
		CHECK(n > 0);
		if (n < 0)
			continue;
		CHECK_EQ(decode(buf, (size_t)n, key, keylen, &out), 0);
		CHECK_EQ(decode(buf, (size_t)n, other_key, sizeof(other_key), &out), -EPERM);
		CHECK_EQ(decode(buf, (size_t)n, key, keylen - 1, &out), -EPERM);
		CHECK_EQ(decode(buf, (size_t)n, NULL, 0, &out), -EPERM);
		/* Keyed tags are not zeros, and differ per key. */
		uint8_t zero[PEER_MAC_BYTES] = { 0 }, tag[PEER_MAC_BYTES];
		CHECK(memcmp(buf + n - PEER_MAC_BYTES, zero, PEER_MAC_BYTES) != 0);
		memcpy(tag, buf + n - PEER_MAC_BYTES, PEER_MAC_BYTES);
		CHECK_EQ(peer_encode(&m, other_key, sizeof(other_key), buf, sizeof(buf)), n);
		CHECK(memcmp(buf + n - PEER_MAC_BYTES, tag, PEER_MAC_BYTES) != 0);
		CHECK_EQ(decode(buf, (size_t)n, key, keylen, &out), -EPERM);
		CHECK_EQ(decode(buf, (size_t)n, other_key, sizeof(other_key), &out), 0);
		/* A group with a key refuses unauthenticated messages. */
		n = peer_encode(&m, NULL, 0, buf, sizeof(buf));
		CHECK(n > 0);
		CHECK_EQ(decode(buf, (size_t)n, key, keylen, &out), -EPERM);
	}
	/* The longest key there may be works; a longer one is refused. */
	uint8_t long_key[PEER_KEY_MAX + 1];
	memset(long_key, 0x5a, sizeof(long_key));
	peer_sample(&m, PEER_VOTE);
	int n = peer_encode(&m, long_key, PEER_KEY_MAX, buf, sizeof(buf));
	CHECK(n > 0);
	CHECK_EQ(decode(buf, (size_t)n, long_key, PEER_KEY_MAX, &out), 0);
	CHECK_EQ(peer_encode(&m, long_key, PEER_KEY_MAX + 1, buf, sizeof(buf)), -EINVAL);
}

static void test_bit_flips(void)
{
	uint8_t buf[PEER_MSG_MAX];
	struct peer_msg m, out;
	long tried = 0;

	for (unsigned t = 1; t < PEER_TYPE_MAX; t++) {
		peer_sample(&m, t);
		int n = peer_encode(&m, key, keylen, buf, sizeof(buf));
		CHECK(n > 0);
		for (int i = 0; i < n; i++) {
			for (int bit = 0; bit < 8; bit++) {
				buf[i] ^= (uint8_t)(1u << bit);
				int r = peer_decode(buf, (size_t)n, key, keylen, &out, NULL, 0);
				/* Magic, version and length are read before the
				 * tag; anything else fails it. */
				int want = (i < 6 || (i >= 8 && i < 12)) ? -EBADMSG : -EPERM;
				if (r != want) {
					fprintf(stderr, "%s: bit %d of byte %d flipped: %d\n",
						peer_type_name(t), bit, i, r);
					check_failures++;
				}
				buf[i] ^= (uint8_t)(1u << bit);
				tried++;
			}
		}
		CHECK_EQ(decode(buf, (size_t)n, key, keylen, &out), 0);

		/* Without a key only the tag protects nothing: a flipped bit
		 * of the tag is still refused. */
		n = peer_encode(&m, NULL, 0, buf, sizeof(buf));
		for (int i = n - PEER_MAC_BYTES; i < n; i++) {
			buf[i] ^= 0x10;
			CHECK_EQ(decode(buf, (size_t)n, NULL, 0, &out), -EPERM);
			buf[i] ^= 0x10;
		}
	}
	CHECK(tried > 13 * 8 * 80);
}

static void test_truncation(void)
{
	uint8_t buf[PEER_MSG_MAX], cut[PEER_MSG_MAX];
	struct peer_msg m, out;

	for (unsigned t = 1; t < PEER_TYPE_MAX; t++) {
		peer_sample(&m, t);
		for (int keyed = 0; keyed <= 1; keyed++) {
			const uint8_t *k = keyed ? key : NULL;
			size_t kl = keyed ? keylen : 0;
			int n = peer_encode(&m, k, kl, buf, sizeof(buf));
			CHECK(n > 0);
			/* Cut as it is: the length field disagrees. */
			for (int len = 0; len < n; len++)
				CHECK_EQ(decode(buf, (size_t)len, k, kl, &out), -EBADMSG);
			/* Cut, the length field and the tag made right: the
			 * body parser must notice. */
			size_t body = (size_t)n - PEER_MAC_BYTES;
			for (size_t b = PEER_HDR_BYTES; b < body; b++) {
				memcpy(cut, buf, b);
				size_t len = b + PEER_MAC_BYTES;
				reseal(cut, len, k, kl);
				int r = decode(cut, len, k, kl, &out);
				if (r != -EBADMSG) {
					fprintf(stderr, "%s cut to %zu body bytes: %d\n",
						peer_type_name(t), b, r);
					check_failures++;
				}
			}
			/* A byte too many, resealed: refused as well. */
			memcpy(cut, buf, body);
			cut[body] = 0;
			reseal(cut, (size_t)n + 1, k, kl);
			CHECK_EQ(decode(cut, (size_t)n + 1, k, kl, &out), -EBADMSG);
		}
	}
}

static uint32_t get32(const uint8_t *p)
{
	return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void test_header(void)
{
	uint8_t buf[PEER_MSG_MAX + 64], tmp[PEER_MSG_MAX + 64];
	struct peer_msg m, out;
	int n;

	peer_sample(&m, PEER_VOTE);
	n = peer_encode(&m, key, keylen, buf, sizeof(buf));
	CHECK(n > 0);
	CHECK_EQ(get32(buf), PEER_MAGIC);

	/* Magic, version: refused, with the right tag or not. */
	for (int keyed = 0; keyed <= 1; keyed++) {
		const uint8_t *k = keyed ? key : NULL;
		size_t kl = keyed ? keylen : 0;
		n = peer_encode(&m, k, kl, buf, sizeof(buf));

		memcpy(tmp, buf, (size_t)n);
		tmp[0] = 'X';
		reseal(tmp, (size_t)n, k, kl);
		CHECK_EQ(decode(tmp, (size_t)n, k, kl, &out), -EBADMSG);

		unsigned versions[] = { 0, 2, 0x100, 0xffff };
		for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
			memcpy(tmp, buf, (size_t)n);
			put16(tmp + 4, (uint16_t)versions[i]);
			reseal(tmp, (size_t)n, k, kl);
			CHECK_EQ(decode(tmp, (size_t)n, k, kl, &out), -EBADMSG);
		}

		/* Unknown types, tag right. */
		unsigned types[] = { 0, PEER_TYPE_MAX, PEER_TYPE_MAX + 1, 0x100, 0xffff };
		for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
			memcpy(tmp, buf, (size_t)n);
			put16(tmp + 6, (uint16_t)types[i]);
			reseal(tmp, (size_t)n, k, kl);
			CHECK_EQ(decode(tmp, (size_t)n, k, kl, &out), -EBADMSG);
		}
		/* Another valid type with this body: its own checks apply
		 * (HEARTBEAT carries no job). */
		memcpy(tmp, buf, (size_t)n);
		put16(tmp + 6, PEER_HEARTBEAT);
		reseal(tmp, (size_t)n, k, kl);
		CHECK_EQ(decode(tmp, (size_t)n, k, kl, &out), -EBADMSG);

		/* The length field: one off either way, zero, huge. */
		uint32_t lens[] = { (uint32_t)n - 1, (uint32_t)n + 1, 0, UINT32_MAX };
		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			memcpy(tmp, buf, (size_t)n);
			for (int b = 0; b < 4; b++)
				tmp[8 + b] = (uint8_t)(lens[i] >> (8 * b));
			CHECK_EQ(decode(tmp, (size_t)n, k, kl, &out), -EBADMSG);
		}

		/* Reserved header bytes. */
		for (int b = 56; b < 64; b++) {
			memcpy(tmp, buf, (size_t)n);
			tmp[b] = 1;
			reseal(tmp, (size_t)n, k, kl);
			CHECK_EQ(decode(tmp, (size_t)n, k, kl, &out), -EBADMSG);
		}

		/* A string length beyond its field or beyond the message. */
		memcpy(tmp, buf, (size_t)n);
		put16(tmp + PEER_HDR_BYTES, CKPT_JOB_NAME_MAX + 1);
		reseal(tmp, (size_t)n, k, kl);
		CHECK_EQ(decode(tmp, (size_t)n, k, kl, &out), -EBADMSG);
		memcpy(tmp, buf, (size_t)n);
		put16(tmp + PEER_HDR_BYTES, 0xffff);
		reseal(tmp, (size_t)n, k, kl);
		CHECK_EQ(decode(tmp, (size_t)n, k, kl, &out), -EBADMSG);
		/* A NUL inside the job name. */
		memcpy(tmp, buf, (size_t)n);
		tmp[PEER_HDR_BYTES + 2 + 2] = '\0';
		reseal(tmp, (size_t)n, k, kl);
		CHECK_EQ(decode(tmp, (size_t)n, k, kl, &out), -EBADMSG);
	}

	/* Too short for a header and a tag, or longer than any message. */
	memset(buf, 0, sizeof(buf));
	peer_sample(&m, PEER_HEARTBEAT);
	n = peer_encode(&m, NULL, 0, buf, sizeof(buf));
	CHECK(n > PEER_HDR_BYTES + PEER_MAC_BYTES);
	memcpy(tmp, buf, (size_t)n);
	memset(tmp + n, 0, sizeof(tmp) - (size_t)n);
	reseal(tmp, PEER_MSG_MAX + 1, NULL, 0);
	CHECK_EQ(decode(tmp, PEER_MSG_MAX + 1, NULL, 0, &out), -EBADMSG);
	CHECK_EQ(decode(tmp, PEER_HDR_BYTES + PEER_MAC_BYTES - 1, NULL, 0, &out), -EBADMSG);
	CHECK_EQ(decode(tmp, 0, NULL, 0, &out), -EBADMSG);
	/* The output is cleared even on failure. */
	memset(&out, 0xee, sizeof(out));
	CHECK_EQ(decode(tmp, 3, NULL, 0, &out), -EBADMSG);
	CHECK_EQ(out.h.type, 0);
	CHECK_EQ(out.job[0], 0);
}

static void test_nodes(void)
{
	struct peer_msg m;

	for (unsigned t = 1; t < PEER_TYPE_MAX; t++) {
		char what[64];

		peer_sample(&m, t);
		m.h.nodes = 1;
		m.h.from_node = 0;
		m.h.to_node = 0;
		snprintf(what, sizeof(what), "%s among 1 node", peer_type_name(t));
		BAD(&m, what);
		m.h.nodes = 0;
		BAD(&m, what);

		peer_sample(&m, t);
		m.h.to_node = m.h.from_node;
		snprintf(what, sizeof(what), "%s to itself", peer_type_name(t));
		BAD(&m, what);

		peer_sample(&m, t);
		m.h.from_node = m.h.nodes;
		snprintf(what, sizeof(what), "%s from node nodes", peer_type_name(t));
		BAD(&m, what);
		m.h.from_node = UINT32_MAX;
		BAD(&m, what);

		peer_sample(&m, t);
		m.h.to_node = m.h.nodes;
		snprintf(what, sizeof(what), "%s to node nodes", peer_type_name(t));
		BAD(&m, what);

		peer_sample(&m, t);
		m.h.nodes = 65536;
		snprintf(what, sizeof(what), "%s among 65536 nodes", peer_type_name(t));
		BAD(&m, what);

		peer_sample(&m, t);
		m.h.from_epoch = 0;
		snprintf(what, sizeof(what), "%s from epoch 0", peer_type_name(t));
		BAD(&m, what);

		if (t != PEER_HELLO && t != PEER_HELLO_ACK) {
			peer_sample(&m, t);
			m.h.to_epoch = 0;
			snprintf(what, sizeof(what), "%s to epoch 0", peer_type_name(t));
			BAD(&m, what);
		}
	}
}

static void test_text(void)
{
	static const char *const bad_jobs[] = { "..", ".", ".hidden", "a/b", "/", "a b",
						"tab\tjob", "\xc3\xa9", "a\\b" };
	static const char *const bad_text[] = { "\x01", "line\nbreak", "del\x7f", "esc\x1b[0m",
						"\t" };
	struct peer_msg m;

	for (unsigned t = PEER_VOTE; t < PEER_TYPE_MAX; t++) {
		for (size_t i = 0; i < sizeof(bad_jobs) / sizeof(bad_jobs[0]); i++) {
			peer_sample(&m, t);
			strcpy(m.job, bad_jobs[i]);
			BAD(&m, "invalid job name");
		}
		peer_sample(&m, t);
		m.job[0] = '\0';
		BAD(&m, "empty job name");
		peer_sample(&m, t);
		strcpy(m.job, "a.b_c-D9");
		GOOD(&m, "job name of every allowed kind of character");
	}
	/* Messages without a job carry none. */
	for (unsigned t = PEER_HELLO; t < PEER_VOTE; t++) {
		peer_sample(&m, t);
		strcpy(m.job, "llama-7b");
		BAD(&m, "job in a message without one");
	}
	for (unsigned t = 1; t < PEER_TYPE_MAX; t++) {
		for (size_t i = 0; i < sizeof(bad_text) / sizeof(bad_text[0]); i++) {
			peer_sample(&m, t);
			snprintf(m.reason, sizeof(m.reason), "failed: %s", bad_text[i]);
			BAD(&m, "control characters in the reason");
		}
	}
	for (size_t i = 0; i < sizeof(bad_text) / sizeof(bad_text[0]); i++) {
		peer_sample(&m, PEER_HELLO);
		snprintf(m.cluster_id, sizeof(m.cluster_id), "c%s", bad_text[i]);
		BAD(&m, "control characters in the cluster id");
	}
}

static void test_hello(void)
{
	struct peer_msg m;

	for (unsigned t = PEER_HELLO; t <= PEER_HELLO_ACK; t++) {
		peer_sample(&m, t);
		m.addr_len = 0;
		BAD(&m, "HELLO without an address");
		peer_sample(&m, t);
		m.cluster_id[0] = '\0';
		BAD(&m, "HELLO without a cluster id");
		peer_sample(&m, t);
		m.addr_len = 1;
		GOOD(&m, "HELLO with a 1-byte address");
	}
	for (unsigned t = PEER_HEARTBEAT; t < PEER_TYPE_MAX; t++) {
		peer_sample(&m, t);
		m.addr[0] = 1;
		m.addr_len = 1;
		BAD(&m, "an address outside HELLO");
		peer_sample(&m, t);
		strcpy(m.cluster_id, "default");
		BAD(&m, "a cluster id outside HELLO");
	}
}

static void test_ranges(void)
{
	struct peer_msg m;

	/* World and rank, where a world size is given. */
	for (unsigned t = PEER_VOTE; t < PEER_TYPE_MAX; t++) {
		peer_sample(&m, t);
		m.rank = m.world_size;
		BAD(&m, "rank == world size");
		m.rank = UINT32_MAX;
		BAD(&m, "rank UINT32_MAX");
		peer_sample(&m, t);
		m.world_size = PEER_WORLD_MAX + 1;
		m.rank = 0;
		BAD(&m, "world larger than PEER_WORLD_MAX");
	}
	static const unsigned need_world[] = { PEER_VOTE, PEER_COMMITTED, PEER_COPY_OFFER };
	for (size_t i = 0; i < sizeof(need_world) / sizeof(need_world[0]); i++) {
		peer_sample(&m, need_world[i]);
		m.world_size = 0;
		m.rank = 0;
		BAD(&m, "world of 0 ranks");
	}

	/* Sizes of what a vote, an offer and a copy held describe. */
	static const unsigned sized[] = { PEER_VOTE, PEER_COPY_OFFER, PEER_FETCH_HAVE };
	for (size_t i = 0; i < sizeof(sized) / sizeof(sized[0]); i++) {
		peer_sample(&m, sized[i]);
		m.index_bytes = 0;
		BAD(&m, "index of 0 bytes");
		m.index_bytes = PEER_INDEX_MAX + 1;
		BAD(&m, "index larger than PEER_INDEX_MAX");
		peer_sample(&m, sized[i]);
		m.blob_bytes = m.shard_bytes + 1;
		BAD(&m, "blob larger than its shard");
	}

	/* Transfer ids. */
	for (unsigned t = PEER_COPY_OFFER; t < PEER_TYPE_MAX; t++) {
		peer_sample(&m, t);
		m.xfer = 0;
		BAD(&m, "transfer id 0");
		m.xfer = PEER_XFER_MASK + 1;
		BAD(&m, "transfer id beyond 40 bits");
		m.xfer = UINT64_MAX;
		BAD(&m, "transfer id UINT64_MAX");
	}

	/* Piece sizes of an offer and of a copy held. */
	static const unsigned pieced[] = { PEER_COPY_OFFER, PEER_FETCH_HAVE };
	for (size_t i = 0; i < 2; i++) {
		peer_sample(&m, pieced[i]);
		m.piece_bytes = 0;
		BAD(&m, "pieces of 0 bytes");
		m.piece_bytes = 4095;
		BAD(&m, "pieces of 4095 bytes");
		m.piece_bytes = (1u << 30) + 1;
		BAD(&m, "pieces larger than 1 GiB");
		/* More pieces than the 24 bits of a tag number. */
		peer_sample(&m, pieced[i]);
		m.piece_bytes = 4096;
		m.shard_bytes = 4096ull * ((1u << PEER_TAG_PIECE_BITS) - 1) + 1;
		BAD(&m, "more pieces than a tag numbers");
		m.shard_bytes = UINT64_MAX;
		BAD(&m, "shard of UINT64_MAX bytes");
	}
	/* An offer is an offer whatever its status says: the receiver sizes
	 * its receives from it. */
	peer_sample(&m, PEER_COPY_OFFER);
	m.status = 0;
	m.piece_bytes = 0;
	BAD(&m, "COPY_OFFER with status 0 and pieces of 0 bytes");
}

static void test_encode_limits(void)
{
	uint8_t buf[PEER_MSG_MAX];
	struct peer_msg m;
	int n;

	peer_sample(&m, PEER_HELLO);
	m.addr_len = PEER_ADDR_MAX + 1;
	CHECK_EQ(peer_encode(&m, NULL, 0, buf, sizeof(buf)), -EINVAL);
	m.addr_len = UINT32_MAX;
	CHECK_EQ(peer_encode(&m, NULL, 0, buf, sizeof(buf)), -EINVAL);

	peer_sample(&m, PEER_HELLO);
	memset(m.cluster_id, 'c', sizeof(m.cluster_id)); /* no NUL */
	CHECK_EQ(peer_encode(&m, NULL, 0, buf, sizeof(buf)), -EINVAL);

	peer_sample(&m, PEER_VOTE);
	memset(m.job, 'j', sizeof(m.job));
	CHECK_EQ(peer_encode(&m, NULL, 0, buf, sizeof(buf)), -EINVAL);

	peer_sample(&m, PEER_ABORT);
	memset(m.reason, 'r', sizeof(m.reason));
	CHECK_EQ(peer_encode(&m, NULL, 0, buf, sizeof(buf)), -EINVAL);

	peer_sample(&m, PEER_VOTE);
	m.h.type = 0;
	CHECK_EQ(peer_encode(&m, NULL, 0, buf, sizeof(buf)), -EINVAL);
	m.h.type = PEER_TYPE_MAX;
	CHECK_EQ(peer_encode(&m, NULL, 0, buf, sizeof(buf)), -EINVAL);

	/* A buffer one byte short, at every size: -ENOSPC, never an overrun
	 * (buf is exactly cap bytes on the heap for the sanitizers). */
	peer_sample(&m, PEER_HELLO);
	n = peer_encode(&m, key, keylen, buf, sizeof(buf));
	CHECK(n > 0);
	for (int cap = 0; cap < n; cap++) {
		uint8_t *small = malloc(cap ? (size_t)cap : 1);
		if (!small)
			abort();
		CHECK_EQ(peer_encode(&m, key, keylen, small, (size_t)cap), -ENOSPC);
		free(small);
	}
	uint8_t *exact = malloc((size_t)n);
	if (!exact)
		abort();
	CHECK_EQ(peer_encode(&m, key, keylen, exact, (size_t)n), n);
	CHECK(memcmp(exact, buf, (size_t)n) == 0);
	free(exact);
}

static void test_names(void)
{
	/* Pinned: the cluster hash is on the wire, and a change would split
	 * groups of mixed versions. First 8 bytes of SHA-256("default"),
	 * little-endian. */
	CHECK(peer_cluster_hash("default") == 0x7d6819cec1eea837ull);
	CHECK(peer_cluster_hash("default") == peer_cluster_hash("default"));
	CHECK(peer_cluster_hash("default") != peer_cluster_hash("default2"));
	CHECK(peer_cluster_hash("default") != peer_cluster_hash("Default"));
	CHECK(peer_cluster_hash("") != peer_cluster_hash("default"));
	CHECK(peer_cluster_hash("a") != peer_cluster_hash("b"));

	CHECK(strcmp(peer_type_name(PEER_HELLO), "HELLO") == 0);
	CHECK(strcmp(peer_type_name(PEER_FETCH_DONE), "FETCH_DONE") == 0);
	CHECK(strcmp(peer_type_name(0), "unknown") == 0);
	CHECK(strcmp(peer_type_name(PEER_TYPE_MAX), "unknown") == 0);
	CHECK(strcmp(peer_type_name(UINT32_MAX), "unknown") == 0);
	for (unsigned t = 1; t < PEER_TYPE_MAX; t++)
		CHECK(peer_type_name(t) && strcmp(peer_type_name(t), "unknown") != 0);
}

/* Agreed restore: which step and status each AGREE_* type may carry. */
static void test_agree(void)
{
	struct peer_msg m;

	peer_sample(&m, PEER_AGREE_JOIN);
	m.step = CKPT_NO_STEP;
	GOOD(&m, "JOIN for the newest step");
	m.status = 0;
	GOOD(&m, "JOIN without flags");
	m.status = 2;
	BAD(&m, "JOIN with an unknown flag");
	m.status = -1;
	BAD(&m, "JOIN with a negative status");

	peer_sample(&m, PEER_AGREE_TRY);
	m.step = CKPT_NO_STEP;
	BAD(&m, "TRY without a step");
	peer_sample(&m, PEER_AGREE_TRY);
	m.status = -5;
	BAD(&m, "TRY with a status");

	peer_sample(&m, PEER_AGREE_REPORT);
	m.status = 0;
	GOOD(&m, "REPORT verified");
	m.status = 1;
	BAD(&m, "REPORT with a positive status");
	m.step = CKPT_NO_STEP;
	m.status = -5;
	BAD(&m, "REPORT without a step");

	peer_sample(&m, PEER_AGREE_DONE);
	m.step = CKPT_NO_STEP;
	GOOD(&m, "DONE of a failed round names no step");
	m.status = 0;
	BAD(&m, "DONE of a successful round without a step");
	m.step = 40;
	GOOD(&m, "DONE with the agreed step");
	m.status = 3;
	BAD(&m, "DONE with a positive status");
}

int main(void)
{
	test_names();
	test_round_trip();
	test_agree();
	test_keys();
	test_bit_flips();
	test_truncation();
	test_header();
	test_nodes();
	test_text();
	test_hello();
	test_ranges();
	test_encode_limits();
	return check_result("test-peerwire");
}
