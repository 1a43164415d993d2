/* SPDX-License-Identifier: MIT */
/*
 * The S3 tier's upload of one step (see uploader.h): reading the step's
 * manifest and planning its objects, finding what S3 already holds of it
 * (objects, unfinished multipart uploads and their parts), sending the
 * shards and indexes (parts or whole objects, up to s3_parallel units in
 * flight: read, compressed and digested on the worker threads, sent by
 * the S3 client on the loop), then MANIFEST.json (the S3 commit), LATEST,
 * and the abort of leftover multipart uploads. One concept, the way of a
 * step's bytes from the root to S3, which is why it runs to about 1,000
 * lines. The checks those bytes pass on the workers are upload_verify.c's;
 * when an upload runs, and what happens when it fails, is uploader.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "ckptd.h"
#include "retention.h"
#include "log.h"
#include "metrics.h"
#include "s3.h"
#include "store.h"
#include "uploader_internal.h"
#include "workers.h"
#include "zshard.h"

/* ---- upload ---------------------------------------------------------------------------- */

/* Pieces and compression units of a shard that goes compressed. */
static int compress_plan(struct uploader *u, struct obj *o, const struct ckpt_table *table,
			 uint64_t chunk_bytes)
{
	uint64_t unit_bytes = u->d->cfg->s3_part_bytes, acc = 0;
	int r = zshard_plan(table, o->size, chunk_bytes, 1, &o->pieces, &o->npieces);

	if (r < 0)
		return r;
	o->compress = true;
	o->cunit_first = calloc(o->npieces + 1, sizeof(size_t));
	if (!o->cunit_first)
		return -ENOMEM;
	for (size_t i = 0; i < o->npieces; i++) {
		if (i == 0 || acc + o->pieces[i].raw_len > unit_bytes) {
			o->cunit_first[o->ncunits++] = i;
			acc = 0;
		}
		acc += o->pieces[i].raw_len;
	}
	o->cunit_first[o->ncunits] = o->npieces;
	o->ready = calloc(o->ncunits ? o->ncunits : 1, sizeof(*o->ready));
	/* At most a part per unit, and one more for a footer alone. */
	o->nparts = (uint32_t)o->ncunits + 1;
	o->etags = calloc(o->nparts, sizeof(char *));
	return o->ready && o->etags ? 0 : -ENOMEM;
}

