/* SPDX-License-Identifier: MIT */
/*
 * Blocking helpers over a private S3 client, for code that runs on a
 * thread of its own (tools, ckptd's restore workers): each call makes a
 * client, drives it with s3_client_wait until its operations are done, and
 * frees it. See s3.h, "Blocking helpers".
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3.h"

#define RANGE_BYTES ((uint64_t)16 << 20)
#define WAIT_MS (30 * 60 * 1000)

static int client_new(const struct s3_config *cfg, unsigned inflight, s3_client **c,
		      char *err, size_t errlen)
{
	struct s3_client_options o = { .max_inflight = inflight ? inflight : 1 };
	char why[400] = "";
	int r = s3_client_new(cfg, &o, NULL, c, why, sizeof(why));

	if (r < 0)
		snprintf(err, errlen, "S3 client: %s", why[0] ? why : strerror(-r));
	return r;
}

struct one {
	int err;
	char error[600];
	uint64_t content_length;
	struct s3_list list;   /* keys and sizes of a listing page */
	char *next_marker;
	bool truncated;
};

static void one_free(struct one *o)
{
	for (size_t i = 0; i < o->list.n_objects; i++)
		free(o->list.objects[i].key);
	free(o->list.objects);
	free(o->next_marker);
	memset(o, 0, sizeof(*o));
}

static void one_done(const struct s3_result *res, void *arg)
{
	struct one *o = arg;

	o->err = res->err;
	snprintf(o->error, sizeof(o->error), "%s", res->error ? res->error : "");
	o->content_length = res->content_length;
	if (res->err || !res->list)
		return;
	o->truncated = res->list->truncated;
	if (res->list->next_marker && !(o->next_marker = strdup(res->list->next_marker))) {
		o->err = -ENOMEM;
		return;
	}
	o->list.objects = calloc(res->list->n_objects ? res->list->n_objects : 1,
				 sizeof(*o->list.objects));
	if (!o->list.objects) {
		o->err = -ENOMEM;
		return;
	}
	for (size_t i = 0; i < res->list->n_objects; i++) {
		o->list.objects[i].key = strdup(res->list->objects[i].key);
		o->list.objects[i].size = res->list->objects[i].size;
		if (!o->list.objects[i].key) {
			o->err = -ENOMEM;
			return;
		}
		o->list.n_objects++;
	}
}

/* Wait for the one operation that `submitted` (its return) started. */
static int one_wait(s3_client *c, int submitted, struct one *o, const char *what,
		    char *err, size_t errlen)
{
	int r = submitted;

	if (r == 0)
		r = s3_client_wait(c, WAIT_MS);
	if (r < 0) {
		snprintf(err, errlen, "%s: %s", what, strerror(-r));
		return r;
	}
	if (o->err)
		snprintf(err, errlen, "%s", o->error[0] ? o->error : strerror(-o->err));
	return o->err;
}

int s3_sync_list(const struct s3_config *cfg, const char *bucket, const char *prefix,
		 char ***keys, uint64_t **sizes, size_t *n, char *err, size_t errlen)
{
	s3_client *c = NULL;
	char *marker = NULL, **k = NULL;
	uint64_t *sz = NULL;
	size_t nk = 0, cap = 0;
	int r = client_new(cfg, 1, &c, err, errlen);

	if (r < 0)
		return r;
	for (;;) {
		struct one o = { 0 };
		struct s3_list_args a = { .prefix = prefix, .marker = marker };
		r = one_wait(c, s3_list_objects(c, bucket, &a, one_done, &o), &o, "listing", err,
			     errlen);
		free(marker);
		marker = NULL;
		for (size_t i = 0; r == 0 && i < o.list.n_objects; i++) {
			if (nk == cap) {
				cap = cap ? 2 * cap : 64;
				char **nk2 = realloc(k, cap * sizeof(*k));
				uint64_t *ns2 = nk2 ? realloc(sz, cap * sizeof(*sz)) : NULL;
				if (nk2)
					k = nk2;
				if (ns2)
					sz = ns2;
				if (!nk2 || !ns2) {
					r = -ENOMEM;
					break;
				}
			}
			k[nk] = o.list.objects[i].key;
			o.list.objects[i].key = NULL;
			sz[nk++] = o.list.objects[i].size;
		}
		bool more = r == 0 && o.truncated && o.next_marker;
		if (more && !(marker = strdup(o.next_marker)))
			r = -ENOMEM;
		one_free(&o);
		if (r < 0 || !more)
			break;
	}
	s3_client_free(c);
	if (r < 0) {
		for (size_t i = 0; i < nk; i++)
			free(k[i]);
		free(k);
		free(sz);
		return r;
	}
	*keys = k;
	*sizes = sz;
	*n = nk;
	return 0;
}

