/* SPDX-License-Identifier: MIT */
/*
 * restore sources: a job directory of a checkpoint root (here), and S3
 * (restore-source-s3.c, where the build has the S3 client).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "restore-source.h"
#include "store.h"
#include "toolutil.h"

/* Manifests are small; a bigger file is not one of ours. */
#define MANIFEST_MAX ((size_t)1 << 30)
#define COPY_PIECE ((size_t)16 << 20)

#ifdef CKPT_RESTORE_HAVE_S3
int restore_source_s3_open(const char *spec, const struct s3_settings *s3,
			   struct restore_source **out, uint64_t *step, char *why,
			   size_t whylen);
#endif

struct dir_source {
	struct restore_source pub;
	int jobfd;
};

static int open_step(struct dir_source *d, uint64_t step, char *dname, size_t cap)
{
	int r = ckpt_step_dirname(dname, cap, step);
	if (r < 0)
		return r;
	int fd = openat(d->jobfd, dname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static int dir_list_steps(struct restore_source *s, uint64_t **steps, size_t *n,
			  char *why, size_t whylen)
{
	struct dir_source *d = (struct dir_source *)s;
	int r = store_list_steps(d->jobfd, true, steps, n);

	if (r < 0)
		snprintf(why, whylen, "listing steps: %s", strerror(-r));
	return r;
}

static int dir_read_manifest(struct restore_source *s, uint64_t step, char **buf,
			     size_t *len, char *why, size_t whylen)
{
	struct dir_source *d = (struct dir_source *)s;
	char dname[32];
	_cleanup_close_ int stepfd = open_step(d, step, dname, sizeof(dname));

	if (stepfd < 0) {
		snprintf(why, whylen, "%s/%s: %s", s->desc, dname,
			 stepfd == -ENOENT ? "no such step" : strerror(-stepfd));
		return stepfd;
	}
	int r = store_read_file(stepfd, CKPT_MANIFEST_NAME, MANIFEST_MAX, (void **)buf, len);
	if (r < 0)
		snprintf(why, whylen, "%s/%s/%s: %s", s->desc, dname, CKPT_MANIFEST_NAME,
			 r == -ENOENT ? "missing: the step is not committed" : strerror(-r));
	return r;
}

static int copy_plain(int in, int out, uint64_t off, uint64_t bytes,
		      void (*progress)(void *, uint64_t), void *opaque)
{
	_cleanup_free_ char *buf = malloc(COPY_PIECE);

	if (!buf)
		return -ENOMEM;
	while (off < bytes) {
		size_t want = bytes - off < COPY_PIECE ? (size_t)(bytes - off) : COPY_PIECE;
		ssize_t n = pread(in, buf, want, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ENODATA;
		for (ssize_t w = 0; w < n;) {
			ssize_t k = pwrite(out, buf + w, (size_t)(n - w), (off_t)off + w);
			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0)
				return -errno;
			w += k;
		}
		off += (uint64_t)n;
		progress(opaque, (uint64_t)n);
	}
	return 0;
}

static int dir_fetch(struct restore_source *s, uint64_t step, const char *name,
		     uint64_t bytes, int dstfd, void (*progress)(void *, uint64_t),
		     void *opaque, char *why, size_t whylen)
{
	struct dir_source *d = (struct dir_source *)s;
	char dname[32];
	struct stat st;
	_cleanup_close_ int stepfd = open_step(d, step, dname, sizeof(dname));

	if (stepfd < 0) {
		snprintf(why, whylen, "%s/%s: %s", s->desc, dname, strerror(-stepfd));
		return stepfd;
	}
	_cleanup_close_ int fd = openat(stepfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		snprintf(why, whylen, "%s/%s/%s: %s", s->desc, dname, name, strerror(errno));
		return -errno;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != bytes) {
		snprintf(why, whylen, "%s/%s/%s: %" PRIu64 " bytes, the manifest says %" PRIu64,
			 s->desc, dname, name, (uint64_t)st.st_size, bytes);
		return -EBADMSG;
	}
	/* copy_file_range lets the file system share or offload the copy;
	 * it is not offered everywhere (other file systems, old kernels). */
	uint64_t off = 0;
	while (off < bytes) {
		size_t want = bytes - off < COPY_PIECE ? (size_t)(bytes - off) : COPY_PIECE;
		ssize_t n = copy_file_range(fd, NULL, dstfd, NULL, want, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		off += (uint64_t)n;
		progress(opaque, (uint64_t)n);
	}
	if (off < bytes) {
		int r = copy_plain(fd, dstfd, off, bytes, progress, opaque);
		if (r < 0) {
			snprintf(why, whylen, "%s/%s/%s -> destination: %s", s->desc, dname, name,
				 r == -ENODATA ? "the file ended early" : strerror(-r));
			return r;
		}
	}
	return 0;
}

static void dir_close(struct restore_source *s)
{
	struct dir_source *d = (struct dir_source *)s;

	if (!d)
		return;
	if (d->jobfd >= 0)
		close(d->jobfd);
	free(d);
}

static bool has_entry(int dirfd, const char *name)
{
	struct stat st;

	return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* A job directory holds LATEST or at least one step directory. */
static bool looks_like_job(const char *path)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	uint64_t *steps = NULL;
	size_t n = 0;

	if (fd < 0)
		return false;
	if (has_entry(fd, CKPT_LATEST_NAME))
		return true;
	if (store_list_steps(fd, false, &steps, &n) < 0)
		return false;
	free(steps);
	return n > 0;
}

static int dir_open(const char *spec, struct restore_source **out, uint64_t *step,
		    char *why, size_t whylen)
{
	char path[PATH_MAX];
	size_t len = strlen(spec);

	*step = 0;
	if (len == 0 || len >= sizeof(path)) {
		snprintf(why, whylen, "not a usable path");
		return -EINVAL;
	}
	memcpy(path, spec, len + 1);
	while (len > 1 && path[len - 1] == '/')
		path[--len] = '\0';

	char *slash = strrchr(path, '/');
	char *base = slash ? slash + 1 : path;
	char *at = strrchr(base, '@');
	if (at) {
		if (!tool_parse_step(at + 1, step)) {
			snprintf(why, whylen, "'%s' after '@' is not a step number", at + 1);
			return -EINVAL;
		}
		*at = '\0';
	} else if (slash && tool_parse_step(base, step)) {
		/* ROOT/JOB/STEP, unless the whole path is itself a job (a job
		 * may be named 42). */
		char parent[PATH_MAX];
		snprintf(parent, sizeof(parent), "%.*s", slash == path ? 1 : (int)(slash - path), path);
		if (looks_like_job(parent) && !looks_like_job(path))
			*slash = '\0';
		else
			*step = 0;
	}

	char *real = realpath(path, NULL);
	if (!real) {
		int e = errno;
		snprintf(why, whylen, "%s: %s", path, strerror(e));
		return -e;
	}
	const char *job = strrchr(real, '/');
	job = job ? job + 1 : real;
	if (ckpt_job_name_check(job, strlen(job)) != 0) {
		snprintf(why, whylen, "%s: '%s' is not a job name", path, job);
		free(real);
		return -EINVAL;
	}
	struct dir_source *d = calloc(1, sizeof(*d));
	if (!d) {
		free(real);
		return -ENOMEM;
	}
	d->jobfd = open(real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (d->jobfd < 0) {
		int e = errno;
		snprintf(why, whylen, "%s: %s", path, strerror(e));
		free(real);
		free(d);
		return -e;
	}
	snprintf(d->pub.desc, sizeof(d->pub.desc), "%s", path);
	snprintf(d->pub.job, sizeof(d->pub.job), "%s", job);
	free(real);
	d->pub.list_steps = dir_list_steps;
	d->pub.read_manifest = dir_read_manifest;
	d->pub.fetch = dir_fetch;
	d->pub.close = dir_close;
	*out = &d->pub;
	return 0;
}

int restore_source_open(const char *spec, const struct s3_settings *s3,
			struct restore_source **out, uint64_t *step, char *why,
			size_t whylen)
{
	if (strncmp(spec, "s3://", 5) == 0) {
#ifdef CKPT_RESTORE_HAVE_S3
		return restore_source_s3_open(spec, s3, out, step, why, whylen);
#else
		snprintf(why, whylen, "this ckpt-restore was built without the S3 client");
		return -ENOTSUP;
#endif
	}
	return dir_open(spec, out, step, why, whylen);
}
