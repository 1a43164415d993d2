/* SPDX-License-Identifier: MIT */
/*
 * Peer message codec (peerwire.h). Every type has the same body layout, so
 * there is one encoder and one validating decoder to fuzz:
 *
 *   u16 job_len, job      u64 step           u32 world_size   u32 rank
 *   u64 shard_bytes       u64 blob_bytes     u64 index_bytes  u32 blob_crc32c
 *   u8[32] index_sha256   u64 xfer           u32 piece_bytes  i32 status
 *   u16 reason_len, reason  u16 addr_len, addr  u16 cluster_len, cluster_id
 *
 * followed by the 16-byte tag. Which fields a type uses is in PROTOCOL.md;
 * the others are zero and must be.
 */
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "peerwire.h"

static const char *const type_names[PEER_TYPE_MAX] = {
	[PEER_HELLO] = "HELLO",           [PEER_HELLO_ACK] = "HELLO_ACK",
	[PEER_HEARTBEAT] = "HEARTBEAT",   [PEER_VOTE] = "VOTE",
	[PEER_COMMITTED] = "COMMITTED",   [PEER_ABORT] = "ABORT",
	[PEER_COPY_OFFER] = "COPY_OFFER", [PEER_COPY_ACCEPT] = "COPY_ACCEPT",
	[PEER_COPY_DONE] = "COPY_DONE",   [PEER_FETCH] = "FETCH",
	[PEER_FETCH_HAVE] = "FETCH_HAVE", [PEER_FETCH_GO] = "FETCH_GO",
	[PEER_FETCH_DONE] = "FETCH_DONE",
	[PEER_AGREE_JOIN] = "AGREE_JOIN", [PEER_AGREE_TRY] = "AGREE_TRY",
	[PEER_AGREE_REPORT] = "AGREE_REPORT", [PEER_AGREE_DONE] = "AGREE_DONE",
};

const char *peer_type_name(unsigned type)
{
	return type > 0 && type < PEER_TYPE_MAX ? type_names[type] : "unknown";
}

uint64_t peer_cluster_hash(const char *cluster_id)
{
	unsigned char md[32];
	unsigned int mdlen = 0;
	uint64_t h = 0;

	if (!EVP_Digest(cluster_id, strlen(cluster_id), md, &mdlen, EVP_sha256(), NULL))
		return 0;
	for (int i = 0; i < 8; i++)
		h |= (uint64_t)md[i] << (8 * i);
	return h;
}

/* ---- writer ------------------------------------------------------------ */

struct wbuf {
	uint8_t *p;
	size_t len, cap;
	bool overflow;
};

static void put(struct wbuf *w, const void *src, size_t n)
{
	if (w->overflow || w->cap - w->len < n) {
		w->overflow = true;
		return;
	}
	memcpy(w->p + w->len, src, n);
	w->len += n;
}

static void put_u16(struct wbuf *w, uint16_t v)
{
	uint8_t b[2] = { (uint8_t)v, (uint8_t)(v >> 8) };
	put(w, b, 2);
}

