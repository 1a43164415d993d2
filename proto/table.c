/* SPDX-License-Identifier: MIT */
/*
 * Tensor tables (FORMAT.md, "Tensor table"): used in SAVE slots, in
 * RESTORE slots and inside rank indexes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define TABLE_MAGIC 0x54544b43u /* "CKTT" */
#define TABLE_VERSION 1u
#define TABLE_HDR_BYTES 24u
#define ENTRY_FIXED_BYTES 24u

static size_t entry_size(uint32_t ndim, size_t name_len)
{
	return ENTRY_FIXED_BYTES + 24u * ndim + PROTO_PAD8(name_len);
}

int proto_tensor_validate(const struct ckpt_tensor *t, size_t name_len,
			  char *err, size_t errlen)
{
	const char *name = t->name ? t->name : "";
	size_t esize = ckpt_proto_dtype_size(t->dtype);
	uint64_t elems = 1;

#define BAD(...) do { if (err && errlen) snprintf(err, errlen, __VA_ARGS__); return -EBADMSG; } while (0)
	const char *problem = ckpt_tensor_name_problem(t->name, name_len);
	if (problem) {
		char q[160];

		ckpt_name_quote(q, sizeof(q), t->name, t->name ? name_len : 0);
		BAD("tensor name \"%s\" (%zu bytes) %s", q, name_len, problem);
	}
	if (esize == 0)
		BAD("tensor '%s': unknown dtype %u", name, t->dtype);
	if (t->ndim > CKPT_MAX_DIMS)
		BAD("tensor '%s': ndim %u > %u", name, t->ndim, CKPT_MAX_DIMS);
	for (uint32_t d = 0; d < t->ndim; d++) {
		if (t->offset[d] > t->global_shape[d] ||
		    t->shape[d] > t->global_shape[d] - t->offset[d])
			BAD("tensor '%s': dim %u slice [%llu, +%llu) outside global %llu",
			    name, d, (unsigned long long)t->offset[d],
			    (unsigned long long)t->shape[d],
			    (unsigned long long)t->global_shape[d]);
		if (t->shape[d] != 0 && elems > UINT64_MAX / t->shape[d])
			BAD("tensor '%s': shape product overflows", name);
		elems *= t->shape[d];
	}
	if (elems > UINT64_MAX / esize)
		BAD("tensor '%s': byte size overflows", name);
	if (t->nbytes != elems * esize)
		BAD("tensor '%s': nbytes %llu != %llu", name,
		    (unsigned long long)t->nbytes, (unsigned long long)(elems * esize));
	if (t->data_offset % CKPT_ALIGN != 0)
		BAD("tensor '%s': data_offset %llu not %u-aligned", name,
		    (unsigned long long)t->data_offset, CKPT_ALIGN);
	if (t->nbytes > UINT64_MAX - t->data_offset)
		BAD("tensor '%s': extent end overflows", name);
#undef BAD
	return 0;
}

size_t ckpt_table_encoded_size(const struct ckpt_tensor *tensors, uint32_t count)
{
	size_t n = TABLE_HDR_BYTES;

	for (uint32_t i = 0; i < count; i++) {
		size_t name_len = tensors[i].name ? strlen(tensors[i].name) : 0;
		uint32_t ndim = tensors[i].ndim <= CKPT_MAX_DIMS ? tensors[i].ndim : CKPT_MAX_DIMS;

		n += entry_size(ndim, name_len);
	}
	return n;
}

