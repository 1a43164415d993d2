/* SPDX-License-Identifier: MIT */
/*
 * Valid peer messages of every type (peerwire.h) and the key the peer
 * fuzzer decodes with: shared by test-peerwire, fuzz-peer and the
 * generator of its seed corpus (gen-peer-corpus).
 */
#ifndef CKPT_TEST_PEER_SAMPLE_H
#define CKPT_TEST_PEER_SAMPLE_H

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "peerwire.h"

/* Every field of two messages equal (padding aside), the header's length
 * field apart: a message to encode does not carry one yet. */
static inline bool peer_msg_equal(const struct peer_msg *a, const struct peer_msg *b)
{
	return a->h.type == b->h.type && a->h.from_node == b->h.from_node &&
	       a->h.to_node == b->h.to_node && a->h.nodes == b->h.nodes &&
	       a->h.from_epoch == b->h.from_epoch && a->h.to_epoch == b->h.to_epoch &&
	       a->h.seq == b->h.seq && a->h.cluster == b->h.cluster &&
	       strcmp(a->job, b->job) == 0 && a->step == b->step &&
	       a->world_size == b->world_size && a->rank == b->rank &&
	       a->shard_bytes == b->shard_bytes && a->blob_bytes == b->blob_bytes &&
	       a->index_bytes == b->index_bytes && a->blob_crc32c == b->blob_crc32c &&
	       memcmp(a->index_sha256, b->index_sha256, 32) == 0 && a->xfer == b->xfer &&
	       a->piece_bytes == b->piece_bytes && a->status == b->status &&
	       strcmp(a->reason, b->reason) == 0 && a->addr_len == b->addr_len &&
	       memcmp(a->addr, b->addr, a->addr_len) == 0 &&
	       strcmp(a->cluster_id, b->cluster_id) == 0;
}

/* The group key of the fuzzer and of the keyed seeds. */
static const uint8_t peer_sample_key[32] = {
	0x6b, 0x65, 0x79, 0x2d, 0x6f, 0x66, 0x2d, 0x74, 0x68, 0x65, 0x2d, 0x66,
	0x75, 0x7a, 0x7a, 0x65, 0x72, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06,
	0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e,
};

/* A message of the given type from node 1 to node 0 of 3, with every field
 * its type uses set to something other than zero (what ckptd sends). */
static inline void peer_sample(struct peer_msg *m, enum peer_type type)
{
	static const uint8_t addr[] = { 0x02, 0x00, 0x1f, 0x90, 0x7f, 0x00, 0x00, 0x01,
					0x00, 0xff, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00 };

	memset(m, 0, sizeof(*m));
	m->h.type = (uint16_t)type;
	m->h.from_node = 1;
	m->h.to_node = 0;
	m->h.nodes = 3;
	m->h.from_epoch = 0x1122334455667788ull;
	m->h.to_epoch = type == PEER_HELLO ? 0 : 0x8877665544332211ull;
	m->h.seq = 1000 + type;
	m->h.cluster = peer_cluster_hash("default");
	switch (type) {
	case PEER_HELLO:
	case PEER_HELLO_ACK:
		memcpy(m->addr, addr, sizeof(addr));
		m->addr_len = sizeof(addr);
		strcpy(m->cluster_id, "default");
		return;
	case PEER_HEARTBEAT:
		return;
	default:
		break;
	}
	strcpy(m->job, "llama-7b");
	m->step = 4200;
	m->world_size = 8;
	m->rank = 5;
	switch (type) {
	case PEER_VOTE:
	case PEER_COPY_OFFER:
	case PEER_FETCH_HAVE:
		m->shard_bytes = 3ull << 30;
		m->blob_bytes = 1000;
		m->index_bytes = 4096 + 72;
		m->blob_crc32c = 0xdeadbeef;
		for (int i = 0; i < 32; i++)
			m->index_sha256[i] = (uint8_t)(0xa0 + i);
		break;
	case PEER_ABORT:
		m->status = -EIO;
		strcpy(m->reason, "rank 3 on node 1: write failed: Input/output error");
		break;
	case PEER_COPY_ACCEPT:
		m->status = 1;
		break;
	case PEER_COPY_DONE:
	case PEER_FETCH_DONE:
		m->status = -ENOTCONN;
		strcpy(m->reason, "node 0 unreachable");
		break;
	case PEER_AGREE_JOIN:
		m->status = 1; /* RESTORE flags: EXACT */
		break;
	case PEER_AGREE_REPORT:
	case PEER_AGREE_DONE:
		m->status = -EIO;
		strcpy(m->reason, "reading step-0000004200/rank-000005.shard: Input/output error");
		break;
	default:
		break;
	}
	if (type >= PEER_COPY_OFFER)
		m->xfer = 0x123456789aull;
	if (type == PEER_COPY_OFFER || type == PEER_FETCH_HAVE) {
		m->piece_bytes = 1u << 20;
		m->status = 1;
	}
}

#endif
