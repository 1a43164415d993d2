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
 * Recovery at start-up removes every step directory without a manifest.
 */
#include <dirent.h>
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
#include "peer.h"
#include "peerwire.h"
#include "uploader.h"

#define FAILED_TOMBSTONES 64

bool coord_is_leader(const struct daemon *d)
{
	return d->cfg->nodes <= 1 || d->cfg->node_index == 0;
}

/* LATEST of one job is written by one worker at a time. */
static pthread_mutex_t latest_lock = PTHREAD_MUTEX_INITIALIZER;

static int committed_insert(struct job *job, uint64_t step)
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

static void committed_remove_at(struct job *job, size_t i)
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

/* ---- Removal of step directories ------------------------------------ */

struct removal {
	struct job *job;
	struct step *st;       /* failed step record, or NULL (retention) */
	uint64_t step;
	bool committed;
	int result;
};

/*
 * Move job/name into <root>/.trash with one rename: it is gone from the job
 * at once (deleting big files takes a while), and whatever a crash leaves in
 * the trash is deleted at the next start. Falls back to deleting in place.
 */
static int trash_move(struct daemon *d, struct job *job, int jobfd, const char *name)
{
	char tname[CKPT_JOB_NAME_MAX + 96];

	if (d->trash_fd >= 0) {
		snprintf(tname, sizeof(tname), "%s.%s.%lld.%llu", job ? job->name : "job", name,
			 (long long)now_ns(), (unsigned long long)__atomic_add_fetch(&d->trash_seq, 1, __ATOMIC_RELAXED));
		if (renameat(jobfd, name, d->trash_fd, tname) == 0)
			return 0;
		if (errno == ENOENT)
			return 0;
	}
	return store_remove_tree(jobfd, name);
}

static void trash_run(void *arg)
{
	struct daemon *d = arg;
	char **names = NULL;
	size_t n = 0;
	/* A fresh open, not dup(): a dup shares trash_fd's directory offset,
	 * which the first listing leaves at the end, so every later listing
	 * found nothing and the trash only emptied at the next start. */
	int fd = openat(d->trash_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0) {
		log_warn("retention", "cannot list .trash: %s", strerror(errno));
		return;
	}
	DIR *dir = fdopendir(fd);
	if (!dir) {
		close(fd);
		return;
	}
	for (struct dirent *de; (de = readdir(dir));) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char **nn = realloc(names, (n + 1) * sizeof(*names));
		if (!nn)
			break;
		names = nn;
		names[n] = strdup(de->d_name);
		if (names[n])
			n++;
	}
	closedir(dir);
	for (size_t i = 0; i < n; i++) {
		int r = store_remove_tree(d->trash_fd, names[i]);
		if (r < 0)
			log_warn("retention", "cannot delete .trash/%s: %s", names[i], strerror(-r));
		free(names[i]);
	}
	free(names);
}

static void trash_done(void *arg)
{
	struct daemon *d = arg;

	d->busy--;
	d->trash_running = false;
	if (d->trash_again)
		coord_trash_empty(d);
}

void coord_trash_empty(struct daemon *d)
{
	if (d->trash_fd < 0)
		return;
	if (d->trash_running) {
		d->trash_again = true;
		return;
	}
	d->trash_again = false;
	d->trash_running = true;
	d->busy++;
	if (workers_submit(d->workers, trash_run, trash_done, d) < 0) {
		d->trash_running = false;
		d->busy--;
	}
}

