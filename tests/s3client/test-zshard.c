/* SPDX-License-Identifier: MIT */
/*
 * Compressed shard objects (proto/zshard.c, FORMAT.md "Compressed shard
 * objects"): the piece plan follows tensors and shuffles floats only; a
 * shard goes through compression, footer and back byte for byte; float
 * data shrinks more shuffled than not; damaged or forged trailers, tables
 * and frames are refused.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "zshard.h"

#define SHARD (3u << 20)

/* Tensors: an f32 of 1.5 MiB at 0, a u8 of 10000 bytes at 2 MiB (after a
 * gap), a bf16 of 600 KiB at 2 MiB + 12 KiB; the rest is padding/blob. */
static struct ckpt_tensor tensors[3] = {
	{ .dtype = 11, .data_offset = 0, .nbytes = 1536u << 10 },
	{ .dtype = 1, .data_offset = 2u << 20, .nbytes = 10000 },
	{ .dtype = 10, .data_offset = (2u << 20) + (12u << 10), .nbytes = 600u << 10 },
};

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Something like optimizer state: small normal-ish floats. */
static void fill(uint8_t *buf)
{
	memset(buf, 0, SHARD);
	float *f = (float *)buf;
	for (size_t i = 0; i < (1536u << 10) / 4; i++)
		f[i] = (float)(((double)(next() % 20001) - 10000.0) * 1e-6);
	for (size_t i = 0; i < 10000; i++)
		buf[(2u << 20) + i] = (uint8_t)next();
	uint16_t *h = (uint16_t *)(buf + (2u << 20) + (12u << 10));
	for (size_t i = 0; i < (600u << 10) / 2; i++) {
		float v = (float)(((double)(next() % 2001) - 1000.0) * 1e-4);
		uint32_t bits;
		memcpy(&bits, &v, 4);
		h[i] = (uint16_t)(bits >> 16);
	}
	memcpy(buf + SHARD - 100, "blob", 4);
}

/* Compress the whole shard as the uploader does; returns the object. */
static uint8_t *compress_all(const uint8_t *raw, int shuffle, size_t *objlen, struct zpiece **pp,
			     size_t *np)
{
	struct ckpt_table table = { .count = 3, .tensors = tensors };
	struct zpiece *p;
	size_t n, cap = 0;

	CHECK_EQ(zshard_plan(&table, SHARD, 256u << 10, shuffle, &p, &n), 0);
	for (size_t i = 0; i < n; i++)
		cap += zshard_bound(p[i].raw_len);
	cap += zshard_footer_bytes(n);
	uint8_t *obj = malloc(cap), *tmp = malloc(256u << 10);
	size_t z = 0;
	for (size_t i = 0; i < n; i++) {
		p[i].z_offset = z;
		CHECK_EQ(zshard_compress(&p[i], raw + p[i].raw_offset, tmp, obj + z, cap - z, 1), 0);
		z += p[i].z_len;
	}
	zshard_footer_encode(p, n, SHARD, obj + z);
	*objlen = z + zshard_footer_bytes(n);
	free(tmp);
	*pp = p;
	*np = n;
	return obj;
}

/* Decode an object back into a shard, as the readers do; 0 or -errno. */
static int decompress_all(const uint8_t *obj, size_t len, uint8_t *out)
{
	size_t n;
	uint64_t raw;
	struct zpiece *p;
	int r = zshard_trailer_decode(obj + len - ZSHARD_TRAILER_BYTES, len, &n, &raw);

	if (r < 0)
		return r;
	r = zshard_table_decode(obj + len - zshard_footer_bytes(n), n, raw, len, &p);
	if (r < 0)
		return r;
	uint8_t *tmp = malloc(256u << 10);
	for (size_t i = 0; i < n && r == 0; i++)
		r = zshard_decompress(&p[i], obj + p[i].z_offset, tmp, out + p[i].raw_offset);
	free(tmp);
	free(p);
	return r;
}

