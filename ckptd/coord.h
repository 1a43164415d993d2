/* SPDX-License-Identifier: MIT */
/*
 * The coordinator (coord.c): a job's steps, the votes of its ranks (local
 * writers, and remote ranks through the peer link), the commit (manifest
 * and LATEST), outcomes to the ranks, and a job's list of committed steps.
 * Jobs themselves are jobs.h's; removing steps is retention.h's.
 * Event-loop thread.
 */
#ifndef CKPTD_COORD_H
#define CKPTD_COORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ckpt_msg_status;
struct daemon;
struct job;
struct rank_vote;
struct step;

bool job_is_committed(const struct job *job, uint64_t step);
/* A step restored from S3 into the root is committed there again. */
void coord_adopt(struct job *job, uint64_t step);
uint64_t job_latest(const struct job *job);
struct step *step_find(struct job *job, uint64_t step);
/* The job's open steps, in an array of their own (*out, free()): failing
 * one may prune failed ones from the job's list. Their number; 0 and
 * *out NULL when none (or out of memory, logged). */
size_t job_open_steps(struct job *job, struct step ***out);
struct step *step_get(struct job *job, uint64_t step, uint32_t world_size);
/* Reuse a failed step's record for a new incarnation of the job. */
int step_reopen(struct step *st, uint32_t world_size);
/*
 * A vote: `rank` of the job holds `step` durably. Local writers call it;
 * the peer link of a multi-node job calls it for remote ranks. Takes the
 * vote's table. Commits when every rank of the world has voted.
 */
void coord_vote(struct step *st, uint32_t rank, struct rank_vote *vote);
/* The step can never commit: tell every participant, remove it when idle. */
void coord_fail(struct step *st, int error, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A save job of the step finished (durable or not). */
void coord_save_done(struct step *st, uint32_t rank);
/* A rank's connection went away (or skipped): steps it cannot finish fail. */
void coord_rank_gone(struct job *job, uint32_t rank, const char *why);
/* A rank (re)joined the job. */
void coord_rank_back(struct job *job, uint32_t rank);
/* A rank of the job that left and cannot vote for st, or -1. */
int64_t coord_missing_rank(struct job *job, const struct step *st);
void coord_state_of(struct job *job, uint64_t step, struct ckpt_msg_status *out);
void job_pin(struct job *job, uint64_t step, int delta);
/* This daemon writes manifests and deletes steps: alone, or node 0. */
bool coord_is_leader(const struct daemon *d);
/* The peer link's messages (peer.c) for the coordinator. */
struct peer_msg;
void coord_peer_vote(struct daemon *d, uint32_t node, const struct peer_msg *m);
void coord_peer_committed(struct daemon *d, const struct peer_msg *m);
void coord_peer_abort(struct daemon *d, uint32_t node, const struct peer_msg *m);
void coord_peer_lost(struct daemon *d, uint32_t node, const char *why);
/* From the peer link's timer. Non-leader: ask the leader again for the
 * outcome of steps that have waited for one longer than `after_ns`.
 * Leader: fail steps with no vote for step_timeout_ms. */
void coord_peer_tick(struct daemon *d, int64_t now, int64_t after_ns);
/* Alone (no group): how soon coord_tick() wants to run (-1: no need), and
 * the step_timeout_ms bound on open steps it applies. */
int coord_poll_ms(const struct daemon *d);
void coord_tick(struct daemon *d, int64_t now);

#endif
