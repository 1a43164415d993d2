/* SPDX-License-Identifier: MIT */
/*
 * Removal of step directories and root retention. A failed step's directory
 * goes once no save writes into it; a job keeps its newest keep_last
 * committed steps in the root, and older ones go, oldest first, unless a
 * restore reads them or S3 has not confirmed them yet. What goes is moved
 * into <root>/.trash with one rename and deleted there by a worker. In a
 * group only the leader deletes; the other nodes only forget.
 *
 * Not here: which steps are committed (coord.c), taking a job over and the
 * recovery that comes with it (jobs.c, which moves a crash's uncommitted
 * steps to the trash through trash_move), and the S3 tier's own copies and
 * deletions (uploader.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptd.h"
#include "coord.h"
#include "jobs.h"
#include "coord_internal.h"
#include "retention.h"
#include "uploader.h"

/* ---- Removal of step directories ------------------------------------ */

struct removal {
	struct job *job;
	struct step *st;       /* failed step record, or NULL (retention) */
	uint64_t step;
	bool committed;
	bool kept;             /* a failed step's directory held a manifest: left alone */
	int result;
};

/*
 * Move job/name into <root>/.trash with one rename: it is gone from the job
 * at once (deleting big files takes a while), and whatever a crash leaves in
 * the trash is deleted at the next start. Falls back to deleting in place.
 */
int trash_move(struct daemon *d, struct job *job, int jobfd, const char *name)
{
	char tname[CKPT_JOB_NAME_MAX + 96];

	if (d->trash_fd >= 0) {
		snprintf(tname, sizeof(tname), "%s.%s.%lld.%llu", job ? job->name : "job", name,
			 (long long)ckpt_mono_ns(), (unsigned long long)__atomic_add_fetch(&d->trash_seq, 1, __ATOMIC_RELAXED));
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
	struct stat sb;
	int fd;

	rm->result = ckpt_step_dirname(name, sizeof(name), rm->step);
	if (rm->result < 0)
		return;
	/* Only retention removes a committed step. A failed attempt that
	 * shares its number with a committed one (or whose own commit got as
	 * far as the manifest) never takes the committed directory with it. */
	fd = openat(rm->job->dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (!rm->committed && fd >= 0 &&
	    fstatat(fd, CKPT_MANIFEST_NAME, &sb, AT_SYMLINK_NOFOLLOW) == 0) {
		close(fd);
		rm->kept = true;
		rm->result = 0;
		return;
	}
	if (fd >= 0)
		close(fd);
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

static void removal_done(void *arg)
{
	struct removal *rm = arg;
	struct daemon *d = rm->job->d;

	if (rm->kept) {
		/* A manifest makes it committed, whatever this daemon believed:
		 * so it is recorded, and no later attempt writes into it. */
		log_error("retention", "not removing failed step job=%s step=%llu: its directory "
			  "holds %s (a committed step); kept as committed", rm->job->name,
			  (unsigned long long)rm->step, CKPT_MANIFEST_NAME);
		if (!job_is_committed(rm->job, rm->step) && committed_insert(rm->job, rm->step) < 0)
			log_error("coord", "out of memory recording a commit job=%s", rm->job->name);
	} else if (rm->result < 0)
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

void removal_start(struct job *job, struct step *st, uint64_t step, bool committed)
{
	struct removal *rm;

	/* The same guard on the loop's own record: a failed step of a
	 * committed number is a bug elsewhere, never a reason to delete. */
	if (!committed && job_is_committed(job, step)) {
		log_error("retention", "not removing failed step job=%s step=%llu: that step "
			  "is committed", job->name, (unsigned long long)step);
		return;
	}
	rm = calloc(1, sizeof(*rm));
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

void retention_apply(struct job *job)
{
	uint32_t keep = job->d->cfg->keep_last;
	uint64_t oldest_held = 0;
	size_t held = 0;

	if (keep == 0)
		return;
	/* The newest keep_last steps stay whatever S3 holds. Older ones go,
	 * oldest first, unless one is being restored or S3 has not confirmed
	 * it (uploader_pinned: unknown keeps); such a step is kept on top of
	 * keep_last, never in the place of a newer one. */
	for (size_t i = 0; job->n_committed > keep && i < job->n_committed - keep;) {
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
	uploader_retention_held(job->d, job->name, held, oldest_held);
}

void coord_retention_recheck(struct daemon *d, const char *name)
{
	/* Only a job this daemon holds: the uploader works only on those, and
	 * keeps them loaded while it has work (job_in_use). Anything else is
	 * another daemon's, or nobody's until a rank comes. */
	struct job *job = job_get(d, name, false);

	if (!job)
		return;
	retention_apply(job);
	job_release(job);
}