int s3_sync_get_small(const struct s3_config *cfg, const char *bucket, const char *key,
		      uint64_t max, char **buf, size_t *len, char *err, size_t errlen)
{
	s3_client *c = NULL;
	struct one o = { 0 };
	int r = client_new(cfg, 1, &c, err, errlen);

	if (r < 0)
		return r;
	r = one_wait(c, s3_head_object(c, bucket, key, one_done, &o), &o, key, err, errlen);
	uint64_t size = o.content_length;
	one_free(&o);
	if (r == 0 && size > max) {
		snprintf(err, errlen, "s3://%s/%s: %" PRIu64 " bytes, more than %" PRIu64, bucket, key,
			 size, max);
		r = -EFBIG;
	}
	if (r == 0) {
		char *b = malloc(size + 1);
		struct s3_sink sink = { .buf = b, .fd = -1, .cap = size };
		if (!b)
			r = -ENOMEM;
		else
			r = one_wait(c, s3_get_object(c, bucket, key, 0, 0, &sink, one_done, &o), &o,
				     key, err, errlen);
		if (r == 0 && o.content_length != size) {
			snprintf(err, errlen, "s3://%s/%s: %" PRIu64 " bytes, HEAD said %" PRIu64, bucket,
				 key, o.content_length, size);
			r = -EBADMSG;
		}
		one_free(&o);
		if (r == 0) {
			b[size] = '\0';
			*buf = b;
			*len = (size_t)size;
		} else {
			free(b);
		}
	}
	s3_client_free(c);
	return r;
}

struct range {
	struct ranges *all;
	uint64_t len;
};

struct ranges {
	int err;
	char error[600];
	void (*progress)(void *opaque, uint64_t delta);
	void *opaque;
};

static void range_done(const struct s3_result *res, void *arg)
{
	struct range *rg = arg;
	struct ranges *all = rg->all;

	if (res->err) {
		if (!all->err) {
			all->err = res->err;
			snprintf(all->error, sizeof(all->error), "%s", res->error);
		}
	} else if (res->content_length != rg->len) {
		if (!all->err) {
			all->err = -EBADMSG;
			snprintf(all->error, sizeof(all->error),
				 "a range of %" PRIu64 " bytes came back with %" PRIu64, rg->len,
				 res->content_length);
		}
	} else if (all->progress) {
		all->progress(all->opaque, rg->len);
	}
}

int s3_sync_get_file(const struct s3_config *cfg, const char *bucket, const char *key,
		     uint64_t size, int fd, unsigned parallel,
		     void (*progress)(void *opaque, uint64_t delta), void *opaque,
		     char *err, size_t errlen)
{
	s3_client *c = NULL;
	struct one o = { 0 };
	int r = client_new(cfg, parallel, &c, err, errlen);

	if (r < 0)
		return r;
	/* The size first: a wrong object is named before any byte moves. */
	r = one_wait(c, s3_head_object(c, bucket, key, one_done, &o), &o, key, err, errlen);
	if (r == 0 && o.content_length != size) {
		snprintf(err, errlen, "s3://%s/%s: %" PRIu64 " bytes, expected %" PRIu64, bucket, key,
			 o.content_length, size);
		r = -EBADMSG;
	}
	one_free(&o);
	if (r < 0) {
		s3_client_free(c);
		return r;
	}
	size_t n = size ? (size_t)((size + RANGE_BYTES - 1) / RANGE_BYTES) : 0;
	struct range *rg = calloc(n ? n : 1, sizeof(*rg));
	struct ranges all = { .progress = progress, .opaque = opaque };
	if (!rg) {
		s3_client_free(c);
		return -ENOMEM;
	}
	/* All at once: the client runs `parallel` and queues the rest; each
	 * range lands at its own offset. */
	for (size_t i = 0; i < n && r == 0; i++) {
		uint64_t off = (uint64_t)i * RANGE_BYTES;
		rg[i].all = &all;
		rg[i].len = size - off < RANGE_BYTES ? size - off : RANGE_BYTES;
		struct s3_sink sink = { .fd = fd, .offset = off, .cap = rg[i].len };
		r = s3_get_object(c, bucket, key, off, rg[i].len, &sink, range_done, &rg[i]);
	}
	int w = s3_client_wait(c, WAIT_MS);
	if (r == 0 && w < 0)
		r = w;
	if (r == 0 && all.err) {
		r = all.err;
		snprintf(err, errlen, "%s", all.error);
	} else if (r < 0) {
		snprintf(err, errlen, "s3://%s/%s: %s", bucket, key, strerror(-r));
	}
	free(rg);
	s3_client_free(c);
	return r;
}
