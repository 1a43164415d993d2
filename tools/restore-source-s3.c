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

#define RANGE_BYTES ((uint64_t)16 << 20)
#define RANGES_IN_FLIGHT 4
#define MANIFEST_MAX ((uint64_t)1 << 30)
#define WAIT_MS (30 * 60 * 1000)

int restore_source_s3_open(const char *spec, struct restore_source **out,
			   uint64_t *step, char *why, size_t whylen);

struct s3_source_ctx {
	struct restore_source pub;
	struct s3_config cfg;
	char *bucket;
	char *job_key;          /* "PREFIX/JOB" or "JOB" */
};

static int client_new(struct s3_source_ctx *s, unsigned inflight, s3_client **c,
		      char *why, size_t whylen)
{
	struct s3_client_options o = { .max_inflight = inflight };
	char err[400] = "";
	int r = s3_client_new(&s->cfg, &o, NULL, c, err, sizeof(err));

	if (r < 0)
		snprintf(why, whylen, "S3 client: %s", err[0] ? err : strerror(-r));
	return r;
}

/* ---- one operation at a time ------------------------------------------------ */

struct sync_result {
	int err;
	char error[600];
	uint64_t content_length;
	struct s3_list list;       /* a copy of the page's objects (keys, sizes) */
	char *next_marker;
	bool truncated;
};

static void sync_done(const struct s3_result *res, void *arg)
{
	struct sync_result *sr = arg;

	sr->err = res->err;
	snprintf(sr->error, sizeof(sr->error), "%s", res->error ? res->error : "");
	sr->content_length = res->content_length;
	if (res->err || !res->list)
		return;
	sr->truncated = res->list->truncated;
	if (res->list->next_marker)
		sr->next_marker = strdup(res->list->next_marker);
	sr->list.objects = calloc(res->list->n_objects ? res->list->n_objects : 1,
				  sizeof(*sr->list.objects));
	if (!sr->list.objects) {
		sr->err = -ENOMEM;
		return;
	}
	for (size_t i = 0; i < res->list->n_objects; i++) {
		sr->list.objects[i].key = strdup(res->list->objects[i].key);
		sr->list.objects[i].size = res->list->objects[i].size;
		if (!sr->list.objects[i].key) {
			sr->err = -ENOMEM;
			return;
		}
		sr->list.n_objects++;
	}
}

static int sync_wait(s3_client *c, int r, struct sync_result *sr, const char *what,
		     char *why, size_t whylen)
{
	if (r < 0) {
		snprintf(why, whylen, "%s: %s", what, strerror(-r));
		return r;
	}
	r = s3_client_wait(c, WAIT_MS);
	if (r < 0) {
		snprintf(why, whylen, "%s: %s", what, strerror(-r));
		return r;
	}
	if (sr->err)
		snprintf(why, whylen, "%s", sr->error[0] ? sr->error : strerror(-sr->err));
	return sr->err;
}

static void sync_free(struct sync_result *sr)
{
	for (size_t i = 0; i < sr->list.n_objects; i++)
		free(sr->list.objects[i].key);
	free(sr->list.objects);
	free(sr->next_marker);
	memset(sr, 0, sizeof(*sr));
}

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
	s3_client *c = NULL;
	char prefix[1200], *marker = NULL;
	uint64_t *v = NULL;
	size_t nv = 0, cap = 0;
	int r = client_new(s, 1, &c, why, whylen);

	if (r < 0)
		return r;
	snprintf(prefix, sizeof(prefix), "%s/step-", s->job_key);
	for (;;) {
		struct sync_result sr = { 0 };
		struct s3_list_args a = { .prefix = prefix, .marker = marker };
		r = sync_wait(c, s3_list_objects(c, s->bucket, &a, sync_done, &sr), &sr,
			      "listing", why, whylen);
		free(marker);
		marker = NULL;
		if (r < 0) {
			sync_free(&sr);
			break;
		}
		for (size_t i = 0; i < sr.list.n_objects; i++) {
			const char *k = sr.list.objects[i].key + strlen(s->job_key) + 1;
			char dname[32];
			const char *slash = strchr(k, '/');
			uint64_t st;
			if (!slash || (size_t)(slash - k) >= sizeof(dname) ||
			    strcmp(slash + 1, CKPT_MANIFEST_NAME) != 0)
				continue;
			memcpy(dname, k, (size_t)(slash - k));
			dname[slash - k] = '\0';
			if (ckpt_step_dirname_parse(dname, &st) < 0)
				continue;
			if (nv == cap) {
				cap = cap ? 2 * cap : 64;
				uint64_t *nvp = realloc(v, cap * sizeof(*v));
				if (!nvp) {
					r = -ENOMEM;
					break;
				}
				v = nvp;
			}
			v[nv++] = st;
		}
		bool more = r == 0 && sr.truncated && sr.next_marker;
		if (more)
			marker = strdup(sr.next_marker);
		sync_free(&sr);
		if (!more)
			break;
	}
	s3_client_free(c);
	if (r < 0) {
		free(v);
		return r;
	}
	/* Keys come sorted, and step names sort like their numbers. */
	*steps = v;
	*n = nv;
	return 0;
}

