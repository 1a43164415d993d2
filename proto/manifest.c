/* SPDX-License-Identifier: MIT */
/*
 * MANIFEST.json (FORMAT.md, "Manifest"): the commit record of a step.
 * The checksum covers the canonical form: the object without "checksum",
 * dumped compact with sorted keys.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "internal.h"

#define MANIFEST_FORMAT "ckpt-manifest"
#define MANIFEST_VERSION 1
#define CHECKSUM_PREFIX "crc32c:"

/* ---- Encoding ---------------------------------------------------------- */

static int set_new(json_t *obj, const char *key, json_t *v)
{
	return v ? json_object_set_new(obj, key, v) : -1;
}

static json_t *u64_array(const uint64_t *v, uint32_t n)
{
	json_t *a = json_array();

	for (uint32_t i = 0; a && i < n; i++) {
		if (v[i] > INT64_MAX || json_array_append_new(a, json_integer((json_int_t)v[i])) < 0) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

static json_t *tensor_to_json(const struct ckpt_tensor *t)
{
	const char *dtype = ckpt_proto_dtype_name(t->dtype);
	json_t *o;

	if (!dtype || t->data_offset > INT64_MAX || t->nbytes > INT64_MAX || t->ndim > CKPT_MAX_DIMS)
		return NULL;
	o = json_object();
	if (!o)
		return NULL;
	if (set_new(o, "name", json_string(t->name)) < 0 ||
	    set_new(o, "dtype", json_string(dtype)) < 0 ||
	    set_new(o, "global_shape", u64_array(t->global_shape, t->ndim)) < 0 ||
	    set_new(o, "offset", u64_array(t->offset, t->ndim)) < 0 ||
	    set_new(o, "shape", u64_array(t->shape, t->ndim)) < 0 ||
	    set_new(o, "data_offset", json_integer((json_int_t)t->data_offset)) < 0 ||
	    set_new(o, "nbytes", json_integer((json_int_t)t->nbytes)) < 0 ||
	    set_new(o, "crc32c", json_integer(t->crc32c)) < 0) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *rank_to_json(const struct ckpt_manifest_rank *r)
{
	char shard[32], index[32], sha[65];
	json_t *o = NULL, *tensors = NULL;

	if (r->shard_bytes > INT64_MAX || r->blob_bytes > INT64_MAX || r->index_bytes > INT64_MAX)
		return NULL;
	if (ckpt_shard_filename(shard, sizeof(shard), r->rank) < 0 ||
	    ckpt_index_filename(index, sizeof(index), r->rank) < 0)
		return NULL;
	ckpt_hex(sha, r->index_sha256, sizeof(r->index_sha256));
	o = json_object();
	tensors = json_array();
	if (!o || !tensors)
		goto fail;
	for (uint32_t i = 0; i < r->table.count; i++)
		if (json_array_append_new(tensors, tensor_to_json(&r->table.tensors[i])) < 0)
			goto fail;
	if (set_new(o, "rank", json_integer(r->rank)) < 0 ||
	    set_new(o, "shard", json_string(shard)) < 0 ||
	    set_new(o, "index", json_string(index)) < 0 ||
	    set_new(o, "shard_bytes", json_integer((json_int_t)r->shard_bytes)) < 0 ||
	    set_new(o, "index_bytes", json_integer((json_int_t)r->index_bytes)) < 0 ||
	    set_new(o, "index_sha256", json_string(sha)) < 0 ||
	    set_new(o, "blob_bytes", json_integer((json_int_t)r->blob_bytes)) < 0 ||
	    set_new(o, "blob_crc32c", json_integer(r->blob_crc32c)) < 0)
		goto fail;
	if (json_object_set_new(o, "tensors", tensors) < 0) {
		tensors = NULL; /* set_new consumed it */
		goto fail;
	}
	return o;
fail:
	json_decref(tensors);
	json_decref(o);
	return NULL;
}

static void format_time(char *buf, size_t cap, int64_t ns)
{
	time_t secs = (time_t)(ns / 1000000000);
	struct tm tm;

	if (!gmtime_r(&secs, &tm)) {
		snprintf(buf, cap, "unknown");
		return;
	}
	snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%09" PRId64 "Z",
		 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
		 tm.tm_min, tm.tm_sec, ns % 1000000000);
}

static uint32_t canonical_crc(json_t *root, int *err)
{
	char *s = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
	uint32_t crc;

	if (!s) {
		*err = -ENOMEM;
		return 0;
	}
	crc = ckpt_crc32c(0, s, strlen(s));
	free(s);
	return crc;
}

int ckpt_manifest_encode(const struct ckpt_manifest *m, char **out, size_t *len)
{
	char created[64], sum[32];
	json_t *root = NULL, *ranks = NULL;
	char *text = NULL;
	size_t n;
	int ret = -EINVAL, err = 0;
	uint32_t crc;

	if (!m || !out)
		return -EINVAL;
	*out = NULL;
	if (len)
		*len = 0;
	if (ckpt_job_name_check(m->job, strnlen(m->job, sizeof(m->job))) < 0 ||
	    m->world_size < 1 || !m->ranks || m->step > CKPT_STEP_MAX ||
	    m->created_unix_ns < 0 ||
	    m->chunk_bytes < CKPT_CHUNK_MIN || m->chunk_bytes > CKPT_CHUNK_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < m->world_size; i++) {
		const struct ckpt_manifest_rank *r = &m->ranks[i];

		if (r->rank != i || r->blob_bytes > r->shard_bytes || r->shard_bytes % CKPT_ALIGN)
			return -EINVAL;
		for (uint32_t k = 0; k < r->table.count; k++)
			if (!r->table.tensors[k].name ||
			    proto_tensor_validate(&r->table.tensors[k],
						  strlen(r->table.tensors[k].name), NULL, 0) < 0)
				return -EINVAL;
		if (ckpt_table_check_layout(&r->table, r->shard_bytes, 0, 0, NULL, 0) < 0)
			return -EINVAL;
	}
	format_time(created, sizeof(created), m->created_unix_ns);

	ret = -ENOMEM;
	root = json_object();
	ranks = json_array();
	if (!root || !ranks)
		goto out;
	for (uint32_t i = 0; i < m->world_size; i++)
		if (json_array_append_new(ranks, rank_to_json(&m->ranks[i])) < 0)
			goto out;
	if (set_new(root, "format", json_string(MANIFEST_FORMAT)) < 0 ||
	    set_new(root, "version", json_integer(MANIFEST_VERSION)) < 0 ||
	    set_new(root, "job", json_string(m->job)) < 0 ||
	    set_new(root, "step", json_integer((json_int_t)m->step)) < 0 ||
	    set_new(root, "world_size", json_integer(m->world_size)) < 0 ||
	    set_new(root, "chunk_bytes", json_integer(m->chunk_bytes)) < 0 ||
	    set_new(root, "created_unix_ns", json_integer(m->created_unix_ns)) < 0 ||
	    set_new(root, "created", json_string(created)) < 0)
		goto out;
	if (m->s3_encoding[0] && set_new(root, "s3_encoding", json_string(m->s3_encoding)) < 0)
		goto out;
	if (json_object_set_new(root, "ranks", ranks) < 0) {
		ranks = NULL;
		goto out;
	}
	ranks = NULL;

	crc = canonical_crc(root, &err);
	if (err)
		goto out;
	snprintf(sum, sizeof(sum), CHECKSUM_PREFIX "%08x", crc);
	if (set_new(root, "checksum", json_string(sum)) < 0)
		goto out;
	text = json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS);
	if (!text)
		goto out;
	/* A text file ends with a newline. */
	n = strlen(text);
	{
		char *t = realloc(text, n + 2);

		if (!t)
			goto out;
		text = t;
	}
	text[n++] = '\n';
	text[n] = '\0';
	*out = text;
	text = NULL;
	if (len)
		*len = n;
	ret = 0;
out:
	free(text);
	json_decref(ranks);
	json_decref(root);
	return ret;
}

/* ---- Decoding ---------------------------------------------------------- */

struct perr {
	char *buf;
	size_t len;
};

__attribute__((format(printf, 2, 3)))
static int fail(struct perr *e, const char *fmt, ...)
{
	va_list ap;

	if (e->buf && e->len) {
		va_start(ap, fmt);
		vsnprintf(e->buf, e->len, fmt, ap);
		va_end(ap);
	}
	return -EBADMSG;
}

/* Field `key` of obj as an integer in [0, max]. */
static int get_uint(struct perr *e, const char *path, json_t *obj, const char *key,
		    uint64_t max, uint64_t *v)
{
	json_t *j = json_object_get(obj, key);
	json_int_t x;

	if (!j)
		return fail(e, "%s%s: missing", path, key);
	if (!json_is_integer(j))
		return fail(e, "%s%s: not an integer", path, key);
	x = json_integer_value(j);
	if (x < 0 || (uint64_t)x > max)
		return fail(e, "%s%s: %lld out of range [0, %llu]", path, key,
			    (long long)x, (unsigned long long)max);
	*v = (uint64_t)x;
	return 0;
}

static int get_string(struct perr *e, const char *path, json_t *obj, const char *key,
		      const char **s, size_t *n)
{
	json_t *j = json_object_get(obj, key);

	if (!j)
		return fail(e, "%s%s: missing", path, key);
	if (!json_is_string(j))
		return fail(e, "%s%s: not a string", path, key);
	*s = json_string_value(j);
	*n = json_string_length(j);
	return 0;
}

static int get_dims(struct perr *e, const char *path, json_t *obj, const char *key,
		    uint64_t *dims, uint32_t *ndim)
{
	json_t *a = json_object_get(obj, key);
	size_t n;

	if (!a)
		return fail(e, "%s%s: missing", path, key);
	if (!json_is_array(a))
		return fail(e, "%s%s: not an array", path, key);
	n = json_array_size(a);
	if (n > CKPT_MAX_DIMS)
		return fail(e, "%s%s: %zu dimensions > %u", path, key, n, CKPT_MAX_DIMS);
	for (size_t i = 0; i < n; i++) {
		json_t *j = json_array_get(a, i);

		if (!json_is_integer(j) || json_integer_value(j) < 0)
			return fail(e, "%s%s[%zu]: not a non-negative integer", path, key, i);
		dims[i] = (uint64_t)json_integer_value(j);
	}
	*ndim = (uint32_t)n;
	return 0;
}

static int parse_tensor(struct perr *e, const char *path, json_t *o, struct ckpt_tensor *t,
			size_t *name_len)
{
	char reason[400];
	const char *s;
	size_t n;
	uint32_t n1, n2, n3;
	uint64_t v;
	int ret;

	if (!json_is_object(o))
		return fail(e, "%s not an object", path);
	if ((ret = get_string(e, path, o, "name", &s, &n)) < 0)
		return ret;
	if (ckpt_tensor_name_check(s, n) < 0)
		return fail(e, "%sname: not a valid tensor name", path);
	t->name = (char *)s; /* borrowed from the JSON until the table is built */
	*name_len = n;
	if ((ret = get_string(e, path, o, "dtype", &s, &n)) < 0)
		return ret;
	t->dtype = proto_dtype_from_name(s);
	if (t->dtype == 0)
		return fail(e, "%sdtype: unknown \"%.16s\"", path, s);
	if ((ret = get_dims(e, path, o, "global_shape", t->global_shape, &n1)) < 0 ||
	    (ret = get_dims(e, path, o, "offset", t->offset, &n2)) < 0 ||
	    (ret = get_dims(e, path, o, "shape", t->shape, &n3)) < 0)
		return ret;
	if (n1 != n2 || n1 != n3)
		return fail(e, "%sshape: global_shape, offset and shape differ in length", path);
	t->ndim = n1;
	if ((ret = get_uint(e, path, o, "data_offset", INT64_MAX, &t->data_offset)) < 0 ||
	    (ret = get_uint(e, path, o, "nbytes", INT64_MAX, &t->nbytes)) < 0 ||
	    (ret = get_uint(e, path, o, "crc32c", UINT32_MAX, &v)) < 0)
		return ret;
	t->crc32c = (uint32_t)v;
	if (proto_tensor_validate(t, *name_len, reason, sizeof(reason)) < 0)
		return fail(e, "%s %s", path, reason);
	return 0;
}

static int parse_hex32(const char *s, size_t n, uint8_t *out)
{
	if (n != 64)
		return -1;
	for (size_t i = 0; i < 64; i++) {
		char c = s[i];
		int d;

		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else
			return -1;
		if (i % 2 == 0)
			out[i / 2] = (uint8_t)(d << 4);
		else
			out[i / 2] |= (uint8_t)d;
	}
	return 0;
}

static int parse_rank(struct perr *e, size_t pos, json_t *o, uint32_t world_size,
		      struct ckpt_manifest_rank *r)
{
	char path[64], tpath[96], want[32], reason[400];
	struct ckpt_tensor *tensors = NULL;
	json_t *arr;
	const char *s;
	size_t n, count;
	uint64_t v;
	int ret;

	snprintf(path, sizeof(path), "ranks[%zu].", pos);
	if (!json_is_object(o))
		return fail(e, "ranks[%zu]: not an object", pos);
	if ((ret = get_uint(e, path, o, "rank", world_size - 1, &v)) < 0)
		return ret;
	r->rank = (uint32_t)v;
	if ((ret = get_string(e, path, o, "shard", &s, &n)) < 0)
		return ret;
	ckpt_shard_filename(want, sizeof(want), r->rank);
	if (strcmp(s, want) != 0 || n != strlen(want))
		return fail(e, "%sshard: expected \"%s\"", path, want);
	if ((ret = get_string(e, path, o, "index", &s, &n)) < 0)
		return ret;
	ckpt_index_filename(want, sizeof(want), r->rank);
	if (strcmp(s, want) != 0 || n != strlen(want))
		return fail(e, "%sindex: expected \"%s\"", path, want);
	if ((ret = get_uint(e, path, o, "shard_bytes", INT64_MAX, &r->shard_bytes)) < 0 ||
	    (ret = get_uint(e, path, o, "index_bytes", INT64_MAX, &r->index_bytes)) < 0 ||
	    (ret = get_uint(e, path, o, "blob_bytes", INT64_MAX, &r->blob_bytes)) < 0 ||
	    (ret = get_uint(e, path, o, "blob_crc32c", UINT32_MAX, &v)) < 0)
		return ret;
	r->blob_crc32c = (uint32_t)v;
	if (r->shard_bytes % CKPT_ALIGN)
		return fail(e, "%sshard_bytes: %llu not a multiple of %u", path,
			    (unsigned long long)r->shard_bytes, CKPT_ALIGN);
	if (r->blob_bytes > r->shard_bytes)
		return fail(e, "%sblob_bytes: larger than the shard", path);
	if ((ret = get_string(e, path, o, "index_sha256", &s, &n)) < 0)
		return ret;
	if (parse_hex32(s, n, r->index_sha256) < 0)
		return fail(e, "%sindex_sha256: not 64 lower-case hex digits", path);

	arr = json_object_get(o, "tensors");
	if (!json_is_array(arr))
		return fail(e, "%stensors: missing or not an array", path);
	count = json_array_size(arr);
	if (count > CKPT_MAX_TENSORS) {
		fail(e, "%stensors: %zu tensors > %u", path, count, CKPT_MAX_TENSORS);
		return -E2BIG;
	}
	if (count) {
		tensors = calloc(count, sizeof(*tensors));
		if (!tensors)
			return -ENOMEM;
	}
	for (size_t i = 0; i < count; i++) {
		size_t name_len;

		snprintf(tpath, sizeof(tpath), "%stensors[%zu].", path, i);
		ret = parse_tensor(e, tpath, json_array_get(arr, i), &tensors[i], &name_len);
		if (ret < 0)
			goto out;
	}
	ret = proto_table_build(&r->table, tensors, (uint32_t)count);
	if (ret < 0)
		goto out;
	if (ckpt_table_check_layout(&r->table, r->shard_bytes, 0, 0, reason, sizeof(reason)) < 0) {
		ret = fail(e, "%stensors: %s", path, reason);
		ckpt_table_free(&r->table);
		goto out;
	}
	ret = 0;
out:
	free(tensors);
	return ret;
}

static int parse_root(struct perr *e, json_t *root, struct ckpt_manifest *m)
{
	const char *s;
	size_t n;
	uint64_t v;
	json_t *j, *ranks;
	bool *seen = NULL;
	int ret;

	if ((ret = get_uint(e, "", root, "step", CKPT_STEP_MAX, &m->step)) < 0)
		return ret;
	if ((ret = get_string(e, "", root, "job", &s, &n)) < 0)
		return ret;
	if (ckpt_job_name_check(s, n) < 0)
		return fail(e, "job: not a valid job name");
	memcpy(m->job, s, n);
	m->job[n] = '\0';
	if ((ret = get_uint(e, "", root, "world_size", UINT32_MAX, &v)) < 0)
		return ret;
	if (v < 1)
		return fail(e, "world_size: must be at least 1");
	m->world_size = (uint32_t)v;
	if ((ret = get_uint(e, "", root, "chunk_bytes", CKPT_CHUNK_MAX, &v)) < 0)
		return ret;
	if (v < CKPT_CHUNK_MIN)
		return fail(e, "chunk_bytes: %llu below %u", (unsigned long long)v, CKPT_CHUNK_MIN);
	m->chunk_bytes = (uint32_t)v;
	if ((ret = get_uint(e, "", root, "created_unix_ns", INT64_MAX, &v)) < 0)
		return ret;
	m->created_unix_ns = (int64_t)v;
	j = json_object_get(root, "created");
	if (j && !json_is_string(j))
		return fail(e, "created: not a string");
	j = json_object_get(root, "s3_encoding");
	if (j) {
		if ((ret = get_string(e, "", root, "s3_encoding", &s, &n)) < 0)
			return ret;
		if (n < 1 || n >= sizeof(m->s3_encoding) || strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-") != n)
			return fail(e, "s3_encoding: not 1..15 of [a-z0-9-]");
		memcpy(m->s3_encoding, s, n);
		m->s3_encoding[n] = '\0';
	}

	ranks = json_object_get(root, "ranks");
	if (!json_is_array(ranks))
		return fail(e, "ranks: missing or not an array");
	if (json_array_size(ranks) != m->world_size)
		return fail(e, "ranks: %zu entries for world_size %u",
			    json_array_size(ranks), m->world_size);
	m->ranks = calloc(m->world_size, sizeof(*m->ranks));
	seen = calloc(m->world_size, sizeof(*seen));
	if (!m->ranks || !seen) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < m->world_size; i++) {
		struct ckpt_manifest_rank r;

		memset(&r, 0, sizeof(r));
		ret = parse_rank(e, i, json_array_get(ranks, i), m->world_size, &r);
		if (ret < 0)
			goto out;
		if (seen[r.rank]) {
			ckpt_table_free(&r.table);
			ret = fail(e, "ranks[%zu].rank: rank %u appears more than once", i, r.rank);
			goto out;
		}
		seen[r.rank] = true;
		m->ranks[r.rank] = r;
	}
	/* world_size entries, none twice: every rank is there. */
	ret = 0;
out:
	free(seen);
	return ret;
}

int ckpt_manifest_decode(const char *json, size_t len, struct ckpt_manifest *out,
			 char *err, size_t errlen)
{
	struct perr e = { err, errlen };
	char sum[32], want[32];
	json_error_t jerr;
	json_t *root = NULL, *j;
	const char *s;
	size_t n;
	uint32_t crc;
	int ret, cerr = 0;

	if (err && errlen)
		err[0] = '\0';
	if (!json || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return fail(&e, "not JSON: line %d column %d: %s", jerr.line, jerr.column, jerr.text);
	ret = -EBADMSG;
	if (!json_is_object(root)) {
		ret = fail(&e, "not a JSON object");
		goto out;
	}
	if (get_string(&e, "", root, "format", &s, &n) < 0)
		goto out;
	if (n != strlen(MANIFEST_FORMAT) || strcmp(s, MANIFEST_FORMAT) != 0) {
		ret = fail(&e, "format: not \"" MANIFEST_FORMAT "\"");
		goto out;
	}
	j = json_object_get(root, "version");
	if (!json_is_integer(j)) {
		ret = fail(&e, "version: missing or not an integer");
		goto out;
	}
	if (json_integer_value(j) != MANIFEST_VERSION) {
		fail(&e, "version: %lld not supported (this reader knows %d)",
		     (long long)json_integer_value(j), MANIFEST_VERSION);
		ret = -EPROTONOSUPPORT;
		goto out;
	}
	if (get_string(&e, "", root, "checksum", &s, &n) < 0)
		goto out;
	if (n != strlen(CHECKSUM_PREFIX) + 8 || strncmp(s, CHECKSUM_PREFIX, strlen(CHECKSUM_PREFIX))) {
		ret = fail(&e, "checksum: not \"" CHECKSUM_PREFIX "<8 hex digits>\"");
		goto out;
	}
	memcpy(sum, s, n + 1);
	json_object_del(root, "checksum");
	crc = canonical_crc(root, &cerr);
	if (cerr) {
		ret = cerr;
		goto out;
	}
	snprintf(want, sizeof(want), CHECKSUM_PREFIX "%08x", crc);
	if (strcmp(sum, want) != 0) {
		ret = fail(&e, "checksum: %s in the file, %s computed", sum, want);
		goto out;
	}
	ret = parse_root(&e, root, out);
out:
	json_decref(root);
	if (ret < 0)
		ckpt_manifest_free(out);
	return ret;
}

void ckpt_manifest_free(struct ckpt_manifest *m)
{
	if (!m)
		return;
	if (m->ranks)
		for (uint32_t i = 0; i < m->world_size; i++)
			ckpt_table_free(&m->ranks[i].table);
	free(m->ranks);
	m->ranks = NULL;
}
