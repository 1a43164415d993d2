/* SPDX-License-Identifier: MIT */
/*
 * ckpt-inspect on S3: jobs, steps and manifests under s3://BUCKET/PREFIX
 * (proto/FORMAT.md "On S3"), their verification, and what the S3 tier
 * holds of a root's job (--s3). Every request goes through the S3 client
 * ckptd uses, driven by its blocking helpers (s3.h, s3_sync_*): one client
 * on the main thread for listings and small objects, one per verification
 * thread (a client belongs to one thread).
 *
 * Verification streams each rank's shard through store_verify_rank_bytes,
 * the root's checks: a window of RANGES_PER_WINDOW ranged GETs of
 * RANGE_BYTES in flight at once per rank, VERIFY_THREADS ranks at once, so
 * memory stays at about VERIFY_THREADS x 16 MiB plus the indexes.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inspect.h"
#include "s3.h"
#include "zshard.h"
#include "toolutil.h"

#define MANIFEST_MAX ((uint64_t)1 << 30)
#define INDEX_MAX ((uint64_t)1 << 30)
#define LATEST_MAX 64
#define RANGE_BYTES ((size_t)4 << 20)
#define RANGES_PER_WINDOW 4
#define VERIFY_THREADS 4
/* Manifests read at once when listing a job's steps. */
#define MANIFESTS_AT_ONCE 16
#define KEY_MAX 1200

struct inspect_s3 {
	struct s3_config cfg;
	char *bucket;
	char *prefix;           /* "" or "a/b" */
	char url[1200];         /* s3://bucket[/prefix] */
	s3_client *c;           /* the main thread's */
};

/* ---- names ---------------------------------------------------------------------- */

/* The layout is proto's (ckpt_s3_*). A key that cannot be made (not a
 * job name or step number, no room) is one every request refuses. */

/* "PREFIX/JOB" or "JOB". */
static void job_key(const inspect_s3 *s, const char *job, char *out, size_t cap)
{
	if (ckpt_s3_job_key(out, cap, s->prefix, job) < 0)
		snprintf(out, cap, "\n");
}

static void step_key(const char *jobkey, uint64_t step, const char *name,
		     char *out, size_t cap)
{
	if (ckpt_s3_step_key(out, cap, jobkey, step, name) < 0)
		snprintf(out, cap, "\n");
}

/* "rank-000012.shard" (or a compressed ".shard.zst": kind 's') or
 * ".index" (kind 'i'). */
static bool parse_rank_file(const char *name, char *kind)
{
	size_t len = strlen(name);

	if (len < 17 || strncmp(name, "rank-", 5) != 0)
		return false;
	for (size_t i = 5; i < 11; i++)
		if (name[i] < '0' || name[i] > '9')
			return false;
	if (!strcmp(name + 11, ".shard") || !strcmp(name + 11, ".shard" ZSHARD_SUFFIX))
		*kind = 's';
	else if (!strcmp(name + 11, ".index"))
		*kind = 'i';
	else
		return false;
	return true;
}

/* "step-0000000042/REST" -> 42 and REST. */
static bool parse_step_path(const char *rel, uint64_t *step, const char **rest)
{
	return ckpt_s3_step_path_parse(rel, step, rest) == 0;
}

static bool job_name_ok(const char *name)
{
	return *name && ckpt_job_name_check(name, strlen(name)) == 0;
}

/* The last '/'-separated component of key. */
static const char *last_component(const char *key)
{
	const char *slash = strrchr(key, '/');

	return slash ? slash + 1 : key;
}

/* ---- opening -------------------------------------------------------------------- */

int inspect_s3_open(const char *url, const struct s3_settings *settings,
		    inspect_s3 **out, char *why, size_t whylen)
{
	struct s3_url u = { 0 };
	char err[400] = "";
	inspect_s3 *s;
	int r;

	*out = NULL;
	for (const char *c = url; *c; c++) {
		if ((unsigned char)*c < 0x20 || *c == 0x7f) {
			snprintf(why, whylen, "control character (byte 0x%02x) at offset %zu",
				 (unsigned)(unsigned char)*c, (size_t)(c - url));
			return -EINVAL;
		}
	}
	r = s3_url_parse(url, &u, err, sizeof(err));
	if (r < 0) {
		snprintf(why, whylen, "%s", err[0] ? err : "not an s3://BUCKET[/PREFIX] URL");
		return -EINVAL;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		s3_url_free(&u);
		return -ENOMEM;
	}
	s->bucket = TAKE_PTR(u.bucket);
	s->prefix = TAKE_PTR(u.prefix);
	s3_url_free(&u);
	snprintf(s->url, sizeof(s->url), "s3://%s%s%s", s->bucket,
		 s->prefix[0] ? "/" : "", s->prefix);
	r = s3_config_resolve(settings, &s->cfg, err, sizeof(err));
	if (r < 0) {
		snprintf(why, whylen, "S3 configuration: %s", err);
		inspect_s3_close(s);
		return r == -EINVAL ? -EIO : r;
	}
	r = s3_sync_client_new(&s->cfg, 8, &s->c, why, whylen);
	if (r < 0) {
		inspect_s3_close(s);
		return r == -EINVAL ? -EIO : r;
	}
	*out = s;
	return 0;
}

void inspect_s3_close(inspect_s3 *s)
{
	if (!s)
		return;
	s3_client_free(s->c);
	s3_config_free(&s->cfg);
	free(s->bucket);
	free(s->prefix);
	free(s);
}

const char *inspect_s3_url(const inspect_s3 *s)
{
	return s->url;
}

/* ---- what S3 holds of a job ----------------------------------------------------- */

struct scan {
	struct inspect_s3_job *j;
	size_t cap;
	const char *base;        /* "PREFIX/JOB/" */
	size_t baselen;
	bool latest_object;
	uint64_t latest_size;
	size_t objects;
};

static struct inspect_s3_step *scan_step(struct scan *sc, uint64_t step)
{
	struct inspect_s3_job *j = sc->j;

	/* Listings come sorted, and step names sort like their numbers: a
	 * step is the last one seen or a new one after it. */
	if (!j->n || j->steps[j->n - 1].step < step)
		goto append;
	for (size_t i = j->n; i-- > 0;)
		if (j->steps[i].step == step)
			return &j->steps[i];
append:
	if (j->n == sc->cap) {
		size_t cap = sc->cap ? 2 * sc->cap : 64;
		struct inspect_s3_step *v = realloc(j->steps, cap * sizeof(*v));

		if (!v)
			return NULL;
		j->steps = v;
		sc->cap = cap;
	}
	memset(&j->steps[j->n], 0, sizeof(j->steps[0]));
	j->steps[j->n].step = step;
	return &j->steps[j->n++];
}

