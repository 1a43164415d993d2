/* SPDX-License-Identifier: MIT */
/*
 * The peer link of a multi-node group (nodes > 1): one libfabric RDM
 * endpoint per daemon, driven from the event loop. It carries the global
 * commit (votes to the leader, node 0; COMMITTED and ABORT from it),
 * heartbeats, and the partner copies: each node's ranks' shards of a step,
 * copied into its partner nodes' memory, from which a replaced node
 * restores them. Protocol: proto/PROTOCOL.md, "Peer link".
 *
 * Everything runs on the event-loop thread except peer_fetch(), which a
 * restore worker calls and which waits for the loop to do the transfer.
 */
#ifndef CKPTD_PEER_H
#define CKPTD_PEER_H

#include <stdbool.h>
#include <stdint.h>

struct daemon;
struct client;
struct step;
struct rank_vote;

/* Start the link when cfg->nodes > 1 (d->peer stays NULL otherwise). */
int peer_init(struct daemon *d);
void peer_fini(struct daemon *d);
/* Descriptors for the loop's epoll set (-1: none), and its handler. */
int peer_fd(struct daemon *d);       /* completions, fetch requests */
int peer_timer_fd(struct daemon *d); /* heartbeats, timeouts */
int peer_wake_fd(struct daemon *d);  /* restore workers' fetch requests */
void peer_dispatch(struct daemon *d);
/* Longest the loop may sleep, in ms (-1: no limit): transfers in flight
 * need the provider's progress. */
int peer_poll_ms(struct daemon *d);
/* The daemon is stopping: end transfers. */
void peer_stop(struct daemon *d);

bool peer_is_leader(const struct daemon *d);

/* Follower: a local rank's vote goes to the leader; `again` when it is
 * sent again because no outcome came (the leader then answers with the
 * outcome, and never opens a step for it). */
int peer_send_vote(struct daemon *d, const struct step *st, uint32_t rank,
		    const struct rank_vote *v, bool again);
/* Leader: tell every node; follower: tell the leader (from_leader false). */
void peer_send_abort(struct daemon *d, const char *job, uint64_t step, int error,
		     const char *reason);
void peer_send_committed(struct daemon *d, const char *job, uint64_t step,
			 uint32_t world_size);
/* Answer a stale vote of node `node` directly. */
void peer_send_committed_to(struct daemon *d, uint32_t node, const char *job, uint64_t step,
			    uint32_t world_size);
void peer_send_abort_to(struct daemon *d, uint32_t node, const char *job, uint64_t step,
			int error, const char *reason);

/*
 * Partner copy of a durable shard still in c's slot: true if the copy
 * started, in which case the slot stays ckptd's until it ends and the rank
 * gets it back with a STATUS (state UNKNOWN, slot_freed). Takes `index`
 * (malloc'd, the encoded index) in every case.
 */
bool peer_copy_start(struct client *c, uint32_t slot, const struct step *st, uint32_t rank,
		     const struct rank_vote *v, void *index);
/* A step committed or failed: partner copies of it become the newest, or go. */
void peer_step_committed(struct daemon *d, const char *job, uint64_t step);
void peer_step_failed(struct daemon *d, const char *job, uint64_t step);

/*
 * From a restore worker: fetch rank's shard of job/step from a partner's
 * memory into dst (cap bytes). On success *index (malloc'd, *index_bytes)
 * is the encoded index and *shard_bytes what was written to dst. Returns 0,
 * -ENOENT (no partner holds it), or another negative errno with err set.
 */
int peer_fetch(struct daemon *d, const char *job, uint64_t step, uint32_t rank, uint8_t *dst,
	       uint64_t cap, void **index, uint64_t *index_bytes, uint64_t *shard_bytes,
	       char *err, size_t errlen);
/* Leader: whether the leader told the group lately that step committed
 * (it may be gone from the root since, by retention). */
bool peer_recently_committed(const struct daemon *d, const char *job, uint64_t step);
/* Fault injection for tests: whether CKPTD_TEST_FAULT (read once at start)
 * names this fault. Faults: drop-outcomes (the leader sends no COMMITTED
 * or ABORT broadcast; its answers to resent votes still go). */
bool peer_test_fault(const char *name);

/* Agreed restores (agree.c): send m (its job fields set) to node; -ENOTCONN
 * when that node is not up. This daemon's node index (0 alone). */
struct peer_msg;
int peer_send_agree(struct daemon *d, uint32_t node, struct peer_msg *m);
uint32_t peer_node_index(const struct daemon *d);
/* Whether a restore should ask partners at all. */
bool peer_fetch_enabled(const struct daemon *d);

#endif
