/* SPDX-License-Identifier: MIT */
/*
 * zshard: the compressed form of a shard on S3 (proto/FORMAT.md,
 * "Compressed shard objects"): the shard cut into pieces along tensor
 * boundaries, each piece byte-shuffled by its element size (floats) and
 * compressed into an independent zstd frame, the frames back to back, then
 * a table of the pieces and a trailer. Independent frames keep ranged reads
 * possible; shuffling puts the bytes of equal significance together, which
 * is what makes float data compressible at all.
 *
 * Pure code: no I/O. Functions return 0 or -errno.
 */
#ifndef CKPT_ZSHARD_H
#define CKPT_ZSHARD_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

#define ZSHARD_SUFFIX ".zst"
#define ZSHARD_MAGIC "CKPTZSH1"
#define ZSHARD_VERSION 1u
#define ZSHARD_TRAILER_BYTES 32u
#define ZSHARD_ENTRY_BYTES 32u
/* The manifest's s3_encoding when shards are stored this way. */
#define ZSHARD_ENCODING "zstd"

struct zpiece {
	uint64_t raw_offset;
	uint64_t z_offset;      /* from the start of the object */
	uint32_t raw_len;
	uint32_t z_len;
	uint32_t width;         /* shuffle element size; 1: not shuffled */
	uint32_t z_crc32c;      /* of the compressed frame */
};

/*
 * The pieces of a shard of shard_bytes (raw offsets, lengths and widths;
 * z fields zero), from its tensor table: tensors become pieces of at most
 * piece_bytes shuffled by their element size when they are floats of 2
 * bytes or more (shuffle != 0); gaps, the blob and other types are not
 * shuffled. *out: free().
 */
int zshard_plan(const struct ckpt_table *table, uint64_t shard_bytes, uint64_t piece_bytes,
		int shuffle, struct zpiece **out, size_t *n);

/* The most a piece of raw_len bytes can take compressed. */
size_t zshard_bound(size_t raw_len);

/* Compress one piece into dst (cap >= zshard_bound): sets p->z_len and
 * p->z_crc32c. tmp: raw_len bytes of scratch for the shuffle. */
int zshard_compress(struct zpiece *p, const void *raw, void *tmp, void *dst, size_t cap,
		    int level);

/* Decompress one piece's frame (z_len bytes) into raw (raw_len bytes),
 * checking its CRC and size; tmp: raw_len bytes of scratch. */
int zshard_decompress(const struct zpiece *p, const void *frame, void *tmp, void *raw);

/* The table and trailer that end an object (n * ZSHARD_ENTRY_BYTES +
 * ZSHARD_TRAILER_BYTES bytes into out). */
size_t zshard_footer_bytes(size_t n);
void zshard_footer_encode(const struct zpiece *p, size_t n, uint64_t raw_bytes, uint8_t *out);

/* Read a trailer (the object's last ZSHARD_TRAILER_BYTES): piece count and
 * raw size; then the table (the zshard_footer_bytes(n) - trailer bytes
 * before it) into pieces (*out: free()). Both check magic, version, CRCs
 * and that pieces tile [0, raw_bytes) and the frames [0, table). */
int zshard_trailer_decode(const uint8_t *trailer, uint64_t object_bytes, size_t *n,
			  uint64_t *raw_bytes);
int zshard_table_decode(const uint8_t *table, size_t n, uint64_t raw_bytes,
			uint64_t object_bytes, struct zpiece **out);

#endif