ssize_t ckpt_table_encode(const struct ckpt_tensor *tensors, uint32_t count,
			  void *buf, size_t cap)
{
	struct wr w;
	size_t total;

	if (count > CKPT_MAX_TENSORS || (count && !tensors) || !buf)
		return -EINVAL;
	for (uint32_t i = 0; i < count; i++) {
		if (!tensors[i].name)
			return -EINVAL;
		if (proto_tensor_validate(&tensors[i], strlen(tensors[i].name), NULL, 0) < 0)
			return -EINVAL;
	}
	total = ckpt_table_encoded_size(tensors, count);
	if (total > CKPT_TABLE_MAX_BYTES)
		return -EINVAL;
	if (cap < total)
		return -ENOBUFS;

	wr_init(&w, buf, cap);
	wr_u32(&w, TABLE_MAGIC);
	wr_u16(&w, TABLE_VERSION);
	wr_u16(&w, 0);
	wr_u32(&w, count);
	wr_u32(&w, 0);
	wr_u64(&w, total);
	for (uint32_t i = 0; i < count; i++) {
		const struct ckpt_tensor *t = &tensors[i];
		size_t name_len = strlen(t->name);

		wr_u16(&w, (uint16_t)name_len);
		wr_u8(&w, (uint8_t)t->dtype);
		wr_u8(&w, (uint8_t)t->ndim);
		wr_u32(&w, t->crc32c);
		wr_u64(&w, t->data_offset);
		wr_u64(&w, t->nbytes);
		for (uint32_t d = 0; d < t->ndim; d++)
			wr_u64(&w, t->global_shape[d]);
		for (uint32_t d = 0; d < t->ndim; d++)
			wr_u64(&w, t->offset[d]);
		for (uint32_t d = 0; d < t->ndim; d++)
			wr_u64(&w, t->shape[d]);
		wr_bytes(&w, t->name, name_len);
		wr_zeros(&w, PROTO_PAD8(name_len) - name_len);
	}
	if (!w.ok || w.pos != total)
		return -EINVAL;
	return (ssize_t)total;
}

int proto_table_build(struct ckpt_table *dst, const struct ckpt_tensor *src,
		      uint32_t count)
{
	size_t pool_bytes = 0, pos = 0;
	struct ckpt_tensor *tensors = NULL;
	char *pool = NULL;

	memset(dst, 0, sizeof(*dst));
	if (count == 0)
		return 0;
	for (uint32_t i = 0; i < count; i++)
		pool_bytes += strlen(src[i].name ? src[i].name : "") + 1;
	tensors = calloc(count, sizeof(*tensors));
	pool = malloc(pool_bytes);
	if (!tensors || !pool) {
		free(tensors);
		free(pool);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < count; i++) {
		const char *name = src[i].name ? src[i].name : "";
		size_t n = strlen(name) + 1;

		tensors[i] = src[i];
		memcpy(pool + pos, name, n);
		tensors[i].name = pool + pos;
		pos += n;
	}
	dst->count = count;
	dst->tensors = tensors;
	dst->pool = pool;
	return 0;
}

int ckpt_table_decode(const void *buf, size_t len, struct ckpt_table *out)
{
	int r = ckpt_table_decode_why(buf, len, out, NULL, 0);

	return r == -CKPT_E_BAD_NAME ? -EBADMSG : r;
}