static int upload_open(struct task *t)
{
	struct uploader *u = t->u;
	char dname[32];
	struct ckpt_manifest m = { 0 };
	char why[256] = "";
	int r;

	r = ckpt_step_dirname(dname, sizeof(dname), t->step);
	if (r < 0)
		return r;
	_cleanup_close_ int jobfd = openat(u->d->root_fd, t->job->name,
					   O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (jobfd < 0)
		return -errno;
	t->stepfd = openat(jobfd, dname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (t->stepfd < 0)
		return -errno;
	r = store_read_file(t->stepfd, CKPT_MANIFEST_NAME, MANIFEST_MAX, (void **)&t->manifest,
			    &t->manifest_len);
	if (r < 0)
		return r;
	r = ckpt_manifest_decode(t->manifest, t->manifest_len, &m, why, sizeof(why));
	if (r < 0) {
		snprintf(t->why, sizeof(t->why), "%s/%s: %s", dname, CKPT_MANIFEST_NAME, why);
		return r;
	}
	t->objs = calloc(2 * (size_t)m.world_size, sizeof(*t->objs));
	if (!t->objs) {
		ckpt_manifest_free(&m);
		return -ENOMEM;
	}
	t->n_objs = 2 * (size_t)m.world_size;
	bool compress = u->d->cfg->s3_compress != 0;
	for (uint32_t i = 0; i < m.world_size && r == 0; i++) {
		struct obj *s = &t->objs[i], *x = &t->objs[m.world_size + i];
		ckpt_shard_filename(s->name, sizeof(s->name), i);
		ckpt_index_filename(x->name, sizeof(x->name), i);
		s->rank = x->rank = i;
		x->is_index = true;
		memcpy(s->index_sha256, m.ranks[i].index_sha256, 32);
		memcpy(x->index_sha256, m.ranks[i].index_sha256, 32);
		ckpt_hex(s->index_hex, s->index_sha256, 32);
		memcpy(x->index_hex, s->index_hex, sizeof(x->index_hex));
		snprintf(s->key_name, sizeof(s->key_name), "%s%s", s->name, compress ? ZSHARD_SUFFIX : "");
		snprintf(x->key_name, sizeof(x->key_name), "%s", x->name);
		s->size = m.ranks[i].shard_bytes;
		x->size = m.ranks[i].index_bytes;
		s->s3_size = x->s3_size = UINT64_MAX;
		t->bytes_total += s->size + x->size;
		if (compress)
			r = compress_plan(u, s, &m.ranks[i].table, m.chunk_bytes);
	}
	if (r == 0 && compress) {
		/* The S3 manifest says how its shards are stored. */
		char *json = NULL;
		size_t len = 0;
		snprintf(m.s3_encoding, sizeof(m.s3_encoding), "%s", ZSHARD_ENCODING);
		r = ckpt_manifest_encode(&m, &json, &len);
		if (r == 0) {
			free(t->manifest);
			t->manifest = json;
			t->manifest_len = len;
		}
	}
	t->bytes_total += t->manifest_len;
	ckpt_manifest_free(&m);
	return r;
}

static struct obj *obj_by_key(struct task *t, const char *key)
{
	const char *rest;

	if (key_step(t->u, t->job->name, key, &rest) != t->step)
		return NULL;
	for (size_t i = 0; i < t->n_objs; i++)
		if (!strcmp(t->objs[i].key_name, rest))
			return &t->objs[i];
	return NULL;
}

static void up_list_done(const struct s3_result *res, void *arg)
{
	struct task *t = arg;

	count_attempts(res);
	if (res->err) {
		task_fail(t, res->err, "listing s3://%s: %s", t->u->url.bucket, res->error);
	} else {
		for (size_t i = 0; res->list && i < res->list->n_objects; i++) {
			struct obj *o = obj_by_key(t, res->list->objects[i].key);
			if (o)
				o->s3_size = res->list->objects[i].size;
		}
		if (!page_next(t, res->list))
			t->phase = UP_LIST_UPLOADS;
	}
	task_op_done(t);
}

static void up_uploads_done(const struct s3_result *res, void *arg)
{
	struct task *t = arg;

	count_attempts(res);
	if (res->err) {
		task_fail(t, res->err, "listing multipart uploads in s3://%s: %s", t->u->url.bucket,
			  res->error);
	} else {
		for (size_t i = 0; res->list && i < res->list->n_uploads; i++) {
			struct obj *o = obj_by_key(t, res->list->uploads[i].key);
			if (o && !o->upload_id && o->s3_size == UINT64_MAX)
				o->upload_id = strdup(res->list->uploads[i].upload_id);
		}
		if (!page_next(t, res->list))
			t->phase = UP_OBJECTS;
	}
	task_op_done(t);
}

/* Worker thread: compress pieces [first, last) of the shard into w->buf. */
static void unit_compress_run(struct unit *w)
{
	struct obj *o = w->o;
	size_t cap = 0, maxraw = 0;

	for (size_t i = w->first; i < w->last; i++) {
		cap += zshard_bound(o->pieces[i].raw_len);
		if (o->pieces[i].raw_len > maxraw)
			maxraw = o->pieces[i].raw_len;
	}
	uint8_t *raw = malloc(maxraw ? maxraw : 1), *tmp = malloc(maxraw ? maxraw : 1);
	w->buf = malloc(cap ? cap : 1);
	int fd = openat(w->t->stepfd, o->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (!raw || !tmp || !w->buf)
		w->err = -ENOMEM;
	else if (fd < 0)
		w->err = -errno;
	w->len = 0;
	for (size_t i = w->first; i < w->last && !w->err; i++) {
		struct zpiece *p = &o->pieces[i];
		w->err = read_exact(fd, raw, p->raw_len, p->raw_offset);
		if (!w->err)
			w->err = verify_range(o, fd, raw, p->raw_offset, p->raw_len, w->why,
					      sizeof(w->why));
		if (!w->err)
			w->err = zshard_compress(p, raw, tmp, w->buf + w->len, cap - w->len, w->level);
		if (!w->err)
			w->len += p->z_len;
	}
	if (fd >= 0)
		close(fd);
	free(raw);
	free(tmp);
}

/* Worker thread: read the unit's bytes (or compress them) and digest them. */
static void unit_read_run(void *arg)
{
	struct unit *w = arg;

	if (w->compress) {
		unit_compress_run(w);
	} else if (!w->digest_only) {
		w->buf = malloc(w->len ? w->len : 1);
		if (!w->buf) {
			w->err = -ENOMEM;
			return;
		}
		int fd = openat(w->t->stepfd, w->o->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			w->err = -errno;
			return;
		}
		w->err = read_exact(fd, w->buf, w->len, w->off);
		if (!w->err && !w->o->is_index)
			w->err = verify_range(w->o, fd, w->buf, w->off, w->len, w->why,
					      sizeof(w->why));
		close(fd);
	}
	unsigned int len;
	if (!w->err && (!EVP_Digest(w->buf, w->len, w->md5, &len, EVP_md5(), NULL) ||
			!EVP_Digest(w->buf, w->len, w->sha256, &len, EVP_sha256(), NULL)))
		w->err = -EIO;
	/* A whole index object must be the index the manifest names. */
	if (!w->err && !w->compress && !w->digest_only && w->o->is_index && w->part == 0 &&
	    memcmp(w->sha256, w->o->index_sha256, 32) != 0) {
		char hex[65];
		ckpt_hex(hex, w->sha256, 32);
		snprintf(w->why, sizeof(w->why), "rank=%u file=%s sha256=%s manifest_sha256=%s",
			 w->o->rank, w->o->name, hex, w->o->index_hex);
		w->err = -EBADMSG;
	}
}

/* Bytes about to leave did not verify: the step is not uploaded. */
static void verify_failed(struct task *t, const char *why)
{
	metrics_inc(M_S3_VERIFY_FAILURES_TOTAL, t->job->name);
	log_error("s3", "verification failed job=%s step=%" PRIu64 " %s: the step is not uploaded",
		  t->job->name, t->step, why);
	task_fail(t, -EBADMSG, "verification failed: %s", why);
}

static void index_done(void *arg)
{
	struct task *t = arg;

	if (t->u->closing) {
		t->ops--;
		return;
	}
	if (t->err == -EBADMSG) {
		char why[sizeof(t->why)];
		snprintf(why, sizeof(why), "%s", t->why);
		t->err = 0;
		t->why[0] = '\0';
		verify_failed(t, why);
	} else if (!t->err) {
		t->phase = UP_LIST;
	}
	task_op_done(t);
}

static void unit_free(struct unit *w)
{
	free(w->buf);
	free(w);
}

static void unit_sent(const struct s3_result *res, void *arg)
{
	struct unit *w = arg;
	struct task *t = w->t;
	struct uploader *u = t->u;

	count_attempts(res);
	u->units--;
	if (res->err) {
		char key[KEY_MAX + 64];
		step_key(u, t->job->name, t->step, w->o->key_name, key, sizeof(key));
		task_fail(t, res->err, "%s", res->error[0] ? res->error : key);
	} else if (!u->closing) {
		t->bytes_sent += w->len;
		metrics_add(M_S3_UPLOADED_BYTES_TOTAL, (double)w->len, t->job->name);
		if (w->part) {
			w->o->etags[w->part - 1] = strdup(res->etag ? res->etag : "");
			w->o->parts_done++;
		} else {
			w->o->state = OBJ_DONE;
		}
	}
	unit_free(w);
	task_op_done(t);
}

/* Loop thread: the unit's bytes are ready; send them (or find them sent). */
static void unit_send(struct unit *w)
{
	struct task *t = w->t;
	struct uploader *u = t->u;
	char key[KEY_MAX + 64];
	int r;

	step_key(u, t->job->name, t->step, w->o->key_name, key, sizeof(key));
	struct s3_source src = { .buf = w->buf, .fd = -1, .len = w->len, .sha256 = w->sha256,
				 .md5 = w->md5, .meta_index_sha256 = w->o->index_hex };
	if (w->part) {
		/* A part an earlier ckptd sent: same size and MD5 (the ETag of a
		 * part is its MD5), no need to send it again. */
		uint32_t i = w->part - 1;
		if (w->o->old_etags && w->o->old_etags[i] && w->o->old_sizes[i] == w->len) {
			char hex[35];
			hex[0] = '"';
			for (int k = 0; k < 16; k++)
				snprintf(hex + 1 + 2 * k, 3, "%02x", w->md5[k]);
			hex[33] = '"';
			hex[34] = '\0';
			if (!strcmp(hex, w->o->old_etags[i])) {
				w->o->etags[i] = strdup(hex);
				w->o->parts_done++;
				u->units--;
				t->parts_reused++;
				unit_free(w);
				task_op_done(t);
				return;
			}
		}
		r = s3_upload_part(u->c, u->url.bucket, key, w->o->upload_id, w->part, &src,
				   unit_sent, w);
	} else {
		r = s3_put_object(u->c, u->url.bucket, key, &src, unit_sent, w);
	}
	if (r < 0) {
		task_fail(t, r, "%s: starting the upload: %s", key, strerror(-r));
		u->units--;
		unit_free(w);
		task_op_done(t);
	}
	/* else: t->ops carries over from the read to the send */
}

static void unit_read_done(void *arg);

/* Make the next part of a compressed object from buf (taken). */
static void emit_part(struct task *t, struct obj *o, uint8_t *buf, size_t len, bool digested,
		      const uint8_t *md5, const uint8_t *sha256)
{
	struct uploader *u = t->u;
	struct unit *w = calloc(1, sizeof(*w));

	if (!w || o->parts_emitted >= o->nparts) {
		int err = w ? -EFBIG : -ENOMEM;
		free(w);
		free(buf);
		task_fail(t, err, "%s: %s", o->key_name,
			  err == -EFBIG ? "more parts than planned" : "out of memory");
		return;
	}
	w->t = t;
	w->o = o;
	w->part = ++o->parts_emitted;
	w->buf = buf;
	w->len = len;
	u->units++;
	t->ops++;
	if (digested) {
		memcpy(w->md5, md5, sizeof(w->md5));
		memcpy(w->sha256, sha256, sizeof(w->sha256));
		unit_send(w);
		return;
	}
	w->digest_only = true;
	int r = workers_submit(u->d->workers, unit_read_run, unit_read_done, w);
	if (r < 0) {
		u->units--;
		t->ops--;
		unit_free(w);
		task_fail(t, r, "%s: %s", o->key_name, strerror(-r));
	}
}

static int pending_append(struct obj *o, uint8_t *buf, size_t len)
{
	uint8_t *p = realloc(o->pending, o->pending_len + len);

	if (!p)
		return -ENOMEM;
	memcpy(p + o->pending_len, buf, len);
	o->pending = p;
	o->pending_len += len;
	return 0;
}

/*
 * Compressed units finish in any order; parts are made in order: each
 * unit's frames join the pending bytes, which go out as a part once there
 * are S3's minimum part size of them. The last part carries the table and
 * trailer.
 */
static void compress_emit(struct task *t, struct obj *o)
{
	while (!t->err && o->next_emit < o->ncunits && o->ready[o->next_emit].buf) {
		struct cres *c = &o->ready[o->next_emit];
		for (size_t i = o->cunit_first[o->next_emit]; i < o->cunit_first[o->next_emit + 1]; i++) {
			o->pieces[i].z_offset = o->z_total;
			o->z_total += o->pieces[i].z_len;
		}
		if (!o->pending) {
			o->pending = c->buf;
			o->pending_len = c->len;
			o->pending_digested = true;
			memcpy(o->pending_md5, c->md5, sizeof(c->md5));
			memcpy(o->pending_sha256, c->sha256, sizeof(c->sha256));
		} else {
			int r = pending_append(o, c->buf, c->len);
			free(c->buf);
			o->pending_digested = false;
			if (r < 0) {
				c->buf = NULL;
				task_fail(t, r, "out of memory");
				return;
			}
		}
		c->buf = NULL;
		o->next_emit++;
		if (o->next_emit < o->ncunits && o->pending_len < S3_PART_MIN)
			continue;
		if (o->next_emit == o->ncunits)
			break; /* the last part gets the footer below */
		emit_part(t, o, o->pending, o->pending_len, o->pending_digested, o->pending_md5,
			  o->pending_sha256);
		o->pending = NULL;
		o->pending_len = 0;
	}
	if (!t->err && o->next_emit == o->ncunits && !o->final_emitted) {
		size_t fb = zshard_footer_bytes(o->npieces);
		uint8_t *footer = malloc(fb);
		if (!footer) {
			task_fail(t, -ENOMEM, "out of memory");
			return;
		}
		zshard_footer_encode(o->pieces, o->npieces, o->size, footer);
		int r = pending_append(o, footer, fb);
		free(footer);
		if (r < 0) {
			task_fail(t, r, "out of memory");
			return;
		}
		o->final_emitted = true;
		emit_part(t, o, o->pending, o->pending_len, false, NULL, NULL);
		o->pending = NULL;
		o->pending_len = 0;
	}
}

/* Loop thread: a unit's bytes are read, compressed or digested. */
static void unit_read_done(void *arg)
{
	struct unit *w = arg;
	struct task *t = w->t;
	struct uploader *u = t->u;

	if (u->closing) {
		u->units--;
		t->ops--;
		unit_free(w);
		return;
	}
	if (w->err || t->err) {
		if (w->err == -EBADMSG)
			verify_failed(t, w->why);
		else if (w->err)
			task_fail(t, w->err, "%s %s of step %" PRIu64 ": %s",
				  w->compress ? "compressing" : "reading", w->o->name, t->step,
				  strerror(-w->err));
		u->units--;
		unit_free(w);
		task_op_done(t);
		return;
	}
	if (w->compress) {
		struct cres *c = &w->o->ready[w->cunit];
		c->buf = w->buf;
		c->len = w->len;
		memcpy(c->md5, w->md5, sizeof(c->md5));
		memcpy(c->sha256, w->sha256, sizeof(c->sha256));
		w->buf = NULL;
		u->units--;
		compress_emit(t, w->o);
		unit_free(w);
		task_op_done(t);
		return;
	}
	unit_send(w);
}

static int unit_start(struct task *t, struct obj *o, uint32_t part)
{
	struct uploader *u = t->u;
	struct unit *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	w->t = t;
	w->o = o;
	w->part = part;
	if (part) {
		w->off = (uint64_t)(part - 1) * o->part_size;
		w->len = o->size - w->off < o->part_size ? o->size - w->off : o->part_size;
	} else {
		w->len = o->size;
	}
	int r = workers_submit(u->d->workers, unit_read_run, unit_read_done, w);
	if (r < 0) {
		free(w);
		return r;
	}
	u->units++;
	t->ops++;
	return 0;
}

/* Compress unit `c` of o on a worker. */
static int cunit_start(struct task *t, struct obj *o, size_t c)
{
	struct uploader *u = t->u;
	struct unit *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	w->t = t;
	w->o = o;
	w->compress = true;
	w->cunit = c;
	w->first = o->cunit_first[c];
	w->last = o->cunit_first[c + 1];
	w->level = (int)u->d->cfg->s3_compress_level;
	int r = workers_submit(u->d->workers, unit_read_run, unit_read_done, w);
	if (r < 0) {
		free(w);
		return r;
	}
	u->units++;
	t->ops++;
	return 0;
}

static void mp_created(const struct s3_result *res, void *arg);
static void mp_parts_listed(const struct s3_result *res, void *arg);
static void mp_completed(const struct s3_result *res, void *arg);

struct obj_op {
	struct task *t;
	struct obj *o;
};

static int obj_op(struct task *t, struct obj *o, struct obj_op **out)
{
	*out = malloc(sizeof(**out));
	if (!*out)
		return -ENOMEM;
	(*out)->t = t;
	(*out)->o = o;
	return 0;
}

static int mp_prepare(struct obj *o, uint64_t part_size)
{
	uint32_t nparts;
	int r = s3_part_plan(o->size, part_size, &o->part_size, &nparts);

	if (r < 0)
		return r;
	o->nparts = nparts;
	o->etags = calloc(nparts, sizeof(char *));
	return o->etags ? 0 : -ENOMEM;
}

static void mp_created(const struct s3_result *res, void *arg)
{
	struct obj_op *op = arg;
	struct task *t = op->t;

	count_attempts(res);
	if (res->err) {
		task_fail(t, res->err, "%s", res->error);
	} else if (!t->u->closing) {
		op->o->upload_id = strdup(res->upload_id ? res->upload_id : "");
		op->o->state = op->o->upload_id ? OBJ_PARTS : OBJ_TODO;
		if (!op->o->upload_id)
			task_fail(t, -ENOMEM, "out of memory");
	}
	free(op);
	task_op_done(t);
}

static void mp_parts_listed(const struct s3_result *res, void *arg)
{
	struct obj_op *op = arg;
	struct task *t = op->t;
	struct obj *o = op->o;
	bool more = false;

	count_attempts(res);
	if (res->err == -ENOENT) {
		/* The upload is gone (aborted, or completed by another ckptd
		 * before it crashed): start a new one. */
		free(o->upload_id);
		o->upload_id = NULL;
		o->state = OBJ_TODO;
	} else if (res->err) {
		task_fail(t, res->err, "%s", res->error);
	} else if (!t->u->closing) {
		if (!o->old_etags) {
			o->old_etags = calloc(o->nparts, sizeof(char *));
			o->old_sizes = calloc(o->nparts, sizeof(uint64_t));
		}
		if (!o->old_etags || !o->old_sizes) {
			task_fail(t, -ENOMEM, "out of memory");
		} else {
			for (size_t i = 0; res->list && i < res->list->n_parts; i++) {
				const struct s3_part_info *p = &res->list->parts[i];
				if (p->number >= 1 && p->number <= o->nparts && p->etag) {
					free(o->old_etags[p->number - 1]);
					o->old_etags[p->number - 1] = strdup(p->etag);
					o->old_sizes[p->number - 1] = p->size;
				}
			}
			more = page_next(t, res->list);
			if (!more)
				o->state = OBJ_PARTS;
		}
	}
	if (more) {
		struct s3_list_args a = { .marker = t->marker };
		char key[KEY_MAX + 64];
		step_key(t->u, t->job->name, t->step, o->key_name, key, sizeof(key));
		if (s3_list_parts(t->u->c, t->u->url.bucket, key, o->upload_id, &a,
				  mp_parts_listed, op) == 0)
			return; /* op and t->ops carry over */
		task_fail(t, -ENOMEM, "listing parts of %s", key);
	}
	free(op);
	task_op_done(t);
}

static void mp_completed(const struct s3_result *res, void *arg)
{
	struct obj_op *op = arg;
	struct task *t = op->t;

	count_attempts(res);
	if (res->err)
		task_fail(t, res->err, "%s", res->error);
	else
		op->o->state = OBJ_DONE;
	free(op);
	task_op_done(t);
}

/* An object already in S3: done if its metadata names this rank's index. */
static void head_done(const struct s3_result *res, void *arg)
{
	struct obj_op *op = arg;
	struct task *t = op->t;
	struct obj *o = op->o;

	count_attempts(res);
	if (res->err && res->err != -ENOENT) {
		task_fail(t, res->err, "%s", res->error);
	} else if (!t->u->closing) {
		bool match = !res->err && !strcmp(res->meta_index_sha256, o->index_hex) &&
			     (o->compress || res->content_length == o->size);
		if (match) {
			o->state = OBJ_DONE;
		} else {
			log_info("s3", "object in S3 is not this step's, sending it again job=%s "
				 "step=%" PRIu64 " object=%s stored_index_sha256=%s", t->job->name,
				 t->step, o->key_name,
				 res->err ? "(gone)" : res->meta_index_sha256[0] ? res->meta_index_sha256 : "(none)");
			o->s3_size = UINT64_MAX;
			o->state = OBJ_TODO;
		}
	}
	free(op);
	task_op_done(t);
}

/* Start what can start of the step's objects; true when all are done. */
static bool upload_schedule(struct task *t)
{
	struct uploader *u = t->u;
	const struct ckptd_config *cfg = u->d->cfg;
	bool all_done = true;
	char key[KEY_MAX + 64];
	int r = 0;

	for (size_t i = 0; i < t->n_objs && !t->err; i++) {
		struct obj *o = &t->objs[i];
		struct obj_op *op;

		if (o->state == OBJ_DONE)
			continue;
		all_done = false;
		step_key(u, t->job->name, t->step, o->key_name, key, sizeof(key));
		if (o->state == OBJ_TODO) {
			if (o->compress ? o->s3_size != UINT64_MAX : o->s3_size == o->size) {
				/* Objects appear whole or not at all, but one of
				 * this name may hold other bytes (an earlier run
				 * of the step number): it counts only if it was
				 * made from this rank's index. */
				if ((r = obj_op(t, o, &op)) < 0)
					break;
				r = s3_head_object(u->c, u->url.bucket, key, head_done, op);
				if (r < 0) {
					free(op);
					break;
				}
				t->ops++;
				o->state = OBJ_BUSY;
				continue;
			}
			/* A compressed shard's size is known only at its end:
			 * always a multipart upload (one part is fine). */
			if (o->size <= cfg->s3_part_bytes && !o->compress) {
				if (u->units >= cfg->s3_parallel)
					break;
				r = unit_start(t, o, 0);
				if (r == 0)
					o->state = OBJ_BUSY;
			} else {
				if (!o->etags && (r = mp_prepare(o, cfg->s3_part_bytes)) < 0)
					break;
				if ((r = obj_op(t, o, &op)) < 0)
					break;
				if (o->upload_id) {
					struct s3_list_args a = { 0 };
					r = s3_list_parts(u->c, u->url.bucket, key, o->upload_id, &a,
							  mp_parts_listed, op);
				} else {
					r = s3_create_multipart_meta(u->c, u->url.bucket, key,
								     o->index_hex, mp_created, op);
				}
				if (r < 0) {
					free(op);
					break;
				}
				t->ops++;
				o->state = OBJ_BUSY;
			}
			continue;
		}
		if (o->state != OBJ_PARTS)
			continue;
		if (o->compress) {
			while (o->next_cunit < o->ncunits && u->units < cfg->s3_parallel) {
				r = cunit_start(t, o, o->next_cunit);
				if (r < 0)
					break;
				o->next_cunit++;
			}
			if (r < 0)
				break;
			if (o->ncunits == 0 && !o->final_emitted)
				compress_emit(t, o); /* an empty shard: the footer alone */
			if (!o->final_emitted || o->parts_done < o->parts_emitted)
				continue;
		}
		while (!o->compress && o->next_part < o->nparts && u->units < cfg->s3_parallel) {
			r = unit_start(t, o, o->next_part + 1);
			if (r < 0)
				break;
			o->next_part++;
		}
		if (r < 0)
			break;
		uint32_t nparts = o->compress ? o->parts_emitted : o->nparts;
		if (o->parts_done == nparts) {
			struct s3_completed_part *parts = calloc(nparts, sizeof(*parts));
			if (!parts) {
				r = -ENOMEM;
				break;
			}
			for (uint32_t p = 0; p < nparts; p++) {
				parts[p].number = p + 1;
				parts[p].etag = o->etags[p] ? o->etags[p] : "";
				log_debug("s3", "complete key=%s part=%u etag=%s", key, p + 1, parts[p].etag);
			}
			if ((r = obj_op(t, o, &op)) == 0) {
				r = s3_complete_multipart(u->c, u->url.bucket, key, o->upload_id, parts,
							  nparts, mp_completed, op);
				if (r < 0)
					free(op);
			}
			free(parts);
			if (r < 0)
				break;
			t->ops++;
			o->state = OBJ_BUSY;
		}
	}
	if (r < 0)
		task_fail(t, r, "%s: %s", key, strerror(-r));
	return all_done && !t->err;
}

static void small_put_done(const struct s3_result *res, void *arg)
{
	struct task *t = arg;

	count_attempts(res);
	if (res->err)
		task_fail(t, res->err, "%s", res->error);
	else if (!t->u->closing)
		t->phase++;
	task_op_done(t);
}

static int put_bytes(struct task *t, const char *name, const void *buf, size_t len)
{
	struct uploader *u = t->u;
	char key[KEY_MAX + 64];
	struct s3_source src = { .buf = buf, .fd = -1, .len = len };

	if (!strcmp(name, CKPT_LATEST_NAME))
		latest_key(u, t->job->name, key, sizeof(key));
	else
		step_key(u, t->job->name, t->step, name, key, sizeof(key));
	int r = s3_put_object(u->c, u->url.bucket, key, &src, small_put_done, t);
	if (r == 0)
		t->ops++;
	return r;
}

static void upload_done(struct task *t)
{
	struct uploader *u = t->u;
	struct s3job *j = t->job;
	double secs = (double)((uint64_t)ckpt_mono_ns() - t->started_ns) / 1e9;

	if (s3_steps_insert(j, t->step) < 0 ||
	    steps_insert(&j->verified, &j->n_verified, &j->cap_verified, t->step) < 0)
		log_error("s3", "out of memory recording an upload job=%s", j->name);
	metrics_set(M_NEWEST_COMMITTED_STEP, (double)j->s3_steps[j->n_s3 - 1], j->name, "s3");
	log_info("s3", "uploaded job=%s step=%" PRIu64 " bytes=%" PRIu64 " sent=%" PRIu64
		 " reused_parts=%u seconds=%.3f MBps=%.1f", j->name, t->step, t->bytes_total,
		 t->bytes_sent, t->parts_reused, secs, secs > 0 ? (double)t->bytes_sent / secs / 1e6 : 0.0);
	u->backoff_ns = 0;
	queue_deletions(u, j);
	/* Confirmed: the root may let it (and what it supersedes) go. While
	 * the task is still queued: the job is loaded (owned) until it ends. */
	coord_retention_recheck(u->d, j->name);
	task_finish(t);
}

static void up_leftovers_listed(const struct s3_result *res, void *arg)
{
	struct task *t = arg;

	if (uploads_page(t, res))
		t->phase = UP_CLEANUP_ABORT;
	task_op_done(t);
}

void upload_step(struct task *t)
{
	struct uploader *u = t->u;
	char prefix[KEY_MAX + 64];
	int r = 0;

	switch (t->phase) {
	case UP_OPEN:
		t->started_ns = (uint64_t)ckpt_mono_ns();
		r = upload_open(t);
		if (r == -ENOENT) {
			/* Gone from the root before it could be uploaded (by hand:
			 * retention waits for us). Nothing to send. */
			log_warn("s3", "step gone from the root before its upload job=%s step=%" PRIu64,
				 t->job->name, t->step);
			task_finish(t);
			return;
		}
		if (r < 0) {
			char why[sizeof(t->why)];
			snprintf(why, sizeof(why), "%s", t->why[0] ? t->why : strerror(-r));
			t->why[0] = '\0';
			task_fail(t, r, "reading the step from the root: %s", why);
			task_failed(t);
			return;
		}
		t->phase = UP_INDEX;
		/* fall through */
	case UP_INDEX:
		/* Indexes first, on a worker: the shards' reads check against them. */
		r = workers_submit(u->d->workers, upload_index_run, index_done, t);
		if (r == 0) {
			t->ops++;
			return;
		}
		break;
	case UP_LIST:
		step_key(u, t->job->name, t->step, NULL, prefix, sizeof(prefix));
		r = list_objects(t, prefix, up_list_done);
		break;
	case UP_LIST_UPLOADS: {
		step_key(u, t->job->name, t->step, NULL, prefix, sizeof(prefix));
		struct s3_list_args a = { .prefix = prefix, .marker = t->marker };
		r = s3_list_multipart_uploads(u->c, u->url.bucket, &a, up_uploads_done, t);
		if (r == 0)
			t->ops++;
		break;
	}
	case UP_OBJECTS:
		if (!upload_schedule(t)) {
			if (t->err && t->ops == 0)
				task_failed(t);
			return;
		}
		if (t->ops)
			return;
		t->phase = UP_MANIFEST;
		/* fall through */
	case UP_MANIFEST:
		/* Last of the step: its presence is the S3 commit. */
		r = put_bytes(t, CKPT_MANIFEST_NAME, t->manifest, t->manifest_len);
		break;
	case UP_LATEST: {
		const struct s3job *j = t->job;
		if (j->n_s3 && j->s3_steps[j->n_s3 - 1] > t->step) {
			t->phase = UP_CLEANUP_LIST;
			upload_step(t);
			return;
		}
		/* The manifest is in: count it before LATEST points at it. */
		t->bytes_sent += t->manifest_len;
		snprintf(prefix, sizeof(prefix), "%" PRIu64 "\n", t->step);
		char *body = strdup(prefix);
		if (!body) {
			r = -ENOMEM;
			break;
		}
		free(t->manifest);
		t->manifest = body; /* kept until the PUT is done */
		r = put_bytes(t, CKPT_LATEST_NAME, body, strlen(body));
		break;
	}
	case UP_CLEANUP_LIST: {
		/* A CreateMultipartUpload whose answer was lost leaves an upload
		 * nobody knows the id of; the step is complete now, so whatever
		 * is still open under it is such a leftover. */
		step_key(u, t->job->name, t->step, NULL, prefix, sizeof(prefix));
		struct s3_list_args a = { .prefix = prefix, .marker = t->marker };
		r = s3_list_multipart_uploads(u->c, u->url.bucket, &a, up_leftovers_listed, t);
		if (r == 0)
			t->ops++;
		break;
	}
	case UP_CLEANUP_ABORT:
		if (t->next_abort < t->n_uploads) {
			struct upload_id_entry *e = &t->uploads[t->next_abort++];
			log_info("s3", "aborting a leftover multipart upload job=%s step=%" PRIu64 " key=%s",
				 t->job->name, t->step, e->key);
			r = s3_abort_multipart(u->c, u->url.bucket, e->key, e->upload_id, abort_done, t);
			if (r == 0)
				t->ops++;
			break;
		}
		t->phase = UP_DONE;
		/* fall through */
	case UP_DONE:
		upload_done(t);
		return;
	}
	if (r < 0) {
		task_fail(t, r, "starting a request: %s", strerror(-r));
		if (t->ops == 0)
			task_failed(t);
	}
}
