/* SPDX-License-Identifier: MIT */
/*
 * restore source: a job under an S3 prefix (s3://BUCKET/PREFIX/JOB[@STEP]),
 * laid out as proto/FORMAT.md "On S3" says. Credentials, region and
 * endpoint are resolved the AWS way (environment, shared files, profile).
 * Each fetch() has a client of its own (a client belongs to one thread)
 * and reads its file with parallel ranged GETs straight into the
 * destination file.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "restore-source.h"
#include "s3.h"
#include "store.h"

#define RANGES_IN_FLIGHT 4
#define MANIFEST_MAX ((uint64_t)1 << 30)

int restore_source_s3_open(const char *spec, struct restore_source **out,
			   uint64_t *step, char *why, size_t whylen);

struct s3_source_ctx {
	struct restore_source pub;
	struct s3_config cfg;
	char *bucket;
	char *job_key;          /* "PREFIX/JOB" or "JOB" */
};

static void step_key(const struct s3_source_ctx *s, uint64_t step, const char *name,
		     char *out, size_t cap)
{
	char dname[32];

	ckpt_step_dirname(dname, sizeof(dname), step);
	snprintf(out, cap, "%s/%s/%s", s->job_key, dname, name);
}

/* ---- the source ----------------------------------------------------------------- */

static int s3_list_steps(struct restore_source *src, uint64_t **steps, size_t *n,
			 char *why, size_t whylen)
{
	struct s3_source_ctx *s = (struct s3_source_ctx *)src;
	char prefix[1200], **keys = NULL;
	uint64_t *sizes = NULL, *v = NULL;
	size_t nk = 0, nv = 0;

	snprintf(prefix, sizeof(prefix), "%s/step-", s->job_key);
	int r = s3_sync_list(&s->cfg, s->bucket, prefix, &keys, &sizes, &nk, why, whylen);
	if (r < 0)
		return r;
	v = calloc(nk ? nk : 1, sizeof(*v));
	for (size_t i = 0; i < nk; i++) {
		const char *k = keys[i] + strlen(s->job_key) + 1, *slash = strchr(k, '/');
		char dname[32];
		uint64_t st;
		if (v && slash && (size_t)(slash - k) < sizeof(dname) &&
		    !strcmp(slash + 1, CKPT_MANIFEST_NAME)) {
			memcpy(dname, k, (size_t)(slash - k));
			dname[slash - k] = '\0';
			if (ckpt_step_dirname_parse(dname, &st) == 0)
				v[nv++] = st;
		}
		free(keys[i]);
	}
	free(keys);
	free(sizes);
	if (!v)
		return -ENOMEM;
	/* Keys come sorted, and step names sort like their numbers. */
	*steps = v;
	*n = nv;
	return 0;
}

static int s3_read_manifest(struct restore_source *src, uint64_t step, char **buf,
			    size_t *len, char *why, size_t whylen)
{
	struct s3_source_ctx *s = (struct s3_source_ctx *)src;
	char key[1200];

	step_key(s, step, CKPT_MANIFEST_NAME, key, sizeof(key));
	int r = s3_sync_get_small(&s->cfg, s->bucket, key, MANIFEST_MAX, buf, len, why, whylen);
	if (r == -ENOENT)
		snprintf(why, whylen, "s3://%s/%s: missing: the step is not committed on S3",
			 s->bucket, key);
	return r;
}

static int s3_fetch(struct restore_source *src, uint64_t step, const char *name,
		    uint64_t bytes, int dstfd, void (*progress)(void *, uint64_t),
		    void *opaque, char *why, size_t whylen)
{
	struct s3_source_ctx *s = (struct s3_source_ctx *)src;
	char key[1200];

	step_key(s, step, name, key, sizeof(key));
	return s3_sync_get_file(&s->cfg, s->bucket, key, bytes, dstfd, RANGES_IN_FLIGHT, progress,
				opaque, why, whylen);
}

static void s3_close(struct restore_source *src)
{
	struct s3_source_ctx *s = (struct s3_source_ctx *)src;

	if (!s)
		return;
	s3_config_free(&s->cfg);
	free(s->bucket);
	free(s->job_key);
	free(s);
}

static bool parse_step(const char *t, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (ckpt_step_dirname_parse(t, out) == 0)
		return true;
	if (!*t || *t < '0' || *t > '9')
		return false;
	errno = 0;
	v = strtoull(t, &end, 10);
	if (errno || *end || v == 0 || v >= 10000000000ull)
		return false;
	*out = v;
	return true;
}

int restore_source_s3_open(const char *spec, struct restore_source **out,
			   uint64_t *step, char *why, size_t whylen)
{
	char buf[1200], err[400] = "";
	struct s3_url url = { 0 };
	int r;

	*step = 0;
	if (strlen(spec) >= sizeof(buf)) {
		snprintf(why, whylen, "too long");
		return -EINVAL;
	}
	snprintf(buf, sizeof(buf), "%s", spec);
	char *at = strrchr(buf, '@');
	if (at && !strchr(at, '/')) {
		if (!parse_step(at + 1, step)) {
			snprintf(why, whylen, "'%s' after '@' is not a step number", at + 1);
			return -EINVAL;
		}
		*at = '\0';
	}
	r = s3_url_parse(buf, &url, err, sizeof(err));
	if (r < 0) {
		snprintf(why, whylen, "%s", err);
		return -EINVAL;
	}
	/* The last component is the job. */
	const char *job = strrchr(url.prefix, '/');
	job = job ? job + 1 : url.prefix;
	if (!*job || ckpt_job_name_check(job, strlen(job)) != 0) {
		snprintf(why, whylen, "no job name at the end of the URL (s3://BUCKET/PREFIX/JOB)");
		s3_url_free(&url);
		return -EINVAL;
	}
	struct s3_source_ctx *s = calloc(1, sizeof(*s));
	if (!s) {
		s3_url_free(&url);
		return -ENOMEM;
	}
	r = s3_config_resolve(NULL, &s->cfg, err, sizeof(err));
	if (r < 0) {
		snprintf(why, whylen, "S3 configuration: %s", err);
		s3_url_free(&url);
		free(s);
		return r;
	}
	snprintf(s->pub.job, sizeof(s->pub.job), "%s", job);
	snprintf(s->pub.desc, sizeof(s->pub.desc), "s3://%s/%s", url.bucket, url.prefix);
	s->bucket = url.bucket;
	s->job_key = url.prefix;
	url.bucket = url.prefix = NULL;
	s3_url_free(&url);
	s->pub.list_steps = s3_list_steps;
	s->pub.read_manifest = s3_read_manifest;
	s->pub.fetch = s3_fetch;
	s->pub.close = s3_close;
	*out = &s->pub;
	return 0;
}