static void plan(void)
{
	struct ckpt_table table = { .count = 3, .tensors = tensors };
	struct zpiece *p;
	size_t n;

	CHECK_EQ(zshard_plan(&table, SHARD, 256u << 10, 1, &p, &n), 0);
	/* f32: 6 pieces of 256 KiB (w 4); gap 512 KiB: 2 (w 1); u8: 1 (w 1);
	 * gap to the bf16: 1; bf16 600 KiB: 3 (w 2); tail: the rest. */
	uint64_t at = 0;
	for (size_t i = 0; i < n; i++) {
		CHECK_EQ(p[i].raw_offset, at);
		CHECK(p[i].raw_len <= (256u << 10));
		at += p[i].raw_len;
	}
	CHECK_EQ(at, SHARD);
	CHECK_EQ(p[0].width, 4);
	CHECK_EQ(p[5].width, 4);
	CHECK_EQ(p[6].width, 1);
	for (size_t i = 0; i < n; i++)
		if (p[i].raw_offset == (2u << 20) + (12u << 10))
			CHECK_EQ(p[i].width, 2);
	free(p);
	CHECK_EQ(zshard_plan(&table, SHARD, 256u << 10, 0, &p, &n), 0);
	for (size_t i = 0; i < n; i++)
		CHECK_EQ(p[i].width, 1);
	free(p);
	/* Overlapping tensors, or one past the end: refused. */
	struct ckpt_tensor bad[2] = { { .dtype = 11, .data_offset = 0, .nbytes = 8192 },
				      { .dtype = 11, .data_offset = 4096, .nbytes = 8192 } };
	struct ckpt_table tb = { .count = 2, .tensors = bad };
	CHECK_EQ(zshard_plan(&tb, SHARD, 4096, 1, &p, &n), -EINVAL);
	tb.count = 1;
	CHECK_EQ(zshard_plan(&tb, 4096, 4096, 1, &p, &n), -EINVAL);
}

static void roundtrip_and_damage(void)
{
	uint8_t *raw = malloc(SHARD), *back = malloc(SHARD);
	struct zpiece *p, *p0;
	size_t n, n0, len, len0;

	fill(raw);
	uint8_t *obj = compress_all(raw, 1, &len, &p, &n);
	uint8_t *plain = compress_all(raw, 0, &len0, &p0, &n0);
	printf("3 MiB shard: %zu bytes shuffled, %zu not shuffled\n", len, len0);
	CHECK(len < len0);          /* shuffling helps float data */
	CHECK(len < SHARD);
	CHECK_EQ(decompress_all(obj, len, back), 0);
	CHECK(memcmp(raw, back, SHARD) == 0);
	memset(back, 0, SHARD);
	CHECK_EQ(decompress_all(plain, len0, back), 0);
	CHECK(memcmp(raw, back, SHARD) == 0);

	/* One flipped bit anywhere is refused: in a frame, the table, the
	 * trailer. */
	size_t where[] = { 10, p[3].z_offset + 5, len - zshard_footer_bytes(n) + 9, len - 20, len - 1 };
	for (size_t i = 0; i < sizeof(where) / sizeof(where[0]); i++) {
		obj[where[i]] ^= 0x10;
		CHECK_EQ(decompress_all(obj, len, back), -EBADMSG);
		obj[where[i]] ^= 0x10;
	}
	CHECK_EQ(decompress_all(obj, len, back), 0);
	/* Truncated, or not a compressed shard at all. */
	CHECK_EQ(decompress_all(obj, len - 1, back), -EBADMSG);
	CHECK_EQ(decompress_all(raw, 4096, back), -EBADMSG);

	/* A forged table with valid CRCs: pieces that do not tile. */
	size_t tb = len - zshard_footer_bytes(n);
	p[1].raw_offset += 1;
	zshard_footer_encode(p, n, SHARD, obj + tb);
	CHECK_EQ(decompress_all(obj, len, back), -EBADMSG);
	p[1].raw_offset -= 1;
	p[2].z_len += 1;
	zshard_footer_encode(p, n, SHARD, obj + tb);
	CHECK_EQ(decompress_all(obj, len, back), -EBADMSG);
	p[2].z_len -= 1;
	p[0].width = 9;
	zshard_footer_encode(p, n, SHARD, obj + tb);
	CHECK_EQ(decompress_all(obj, len, back), -EBADMSG);
	p[0].width = 4;
	zshard_footer_encode(p, n, SHARD, obj + tb);
	CHECK_EQ(decompress_all(obj, len, back), 0);
	/* A newer version is named as such. */
	obj[len - ZSHARD_TRAILER_BYTES + 8] = 2;
	uint8_t *t = obj + len - ZSHARD_TRAILER_BYTES;
	uint32_t c = ckpt_crc32c(0, t, 28);
	memcpy(t + 28, &c, 4); /* little-endian host */
	size_t cnt;
	uint64_t rb;
	CHECK_EQ(zshard_trailer_decode(t, len, &cnt, &rb), -EPROTONOSUPPORT);

	free(obj);
	free(plain);
	free(p);
	free(p0);
	free(raw);
	free(back);
}

int main(void)
{
	plan();
	roundtrip_and_damage();
	return check_result("zshard");
}