int ckpt_table_decode_why(const void *buf, size_t len, struct ckpt_table *out,
			  char *err, size_t errlen)
{
	struct ckpt_tensor *tensors = NULL;
	struct {
		size_t pos, len;
	} *name_at = NULL;
	char *pool = NULL;
	size_t pool_bytes = 0, pos = 0;
	uint32_t count;
	uint64_t total;
	struct rd r;
	int ret = -EBADMSG;

	memset(out, 0, sizeof(*out));
	if (err && errlen)
		err[0] = '\0';
	if (!buf || len < TABLE_HDR_BYTES)
		return -EBADMSG;
	if (len > CKPT_TABLE_MAX_BYTES)
		return -E2BIG;
	rd_init(&r, buf, len);
	if (rd_u32(&r) != TABLE_MAGIC)
		return -EBADMSG;
	if (rd_u16(&r) != TABLE_VERSION)
		return -EPROTONOSUPPORT;
	if (rd_u16(&r) != 0)
		return -EBADMSG;
	count = rd_u32(&r);
	if (rd_u32(&r) != 0)
		return -EBADMSG;
	total = rd_u64(&r);
	if (total != len)
		return -EBADMSG;
	if (count > CKPT_MAX_TENSORS)
		return -E2BIG;
	/* Every entry takes at least ENTRY_FIXED_BYTES + 8: refuse a count the
	 * input cannot hold before allocating for it. */
	if (count > (len - TABLE_HDR_BYTES) / (ENTRY_FIXED_BYTES + 8))
		return -EBADMSG;
	if (count == 0)
		return r.pos == len ? 0 : -EBADMSG;

	tensors = calloc(count, sizeof(*tensors));
	name_at = calloc(count, sizeof(*name_at));
	if (!tensors || !name_at) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < count; i++) {
		struct ckpt_tensor *t = &tensors[i];
		size_t name_len = rd_u16(&r);
		const uint8_t *name, *pad;

		t->dtype = rd_u8(&r);
		t->ndim = rd_u8(&r);
		t->crc32c = rd_u32(&r);
		t->data_offset = rd_u64(&r);
		t->nbytes = rd_u64(&r);
		if (!r.ok || t->ndim > CKPT_MAX_DIMS)
			goto out;
		for (uint32_t d = 0; d < t->ndim; d++)
			t->global_shape[d] = rd_u64(&r);
		for (uint32_t d = 0; d < t->ndim; d++)
			t->offset[d] = rd_u64(&r);
		for (uint32_t d = 0; d < t->ndim; d++)
			t->shape[d] = rd_u64(&r);
		name_at[i].pos = r.pos;
		name_at[i].len = name_len;
		name = rd_take(&r, name_len);
		pad = rd_take(&r, PROTO_PAD8(name_len) - name_len);
		/* Names are checked by length here (no NUL in the input) and
		 * the whole entry again once copied out. */
		if (!r.ok)
			goto out;
		const char *problem = ckpt_tensor_name_problem((const char *)name, name_len);
		if (problem) {
			if (err && errlen) {
				char q[160];

				ckpt_name_quote(q, sizeof(q), (const char *)name, name_len);
				snprintf(err, errlen, "tensor %u of %u: name \"%s\" (%zu bytes) %s",
					 i, count, q, name_len, problem);
			}
			ret = -CKPT_E_BAD_NAME;
			goto out;
		}
		for (size_t k = 0; k < PROTO_PAD8(name_len) - name_len; k++)
			if (pad[k] != 0)
				goto out;
		pool_bytes += name_len + 1;
	}
	if (r.pos != len)
		goto out;

	pool = malloc(pool_bytes);
	if (!pool) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < count; i++) {
		size_t name_len = name_at[i].len;

		memcpy(pool + pos, (const uint8_t *)buf + name_at[i].pos, name_len);
		pool[pos + name_len] = '\0';
		tensors[i].name = pool + pos;
		pos += name_len + 1;
		if (proto_tensor_validate(&tensors[i], name_len, NULL, 0) < 0)
			goto out;
	}
	out->count = count;
	out->tensors = tensors;
	out->pool = pool;
	tensors = NULL;
	pool = NULL;
	ret = 0;
out:
	free(tensors);
	free(name_at);
	free(pool);
	return ret;
}

struct extent {
	uint64_t start, end;
	int64_t idx; /* tensor index, or -1 for the blob */
};

static int extent_cmp(const void *a, const void *b)
{
	const struct extent *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return 0;
}

static int name_cmp(const void *a, const void *b)
{
	const struct ckpt_tensor *const *x = a, *const *y = b;

	return strcmp((*x)->name, (*y)->name);
}

static const char *extent_name(const struct ckpt_table *t, int64_t idx)
{
	return idx < 0 ? "(blob)" : t->tensors[idx].name;
}

