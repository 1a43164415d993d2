/* SPDX-License-Identifier: MIT */
/* A small, valid rank index and manifest for the unit tests. */
#ifndef CKPT_TEST_SAMPLE_H
#define CKPT_TEST_SAMPLE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

/* Tensors: a 300000-byte f32 slice, a 4-byte scalar, an empty tensor;
 * the blob after them. Offsets 4096-aligned. */
static inline void sample_tensors(struct ckpt_tensor *ts, char names[3][32], uint32_t rank)
{
	memset(ts, 0, 3 * sizeof(*ts));
	for (int i = 0; i < 3; i++) {
		snprintf(names[i], 32, "model.layer%d.w", i);
		ts[i].name = names[i];
		ts[i].crc32c = 0x1000u * (uint32_t)i + rank;
	}
	ts[0].dtype = CKPT_DTYPE_F32;
	ts[0].ndim = 2;
	ts[0].global_shape[0] = 1000;
	ts[0].global_shape[1] = 75;
	ts[0].shape[0] = 1000;
	ts[0].shape[1] = 75;
	ts[0].offset[0] = 0;
	ts[0].nbytes = 300000;
	ts[0].data_offset = 0;
	ts[1].dtype = CKPT_DTYPE_F32;
	ts[1].nbytes = 4;
	ts[1].data_offset = 303104; /* 74 * 4096 */
	ts[2].dtype = CKPT_DTYPE_BF16;
	ts[2].ndim = 3;
	ts[2].global_shape[0] = 4;
	ts[2].global_shape[1] = 0;
	ts[2].global_shape[2] = 4;
	ts[2].shape[0] = 4;
	ts[2].shape[2] = 4;
	ts[2].data_offset = 307200;
}

/* Fills idx (owning its table and chunk CRCs); 0 or -errno. */
static inline int sample_index(struct ckpt_index *idx, uint32_t rank)
{
	struct ckpt_tensor ts[3];
	char names[3][32];
	int ret;

	memset(idx, 0, sizeof(*idx));
	strcpy(idx->job, "llama-7b");
	idx->step = 1200;
	idx->rank = rank;
	idx->world_size = 4;
	idx->chunk_bytes = 64 << 10;
	idx->blob_offset = 307200;
	idx->blob_bytes = 100;
	idx->blob_crc32c = 0xabcdef01;
	idx->shard_bytes = 311296;
	idx->created_unix_ns = 1700000000123456789ll;
	sample_tensors(ts, names, rank);
	ret = ckpt_table_copy(&idx->table, &(struct ckpt_table){ .count = 3, .tensors = ts });
	if (ret < 0)
		return ret;
	idx->chunk_count = (uint32_t)ckpt_chunk_count(&idx->table, idx->blob_bytes,
						       idx->chunk_bytes);
	idx->chunk_crc = calloc(idx->chunk_count, sizeof(uint32_t));
	if (!idx->chunk_crc)
		return -ENOMEM;
	for (uint32_t i = 0; i < idx->chunk_count; i++)
		idx->chunk_crc[i] = 0x9e3779b9u * (i + 1);
	return 0;
}

/* Fills m with world_size ranks (caller frees with ckpt_manifest_free). */
static inline int sample_manifest(struct ckpt_manifest *m, uint32_t world_size)
{
	memset(m, 0, sizeof(*m));
	strcpy(m->job, "llama-7b");
	m->step = 1200;
	m->world_size = world_size;
	m->chunk_bytes = 4 << 20;
	m->created_unix_ns = 1700000000123456789ll;
	m->ranks = calloc(world_size, sizeof(*m->ranks));
	if (!m->ranks)
		return -ENOMEM;
	for (uint32_t r = 0; r < world_size; r++) {
		struct ckpt_manifest_rank *mr = &m->ranks[r];
		struct ckpt_tensor ts[3];
		char names[3][32];
		int ret;

		mr->rank = r;
		mr->shard_bytes = 311296;
		mr->blob_bytes = 100;
		mr->blob_crc32c = 0xabcdef01 + r;
		mr->index_bytes = 1234;
		for (int i = 0; i < 32; i++)
			mr->index_sha256[i] = (uint8_t)(i * 7 + r);
		sample_tensors(ts, names, r);
		ret = ckpt_table_copy(&mr->table, &(struct ckpt_table){ .count = 3, .tensors = ts });
		if (ret < 0)
			return ret;
	}
	return 0;
}

#endif