static void removal_run(void *arg)
{
	struct removal *rm = arg;
	char name[32];
	int fd;

	ckpt_step_dirname(name, sizeof(name), rm->step);
	if (rm->committed) {
		/* Uncommit first, durably, so no reader ever sees a committed
		 * step with files missing. */
		fd = openat(rm->job->dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		if (fd >= 0) {
			if (unlinkat(fd, CKPT_MANIFEST_NAME, 0) == 0)
				store_fsync_dir(fd);
			close(fd);
		}
	}
	rm->result = trash_move(rm->job->d, rm->job, rm->job->dirfd, name);
	if (rm->result == -ENOENT)
		rm->result = 0;
	store_fsync_dir(rm->job->dirfd);
}

static void step_free(struct step *st);

static void removal_done(void *arg)
{
	struct removal *rm = arg;
	struct daemon *d = rm->job->d;

	if (rm->result < 0)
		log_warn("retention", "removing step failed job=%s step=%llu error=\"%s\"",
			 rm->job->name, (unsigned long long)rm->step, strerror(-rm->result));
	else
		log_info("retention", "removed job=%s step=%llu reason=%s", rm->job->name,
			 (unsigned long long)rm->step, rm->committed ? "retention" : "failed");
	if (rm->st)
		rm->st->removing = false;
	if (rm->committed)
		rm->job->retention_running--;
	d->busy--;
	struct job *job = rm->job;
	free(rm);
	coord_trash_empty(d);
	job_release(job);
}

static void removal_start(struct job *job, struct step *st, uint64_t step, bool committed)
{
	struct removal *rm = calloc(1, sizeof(*rm));

	if (!rm)
		return;
	rm->job = job;
	rm->st = st;
	rm->step = step;
	rm->committed = committed;
	if (st)
		st->removing = true;
	if (committed)
		job->retention_running++;
	job->d->busy++;
	if (workers_submit(job->d->workers, removal_run, removal_done, rm) < 0) {
		if (st)
			st->removing = false;
		if (committed)
			job->retention_running--;
		job->d->busy--;
		free(rm);
	}
}

static void retention_apply(struct job *job)
{
	uint32_t keep = job->d->cfg->keep_last;
	uint64_t oldest_held = 0;
	size_t held = 0;

	if (keep == 0)
		return;
	/* Oldest first; never the newest, never one being restored, never
	 * one that S3 has not confirmed (uploader_pinned: unknown keeps). */
	for (size_t i = 0; job->n_committed > keep && i + 1 < job->n_committed;) {
		if (job->restore_pins[i]) {
			i++;
			continue;
		}
		if (uploader_pinned(job->d, job->name, job->committed[i])) {
			if (held++ == 0)
				oldest_held = job->committed[i];
			i++;
			continue;
		}
		uint64_t step = job->committed[i];
		committed_remove_at(job, i);
		/* In a group the leader deletes; the others only forget. */
		if (coord_is_leader(job->d))
			removal_start(job, NULL, step, true);
	}
	/* Steps past keep_last that wait for S3: reported, never dropped. */
	size_t excess = job->n_committed > keep ? job->n_committed - keep : 0;
	if (held > excess)
		held = excess;
	uploader_retention_held(job->d, job->name, held, oldest_held);
}

void coord_retention_recheck(struct daemon *d, const char *name)
{
	struct job *job = job_get(d, name, false);

	if (!job) {
		/* No rank is connected: load it for this pass; it goes again
		 * once its removals are done. */
		struct stat sb;
		if (fstatat(d->root_fd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(sb.st_mode))
			return;
		job = job_get(d, name, true);
		if (!job)
			return;
	}
	retention_apply(job);
	job_release(job);
}

/* ---- Jobs ----------------------------------------------------------- */

static int job_load(struct job *job)
{
	uint64_t *steps = NULL;
	size_t n = 0;
	int r = store_list_steps(job->dirfd, true, &steps, &n);

	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		r = committed_insert(job, steps[i]);
		if (r < 0)
			break;
	}
	free(steps);
	return r < 0 ? r : 0;
}

struct job *job_get(struct daemon *d, const char *name, bool create)
{
	struct job *job;

	for (job = d->jobs; job; job = job->next)
		if (strcmp(job->name, name) == 0)
			return job;
	if (!create)
		return NULL;
	if (mkdirat(d->root_fd, name, 0750) == 0)
		store_fsync_dir(d->root_fd);
	else if (errno != EEXIST)
		return NULL;
	job = calloc(1, sizeof(*job));
	if (!job)
		return NULL;
	job->d = d;
	snprintf(job->name, sizeof(job->name), "%s", name);
	job->dirfd = openat(d->root_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (job->dirfd < 0 || job_load(job) < 0) {
		if (job->dirfd >= 0)
			close(job->dirfd);
		free(job->committed);
		free(job->restore_pins);
		free(job);
		return NULL;
	}
	job->next = d->jobs;
	d->jobs = job;
	if (job->n_committed)
		metrics_set(M_NEWEST_COMMITTED_STEP, (double)job_latest(job), job->name, "root");
	return job;
}

static bool job_in_use(const struct job *job)
{
	if (job->clients || job->retention_running)
		return true;
	for (size_t i = 0; i < job->n_committed; i++)
		if (job->restore_pins[i])
			return true;
	for (const struct step *st = job->steps; st; st = st->next)
		if (st->state != STEP_FAILED || st->inflight || st->removing)
			return true;
	return false;
}

static void step_free(struct step *st);

void job_release(struct job *job)
{
	struct daemon *d = job->d;

	if (job_in_use(job) || d->stopping)
		return;
	/* No rank left: failed steps need no tombstones (the next ranks are
	 * a new run), and the job's memory and fd go until a rank returns. */
	while (job->steps) {
		struct step *st = job->steps;
		job->steps = st->next;
		step_free(st);
	}
	/* A job that never committed anything leaves no empty directory
	 * (alone: in a group another node may be about to use it). */
	if (job->n_committed == 0 && d->cfg->nodes <= 1 &&
	    unlinkat(d->root_fd, job->name, AT_REMOVEDIR) == 0)
		store_fsync_dir(d->root_fd);
	for (struct job **p = &d->jobs; *p; p = &(*p)->next) {
		if (*p == job) {
			*p = job->next;
			break;
		}
	}
	close(job->dirfd);
	free(job->committed);
	free(job->restore_pins);
	free(job->left);
	free(job);
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

static void step_free(struct step *st)
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
	st->opened_ns = now_ns();
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

	ckpt_step_dirname(name, sizeof(name), st->step);
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
		goto out;
	}
	/* The step directory's own entry, then LATEST. */
	r = store_fsync_dir(job->dirfd);
	if (r < 0) {
		snprintf(cm->err, sizeof(cm->err), "fsync %s: %s", job->name, strerror(-r));
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
	int64_t now = now_ns();
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
	st->last_vote_ns = now_ns();
	if (d->peer && !coord_is_leader(d)) {
		/* The leader counts; this node forwards its own ranks' votes. */
		if (!st->votes[rank].remote &&
		    peer_send_vote(d, st, rank, &st->votes[rank]) < 0)
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
	cm->started_ns = now_ns();
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

/* ---- Recovery at start-up -------------------------------------------- */

static int recover_job(struct daemon *d, const char *name)
{
	struct job *job;
	uint64_t *steps = NULL;
	size_t n = 0;
	int r;
	int fd = openat(d->root_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0)
		return -errno;
	r = store_list_steps(fd, false, &steps, &n);
	if (r < 0) {
		close(fd);
		return r;
	}
	for (size_t i = 0; i < n; i++) {
		char dn[32];
		struct stat sb;
		int sfd;

		ckpt_step_dirname(dn, sizeof(dn), steps[i]);
		sfd = openat(fd, dn, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		if (sfd < 0)
			continue;
		bool committed = fstatat(sfd, CKPT_MANIFEST_NAME, &sb, AT_SYMLINK_NOFOLLOW) == 0;
		close(sfd);
		if (committed)
			continue;
		/* In a group, other nodes may be writing this step right now;
		 * the leader's start is what ends every open step. */
		if (!coord_is_leader(d))
			continue;
		log_warn("recovery", "removing uncommitted step job=%s step=%llu", name,
			 (unsigned long long)steps[i]);
		r = trash_move(d, NULL, fd, dn);
		if (r < 0)
			log_error("recovery", "cannot remove %s/%s: %s", name, dn, strerror(-r));
	}
	free(steps);
	if (unlinkat(fd, CKPT_LATEST_NAME ".tmp", 0) == 0)
		log_info("recovery", "removed %s/LATEST.tmp", name);
	store_fsync_dir(fd);
	close(fd);

	job = job_get(d, name, false);
	if (!job)
		job = job_get(d, name, true);
	if (!job)
		return -ENOMEM;
	uint64_t latest = 0, newest = job_latest(job);
	if (newest != CKPT_NO_STEP &&
	    (store_read_latest(job->dirfd, &latest) < 0 || latest != newest)) {
		log_info("recovery", "LATEST set job=%s step=%llu", name,
			 (unsigned long long)newest);
		store_write_latest(job->dirfd, newest);
	}
	log_info("recovery", "job=%s committed=%zu latest=%lld", name, job->n_committed,
		 newest == CKPT_NO_STEP ? -1LL : (long long)newest);
	retention_apply(job);
	return 0;
}

int coord_recover(struct daemon *d)
{
	char **jobs = NULL;
	size_t n = 0;
	int r;

	if (mkdirat(d->root_fd, ".trash", 0700) < 0 && errno != EEXIST)
		log_warn("recovery", "cannot create %s/.trash, deleting in place: %s", d->cfg->root,
			 strerror(errno));
	d->trash_fd = openat(d->root_fd, ".trash", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	r = store_list_jobs(d->root_fd, &jobs, &n);

	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		r = recover_job(d, jobs[i]);
		if (r < 0)
			log_error("recovery", "job=%s: %s", jobs[i], strerror(-r));
	}
	store_strv_free(jobs, n);
	return 0;
}

/* ---- The peer link's messages (multi-node groups) -------------------- */

void coord_peer_vote(struct daemon *d, uint32_t node, const struct peer_msg *m)
{
	struct job *job = job_get(d, m->job, true);
	struct step *st;

	if (!job) {
		log_error("coord", "cannot open job=%s for a vote of node %u", m->job, node);
		return;
	}
	if (job_is_committed(job, m->step)) {
		/* A vote that crossed the commit, or a resend. */
		peer_send_committed_to(d, node, job->name, m->step, m->world_size);
		return;
	}
	st = step_find(job, m->step);
	if (st && st->state == STEP_FAILED) {
		peer_send_abort_to(d, node, job->name, m->step, st->error, st->reason);
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

void coord_peer_committed(struct daemon *d, const struct peer_msg *m)
{
	struct job *job = job_get(d, m->job, false);
	struct step *st;

	if (!job || job_is_committed(job, m->step))
		return;
	if (committed_insert(job, m->step) < 0) {
		log_error("coord", "out of memory recording a commit job=%s", job->name);
		return;
	}
	metrics_set(M_NEWEST_COMMITTED_STEP, (double)job_latest(job), job->name, "root");
	st = step_find(job, m->step);
	if (st) {
		double secs = (double)(now_ns() - st->opened_ns) / 1e9;
		log_info("coord", "committed by the leader job=%s step=%llu ranks=%u seconds=%.3f",
			 job->name, (unsigned long long)m->step, m->world_size, secs);
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

void coord_peer_abort(struct daemon *d, uint32_t node, const struct peer_msg *m)
{
	bool leader = coord_is_leader(d);
	struct job *job = job_get(d, m->job, leader);
	struct step *st;

	if (!job || job_is_committed(job, m->step))
		return;
	st = step_find(job, m->step);
	if (!st) {
		if (!leader)
			return;
		/* Recorded as failed, so later votes for it are answered. */
		st = step_get(job, m->step, m->world_size ? m->world_size : 1);
		if (!st)
			return;
	}
	if (st->state != STEP_OPEN)
		return;
	st->abort_from_peer = !leader;
	coord_fail(st, m->status < 0 ? m->status : -CKPT_E_ABORTED, "%s (node %u)",
		   m->reason[0] ? m->reason : "aborted", node);
}

void coord_peer_lost(struct daemon *d, uint32_t node, const char *why)
{
	bool leader = coord_is_leader(d);

	/* The leader: no step open now can get the lost node's votes.
	 * Another node: only the leader's loss matters to it. */
	if (!leader && node != 0)
		return;
	for (struct job *job = d->jobs; job; job = job->next) {
		/* Failing a step may prune older failed ones from the list:
		 * take the open ones first. */
		size_t n = 0, i = 0;
		for (struct step *st = job->steps; st; st = st->next)
			n += st->state == STEP_OPEN;
		if (n == 0)
			continue;
		struct step **open = calloc(n, sizeof(*open));
		if (!open) {
			log_error("coord", "out of memory failing the steps of job=%s", job->name);
			continue;
		}
		for (struct step *st = job->steps; st && i < n; st = st->next)
			if (st->state == STEP_OPEN)
				open[i++] = st;
		for (i = 0; i < n; i++) {
			open[i]->abort_from_peer = !leader;
			coord_fail(open[i], -CKPT_E_ABORTED, "node %u lost (%s): step %llu cannot "
				   "commit", node, why, (unsigned long long)open[i]->step);
		}
		free(open);
	}
}