static void put_u32(struct wbuf *w, uint32_t v)
{
	uint8_t b[4];
	for (int i = 0; i < 4; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	put(w, b, 4);
}

static void put_u64(struct wbuf *w, uint64_t v)
{
	uint8_t b[8];
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	put(w, b, 8);
}

static void put_str(struct wbuf *w, const void *s, size_t n)
{
	put_u16(w, (uint16_t)n);
	put(w, s, n);
}

static int mac(const uint8_t *key, size_t keylen, const uint8_t *msg, size_t len,
	       uint8_t out[PEER_MAC_BYTES])
{
	unsigned char md[32];
	unsigned int mdlen = 0;

	if (keylen == 0) {
		memset(out, 0, PEER_MAC_BYTES);
		return 0;
	}
	if (!HMAC(EVP_sha256(), key, (int)keylen, msg, len, md, &mdlen) || mdlen < PEER_MAC_BYTES)
		return -EIO;
	memcpy(out, md, PEER_MAC_BYTES);
	return 0;
}

int peer_encode(const struct peer_msg *m, const uint8_t *key, size_t keylen,
		uint8_t *buf, size_t cap)
{
	struct wbuf w = { .p = buf, .cap = cap };
	size_t job_len = strnlen(m->job, sizeof(m->job));
	size_t reason_len = strnlen(m->reason, sizeof(m->reason));
	size_t cid_len = strnlen(m->cluster_id, sizeof(m->cluster_id));

	if (m->h.type == 0 || m->h.type >= PEER_TYPE_MAX || m->addr_len > PEER_ADDR_MAX ||
	    job_len > CKPT_JOB_NAME_MAX || reason_len > CKPT_REASON_MAX ||
	    cid_len > PEER_CLUSTER_MAX || keylen > PEER_KEY_MAX)
		return -EINVAL;
	put_u32(&w, PEER_MAGIC);
	put_u16(&w, PEER_VERSION);
	put_u16(&w, m->h.type);
	put_u32(&w, 0); /* length, below */
	put_u32(&w, m->h.from_node);
	put_u32(&w, m->h.to_node);
	put_u32(&w, m->h.nodes);
	put_u64(&w, m->h.from_epoch);
	put_u64(&w, m->h.to_epoch);
	put_u64(&w, m->h.seq);
	put_u64(&w, m->h.cluster);
	put_u64(&w, 0); /* reserved */
	put_str(&w, m->job, job_len);
	put_u64(&w, m->step);
	put_u32(&w, m->world_size);
	put_u32(&w, m->rank);
	put_u64(&w, m->shard_bytes);
	put_u64(&w, m->blob_bytes);
	put_u64(&w, m->index_bytes);
	put_u32(&w, m->blob_crc32c);
	put(&w, m->index_sha256, 32);
	put_u64(&w, m->xfer);
	put_u32(&w, m->piece_bytes);
	put_u32(&w, (uint32_t)m->status);
	put_str(&w, m->reason, reason_len);
	put_str(&w, m->addr, m->addr_len);
	put_str(&w, m->cluster_id, cid_len);
	if (w.overflow || w.cap - w.len < PEER_MAC_BYTES)
		return -ENOSPC;
	uint32_t total = (uint32_t)(w.len + PEER_MAC_BYTES);
	for (int i = 0; i < 4; i++)
		buf[8 + i] = (uint8_t)(total >> (8 * i));
	if (mac(key, keylen, buf, w.len, buf + w.len) < 0)
		return -EIO;
	return (int)total;
}

/* ---- reader ------------------------------------------------------------ */

struct rbuf {
	const uint8_t *p;
	size_t len, off;
	bool short_read;
};

static const uint8_t *get(struct rbuf *r, size_t n)
{
	if (r->short_read || r->len - r->off < n) {
		r->short_read = true;
		return NULL;
	}
	const uint8_t *p = r->p + r->off;
	r->off += n;
	return p;
}

static uint64_t get_le(struct rbuf *r, size_t n)
{
	const uint8_t *p = get(r, n);
	uint64_t v = 0;

	if (!p)
		return 0;
	for (size_t i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* A length-prefixed string of at most max bytes into out (NUL-terminated
 * when text). */
static int get_str(struct rbuf *r, void *out, size_t max, bool text, uint32_t *len_out)
{
	size_t n = (size_t)get_le(r, 2);
	const uint8_t *p;

	if (r->short_read || n > max)
		return -1;
	p = get(r, n);
	if (!p)
		return -1;
	if (text && memchr(p, 0, n))
		return -1;
	memcpy(out, p, n);
	if (text)
		((char *)out)[n] = '\0';
	if (len_out)
		*len_out = (uint32_t)n;
	return 0;
}

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

static bool printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

int peer_decode(const uint8_t *buf, size_t len, const uint8_t *key, size_t keylen,
		struct peer_msg *m, char *err, size_t errlen)
{
	struct rbuf r = { .p = buf, .len = len };
	uint8_t tag[PEER_MAC_BYTES];

	memset(m, 0, sizeof(*m));
	if (len < PEER_HDR_BYTES + PEER_MAC_BYTES || len > PEER_MSG_MAX)
		return fail(err, errlen, -EBADMSG, "message of %zu bytes", len);
	if (get_le(&r, 4) != PEER_MAGIC)
		return fail(err, errlen, -EBADMSG, "not a ckpt peer message (bad magic)");
	unsigned version = (unsigned)get_le(&r, 2);
	if (version != PEER_VERSION)
		return fail(err, errlen, -EBADMSG, "peer protocol version %u (this ckptd speaks %u)",
			    version, PEER_VERSION);
	m->h.type = (uint16_t)get_le(&r, 2);
	m->h.length = (uint32_t)get_le(&r, 4);
	if (m->h.length != len)
		return fail(err, errlen, -EBADMSG, "length field %u, message of %zu bytes",
			    m->h.length, len);
	/* Authenticate before looking further: a forged message gets no
	 * more parsing than it takes to reject it. */
	if (mac(key, keylen, buf, len - PEER_MAC_BYTES, tag) < 0)
		return fail(err, errlen, -EIO, "computing the message tag");
	if (CRYPTO_memcmp(tag, buf + len - PEER_MAC_BYTES, PEER_MAC_BYTES) != 0)
		return fail(err, errlen, -EPERM, "%s",
			    keylen ? "authentication failed (another key, or altered)"
				   : "message is authenticated, this group has no key");
	if (m->h.type == 0 || m->h.type >= PEER_TYPE_MAX)
		return fail(err, errlen, -EBADMSG, "unknown message type %u", m->h.type);
	m->h.from_node = (uint32_t)get_le(&r, 4);
	m->h.to_node = (uint32_t)get_le(&r, 4);
	m->h.nodes = (uint32_t)get_le(&r, 4);
	m->h.from_epoch = get_le(&r, 8);
	m->h.to_epoch = get_le(&r, 8);
	m->h.seq = get_le(&r, 8);
	m->h.cluster = get_le(&r, 8);
	if (get_le(&r, 8) != 0)
		return fail(err, errlen, -EBADMSG, "reserved header bytes are not zero");
	if (get_str(&r, m->job, CKPT_JOB_NAME_MAX, true, NULL) < 0)
		return fail(err, errlen, -EBADMSG, "bad job name field");
	m->step = get_le(&r, 8);
	m->world_size = (uint32_t)get_le(&r, 4);
	m->rank = (uint32_t)get_le(&r, 4);
	m->shard_bytes = get_le(&r, 8);
	m->blob_bytes = get_le(&r, 8);
	m->index_bytes = get_le(&r, 8);
	m->blob_crc32c = (uint32_t)get_le(&r, 4);
	const uint8_t *sha = get(&r, 32);
	if (sha)
		memcpy(m->index_sha256, sha, 32);
	m->xfer = get_le(&r, 8);
	m->piece_bytes = (uint32_t)get_le(&r, 4);
	m->status = (int32_t)(uint32_t)get_le(&r, 4);
	if (get_str(&r, m->reason, CKPT_REASON_MAX, true, NULL) < 0)
		return fail(err, errlen, -EBADMSG, "bad reason field");
	if (get_str(&r, m->addr, PEER_ADDR_MAX, false, &m->addr_len) < 0)
		return fail(err, errlen, -EBADMSG, "bad address field");
	if (get_str(&r, m->cluster_id, PEER_CLUSTER_MAX, true, NULL) < 0)
		return fail(err, errlen, -EBADMSG, "bad cluster id field");
	if (r.short_read || r.off != len - PEER_MAC_BYTES)
		return fail(err, errlen, -EBADMSG, "body of the wrong length for %s",
			    peer_type_name(m->h.type));
	if (m->h.nodes < 2 || m->h.nodes > 65535 || m->h.from_node >= m->h.nodes ||
	    m->h.to_node >= m->h.nodes || m->h.from_node == m->h.to_node)
		return fail(err, errlen, -EBADMSG, "node %u to node %u among %u nodes",
			    m->h.from_node, m->h.to_node, m->h.nodes);
	if (m->h.from_epoch == 0)
		return fail(err, errlen, -EBADMSG, "sender epoch 0");
	if (!printable(m->reason) || !printable(m->cluster_id))
		return fail(err, errlen, -EBADMSG, "control characters in a text field");

	bool hello = m->h.type == PEER_HELLO || m->h.type == PEER_HELLO_ACK;
	bool has_job = m->h.type >= PEER_VOTE;
	if (hello) {
		if (m->addr_len == 0 || !m->cluster_id[0])
			return fail(err, errlen, -EBADMSG, "%s without an address or cluster id",
				    peer_type_name(m->h.type));
	} else if (m->addr_len || m->cluster_id[0]) {
		return fail(err, errlen, -EBADMSG, "%s with an address", peer_type_name(m->h.type));
	}
	if (m->h.type != PEER_HELLO && m->h.to_epoch == 0 && m->h.type != PEER_HELLO_ACK)
		return fail(err, errlen, -EBADMSG, "%s to an unknown epoch", peer_type_name(m->h.type));
	if (has_job) {
		if (ckpt_job_name_check(m->job, strlen(m->job)) < 0)
			return fail(err, errlen, -EBADMSG, "invalid job name");
		if (m->world_size == 0 && m->h.type != PEER_FETCH && m->h.type != PEER_ABORT &&
		    m->h.type != PEER_FETCH_HAVE && m->h.type != PEER_FETCH_GO &&
		    m->h.type != PEER_FETCH_DONE && m->h.type != PEER_COPY_ACCEPT &&
		    m->h.type != PEER_COPY_DONE)
			return fail(err, errlen, -EBADMSG, "%s of a world of 0 ranks",
				    peer_type_name(m->h.type));
		if (m->world_size > PEER_WORLD_MAX ||
		    (m->world_size && m->rank >= m->world_size))
			return fail(err, errlen, -EBADMSG, "rank %u of a world of %u", m->rank,
				    m->world_size);
		/* A JOIN may ask for the newest step, a failed round's DONE
		 * names none. */
		if (m->step == CKPT_NO_STEP && m->h.type != PEER_AGREE_JOIN &&
		    !(m->h.type == PEER_AGREE_DONE && m->status < 0))
			return fail(err, errlen, -EBADMSG, "%s without a step", peer_type_name(m->h.type));
		if (m->step > CKPT_STEP_MAX && m->step != CKPT_NO_STEP)
			return fail(err, errlen, -EBADMSG, "%s of step %llu: step numbers are 0..%llu",
				    peer_type_name(m->h.type), (unsigned long long)m->step,
				    CKPT_STEP_MAX);
	} else if (m->job[0]) {
		return fail(err, errlen, -EBADMSG, "%s with a job", peer_type_name(m->h.type));
	}
	if (m->h.type == PEER_VOTE || m->h.type == PEER_COPY_OFFER ||
	    (m->h.type == PEER_FETCH_HAVE && m->status == 1)) {
		if (m->index_bytes == 0 || m->index_bytes > PEER_INDEX_MAX)
			return fail(err, errlen, -EBADMSG, "index of %llu bytes",
				    (unsigned long long)m->index_bytes);
		if (m->blob_bytes > m->shard_bytes)
			return fail(err, errlen, -EBADMSG, "blob larger than its shard");
	}
	/* An offer sets up a transfer whatever its status says (the receiver
	 * does not look at it), as does a FETCH_HAVE that holds the copy. */
	if (m->h.type == PEER_COPY_OFFER || (m->h.type == PEER_FETCH_HAVE && m->status == 1)) {
		if (m->piece_bytes < 4096 || m->piece_bytes > (1u << 30))
			return fail(err, errlen, -EBADMSG, "piece size %u", m->piece_bytes);
		/* Pieces 1.. are numbered in the tag's low bits; this also
		 * keeps shard + index bytes far from overflowing. */
		if (m->shard_bytes > ((1ull << PEER_TAG_PIECE_BITS) - 1) * m->piece_bytes)
			return fail(err, errlen, -EBADMSG,
				    "a %llu-byte shard in %u-byte pieces: more pieces than a tag "
				    "numbers", (unsigned long long)m->shard_bytes, m->piece_bytes);
	}
	if (m->h.type >= PEER_COPY_OFFER && (m->xfer == 0 || m->xfer > PEER_XFER_MASK))
		return fail(err, errlen, -EBADMSG, "transfer id out of range");
	/* JOIN: status is the request's flags (EXACT only); a REPORT or
	 * DONE is 0 or an error; TRY says nothing in it. */
	if ((m->h.type == PEER_AGREE_JOIN && (m->status & ~(int32_t)CKPT_RESTORE_F_EXACT) != 0) ||
	    ((m->h.type == PEER_AGREE_REPORT || m->h.type == PEER_AGREE_DONE) && m->status > 0) ||
	    (m->h.type == PEER_AGREE_TRY && m->status != 0))
		return fail(err, errlen, -EBADMSG, "%s with status %d", peer_type_name(m->h.type),
			    m->status);
	return 0;
}
