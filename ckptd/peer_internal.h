/* SPDX-License-Identifier: MIT */
/*
 * What the three files of the peer link share: peer.c (membership, control
 * and commit messages, life cycle), fabric.c (the libfabric transport and
 * transfers) and partner.c (partner memory, copies and fetches). Nothing
 * else includes it: the rest of the daemon uses peer.h.
 *
 * Everything here belongs to the event-loop thread, except the fetch queue
 * and the requests on it, and `stopping` as peer_fetch() reads it: those
 * under fetch_lock.
 */
#ifndef CKPTD_PEER_INTERNAL_H
#define CKPTD_PEER_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <rdma/fabric.h>

#include "ckptd.h"
#include "peerwire.h"

#define CTRL_RECVS 64
#define PIECE_BYTES (1u << 20)
#define SEND_WINDOW 8
#define RECV_WINDOW 32
#define HOLDER_MAX 16

struct node {
	bool have_addr, up;
	fi_addr_t fa;
	uint8_t addr[PEER_ADDR_MAX];
	size_t addr_len;
	uint64_t epoch;          /* its incarnation, 0 unknown */
	uint64_t file_epoch;     /* epoch of the rendezvous file last read */
	bool rdv_reading;        /* its rendezvous file is being read on a worker */
	int64_t last_heard_ns;
	/* Control messages the provider had no room for yet, in order. Per
	 * node: a peer that does not take messages must not hold up others. */
	struct op *pending_head, *pending_tail;
	unsigned pending;
};

#define PENDING_MAX 256
#define RECENT_COMMITS 64
#define SPARE_BUFFERS 4
#define STOP_GRACE_S 5

enum op_kind { OP_CTRL_RECV, OP_CTRL_SEND, OP_PIECE_SEND, OP_PIECE_RECV };

struct xfer;

struct op {
	struct fi_context2 fctx; /* first: the provider's context */
	enum op_kind kind;
	struct op *next;         /* pending (sends waiting for room) */
	struct xfer *x;
	uint8_t *buf;
	size_t len;
	uint32_t node;
	uint64_t tag;
	struct fid_mr *mr;
	bool posted;
	struct op *xprev, *xnext; /* the transfer's posted pieces */
};

/* Partner memory: one rank's shard of one step, as node `from` sent it. */
struct pentry {
	struct pentry *next;
	char job[CKPT_JOB_NAME_MAX + 1];
	uint64_t step;
	uint32_t rank, world_size, from;
	uint64_t shard_bytes, index_bytes;
	uint8_t sha[32];
	uint8_t *mem;            /* index, then shard */
	uint64_t mem_len;        /* mapped */
	bool complete, committed, dropped;
	unsigned users;          /* transfers reading or writing mem */
};

/* A slot held for partner copies (one per target). */
struct hold {
	struct client *c;
	uint32_t slot;
	uint64_t step;
	unsigned refs;
	void *index;
};

struct fetch_req {
	struct fetch_req *next;
	pthread_cond_t cv;
	bool done;
	int result;
	char err[CKPT_REASON_MAX + 1];
	char job[CKPT_JOB_NAME_MAX + 1];
	uint64_t step;
	uint32_t rank;
	uint8_t *dst;
	uint64_t cap;
	void *index;
	uint64_t index_bytes, shard_bytes;
	unsigned tried;          /* partners asked so far */
};

enum xfer_kind { X_COPY_OUT, X_COPY_IN, X_SERVE, X_FETCH };

struct xfer {
	struct xfer *next;
	enum xfer_kind kind;
	uint64_t id;
	uint32_t node;
	char job[CKPT_JOB_NAME_MAX + 1];
	uint64_t step;
	uint32_t rank, world_size;
	uint64_t shard_bytes, index_bytes;
	uint8_t sha[32];
	uint32_t piece_bytes;
	const uint8_t *src_index, *src_shard; /* send side */
	uint8_t *dst_index, *dst_shard;       /* receive side */
	uint64_t npieces, next_piece, done_pieces;
	unsigned outstanding;
	bool started, remote_done, finished, cancelled;
	bool allocating;         /* X_COPY_IN: its memory is being mapped on a worker */
	int status, remote_status;
	char reason[CKPT_REASON_MAX + 1];
	int64_t deadline_ns, started_ns;
	struct fid_mr *mr_index, *mr_shard;
	struct hold *hold;       /* X_COPY_OUT */
	struct pentry *pe;       /* X_COPY_IN, X_SERVE */
	struct fetch_req *req;   /* X_FETCH */
	struct op *ops;          /* pieces posted and not completed */
};

