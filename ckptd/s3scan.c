/* SPDX-License-Identifier: MIT */
/*
 * The S3 tier's view of a job (see uploader.h): the listing helpers its
 * tasks share (pages, continuations, multipart uploads found), and the
 * scan a takeover queues: which steps S3 holds committed, which root steps
 * still need uploading (queued newest first), and which multipart uploads
 * under the job are orphans to abort. The scan only plans: uploads and
 * deletions are tasks of their own (upload.c, s3retention.c), and the
 * policy that picks them is uploader.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptd.h"
#include "coord.h"
#include "retention.h"
#include "log.h"
#include "metrics.h"
#include "s3.h"
#include "store.h"
#include "uploader_internal.h"

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
bool page_next(struct task *t, const struct s3_list *l)
{
	free(t->marker);
	t->marker = NULL;
	if (l && l->truncated && l->next_marker && l->next_marker[0]) {
		t->marker = strdup(l->next_marker);
		return t->marker != NULL;
	}
	return false;
}

int list_objects(struct task *t, const char *prefix, s3_done_fn done)
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
bool uploads_page(struct task *t, const struct s3_result *res)
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

void abort_done(const struct s3_result *res, void *arg)
{
	struct task *t = arg;

	count_attempts(res);
	/* An upload that is already gone is what we wanted. */
	if (res->err && res->err != -ENOENT)
		log_warn("s3", "abort of a multipart upload failed job=%s error=\"%s\"",
			 t->job->name, res->error);
	task_op_done(t);
}

void scan_step(struct task *t)
{
	struct uploader *u = t->u;
	char jk[KEY_MAX], prefix[KEY_MAX + 8];
	int r = 0;

	job_key(u, t->job->name, jk, sizeof(jk));
	switch (t->phase) {
	case SCAN_LIST_STEPS:
		r = ckpt_s3_steps_prefix(prefix, sizeof(prefix), jk);
		if (r >= 0)
			r = list_objects(t, prefix, scan_steps_done);
		break;
	case SCAN_LIST_UPLOADS: {
		r = ckpt_s3_job_prefix(prefix, sizeof(prefix), jk);
		struct s3_list_args a = { .prefix = prefix, .marker = t->marker };
		if (r >= 0)
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
