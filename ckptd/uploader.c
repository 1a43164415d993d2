/* SPDX-License-Identifier: MIT */
/*
 * The S3 tier (see uploader.h): its scheduling. One queue of tasks, worked
 * on one at a time (the first that is due): scanning a job (s3scan.c),
 * uploading a step (upload.c), deleting a step past S3 retention
 * (s3retention.c). This file holds the jobs and the policy that decides
 * what S3 keeps, the queue with its retries, the tier's own event loop
 * (an epoll set of event sources: the S3 client's sockets and timer, the
 * retry timer) and the entry points the rest of ckptd calls. What a task
 * does with S3 is in those files; the key layout is proto's (s3key.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "ckptd.h"
#include "coord.h"
#include "jobs.h"
#include "retention.h"
#include "events.h"
#include "log.h"
#include "metrics.h"
#include "s3.h"
#include "uploader.h"
#include "uploader_internal.h"

/* Delay before a failed task is tried again: doubles from the first to the
 * last; an authentication failure waits the longest at once. */
#define RETRY_FIRST_NS (5ull * 1000000000ull)
#define RETRY_MAX_NS (600ull * 1000000000ull)

static void pump(struct uploader *u);
static void task_step(struct task *t);

/* ---- keys ----------------------------------------------------------------- */

/*
 * The layout is proto's (ckpt_s3_*, FORMAT.md "On S3"). None of these
 * fails in practice: task_new admits no step past CKPT_STEP_MAX, job names
 * are checked on the way in, the prefix by s3_url_parse. Were one to come:
 * a key every request refuses (a control byte), never a prefix of others.
 */
static void key_refused(char *out, size_t cap)
{
	snprintf(out, cap, "\n");
}

void job_key(const struct uploader *u, const char *job, char *out, size_t cap)
{
	if (ckpt_s3_job_key(out, cap, u->url.prefix, job) < 0)
		key_refused(out, cap);
}

void step_key(const struct uploader *u, const char *job, uint64_t step,
	      const char *name, char *out, size_t cap)
{
	char jk[KEY_MAX];

	job_key(u, job, jk, sizeof(jk));
	if (ckpt_s3_step_key(out, cap, jk, step, name) < 0)
		key_refused(out, cap);
}

void latest_key(const struct uploader *u, const char *job, char *out, size_t cap)
{
	char jk[KEY_MAX];

	job_key(u, job, jk, sizeof(jk));
	if (ckpt_s3_latest_key(out, cap, jk) < 0)
		key_refused(out, cap);
}

/* The step of a key under the job's prefix ("<jk>/step-N/..."), or 0. */
uint64_t key_step(const struct uploader *u, const char *job, const char *key,
		  const char **rest)
{
	char jk[KEY_MAX];
	uint64_t step;

	job_key(u, job, jk, sizeof(jk));
	if (ckpt_s3_key_parse(jk, key, &step, rest) < 0)
		return 0;
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

bool steps_has(const uint64_t *v, size_t n, uint64_t step)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == step)
			return true;
	return false;
}

/* Insert into an ascending set of steps. */
int steps_insert(uint64_t **v, size_t *n, size_t *cap, uint64_t step)
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

int s3_steps_insert(struct s3job *j, uint64_t step)
{
	return steps_insert(&j->s3_steps, &j->n_s3, &j->cap_s3, step);
}

void s3_steps_remove(struct s3job *j, uint64_t step)
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
bool superseded(const struct uploader *u, const struct s3job *j, uint64_t step)
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
bool policy_keeps(const struct uploader *u, const uint64_t *all, size_t n, uint64_t step)
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

