/* SPDX-License-Identifier: MIT */
/*
 * The S3 tier (see uploader.h). One queue of tasks, worked on one at a
 * time (the first that is due): scanning a job (what S3 already holds,
 * which root steps still need uploading, which multipart uploads are
 * orphans), uploading a step, deleting a step past S3 retention. Inside an
 * upload, up to s3_parallel units (a part, or a whole small object) are in
 * flight; a unit's bytes are read and digested on a worker thread, then
 * sent by the S3 client on the event loop.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "ckptd.h"
#include "coord.h"
#include "jobs.h"
#include "retention.h"
#include "events.h"
#include "log.h"
#include "metrics.h"
#include "s3.h"
#include "store.h"
#include "uploader.h"
#include "workers.h"
#include "zshard.h"

#define KEY_MAX 1100
/* Delay before a failed task is tried again: doubles from the first to the
 * last; an authentication failure waits the longest at once. */
#define RETRY_FIRST_NS (5ull * 1000000000ull)
#define RETRY_MAX_NS (600ull * 1000000000ull)
#define MANIFEST_MAX ((size_t)1 << 30)

enum task_kind { TASK_SCAN, TASK_UPLOAD, TASK_DELETE };

enum obj_state { OBJ_TODO, OBJ_BUSY, OBJ_PARTS, OBJ_DONE };

struct s3job {
	struct s3job *next;
	char name[CKPT_JOB_NAME_MAX + 1];
	bool scanned;          /* s3_steps is known */
	uint64_t *pins;        /* steps a restore may read from S3 (a step once per pin) */
	size_t n_pins, cap_pins;
	uint64_t *s3_steps;    /* committed on S3, ascending */
	size_t n_s3, cap_s3;
	/* Confirmed on S3 by this ckptd: uploaded (or found there with the
	 * digests the root's manifest names) from bytes that verified.
	 * Ascending; a subset of s3_steps. Only these count as good copies
	 * for either tier's retention. */
	uint64_t *verified;
	size_t n_verified, cap_verified;
	size_t held;           /* root steps past keep_last kept for S3 */
};

/* A chunk of a shard as its rank's index records it. */
struct vchunk {
	uint64_t off;
	uint32_t len, crc;
};

/* A compression unit's output, once compressed (kept until its turn). */
struct cres {
	uint8_t *buf;
	size_t len;
	uint8_t md5[16], sha256[32];
};

struct obj {
	char name[32];         /* the file in the root: rank-000001.shard */
	uint32_t rank;
	bool is_index;
	/* The rank's index SHA-256 as the manifest records it: what the index
	 * file must hash to, and (hex) the metadata of both objects. */
	uint8_t index_sha256[32];
	char index_hex[65];
	struct vchunk *chunks; /* shard: sorted by offset, from the index */
	size_t nchunks;
	char key_name[40];     /* the object: the same, or + ".zst" compressed */
	uint64_t size;
	uint64_t s3_size;      /* size of the object already there, UINT64_MAX: none */
	enum obj_state state;
	/* multipart */
	char *upload_id;
	uint64_t part_size;
	uint32_t nparts, next_part, parts_done;
	char **etags;          /* [nparts] as UploadPart returned them */
	char **old_etags;      /* [nparts] of an unfinished upload found in S3 */
	uint64_t *old_sizes;
	/* compressed (zshard.h): nparts is then the capacity of the arrays
	 * and parts_emitted the parts made so far */
	bool compress;
	struct zpiece *pieces;
	size_t npieces;
	size_t *cunit_first;   /* [ncunits + 1]: first piece of each compression unit */
	size_t ncunits, next_cunit, next_emit;
	struct cres *ready;    /* [ncunits] */
	uint8_t *pending;      /* compressed bytes not yet in a part */
	size_t pending_len;
	bool pending_digested; /* pending is one unit's output: its digests hold */
	uint8_t pending_md5[16], pending_sha256[32];
	uint64_t z_total;
	uint32_t parts_emitted;
	bool final_emitted;
};

struct upload_id_entry {
	char *key, *upload_id;
};

struct task {
	struct task *next;
	struct uploader *u;
	enum task_kind kind;
	struct s3job *job;
	uint64_t step;
	uint64_t not_before_ns;
	unsigned failures;
	bool running;
	int phase;
	unsigned ops;          /* S3 operations and worker reads in flight */
	int err;
	char why[600];
	char *marker;          /* listing continuation */
	/* upload */
	int stepfd;
	char *manifest;
	size_t manifest_len;
	struct obj *objs;
	size_t n_objs;
	uint64_t bytes_total, bytes_sent;
	unsigned parts_reused;     /* found in S3 after a restart, not sent again */
	uint64_t started_ns;
	/* scan and upload: multipart uploads found */
	struct upload_id_entry *uploads;
	size_t n_uploads, cap_uploads, next_abort;
	/* delete: keys listed */
	char **keys;
	size_t n_keys, next_key;
};

struct unit {
	struct task *t;
	struct obj *o;         /* NULL: the manifest or LATEST */
	uint32_t part;         /* 1-based; 0: a whole object */
	uint64_t off, len;
	uint8_t *buf;
	uint8_t md5[16], sha256[32];
	int err;
	/* a compression unit: pieces [first, last) of o, compressed into buf */
	bool compress;
	size_t cunit, first, last;
	int level;
	bool digest_only;      /* buf is given: only compute its digests */
	char why[256];         /* a verification failure, when err is -EBADMSG */
};

struct uploader {
	struct daemon *d;
	s3_client *c;
	struct s3_config cfg;
	struct s3_url url;
	int epfd;              /* the client's sockets and our timers */
	int client_tfd, retry_tfd;
	struct s3job *jobs;
	struct task *head, *tail;
	unsigned units;        /* parts or small objects in flight */
	bool closing;
	uint64_t backoff_ns;
};

enum { TAG_CLIENT_TIMER = 1, TAG_RETRY_TIMER = 2, TAG_FD = 3 };
#define EV_DATA(tag, fd) (((uint64_t)(tag) << 32) | (uint32_t)(fd))

static void pump(struct uploader *u);
static void task_step(struct task *t);

/* ---- keys ----------------------------------------------------------------- */

static void job_key(const struct uploader *u, const char *job, char *out, size_t cap)
{
	if (u->url.prefix[0])
		snprintf(out, cap, "%s/%s", u->url.prefix, job);
	else
		snprintf(out, cap, "%s", job);
}

static void step_key(const struct uploader *u, const char *job, uint64_t step,
		     const char *name, char *out, size_t cap)
{
	char jk[KEY_MAX], dname[32];

	job_key(u, job, jk, sizeof(jk));
	if (ckpt_step_dirname(dname, sizeof(dname), step) < 0) {
		/* task_new admits no such step. Were one to come: a key every
		 * request refuses (a control byte), never a prefix of others. */
		snprintf(out, cap, "\n");
		return;
	}
	snprintf(out, cap, "%s/%s/%s", jk, dname, name ? name : "");
}

/* The step of a key under the job's prefix ("<jk>/step-N/..."), or 0. */
static uint64_t key_step(const struct uploader *u, const char *job, const char *key,
			 const char **rest)
{
	char jk[KEY_MAX], dname[32];
	uint64_t step;

	job_key(u, job, jk, sizeof(jk));
	size_t n = strlen(jk);
	if (strncmp(key, jk, n) != 0 || key[n] != '/')
		return 0;
	const char *s = key + n + 1, *slash = strchr(s, '/');
	if (!slash || (size_t)(slash - s) >= sizeof(dname))
		return 0;
	memcpy(dname, s, (size_t)(slash - s));
	dname[slash - s] = '\0';
	if (ckpt_step_dirname_parse(dname, &step) < 0)
		return 0;
	if (rest)
		*rest = slash + 1;
	return step;
}

/* ---- jobs and policy --------------------------------------------------------- */

static struct s3job *job_find(struct uploader *u, const char *name, bool create)
{
	for (struct s3job *j = u->jobs; j; j = j->next)
		if (!strcmp(j->name, name))
			return j;
	if (!create)
		return NULL;
	struct s3job *j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	snprintf(j->name, sizeof(j->name), "%s", name);
	j->next = u->jobs;
	u->jobs = j;
	return j;
}

static bool steps_has(const uint64_t *v, size_t n, uint64_t step)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == step)
			return true;
	return false;
}