static int s3_read_manifest(struct restore_source *src, uint64_t step, char **buf,
			    size_t *len, char *why, size_t whylen)
{
	struct s3_source_ctx *s = (struct s3_source_ctx *)src;
	s3_client *c = NULL;
	char key[1200];
	struct sync_result sr = { 0 };
	int r = client_new(s, 1, &c, why, whylen);

	if (r < 0)
		return r;
	step_key(s, step, CKPT_MANIFEST_NAME, key, sizeof(key));
	r = sync_wait(c, s3_head_object(c, s->bucket, key, sync_done, &sr), &sr, key, why, whylen);
	if (r == -ENOENT)
		snprintf(why, whylen, "s3://%s/%s: missing: the step is not committed on S3",
			 s->bucket, key);
	if (r == 0 && sr.content_length > MANIFEST_MAX)
		r = -EFBIG;
	uint64_t size = sr.content_length;
	sync_free(&sr);
	if (r == 0) {
		char *b = malloc(size + 1);
		if (!b) {
			r = -ENOMEM;
		} else {
			struct s3_sink sink = { .buf = b, .fd = -1, .cap = size };
			r = sync_wait(c, s3_get_object(c, s->bucket, key, 0, 0, &sink, sync_done, &sr),
				      &sr, key, why, whylen);
			if (r == 0 && sr.content_length != size) {
				snprintf(why, whylen, "s3://%s/%s: %" PRIu64 " bytes, HEAD said %" PRIu64,
					 s->bucket, key, sr.content_length, size);
				r = -EBADMSG;
			}
			sync_free(&sr);
			if (r == 0) {
				b[size] = '\0';
				*buf = b;
				*len = (size_t)size;
			} else {
				free(b);
			}
		}
	}
	s3_client_free(c);
	return r;
}

struct range_op {
	struct range_fetch *f;
	uint64_t len;
};

struct range_fetch {
	int err;
	char error[600];
	void (*progress)(void *opaque, uint64_t delta);
	void *opaque;
};

static void range_done(const struct s3_result *res, void *arg)
{
	struct range_op *op = arg;
	struct range_fetch *f = op->f;

	if (res->err) {
		if (!f->err) {
			f->err = res->err;
			snprintf(f->error, sizeof(f->error), "%s", res->error);
		}
	} else if (res->content_length != op->len) {
		if (!f->err) {
			f->err = -EBADMSG;
			snprintf(f->error, sizeof(f->error), "a range of %" PRIu64 " bytes came back with %"
				 PRIu64, op->len, res->content_length);
		}
	} else {
		f->progress(f->opaque, op->len);
	}
}

static int s3_fetch(struct restore_source *src, uint64_t step, const char *name,
		    uint64_t bytes, int dstfd, void (*progress)(void *, uint64_t),
		    void *opaque, char *why, size_t whylen)
{
	struct s3_source_ctx *s = (struct s3_source_ctx *)src;
	s3_client *c = NULL;
	char key[1200];
	struct sync_result sr = { 0 };
	int r = client_new(s, RANGES_IN_FLIGHT, &c, why, whylen);

	if (r < 0)
		return r;
	step_key(s, step, name, key, sizeof(key));
	/* The size first: a wrong object is named before any byte moves. */
	r = sync_wait(c, s3_head_object(c, s->bucket, key, sync_done, &sr), &sr, key, why, whylen);
	if (r == 0 && sr.content_length != bytes) {
		snprintf(why, whylen, "s3://%s/%s: %" PRIu64 " bytes, the manifest says %" PRIu64,
			 s->bucket, key, sr.content_length, bytes);
		r = -EBADMSG;
	}
	sync_free(&sr);
	if (r < 0) {
		s3_client_free(c);
		return r;
	}
	size_t nranges = bytes ? (size_t)((bytes + RANGE_BYTES - 1) / RANGE_BYTES) : 0;
	struct range_op *ops = calloc(nranges ? nranges : 1, sizeof(*ops));
	struct range_fetch f = { .progress = progress, .opaque = opaque };
	if (!ops) {
		s3_client_free(c);
		return -ENOMEM;
	}
	/* All ranges at once: the client keeps RANGES_IN_FLIGHT running and
	 * queues the rest; each writes at its own offset. */
	for (size_t i = 0; i < nranges && r == 0; i++) {
		uint64_t off = (uint64_t)i * RANGE_BYTES;
		ops[i].f = &f;
		ops[i].len = bytes - off < RANGE_BYTES ? bytes - off : RANGE_BYTES;
		struct s3_sink sink = { .fd = dstfd, .offset = off, .cap = ops[i].len };
		r = s3_get_object(c, s->bucket, key, off, ops[i].len, &sink, range_done, &ops[i]);
	}
	int w = s3_client_wait(c, WAIT_MS);
	if (r == 0 && w < 0)
		r = w;
	if (r == 0 && f.err) {
		r = f.err;
		snprintf(why, whylen, "%s", f.error);
	} else if (r < 0) {
		snprintf(why, whylen, "s3://%s/%s: %s", s->bucket, key, strerror(-r));
	}
	free(ops);
	s3_client_free(c);
	return r;
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
