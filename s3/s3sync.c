/* SPDX-License-Identifier: MIT */
/*
 * Blocking helpers over S3 clients, for code that runs on a thread of its
 * own (tools, ckptd's restore workers), driving a client with
 * s3_client_wait until its operations are done: single operations on a
 * client the caller keeps (connections reused from call to call), and
 * whole jobs that make a private client and free it. See s3.h, "Blocking
 * helpers". Event-loop users (ckptd's uploader) never come here.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "s3.h"
#include "zshard.h"

#define RANGE_BYTES ((uint64_t)16 << 20)
#define WAIT_MS (30 * 60 * 1000)

int s3_sync_client_new(const struct s3_config *cfg, unsigned max_inflight, s3_client **c,
			char *err, size_t errlen)
{
	struct s3_client_options o = { .max_inflight = max_inflight ? max_inflight : 1 };
	char why[400] = "";
	int r = s3_client_new(cfg, &o, NULL, c, why, sizeof(why));

	if (r < 0)
		snprintf(err, errlen, "S3 client: %s", why[0] ? why : strerror(-r));
	return r;
}

/* One operation's outcome; its done callback sets every field, so one can
 * serve several operations in turn. */
struct one {
	int err;
	char error[600];
	uint64_t content_length;
};

static void one_done(const struct s3_result *res, void *arg)
{
	struct one *o = arg;

	o->err = res->err;
	snprintf(o->error, sizeof(o->error), "%s", res->error ? res->error : "");
	o->content_length = res->content_length;
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

/* ---- on a client the caller keeps ------------------------------------------- */

int s3_sync_head(s3_client *c, const char *bucket, const char *key, uint64_t *size,
		 char *err, size_t errlen)
{
	struct one o = { 0 };
	char what[S3_BUCKET_MAX + S3_KEY_MAX + 16];
	int r;

	snprintf(what, sizeof(what), "s3://%s/%s", bucket, key);
	r = one_wait(c, s3_head_object(c, bucket, key, one_done, &o), &o, what, err, errlen);
	if (r == 0)
		*size = o.content_length;
	else if (r == -ENOENT)
		snprintf(err, errlen, "s3://%s/%s: no such object", bucket, key);
	return r;
}

/* A listing page by page: each page goes to page() while the result is valid. */
struct paged {
	struct one o;
	s3_sync_page_fn page;
	void *ctx;
	bool stop;              /* page() asked for no more */
	bool truncated;
	char *next_marker, *next_upload_id_marker;
};

static void paged_done(const struct s3_result *res, void *arg)
{
	struct paged *p = arg;

	one_done(res, &p->o);
	if (res->err || !res->list)
		return;
	int r = p->page(p->ctx, res->list);
	if (r < 0)
		p->o.err = r;
	p->stop = r > 0;
	p->truncated = res->list->truncated;
	if (res->list->next_marker)
		p->next_marker = strdup(res->list->next_marker);
	if (res->list->next_upload_id_marker)
		p->next_upload_id_marker = strdup(res->list->next_upload_id_marker);
	if ((res->list->next_marker && !p->next_marker) ||
	    (res->list->next_upload_id_marker && !p->next_upload_id_marker))
		p->o.err = -ENOMEM;
}

static int list_each(s3_client *c, bool uploads, const char *bucket,
		     const struct s3_list_args *args, s3_sync_page_fn page, void *ctx,
		     char *err, size_t errlen)
{
	struct s3_list_args a = *args;
	char *marker = NULL, *upload_marker = NULL, what[S3_BUCKET_MAX + S3_KEY_MAX + 32];
	int r;

	snprintf(what, sizeof(what), "listing s3://%s/%s", bucket, a.prefix ? a.prefix : "");
	for (;;) {
		struct paged p = { .page = page, .ctx = ctx };

		r = uploads ? s3_list_multipart_uploads(c, bucket, &a, paged_done, &p)
			    : s3_list_objects(c, bucket, &a, paged_done, &p);
		r = one_wait(c, r, &p.o, what, err, errlen);
		free(marker);
		free(upload_marker);
		marker = upload_marker = NULL;
		bool more = r == 0 && !p.stop && p.truncated && p.next_marker;

		if (more) {
			a.marker = marker = p.next_marker;
			a.upload_id_marker = upload_marker = p.next_upload_id_marker;
		} else {
			free(p.next_marker);
			free(p.next_upload_id_marker);
		}
		if (!more)
			break;
	}
	return r;
}

int s3_sync_list_each(s3_client *c, const char *bucket, const struct s3_list_args *args,
		      s3_sync_page_fn page, void *ctx, char *err, size_t errlen)
{
	return list_each(c, false, bucket, args, page, ctx, err, errlen);
}

int s3_sync_list_uploads_each(s3_client *c, const char *bucket,
			      const struct s3_list_args *args, s3_sync_page_fn page,
			      void *ctx, char *err, size_t errlen)
{
	return list_each(c, true, bucket, args, page, ctx, err, errlen);
}

static void get_done(const struct s3_result *res, void *arg)
{
	struct s3_sync_get *g = arg;

	g->err = res->err;
	snprintf(g->error, sizeof(g->error), "%s", res->error ? res->error : "");
	g->content_length = res->content_length;
}

int s3_sync_get_many(s3_client *c, const char *bucket, struct s3_sync_get *v, size_t n,
		     char *err, size_t errlen)
{
	size_t i;
	int r = 0;

	for (i = 0; i < n; i++) {
		v[i].err = -ECANCELED;  /* until its done callback says otherwise */
		v[i].content_length = 0;
		v[i].error[0] = '\0';
	}
	/* All at once: the client runs max_inflight and queues the rest. */
	for (i = 0; i < n && r == 0; i++)
		r = s3_get_object(c, bucket, v[i].key, v[i].offset, v[i].len, &v[i].sink,
				  get_done, &v[i]);
	/* Wait even after a failed submit: what was accepted must end. */
	int w = s3_client_wait(c, WAIT_MS);

	if (r < 0) {
		snprintf(err, errlen, "s3://%s/%s: %s", bucket, v[i - 1].key, strerror(-r));
	} else if (w < 0) {
		r = w;
		snprintf(err, errlen, "s3://%s/%s%s: %s", bucket, n ? v[0].key : "",
			 n > 1 ? " (and others)" : "", strerror(-r));
	}
	return r;
}

int s3_sync_get_exact(s3_client *c, const char *bucket, const char *key, uint64_t size,
		      char **buf, char *err, size_t errlen)
{
	char *b = malloc(size + 1);

	if (!b)
		return -ENOMEM;
	struct s3_sync_get g = { .key = key, .sink = { .buf = b, .fd = -1, .cap = size } };
	int r = s3_sync_get_many(c, bucket, &g, 1, err, errlen);

	if (r == 0 && g.err) {
		r = g.err;
		snprintf(err, errlen, "%s", g.error[0] ? g.error : strerror(-r));
	} else if (r == 0 && g.content_length != size) {
		snprintf(err, errlen, "s3://%s/%s: %" PRIu64 " bytes, expected %" PRIu64, bucket,
			 key, g.content_length, size);
		r = -EBADMSG;
	}
	if (r < 0) {
		free(b);
		return r;
	}
	b[size] = '\0';
	*buf = b;
	return 0;
}

int s3_sync_get_ranges(s3_client *c, const char *bucket, const char *key, uint64_t offset,
		       size_t len, void *buf, unsigned parts, char *err, size_t errlen)
{
	size_t per, k = 0;
	struct s3_sync_get *g;
	int r;

	if (!parts)
		parts = 1;
	per = (len + parts - 1) / parts;
	g = calloc(parts, sizeof(*g));
	if (!g) {
		snprintf(err, errlen, "%s", strerror(ENOMEM));
		return -ENOMEM;
	}
	for (size_t pos = 0; pos < len && k < parts; pos += per) {
		size_t l = len - pos < per ? len - pos : per;

		g[k].key = key;
		g[k].offset = offset + pos;
		g[k].len = l;
		g[k].sink = (struct s3_sink){ .buf = (uint8_t *)buf + pos, .fd = -1, .cap = l };
		k++;
	}
	r = s3_sync_get_many(c, bucket, g, k, err, errlen);
	for (size_t i = 0; r == 0 && i < k; i++) {
		if (g[i].err) {
			r = g[i].err;
			snprintf(err, errlen, "%s", g[i].error[0] ? g[i].error : strerror(-r));
		} else if (g[i].content_length != g[i].len) {
			snprintf(err, errlen, "a range of %" PRIu64 " bytes came back with %" PRIu64,
				 g[i].len, g[i].content_length);
			r = -EBADMSG;
		}
	}
	free(g);
	return r;
}

/* ---- one call, one client ---------------------------------------------------- */

struct key_list {
	char **keys;
	uint64_t *sizes;
	size_t n, cap;
};

static int key_list_page(void *ctx, const struct s3_list *page)
{
	struct key_list *kl = ctx;

	for (size_t i = 0; i < page->n_objects; i++) {
		if (kl->n == kl->cap) {
			size_t cap = kl->cap ? 2 * kl->cap : 64;
			char **nk = realloc(kl->keys, cap * sizeof(*nk));
			uint64_t *ns = nk ? realloc(kl->sizes, cap * sizeof(*ns)) : NULL;

			if (nk)
				kl->keys = nk;
			if (ns)
				kl->sizes = ns;
			if (!nk || !ns)
				return -ENOMEM;
			kl->cap = cap;
		}
		kl->keys[kl->n] = strdup(page->objects[i].key);
		if (!kl->keys[kl->n])
			return -ENOMEM;
		kl->sizes[kl->n++] = page->objects[i].size;
	}
	return 0;
}

int s3_sync_list(const struct s3_config *cfg, const char *bucket, const char *prefix,
		 char ***keys, uint64_t **sizes, size_t *n, char *err, size_t errlen)
{
	s3_client *c = NULL;
	struct key_list kl = { 0 };
	struct s3_list_args a = { .prefix = prefix };
	int r = s3_sync_client_new(cfg, 1, &c, err, errlen);

	if (r < 0)
		return r;
	r = s3_sync_list_each(c, bucket, &a, key_list_page, &kl, err, errlen);
	s3_client_free(c);
	if (r < 0) {
		for (size_t i = 0; i < kl.n; i++)
			free(kl.keys[i]);
		free(kl.keys);
		free(kl.sizes);
		return r;
	}
	*keys = kl.keys;
	*sizes = kl.sizes;
	*n = kl.n;
	return 0;
}

int s3_sync_get_small(const struct s3_config *cfg, const char *bucket, const char *key,
		      uint64_t max, char **buf, size_t *len, char *err, size_t errlen)
{
	s3_client *c = NULL;
	struct one o = { 0 };
	int r = s3_sync_client_new(cfg, 1, &c, err, errlen);

	if (r < 0)
		return r;
	r = one_wait(c, s3_head_object(c, bucket, key, one_done, &o), &o, key, err, errlen);
	uint64_t size = o.content_length;
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
	int r = s3_sync_client_new(cfg, parallel, &c, err, errlen);

	if (r < 0)
		return r;
	/* The size first: a wrong object is named before any byte moves. */
	r = one_wait(c, s3_head_object(c, bucket, key, one_done, &o), &o, key, err, errlen);
	if (r == 0 && o.content_length != size) {
		snprintf(err, errlen, "s3://%s/%s: %" PRIu64 " bytes, expected %" PRIu64, bucket, key,
			 o.content_length, size);
		r = -EBADMSG;
	}
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

/* ---- compressed shard objects (zshard.h) ------------------------------------ */

#define BATCH_BYTES ((uint64_t)16 << 20)

struct zbatch {
	struct zfetch *f;
	size_t first, last;     /* pieces */
	uint64_t z_off, z_len;
	uint8_t *buf;
};

struct zfetch {
	int err;
	char error[600];
	const struct zpiece *p;
	int fd;
	uint8_t *raw, *tmp;     /* one piece's worth of scratch */
	void (*progress)(void *opaque, uint64_t delta);
	void *opaque;
};

static void zbatch_done(const struct s3_result *res, void *arg)
{
	struct zbatch *b = arg;
	struct zfetch *f = b->f;

	if (f->err)
		goto out;
	if (res->err || res->content_length != b->z_len) {
		f->err = res->err ? res->err : -EBADMSG;
		snprintf(f->error, sizeof(f->error), "%s", res->err ? res->error : "a short range");
		goto out;
	}
	/* Runs on the thread that drives the client: one piece at a time. */
	for (size_t i = b->first; i < b->last && !f->err; i++) {
		const struct zpiece *p = &f->p[i];
		int r = zshard_decompress(p, b->buf + (p->z_offset - b->z_off), f->tmp, f->raw);
		if (r < 0) {
			f->err = r;
			snprintf(f->error, sizeof(f->error), "piece %zu (bytes %" PRIu64 "..%" PRIu64
				 "): frame damaged (checksum or size)", i, p->raw_offset,
				 p->raw_offset + p->raw_len);
			break;
		}
		for (uint32_t done = 0; done < p->raw_len;) {
			ssize_t n = pwrite(f->fd, f->raw + done, p->raw_len - done,
					   (off_t)(p->raw_offset + done));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				f->err = n < 0 ? -errno : -EIO;
				snprintf(f->error, sizeof(f->error), "writing: %s", strerror(-f->err));
				break;
			}
			done += (uint32_t)n;
		}
		if (!f->err && f->progress)
			f->progress(f->opaque, p->raw_len);
	}
out:
	free(b->buf);
	b->buf = NULL;
}

int s3_sync_get_zshard(const struct s3_config *cfg, const char *bucket, const char *key,
		       uint64_t raw_size, int fd, unsigned parallel,
		       void (*progress)(void *opaque, uint64_t delta), void *opaque,
		       char *err, size_t errlen)
{
	s3_client *c = NULL;
	struct one o = { 0 };
	uint8_t trailer[ZSHARD_TRAILER_BYTES], *table = NULL;
	struct zpiece *p = NULL;
	struct zbatch *b = NULL;
	size_t n = 0, nb = 0;
	uint64_t raw_bytes = 0, size;
	int r = s3_sync_client_new(cfg, parallel, &c, err, errlen);

	if (r < 0)
		return r;
	r = one_wait(c, s3_head_object(c, bucket, key, one_done, &o), &o, key, err, errlen);
	size = o.content_length;
	if (r == 0 && size < ZSHARD_TRAILER_BYTES)
		r = -EBADMSG;
	if (r == 0) {
		struct s3_sink sink = { .buf = trailer, .fd = -1, .cap = sizeof(trailer) };
		r = one_wait(c, s3_get_object(c, bucket, key, size - sizeof(trailer), sizeof(trailer),
					      &sink, one_done, &o), &o, key, err, errlen);
	}
	if (r == 0)
		r = zshard_trailer_decode(trailer, size, &n, &raw_bytes);
	if (r == 0 && raw_bytes != raw_size)
		r = -EBADMSG;
	if (r == 0 && n) {
		uint64_t tb = (uint64_t)n * ZSHARD_ENTRY_BYTES;
		table = malloc(tb + ZSHARD_TRAILER_BYTES);
		if (!table) {
			r = -ENOMEM;
		} else {
			struct s3_sink sink = { .buf = table, .fd = -1, .cap = tb };
			r = one_wait(c, s3_get_object(c, bucket, key, size - ZSHARD_TRAILER_BYTES - tb, tb,
						      &sink, one_done, &o), &o, key, err, errlen);
			memcpy(table + tb, trailer, ZSHARD_TRAILER_BYTES);
		}
	}
	if (r == 0)
		r = zshard_table_decode(table, n, raw_bytes, size, &p);
	if (r == -EBADMSG || r == -EPROTONOSUPPORT)
		snprintf(err, errlen, "s3://%s/%s: %s", bucket, key,
			 r == -EBADMSG ? "not a valid compressed shard (trailer, table or size)"
				       : "compressed shard of an unknown version");
	free(table);
	if (r < 0) {
		s3_client_free(c);
		return r;
	}
	/* Batches of whole frames, about BATCH_BYTES each. */
	b = calloc(n ? n : 1, sizeof(*b));
	uint32_t maxraw = 0;
	for (size_t i = 0; i < n; i++)
		if (p[i].raw_len > maxraw)
			maxraw = p[i].raw_len;
	struct zfetch f = { .p = p, .fd = fd, .raw = malloc(maxraw ? maxraw : 1),
			    .tmp = malloc(maxraw ? maxraw : 1), .progress = progress,
			    .opaque = opaque };
	if (!b || !f.raw || !f.tmp)
		r = -ENOMEM;
	for (size_t i = 0; r == 0 && i < n;) {
		struct zbatch *x = &b[nb++];
		x->f = &f;
		x->first = i;
		x->z_off = p[i].z_offset;
		while (i < n && (i == x->first || p[i].z_offset + p[i].z_len - x->z_off <= BATCH_BYTES))
			i++;
		x->last = i;
		x->z_len = p[i - 1].z_offset + p[i - 1].z_len - x->z_off;
		x->buf = malloc(x->z_len ? x->z_len : 1);
		if (!x->buf) {
			r = -ENOMEM;
			break;
		}
		struct s3_sink sink = { .buf = x->buf, .fd = -1, .cap = x->z_len };
		r = s3_get_object(c, bucket, key, x->z_off, x->z_len, &sink, zbatch_done, x);
		if (r < 0) {
			free(x->buf);
			x->buf = NULL;
		}
	}
	int w = s3_client_wait(c, WAIT_MS);
	if (r == 0 && w < 0)
		r = w;
	if (r == 0 && f.err) {
		r = f.err;
		snprintf(err, errlen, "s3://%s/%s: %s", bucket, key, f.error);
	} else if (r < 0) {
		snprintf(err, errlen, "s3://%s/%s: %s", bucket, key, strerror(-r));
	}
	s3_client_free(c);
	for (size_t i = 0; i < nb; i++)
		free(b[i].buf);
	free(b);
	free(f.raw);
	free(f.tmp);
	free(p);
	return r;
}

int s3_sync_list_steps(const struct s3_config *cfg, const char *bucket, const char *job_key,
		       uint64_t **steps, size_t *n, char *err, size_t errlen)
{
	char prefix[S3_KEY_MAX + 16], **keys = NULL;
	uint64_t *sizes = NULL;
	size_t nk = 0, ns = 0;
	int r = ckpt_s3_steps_prefix(prefix, sizeof(prefix), job_key);

	if (r < 0) {
		snprintf(err, errlen, "'%s' is not a job's key", job_key);
		return r;
	}
	r = s3_sync_list(cfg, bucket, prefix, &keys, &sizes, &nk, err, errlen);
	if (r < 0)
		return r;
	uint64_t *v = calloc(nk ? nk : 1, sizeof(*v));
	for (size_t i = 0; i < nk; i++) {
		const char *rest;
		uint64_t s;

		if (v && ckpt_s3_key_parse(job_key, keys[i], &s, &rest) == 0 &&
		    strcmp(rest, CKPT_MANIFEST_NAME) == 0)
			v[ns++] = s;
		free(keys[i]);
	}
	free(keys);
	free(sizes);
	if (!v)
		return -ENOMEM;
	*steps = v;
	*n = ns;
	return 0;
}
