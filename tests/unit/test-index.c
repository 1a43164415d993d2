/* SPDX-License-Identifier: MIT */
/* Rank index: round trip; any flipped byte, truncation or extension is refused. */
#include <errno.h>

#include "check.h"
#include "sample.h"

int main(void)
{
	struct ckpt_index idx, out;
	uint8_t *buf = NULL;
	ssize_t n;

	CHECK_EQ(sample_index(&idx, 2), 0);
	/* 300000 bytes -> 5 chunks, 4 -> 1, 0 -> 0, blob 100 -> 1 */
	CHECK_EQ(idx.chunk_count, 7);
	n = ckpt_index_encode(&idx, (void **)&buf);
	CHECK(n > 0);
	if (n <= 0)
		return 1;
	CHECK_EQ(memcmp(buf, "CKPTIDX1", 8), 0);
	CHECK_EQ(ckpt_crc32c(0, buf, (size_t)n - 4),
		 buf[n - 4] | buf[n - 3] << 8 | buf[n - 2] << 16 | (uint32_t)buf[n - 1] << 24);
	CHECK_EQ(ckpt_index_decode(buf, (size_t)n, &out), 0);
	CHECK(strcmp(out.job, idx.job) == 0);
	CHECK_EQ(out.step, idx.step);
	CHECK_EQ(out.rank, 2);
	CHECK_EQ(out.world_size, 4);
	CHECK_EQ(out.chunk_bytes, idx.chunk_bytes);
	CHECK_EQ(out.shard_bytes, idx.shard_bytes);
	CHECK_EQ(out.blob_offset, idx.blob_offset);
	CHECK_EQ(out.blob_bytes, idx.blob_bytes);
	CHECK_EQ(out.blob_crc32c, idx.blob_crc32c);
	CHECK_EQ(out.created_unix_ns, idx.created_unix_ns);
	CHECK_EQ(out.table.count, 3);
	CHECK(strcmp(out.table.tensors[2].name, "model.layer2.w") == 0);
	CHECK_EQ(out.table.tensors[0].crc32c, idx.table.tensors[0].crc32c);
	CHECK_EQ(out.chunk_count, idx.chunk_count);
	CHECK(memcmp(out.chunk_crc, idx.chunk_crc, 4 * idx.chunk_count) == 0);
	/* Re-encoding gives the same bytes. */
	{
		uint8_t *again = NULL;
		CHECK_EQ(ckpt_index_encode(&out, (void **)&again), n);
		CHECK(again && memcmp(again, buf, (size_t)n) == 0);
		free(again);
	}
	ckpt_index_free(&out);

	/* Any single flipped bit anywhere is caught. */
	for (ssize_t i = 0; i < n; i++) {
		for (int bit = 0; bit < 8; bit += 3) {
			buf[i] ^= (uint8_t)(1u << bit);
			int ret = ckpt_index_decode(buf, (size_t)n, &out);
			if (ret == 0) {
				fprintf(stderr, "flip at %zd bit %d accepted\n", i, bit);
				check_failures++;
				ckpt_index_free(&out);
			}
			buf[i] ^= (uint8_t)(1u << bit);
		}
	}
	for (ssize_t k = 0; k < n; k++)
		if (ckpt_index_decode(buf, (size_t)k, &out) == 0) {
			fprintf(stderr, "prefix %zd accepted\n", k);
			check_failures++;
			ckpt_index_free(&out);
		}
	buf[8] = 2; /* version */
	CHECK_EQ(ckpt_index_decode(buf, (size_t)n, &out), -EPROTONOSUPPORT);
	free(buf);
	buf = NULL;

	/* The encoder refuses what the decoder would. */
	idx.chunk_count--;
	CHECK_EQ(ckpt_index_encode(&idx, (void **)&buf), -EINVAL);
	idx.chunk_count++;
	idx.rank = 4;
	CHECK_EQ(ckpt_index_encode(&idx, (void **)&buf), -EINVAL);
	idx.rank = 2;
	idx.shard_bytes = 307200; /* blob sticks out */
	CHECK_EQ(ckpt_index_encode(&idx, (void **)&buf), -EINVAL);
	idx.shard_bytes = 311296;
	idx.blob_offset = 0; /* blob overlaps layer0 */
	CHECK_EQ(ckpt_index_encode(&idx, (void **)&buf), -EINVAL);
	idx.blob_offset = 307200;
	idx.chunk_bytes = 1000;
	CHECK_EQ(ckpt_index_encode(&idx, (void **)&buf), -EINVAL);
	idx.chunk_bytes = 64 << 10;
	strcpy(idx.job, ".x");
	CHECK_EQ(ckpt_index_encode(&idx, (void **)&buf), -EINVAL);
	strcpy(idx.job, "llama-7b");
	CHECK(ckpt_index_encode(&idx, (void **)&buf) > 0);
	free(buf);

	/* No tensors, no blob. */
	ckpt_table_free(&idx.table);
	idx.blob_bytes = 0;
	idx.blob_crc32c = 0;
	idx.chunk_count = 0;
	n = ckpt_index_encode(&idx, (void **)&buf);
	CHECK(n > 0);
	CHECK_EQ(ckpt_index_decode(buf, (size_t)n, &out), 0);
	CHECK_EQ(out.table.count, 0);
	CHECK_EQ(out.chunk_count, 0);
	ckpt_index_free(&out);
	free(buf);
	ckpt_index_free(&idx);
	ckpt_index_free(NULL);

	CHECK_EQ(ckpt_chunk_count(NULL, 0, 65536), 0);
	CHECK_EQ(ckpt_chunk_count(NULL, 65536, 65536), 1);
	CHECK_EQ(ckpt_chunk_count(NULL, 65537, 65536), 2);
	CHECK_EQ(ckpt_chunk_count(NULL, 5, 0), 0);
	return check_result("test-index");
}