/* Insert into an ascending set of steps. */
static int steps_insert(uint64_t **v, size_t *n, size_t *cap, uint64_t step)
{
	if (steps_has(*v, *n, step))
		return 0;
	if (*n == *cap) {
		size_t ncap = *cap ? 2 * *cap : 16;
		uint64_t *nv = realloc(*v, ncap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		*v = nv;
		*cap = ncap;
	}
	size_t i = *n;
	while (i > 0 && (*v)[i - 1] > step) {
		(*v)[i] = (*v)[i - 1];
		i--;
	}
	(*v)[i] = step;
	(*n)++;
	return 0;
}

static void steps_remove(uint64_t *v, size_t *n, uint64_t step)
{
	for (size_t i = 0; i < *n; i++)
		if (v[i] == step) {
			memmove(v + i, v + i + 1, (*n - i - 1) * sizeof(uint64_t));
			(*n)--;
			return;
		}
}

static int s3_steps_insert(struct s3job *j, uint64_t step)
{
	return steps_insert(&j->s3_steps, &j->n_s3, &j->cap_s3, step);
}

static void s3_steps_remove(struct s3job *j, uint64_t step)
{
	steps_remove(j->s3_steps, &j->n_s3, step);
	steps_remove(j->verified, &j->n_verified, step);
}

/*
 * Whether S3 already holds enough good copies newer than `step` that its
 * retention would not keep `step`: s3_keep_last verified newer steps, and
 * not a multiple of s3_keep_every. Steps that are only listed (not
 * verified) never count, so unverified newer ones never push the last good
 * copies out.
 */
static bool superseded(const struct uploader *u, const struct s3job *j, uint64_t step)
{
	const struct ckptd_config *cfg = u->d->cfg;
	size_t newer = 0;

	if (cfg->s3_keep_last == 0 || (cfg->s3_keep_every && step % cfg->s3_keep_every == 0))
		return false;
	for (size_t i = 0; i < j->n_verified; i++)
		if (j->verified[i] > step)
			newer++;
	return newer >= cfg->s3_keep_last;
}

/*
 * Whether S3 retention keeps `step` among `all` (ascending, every step
 * committed anywhere that the policy weighs): the newest s3_keep_last, the
 * multiples of s3_keep_every, and always the newest.
 */
static bool policy_keeps(const struct uploader *u, const uint64_t *all, size_t n, uint64_t step)
{
	const struct ckptd_config *cfg = u->d->cfg;
	size_t newer = 0;

	if (cfg->s3_keep_every && step % cfg->s3_keep_every == 0)
		return true;
	if (cfg->s3_keep_last == 0)
		return true;
	for (size_t i = 0; i < n; i++)
		if (all[i] > step)
			newer++;
	return newer < cfg->s3_keep_last;
}

/* ---- queue ----------------------------------------------------------------- */

static struct task *task_new(struct uploader *u, enum task_kind kind, struct s3job *j,
			     uint64_t step)
{
	struct task *t;

	/* Every key of a task is named after its step (step_key). */
	if (step > CKPT_STEP_MAX) {
		log_error("s3", "not queueing work job=%s step=%" PRIu64 ": not a step number",
			  j->name, step);
		return NULL;
	}
	t = calloc(1, sizeof(*t));
	if (!t) {
		log_error("s3", "out of memory queueing work job=%s step=%" PRIu64, j->name, step);
		return NULL;
	}
	t->u = u;
	t->kind = kind;
	t->job = j;
	t->step = step;
	t->stepfd = -1;
	if (u->tail)
		u->tail->next = t;
	else
		u->head = t;
	u->tail = t;
	return t;
}

static struct task *task_find(const struct uploader *u, enum task_kind kind, const char *job,
			      uint64_t step)
{
	for (struct task *t = u->head; t; t = t->next)
		if (t->kind == kind && t->step == step && !strcmp(t->job->name, job))
			return t;
	return NULL;
}

static void task_reset(struct task *t)
{
	if (t->stepfd >= 0)
		close(t->stepfd);
	t->stepfd = -1;
	free(t->manifest);
	t->manifest = NULL;
	for (size_t i = 0; i < t->n_objs; i++) {
		struct obj *o = &t->objs[i];
		for (uint32_t p = 0; p < o->nparts; p++) {
			if (o->etags)
				free(o->etags[p]);
			if (o->old_etags)
				free(o->old_etags[p]);
		}
		free(o->etags);
		free(o->old_etags);
		free(o->old_sizes);
		free(o->upload_id);
		for (size_t c = 0; o->ready && c < o->ncunits; c++)
			free(o->ready[c].buf);
		free(o->ready);
		free(o->pieces);
		free(o->cunit_first);
		free(o->pending);
		free(o->chunks);
	}
	free(t->objs);
	t->objs = NULL;
	t->n_objs = 0;
	for (size_t i = 0; i < t->n_uploads; i++) {
		free(t->uploads[i].key);
		free(t->uploads[i].upload_id);
	}
	free(t->uploads);
	t->uploads = NULL;
	t->n_uploads = t->cap_uploads = t->next_abort = 0;
	for (size_t i = 0; i < t->n_keys; i++)
		free(t->keys[i]);
	free(t->keys);
	t->keys = NULL;
	t->n_keys = t->next_key = 0;
	free(t->marker);
	t->marker = NULL;
	t->phase = 0;
	t->err = 0;
	t->why[0] = '\0';
	t->bytes_total = t->bytes_sent = 0;
	t->parts_reused = 0;
	t->running = false;
}

static void task_unlink(struct task *t)
{
	struct uploader *u = t->u;
	struct task **pp = &u->head, *prev = NULL;

	while (*pp && *pp != t) {
		prev = *pp;
		pp = &(*pp)->next;
	}
	if (!*pp)
		return;
	*pp = t->next;
	if (u->tail == t)
		u->tail = prev;
	t->next = NULL;
}

static void task_free(struct task *t)
{
	task_reset(t);
	free(t);
}

static void queue_metrics(struct uploader *u)
{
	unsigned n = 0;

	for (struct task *t = u->head; t; t = t->next)
		n += t->kind == TASK_UPLOAD;
	metrics_set(M_QUEUE_DEPTH, n, "s3");
}

static bool job_has_tasks(const struct uploader *u, const struct s3job *j)
{
	for (const struct task *t = u->head; t; t = t->next)
		if (t->job == j)
			return true;
	return false;
}

/* The task is over (done, or dropped): unlink, free, go on. The job's last
 * task lets it go, if nothing else of this daemon uses it. */
static void task_finish(struct task *t)
{
	struct uploader *u = t->u;
	struct s3job *j = t->job;

	task_unlink(t);
	task_free(t);
	queue_metrics(u);
	if (!job_has_tasks(u, j)) {
		/* job_release forgets j (uploader_job_released): a copy. */
		char name[sizeof(j->name)];
		snprintf(name, sizeof(name), "%s", j->name);
		coord_job_idle(u->d, name);
	}
	pump(u);
}

static const char *error_kind(int err)
{
	switch (err) {
	case -EACCES: return "auth";
	case -ENOENT: return "not_found";
	case -EAGAIN: return "throttled";
	case -EIO: return "server";
	case -ECONNREFUSED: case -ECONNRESET: case -ETIMEDOUT: case -EHOSTUNREACH:
	case -ENETUNREACH: case -EPIPE:
		return "transport";
	default: return "other";
	}
}

/* Record the first failure of the task; it ends once nothing is in flight. */
static void task_fail(struct task *t, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void task_fail(struct task *t, int err, const char *fmt, ...)
{
	va_list ap;

	if (t->err)
		return;
	t->err = err < 0 ? err : -EIO;
	va_start(ap, fmt);
	vsnprintf(t->why, sizeof(t->why), fmt, ap);
	va_end(ap);
}

static void arm_retry_timer(struct uploader *u)
{
	uint64_t soonest = 0;

	for (struct task *t = u->head; t; t = t->next)
		if (!t->running && t->not_before_ns && (!soonest || t->not_before_ns < soonest))
			soonest = t->not_before_ns;
	struct itimerspec its = { 0 };
	if (soonest) {
		uint64_t now = (uint64_t)ckpt_mono_ns(), wait = soonest > now ? soonest - now : 1;
		its.it_value.tv_sec = (time_t)(wait / 1000000000ull);
		its.it_value.tv_nsec = (long)(wait % 1000000000ull);
	}
	timerfd_settime(u->retry_tfd, 0, &its, NULL);
}

/* A failed task, once idle: log, count, and try it again later. */
static void task_failed(struct task *t)
{
	struct uploader *u = t->u;
	const char *what = t->kind == TASK_SCAN ? "scan" : t->kind == TASK_UPLOAD ? "upload" : "delete";

	t->failures++;
	if (t->err == -EACCES)
		u->backoff_ns = RETRY_MAX_NS;
	else
		u->backoff_ns = u->backoff_ns ? u->backoff_ns * 2 : RETRY_FIRST_NS;
	if (u->backoff_ns > RETRY_MAX_NS)
		u->backoff_ns = RETRY_MAX_NS;
	metrics_inc(M_S3_ERRORS_TOTAL, error_kind(t->err));
	log_error("s3", "%s failed job=%s step=%" PRIu64 " attempt=%u retry_in_s=%.0f error=\"%s\"%s",
		  what, t->job->name, t->step, t->failures, (double)u->backoff_ns / 1e9, t->why,
		  t->err == -EACCES ? " hint=\"check the S3 credentials and the bucket policy\"" : "");
	if (t->kind == TASK_UPLOAD)
		events_s3_upload_failed(t->job->name, t->step, t->failures, t->why);
	task_reset(t);
	t->not_before_ns = (uint64_t)ckpt_mono_ns() + u->backoff_ns;
	/* Behind the others: one broken step does not hold up the rest. */
	task_unlink(t);
	if (u->tail)
		u->tail->next = t;
	else
		u->head = t;
	u->tail = t;
	arm_retry_timer(u);
	/* S3's state stays unknown: count (and report) what the root keeps
	 * for it, once per episode. */
	if (t->kind == TASK_SCAN && !t->job->held)
		coord_retention_recheck(u->d, t->job->name);
	pump(u);
}

/* An operation of t completed: go on, or end a failed task once idle. */
static void task_op_done(struct task *t)
{
	t->ops--;
	if (t->u->closing)
		return;
	if (t->err) {
		if (t->ops == 0)
			task_failed(t);
		return;
	}
	task_step(t);
}

static void count_attempts(const struct s3_result *res)
{
	if (res->attempts > 1)
		metrics_add(M_S3_RETRIES_TOTAL, (double)(res->attempts - 1));
}

/* ---- listing helpers ------------------------------------------------------------ */

static int uploads_add(struct task *t, const char *key, const char *id)
{
	if (t->n_uploads == t->cap_uploads) {
		size_t cap = t->cap_uploads ? 2 * t->cap_uploads : 8;
		struct upload_id_entry *v = realloc(t->uploads, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		t->uploads = v;
		t->cap_uploads = cap;
	}
	t->uploads[t->n_uploads].key = strdup(key);
	t->uploads[t->n_uploads].upload_id = strdup(id);
	if (!t->uploads[t->n_uploads].key || !t->uploads[t->n_uploads].upload_id) {
		free(t->uploads[t->n_uploads].key);
		free(t->uploads[t->n_uploads].upload_id);
		return -ENOMEM;
	}
	t->n_uploads++;
	return 0;
}

/* Keep the listing's continuation; returns whether there is more. */
static bool page_next(struct task *t, const struct s3_list *l)
{
	free(t->marker);
	t->marker = NULL;
	if (l && l->truncated && l->next_marker && l->next_marker[0]) {
		t->marker = strdup(l->next_marker);
		return t->marker != NULL;
	}
	return false;
}

static int list_objects(struct task *t, const char *prefix, s3_done_fn done)
{
	struct uploader *u = t->u;
	struct s3_list_args a = { .prefix = prefix, .marker = t->marker };
	int r = s3_list_objects(u->c, u->url.bucket, &a, done, t);

	if (r == 0)
		t->ops++;
	return r;
}

/* ---- scan ------------------------------------------------------------------------ */

enum { SCAN_LIST_STEPS = 0, SCAN_LIST_UPLOADS, SCAN_PLAN, SCAN_ABORT, SCAN_DONE };

static void scan_steps_done(const struct s3_result *res, void *arg)
{
	struct task *t = arg;
	struct uploader *u = t->u;

	count_attempts(res);
	if (res->err) {
		task_fail(t, res->err, "listing s3://%s: %s", u->url.bucket, res->error);
	} else {
		for (size_t i = 0; res->list && i < res->list->n_objects; i++) {
			const char *rest;
			uint64_t step = key_step(u, t->job->name, res->list->objects[i].key, &rest);
			if (step && !strcmp(rest, CKPT_MANIFEST_NAME) && s3_steps_insert(t->job, step) < 0)
				task_fail(t, -ENOMEM, "out of memory");
		}
		if (!page_next(t, res->list))
			t->phase = SCAN_LIST_UPLOADS;
	}
	task_op_done(t);
}

/*
 * A page of ListMultipartUploads: collect the uploads into t->uploads and
 * keep the continuation. Returns true once the last page is in (and the
 * task has not failed).
 */
static bool uploads_page(struct task *t, const struct s3_result *res)
{
	count_attempts(res);
	if (res->err) {
		task_fail(t, res->err, "listing multipart uploads in s3://%s: %s", t->u->url.bucket,
			  res->error);
		return false;
	}
	for (size_t i = 0; res->list && i < res->list->n_uploads; i++)
		if (uploads_add(t, res->list->uploads[i].key, res->list->uploads[i].upload_id) < 0)
			task_fail(t, -ENOMEM, "out of memory");
	/* Pages go by key marker (the rest of a key's uploads, if a page
	 * ends among them, are on the next listing). */
	return !page_next(t, res->list) && !t->err;
}

static void scan_uploads_done(const struct s3_result *res, void *arg)
{
	struct task *t = arg;

	if (uploads_page(t, res))
		t->phase = SCAN_PLAN;
	task_op_done(t);
}

static void queue_deletions(struct uploader *u, struct s3job *j);

/* Decide what to upload from what the root holds and S3 lacks. */
static void scan_plan(struct task *t)
{
	struct uploader *u = t->u;
	struct s3job *j = t->job;
	_cleanup_close_ int jobfd = openat(u->d->root_fd, j->name,
					   O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	uint64_t *root = NULL, *all = NULL;
	size_t n_root = 0;

	j->scanned = true;
	if (jobfd >= 0 && store_list_steps(jobfd, true, &root, &n_root) < 0) {
		root = NULL;
		n_root = 0;
	}
	/* What the policy weighs: the root's steps and the confirmed ones.
	 * Steps S3 merely lists (say, of an earlier run with higher step
	 * numbers) must not keep the root's newest from going up. */
	all = calloc(n_root + j->n_verified + 1, sizeof(*all));
	if (!all) {
		free(root);
		task_fail(t, -ENOMEM, "out of memory");
		return;
	}
	size_t n_all = 0;
	for (size_t i = 0; i < n_root; i++)
		all[n_all++] = root[i];
	for (size_t i = 0; i < j->n_verified; i++)
		if (!steps_has(root, n_root, j->verified[i]))
			all[n_all++] = j->verified[i];
	/* In a multi-node group the leader uploads, deletes and aborts; the
	 * others only keep S3's view for their restores. */
	bool leader = coord_is_leader(u->d);
	/* Newest first: the step a restore wants most is safe soonest. */
	unsigned queued = 0;
	for (size_t i = leader ? n_root : 0; i-- > 0;) {
		uint64_t s = root[i];
		/* A step S3 lists but this ckptd has not verified is sent
		 * again: its objects count only if their digests match. */
		if (steps_has(j->verified, j->n_verified, s) || !policy_keeps(u, all, n_all, s) ||
		    task_find(u, TASK_UPLOAD, j->name, s))
			continue;
		if (task_new(u, TASK_UPLOAD, j, s))
			queued++;
	}
	if (j->n_s3)
		metrics_set(M_NEWEST_COMMITTED_STEP, (double)j->s3_steps[j->n_s3 - 1], j->name, "s3");
	log_info("s3", "scanned job=%s s3_steps=%zu root_steps=%zu to_upload=%u open_uploads=%zu",
		 j->name, j->n_s3, n_root, queued, t->n_uploads);
	free(root);
	free(all);
	queue_metrics(u);
	if (!leader) {
		t->phase = SCAN_DONE;
		return;
	}
	queue_deletions(u, j);
	t->phase = SCAN_ABORT;
	/* S3's state is known now: what the root kept for it is counted. */
	coord_retention_recheck(u->d, j->name);
}

static void abort_done(const struct s3_result *res, void *arg)
{
	struct task *t = arg;

	count_attempts(res);
	/* An upload that is already gone is what we wanted. */
	if (res->err && res->err != -ENOENT)
		log_warn("s3", "abort of a multipart upload failed job=%s error=\"%s\"",
			 t->job->name, res->error);
	task_op_done(t);
}

static void scan_step(struct task *t)
{
	struct uploader *u = t->u;
	char jk[KEY_MAX], prefix[KEY_MAX + 8];
	int r = 0;

	job_key(u, t->job->name, jk, sizeof(jk));
	switch (t->phase) {
	case SCAN_LIST_STEPS:
		snprintf(prefix, sizeof(prefix), "%s/step-", jk);
		r = list_objects(t, prefix, scan_steps_done);
		break;
	case SCAN_LIST_UPLOADS: {
		snprintf(prefix, sizeof(prefix), "%s/", jk);
		struct s3_list_args a = { .prefix = prefix, .marker = t->marker };
		r = s3_list_multipart_uploads(u->c, u->url.bucket, &a, scan_uploads_done, t);
		if (r == 0)
			t->ops++;
		break;
	}
	case SCAN_PLAN:
		scan_plan(t);
		if (t->err) {
			task_failed(t);
			return;
		}
		if (t->phase == SCAN_DONE) {
			task_finish(t);
			return;
		}
		/* fall through */
	case SCAN_ABORT:
		/* One at a time: orphans are rare, and this keeps it simple. */
		while (t->next_abort < t->n_uploads) {
			struct upload_id_entry *e = &t->uploads[t->next_abort++];
			uint64_t s = key_step(u, t->job->name, e->key, NULL);
			if (s && task_find(u, TASK_UPLOAD, t->job->name, s))
				continue; /* the upload task resumes it */
			log_info("s3", "aborting orphaned multipart upload job=%s key=%s", t->job->name,
				 e->key);
			r = s3_abort_multipart(u->c, u->url.bucket, e->key, e->upload_id,
					       abort_done, t);
			if (r == 0) {
				t->ops++;
				return;
			}
		}
		t->phase = SCAN_DONE;
		task_finish(t);
		return;
	default:
		return;
	}
	if (r < 0) {
		task_fail(t, r, "starting a request: %s", strerror(-r));
		if (t->ops == 0)
			task_failed(t);
	}
}

/* ---- retention on S3 ----------------------------------------------------------------- */

static void queue_deletions(struct uploader *u, struct s3job *j)
{
	if (u->d->cfg->s3_keep_last == 0 || j->n_s3 < 2)
		return;
	/* Only steps with s3_keep_last verified newer ones go (so never the
	 * newest good copy); a copy since we remove as we go. */
	uint64_t *all = malloc(j->n_s3 * sizeof(*all));
	size_t n = j->n_s3;
	if (!all)
		return;
	memcpy(all, j->s3_steps, n * sizeof(*all));
	for (size_t i = 0; i + 1 < n; i++) {
		if (!superseded(u, j, all[i]) || task_find(u, TASK_DELETE, j->name, all[i]) ||
		    task_find(u, TASK_UPLOAD, j->name, all[i]) || steps_has(j->pins, j->n_pins, all[i]))
			continue;
		/* No longer counted as on S3 from now on: a restore will not
		 * pick it, and the manifest goes first. */
		s3_steps_remove(j, all[i]);
		task_new(u, TASK_DELETE, j, all[i]);
	}
	free(all);
}

enum { DEL_MANIFEST = 0, DEL_LIST, DEL_KEYS, DEL_DONE };

static void del_manifest_done(const struct s3_result *res, void *arg)
{
	struct task *t = arg;

	count_attempts(res);
	if (res->err && res->err != -ENOENT)
		task_fail(t, res->err, "%s", res->error);
	else
		t->phase = DEL_LIST;
	task_op_done(t);
}

static void del_list_done(const struct s3_result *res, void *arg)
{
	struct task *t = arg;

	count_attempts(res);
	if (res->err) {
		task_fail(t, res->err, "%s", res->error);
	} else {
		size_t n = res->list ? res->list->n_objects : 0;
		t->keys = calloc(n ? n : 1, sizeof(char *));
		if (!t->keys) {
			task_fail(t, -ENOMEM, "out of memory");
		} else {
			for (size_t i = 0; i < n; i++)
				if ((t->keys[t->n_keys] = strdup(res->list->objects[i].key)))
					t->n_keys++;
			t->next_key = 0;
			t->phase = n ? DEL_KEYS : DEL_DONE;
		}
	}
	task_op_done(t);
}

static void del_key_done(const struct s3_result *res, void *arg)
{
	struct task *t = arg;

	count_attempts(res);
	if (res->err && res->err != -ENOENT)
		task_fail(t, res->err, "%s", res->error);
	task_op_done(t);
}

static void delete_step(struct task *t)
{
	struct uploader *u = t->u;
	char key[KEY_MAX + 64];
	int r = 0;

	switch (t->phase) {
	case DEL_MANIFEST:
		step_key(u, t->job->name, t->step, CKPT_MANIFEST_NAME, key, sizeof(key));
		r = s3_delete_object(u->c, u->url.bucket, key, del_manifest_done, t);
		if (r == 0)
			t->ops++;
		break;
	case DEL_LIST:
		for (size_t i = 0; i < t->n_keys; i++)
			free(t->keys[i]);
		free(t->keys);
		t->keys = NULL;
		t->n_keys = 0;
		step_key(u, t->job->name, t->step, NULL, key, sizeof(key));
		r = list_objects(t, key, del_list_done);
		break;
	case DEL_KEYS:
		if (t->next_key < t->n_keys) {
			r = s3_delete_object(u->c, u->url.bucket, t->keys[t->next_key++],
					     del_key_done, t);
			if (r == 0)
				t->ops++;
		} else {
			/* Listed again until nothing is left under the step. */
			t->phase = DEL_LIST;
			delete_step(t);
			return;
		}
		break;
	case DEL_DONE:
		log_info("s3", "removed by retention job=%s step=%" PRIu64, t->job->name, t->step);
		task_finish(t);
		return;
	}
	if (r < 0) {
		task_fail(t, r, "starting a request: %s", strerror(-r));
		if (t->ops == 0)
			task_failed(t);
	}
}

/* ---- upload ---------------------------------------------------------------------------- */

enum { UP_OPEN = 0, UP_INDEX, UP_LIST, UP_LIST_UPLOADS, UP_OBJECTS, UP_MANIFEST, UP_LATEST, UP_CLEANUP_LIST,
       UP_CLEANUP_ABORT, UP_DONE };

/* Pieces and compression units of a shard that goes compressed. */
static int compress_plan(struct uploader *u, struct obj *o, const struct ckpt_table *table,
			 uint64_t chunk_bytes)
{
	uint64_t unit_bytes = u->d->cfg->s3_part_bytes, acc = 0;
	int r = zshard_plan(table, o->size, chunk_bytes, 1, &o->pieces, &o->npieces);

	if (r < 0)
		return r;
	o->compress = true;
	o->cunit_first = calloc(o->npieces + 1, sizeof(size_t));
	if (!o->cunit_first)
		return -ENOMEM;
	for (size_t i = 0; i < o->npieces; i++) {
		if (i == 0 || acc + o->pieces[i].raw_len > unit_bytes) {
			o->cunit_first[o->ncunits++] = i;
			acc = 0;
		}
		acc += o->pieces[i].raw_len;
	}
	o->cunit_first[o->ncunits] = o->npieces;
	o->ready = calloc(o->ncunits ? o->ncunits : 1, sizeof(*o->ready));
	/* At most a part per unit, and one more for a footer alone. */
	o->nparts = (uint32_t)o->ncunits + 1;
	o->etags = calloc(o->nparts, sizeof(char *));
	return o->ready && o->etags ? 0 : -ENOMEM;
}

static int upload_open(struct task *t)
{
	struct uploader *u = t->u;
	char dname[32];
	struct ckpt_manifest m = { 0 };
	char why[256] = "";
	int r;

	r = ckpt_step_dirname(dname, sizeof(dname), t->step);
	if (r < 0)
		return r;
	_cleanup_close_ int jobfd = openat(u->d->root_fd, t->job->name,
					   O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (jobfd < 0)
		return -errno;
	t->stepfd = openat(jobfd, dname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (t->stepfd < 0)
		return -errno;
	r = store_read_file(t->stepfd, CKPT_MANIFEST_NAME, MANIFEST_MAX, (void **)&t->manifest,
			    &t->manifest_len);
	if (r < 0)
		return r;
	r = ckpt_manifest_decode(t->manifest, t->manifest_len, &m, why, sizeof(why));
	if (r < 0) {
		snprintf(t->why, sizeof(t->why), "%s/%s: %s", dname, CKPT_MANIFEST_NAME, why);
		return r;
	}
	t->objs = calloc(2 * (size_t)m.world_size, sizeof(*t->objs));
	if (!t->objs) {
		ckpt_manifest_free(&m);
		return -ENOMEM;
	}
	t->n_objs = 2 * (size_t)m.world_size;
	bool compress = u->d->cfg->s3_compress != 0;
	for (uint32_t i = 0; i < m.world_size && r == 0; i++) {
		struct obj *s = &t->objs[i], *x = &t->objs[m.world_size + i];
		ckpt_shard_filename(s->name, sizeof(s->name), i);
		ckpt_index_filename(x->name, sizeof(x->name), i);
		s->rank = x->rank = i;
		x->is_index = true;
		memcpy(s->index_sha256, m.ranks[i].index_sha256, 32);
		memcpy(x->index_sha256, m.ranks[i].index_sha256, 32);
		ckpt_hex(s->index_hex, s->index_sha256, 32);
		memcpy(x->index_hex, s->index_hex, sizeof(x->index_hex));
		snprintf(s->key_name, sizeof(s->key_name), "%s%s", s->name, compress ? ZSHARD_SUFFIX : "");
		snprintf(x->key_name, sizeof(x->key_name), "%s", x->name);
		s->size = m.ranks[i].shard_bytes;
		x->size = m.ranks[i].index_bytes;
		s->s3_size = x->s3_size = UINT64_MAX;
		t->bytes_total += s->size + x->size;
		if (compress)
			r = compress_plan(u, s, &m.ranks[i].table, m.chunk_bytes);
	}
	if (r == 0 && compress) {
		/* The S3 manifest says how its shards are stored. */
		char *json = NULL;
		size_t len = 0;
		snprintf(m.s3_encoding, sizeof(m.s3_encoding), "%s", ZSHARD_ENCODING);
		r = ckpt_manifest_encode(&m, &json, &len);
		if (r == 0) {
			free(t->manifest);
			t->manifest = json;
			t->manifest_len = len;
		}
	}
	t->bytes_total += t->manifest_len;
	ckpt_manifest_free(&m);
	return r;
}

static struct obj *obj_by_key(struct task *t, const char *key)
{
	const char *rest;

	if (key_step(t->u, t->job->name, key, &rest) != t->step)
		return NULL;
	for (size_t i = 0; i < t->n_objs; i++)
		if (!strcmp(t->objs[i].key_name, rest))
			return &t->objs[i];
	return NULL;
}

static void up_list_done(const struct s3_result *res, void *arg)
{
	struct task *t = arg;

	count_attempts(res);
	if (res->err) {
		task_fail(t, res->err, "listing s3://%s: %s", t->u->url.bucket, res->error);
	} else {
		for (size_t i = 0; res->list && i < res->list->n_objects; i++) {
			struct obj *o = obj_by_key(t, res->list->objects[i].key);
			if (o)
				o->s3_size = res->list->objects[i].size;
		}
		if (!page_next(t, res->list))
			t->phase = UP_LIST_UPLOADS;
	}
	task_op_done(t);
}

static void up_uploads_done(const struct s3_result *res, void *arg)
{
	struct task *t = arg;

	count_attempts(res);
	if (res->err) {
		task_fail(t, res->err, "listing multipart uploads in s3://%s: %s", t->u->url.bucket,
			  res->error);
	} else {
		for (size_t i = 0; res->list && i < res->list->n_uploads; i++) {
			struct obj *o = obj_by_key(t, res->list->uploads[i].key);
			if (o && !o->upload_id && o->s3_size == UINT64_MAX)
				o->upload_id = strdup(res->list->uploads[i].upload_id);
		}
		if (!page_next(t, res->list))
			t->phase = UP_OBJECTS;
	}
	task_op_done(t);
}

static int read_exact(int fd, void *buf, uint64_t len, uint64_t off)
{
	for (uint64_t done = 0; done < len;) {
		ssize_t n = pread(fd, (uint8_t *)buf + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -ENODATA;
		done += (uint64_t)n;
	}
	return 0;
}

/* CRC-32C of len bytes of fd at off, chained onto crc. */
static int crc_file(int fd, uint64_t off, uint64_t len, uint32_t *crc)
{
	uint8_t tmp[65536];

	while (len) {
		size_t n = len < sizeof(tmp) ? (size_t)len : sizeof(tmp);
		int r = read_exact(fd, tmp, n, off);
		if (r < 0)
			return r;
		*crc = ckpt_crc32c(*crc, tmp, n);
		off += n;
		len -= n;
	}
	return 0;
}

/*
 * Worker thread: check that buf, the bytes [off, off + len) of shard o
 * about to leave for S3, match the chunk CRCs of the rank's index. A chunk
 * that reaches outside the range is completed from the file (fd), so every
 * byte in buf is covered by a whole chunk's check. -EBADMSG with the chunk
 * in why on a mismatch.
 */
static int verify_range(const struct obj *o, int fd, const uint8_t *buf, uint64_t off,
			uint64_t len, char *why, size_t cap)
{
	size_t lo = 0, hi = o->nchunks;
	uint64_t end = off + len;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (o->chunks[mid].off + o->chunks[mid].len <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < o->nchunks && o->chunks[i].off < end; i++) {
		const struct vchunk *c = &o->chunks[i];
		uint64_t a = c->off > off ? c->off : off;
		uint64_t b = c->off + c->len < end ? c->off + c->len : end;
		uint32_t crc = 0;
		int r = 0;

		if (c->off < off)
			r = crc_file(fd, c->off, off - c->off, &crc);
		if (r == 0 && b > a)
			crc = ckpt_crc32c(crc, buf + (a - off), (size_t)(b - a));
		if (r == 0 && c->off + c->len > end)
			r = crc_file(fd, end, c->off + c->len - end, &crc);
		if (r < 0)
			return r;
		if (crc != c->crc) {
			snprintf(why, cap, "rank=%u file=%s chunk_offset=%" PRIu64 " chunk_bytes=%u "
				 "crc32c=%08x index_crc32c=%08x", o->rank, o->name, c->off, c->len, crc,
				 c->crc);
			return -EBADMSG;
		}
	}
	return 0;
}

/* Worker thread: compress pieces [first, last) of the shard into w->buf. */
static void unit_compress_run(struct unit *w)
{
	struct obj *o = w->o;
	size_t cap = 0, maxraw = 0;

	for (size_t i = w->first; i < w->last; i++) {
		cap += zshard_bound(o->pieces[i].raw_len);
		if (o->pieces[i].raw_len > maxraw)
			maxraw = o->pieces[i].raw_len;
	}
	uint8_t *raw = malloc(maxraw ? maxraw : 1), *tmp = malloc(maxraw ? maxraw : 1);
	w->buf = malloc(cap ? cap : 1);
	int fd = openat(w->t->stepfd, o->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (!raw || !tmp || !w->buf)
		w->err = -ENOMEM;
	else if (fd < 0)
		w->err = -errno;
	w->len = 0;
	for (size_t i = w->first; i < w->last && !w->err; i++) {
		struct zpiece *p = &o->pieces[i];
		w->err = read_exact(fd, raw, p->raw_len, p->raw_offset);
		if (!w->err)
			w->err = verify_range(o, fd, raw, p->raw_offset, p->raw_len, w->why,
					      sizeof(w->why));
		if (!w->err)
			w->err = zshard_compress(p, raw, tmp, w->buf + w->len, cap - w->len, w->level);
		if (!w->err)
			w->len += p->z_len;
	}
	if (fd >= 0)
		close(fd);
	free(raw);
	free(tmp);
}

/* Worker thread: read the unit's bytes (or compress them) and digest them. */
static void unit_read_run(void *arg)
{
	struct unit *w = arg;

	if (w->compress) {
		unit_compress_run(w);
	} else if (!w->digest_only) {
		w->buf = malloc(w->len ? w->len : 1);
		if (!w->buf) {
			w->err = -ENOMEM;
			return;
		}
		int fd = openat(w->t->stepfd, w->o->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			w->err = -errno;
			return;
		}
		w->err = read_exact(fd, w->buf, w->len, w->off);
		if (!w->err && !w->o->is_index)
			w->err = verify_range(w->o, fd, w->buf, w->off, w->len, w->why,
					      sizeof(w->why));
		close(fd);
	}
	unsigned int len;
	if (!w->err && (!EVP_Digest(w->buf, w->len, w->md5, &len, EVP_md5(), NULL) ||
			!EVP_Digest(w->buf, w->len, w->sha256, &len, EVP_sha256(), NULL)))
		w->err = -EIO;
	/* A whole index object must be the index the manifest names. */
	if (!w->err && !w->compress && !w->digest_only && w->o->is_index && w->part == 0 &&
	    memcmp(w->sha256, w->o->index_sha256, 32) != 0) {
		char hex[65];
		ckpt_hex(hex, w->sha256, 32);
		snprintf(w->why, sizeof(w->why), "rank=%u file=%s sha256=%s manifest_sha256=%s",
			 w->o->rank, w->o->name, hex, w->o->index_hex);
		w->err = -EBADMSG;
	}
}

/* Bytes about to leave did not verify: the step is not uploaded. */
static void verify_failed(struct task *t, const char *why)
{
	metrics_inc(M_S3_VERIFY_FAILURES_TOTAL, t->job->name);
	log_error("s3", "verification failed job=%s step=%" PRIu64 " %s: the step is not uploaded",
		  t->job->name, t->step, why);
	task_fail(t, -EBADMSG, "verification failed: %s", why);
}

static int chunk_cmp(const void *a, const void *b)
{
	const struct vchunk *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

/*
 * Worker thread: read each rank's index, check its size and SHA-256
 * against the manifest, and keep its chunk CRCs with the rank's shard for
 * verify_range. The first failure goes into t->err / t->why (the task is
 * idle on the loop meanwhile).
 */
static void index_run(void *arg)
{
	struct task *t = arg;
	size_t world = t->n_objs / 2;

	for (size_t i = 0; i < world; i++) {
		struct obj *s = &t->objs[i], *x = &t->objs[world + i];
		void *buf = NULL;
		size_t len = 0;
		uint8_t sha[32];
		unsigned int dl;
		struct ckpt_index idx = { 0 };
		int r = store_read_file(t->stepfd, x->name, MANIFEST_MAX, &buf, &len);

		if (r < 0) {
			t->err = r;
			snprintf(t->why, sizeof(t->why), "reading %s of step %" PRIu64 ": %s", x->name,
				 t->step, strerror(-r));
			return;
		}
		if (len != x->size || !EVP_Digest(buf, len, sha, &dl, EVP_sha256(), NULL) ||
		    memcmp(sha, x->index_sha256, 32) != 0) {
			char hex[65];
			ckpt_hex(hex, sha, 32);
			free(buf);
			t->err = -EBADMSG;
			snprintf(t->why, sizeof(t->why), "rank=%zu file=%s bytes=%zu sha256=%s "
				 "manifest_bytes=%" PRIu64 " manifest_sha256=%s", i, x->name, len,
				 len == x->size ? hex : "-", x->size, x->index_hex);
			return;
		}
		r = ckpt_index_decode(buf, len, &idx);
		free(buf);
		if (r < 0) {
			t->err = -EBADMSG;
			snprintf(t->why, sizeof(t->why), "rank=%zu file=%s: not a valid index", i,
				 x->name);
			return;
		}
		s->chunks = calloc(idx.chunk_count ? idx.chunk_count : 1, sizeof(*s->chunks));
		if (!s->chunks) {
			ckpt_index_free(&idx);
			t->err = -ENOMEM;
			snprintf(t->why, sizeof(t->why), "out of memory");
			return;
		}
		/* Chunks: each tensor's extent in table order, then the blob,
		 * each cut into chunk_bytes pieces (FORMAT.md). */
		size_t n = 0;
		uint32_t cb = idx.chunk_bytes;
		for (uint32_t k = 0; k <= idx.table.count; k++) {
			uint64_t eo = k < idx.table.count ? idx.table.tensors[k].data_offset : idx.blob_offset;
			uint64_t el = k < idx.table.count ? idx.table.tensors[k].nbytes : idx.blob_bytes;
			for (uint64_t d = 0; d < el && n < idx.chunk_count; d += cb) {
				s->chunks[n].off = eo + d;
				s->chunks[n].len = (uint32_t)(el - d < cb ? el - d : cb);
				s->chunks[n].crc = idx.chunk_crc[n];
				n++;
			}
		}
		s->nchunks = n;
		qsort(s->chunks, n, sizeof(*s->chunks), chunk_cmp);
		ckpt_index_free(&idx);
	}
}

static void index_done(void *arg)
{
	struct task *t = arg;

	if (t->u->closing) {
		t->ops--;
		return;
	}
	if (t->err == -EBADMSG) {
		char why[sizeof(t->why)];
		snprintf(why, sizeof(why), "%s", t->why);
		t->err = 0;
		t->why[0] = '\0';
		verify_failed(t, why);
	} else if (!t->err) {
		t->phase = UP_LIST;
	}
	task_op_done(t);
}

static void unit_free(struct unit *w)
{
	free(w->buf);
	free(w);
}

static void unit_sent(const struct s3_result *res, void *arg)
{
	struct unit *w = arg;
	struct task *t = w->t;
	struct uploader *u = t->u;

	count_attempts(res);
	u->units--;
	if (res->err) {
		char key[KEY_MAX + 64];
		step_key(u, t->job->name, t->step, w->o->key_name, key, sizeof(key));
		task_fail(t, res->err, "%s", res->error[0] ? res->error : key);
	} else if (!u->closing) {
		t->bytes_sent += w->len;
		metrics_add(M_S3_UPLOADED_BYTES_TOTAL, (double)w->len, t->job->name);
		if (w->part) {
			w->o->etags[w->part - 1] = strdup(res->etag ? res->etag : "");
			w->o->parts_done++;
		} else {
			w->o->state = OBJ_DONE;
		}
	}
	unit_free(w);
	task_op_done(t);
}

/* Loop thread: the unit's bytes are ready; send them (or find them sent). */
static void unit_send(struct unit *w)
{
	struct task *t = w->t;
	struct uploader *u = t->u;
	char key[KEY_MAX + 64];
	int r;

	step_key(u, t->job->name, t->step, w->o->key_name, key, sizeof(key));
	struct s3_source src = { .buf = w->buf, .fd = -1, .len = w->len, .sha256 = w->sha256,
				 .md5 = w->md5, .meta_index_sha256 = w->o->index_hex };
	if (w->part) {
		/* A part an earlier ckptd sent: same size and MD5 (the ETag of a
		 * part is its MD5), no need to send it again. */
		uint32_t i = w->part - 1;
		if (w->o->old_etags && w->o->old_etags[i] && w->o->old_sizes[i] == w->len) {
			char hex[35];
			hex[0] = '"';
			for (int k = 0; k < 16; k++)
				snprintf(hex + 1 + 2 * k, 3, "%02x", w->md5[k]);
			hex[33] = '"';
			hex[34] = '\0';
			if (!strcmp(hex, w->o->old_etags[i])) {
				w->o->etags[i] = strdup(hex);
				w->o->parts_done++;
				u->units--;
				t->parts_reused++;
				unit_free(w);
				task_op_done(t);
				return;
			}
		}
		r = s3_upload_part(u->c, u->url.bucket, key, w->o->upload_id, w->part, &src,
				   unit_sent, w);
	} else {
		r = s3_put_object(u->c, u->url.bucket, key, &src, unit_sent, w);
	}
	if (r < 0) {
		task_fail(t, r, "%s: starting the upload: %s", key, strerror(-r));
		u->units--;
		unit_free(w);
		task_op_done(t);
	}
	/* else: t->ops carries over from the read to the send */
}

static void unit_read_done(void *arg);

/* Make the next part of a compressed object from buf (taken). */
static void emit_part(struct task *t, struct obj *o, uint8_t *buf, size_t len, bool digested,
		      const uint8_t *md5, const uint8_t *sha256)
{
	struct uploader *u = t->u;
	struct unit *w = calloc(1, sizeof(*w));

	if (!w || o->parts_emitted >= o->nparts) {
		int err = w ? -EFBIG : -ENOMEM;
		free(w);
		free(buf);
		task_fail(t, err, "%s: %s", o->key_name,
			  err == -EFBIG ? "more parts than planned" : "out of memory");
		return;
	}
	w->t = t;
	w->o = o;
	w->part = ++o->parts_emitted;
	w->buf = buf;
	w->len = len;
	u->units++;
	t->ops++;
	if (digested) {
		memcpy(w->md5, md5, sizeof(w->md5));
		memcpy(w->sha256, sha256, sizeof(w->sha256));
		unit_send(w);
		return;
	}
	w->digest_only = true;
	int r = workers_submit(u->d->workers, unit_read_run, unit_read_done, w);
	if (r < 0) {
		u->units--;
		t->ops--;
		unit_free(w);
		task_fail(t, r, "%s: %s", o->key_name, strerror(-r));
	}
}

static int pending_append(struct obj *o, uint8_t *buf, size_t len)
{
	uint8_t *p = realloc(o->pending, o->pending_len + len);

	if (!p)
		return -ENOMEM;
	memcpy(p + o->pending_len, buf, len);
	o->pending = p;
	o->pending_len += len;
	return 0;
}

/*
 * Compressed units finish in any order; parts are made in order: each
 * unit's frames join the pending bytes, which go out as a part once there
 * are S3's minimum part size of them. The last part carries the table and
 * trailer.
 */
static void compress_emit(struct task *t, struct obj *o)
{
	while (!t->err && o->next_emit < o->ncunits && o->ready[o->next_emit].buf) {
		struct cres *c = &o->ready[o->next_emit];
		for (size_t i = o->cunit_first[o->next_emit]; i < o->cunit_first[o->next_emit + 1]; i++) {
			o->pieces[i].z_offset = o->z_total;
			o->z_total += o->pieces[i].z_len;
		}
		if (!o->pending) {
			o->pending = c->buf;
			o->pending_len = c->len;
			o->pending_digested = true;
			memcpy(o->pending_md5, c->md5, sizeof(c->md5));
			memcpy(o->pending_sha256, c->sha256, sizeof(c->sha256));
		} else {
			int r = pending_append(o, c->buf, c->len);
			free(c->buf);
			o->pending_digested = false;
			if (r < 0) {
				c->buf = NULL;
				task_fail(t, r, "out of memory");
				return;
			}
		}
		c->buf = NULL;
		o->next_emit++;
		if (o->next_emit < o->ncunits && o->pending_len < S3_PART_MIN)
			continue;
		if (o->next_emit == o->ncunits)
			break; /* the last part gets the footer below */
		emit_part(t, o, o->pending, o->pending_len, o->pending_digested, o->pending_md5,
			  o->pending_sha256);
		o->pending = NULL;
		o->pending_len = 0;
	}
	if (!t->err && o->next_emit == o->ncunits && !o->final_emitted) {
		size_t fb = zshard_footer_bytes(o->npieces);
		uint8_t *footer = malloc(fb);
		if (!footer) {
			task_fail(t, -ENOMEM, "out of memory");
			return;
		}
		zshard_footer_encode(o->pieces, o->npieces, o->size, footer);
		int r = pending_append(o, footer, fb);
		free(footer);
		if (r < 0) {
			task_fail(t, r, "out of memory");
			return;
		}
		o->final_emitted = true;
		emit_part(t, o, o->pending, o->pending_len, false, NULL, NULL);
		o->pending = NULL;
		o->pending_len = 0;
	}
}

/* Loop thread: a unit's bytes are read, compressed or digested. */
static void unit_read_done(void *arg)
{
	struct unit *w = arg;
	struct task *t = w->t;
	struct uploader *u = t->u;

	if (u->closing) {
		u->units--;
		t->ops--;
		unit_free(w);
		return;
	}
	if (w->err || t->err) {
		if (w->err == -EBADMSG)
			verify_failed(t, w->why);
		else if (w->err)
			task_fail(t, w->err, "%s %s of step %" PRIu64 ": %s",
				  w->compress ? "compressing" : "reading", w->o->name, t->step,
				  strerror(-w->err));
		u->units--;
		unit_free(w);
		task_op_done(t);
		return;
	}
	if (w->compress) {
		struct cres *c = &w->o->ready[w->cunit];
		c->buf = w->buf;
		c->len = w->len;
		memcpy(c->md5, w->md5, sizeof(c->md5));
		memcpy(c->sha256, w->sha256, sizeof(c->sha256));
		w->buf = NULL;
		u->units--;
		compress_emit(t, w->o);
		unit_free(w);
		task_op_done(t);
		return;
	}
	unit_send(w);
}

static int unit_start(struct task *t, struct obj *o, uint32_t part)
{
	struct uploader *u = t->u;
	struct unit *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	w->t = t;
	w->o = o;
	w->part = part;
	if (part) {
		w->off = (uint64_t)(part - 1) * o->part_size;
		w->len = o->size - w->off < o->part_size ? o->size - w->off : o->part_size;
	} else {
		w->len = o->size;
	}
	int r = workers_submit(u->d->workers, unit_read_run, unit_read_done, w);
	if (r < 0) {
		free(w);
		return r;
	}
	u->units++;
	t->ops++;
	return 0;
}

/* Compress unit `c` of o on a worker. */
static int cunit_start(struct task *t, struct obj *o, size_t c)
{
	struct uploader *u = t->u;
	struct unit *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	w->t = t;
	w->o = o;
	w->compress = true;
	w->cunit = c;
	w->first = o->cunit_first[c];
	w->last = o->cunit_first[c + 1];
	w->level = (int)u->d->cfg->s3_compress_level;
	int r = workers_submit(u->d->workers, unit_read_run, unit_read_done, w);
	if (r < 0) {
		free(w);
		return r;
	}
	u->units++;
	t->ops++;
	return 0;
}

static void mp_created(const struct s3_result *res, void *arg);
static void mp_parts_listed(const struct s3_result *res, void *arg);
static void mp_completed(const struct s3_result *res, void *arg);

struct obj_op {
	struct task *t;
	struct obj *o;
};

static int obj_op(struct task *t, struct obj *o, struct obj_op **out)
{
	*out = malloc(sizeof(**out));
	if (!*out)
		return -ENOMEM;
	(*out)->t = t;
	(*out)->o = o;
	return 0;
}

static int mp_prepare(struct obj *o, uint64_t part_size)
{
	uint32_t nparts;
	int r = s3_part_plan(o->size, part_size, &o->part_size, &nparts);

	if (r < 0)
		return r;
	o->nparts = nparts;
	o->etags = calloc(nparts, sizeof(char *));
	return o->etags ? 0 : -ENOMEM;
}

static void mp_created(const struct s3_result *res, void *arg)
{
	struct obj_op *op = arg;
	struct task *t = op->t;

	count_attempts(res);
	if (res->err) {
		task_fail(t, res->err, "%s", res->error);
	} else if (!t->u->closing) {
		op->o->upload_id = strdup(res->upload_id ? res->upload_id : "");
		op->o->state = op->o->upload_id ? OBJ_PARTS : OBJ_TODO;
		if (!op->o->upload_id)
			task_fail(t, -ENOMEM, "out of memory");
	}
	free(op);
	task_op_done(t);
}

static void mp_parts_listed(const struct s3_result *res, void *arg)
{
	struct obj_op *op = arg;
	struct task *t = op->t;
	struct obj *o = op->o;
	bool more = false;

	count_attempts(res);
	if (res->err == -ENOENT) {
		/* The upload is gone (aborted, or completed by another ckptd
		 * before it crashed): start a new one. */
		free(o->upload_id);
		o->upload_id = NULL;
		o->state = OBJ_TODO;
	} else if (res->err) {
		task_fail(t, res->err, "%s", res->error);
	} else if (!t->u->closing) {
		if (!o->old_etags) {
			o->old_etags = calloc(o->nparts, sizeof(char *));
			o->old_sizes = calloc(o->nparts, sizeof(uint64_t));
		}
		if (!o->old_etags || !o->old_sizes) {
			task_fail(t, -ENOMEM, "out of memory");
		} else {
			for (size_t i = 0; res->list && i < res->list->n_parts; i++) {
				const struct s3_part_info *p = &res->list->parts[i];
				if (p->number >= 1 && p->number <= o->nparts && p->etag) {
					free(o->old_etags[p->number - 1]);
					o->old_etags[p->number - 1] = strdup(p->etag);
					o->old_sizes[p->number - 1] = p->size;
				}
			}
			more = page_next(t, res->list);
			if (!more)
				o->state = OBJ_PARTS;
		}
	}
	if (more) {
		struct s3_list_args a = { .marker = t->marker };
		char key[KEY_MAX + 64];
		step_key(t->u, t->job->name, t->step, o->key_name, key, sizeof(key));
		if (s3_list_parts(t->u->c, t->u->url.bucket, key, o->upload_id, &a,
				  mp_parts_listed, op) == 0)
			return; /* op and t->ops carry over */
		task_fail(t, -ENOMEM, "listing parts of %s", key);
	}
	free(op);
	task_op_done(t);
}

static void mp_completed(const struct s3_result *res, void *arg)
{
	struct obj_op *op = arg;
	struct task *t = op->t;

	count_attempts(res);
	if (res->err)
		task_fail(t, res->err, "%s", res->error);
	else
		op->o->state = OBJ_DONE;
	free(op);
	task_op_done(t);
}

/* An object already in S3: done if its metadata names this rank's index. */
static void head_done(const struct s3_result *res, void *arg)
{
	struct obj_op *op = arg;
	struct task *t = op->t;
	struct obj *o = op->o;

	count_attempts(res);
	if (res->err && res->err != -ENOENT) {
		task_fail(t, res->err, "%s", res->error);
	} else if (!t->u->closing) {
		bool match = !res->err && !strcmp(res->meta_index_sha256, o->index_hex) &&
			     (o->compress || res->content_length == o->size);
		if (match) {
			o->state = OBJ_DONE;
		} else {
			log_info("s3", "object in S3 is not this step's, sending it again job=%s "
				 "step=%" PRIu64 " object=%s stored_index_sha256=%s", t->job->name,
				 t->step, o->key_name,
				 res->err ? "(gone)" : res->meta_index_sha256[0] ? res->meta_index_sha256 : "(none)");
			o->s3_size = UINT64_MAX;
			o->state = OBJ_TODO;
		}
	}
	free(op);
	task_op_done(t);
}

/* Start what can start of the step's objects; true when all are done. */
static bool upload_schedule(struct task *t)
{
	struct uploader *u = t->u;
	const struct ckptd_config *cfg = u->d->cfg;
	bool all_done = true;
	char key[KEY_MAX + 64];
	int r = 0;

	for (size_t i = 0; i < t->n_objs && !t->err; i++) {
		struct obj *o = &t->objs[i];
		struct obj_op *op;

		if (o->state == OBJ_DONE)
			continue;
		all_done = false;
		step_key(u, t->job->name, t->step, o->key_name, key, sizeof(key));
		if (o->state == OBJ_TODO) {
			if (o->compress ? o->s3_size != UINT64_MAX : o->s3_size == o->size) {
				/* Objects appear whole or not at all, but one of
				 * this name may hold other bytes (an earlier run
				 * of the step number): it counts only if it was
				 * made from this rank's index. */
				if ((r = obj_op(t, o, &op)) < 0)
					break;
				r = s3_head_object(u->c, u->url.bucket, key, head_done, op);
				if (r < 0) {
					free(op);
					break;
				}
				t->ops++;
				o->state = OBJ_BUSY;
				continue;
			}
			/* A compressed shard's size is known only at its end:
			 * always a multipart upload (one part is fine). */
			if (o->size <= cfg->s3_part_bytes && !o->compress) {
				if (u->units >= cfg->s3_parallel)
					break;
				r = unit_start(t, o, 0);
				if (r == 0)
					o->state = OBJ_BUSY;
			} else {
				if (!o->etags && (r = mp_prepare(o, cfg->s3_part_bytes)) < 0)
					break;
				if ((r = obj_op(t, o, &op)) < 0)
					break;
				if (o->upload_id) {
					struct s3_list_args a = { 0 };
					r = s3_list_parts(u->c, u->url.bucket, key, o->upload_id, &a,
							  mp_parts_listed, op);
				} else {
					r = s3_create_multipart_meta(u->c, u->url.bucket, key,
								     o->index_hex, mp_created, op);
				}
				if (r < 0) {
					free(op);
					break;
				}
				t->ops++;
				o->state = OBJ_BUSY;
			}
			continue;
		}
		if (o->state != OBJ_PARTS)
			continue;
		if (o->compress) {
			while (o->next_cunit < o->ncunits && u->units < cfg->s3_parallel) {
				r = cunit_start(t, o, o->next_cunit);
				if (r < 0)
					break;
				o->next_cunit++;
			}
			if (r < 0)
				break;
			if (o->ncunits == 0 && !o->final_emitted)
				compress_emit(t, o); /* an empty shard: the footer alone */
			if (!o->final_emitted || o->parts_done < o->parts_emitted)
				continue;
		}
		while (!o->compress && o->next_part < o->nparts && u->units < cfg->s3_parallel) {
			r = unit_start(t, o, o->next_part + 1);
			if (r < 0)
				break;
			o->next_part++;
		}
		if (r < 0)
			break;
		uint32_t nparts = o->compress ? o->parts_emitted : o->nparts;
		if (o->parts_done == nparts) {
			struct s3_completed_part *parts = calloc(nparts, sizeof(*parts));
			if (!parts) {
				r = -ENOMEM;
				break;
			}
			for (uint32_t p = 0; p < nparts; p++) {
				parts[p].number = p + 1;
				parts[p].etag = o->etags[p] ? o->etags[p] : "";
				log_debug("s3", "complete key=%s part=%u etag=%s", key, p + 1, parts[p].etag);
			}
			if ((r = obj_op(t, o, &op)) == 0) {
				r = s3_complete_multipart(u->c, u->url.bucket, key, o->upload_id, parts,
							  nparts, mp_completed, op);
				if (r < 0)
					free(op);
			}
			free(parts);
			if (r < 0)
				break;
			t->ops++;
			o->state = OBJ_BUSY;
		}
	}
	if (r < 0)
		task_fail(t, r, "%s: %s", key, strerror(-r));
	return all_done && !t->err;
}

static void small_put_done(const struct s3_result *res, void *arg)
{
	struct task *t = arg;

	count_attempts(res);
	if (res->err)
		task_fail(t, res->err, "%s", res->error);
	else if (!t->u->closing)
		t->phase++;
	task_op_done(t);
}

static int put_bytes(struct task *t, const char *name, const void *buf, size_t len)
{
	struct uploader *u = t->u;
	char key[KEY_MAX + 64];
	struct s3_source src = { .buf = buf, .fd = -1, .len = len };

	if (!strcmp(name, CKPT_LATEST_NAME)) {
		char jk[KEY_MAX];
		job_key(u, t->job->name, jk, sizeof(jk));
		snprintf(key, sizeof(key), "%s/%s", jk, name);
	} else {
		step_key(u, t->job->name, t->step, name, key, sizeof(key));
	}
	int r = s3_put_object(u->c, u->url.bucket, key, &src, small_put_done, t);
	if (r == 0)
		t->ops++;
	return r;
}

static void upload_done(struct task *t)
{
	struct uploader *u = t->u;
	struct s3job *j = t->job;
	double secs = (double)((uint64_t)ckpt_mono_ns() - t->started_ns) / 1e9;

	if (s3_steps_insert(j, t->step) < 0 ||
	    steps_insert(&j->verified, &j->n_verified, &j->cap_verified, t->step) < 0)
		log_error("s3", "out of memory recording an upload job=%s", j->name);
	metrics_set(M_NEWEST_COMMITTED_STEP, (double)j->s3_steps[j->n_s3 - 1], j->name, "s3");
	log_info("s3", "uploaded job=%s step=%" PRIu64 " bytes=%" PRIu64 " sent=%" PRIu64
		 " reused_parts=%u seconds=%.3f MBps=%.1f", j->name, t->step, t->bytes_total,
		 t->bytes_sent, t->parts_reused, secs, secs > 0 ? (double)t->bytes_sent / secs / 1e6 : 0.0);
	u->backoff_ns = 0;
	queue_deletions(u, j);
	/* Confirmed: the root may let it (and what it supersedes) go. While
	 * the task is still queued: the job is loaded (owned) until it ends. */
	coord_retention_recheck(u->d, j->name);
	task_finish(t);
}

static void up_leftovers_listed(const struct s3_result *res, void *arg)
{
	struct task *t = arg;

	if (uploads_page(t, res))
		t->phase = UP_CLEANUP_ABORT;
	task_op_done(t);
}

static void upload_step(struct task *t)
{
	struct uploader *u = t->u;
	char prefix[KEY_MAX + 64];
	int r = 0;

	switch (t->phase) {
	case UP_OPEN:
		t->started_ns = (uint64_t)ckpt_mono_ns();
		r = upload_open(t);
		if (r == -ENOENT) {
			/* Gone from the root before it could be uploaded (by hand:
			 * retention waits for us). Nothing to send. */
			log_warn("s3", "step gone from the root before its upload job=%s step=%" PRIu64,
				 t->job->name, t->step);
			task_finish(t);
			return;
		}
		if (r < 0) {
			char why[sizeof(t->why)];
			snprintf(why, sizeof(why), "%s", t->why[0] ? t->why : strerror(-r));
			t->why[0] = '\0';
			task_fail(t, r, "reading the step from the root: %s", why);
			task_failed(t);
			return;
		}
		t->phase = UP_INDEX;
		/* fall through */
	case UP_INDEX:
		/* Indexes first, on a worker: the shards' reads check against them. */
		r = workers_submit(u->d->workers, index_run, index_done, t);
		if (r == 0) {
			t->ops++;
			return;
		}
		break;
	case UP_LIST:
		step_key(u, t->job->name, t->step, NULL, prefix, sizeof(prefix));
		r = list_objects(t, prefix, up_list_done);
		break;
	case UP_LIST_UPLOADS: {
		step_key(u, t->job->name, t->step, NULL, prefix, sizeof(prefix));
		struct s3_list_args a = { .prefix = prefix, .marker = t->marker };
		r = s3_list_multipart_uploads(u->c, u->url.bucket, &a, up_uploads_done, t);
		if (r == 0)
			t->ops++;
		break;
	}
	case UP_OBJECTS:
		if (!upload_schedule(t)) {
			if (t->err && t->ops == 0)
				task_failed(t);
			return;
		}
		if (t->ops)
			return;
		t->phase = UP_MANIFEST;
		/* fall through */
	case UP_MANIFEST:
		/* Last of the step: its presence is the S3 commit. */
		r = put_bytes(t, CKPT_MANIFEST_NAME, t->manifest, t->manifest_len);
		break;
	case UP_LATEST: {
		const struct s3job *j = t->job;
		if (j->n_s3 && j->s3_steps[j->n_s3 - 1] > t->step) {
			t->phase = UP_CLEANUP_LIST;
			upload_step(t);
			return;
		}
		/* The manifest is in: count it before LATEST points at it. */
		t->bytes_sent += t->manifest_len;
		snprintf(prefix, sizeof(prefix), "%" PRIu64 "\n", t->step);
		char *body = strdup(prefix);
		if (!body) {
			r = -ENOMEM;
			break;
		}
		free(t->manifest);
		t->manifest = body; /* kept until the PUT is done */
		r = put_bytes(t, CKPT_LATEST_NAME, body, strlen(body));
		break;
	}
	case UP_CLEANUP_LIST: {
		/* A CreateMultipartUpload whose answer was lost leaves an upload
		 * nobody knows the id of; the step is complete now, so whatever
		 * is still open under it is such a leftover. */
		step_key(u, t->job->name, t->step, NULL, prefix, sizeof(prefix));
		struct s3_list_args a = { .prefix = prefix, .marker = t->marker };
		r = s3_list_multipart_uploads(u->c, u->url.bucket, &a, up_leftovers_listed, t);
		if (r == 0)
			t->ops++;
		break;
	}
	case UP_CLEANUP_ABORT:
		if (t->next_abort < t->n_uploads) {
			struct upload_id_entry *e = &t->uploads[t->next_abort++];
			log_info("s3", "aborting a leftover multipart upload job=%s step=%" PRIu64 " key=%s",
				 t->job->name, t->step, e->key);
			r = s3_abort_multipart(u->c, u->url.bucket, e->key, e->upload_id, abort_done, t);
			if (r == 0)
				t->ops++;
			break;
		}
		t->phase = UP_DONE;
		/* fall through */
	case UP_DONE:
		upload_done(t);
		return;
	}
	if (r < 0) {
		task_fail(t, r, "starting a request: %s", strerror(-r));
		if (t->ops == 0)
			task_failed(t);
	}
}

static void task_step(struct task *t)
{
	if (t->ops && t->kind != TASK_UPLOAD)
		return;
	switch (t->kind) {
	case TASK_SCAN:
		scan_step(t);
		break;
	case TASK_UPLOAD:
		if (t->ops && t->phase != UP_OBJECTS)
			return;
		upload_step(t);
		break;
	case TASK_DELETE:
		delete_step(t);
		break;
	}
}

/* Start the first task that is due, unless one runs. */
static void pump(struct uploader *u)
{
	uint64_t now = (uint64_t)ckpt_mono_ns();

	if (u->closing)
		return;
	for (struct task *t = u->head; t; t = t->next)
		if (t->running)
			return;
	for (struct task *t = u->head; t; t = t->next) {
		if (t->not_before_ns > now)
			continue;
		t->running = true;
		t->not_before_ns = 0;
		task_step(t);
		return;
	}
	arm_retry_timer(u);
}

/* ---- the event loop ------------------------------------------------------------------- */

static int loop_watch(void *loop, int fd, unsigned events)
{
	struct uploader *u = loop;
	struct epoll_event ev = { .data.u64 = EV_DATA(TAG_FD, fd) };

	if (events == 0) {
		epoll_ctl(u->epfd, EPOLL_CTL_DEL, fd, NULL);
		return 0;
	}
	ev.events = ((events & S3_EV_READ) ? EPOLLIN : 0) | ((events & S3_EV_WRITE) ? EPOLLOUT : 0);
	if (epoll_ctl(u->epfd, EPOLL_CTL_MOD, fd, &ev) == 0)
		return 0;
	if (errno == ENOENT && epoll_ctl(u->epfd, EPOLL_CTL_ADD, fd, &ev) == 0)
		return 0;
	return -errno;
}

static void loop_timer(void *loop, long ms)
{
	struct uploader *u = loop;
	struct itimerspec its = { 0 };

	if (ms == 0)
		its.it_value.tv_nsec = 1;
	else if (ms > 0) {
		its.it_value.tv_sec = ms / 1000;
		its.it_value.tv_nsec = (ms % 1000) * 1000000L;
	}
	timerfd_settime(u->client_tfd, 0, &its, NULL);
}

void uploader_dispatch(struct daemon *d)
{
	struct uploader *u = d->uploader;
	struct epoll_event evs[32];
	uint64_t ticks;

	if (!u)
		return;
	int n = epoll_wait(u->epfd, evs, 32, 0);
	for (int i = 0; i < n; i++) {
		unsigned tag = (unsigned)(evs[i].data.u64 >> 32);
		int fd = (int)(uint32_t)evs[i].data.u64;
		if (tag == TAG_CLIENT_TIMER) {
			if (read(u->client_tfd, &ticks, sizeof(ticks)) > 0)
				s3_client_on_timeout(u->c);
		} else if (tag == TAG_RETRY_TIMER) {
			if (read(u->retry_tfd, &ticks, sizeof(ticks)) > 0)
				pump(u);
		} else {
			unsigned e = 0;
			if (evs[i].events & EPOLLIN)
				e |= S3_EV_READ;
			if (evs[i].events & EPOLLOUT)
				e |= S3_EV_WRITE;
			if (evs[i].events & (EPOLLERR | EPOLLHUP))
				e |= S3_EV_ERROR;
			s3_client_on_fd(u->c, fd, e);
		}
	}
}

int uploader_fd(const struct daemon *d)
{
	return d->uploader ? d->uploader->epfd : -1;
}

/* ---- entry points ---------------------------------------------------------------------- */

void uploader_committed(struct daemon *d, const char *job, uint64_t step)
{
	struct uploader *u = d->uploader;

	if (!u)
		return;
	struct s3job *j = job_find(u, job, true);
	if (!j)
		return;
	if (!j->scanned) {
		/* The scan queued (or to be queued) sees this step in the root. */
		if (!task_find(u, TASK_SCAN, job, 0))
			task_new(u, TASK_SCAN, j, 0);
	} else if (!task_find(u, TASK_UPLOAD, job, step)) {
		task_new(u, TASK_UPLOAD, j, step);
		/* Older steps still waiting that retention would no longer keep
		 * on S3 are not worth sending. */
		uint64_t *all = calloc(j->n_verified + 64, sizeof(*all));
		size_t n = 0;
		if (all) {
			for (size_t i = 0; i < j->n_verified; i++)
				all[n++] = j->verified[i];
			for (struct task *t = u->head; t && n < j->n_verified + 64; t = t->next)
				if (t->kind == TASK_UPLOAD && t->job == j)
					all[n++] = t->step;
			for (struct task *t = u->head, *next; t; t = next) {
				next = t->next;
				if (t->kind == TASK_UPLOAD && t->job == j && !t->running &&
				    !policy_keeps(u, all, n, t->step)) {
					log_info("s3", "upload no longer needed job=%s step=%" PRIu64
						 " reason=\"older than s3_keep_last\"", job, t->step);
					task_unlink(t);
					task_free(t);
				}
			}
			free(all);
		}
	}
	queue_metrics(u);
	pump(u);
}

void uploader_job_owned(struct daemon *d, const char *job)
{
	struct uploader *u = d->uploader;
	struct s3job *j;

	if (!u || u->closing)
		return;
	j = job_find(u, job, true);
	if (!j) {
		/* Nothing scanned: S3's state stays unknown, the root keeps all. */
		log_error("s3", "out of memory: job=%s not scanned", job);
		return;
	}
	if (!task_find(u, TASK_SCAN, job, 0))
		task_new(u, TASK_SCAN, j, 0);
	queue_metrics(u);
	pump(u);
}

bool uploader_has_work(const struct daemon *d, const char *job)
{
	const struct uploader *u = d->uploader;

	if (!u)
		return false;
	for (const struct task *t = u->head; t; t = t->next)
		if (!strcmp(t->job->name, job))
			return true;
	return false;
}

void uploader_job_released(struct daemon *d, const char *job)
{
	struct uploader *u = d->uploader;
	struct s3job **pp, *j;

	if (!u)
		return;
	for (pp = &u->jobs; *pp && strcmp((*pp)->name, job) != 0; pp = &(*pp)->next)
		;
	j = *pp;
	if (!j || job_has_tasks(u, j))
		return;
	/* What S3 holds of the job may change under another owner: unknown
	 * from now on, until this daemon owns and scans it again. */
	j->scanned = false;
	j->n_s3 = j->n_verified = 0;
	j->held = 0;
	if (j->n_pins)
		return; /* a restore still reads from S3; it unpins later */
	*pp = j->next;
	free(j->s3_steps);
	free(j->verified);
	free(j->pins);
	free(j);
}

int uploader_origin(const struct daemon *d, const char *job, struct s3_origin *out)
{
	struct uploader *u = d->uploader;
	char jk[KEY_MAX];

	memset(out, 0, sizeof(*out));
	if (!u)
		return -ENOENT;
	job_key(u, job, jk, sizeof(jk));
	out->cfg = &u->cfg;
	out->bucket = strdup(u->url.bucket);
	out->job_key = strdup(jk);
	const struct s3job *j = job_find(u, job, false);
	out->current = j && j->scanned;
	if (j && j->n_s3) {
		out->steps = malloc(j->n_s3 * sizeof(uint64_t));
		if (out->steps) {
			memcpy(out->steps, j->s3_steps, j->n_s3 * sizeof(uint64_t));
			out->n_steps = j->n_s3;
		}
	}
	if (!out->bucket || !out->job_key || (j && j->n_s3 && !out->steps)) {
		uploader_origin_free(out);
		return -ENOMEM;
	}
	return 0;
}

void uploader_pin(struct daemon *d, const char *job, const uint64_t *steps, size_t n, int delta)
{
	struct uploader *u = d->uploader;
	struct s3job *j = u ? job_find(u, job, false) : NULL;

	if (!j)
		return;
	for (size_t i = 0; i < n; i++) {
		if (delta > 0) {
			if (j->n_pins == j->cap_pins) {
				size_t cap = j->cap_pins ? 2 * j->cap_pins : 16;
				uint64_t *v = realloc(j->pins, cap * sizeof(*v));
				if (!v)
					return; /* unpinned: retention may remove it; the restore then falls back */
				j->pins = v;
				j->cap_pins = cap;
			}
			j->pins[j->n_pins++] = steps[i];
		} else {
			for (size_t k = 0; k < j->n_pins; k++)
				if (j->pins[k] == steps[i]) {
					j->pins[k] = j->pins[--j->n_pins];
					break;
				}
		}
	}
}

void uploader_origin_free(struct s3_origin *o)
{
	if (!o)
		return;
	free(o->bucket);
	free(o->job_key);
	free(o->steps);
	memset(o, 0, sizeof(*o));
}

bool uploader_pinned(const struct daemon *d, const char *job, uint64_t step)
{
	const struct uploader *u = d->uploader;

	if (!d->cfg->s3_url || !d->cfg->s3_url[0])
		return false;
	/* In a group the leader uploads and deletes; the others only forget
	 * steps, which keeps nothing from S3. */
	if (!coord_is_leader(d))
		return false;
	/* Configured but not running yet (start-up recovery): unknown. */
	if (!u)
		return true;
	const struct s3job *j = job_find((struct uploader *)u, job, false);
	if (!j || !j->scanned)
		return true;
	if (steps_has(j->verified, j->n_verified, step))
		return false;
	return !superseded(u, j, step);
}

void uploader_retention_held(struct daemon *d, const char *job, size_t held, uint64_t oldest)
{
	struct uploader *u = d->uploader;
	struct s3job *j = u ? job_find(u, job, held > 0) : NULL;

	if (!j)
		return;
	metrics_set(M_ROOT_HELD_FOR_S3_STEPS, (double)held, job);
	if (held && !j->held) {
		char why[200];
		snprintf(why, sizeof(why), "%zu step%s past keep_last=%u, %s", held,
			 held == 1 ? "" : "s", d->cfg->keep_last,
			 j->scanned ? "not confirmed on S3 (uploads pending or failing)"
				    : "S3 not scanned yet");
		log_warn("retention", "keeping steps for S3 job=%s held=%zu oldest_step=%" PRIu64
			 " keep_last=%u reason=\"%s\"", job, held, oldest, d->cfg->keep_last,
			 j->scanned ? "not confirmed on S3" : "S3 not scanned yet");
		events_s3_backlog(job, oldest, why);
	} else if (!held && j->held) {
		log_info("retention", "S3 caught up job=%s: root retention back to keep_last=%u", job,
			 d->cfg->keep_last);
	}
	j->held = held;
}

int uploader_init(struct daemon *d)
{
	const struct ckptd_config *cfg = d->cfg;
	char err[512] = "";
	int r;

	if (!cfg->s3_url || !cfg->s3_url[0])
		return 0;
	struct uploader *u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->d = d;
	u->epfd = u->client_tfd = u->retry_tfd = -1;
	r = s3_url_parse(cfg->s3_url, &u->url, err, sizeof(err));
	if (r < 0) {
		log_error("s3", "s3_url %s: %s", cfg->s3_url, err);
		goto fail;
	}
	struct s3_settings set = {
		.profile = cfg->s3_profile[0] ? cfg->s3_profile : NULL,
		.region = cfg->s3_region[0] ? cfg->s3_region : NULL,
		.endpoint_url = cfg->s3_endpoint[0] ? cfg->s3_endpoint : NULL,
		.ca_bundle = cfg->s3_ca_bundle[0] ? cfg->s3_ca_bundle : NULL,
		.addressing = (enum s3_addressing)cfg->s3_addressing,
	};
	r = s3_config_resolve(&set, &u->cfg, err, sizeof(err));
	if (r < 0) {
		log_error("s3", "S3 configuration: %s", err);
		goto fail;
	}
	u->epfd = epoll_create1(EPOLL_CLOEXEC);
	u->client_tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	u->retry_tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (u->epfd < 0 || u->client_tfd < 0 || u->retry_tfd < 0) {
		r = -errno;
		goto fail;
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = EV_DATA(TAG_CLIENT_TIMER, 0) };
	struct epoll_event ev2 = { .events = EPOLLIN, .data.u64 = EV_DATA(TAG_RETRY_TIMER, 0) };
	if (epoll_ctl(u->epfd, EPOLL_CTL_ADD, u->client_tfd, &ev) < 0 ||
	    epoll_ctl(u->epfd, EPOLL_CTL_ADD, u->retry_tfd, &ev2) < 0) {
		r = -errno;
		goto fail;
	}
	struct s3_client_options opts = {
		.max_inflight = cfg->s3_parallel + 2,
		.max_attempts = cfg->s3_max_attempts,
		.max_bytes_per_sec = cfg->s3_max_rate,
	};
	struct s3_loop_ops ops = { .watch = loop_watch, .timer = loop_timer, .loop = u };
	r = s3_client_new(&u->cfg, &opts, &ops, &u->c, err, sizeof(err));
	if (r < 0) {
		log_error("s3", "S3 client: %s", err);
		goto fail;
	}
	d->uploader = u;

	char desc[512];
	s3_config_describe(&u->cfg, desc, sizeof(desc));
	log_info("s3", "tier on url=s3://%s/%s part_size=%" PRIu64 " parallel=%u keep_last=%u "
		 "keep_every=%u %s", u->url.bucket, u->url.prefix, cfg->s3_part_bytes,
		 cfg->s3_parallel, cfg->s3_keep_last, cfg->s3_keep_every, desc);

	/* No job yet: the tier works on the jobs this daemon owns, each from
	 * its takeover on (uploader_job_owned), never on the whole root,
	 * which other daemons' jobs share. */
	return 0;
fail:
	s3_config_free(&u->cfg);
	s3_url_free(&u->url);
	if (u->epfd >= 0)
		close(u->epfd);
	if (u->client_tfd >= 0)
		close(u->client_tfd);
	if (u->retry_tfd >= 0)
		close(u->retry_tfd);
	free(u);
	return r < 0 ? r : -EINVAL;
}

void uploader_fini(struct daemon *d)
{
	struct uploader *u = d->uploader;

	if (!u)
		return;
	u->closing = true;
	s3_client_free(u->c);
	while (u->head) {
		struct task *t = u->head;
		u->head = t->next;
		task_free(t);
	}
	while (u->jobs) {
		struct s3job *j = u->jobs;
		u->jobs = j->next;
		free(j->s3_steps);
		free(j->verified);
		free(j->pins);
		free(j);
	}
	s3_config_free(&u->cfg);
	s3_url_free(&u->url);
	close(u->epfd);
	close(u->client_tfd);
	close(u->retry_tfd);
	free(u);
	d->uploader = NULL;
}
