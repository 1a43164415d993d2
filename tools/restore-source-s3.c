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
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "restore-source.h"
#include "s3.h"
#include "store.h"
#include "zshard.h"
#include "toolutil.h"

#define RANGES_IN_FLIGHT 4
#define MANIFEST_MAX ((uint64_t)1 << 30)

int restore_source_s3_open(const char *spec, const struct s3_settings *s3,
			   struct restore_source **out, uint64_t *step, char *why,
			   size_t whylen);

struct s3_source_ctx {
	struct restore_source pub;
	struct s3_config cfg;
	char *bucket;
	char *job_key;          /* "PREFIX/JOB" or "JOB" */
	/* The step whose manifest was read last, and whether its shards are
	 * compressed objects (set before any fetch of that step). */
	uint64_t step;
	bool zstd;
};

static void step_key(const struct s3_source_ctx *s, uint64_t step, const char *name,
		     char *out, size_t cap)
{
	if (ckpt_s3_step_key(out, cap, s->job_key, step, name) < 0) {
		/* Not a step number, or no room: a key every request refuses. */
		snprintf(out, cap, "\n");
	}
}

/* ---- the source ----------------------------------------------------------------- */

static int s3_list_steps(struct restore_source *src, uint64_t **steps, size_t *n,
			 char *why, size_t whylen)
{
	struct s3_source_ctx *s = (struct s3_source_ctx *)src;

	return s3_sync_list_steps(&s->cfg, s->bucket, s->job_key, steps, n, why, whylen);
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
	if (r < 0)
		return r;
	/* How the shards are stored there; the root gets the manifest without
	 * that (FORMAT.md: only the S3 object carries s3_encoding). */
	struct ckpt_manifest m = { 0 };
	char w[200] = "";
	r = ckpt_manifest_decode(*buf, *len, &m, w, sizeof(w));
	if (r < 0) {
		snprintf(why, whylen, "s3://%s/%s: %s", s->bucket, key, w);
		goto fail;
	}
	s->step = step;
	s->zstd = false;
	if (m.s3_encoding[0]) {
		if (strcmp(m.s3_encoding, ZSHARD_ENCODING) != 0) {
			snprintf(why, whylen, "s3://%s/%s: shards stored as \"%s\", which this "
				 "ckpt-restore cannot read", s->bucket, key, m.s3_encoding);
			r = -EPROTONOSUPPORT;
			ckpt_manifest_free(&m);
			goto fail;
		}
		s->zstd = true;
		m.s3_encoding[0] = '\0';
		char *root = NULL;
		size_t rlen = 0;
		r = ckpt_manifest_encode(&m, &root, &rlen);
		if (r == 0) {
			free(*buf);
			*buf = root;
			*len = rlen;
		}
	}
	ckpt_manifest_free(&m);
	if (r == 0)
		return 0;
fail:
	free(*buf);
	*buf = NULL;
	return r;
}

static int s3_fetch(struct restore_source *src, uint64_t step, const char *name,
		    uint64_t bytes, int dstfd, void (*progress)(void *, uint64_t),
		    void *opaque, char *why, size_t whylen)
{
	struct s3_source_ctx *s = (struct s3_source_ctx *)src;
	char key[1200];

	size_t nl = strlen(name);
	if (s->zstd && s->step == step && nl > 6 && !strcmp(name + nl - 6, ".shard")) {
		char zname[64];
		snprintf(zname, sizeof(zname), "%s%s", name, ZSHARD_SUFFIX);
		step_key(s, step, zname, key, sizeof(key));
		return s3_sync_get_zshard(&s->cfg, s->bucket, key, bytes, dstfd, RANGES_IN_FLIGHT,
					  progress, opaque, why, whylen);
	}
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

int restore_source_s3_open(const char *spec, const struct s3_settings *s3,
			   struct restore_source **out, uint64_t *step, char *why,
			   size_t whylen)
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
		if (!tool_parse_step(at + 1, step)) {
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
	r = s3_config_resolve(s3, &s->cfg, err, sizeof(err));
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