int ckpt_table_check_layout(const struct ckpt_table *t, uint64_t data_bytes,
			    uint64_t blob_offset, uint64_t blob_bytes,
			    char *err, size_t errlen)
{
	struct extent *ext = NULL;
	const struct ckpt_tensor **by_name = NULL;
	size_t n = 0;
	int ret = -EBADMSG;

#define FAIL(...) do { if (err && errlen) snprintf(err, errlen, __VA_ARGS__); ret = -EBADMSG; goto out; } while (0)
	if (err && errlen)
		err[0] = '\0';
	if (t->count > CKPT_MAX_TENSORS || (t->count && !t->tensors)) {
		if (err && errlen)
			snprintf(err, errlen, "table: bad tensor count %u", t->count);
		return -EBADMSG;
	}
	ext = malloc(((size_t)t->count + 1) * sizeof(*ext));
	by_name = malloc(((size_t)t->count + 1) * sizeof(*by_name));
	if (!ext || !by_name) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < t->count; i++) {
		const struct ckpt_tensor *x = &t->tensors[i];

		if (!x->name)
			FAIL("tensor %u has no name", i);
		if (x->data_offset % CKPT_ALIGN != 0)
			FAIL("tensor '%s': data_offset %llu not %u-aligned", x->name,
			     (unsigned long long)x->data_offset, CKPT_ALIGN);
		if (x->data_offset > data_bytes || x->nbytes > data_bytes - x->data_offset)
			FAIL("tensor '%s': extent [%llu, +%llu) outside data [0, %llu)",
			     x->name, (unsigned long long)x->data_offset,
			     (unsigned long long)x->nbytes, (unsigned long long)data_bytes);
		by_name[i] = x;
		if (x->nbytes == 0)
			continue; /* an empty extent overlaps nothing */
		ext[n++] = (struct extent){ x->data_offset, x->data_offset + x->nbytes, i };
	}
	if (blob_bytes > 0) {
		if (blob_offset % CKPT_ALIGN != 0)
			FAIL("blob: offset %llu not %u-aligned",
			     (unsigned long long)blob_offset, CKPT_ALIGN);
		if (blob_offset > data_bytes || blob_bytes > data_bytes - blob_offset)
			FAIL("blob: extent [%llu, +%llu) outside data [0, %llu)",
			     (unsigned long long)blob_offset, (unsigned long long)blob_bytes,
			     (unsigned long long)data_bytes);
		ext[n++] = (struct extent){ blob_offset, blob_offset + blob_bytes, -1 };
	}
	qsort(ext, n, sizeof(*ext), extent_cmp);
	for (size_t i = 1; i < n; i++)
		if (ext[i].start < ext[i - 1].end)
			FAIL("'%s' [%llu, %llu) overlaps '%s' [%llu, %llu)",
			     extent_name(t, ext[i].idx), (unsigned long long)ext[i].start,
			     (unsigned long long)ext[i].end, extent_name(t, ext[i - 1].idx),
			     (unsigned long long)ext[i - 1].start,
			     (unsigned long long)ext[i - 1].end);
	qsort(by_name, t->count, sizeof(*by_name), name_cmp);
	for (uint32_t i = 1; i < t->count; i++)
		if (strcmp(by_name[i]->name, by_name[i - 1]->name) == 0)
			FAIL("tensor '%s' appears more than once", by_name[i]->name);
	ret = 0;
#undef FAIL
out:
	free(ext);
	free(by_name);
	return ret;
}

int ckpt_table_find(const struct ckpt_table *t, const char *name)
{
	if (!t || !name)
		return -1;
	for (uint32_t i = 0; i < t->count; i++)
		if (strcmp(t->tensors[i].name, name) == 0)
			return (int)i;
	return -1;
}

int ckpt_table_copy(struct ckpt_table *dst, const struct ckpt_table *src)
{
	return proto_table_build(dst, src->tensors, src->count);
}

void ckpt_table_free(struct ckpt_table *t)
{
	if (!t)
		return;
	free(t->tensors);
	free(t->pool);
	memset(t, 0, sizeof(*t));
}
