/* SPDX-License-Identifier: MIT */
/*
 * Agreed restore: every rank of a job restores the same step, the newest
 * committed one that every rank can read and verify (proto/PROTOCOL.md,
 * RESTORE_AGREED and "Agreed restore" in the peer link; the rules in
 * docs/OPERATIONS.md).
 *
 * Two halves. The local half keeps each waiting rank of this node (its
 * slot, its attempt at the candidate step, its answer). The coordinator
 * half (this daemon alone, or node 0 of a group) keeps one round per job:
 * the candidates (from the root's manifests and S3, listed on a worker),
 * the current candidate, every rank's outcome for it, and the deadline.
 * All on the event-loop thread.
 */
#ifndef CKPTD_AGREE_H
#define CKPTD_AGREE_H

#include <stdbool.h>
#include <stdint.h>

struct daemon;
struct client;
struct peer_msg;
struct agree_rank;
struct ckpt_msg_restore_ok;

/* A client's RESTORE_AGREED (slot checked by the caller). */
void agree_request(struct client *c, uint32_t slot, uint64_t step, uint32_t flags, uint32_t seq);
/* A local rank's attempt at `step` ended (restore.c's done callback):
 * result 0 with ok filled, or an error with err. */
void agree_attempt_done(struct agree_rank *ar, uint64_t step, int result, const char *err,
			const struct ckpt_msg_restore_ok *ok, const char *tier);
/* A client's connection closed: its waiting request leaves (the round
 * fails for the others: the job lost a rank). */
void agree_client_gone(struct client *c);
/* AGREE_* from node `node` (peer.c has checked who may send which). */
void agree_peer_message(struct daemon *d, uint32_t node, const struct peer_msg *m);
/* Node `node` of the group is lost: rounds waiting on it fail. */
void agree_node_lost(struct daemon *d, uint32_t node, const char *why);
/* Milliseconds until the next deadline (-1: none), and running those due. */
int agree_poll_ms(struct daemon *d);
void agree_tick(struct daemon *d);
/* The daemon stops: every waiting rank gets an error; frees everything. */
void agree_fini(struct daemon *d);

#endif
