/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "zshard.h"

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static uint32_t shuffle_width(uint32_t dtype)
{
	switch (dtype) {
	case 9:  /* f16 */
	case 10: /* bf16 */
	case 11: /* f32 */
	case 12: /* f64 */
		return (uint32_t)ckpt_proto_dtype_size(dtype);
	default:
		return 1;
	}
}

static int cmp_offset(const void *a, const void *b)
{
	const struct ckpt_tensor *x = *(const struct ckpt_tensor *const *)a;
	const struct ckpt_tensor *y = *(const struct ckpt_tensor *const *)b;

	return x->data_offset < y->data_offset ? -1 : x->data_offset > y->data_offset;
}

struct plan {
	struct zpiece *v;
	size_t n, cap;
	uint64_t piece_bytes;
};

static int plan_region(struct plan *pl, uint64_t off, uint64_t len, uint32_t width)
{
	while (len > 0) {
		uint64_t take = len < pl->piece_bytes ? len : pl->piece_bytes;
		if (pl->n == pl->cap) {
			size_t cap = pl->cap ? 2 * pl->cap : 64;
			struct zpiece *v = realloc(pl->v, cap * sizeof(*v));
			if (!v)
				return -ENOMEM;
			pl->v = v;
			pl->cap = cap;
		}
		pl->v[pl->n++] = (struct zpiece){ .raw_offset = off, .raw_len = (uint32_t)take,
						  .width = width };
		off += take;
		len -= take;
	}
	return 0;
}

int zshard_plan(const struct ckpt_table *table, uint64_t shard_bytes, uint64_t piece_bytes,
		int shuffle, struct zpiece **out, size_t *n)
{
	struct plan pl = { .piece_bytes = piece_bytes };
	const struct ckpt_tensor **t = NULL;
	uint64_t cur = 0;
	int r = 0;

	if (piece_bytes == 0 || piece_bytes > UINT32_MAX)
		return -EINVAL;
	if (table->count) {
		t = malloc(table->count * sizeof(*t));
		if (!t)
			return -ENOMEM;
		for (uint32_t i = 0; i < table->count; i++)
			t[i] = &table->tensors[i];
		qsort(t, table->count, sizeof(*t), cmp_offset);
	}
	for (uint32_t i = 0; i < table->count && r == 0; i++) {
		uint64_t a = t[i]->data_offset, b = a + t[i]->nbytes;
		if (a < cur || b < a || b > shard_bytes) {
			r = -EINVAL; /* overlapping or outside the shard */
			break;
		}
		if (a > cur)
			r = plan_region(&pl, cur, a - cur, 1);
		if (r == 0)
			r = plan_region(&pl, a, b - a, shuffle ? shuffle_width(t[i]->dtype) : 1);
		cur = b;
	}
	if (r == 0 && cur < shard_bytes)
		r = plan_region(&pl, cur, shard_bytes - cur, 1);
	free(t);
	if (r < 0) {
		free(pl.v);
		return r;
	}
	*out = pl.v;
	*n = pl.n;
	return 0;
}

size_t zshard_bound(size_t raw_len)
{
	return ZSTD_compressBound(raw_len);
}

int zshard_compress(struct zpiece *p, const void *raw, void *tmp, void *dst, size_t cap,
		    int level)
{
	const uint8_t *in = raw;
	size_t len = p->raw_len;

	if (p->width > 1) {
		size_t w = p->width, n = len / w;
		uint8_t *o = tmp;
		for (size_t b = 0; b < w; b++)
			for (size_t i = 0; i < n; i++)
				o[b * n + i] = in[i * w + b];
		memcpy(o + n * w, in + n * w, len - n * w);
		in = tmp;
	}
	size_t z = ZSTD_compress(dst, cap, in, len, level);
	if (ZSTD_isError(z))
		return -ENOSPC;
	p->z_len = (uint32_t)z;
	p->z_crc32c = ckpt_crc32c(0, dst, z);
	return 0;
}

