/* SPDX-License-Identifier: MIT */
/*
 * The peer protocol between the ckptd daemons of a multi-node group: the
 * messages of proto/PROTOCOL.md ("Peer link"), their encoding and their
 * authentication. Pure code (no libfabric), so that the fuzzer and the
 * forging test tool use exactly what ckptd uses.
 *
 * A message is a 64-byte header, a payload, and a 16-byte tag: the first
 * 16 bytes of HMAC-SHA-256(key, header + payload), or zeros in a group
 * without a key. All integers are little-endian.
 */
#ifndef CKPTD_PEERWIRE_H
#define CKPTD_PEERWIRE_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

#define PEER_MAGIC 0x50504b43u  /* "CKPP" */
#define PEER_VERSION 1
#define PEER_HDR_BYTES 64
#define PEER_MAC_BYTES 16
#define PEER_MSG_MAX 4096       /* every control message fits */
#define PEER_ADDR_MAX 256
#define PEER_CLUSTER_MAX 64
#define PEER_KEY_MAX 64
#define PEER_WORLD_MAX (1u << 24)
#define PEER_INDEX_MAX (1ull << 30)

enum peer_type {
	PEER_HELLO = 1,       /* I am node K, epoch E, at address A */
	PEER_HELLO_ACK,       /* the same, in answer */
	PEER_HEARTBEAT,
	PEER_VOTE,            /* rank R of job J holds step N durably (to the leader) */
	PEER_COMMITTED,       /* the leader committed step N of job J (to all) */
	PEER_ABORT,           /* step N of job J can never commit (either way) */
	PEER_COPY_OFFER,      /* partner copy: I would send you rank R's shard of step N */
	PEER_COPY_ACCEPT,     /* ... receives posted (or refused, with a reason) */
	PEER_COPY_DONE,       /* ... every piece sent (or the send failed) */
	PEER_FETCH,           /* restore: send me rank R's shard of step N */
	PEER_FETCH_HAVE,      /* ... I hold it: sizes and digest (or I do not) */
	PEER_FETCH_GO,        /* ... receives posted: send */
	PEER_FETCH_DONE,      /* ... every piece sent (or the send failed) */
	PEER_AGREE_JOIN,      /* agreed restore: rank R of job J asks to restore (to the leader) */
	PEER_AGREE_TRY,       /* ... read and verify your shard of step N (from the leader) */
	PEER_AGREE_REPORT,    /* ... rank R's outcome for step N (to the leader) */
	PEER_AGREE_DONE,      /* ... the round's outcome for rank R (from the leader) */
	PEER_TYPE_MAX
};

struct peer_hdr {
	uint16_t type;
	uint32_t length;      /* whole message, header and tag included */
	uint32_t from_node, to_node, nodes;
	uint64_t from_epoch;  /* the sender's incarnation */
	uint64_t to_epoch;    /* the receiver's incarnation as the sender knows it; 0 in HELLO */
	uint64_t seq;         /* per sender, for logs */
	uint64_t cluster;     /* peer_cluster_hash(cluster_id) */
};

/* One body covers every type; each type uses the fields PROTOCOL.md lists. */
struct peer_msg {
	struct peer_hdr h;
	char job[CKPT_JOB_NAME_MAX + 1];
	uint64_t step;
	uint32_t world_size, rank;
	/* VOTE, COPY_OFFER, FETCH_HAVE */
	uint64_t shard_bytes, blob_bytes, index_bytes;
	uint32_t blob_crc32c;
	uint8_t index_sha256[32];
	/* transfers */
	uint64_t xfer;        /* transfer id: tags are xfer << 24 | piece */
	uint32_t piece_bytes; /* shard piece size (index is piece 0) */
	int32_t status;       /* 0 or a negative error; ACCEPT/HAVE: 1 yes, 0 no */
	/* ABORT, ACCEPT (refused), DONE (failed): why */
	char reason[CKPT_REASON_MAX + 1];
	/* HELLO, HELLO_ACK */
	uint8_t addr[PEER_ADDR_MAX];
	uint32_t addr_len;
	char cluster_id[PEER_CLUSTER_MAX + 1];
};

/* VOTE's status: a vote sent again after no outcome came for the step
 * within peer_timeout_ms; for a step it does not have open, the leader
 * answers with the outcome (COMMITTED, or ABORT) and opens nothing. */
#define PEER_VOTE_AGAIN 1

#define PEER_TAG_PIECE_BITS 24
#define PEER_XFER_MASK ((1ull << 40) - 1)

uint64_t peer_cluster_hash(const char *cluster_id);

/*
 * Encode m (m->h.length is set here) into buf and append the tag under
 * key (keylen 0: zeros). Returns the length or a negative errno.
 */
int peer_encode(const struct peer_msg *m, const uint8_t *key, size_t keylen,
		uint8_t *buf, size_t cap);

/*
 * Decode and authenticate. Checks the magic, version, length, type, the
 * tag, and every field's range (names, lengths, counts). Returns 0, or a
 * negative errno with a reason in err: -EBADMSG malformed, -EPERM bad tag.
 */
int peer_decode(const uint8_t *buf, size_t len, const uint8_t *key, size_t keylen,
		struct peer_msg *m, char *err, size_t errlen);

const char *peer_type_name(unsigned type);

#endif
