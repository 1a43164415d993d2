/* SPDX-License-Identifier: MIT */
/*
 * proto internals shared by the encoders and decoders in this directory;
 * not part of any interface outside proto/.
 */
#ifndef CKPT_PROTO_INTERNAL_H
#define CKPT_PROTO_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "proto.h"

/* Little-endian stores and loads that do not care about alignment. */
static inline void put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t get_le32(const uint8_t *p)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static inline uint64_t get_le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* Bounds-checked reader over an untrusted buffer: once a read fails, every
 * later read fails too, so callers check `ok` once at the end. */
struct rd {
	const uint8_t *p;
	size_t len, pos;
	bool ok;
};

static inline void rd_init(struct rd *r, const void *buf, size_t len)
{
	r->p = buf;
	r->len = len;
	r->pos = 0;
	r->ok = true;
}

static inline const uint8_t *rd_take(struct rd *r, size_t n)
{
	if (!r->ok || r->len - r->pos < n) {
		r->ok = false;
		return NULL;
	}
	const uint8_t *q = r->p + r->pos;
	r->pos += n;
	return q;
}

static inline uint8_t rd_u8(struct rd *r)
{
	const uint8_t *q = rd_take(r, 1);
	return q ? q[0] : 0;
}

static inline uint16_t rd_u16(struct rd *r)
{
	const uint8_t *q = rd_take(r, 2);
	return q ? get_le16(q) : 0;
}

static inline uint32_t rd_u32(struct rd *r)
{
	const uint8_t *q = rd_take(r, 4);
	return q ? get_le32(q) : 0;
}

static inline uint64_t rd_u64(struct rd *r)
{
	const uint8_t *q = rd_take(r, 8);
	return q ? get_le64(q) : 0;
}

/* Writer over a caller buffer; `ok` turns false on overflow. */
struct wr {
	uint8_t *p;
	size_t cap, pos;
	bool ok;
};

static inline void wr_init(struct wr *w, void *buf, size_t cap)
{
	w->p = buf;
	w->cap = cap;
	w->pos = 0;
	w->ok = true;
}

static inline uint8_t *wr_take(struct wr *w, size_t n)
{
	if (!w->ok || w->cap - w->pos < n) {
		w->ok = false;
		return NULL;
	}
	uint8_t *q = w->p + w->pos;
	w->pos += n;
	return q;
}

static inline void wr_u8(struct wr *w, uint8_t v)
{
	uint8_t *q = wr_take(w, 1);
	if (q)
		q[0] = v;
}

static inline void wr_u16(struct wr *w, uint16_t v)
{
	uint8_t *q = wr_take(w, 2);
	if (q)
		put_le16(q, v);
}

static inline void wr_u32(struct wr *w, uint32_t v)
{
	uint8_t *q = wr_take(w, 4);
	if (q)
		put_le32(q, v);
}

static inline void wr_u64(struct wr *w, uint64_t v)
{
	uint8_t *q = wr_take(w, 8);
	if (q)
		put_le64(q, v);
}

static inline void wr_bytes(struct wr *w, const void *src, size_t n)
{
	uint8_t *q = wr_take(w, n);
	if (q && n)
		memcpy(q, src, n);
}

static inline void wr_zeros(struct wr *w, size_t n)
{
	uint8_t *q = wr_take(w, n);
	if (q && n)
		memset(q, 0, n);
}

#define PROTO_PAD8(n) (((n) + 7u) & ~(size_t)7u)

/* Validate one tensor entry on its own (name, dtype, ndim, slice inside the
 * global shape, nbytes, alignment). 0 or -EBADMSG; err gets the reason. */
int proto_tensor_validate(const struct ckpt_tensor *t, size_t name_len,
			  char *err, size_t errlen);

/* Copy tensors into a fresh table with its own name pool. 0 or -ENOMEM. */
int proto_table_build(struct ckpt_table *dst, const struct ckpt_tensor *src,
		      uint32_t count);

/* Dtype from its name ("f32"), or 0. */
uint32_t proto_dtype_from_name(const char *name);

#endif