static int scan_objects_page(void *ctx, const struct s3_list *page)
{
	struct scan *sc = ctx;

	for (size_t i = 0; i < page->n_objects; i++) {
		const struct s3_object_info *o = &page->objects[i];
		const char *rel, *rest;
		struct inspect_s3_step *st;
		uint64_t step;
		char kind;

		if (strncmp(o->key, sc->base, sc->baselen) != 0)
			continue;
		sc->objects++;
		rel = o->key + sc->baselen;
		if (!strcmp(rel, CKPT_LATEST_NAME)) {
			sc->latest_object = true;
			sc->latest_size = o->size;
			continue;
		}
		if (!parse_step_path(rel, &step, &rest) || strchr(rest, '/'))
			continue;
		st = scan_step(sc, step);
		if (!st)
			return -ENOMEM;
		if (!strcmp(rest, CKPT_MANIFEST_NAME)) {
			st->committed = true;
			st->manifest_object_bytes = o->size;
		} else if (parse_rank_file(rest, &kind)) {
			st->shards += kind == 's';
			st->bytes += o->size;
		}
	}
	return 0;
}

static int scan_uploads_page(void *ctx, const struct s3_list *page)
{
	struct scan *sc = ctx;

	for (size_t i = 0; i < page->n_uploads; i++) {
		const char *key = page->uploads[i].key, *rest;
		struct inspect_s3_step *st;
		uint64_t step;

		if (!key || strncmp(key, sc->base, sc->baselen) != 0 ||
		    !parse_step_path(key + sc->baselen, &step, &rest))
			continue;
		st = scan_step(sc, step);
		if (!st)
			return -ENOMEM;
		st->open_upload = true;
	}
	return 0;
}

static int cmp_step(const void *a, const void *b)
{
	const struct inspect_s3_step *x = a, *y = b;

	return x->step < y->step ? -1 : x->step > y->step;
}