int zshard_decompress(const struct zpiece *p, const void *frame, void *tmp, void *raw)
{
	size_t len = p->raw_len;

	if (ckpt_crc32c(0, frame, p->z_len) != p->z_crc32c)
		return -EBADMSG;
	void *into = p->width > 1 ? tmp : raw;
	size_t got = ZSTD_decompress(into, len, frame, p->z_len);
	if (ZSTD_isError(got) || got != len)
		return -EBADMSG;
	if (p->width > 1) {
		size_t w = p->width, n = len / w;
		const uint8_t *i8 = tmp;
		uint8_t *o = raw;
		for (size_t b = 0; b < w; b++)
			for (size_t i = 0; i < n; i++)
				o[i * w + b] = i8[b * n + i];
		memcpy(o + n * w, i8 + n * w, len - n * w);
	}
	return 0;
}

size_t zshard_footer_bytes(size_t n)
{
	return n * ZSHARD_ENTRY_BYTES + ZSHARD_TRAILER_BYTES;
}

void zshard_footer_encode(const struct zpiece *p, size_t n, uint64_t raw_bytes, uint8_t *out)
{
	uint8_t *e = out;

	for (size_t i = 0; i < n; i++, e += ZSHARD_ENTRY_BYTES) {
		put64(e, p[i].raw_offset);
		put64(e + 8, p[i].z_offset);
		put32(e + 16, p[i].raw_len);
		put32(e + 20, p[i].z_len);
		put32(e + 24, p[i].width);
		put32(e + 28, p[i].z_crc32c);
	}
	uint8_t *t = e;
	memcpy(t, ZSHARD_MAGIC, 8);
	put32(t + 8, ZSHARD_VERSION);
	put32(t + 12, (uint32_t)n);
	put64(t + 16, raw_bytes);
	put32(t + 24, ckpt_crc32c(0, out, n * ZSHARD_ENTRY_BYTES));
	put32(t + 28, ckpt_crc32c(0, t, 28));
}

int zshard_trailer_decode(const uint8_t *t, uint64_t object_bytes, size_t *n,
			  uint64_t *raw_bytes)
{
	if (object_bytes < ZSHARD_TRAILER_BYTES || memcmp(t, ZSHARD_MAGIC, 8) != 0)
		return -EBADMSG;
	if (get32(t + 28) != ckpt_crc32c(0, t, 28))
		return -EBADMSG;
	if (get32(t + 8) != ZSHARD_VERSION)
		return -EPROTONOSUPPORT;
	uint64_t count = get32(t + 12);
	if (count * ZSHARD_ENTRY_BYTES > object_bytes - ZSHARD_TRAILER_BYTES)
		return -EBADMSG;
	*n = (size_t)count;
	*raw_bytes = get64(t + 16);
	return 0;
}

int zshard_table_decode(const uint8_t *table, size_t n, uint64_t raw_bytes,
			uint64_t object_bytes, struct zpiece **out)
{
	const uint8_t *trailer = table + n * ZSHARD_ENTRY_BYTES;
	uint64_t frames_end = object_bytes - zshard_footer_bytes(n), raw = 0, z = 0;

	if (get32(trailer + 24) != ckpt_crc32c(0, table, n * ZSHARD_ENTRY_BYTES))
		return -EBADMSG;
	struct zpiece *p = calloc(n ? n : 1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const uint8_t *e = table + i * ZSHARD_ENTRY_BYTES;
		p[i].raw_offset = get64(e);
		p[i].z_offset = get64(e + 8);
		p[i].raw_len = get32(e + 16);
		p[i].z_len = get32(e + 20);
		p[i].width = get32(e + 24);
		p[i].z_crc32c = get32(e + 28);
		/* Pieces tile the raw shard and the frames tile the data, in
		 * order: anything else is a damaged or forged table. */
		if (p[i].raw_offset != raw || p[i].z_offset != z || p[i].raw_len == 0 ||
		    p[i].width == 0 || p[i].width > 8 || p[i].z_len > frames_end - z) {
			free(p);
			return -EBADMSG;
		}
		raw += p[i].raw_len;
		z += p[i].z_len;
	}
	if (raw != raw_bytes || z != frames_end) {
		free(p);
		return -EBADMSG;
	}
	*out = p;
	return 0;
}