struct task *task_new(struct uploader *u, enum task_kind kind, struct s3job *j,
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

struct task *task_find(const struct uploader *u, enum task_kind kind, const char *job,
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

void queue_metrics(struct uploader *u)
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
void task_finish(struct task *t)
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
void task_fail(struct task *t, int err, const char *fmt, ...)
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
	timerfd_settime(u->retry_timer.fd, 0, &its, NULL);
}

/* A failed task, once idle: log, count, and try it again later. */
void task_failed(struct task *t)
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
void task_op_done(struct task *t)
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

void count_attempts(const struct s3_result *res)
{
	if (res->attempts > 1)
		metrics_add(M_S3_RETRIES_TOTAL, (double)(res->attempts - 1));
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

static void client_timer_ready(struct uploader_source *src, uint32_t events)
{
	struct uploader *u = src->data;
	uint64_t ticks;

	(void)events;
	if (read(src->fd, &ticks, sizeof(ticks)) > 0)
		s3_client_on_timeout(u->c);
}

static void retry_timer_ready(struct uploader_source *src, uint32_t events)
{
	struct uploader *u = src->data;
	uint64_t ticks;

	(void)events;
	if (read(src->fd, &ticks, sizeof(ticks)) > 0)
		pump(u);
}

static void socket_ready(struct uploader_source *src, uint32_t events)
{
	struct uploader *u = src->data;
	unsigned e = 0;

	if (events & EPOLLIN)
		e |= S3_EV_READ;
	if (events & EPOLLOUT)
		e |= S3_EV_WRITE;
	if (events & (EPOLLERR | EPOLLHUP))
		e |= S3_EV_ERROR;
	s3_client_on_fd(u->c, src->fd, e);
}

static void sources_free(struct uploader_source **list)
{
	while (*list) {
		struct uploader_source *src = *list;
		*list = src->next;
		free(src);
	}
}

static int loop_watch(void *loop, int fd, unsigned events)
{
	struct uploader *u = loop;
	struct uploader_source **pp = &u->socks, *src;
	struct epoll_event ev = { 0 };

	while (*pp && (*pp)->fd != fd)
		pp = &(*pp)->next;
	src = *pp;
	if (events == 0) {
		epoll_ctl(u->epfd, EPOLL_CTL_DEL, fd, NULL);
		if (src) {
			*pp = src->next;
			src->fd = -1;
			src->next = u->dead;
			u->dead = src;
		}
		return 0;
	}
	bool fresh = !src;
	if (fresh) {
		src = calloc(1, sizeof(*src));
		if (!src)
			return -ENOMEM;
		src->fd = fd;
		src->handler = socket_ready;
		src->data = u;
	}
	ev.events = ((events & S3_EV_READ) ? EPOLLIN : 0) | ((events & S3_EV_WRITE) ? EPOLLOUT : 0);
	ev.data.ptr = src;
	if (epoll_ctl(u->epfd, EPOLL_CTL_MOD, fd, &ev) == 0 ||
	    (errno == ENOENT && epoll_ctl(u->epfd, EPOLL_CTL_ADD, fd, &ev) == 0)) {
		if (fresh) {
			src->next = u->socks;
			u->socks = src;
		}
		return 0;
	}
	int r = -errno;
	if (fresh)
		free(src);
	return r;
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
	timerfd_settime(u->client_timer.fd, 0, &its, NULL);
}

void uploader_dispatch(struct daemon *d)
{
	struct uploader *u = d->uploader;
	struct epoll_event evs[32];

	if (!u)
		return;
	int n = epoll_wait(u->epfd, evs, 32, 0);
	for (int i = 0; i < n; i++) {
		struct uploader_source *src = evs[i].data.ptr;
		/* fd -1: a socket the client stopped watching, earlier in
		 * this batch. */
		if (src->fd >= 0)
			src->handler(src, evs[i].events);
	}
	sources_free(&u->dead);
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
	u->epfd = u->client_timer.fd = u->retry_timer.fd = -1;
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
	u->client_timer = (struct uploader_source){
		.fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK),
		.handler = client_timer_ready, .data = u,
	};
	u->retry_timer = (struct uploader_source){
		.fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK),
		.handler = retry_timer_ready, .data = u,
	};
	if (u->epfd < 0 || u->client_timer.fd < 0 || u->retry_timer.fd < 0) {
		r = -errno;
		goto fail;
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &u->client_timer };
	struct epoll_event ev2 = { .events = EPOLLIN, .data.ptr = &u->retry_timer };
	if (epoll_ctl(u->epfd, EPOLL_CTL_ADD, u->client_timer.fd, &ev) < 0 ||
	    epoll_ctl(u->epfd, EPOLL_CTL_ADD, u->retry_timer.fd, &ev2) < 0) {
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
	if (u->client_timer.fd >= 0)
		close(u->client_timer.fd);
	if (u->retry_timer.fd >= 0)
		close(u->retry_timer.fd);
	sources_free(&u->socks);
	sources_free(&u->dead);
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
	close(u->client_timer.fd);
	close(u->retry_timer.fd);
	/* The client, freed above, has stopped watching its sockets. */
	sources_free(&u->socks);
	sources_free(&u->dead);
	free(u);
	d->uploader = NULL;
}
