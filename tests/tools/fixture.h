/* SPDX-License-Identifier: MIT */
/*
 * Test fixture: builds checkpoint steps in a checkpoint root the way ckptd
 * lays them out (shards of pseudo-random data, indexes, MANIFEST.json,
 * LATEST), with the proto encoders and the store functions.
 *
 * Each rank holds, in table order:
 *   "layer0.weight" f32 global [world*100, 1000], rows [r*100, r*100+100)
 *   "layer0.bias"   f32 [1000], whole on every rank
 *   "step"          i64 scalar
 * then a 1000-byte blob. With the 64 KiB chunk that is 7 + 1 + 1 + 1
 * chunks per rank.
 */
#ifndef CKPT_TEST_FIXTURE_H
#define CKPT_TEST_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>

#define FIXTURE_CHUNK_BYTES (64u << 10)
#define FIXTURE_ROWS 100u
#define FIXTURE_COLS 1000u

/*
 * Write step `step` of `job` under the directory `root` (created if
 * missing) for world_size ranks. With commit, also write MANIFEST.json and
 * move LATEST to this step if it is newer. 0 or -errno.
 */
int fixture_make_step(const char *root, const char *job, uint64_t step,
		      uint32_t world_size, bool commit);

/* Shard byte offset of "layer0.weight" (0) and of the blob, per rank. */
uint64_t fixture_blob_offset(void);

/* Flip one byte of a file at offset (xor 0xff). 0 or -errno. */
int fixture_flip_byte(const char *path, uint64_t offset);

/* Create a fresh temporary directory; path in buf. 0 or -errno. */
int fixture_tmpdir(char *buf, size_t cap);

/* rm -r of a test directory (no symlinks followed). */
void fixture_rmtree(const char *path);

#endif
