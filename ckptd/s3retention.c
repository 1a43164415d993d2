/* SPDX-License-Identifier: MIT */
/*
 * Retention on S3 (see uploader.h, "Retention"): which of a job's steps on
 * S3 go (queue_deletions: those with s3_keep_last verified newer copies,
 * never a pinned one or one still being uploaded), and the deletion task
 * that removes a step, MANIFEST.json first so it stops being committed,
 * then everything listed under it. What the policy keeps is decided in
 * uploader.c (superseded, policy_keeps); the root's own retention is
 * retention.c's (memtier.c keeps departed ranks' memory, a restore tier).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptd.h"
#include "log.h"
#include "s3.h"
#include "uploader_internal.h"

/* ---- retention on S3 ----------------------------------------------------------------- */

void queue_deletions(struct uploader *u, struct s3job *j)
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

void delete_step(struct task *t)
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