struct peerlink {
	struct daemon *d;
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	int cq_fd, timer_fd, wake_fd;
	bool mr_local;
	size_t max_msg;
	uint32_t me, n;
	uint64_t epoch, cluster, seq, next_xfer;
	uint8_t key[PEER_KEY_MAX];
	size_t keylen;
	uint8_t myaddr[PEER_ADDR_MAX];
	size_t myaddr_len;
	struct node *nodes;
	struct op ctrl[CTRL_RECVS];
	uint8_t *ctrl_bufs;
	struct fid_mr *ctrl_mr;
	unsigned pending;        /* over all nodes */
	struct xfer *xfers;
	struct pentry *store;
	uint64_t store_bytes;
	/* Steps committed lately, as the leader said: a partner copy that
	 * completes after the commit (its job may be gone from this daemon
	 * by then) still becomes the newest. */
	struct {
		char job[CKPT_JOB_NAME_MAX + 1];
		uint64_t step;
	} recent[RECENT_COMMITS];
	unsigned recent_next;
	/* Buffers of dropped copies, kept for the next ones (the next step's
	 * copy of a rank is usually the same size): faulting fresh memory in
	 * costs more than receiving into it. Counted in store_bytes. */
	struct {
		uint8_t *mem;
		uint64_t len;
	} spare[SPARE_BUFFERS];
	struct fetch_req *fetch_q; /* under fetch_lock */
	char rdv[PATH_MAX];
	bool explicit_peers, stopping, duplicate_logged;
	int64_t stop_ns;         /* when peer_stop() was called */
	int64_t reject_log_ns;
	unsigned reject_quiet;
};

extern pthread_mutex_t fetch_lock;

/* rendezvous.c: addresses, the rendezvous directory, the group's key. */
int peer_node_set_addr(struct peerlink *pl, uint32_t k, const uint8_t *addr, size_t len);
int rdv_mkdir_p(const char *path, mode_t mode);
int rdv_publish(struct peerlink *pl);
bool rdv_own_file_is_ours(const struct peerlink *pl);
/* Read node k's rendezvous file on a worker; the result is handled on the loop. */
void rdv_read_start(struct peerlink *pl, uint32_t k);
int peer_load_key(struct peerlink *pl);
int peer_entry(const char *list, uint32_t k, char *host, size_t hcap, char *port,
	       size_t pcap);

/* peer.c: control messages. */
int64_t peer_timeout_ns(const struct peerlink *pl);
void peer_reject(struct peerlink *pl, const char *reason, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int peer_op_post(struct peerlink *pl, struct op *op);
int peer_send_msg(struct peerlink *pl, uint32_t node, struct peer_msg *m);
void peer_msg_init(struct peer_msg *m, enum peer_type type);
void peer_msg_job(struct peer_msg *m, const char *job, uint64_t step);
/* A rank's shard as a vote describes it: sizes, blob CRC, index digest. */
void peer_msg_shard(struct peer_msg *m, const struct rank_vote *v);
/* HELLO (or its answer, `ack`) to node. */
void peer_send_hello(struct peerlink *pl, uint32_t node, bool ack);

/* fabric.c: registration, fabric setup, transfers. */
void *mr_desc(struct peerlink *pl, const void *buf, size_t len, uint64_t access,
	      struct fid_mr **mr);
void mr_close(struct fid_mr **mr);
int fabric_open(struct peerlink *pl);
uint64_t xfer_new_id(struct peerlink *pl);
struct xfer *xfer_new(struct peerlink *pl, enum xfer_kind kind, uint32_t node,
		      const char *job, uint64_t step, uint32_t rank);
struct xfer *xfer_find(struct peerlink *pl, enum xfer_kind kind, uint32_t node,
		       uint64_t id);
uint64_t pieces_of(uint64_t shard_bytes, uint32_t piece_bytes);
void xfer_fail(struct xfer *x, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void xfer_pump(struct peerlink *pl, struct xfer *x);
void xfer_register(struct peerlink *pl, struct xfer *x, bool send);
void xfer_progress(struct peerlink *pl, struct xfer *x);
/* The receiving side is ready: register its buffers, start pulling pieces. */
void xfer_start_receive(struct peerlink *pl, struct xfer *x);

/* partner.c: partner memory, copies, fetches. */
void store_gauge(struct peerlink *pl);
void pentry_drop(struct peerlink *pl, struct pentry *pe);
bool recently_committed(const struct peerlink *pl, const char *job, uint64_t step);
void hold_release(struct peerlink *pl, struct hold *h);
void partner_on_copy_offer(struct peerlink *pl, uint32_t from, const struct peer_msg *m);
void partner_on_copy_accept(struct peerlink *pl, uint32_t from, const struct peer_msg *m);
void partner_on_remote_done(struct peerlink *pl, uint32_t from, const struct peer_msg *m,
		    enum xfer_kind kind);
void fetch_complete(struct peerlink *pl, struct fetch_req *rq, int result,
		    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void fetch_next(struct peerlink *pl, struct fetch_req *rq);
void partner_on_fetch(struct peerlink *pl, uint32_t from, const struct peer_msg *m);
void partner_on_fetch_have(struct peerlink *pl, uint32_t from, const struct peer_msg *m);
void partner_on_fetch_go(struct peerlink *pl, uint32_t from, const struct peer_msg *m);

#endif