/* LATEST's text: the step number and a newline. */
static bool parse_latest(const char *buf, size_t len, uint64_t *step)
{
	uint64_t v = 0;

	if (len > 0 && buf[len - 1] == '\n')
		len--;
	if (len == 0 || len > 20)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned d;

		if (buf[i] < '0' || buf[i] > '9')
			return false;
		d = (unsigned)(buf[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*step = v;
	return true;
}

/* Decode a manifest object's bytes; err names the object. */
static int decode_manifest(const char *url, const char *buf, size_t len,
			   uint64_t step, struct ckpt_manifest *m, char *err,
			   size_t errlen)
{
	char why[256] = "";
	int r = ckpt_manifest_decode(buf, len, m, why, sizeof(why));

	if (r < 0) {
		snprintf(err, errlen, "%s: %s", url, why[0] ? why : strerror(-r));
		return r;
	}
	if (m->step != step) {
		snprintf(err, errlen, "%s: manifest is for step %" PRIu64, url, m->step);
		ckpt_manifest_free(m);
		return -EBADMSG;
	}
	return 0;
}

struct manifest_get {
	struct inspect_s3_step *st;
	uint64_t size;
	char *buf;
	char key[KEY_MAX];
};

/* Read the committed steps' manifests, MANIFESTS_AT_ONCE in parallel. */
static int read_manifests(inspect_s3 *s, const char *jobkey,
			  struct inspect_s3_job *j, char *why, size_t whylen)
{
	struct manifest_get g[MANIFESTS_AT_ONCE];
	struct s3_sync_get get[MANIFESTS_AT_ONCE];
	size_t i = 0;
	int r = 0;

	while (i < j->n && r == 0) {
		size_t k = 0;

		memset(g, 0, sizeof(g));
		for (; i < j->n && k < MANIFESTS_AT_ONCE && r == 0; i++) {
			struct inspect_s3_step *st = &j->steps[i];

			if (!st->committed)
				continue;
			g[k].st = st;
			g[k].size = st->manifest_object_bytes;
			if (g[k].size > MANIFEST_MAX) {
				st->damaged = true;
				snprintf(st->error, sizeof(st->error),
					 "MANIFEST.json: %" PRIu64 " bytes, too big", g[k].size);
				continue;
			}
			g[k].buf = malloc(g[k].size + 1);
			if (!g[k].buf) {
				r = -ENOMEM;
				break;
			}
			step_key(jobkey, st->step, CKPT_MANIFEST_NAME, g[k].key, sizeof(g[k].key));
			get[k] = (struct s3_sync_get){
				.key = g[k].key,
				.sink = { .buf = g[k].buf, .fd = -1, .cap = g[k].size },
			};
			k++;
		}
		if (r == 0)
			r = s3_sync_get_many(s->c, s->bucket, get, k, why, whylen);
		if (r < 0)
			snprintf(why, whylen, "reading manifests: %s", strerror(-r));
		for (size_t x = 0; x < k; x++) {
			struct inspect_s3_step *st = g[x].st;
			struct ckpt_manifest m;
			char url[KEY_MAX + 16];

			snprintf(url, sizeof(url), "s3://%s/%s", s->bucket, g[x].key);
			if (r == 0 && get[x].err == -ENOENT) {
				/* Deleted since the listing (retention): no longer committed. */
				st->committed = false;
			} else if (r == 0 && get[x].err) {
				r = get[x].err;
				snprintf(why, whylen, "%s", get[x].error);
			} else if (r == 0 && get[x].content_length != g[x].size) {
				st->damaged = true;
				snprintf(st->error, sizeof(st->error), "%s: changed while read", url);
			} else if (r == 0) {
				g[x].buf[g[x].size] = '\0';
				if (decode_manifest(url, g[x].buf, (size_t)g[x].size, st->step, &m,
						    st->error, sizeof(st->error)) < 0) {
					st->damaged = true;
				} else {
					st->have_manifest = true;
					st->world_size = m.world_size;
					st->manifest_bytes = store_manifest_bytes(&m);
					st->created_unix_ns = m.created_unix_ns;
					ckpt_manifest_free(&m);
				}
			}
			free(g[x].buf);
		}
	}
	return r;
}

static int scan_job_key(inspect_s3 *s, const char *jobkey, bool manifests,
			struct inspect_s3_job *out, size_t *objects, char *why,
			size_t whylen)
{
	char base[KEY_MAX], up[KEY_MAX], latest[KEY_MAX];
	struct scan sc = { .j = out };
	int r;

	memset(out, 0, sizeof(*out));
	if (ckpt_s3_job_prefix(base, sizeof(base), jobkey) < 0 ||
	    ckpt_s3_steps_prefix(up, sizeof(up), jobkey) < 0 ||
	    ckpt_s3_latest_key(latest, sizeof(latest), jobkey) < 0) {
		snprintf(why, whylen, "s3://%s/%s: not a job's key", s->bucket, jobkey);
		return -EINVAL;
	}
	sc.base = base;
	sc.baselen = strlen(base);
	r = s3_sync_list_each(s->c, s->bucket, &(struct s3_list_args){ .prefix = base },
			      scan_objects_page, &sc, why, whylen);
	if (r == 0)
		r = s3_sync_list_uploads_each(s->c, s->bucket,
					      &(struct s3_list_args){ .prefix = up },
					      scan_uploads_page, &sc, why, whylen);
	if (r == 0 && out->n > 1)
		qsort(out->steps, out->n, sizeof(*out->steps), cmp_step);
	if (r == 0 && manifests)
		r = read_manifests(s, jobkey, out, why, whylen);
	if (r == 0 && sc.latest_object && sc.latest_size <= LATEST_MAX) {
		char *buf = NULL, w[700];

		/* A LATEST that went away or does not parse is no hint. */
		if (s3_sync_get_exact(s->c, s->bucket, latest, sc.latest_size, &buf, w, sizeof(w)) == 0)
			out->have_latest = parse_latest(buf, (size_t)sc.latest_size,
							&out->latest);
		free(buf);
	}
	for (size_t i = 0; i < out->n; i++)
		out->committed += out->steps[i].committed;
	if (objects)
		*objects = sc.objects;
	if (r < 0)
		inspect_s3_job_free(out);
	return r;
}

int inspect_s3_scan_job(inspect_s3 *s, const char *job, bool read_manifests_too,
			struct inspect_s3_job *out, char *why, size_t whylen)
{
	char jk[KEY_MAX];

	job_key(s, job, jk, sizeof(jk));
	return scan_job_key(s, jk, read_manifests_too, out, NULL, why, whylen);
}

void inspect_s3_job_free(struct inspect_s3_job *j)
{
	if (!j)
		return;
	free(j->steps);
	memset(j, 0, sizeof(*j));
}

const struct inspect_s3_step *inspect_s3_find(const struct inspect_s3_job *j,
					      uint64_t step)
{
	size_t lo = 0, hi = j ? j->n : 0;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (j->steps[mid].step == step)
			return &j->steps[mid];
		if (j->steps[mid].step < step)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const char *inspect_tiers(bool root_committed, const struct inspect_s3_step *s3)
{
	bool s3_committed = s3 && s3->committed;
	bool s3_partial = s3 && !s3->committed && (s3->open_upload || s3->shards || s3->bytes);

	if (root_committed && s3_committed)
		return "root+s3";
	if (s3_partial || (root_committed && s3 && s3->open_upload))
		return "uploading";
	if (root_committed)
		return "root";
	if (s3_committed)
		return "s3";
	return "-";
}

/* Names of the "directories" under the prefix that are job names. */
struct names {
	char **v;
	size_t n, cap;
	size_t prefixlen;
	size_t seen;            /* objects and prefixes, ours or not */
};

static int names_page(void *ctx, const struct s3_list *page)
{
	struct names *nm = ctx;

	nm->seen += page->n_objects + page->n_prefixes;
	for (size_t i = 0; i < page->n_prefixes; i++) {
		const char *p = page->prefixes[i];
		size_t len = strlen(p);
		char name[CKPT_JOB_NAME_MAX + 1];

		if (len <= nm->prefixlen + 1 || p[len - 1] != '/' ||
		    len - nm->prefixlen - 1 > CKPT_JOB_NAME_MAX)
			continue;
		memcpy(name, p + nm->prefixlen, len - nm->prefixlen - 1);
		name[len - nm->prefixlen - 1] = '\0';
		if (!job_name_ok(name))
			continue;
		if (nm->n == nm->cap) {
			size_t cap = nm->cap ? 2 * nm->cap : 16;
			char **v = realloc(nm->v, cap * sizeof(*v));

			if (!v)
				return -ENOMEM;
			nm->v = v;
			nm->cap = cap;
		}
		nm->v[nm->n] = strdup(name);
		if (!nm->v[nm->n])
			return -ENOMEM;
		nm->n++;
	}
	return 0;
}

/* Jobs under the prefix with a committed step; *seen: whether anything at
 * all is under the prefix. */
static int list_jobs(inspect_s3 *s, char ***jobs, size_t *n, bool *seen,
		     char *why, size_t whylen)
{
	char pfx[KEY_MAX];
	struct names nm = { 0 };
	size_t keep = 0;
	int r;

	r = ckpt_s3_jobs_prefix(pfx, sizeof(pfx), s->prefix);
	if (r < 0) {
		snprintf(why, whylen, "%s: %s", s->url, strerror(-r));
		return r;
	}
	nm.prefixlen = strlen(pfx);
	r = s3_sync_list_each(s->c, s->bucket,
			      &(struct s3_list_args){ .prefix = pfx, .delimiter = "/" },
			      names_page, &nm, why, whylen);
	for (size_t i = 0; r == 0 && i < nm.n; i++) {
		struct inspect_s3_job j;

		r = inspect_s3_scan_job(s, nm.v[i], false, &j, why, whylen);
		if (r == 0 && j.committed)
			nm.v[keep++] = TAKE_PTR(nm.v[i]);
		inspect_s3_job_free(&j);
	}
	if (r < 0) {
		store_strv_free(nm.v, nm.n);
		return r;
	}
	for (size_t i = keep; i < nm.n; i++)
		free(nm.v[i]);
	/* CommonPrefixes come sorted by key, like job names. */
	*jobs = nm.v;
	*n = keep;
	if (seen)
		*seen = nm.seen > 0;
	return 0;
}

int inspect_s3_list_jobs(inspect_s3 *s, char ***jobs, size_t *n, char *why,
			 size_t whylen)
{
	return list_jobs(s, jobs, n, NULL, why, whylen);
}

/* ---- verification ----------------------------------------------------------------- */

/* A job on S3 as a step source. */
struct s3_steps {
	struct inspect_step_source pub;
	inspect_s3 *s;
	const char *jobkey;
	char desc[KEY_MAX + 16];  /* s3://bucket/PREFIX/JOB */
};

/* The manifest's bytes (-ENOENT: not committed on S3). */
static int read_manifest_bytes(inspect_s3 *s, const char *jobkey, uint64_t step,
			       char **buf, size_t *len, char *err, size_t errlen)
{
	char key[KEY_MAX];
	uint64_t size;
	int r;

	step_key(jobkey, step, CKPT_MANIFEST_NAME, key, sizeof(key));
	r = s3_sync_head(s->c, s->bucket, key, &size, err, errlen);
	if (r == -ENOENT)
		snprintf(err, errlen, "s3://%s/%s: missing: the step is not committed on S3",
			 s->bucket, key);
	if (r == 0 && size > MANIFEST_MAX) {
		snprintf(err, errlen, "s3://%s/%s: %" PRIu64 " bytes, too big", s->bucket,
			 key, size);
		r = -EFBIG;
	}
	if (r == 0)
		r = s3_sync_get_exact(s->c, s->bucket, key, size, buf, err, errlen);
	if (r == 0)
		*len = (size_t)size;
	return r;
}

static int s3_read_manifest(struct inspect_step_source *src, uint64_t step,
			    struct ckpt_manifest *m, char *err, size_t errlen)
{
	struct s3_steps *ss = (struct s3_steps *)src;
	char *buf = NULL, key[KEY_MAX], url[KEY_MAX + 16];
	size_t len = 0;
	int r = read_manifest_bytes(ss->s, ss->jobkey, step, &buf, &len, err, errlen);

	if (r < 0)
		return r;
	step_key(ss->jobkey, step, CKPT_MANIFEST_NAME, key, sizeof(key));
	snprintf(url, sizeof(url), "s3://%s/%s", ss->s->bucket, key);
	r = decode_manifest(url, buf, len, step, m, err, errlen);
	free(buf);
	return r;
}

/* Shared by the threads verifying one step's ranks. */
struct verify_run {
	struct s3_steps *ss;
	const struct ckpt_manifest *m;
	struct inspect_rank_check *checks;
	size_t n, next;
	pthread_mutex_t lock;
	struct tool_progress *pg;
	uint64_t done;            /* bytes checked, all ranks */
};

struct verify_worker {
	struct verify_run *run;
	s3_client *c;
	uint64_t rank_done;       /* of the rank at hand */
	/* the shard being read */
	char key[KEY_MAX];
	char error[600];
	uint64_t error_offset;
	/* a compressed shard object: its pieces, the frames of a window, one
	 * piece decompressed (and the scratch that takes) */
	struct zpiece *zp;
	size_t nz;
	uint8_t *zbuf, *zraw, *ztmp;
	size_t zcap;
	size_t zcached;           /* the piece in zraw; SIZE_MAX: none */
};

/* Fetch object bytes [off, off + len) into buf, as ranged GETs in parallel;
 * w->error says why not. */
static int get_ranges(struct verify_worker *w, uint64_t off, size_t len, uint8_t *buf)
{
	return s3_sync_get_ranges(w->c, w->run->ss->s->bucket, w->key, off, len, buf,
				  RANGES_PER_WINDOW, w->error, sizeof(w->error));
}

/* store_read_fn: one window as RANGES_PER_WINDOW ranged GETs at once. */
static int read_window(void *opaque, uint64_t offset, void *buf, size_t len)
{
	struct verify_worker *w = opaque;
	int r = get_ranges(w, offset, len, buf);

	if (r < 0)
		w->error_offset = offset;
	return r;
}

/* store_read_fn for a compressed shard object: the frames of the pieces
 * that cover the window, in one span of ranged GETs, each checked and
 * decompressed; the piece a window ends in is kept for the next one. */
static int read_window_z(void *opaque, uint64_t offset, void *buf, size_t len)
{
	struct verify_worker *w = opaque;
	uint64_t end = offset + len;
	size_t lo = 0, hi = w->nz, first, last;
	int r;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (w->zp[mid].raw_offset + w->zp[mid].raw_len <= offset)
			lo = mid + 1;
		else
			hi = mid;
	}
	first = lo;
	if (len == 0)
		return 0;
	if (first >= w->nz)
		return -ENODATA;
	for (last = first; last + 1 < w->nz && w->zp[last + 1].raw_offset < end;)
		last++;
	/* The cached piece needs no fetch. */
	size_t from = first == w->zcached ? first + 1 : first;

	if (from <= last) {
		uint64_t zoff = w->zp[from].z_offset;
		uint64_t zlen = w->zp[last].z_offset + w->zp[last].z_len - zoff;

		if (zlen > w->zcap) {
			uint8_t *nb = realloc(w->zbuf, zlen);

			if (!nb)
				return -ENOMEM;
			w->zbuf = nb;
			w->zcap = zlen;
		}
		r = get_ranges(w, zoff, (size_t)zlen, w->zbuf);
		if (r < 0) {
			w->error_offset = w->zp[from].raw_offset;
			return r;
		}
	}
	for (size_t k = first; k <= last; k++) {
		const struct zpiece *p = &w->zp[k];
		uint64_t a = p->raw_offset > offset ? p->raw_offset : offset;
		uint64_t b = p->raw_offset + p->raw_len < end ? p->raw_offset + p->raw_len : end;

		if (k != w->zcached) {
			w->zcached = SIZE_MAX;
			r = zshard_decompress(p, w->zbuf + (p->z_offset - w->zp[from].z_offset),
					      w->ztmp, w->zraw);
			if (r < 0) {
				snprintf(w->error, sizeof(w->error),
					 "compressed frame %zu (shard bytes %" PRIu64 "..%" PRIu64
					 ") fails its CRC-32C or does not decompress", k,
					 p->raw_offset, p->raw_offset + p->raw_len);
				w->error_offset = p->raw_offset;
				return r;
			}
			w->zcached = k;
		}
		memcpy((uint8_t *)buf + (a - offset), w->zraw + (a - p->raw_offset), b - a);
	}
	return 0;
}

/* Trailer and table of a compressed shard object of object_bytes; the raw
 * shard's size into *raw_bytes. */
static int zshard_open(struct verify_worker *w, uint64_t object_bytes, uint64_t *raw_bytes,
		       char *why, size_t whylen)
{
	uint8_t trailer[ZSHARD_TRAILER_BYTES], *table = NULL;
	uint32_t maxraw = 1;
	size_t n = 0;
	int r = -EBADMSG;

	if (object_bytes >= ZSHARD_TRAILER_BYTES)
		r = get_ranges(w, object_bytes - ZSHARD_TRAILER_BYTES, ZSHARD_TRAILER_BYTES,
			       trailer);
	if (r == 0)
		r = zshard_trailer_decode(trailer, object_bytes, &n, raw_bytes);
	if (r == 0 && n) {
		uint64_t tb = (uint64_t)n * ZSHARD_ENTRY_BYTES;

		table = malloc(tb + ZSHARD_TRAILER_BYTES);
		if (!table)
			return -ENOMEM;
		r = get_ranges(w, object_bytes - ZSHARD_TRAILER_BYTES - tb, (size_t)tb, table);
		if (r == 0)
			memcpy(table + tb, trailer, ZSHARD_TRAILER_BYTES);
	}
	if (r == 0)
		r = zshard_table_decode(table, n, *raw_bytes, object_bytes, &w->zp);
	free(table);
	if (r < 0) {
		snprintf(why, whylen, "%s", w->error[0] ? w->error
			 : r == -EPROTONOSUPPORT ? "compressed shard of an unknown version"
			 : "not a valid compressed shard (trailer, table or size)");
		w->error[0] = '\0';
		return r;
	}
	w->nz = n;
	for (size_t i = 0; i < n; i++)
		if (w->zp[i].raw_len > maxraw)
			maxraw = w->zp[i].raw_len;
	w->zraw = malloc(maxraw);
	w->ztmp = malloc(maxraw);
	w->zcached = SIZE_MAX;
	return w->zraw && w->ztmp ? 0 : -ENOMEM;
}

static void zshard_close(struct verify_worker *w)
{
	free(w->zp);
	free(w->zbuf);
	free(w->zraw);
	free(w->ztmp);
	w->zp = NULL;
	w->zbuf = w->zraw = w->ztmp = NULL;
	w->nz = w->zcap = 0;
}

static void worker_progress(void *opaque, uint64_t done, uint64_t total)
{
	struct verify_worker *w = opaque;
	struct verify_run *run = w->run;

	(void)total;
	pthread_mutex_lock(&run->lock);
	run->done += done - w->rank_done;
	tool_progress_draw(run->pg, run->done, false);
	pthread_mutex_unlock(&run->lock);
	w->rank_done = done;
}

/* A failure before or beside the chunk checks, named like the root's. */
static void rank_failed(struct verify_worker *w, struct inspect_rank_check *c,
			const char *name, const char *why, int r)
{
	char dname[32];

	if (ckpt_step_dirname(dname, sizeof(dname), w->run->m->step) < 0)
		snprintf(dname, sizeof(dname), "step-?");
	snprintf(c->res.first_error, sizeof(c->res.first_error),
		 "%s/%s/%s: %s (rank %" PRIu32 " step %" PRIu64 ")", w->run->ss->desc,
		 dname, name, why, c->rank, w->run->m->step);
	c->r = r;
}

static void verify_one(struct verify_worker *w, struct inspect_rank_check *c)
{
	struct s3_steps *ss = w->run->ss;
	const struct ckpt_manifest *m = w->run->m;
	char iname[32], sname[32], key[KEY_MAX], why[700] = "";
	char *index = NULL;
	uint64_t isize = 0, ssize = 0;
	int r;

	memset(&c->res, 0, sizeof(c->res));
	c->r = 0;
	w->rank_done = 0;
	w->error[0] = '\0';
	ckpt_index_filename(iname, sizeof(iname), c->rank);
	ckpt_shard_filename(sname, sizeof(sname), c->rank);

	/* The index first, whole: it is small and says what to expect. */
	step_key(ss->jobkey, m->step, iname, key, sizeof(key));
	r = s3_sync_head(w->c, ss->s->bucket, key, &isize, why, sizeof(why));
	if (r == 0 && isize > INDEX_MAX) {
		snprintf(why, sizeof(why), "%" PRIu64 " bytes, too big for an index", isize);
		r = -EFBIG;
	}
	if (r == 0)
		r = s3_sync_get_exact(w->c, ss->s->bucket, key, isize, &index, why, sizeof(why));
	if (r < 0) {
		rank_failed(w, c, iname, why, r);
		return;
	}
	if (m->s3_encoding[0] && strcmp(m->s3_encoding, ZSHARD_ENCODING) != 0) {
		free(index);
		snprintf(why, sizeof(why), "s3_encoding '%s' is unknown to this reader: "
			 "cannot read the shard", m->s3_encoding);
		rank_failed(w, c, sname, why, -EPROTONOSUPPORT);
		return;
	}
	bool z = m->s3_encoding[0] != '\0';
	char oname[48];

	snprintf(oname, sizeof(oname), "%s%s", sname, z ? ZSHARD_SUFFIX : "");
	step_key(ss->jobkey, m->step, oname, w->key, sizeof(w->key));
	r = s3_sync_head(w->c, ss->s->bucket, w->key, &ssize, why, sizeof(why));
	if (r == 0 && z)
		r = zshard_open(w, ssize, &ssize, why, sizeof(why));
	if (r < 0) {
		free(index);
		zshard_close(w);
		rank_failed(w, c, oname, why, r);
		return;
	}
	r = store_verify_rank_bytes(m, c->rank, index, (size_t)isize, ssize,
				    z ? read_window_z : read_window, w,
				    (size_t)RANGES_PER_WINDOW * RANGE_BYTES,
				    worker_progress, w, &c->res);
	zshard_close(w);
	free(index);
	c->r = r;
	if (r < 0 && w->error[0]) {
		/* The S3 error says more than the errno store saw. */
		char e[700];

		snprintf(e, sizeof(e), "read at byte offset %" PRIu64 ": %s",
			 w->error_offset, w->error);
		rank_failed(w, c, oname, e, r);
	} else if (r < 0 && c->res.first_error[0]) {
		/* store names files relative to the job: say which job. */
		char e[sizeof(c->res.first_error)];

		snprintf(e, sizeof(e), "%s", c->res.first_error);
		snprintf(c->res.first_error, sizeof(c->res.first_error), "%s/%s",
			 ss->desc, e);
	}
}

static void *verify_thread(void *arg)
{
	struct verify_worker *w = arg;
	struct verify_run *run = w->run;
	char why[600] = "";
	int r = s3_sync_client_new(&run->ss->s->cfg, RANGES_PER_WINDOW, &w->c, why,
				    sizeof(why));

	for (;;) {
		size_t i;

		pthread_mutex_lock(&run->lock);
		i = run->next < run->n ? run->next++ : run->n;
		pthread_mutex_unlock(&run->lock);
		if (i >= run->n)
			break;
		if (r < 0) {
			snprintf(run->checks[i].res.first_error,
				 sizeof(run->checks[i].res.first_error), "rank %" PRIu32 ": %s",
				 run->checks[i].rank, why);
			run->checks[i].r = r;
			continue;
		}
		verify_one(w, &run->checks[i]);
	}
	s3_client_free(w->c);
	w->c = NULL;
	return NULL;
}

static void s3_verify_ranks(struct inspect_step_source *src,
			    const struct ckpt_manifest *m,
			    struct inspect_rank_check *checks, size_t n,
			    struct tool_progress *pg)
{
	struct verify_run run = { .ss = (struct s3_steps *)src, .m = m,
				  .checks = checks, .n = n, .pg = pg };
	struct verify_worker w[VERIFY_THREADS];
	pthread_t tid[VERIFY_THREADS];
	bool started[VERIFY_THREADS] = { false };
	size_t nthreads = n < VERIFY_THREADS ? n : VERIFY_THREADS;

	memset(w, 0, sizeof(w));
	pthread_mutex_init(&run.lock, NULL);
	for (size_t t = 0; t < nthreads; t++) {
		w[t].run = &run;
		started[t] = pthread_create(&tid[t], NULL, verify_thread, &w[t]) == 0;
	}
	/* Without any thread (out of resources), do it here. */
	if (nthreads && !started[0])
		verify_thread(&w[0]);
	for (size_t t = 0; t < nthreads; t++)
		if (started[t])
			pthread_join(tid[t], NULL);
	pthread_mutex_destroy(&run.lock);
	pg->base = 0;
	for (size_t i = 0; i < n; i++)
		pg->base += checks[i].res.bytes;
}

static void s3_steps_init(struct s3_steps *ss, inspect_s3 *s, const char *jobkey)
{
	memset(ss, 0, sizeof(*ss));
	ss->pub.read_manifest = s3_read_manifest;
	ss->pub.verify_ranks = s3_verify_ranks;
	ss->s = s;
	ss->jobkey = jobkey;
	snprintf(ss->desc, sizeof(ss->desc), "s3://%s/%s", s->bucket, jobkey);
}

/* ---- the commands ------------------------------------------------------------------ */

static int status_of(int r)
{
	return r == -EBADMSG || r == -EPROTONOSUPPORT ? EXIT_VERIFY : EXIT_NOTFOUND;
}

static int verify_s3_job(inspect_s3 *s, const char *jobkey, const struct inspect_opts *o,
			 struct tool_progress *pg, json_t **out)
{
	struct s3_steps ss;
	struct inspect_s3_job j;
	char why[700] = "";
	const char *job = last_component(jobkey);
	json_t *jsteps = o->json ? json_array() : NULL;
	unsigned failed = 0;
	int status = 0;
	int r = scan_job_key(s, jobkey, false, &j, NULL, why, sizeof(why));

	if (r < 0) {
		inspect_err("%s: cannot list steps: %s", job, why);
		json_decref(jsteps);
		return EXIT_NOTFOUND;
	}
	s3_steps_init(&ss, s, jobkey);
	for (size_t i = 0; i < j.n; i++) {
		json_t *js = NULL;
		int st;

		if (!j.steps[i].committed)
			continue;
		st = inspect_verify_step(&ss.pub, job, j.steps[i].step, o, pg,
					 o->json ? &js : NULL);
		if (st)
			failed++;
		status = inspect_worse(status, st);
		if (js)
			json_array_append_new(jsteps, js);
	}
	inspect_report_job(job, j.committed, failed, status, jsteps, o, out);
	inspect_s3_job_free(&j);
	return status;
}

static int list_s3_root(inspect_s3 *s, const struct inspect_opts *o,
			struct tool_progress *pg, json_t **out)
{
	char **jobs = NULL, why[700] = "";
	size_t n = 0;
	bool seen = false;
	int status = 0, r;
	json_t *jjobs = o->json ? json_array() : NULL;

	r = list_jobs(s, &jobs, &n, &seen, why, sizeof(why));
	if (r == 0 && !seen && s->prefix[0]) {
		snprintf(why, sizeof(why), "nothing there (no job, no object)");
		r = -ENOENT;
	}
	if (r < 0) {
		inspect_err("%s: %s", s->url, why);
		json_decref(jjobs);
		return EXIT_NOTFOUND;
	}
	if (!o->json && !o->verify && !o->quiet)
		printf("%-24s %7s %12s %12s\n", "JOB", "STEPS", "LATEST", "SIZE");
	for (size_t i = 0; i < n; i++) {
		char jk[KEY_MAX], hb[32], lb[24] = "-";
		struct inspect_s3_job j;
		uint64_t total = 0;

		job_key(s, jobs[i], jk, sizeof(jk));
		if (o->verify) {
			json_t *jj = NULL;

			status = inspect_worse(status, verify_s3_job(s, jk, o, pg,
								     o->json ? &jj : NULL));
			if (jj)
				json_array_append_new(jjobs, jj);
			continue;
		}
		r = scan_job_key(s, jk, false, &j, NULL, why, sizeof(why));
		if (r < 0) {
			inspect_err("%s/%s: %s", s->url, jobs[i], why);
			status = inspect_worse(status, EXIT_NOTFOUND);
			continue;
		}
		/* Sizes from the listing: the objects are the root's files. */
		for (size_t k = 0; k < j.n; k++)
			if (j.steps[k].committed)
				total += j.steps[k].bytes;
		if (o->json) {
			json_t *jj = json_pack("{s:s, s:I, s:I}", "job", jobs[i],
					       "committed_steps", (json_int_t)j.committed,
					       "total_bytes", (json_int_t)total);

			json_object_set_new(jj, "latest", j.have_latest
				? json_integer((json_int_t)j.latest) : json_null());
			json_array_append_new(jjobs, jj);
		} else if (!o->quiet) {
			tool_human_bytes(hb, sizeof(hb), total);
			if (j.have_latest)
				snprintf(lb, sizeof(lb), "%" PRIu64, j.latest);
			printf("%-24s %7zu %12s %12s\n", jobs[i], j.committed, lb, hb);
		}
		inspect_s3_job_free(&j);
	}
	if (o->json)
		*out = json_pack("{s:s, s:b, s:o}", "root", s->url, "ok", status == 0,
				 "jobs", jjobs);
	store_strv_free(jobs, n);
	return status;
}

static int list_s3_job(inspect_s3 *s, const char *jobkey, const struct inspect_opts *o,
		       json_t **out)
{
	struct inspect_s3_job j;
	char why[700] = "";
	const char *job = last_component(jobkey);
	json_t *jsteps = o->json ? json_array() : NULL;
	int r = scan_job_key(s, jobkey, true, &j, NULL, why, sizeof(why));

	if (r < 0) {
		inspect_err("%s: cannot list steps: %s", job, why);
		json_decref(jsteps);
		return EXIT_NOTFOUND;
	}
	if (!o->json && !o->quiet)
		printf("%12s  %-11s %6s %12s  %-20s\n", "STEP", "STATE", "RANKS",
		       "SIZE", "CREATED");
	for (size_t i = 0; i < j.n; i++) {
		const struct inspect_s3_step *st = &j.steps[i];
		const char *state = !st->committed ? "uploading"
				    : st->damaged   ? "damaged" : "committed";
		uint32_t ranks = st->have_manifest ? st->world_size : st->shards;
		uint64_t bytes = st->have_manifest ? st->manifest_bytes : st->bytes;
		int64_t created = st->have_manifest ? st->created_unix_ns : 0;
		bool is_latest = j.have_latest && j.latest == st->step;

		if (o->json) {
			json_t *js = json_pack("{s:I, s:s, s:I, s:I, s:I, s:o, s:b, s:b}",
					       "step", (json_int_t)st->step,
					       "state", state, "ranks", (json_int_t)ranks,
					       "bytes", (json_int_t)bytes,
					       "created_unix_ns", (json_int_t)created,
					       "created", inspect_json_time(created),
					       "latest", is_latest,
					       "open_upload", st->open_upload);

			if (st->damaged)
				json_object_set_new(js, "error", json_string(st->error));
			json_array_append_new(jsteps, js);
		} else if (!o->quiet) {
			char hb[32], tb[64];

			tool_human_bytes(hb, sizeof(hb), bytes);
			inspect_format_time(tb, sizeof(tb), created);
			printf("%12" PRIu64 "  %-11s %6" PRIu32 " %12s  %-20s%s%s\n",
			       st->step, state, ranks, hb, tb, is_latest ? "  LATEST" : "",
			       st->open_upload ? "  (multipart upload open)" : "");
			if (st->damaged)
				printf("%12s  %s\n", "", st->error);
		}
	}
	if (o->json) {
		json_t *jj = json_pack("{s:s, s:s, s:I, s:o}", "job", job,
				       "url", s->url, "committed_steps",
				       (json_int_t)j.committed, "steps", jsteps);

		json_object_set_new(jj, "latest", j.have_latest
			? json_integer((json_int_t)j.latest) : json_null());
		*out = jj;
	} else if (!o->quiet) {
		char lb[24] = "-";

		if (j.have_latest)
			snprintf(lb, sizeof(lb), "%" PRIu64, j.latest);
		printf("job %s: %zu step%s, %zu committed, LATEST %s\n", job, j.n,
		       j.n == 1 ? "" : "s", j.committed, lb);
	}
	inspect_s3_job_free(&j);
	return 0;
}

/* Whether the step is committed on S3; else say why not (exit 3). */
static int step_present(inspect_s3 *s, const char *jobkey, uint64_t step)
{
	char pfx[KEY_MAX], dname[32], why[700] = "";
	struct inspect_s3_job j;
	const struct inspect_s3_step *st;
	int r;

	if (ckpt_step_dirname(dname, sizeof(dname), step) < 0) {
		inspect_err("s3://%s/%s: %" PRIu64 " is not a step number", s->bucket, jobkey, step);
		return EXIT_NOTFOUND;
	}
	snprintf(pfx, sizeof(pfx), "s3://%s/%s/%s", s->bucket, jobkey, dname);
	r = scan_job_key(s, jobkey, false, &j, NULL, why, sizeof(why));
	if (r < 0) {
		inspect_err("%s: %s", pfx, why);
		return EXIT_NOTFOUND;
	}
	st = inspect_s3_find(&j, step);
	if (!st || !st->committed)
		inspect_err("%s: %s", pfx, !st ? "no such step"
				: "step not committed on S3 (no " CKPT_MANIFEST_NAME ")");
	r = st && st->committed ? 0 : EXIT_NOTFOUND;
	inspect_s3_job_free(&j);
	return r;
}

static int show_s3_step(inspect_s3 *s, const char *jobkey, uint64_t step,
			const struct inspect_opts *o, json_t **out)
{
	struct s3_steps ss;
	struct ckpt_manifest m;
	struct inspect_s3_job j;
	char err[700] = "", dname[32];
	bool is_latest;
	int r = step_present(s, jobkey, step);

	if (r)
		return r;
	s3_steps_init(&ss, s, jobkey);
	r = s3_read_manifest(&ss.pub, step, &m, err, sizeof(err));
	if (r < 0) {
		inspect_err("%s", err);
		return status_of(r);
	}
	if (ckpt_step_dirname(dname, sizeof(dname), step) < 0)
		snprintf(dname, sizeof(dname), "step-?"); /* the manifest's step: cannot happen */
	if (o->have_rank && o->rank >= m.world_size) {
		inspect_err("%s/%s: no rank %" PRIu32 " (world_size %" PRIu32 ")", ss.desc,
			    dname, o->rank, m.world_size);
		ckpt_manifest_free(&m);
		return EXIT_NOTFOUND;
	}
	/* LATEST is a hint: read it the cheap way, through a listing of the job. */
	is_latest = scan_job_key(s, jobkey, false, &j, NULL, err, sizeof(err)) == 0 &&
		    j.have_latest && j.latest == step;
	inspect_s3_job_free(&j);
	if (o->json) {
		*out = inspect_manifest_json(&m, is_latest, o);
		json_object_set_new(*out, "url", json_string(ss.desc));
	} else if (!o->quiet) {
		inspect_print_manifest(&m, is_latest, o);
	}
	ckpt_manifest_free(&m);
	return 0;
}

/* Whether key prefix p holds step "directories": then it is a job. */
struct steps_seen {
	size_t len;
	bool any;
};

static int steps_seen_page(void *ctx, const struct s3_list *page)
{
	struct steps_seen *sp = ctx;

	for (size_t i = 0; i < page->n_prefixes; i++) {
		const char *rest;
		uint64_t step;

		if (strlen(page->prefixes[i]) > sp->len &&
		    parse_step_path(page->prefixes[i] + sp->len, &step, &rest) && !*rest)
			sp->any = true;
	}
	return 1;       /* one page: a look, not everything */
}

static int looks_like_job(inspect_s3 *s, const char *p, bool *yes, char *why,
			  size_t whylen)
{
	char pfx[KEY_MAX], base[KEY_MAX];
	struct steps_seen sp = { 0 };
	int r;

	*yes = false;
	if (!*p || !job_name_ok(last_component(p)) ||
	    ckpt_s3_job_prefix(base, sizeof(base), p) < 0 ||
	    ckpt_s3_steps_prefix(pfx, sizeof(pfx), p) < 0)
		return 0;
	sp.len = strlen(base);
	r = s3_sync_list_each(s->c, s->bucket,
			      &(struct s3_list_args){ .prefix = pfx, .delimiter = "/",
						      .max_keys = 10 },
			      steps_seen_page, &sp, why, whylen);
	*yes = sp.any;
	return r;
}

int inspect_s3_main(const char *url, const struct inspect_opts *o,
		    struct tool_progress *pg, json_t **out)
{
	char buf[1400], why[700] = "", jobkey[KEY_MAX] = "";
	inspect_s3 *s = NULL;
	uint64_t step = 0;
	bool at_step = false, is_step = false, is_job = false;
	int r, status;

	for (const char *c = url; *c; c++) {
		/* Never echo a control character to the terminal. */
		if ((unsigned char)*c < 0x20 || *c == 0x7f) {
			inspect_err("S3 URL: control character (byte 0x%02x) at offset %zu",
				    (unsigned)(unsigned char)*c, (size_t)(c - url));
			return EXIT_USAGE;
		}
	}
	if (strlen(url) >= sizeof(buf)) {
		inspect_err("%.60s...: URL too long", url);
		return EXIT_USAGE;
	}
	snprintf(buf, sizeof(buf), "%s", url);
	if (strncmp(buf, "s3://", 5) != 0) {
		inspect_err("%s: not an S3 URL (s3://BUCKET[/PREFIX][/JOB[@STEP]])", url);
		return EXIT_USAGE;
	}
	/* JOB@STEP: no key we write holds '@' (job names cannot). */
	char *at = strrchr(buf, '@');

	if (at && !strchr(at, '/')) {
		if (!tool_parse_step(at + 1, &step)) {
			inspect_err("%s: '%s' after '@' is not a step number", url, at + 1);
			return EXIT_USAGE;
		}
		*at = '\0';
		at_step = true;
	}
	/* Every usage error before credentials are looked for. */
	{
		struct s3_url u = { 0 };
		bool bad_job;

		r = s3_url_parse(buf, &u, why, sizeof(why));
		if (r < 0) {
			inspect_err("%s: %s", url, why);
			return EXIT_USAGE;
		}
		bad_job = at_step && (!u.prefix[0] || !job_name_ok(last_component(u.prefix)));
		s3_url_free(&u);
		if (bad_job) {
			inspect_err("%s: no job name before '@' (s3://BUCKET/PREFIX/JOB@STEP)",
				    url);
			return EXIT_USAGE;
		}
	}
	r = inspect_s3_open(buf, o->s3, &s, why, sizeof(why));
	if (r < 0) {
		inspect_err("%s: %s", url, why);
		return r == -EINVAL ? EXIT_USAGE : EXIT_NOTFOUND;
	}
	if (at_step) {
		snprintf(jobkey, sizeof(jobkey), "%s", s->prefix);
		is_step = true;
	} else if (s->prefix[0]) {
		/* .../JOB, .../JOB/STEP, or a prefix of jobs. */
		const char *last = last_component(s->prefix);
		char parent[KEY_MAX] = "";
		bool parent_job = false;
		uint64_t n;

		if (last != s->prefix)
			snprintf(parent, sizeof(parent), "%.*s", (int)(last - s->prefix - 1),
				 s->prefix);
		r = looks_like_job(s, s->prefix, &is_job, why, sizeof(why));
		if (r == 0 && parent[0] && tool_parse_step(last, &n))
			r = looks_like_job(s, parent, &parent_job, why, sizeof(why));
		if (r < 0) {
			inspect_err("%s: %s", url, why);
			inspect_s3_close(s);
			return EXIT_NOTFOUND;
		}
		if (is_job && parent_job) {
			inspect_err("%s: ambiguous: both a job and step %" PRIu64 " of job %s; "
				    "write s3://%s/%s@%" PRIu64 " for the step", url, n,
				    last_component(parent), s->bucket, parent, n);
			inspect_s3_close(s);
			return EXIT_USAGE;
		}
		if (parent_job) {
			snprintf(jobkey, sizeof(jobkey), "%s", parent);
			step = n;
			is_step = true;
		} else if (is_job) {
			snprintf(jobkey, sizeof(jobkey), "%s", s->prefix);
		}
	}

	if (is_step && o->verify) {
		struct s3_steps ss;

		status = step_present(s, jobkey, step);
		if (!status) {
			s3_steps_init(&ss, s, jobkey);
			status = inspect_verify_step(&ss.pub, last_component(jobkey), step,
						     o, pg, out);
		}
	} else if (is_step) {
		status = show_s3_step(s, jobkey, step, o, out);
	} else if (is_job) {
		status = o->verify ? verify_s3_job(s, jobkey, o, pg, out)
				   : list_s3_job(s, jobkey, o, out);
	} else {
		status = list_s3_root(s, o, pg, out);
	}
	inspect_s3_close(s);
	return status;
}
