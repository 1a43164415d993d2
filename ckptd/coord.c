/* SPDX-License-Identifier: MIT */
/*
 * The commit coordinator: jobs, their committed steps, open steps and the
 * votes of their ranks. A step commits when every rank 0..world_size-1 has
 * voted "durable": then a worker fsyncs the step directory, writes
 * MANIFEST.json durably (its existence is the commit) and moves LATEST.
 *
 * Votes come from coord_vote(); on one node the writer casts them. In a
 * multi-node group (peer.c) only the leader, node 0, commits: the other
 * daemons forward their ranks' votes to it and learn of commits and
 * failures from it; the leader reads each remote rank's index from the
 * shared root, checks it against the vote's digest and sizes, and only then
 * writes the manifest. Only the leader deletes step directories (failed
 * steps, retention, recovery): the others forget.
 * A job is recovered (its step directories without a manifest removed)
 * when this daemon takes it over: see jobs.c.
 *
 * One concept, just over 1,000 lines: a step's way from the first vote to
 * its outcome, on one node or through the group's leader.
 *
 * Here: a job's committed steps, its open steps, the commit, and the peer
 * link's messages about them. Not here: the job records, their ownership
 * and takeover (jobs.c), the removal of step directories and root
 * retention (retention.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckptd.h"
#include "coord.h"
#include "jobs.h"
#include "server.h"
#include "coord_internal.h"
#include "peer.h"
#include "peerwire.h"
#include "retention.h"
#include "uploader.h"

#define FAILED_TOMBSTONES 64

bool coord_is_leader(const struct daemon *d)
{
	return d->cfg->nodes <= 1 || d->cfg->node_index == 0;
}

/* LATEST of one job is written by one worker at a time. */
pthread_mutex_t latest_lock = PTHREAD_MUTEX_INITIALIZER;

