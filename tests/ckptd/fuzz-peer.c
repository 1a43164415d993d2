/* SPDX-License-Identifier: MIT */
/*
 * Fuzz peer_decode (ckptd/peerwire.c), the first code to read what another
 * node sends. The input is decoded as it is under a fixed key and without
 * one, and again with its length field and tag made right for each (so
 * that mutations reach the body checks, not just the tag). Whatever
 * decodes must
 *   - hold what ckptd's peer link relies on without checking again
 *     (node indexes, names, sizes that pieces_of() divides by and adds),
 *   - re-encode to the very same bytes (the encoding is canonical), and
 *   - decode from those to the same fields.
 * The seed corpus (corpus/peer/, from gen-peer-corpus) is replayed by meson
 * test with any compiler.
 */
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "peer-sample.h"
#include "peerwire.h"

/* Field by field (padding aside), the length included. */
static bool msg_equal(const struct peer_msg *a, const struct peer_msg *b)
{
	return a->h.length == b->h.length && peer_msg_equal(a, b);
}

static bool text_ok(const char *s, size_t size, size_t max)
{
	size_t n = strnlen(s, size);

	if (n == size || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

/* What peer.c takes for granted in a message that decoded. */
static void check_invariants(const struct peer_msg *m)
{
	unsigned t = m->h.type;

	FUZZ_ASSERT(t > 0 && t < PEER_TYPE_MAX);
	FUZZ_ASSERT(m->h.nodes >= 2 && m->h.nodes <= 65535);
	FUZZ_ASSERT(m->h.from_node < m->h.nodes && m->h.to_node < m->h.nodes);
	FUZZ_ASSERT(m->h.from_node != m->h.to_node && m->h.from_epoch != 0);
	FUZZ_ASSERT(m->h.to_epoch != 0 || t == PEER_HELLO || t == PEER_HELLO_ACK);
	FUZZ_ASSERT(text_ok(m->reason, sizeof(m->reason), CKPT_REASON_MAX));
	FUZZ_ASSERT(text_ok(m->cluster_id, sizeof(m->cluster_id), PEER_CLUSTER_MAX));
	FUZZ_ASSERT(strnlen(m->job, sizeof(m->job)) <= CKPT_JOB_NAME_MAX);
	FUZZ_ASSERT(m->addr_len <= PEER_ADDR_MAX);
	if (t == PEER_HELLO || t == PEER_HELLO_ACK)
		FUZZ_ASSERT(m->addr_len > 0 && m->cluster_id[0]);
	else
		FUZZ_ASSERT(m->addr_len == 0 && !m->cluster_id[0]);
	if (t >= PEER_VOTE) {
		FUZZ_ASSERT(ckpt_job_name_check(m->job, strlen(m->job)) == 0);
		FUZZ_ASSERT(m->world_size <= PEER_WORLD_MAX);
		FUZZ_ASSERT(m->world_size == 0 || m->rank < m->world_size);
	} else {
		FUZZ_ASSERT(!m->job[0]);
	}
	if (t == PEER_VOTE || t == PEER_COMMITTED || t == PEER_COPY_OFFER)
		FUZZ_ASSERT(m->world_size > 0);
	if (t >= PEER_COPY_OFFER)
		FUZZ_ASSERT(m->xfer != 0 && m->xfer <= PEER_XFER_MASK);
	if (t == PEER_VOTE)
		FUZZ_ASSERT(m->index_bytes > 0 && m->index_bytes <= PEER_INDEX_MAX &&
			    m->blob_bytes <= m->shard_bytes);
	/* A COPY_OFFER (whatever its status: on_copy_offer does not look
	 * at it) and a FETCH_HAVE that holds the copy set up a transfer:
	 * index + shard bytes are allocated, the shard is cut into
	 * piece_bytes pieces, each piece numbered in the 24 bits of a tag. */
	if (t == PEER_COPY_OFFER || (t == PEER_FETCH_HAVE && m->status == 1)) {
		FUZZ_ASSERT(m->index_bytes > 0 && m->index_bytes <= PEER_INDEX_MAX);
		FUZZ_ASSERT(m->blob_bytes <= m->shard_bytes);
		FUZZ_ASSERT(m->piece_bytes >= 4096 && m->piece_bytes <= (1u << 30));
		FUZZ_ASSERT(m->shard_bytes <= UINT64_MAX - m->index_bytes);
		FUZZ_ASSERT(m->shard_bytes <= UINT64_MAX - m->piece_bytes);
		uint64_t pieces = 1 + (m->shard_bytes + m->piece_bytes - 1) / m->piece_bytes;
		FUZZ_ASSERT(pieces - 1 < (1ull << PEER_TAG_PIECE_BITS));
	}
}

static void one(const uint8_t *data, size_t size, const uint8_t *key, size_t keylen)
{
	uint8_t out[PEER_MSG_MAX];
	struct peer_msg m, again;
	char err[256];
	int n;

	if (peer_decode(data, size, key, keylen, &m, err, sizeof(err)) < 0) {
		FUZZ_ASSERT(strnlen(err, sizeof(err)) < sizeof(err));
		return;
	}
	check_invariants(&m);
	FUZZ_ASSERT(m.h.length == size);
	(void)peer_type_name(m.h.type);
	n = peer_encode(&m, key, keylen, out, sizeof(out));
	FUZZ_ASSERT(n >= 0 && (size_t)n == size);
	FUZZ_ASSERT(memcmp(out, data, size) == 0);
	FUZZ_ASSERT(peer_decode(out, (size_t)n, key, keylen, &again, NULL, 0) == 0);
	FUZZ_ASSERT(msg_equal(&m, &again));
}

/* A copy of the input with the length field and the tag as they should be. */
static void resealed(const uint8_t *data, size_t size, const uint8_t *key, size_t keylen)
{
	unsigned char md[32];
	unsigned int mdlen = 0;
	uint8_t *buf;

	if (size < PEER_HDR_BYTES + PEER_MAC_BYTES || size > PEER_MSG_MAX)
		return;
	buf = malloc(size);
	if (!buf)
		return;
	memcpy(buf, data, size);
	for (int i = 0; i < 4; i++)
		buf[8 + i] = (uint8_t)(size >> (8 * i));
	if (keylen == 0) {
		memset(buf + size - PEER_MAC_BYTES, 0, PEER_MAC_BYTES);
	} else if (HMAC(EVP_sha256(), key, (int)keylen, buf, size - PEER_MAC_BYTES, md, &mdlen)) {
		memcpy(buf + size - PEER_MAC_BYTES, md, PEER_MAC_BYTES);
	} else {
		free(buf);
		return;
	}
	one(buf, size, key, keylen);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	one(data, size, peer_sample_key, sizeof(peer_sample_key));
	one(data, size, NULL, 0);
	resealed(data, size, peer_sample_key, sizeof(peer_sample_key));
	resealed(data, size, NULL, 0);
	return 0;
}
