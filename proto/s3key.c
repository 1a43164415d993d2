/* SPDX-License-Identifier: MIT */
/*
 * S3 keys (FORMAT.md, "On S3"): how a job's objects are named under a
 * bucket's key prefix, and the parse of those names back into a step and
 * a file. Written once here for the S3 tier, the restore path and the
 * tools. Pure string code: what talks to S3 and what a key may hold for S3
 * itself (s3_key_check) live in s3/.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* Like every name writer in proto: the length, or -errno and "" in buf. */
static int key_result(char *buf, size_t cap, int n)
{
	if (n >= 0 && (size_t)n < cap)
		return n;
	if (cap > 0)
		buf[0] = '\0';
	return n < 0 ? -EINVAL : -ENAMETOOLONG;
}

static int key_fail(char *buf, size_t cap, int err)
{
	if (cap > 0)
		buf[0] = '\0';
	return err;
}

/* A key prefix as s3_url_parse leaves it: "" or segments without a
 * leading or trailing '/'. */
static bool prefix_ok(const char *prefix)
{
	size_t n = strlen(prefix);

	return n == 0 || (prefix[0] != '/' && prefix[n - 1] != '/');
}

static bool job_key_ok(const char *job_key)
{
	return job_key && job_key[0] && prefix_ok(job_key);
}

int ckpt_s3_jobs_prefix(char *buf, size_t cap, const char *prefix)
{
	if (!prefix || !prefix_ok(prefix))
		return key_fail(buf, cap, -EINVAL);
	return key_result(buf, cap, snprintf(buf, cap, "%s%s", prefix, prefix[0] ? "/" : ""));
}

int ckpt_s3_job_key(char *buf, size_t cap, const char *prefix, const char *job)
{
	/* The job name is one segment: nothing it holds reaches another
	 * job's keys or climbs out of the prefix. */
	if (!prefix || !prefix_ok(prefix) || !job || ckpt_job_name_check(job, strlen(job)) < 0)
		return key_fail(buf, cap, -EINVAL);
	return key_result(buf, cap,
			  snprintf(buf, cap, "%s%s%s", prefix, prefix[0] ? "/" : "", job));
}

int ckpt_s3_job_prefix(char *buf, size_t cap, const char *job_key)
{
	if (!job_key_ok(job_key))
		return key_fail(buf, cap, -EINVAL);
	return key_result(buf, cap, snprintf(buf, cap, "%s/", job_key));
}

int ckpt_s3_latest_key(char *buf, size_t cap, const char *job_key)
{
	if (!job_key_ok(job_key))
		return key_fail(buf, cap, -EINVAL);
	return key_result(buf, cap, snprintf(buf, cap, "%s/%s", job_key, CKPT_LATEST_NAME));
}

int ckpt_s3_steps_prefix(char *buf, size_t cap, const char *job_key)
{
	if (!job_key_ok(job_key))
		return key_fail(buf, cap, -EINVAL);
	return key_result(buf, cap, snprintf(buf, cap, "%s/step-", job_key));
}

int ckpt_s3_step_key(char *buf, size_t cap, const char *job_key, uint64_t step,
		     const char *name)
{
	char dname[32];

	if (!job_key_ok(job_key))
		return key_fail(buf, cap, -EINVAL);
	/* A file of the step is one segment below it, as in the root: the
	 * parser finds the step in every key this writes. */
	if (name && (strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..")))
		return key_fail(buf, cap, -EINVAL);
	int r = ckpt_step_dirname(dname, sizeof(dname), step);
	if (r < 0)
		return key_fail(buf, cap, r);
	return key_result(buf, cap,
			  snprintf(buf, cap, "%s/%s/%s", job_key, dname, name ? name : ""));
}

int ckpt_s3_step_path_parse(const char *rel, uint64_t *step, const char **rest)
{
	char dname[32];
	const char *slash = rel ? strchr(rel, '/') : NULL;

	if (!slash || (size_t)(slash - rel) >= sizeof(dname))
		return -EINVAL;
	memcpy(dname, rel, (size_t)(slash - rel));
	dname[slash - rel] = '\0';
	if (ckpt_step_dirname_parse(dname, step) < 0)
		return -EINVAL;
	if (rest)
		*rest = slash + 1;
	return 0;
}

int ckpt_s3_key_parse(const char *job_key, const char *key, uint64_t *step,
		      const char **rest)
{
	if (!job_key_ok(job_key) || !key)
		return -EINVAL;
	size_t n = strlen(job_key);
	if (strncmp(key, job_key, n) != 0 || key[n] != '/')
		return -EINVAL;
	return ckpt_s3_step_path_parse(key + n + 1, step, rest);
}