int committed_insert(struct job *job, uint64_t step)
{
	size_t i;

	if (job->n_committed == job->cap_committed) {
		size_t cap = job->cap_committed ? job->cap_committed * 2 : 16;
		uint64_t *s = realloc(job->committed, cap * sizeof(*s));
		if (!s)
			return -ENOMEM;
		job->committed = s;
		unsigned *p = realloc(job->restore_pins, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		job->restore_pins = p;
		job->cap_committed = cap;
	}
	for (i = job->n_committed; i > 0 && job->committed[i - 1] > step; i--) {
		job->committed[i] = job->committed[i - 1];
		job->restore_pins[i] = job->restore_pins[i - 1];
	}
	job->committed[i] = step;
	job->restore_pins[i] = 0;
	job->n_committed++;
	return 0;
}

void committed_remove_at(struct job *job, size_t i)
{
	memmove(&job->committed[i], &job->committed[i + 1],
		(job->n_committed - i - 1) * sizeof(*job->committed));
	memmove(&job->restore_pins[i], &job->restore_pins[i + 1],
		(job->n_committed - i - 1) * sizeof(*job->restore_pins));
	job->n_committed--;
}

void coord_adopt(struct job *job, uint64_t step)
{
	if (job_is_committed(job, step))
		return;
	if (committed_insert(job, step) < 0) {
		log_error("coord", "out of memory recording a step restored from S3 job=%s", job->name);
		return;
	}
	log_info("coord", "committed again from S3 job=%s step=%llu", job->name,
		 (unsigned long long)step);
}

bool job_is_committed(const struct job *job, uint64_t step)
{
	for (size_t i = 0; i < job->n_committed; i++)
		if (job->committed[i] == step)
			return true;
	return false;
}

uint64_t job_latest(const struct job *job)
{
	return job->n_committed ? job->committed[job->n_committed - 1] : CKPT_NO_STEP;
}

void job_pin(struct job *job, uint64_t step, int delta)
{
	for (size_t i = 0; i < job->n_committed; i++)
		if (job->committed[i] == step)
			job->restore_pins[i] = (unsigned)((int)job->restore_pins[i] + delta);
}

/* ---- Steps ---------------------------------------------------------- */

struct step *step_find(struct job *job, uint64_t step)
{
	for (struct step *st = job->steps; st; st = st->next)
		if (st->step == step)
			return st;
	return NULL;
}

static void step_reset(struct step *st)
{
	if (st->votes)
		for (uint32_t i = 0; i < st->world_size; i++)
			ckpt_table_free(&st->votes[i].table);
	free(st->votes);
	free(st->saving);
	st->votes = NULL;
	st->saving = NULL;
}

void step_free(struct step *st)
{
	step_reset(st);
	free(st);
}

static void step_unlink(struct step *st)
{
	for (struct step **p = &st->job->steps; *p; p = &(*p)->next) {
		if (*p == st) {
			*p = st->next;
			return;
		}
	}
}

static int step_init(struct step *st, uint32_t world_size)
{
	st->world_size = world_size;
	st->state = STEP_OPEN;
	st->votes_in = 0;
	st->inflight = 0;
	st->error = 0;
	st->reason[0] = 0;
	st->skipped = false;
	st->opened_ns = ckpt_mono_ns();
	st->votes = calloc(world_size, sizeof(*st->votes));
	st->saving = calloc(world_size, 1);
	return st->votes && st->saving ? 0 : -ENOMEM;
}

struct step *step_get(struct job *job, uint64_t step, uint32_t world_size)
{
	struct step *st = step_find(job, step);

	if (st)
		return st;
	st = calloc(1, sizeof(*st));
	if (!st)
		return NULL;
	st->job = job;
	st->step = step;
	if (step_init(st, world_size) < 0) {
		step_free(st);
		return NULL;
	}
	st->next = job->steps;
	job->steps = st;
	return st;
}

int step_reopen(struct step *st, uint32_t world_size)
{
	step_reset(st);
	return step_init(st, world_size);
}

static void prune_tombstones(struct job *job)
{
	unsigned n = 0;
	struct step *oldest = NULL;

	for (struct step *st = job->steps; st; st = st->next) {
		if (st->state == STEP_FAILED && st->inflight == 0 && !st->removing) {
			n++;
			if (!oldest || st->step < oldest->step)
				oldest = st;
		}
	}
	if (n > FAILED_TOMBSTONES && oldest) {
		step_unlink(oldest);
		step_free(oldest);
	}
}

static void notify_participants(struct step *st, enum ckpt_state state, int error,
				const char *reason)
{
	for (uint32_t r = 0; r < st->world_size; r++) {
		if (!st->votes[r].durable && !st->saving[r])
			continue;
		struct client *c = job_client_for_rank(st->job, r);
		if (c)
			client_send_status(c, st->step, state, error, CKPT_NO_SLOT, reason);
	}
}

void coord_fail(struct step *st, int error, const char *fmt, ...)
{
	va_list ap;

	if (st->state != STEP_OPEN)
		return;
	st->state = STEP_FAILED;
	st->error = error;
	st->failed_generation = ++st->job->d->generation;
	va_start(ap, fmt);
	vsnprintf(st->reason, sizeof(st->reason), fmt, ap);
	va_end(ap);
	log_warn("coord", "step abandoned job=%s step=%llu votes=%u/%u reason=\"%s\"",
		 st->job->name, (unsigned long long)st->step, st->votes_in,
		 st->world_size, st->reason);
	/* Each step counts once, by why it ended (the skip event itself is
	 * sent where the rank's SKIP arrives, with the rank). */
	metrics_inc(M_SAVES_TOTAL, st->job->name, st->skipped ? "skipped" : "failed");
	if (!st->skipped)
		events_save_failed(st->job->name, st->step, st->reason);
	notify_participants(st, CKPT_STATE_FAILED, error, st->reason);
	if (st->job->d->peer) {
		/* The leader tells every node; another node tells the leader,
		 * unless the leader is who failed it. */
		if (coord_is_leader(st->job->d) || !st->abort_from_peer)
			peer_send_abort(st->job->d, st->job->name, st->step, error, st->reason);
		peer_step_failed(st->job->d, st->job->name, st->step);
	}
	if (st->inflight == 0 && coord_is_leader(st->job->d))
		removal_start(st->job, st, st->step, false);
	prune_tombstones(st->job);
}

void coord_save_done(struct step *st, uint32_t rank)
{
	if (rank < st->world_size)
		st->saving[rank] = 0;
	st->inflight--;
	if (st->state == STEP_FAILED && st->inflight == 0 && !st->removing &&
	    coord_is_leader(st->job->d))
		removal_start(st->job, st, st->step, false);
}

void coord_rank_back(struct job *job, uint32_t rank)
{
	for (size_t i = 0; i < job->n_left; i++) {
		if (job->left[i] == rank) {
			job->left[i] = job->left[--job->n_left];
			return;
		}
	}
}

int64_t coord_missing_rank(struct job *job, const struct step *st)
{
	for (size_t i = 0; i < job->n_left; i++) {
		uint32_t r = job->left[i];
		if (r < st->world_size && !st->votes[r].durable && !st->saving[r])
			return r;
	}
	return -1;
}

void coord_rank_gone(struct job *job, uint32_t rank, const char *why)
{
	if (job->clients == 0) {
		/* Everyone left: the next ranks to come are a new run. */
		job->n_left = 0;
	} else {
		coord_rank_back(job, rank);
		if (job->n_left == job->cap_left) {
			size_t cap = job->cap_left ? job->cap_left * 2 : 8;
			uint32_t *l = realloc(job->left, cap * sizeof(*l));
			if (l) {
				job->left = l;
				job->cap_left = cap;
			}
		}
		if (job->n_left < job->cap_left)
			job->left[job->n_left++] = rank;
	}
	for (struct step *st = job->steps; st; st = st->next) {
		if (st->state != STEP_OPEN || rank >= st->world_size)
			continue;
		/* A save already handed over is complete in shared memory: it
		 * is finished and still counts. Only a rank that never handed
		 * its shard over leaves the step unable to commit. */
		if (st->votes[rank].durable || st->saving[rank])
			continue;
		coord_fail(st, -CKPT_E_ABORTED, "rank %u %s without saving step %llu",
			   rank, why, (unsigned long long)st->step);
	}
}

void coord_state_of(struct job *job, uint64_t step, struct ckpt_msg_status *out)
{
	memset(out, 0, sizeof(*out));
	out->step = step;
	out->slot_freed = CKPT_NO_SLOT;
	if (job_is_committed(job, step)) {
		out->state = CKPT_STATE_COMMITTED;
		return;
	}
	struct step *st = step_find(job, step);
	if (!st) {
		out->state = CKPT_STATE_UNKNOWN;
		return;
	}
	if (st->state == STEP_FAILED) {
		out->state = CKPT_STATE_FAILED;
		out->error = st->error;
		snprintf(out->reason, sizeof(out->reason), "%s", st->reason);
	} else {
		out->state = CKPT_STATE_PENDING;
	}
}

/* ---- Commit --------------------------------------------------------- */

struct commit {
	struct step *st;
	int result;
	char err[CKPT_REASON_MAX + 1];
	uint64_t bytes;
	int64_t started_ns;
};

/*
 * A vote cast over the peer link is believed only as far as the root bears
 * it out: the rank's index must have the voted digest and agree with the
 * vote's sizes, and the shard file must be as long as both say. Its table
 * becomes the vote's (for the manifest).
 */
static int remote_vote_check(int stepfd, struct job *job, struct step *st, uint32_t rank,
			     char *err, size_t errlen)
{
	struct rank_vote *v = &st->votes[rank];
	struct ckpt_index idx;
	char e[CKPT_REASON_MAX + 1], name[32];
	struct stat sb;
	int r;

	memset(&idx, 0, sizeof(idx));
	r = store_read_index(stepfd, rank, v->index_sha256, &idx, e, sizeof(e));
	if (r < 0) {
		snprintf(err, errlen, "rank %u (voted by node %u): %s", rank, v->node, e);
		return r == -ENOMEM || r == -EIO ? r : -CKPT_E_CORRUPT;
	}
	ckpt_shard_filename(name, sizeof(name), rank);
	if (idx.step != st->step || idx.rank != rank || idx.world_size != st->world_size ||
	    idx.shard_bytes != v->shard_bytes || idx.blob_bytes != v->blob_bytes ||
	    idx.blob_crc32c != v->blob_crc32c ||
	    fstatat(stepfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0 ||
	    (uint64_t)sb.st_size != v->shard_bytes) {
		snprintf(err, errlen, "rank %u's files in %s do not match the vote of node %u "
			 "(shard %llu bytes voted, index says %llu)", rank, job->name, v->node,
			 (unsigned long long)v->shard_bytes, (unsigned long long)idx.shard_bytes);
		ckpt_index_free(&idx);
		return -CKPT_E_CORRUPT;
	}
	ckpt_table_free(&v->table);
	v->table = idx.table;
	memset(&idx.table, 0, sizeof(idx.table));
	ckpt_index_free(&idx);
	return 0;
}

/*
 * The manifest may exist although the commit failed (the rename went
 * through, a later fsync did not): take it back, so that a step its ranks
 * are told FAILED never becomes visible as committed, at this start or
 * the next (the failed step's removal would otherwise find a manifest and
 * keep the step).
 */
static void commit_undo(int stepfd)
{
	if (unlinkat(stepfd, CKPT_MANIFEST_NAME, 0) == 0 || errno != ENOENT)
		store_fsync_dir(stepfd);
	unlinkat(stepfd, CKPT_MANIFEST_NAME ".tmp", 0);
}

static void commit_run(void *arg)
{
	struct commit *cm = arg;
	struct step *st = cm->st;
	struct job *job = st->job;
	struct ckpt_manifest m;
	char name[32];
	char *json = NULL;
	size_t len = 0;
	int stepfd = -1, r;

	r = ckpt_step_dirname(name, sizeof(name), st->step);
	if (r < 0) {
		snprintf(cm->err, sizeof(cm->err), "job %s: step %llu is not a step number",
			 job->name, (unsigned long long)st->step);
		goto out;
	}
	stepfd = openat(job->dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (stepfd < 0) {
		r = -errno;
		snprintf(cm->err, sizeof(cm->err), "opening %s/%s: %s", job->name, name,
			 strerror(-r));
		goto out;
	}
	/* Every shard's and index's directory entry is durable before the
	 * manifest can be. */
	r = store_fsync_dir(stepfd);
	if (r < 0) {
		snprintf(cm->err, sizeof(cm->err), "fsync %s/%s: %s", job->name, name,
			 strerror(-r));
		goto out;
	}
	memset(&m, 0, sizeof(m));
	snprintf(m.job, sizeof(m.job), "%s", job->name);
	m.step = st->step;
	m.world_size = st->world_size;
	m.chunk_bytes = (uint32_t)job->d->cfg->chunk_bytes;
	{
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		m.created_unix_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	}
	m.ranks = calloc(st->world_size, sizeof(*m.ranks));
	if (!m.ranks) {
		r = -ENOMEM;
		snprintf(cm->err, sizeof(cm->err), "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < st->world_size; i++) {
		struct rank_vote *v = &st->votes[i];
		if (v->remote && (r = remote_vote_check(stepfd, job, st, i, cm->err,
							 sizeof(cm->err))) < 0) {
			free(m.ranks);
			goto out;
		}
		m.ranks[i].rank = i;
		m.ranks[i].shard_bytes = v->shard_bytes;
		m.ranks[i].blob_bytes = v->blob_bytes;
		m.ranks[i].blob_crc32c = v->blob_crc32c;
		m.ranks[i].index_bytes = v->index_bytes;
		memcpy(m.ranks[i].index_sha256, v->index_sha256, 32);
		m.ranks[i].table = v->table;  /* borrowed */
		cm->bytes += v->shard_bytes + v->index_bytes;
	}
	r = ckpt_manifest_encode(&m, &json, &len);
	free(m.ranks);
	if (r < 0) {
		snprintf(cm->err, sizeof(cm->err), "encoding the manifest of %s/%s: %s",
			 job->name, name, strerror(-r));
		goto out;
	}
	r = store_write_file_durable(stepfd, CKPT_MANIFEST_NAME, json, len);
	free(json);
	if (r < 0) {
		snprintf(cm->err, sizeof(cm->err), "writing %s/%s/%s: %s", job->name, name,
			 CKPT_MANIFEST_NAME, strerror(-r));
		commit_undo(stepfd);
		goto out;
	}
	/* The step directory's own entry, then LATEST. */
	r = store_fsync_dir(job->dirfd);
	if (r < 0) {
		snprintf(cm->err, sizeof(cm->err), "fsync %s: %s", job->name, strerror(-r));
		commit_undo(stepfd);
		goto out;
	}
	pthread_mutex_lock(&latest_lock);
	uint64_t cur = 0;
	if (store_read_latest(job->dirfd, &cur) < 0 || cur < st->step) {
		int lr = store_write_latest(job->dirfd, st->step);
		if (lr < 0)
			log_warn("coord", "LATEST not updated job=%s step=%llu error=\"%s\"",
				 job->name, (unsigned long long)st->step, strerror(-lr));
	}
	pthread_mutex_unlock(&latest_lock);
	r = 0;
out:
	if (stepfd >= 0)
		close(stepfd);
	cm->result = r;
}

static void commit_done(void *arg)
{
	struct commit *cm = arg;
	struct step *st = cm->st;
	struct job *job = st->job;
	struct daemon *d = job->d;

	d->busy--;
	metrics_add(M_QUEUE_DEPTH, -1, "commit");
	if (cm->result < 0) {
		st->state = STEP_OPEN; /* so coord_fail applies */
		coord_fail(st, cm->result, "commit failed: %s", cm->err);
		free(cm);
		return;
	}
	st->state = STEP_COMMITTED;
	if (committed_insert(job, st->step) < 0)
		log_error("coord", "out of memory recording a commit job=%s", job->name);
	int64_t now = ckpt_mono_ns();
	double secs = (double)(now - st->opened_ns) / 1e9;
	log_info("coord", "committed job=%s step=%llu ranks=%u bytes=%llu seconds=%.3f "
		 "last_vote_seconds=%.6f", job->name, (unsigned long long)st->step, st->world_size,
		 (unsigned long long)cm->bytes, secs, (double)(now - st->last_vote_ns) / 1e9);
	if (d->peer)
		peer_send_committed(d, job->name, st->step, st->world_size);
	metrics_inc(M_SAVES_TOTAL, job->name, "committed");
	metrics_observe(M_TIME_TO_COMMITTED_SECONDS, secs, job->name);
	metrics_set(M_NEWEST_COMMITTED_STEP, (double)job_latest(job), job->name, "root");
	events_committed(job->name, st->step, st->world_size, secs, (int64_t)cm->bytes);
	notify_participants(st, CKPT_STATE_COMMITTED, 0, NULL);
	uploader_committed(d, job->name, st->step);
	step_unlink(st);
	step_free(st);
	free(cm);
	retention_apply(job);
	job_release(job);
}

void coord_vote(struct step *st, uint32_t rank, struct rank_vote *vote)
{
	struct daemon *d = st->job->d;

	if (st->state != STEP_OPEN || rank >= st->world_size || st->votes[rank].durable) {
		log_warn("coord", "vote ignored job=%s step=%llu rank=%u state=%d",
			 st->job->name, (unsigned long long)st->step, rank, st->state);
		ckpt_table_free(&vote->table);
		return;
	}
	st->votes[rank] = *vote;
	memset(vote, 0, sizeof(*vote));
	st->votes[rank].durable = true;
	st->votes_in++;
	st->last_vote_ns = ckpt_mono_ns();
	if (d->peer && !coord_is_leader(d)) {
		/* The leader counts; this node forwards its own ranks' votes. */
		if (!st->votes[rank].remote &&
		    peer_send_vote(d, st, rank, &st->votes[rank], false) < 0)
			coord_fail(st, -CKPT_E_ABORTED, "the leader (node 0) is not reachable: "
				   "step %llu cannot commit", (unsigned long long)st->step);
		return;
	}
	if (st->votes_in < st->world_size)
		return;

	struct commit *cm = calloc(1, sizeof(*cm));
	if (!cm) {
		coord_fail(st, -ENOMEM, "out of memory committing step %llu",
			   (unsigned long long)st->step);
		return;
	}
	cm->st = st;
	cm->started_ns = ckpt_mono_ns();
	st->state = STEP_COMMITTING;
	d->busy++;
	metrics_add(M_QUEUE_DEPTH, 1, "commit");
	if (workers_submit(d->workers, commit_run, commit_done, cm) < 0) {
		metrics_add(M_QUEUE_DEPTH, -1, "commit");
		d->busy--;
		st->state = STEP_OPEN;
		free(cm);
		coord_fail(st, -ENOMEM, "out of memory committing step %llu",
			   (unsigned long long)st->step);
	}
}

/* ---- The peer link's messages (multi-node groups) -------------------- */

/* A vote for a job this leader has not taken over yet waits for the
 * takeover (on a worker, as a HELLO does); a refused takeover is answered
 * with an ABORT that says why, so the voting node's step ends. */
struct vote_wait {
	struct daemon *d;
	uint32_t node;
	struct peer_msg m;
};

static void vote_job_ready(void *arg, struct job *job, int error, const char *reason)
{
	struct vote_wait *vw = arg;

	if (job) {
		coord_peer_vote(vw->d, vw->node, &vw->m);
	} else {
		log_warn("coord", "vote refused job=%s step=%llu node=%u error=\"%s\"", vw->m.job,
			 (unsigned long long)vw->m.step, vw->node,
			 reason ? reason : strerror(-error));
		peer_send_abort_to(vw->d, vw->node, vw->m.job, vw->m.step,
				   error < 0 ? error : -CKPT_E_REFUSED,
				   reason ? reason : "the leader cannot take the job over");
	}
	free(vw);
}

void coord_peer_vote(struct daemon *d, uint32_t node, const struct peer_msg *m)
{
	struct job *job = job_get(d, m->job, false);
	struct step *st;

	if (!job) {
		struct vote_wait *vw = malloc(sizeof(*vw));
		if (vw) {
			vw->d = d;
			vw->node = node;
			vw->m = *m;
			if (job_open(d, m->job, vote_job_ready, vw) == 0)
				return;
			free(vw);
		}
		log_error("coord", "out of memory opening job=%s for a vote of node %u", m->job,
			  node);
		return;
	}
	if (job_is_committed(job, m->step) || peer_recently_committed(d, job->name, m->step)) {
		/* A vote that crossed the commit, or a resend. */
		peer_send_committed_to(d, node, job->name, m->step, m->world_size);
		return;
	}
	st = step_find(job, m->step);
	if (st && st->state == STEP_FAILED) {
		peer_send_abort_to(d, node, job->name, m->step, st->error, st->reason);
		return;
	}
	if (!st && m->status == PEER_VOTE_AGAIN) {
		/* Asked for an outcome it missed: the step is neither committed
		 * nor open here, so it ended without a commit (its record is
		 * gone); a resend never opens a step. */
		peer_send_abort_to(d, node, job->name, m->step, -CKPT_E_ABORTED,
				   "the leader (node 0) has no open step of this number: it "
				   "failed, or its votes never arrived");
		return;
	}
	if (!st) {
		st = step_get(job, m->step, m->world_size);
		if (!st) {
			log_error("coord", "out of memory for a vote job=%s step=%llu", job->name,
				  (unsigned long long)m->step);
			return;
		}
	}
	if (st->state != STEP_OPEN)
		return; /* committing: every vote is in already */
	if (st->world_size != m->world_size) {
		metrics_inc(M_PEER_REJECTED_TOTAL, "conflict");
		log_warn("peer", "message rejected reason=conflict detail=\"VOTE of node %u for a "
			 "world of %u ranks, step %llu of job %s has %u\"", node, m->world_size,
			 (unsigned long long)m->step, job->name, st->world_size);
		coord_fail(st, -CKPT_E_ABORTED, "node %u voted for a world of %u ranks, step %llu "
			   "has %u", node, m->world_size, (unsigned long long)m->step,
			   st->world_size);
		return;
	}
	struct rank_vote *have = &st->votes[m->rank];
	if (have->durable) {
		if (have->node == node && memcmp(have->index_sha256, m->index_sha256, 32) == 0)
			return; /* the same vote again */
		metrics_inc(M_PEER_REJECTED_TOTAL, "conflict");
		log_warn("peer", "message rejected reason=conflict detail=\"VOTE of node %u for rank "
			 "%u of step %llu of job %s, which node %u voted with another shard\"", node,
			 m->rank, (unsigned long long)m->step, job->name, have->node);
		coord_fail(st, -CKPT_E_ABORTED, "rank %u of step %llu voted twice, by node %u and "
			   "by node %u, with different shards", m->rank, (unsigned long long)m->step,
			   have->node, node);
		return;
	}
	struct rank_vote v;
	memset(&v, 0, sizeof(v));
	v.shard_bytes = m->shard_bytes;
	v.index_bytes = m->index_bytes;
	memcpy(v.index_sha256, m->index_sha256, 32);
	v.blob_bytes = m->blob_bytes;
	v.blob_crc32c = m->blob_crc32c;
	v.node = node;
	v.remote = true;
	coord_vote(st, m->rank, &v);
}

/* Step `step` of a job is committed (the leader said so, or its manifest is
 * on the root): tell the ranks that wait for it. */
static void committed_elsewhere(struct job *job, uint64_t step, const char *how)
{
	struct step *st;

	if (job_is_committed(job, step))
		return;
	if (committed_insert(job, step) < 0) {
		log_error("coord", "out of memory recording a commit job=%s", job->name);
		return;
	}
	metrics_set(M_NEWEST_COMMITTED_STEP, (double)job_latest(job), job->name, "root");
	st = step_find(job, step);
	if (st) {
		double secs = (double)(ckpt_mono_ns() - st->opened_ns) / 1e9;
		log_info("coord", "committed %s job=%s step=%llu ranks=%u seconds=%.3f", how,
			 job->name, (unsigned long long)step, st->world_size, secs);
		metrics_inc(M_SAVES_TOTAL, job->name, "committed");
		metrics_observe(M_TIME_TO_COMMITTED_SECONDS, secs, job->name);
		notify_participants(st, CKPT_STATE_COMMITTED, 0, NULL);
		if (st->inflight == 0) {
			step_unlink(st);
			step_free(st);
		} else {
			st->state = STEP_COMMITTED;
		}
	}
	retention_apply(job);
	job_release(job);
}

void coord_peer_committed(struct daemon *d, const struct peer_msg *m)
{
	struct job *job = job_get(d, m->job, false);

	if (job)
		committed_elsewhere(job, m->step, "by the leader");
}

/*
 * An ABORT only ever concerns a step still open, of a job this daemon
 * manages: it never creates a job, never touches a committed (or
 * committing) step, and is ignored for a step this daemon has no record of,
 * with one exception: the leader records a failed step for an ABORT from
 * a node whose rank failed before any vote of the step reached the leader,
 * so that the other nodes' votes get an answer. Such a step is newer than
 * every committed one (an ABORT for an older step is stale).
 */
void coord_peer_abort(struct daemon *d, uint32_t node, const struct peer_msg *m)
{
	bool leader = coord_is_leader(d);
	struct job *job = job_get(d, m->job, false);
	struct step *st;

	if (!job || job_is_committed(job, m->step) ||
	    (leader && peer_recently_committed(d, job->name, m->step)))
		return;
	st = step_find(job, m->step);
	if (!st) {
		uint64_t latest = job_latest(job);
		if (!leader)
			return;
		if (latest != CKPT_NO_STEP && m->step <= latest) {
			log_info("coord", "ABORT ignored job=%s step=%llu node=%u: no such open step, "
				 "and step %llu is committed", job->name, (unsigned long long)m->step,
				 node, (unsigned long long)latest);
			return;
		}
		/* Recorded as failed, so later votes for it are answered. */
		st = step_get(job, m->step, m->world_size ? m->world_size : 1);
		if (!st)
			return;
	}
	if (st->state != STEP_OPEN || st->resolving)
		return;
	st->abort_from_peer = !leader;
	coord_fail(st, m->status < 0 ? m->status : -CKPT_E_ABORTED, "%s (node %u)",
		   m->reason[0] ? m->reason : "aborted", node);
}

static void resolve_start(struct step *st, const char *why);

size_t job_open_steps(struct job *job, struct step ***out)
{
	size_t n = 0, i = 0;

	*out = NULL;
	for (struct step *st = job->steps; st; st = st->next)
		n += st->state == STEP_OPEN;
	if (n == 0)
		return 0;
	*out = calloc(n, sizeof(**out));
	if (!*out) {
		log_error("coord", "out of memory failing the steps of job=%s", job->name);
		return 0;
	}
	for (struct step *st = job->steps; st && i < n; st = st->next)
		if (st->state == STEP_OPEN)
			(*out)[i++] = st;
	return n;
}

void coord_peer_lost(struct daemon *d, uint32_t node, const char *why)
{
	bool leader = coord_is_leader(d);

	/* The leader: no step open now can get the lost node's votes.
	 * Another node: only the leader's loss matters to it. */
	if (!leader && node != 0)
		return;
	for (struct job *job = d->jobs; job; job = job->next) {
		struct step **open = NULL;
		size_t n = job_open_steps(job, &open);
		for (size_t i = 0; i < n; i++) {
			if (!leader && open[i]->inflight == 0 && open[i]->votes_in > 0) {
				/* Every vote of this node went out: the leader may
				 * have committed before it was lost. */
				resolve_start(open[i], why);
				continue;
			}
			open[i]->abort_from_peer = !leader;
			coord_fail(open[i], -CKPT_E_ABORTED, "node %u lost (%s): step %llu cannot "
				   "commit", node, why, (unsigned long long)open[i]->step);
		}
		free(open);
	}
}

/*
 * Non-leader: the leader was lost while a step had all of this node's
 * votes. Whether it committed is on the shared root: its MANIFEST.json
 * exists (the leader writes it durably before it tells anyone). Looked up
 * on a worker; the step stays open meanwhile.
 */
struct resolve {
	struct daemon *d;
	char job[CKPT_JOB_NAME_MAX + 1];
	uint64_t step;
	int dirfd;                 /* the job directory's, duplicated */
	bool committed;
	char why[96];
};

static void resolve_run(void *arg)
{
	struct resolve *rv = arg;
	char name[32], path[64];
	struct stat sb;

	if (ckpt_step_dirname(name, sizeof(name), rv->step) < 0)
		return;
	snprintf(path, sizeof(path), "%s/%s", name, CKPT_MANIFEST_NAME);
	rv->committed = fstatat(rv->dirfd, path, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
			S_ISREG(sb.st_mode);
}

static void resolve_done(void *arg)
{
	struct resolve *rv = arg;
	struct daemon *d = rv->d;
	struct job *job = job_get(d, rv->job, false);
	struct step *st = job ? step_find(job, rv->step) : NULL;

	d->busy--;
	close(rv->dirfd);
	if (st)
		st->resolving = false;
	if (st && st->state == STEP_OPEN) {
		if (rv->committed) {
			log_warn("coord", "leader lost after it committed job=%s step=%llu: its "
				 "manifest is on the root", job->name, (unsigned long long)rv->step);
			committed_elsewhere(job, rv->step, "(manifest found on the root)");
		} else {
			st->abort_from_peer = true;
			coord_fail(st, -CKPT_E_ABORTED, "node 0 lost (%s): step %llu cannot commit "
				   "(no manifest on the root)", rv->why, (unsigned long long)rv->step);
		}
	}
	free(rv);
}

static void resolve_start(struct step *st, const char *why)
{
	struct daemon *d = st->job->d;
	struct resolve *rv;

	if (st->resolving)
		return;
	rv = calloc(1, sizeof(*rv));
	if (rv) {
		rv->d = d;
		snprintf(rv->job, sizeof(rv->job), "%s", st->job->name);
		rv->step = st->step;
		snprintf(rv->why, sizeof(rv->why), "%s", why);
		rv->dirfd = fcntl(st->job->dirfd, F_DUPFD_CLOEXEC, 0);
	}
	if (!rv || rv->dirfd < 0 || workers_submit(d->workers, resolve_run, resolve_done, rv) < 0) {
		if (rv && rv->dirfd >= 0)
			close(rv->dirfd);
		free(rv);
		st->abort_from_peer = true;
		coord_fail(st, -CKPT_E_ABORTED, "node 0 lost (%s): step %llu cannot commit",
			   why, (unsigned long long)st->step);
		return;
	}
	st->resolving = true;
	d->busy++;
}

/* Leader: a step that has had no vote for step_timeout_ms fails. */
static void leader_tick(struct daemon *d, int64_t now)
{
	int64_t limit = (int64_t)d->cfg->step_timeout_ms * 1000000;

	if (limit == 0)
		return;
	for (struct job *job = d->jobs; job; job = job->next) {
		struct step *stale = NULL;
		for (struct step *st = job->steps; st && !stale; st = st->next) {
			int64_t since = st->last_vote_ns > st->opened_ns ? st->last_vote_ns
									 : st->opened_ns;
			if (st->state == STEP_OPEN && st->inflight == 0 && now - since >= limit)
				stale = st;
		}
		if (!stale)
			continue;
		/* One per job and tick: failing may prune the list. */
		char missing[96] = "";
		size_t len = 0;
		unsigned n = 0;
		for (uint32_t r = 0; r < stale->world_size; r++) {
			if (stale->votes[r].durable)
				continue;
			if (n++ < 8 && len < sizeof(missing))
				len += (size_t)snprintf(missing + len, sizeof(missing) - len, "%s%u",
							len ? ", " : "", r);
		}
		coord_fail(stale, -CKPT_E_ABORTED, "no vote for step %llu within step_timeout_ms=%u: "
			   "%u rank(s) never saved it (%s%s)", (unsigned long long)stale->step,
			   d->cfg->step_timeout_ms, n, missing, n > 8 ? ", ..." : "");
	}
}

/* A daemon without a group: the same bound on a step that waits for a
 * rank that never saves it (a rank that hangs, or a launch that never
 * started it), so that every wait ends. */
int coord_poll_ms(const struct daemon *d)
{
	if (d->peer || d->cfg->step_timeout_ms == 0)
		return -1;
	for (const struct job *job = d->jobs; job; job = job->next)
		for (const struct step *st = job->steps; st; st = st->next)
			if (st->state == STEP_OPEN)
				return 1000;
	return -1;
}

void coord_tick(struct daemon *d, int64_t now)
{
	if (!d->peer)
		leader_tick(d, now);
}

/*
 * Non-leader: an outcome the peer link dropped (a full queue, a failed
 * send) must not leave a step open forever. A step with every vote of this
 * node out and no outcome for `after_ns` sends its votes again, marked as a
 * resend: the leader answers a committed or ended step with its outcome
 * and ignores a duplicate of an open one. A step this node failed itself
 * sends its ABORT again, a few times, in case the first was dropped.
 */
void coord_peer_tick(struct daemon *d, int64_t now, int64_t after_ns)
{
	if (coord_is_leader(d)) {
		leader_tick(d, now);
		return;
	}
	for (struct job *job = d->jobs; job; job = job->next) {
		for (struct step *st = job->steps; st; st = st->next) {
			int64_t since = st->asked_ns > st->last_vote_ns ? st->asked_ns
									 : st->last_vote_ns;
			if (now - since < after_ns)
				continue;
			if (st->state == STEP_OPEN && !st->resolving && st->inflight == 0 &&
			    st->votes_in > 0) {
				st->asked_ns = now;
				log_info("coord", "no outcome yet, votes sent again job=%s step=%llu "
					 "waited_seconds=%.3f", job->name, (unsigned long long)st->step,
					 (double)(now - since) / 1e9);
				for (uint32_t r = 0; r < st->world_size; r++)
					if (st->votes[r].durable && !st->votes[r].remote)
						peer_send_vote(d, st, r, &st->votes[r], true);
			} else if (st->state == STEP_FAILED && !st->abort_from_peer &&
				   st->abort_resends < 3) {
				st->asked_ns = now;
				st->abort_resends++;
				peer_send_abort_to(d, 0, job->name, st->step, st->error, st->reason);
			}
		}
	}
}
