/* SPDX-License-Identifier: MIT */
/*
 * Rank index files (FORMAT.md, "Rank index"): everything a reader needs to
 * verify a shard without the manifest, sealed by a trailing CRC-32C.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char index_magic[8] = { 'C', 'K', 'P', 'T', 'I', 'D', 'X', '1' };
#define INDEX_VERSION 1u
/* Fixed part: magic .. table_bytes, then u16 job length. */
#define INDEX_FIXED_BYTES 82u

uint64_t ckpt_chunk_count(const struct ckpt_table *t, uint64_t blob_bytes,
			  uint32_t chunk_bytes)
{
	uint64_t n = 0;

	if (chunk_bytes == 0)
		return 0;
	for (uint32_t i = 0; t && i < t->count; i++)
		n += t->tensors[i].nbytes / chunk_bytes +
		     (t->tensors[i].nbytes % chunk_bytes != 0);
	n += blob_bytes / chunk_bytes + (blob_bytes % chunk_bytes != 0);
	return n;
}

/* Field checks shared by the encoder and the decoder; table and layout
 * are checked by the caller. */
static bool index_fields_valid(const struct ckpt_index *idx)
{
	return ckpt_job_name_check(idx->job, strnlen(idx->job, sizeof(idx->job))) == 0 &&
	       idx->world_size >= 1 && idx->rank < idx->world_size &&
	       idx->step <= CKPT_STEP_MAX &&
	       idx->chunk_bytes >= CKPT_CHUNK_MIN && idx->chunk_bytes <= CKPT_CHUNK_MAX &&
	       idx->shard_bytes % CKPT_ALIGN == 0 &&
	       (idx->blob_bytes > 0 || idx->blob_crc32c == 0);
}

ssize_t ckpt_index_encode(const struct ckpt_index *idx, void **out)
{
	size_t job_len, table_bytes, total;
	uint8_t *buf = NULL;
	struct wr w;
	ssize_t n;

	if (!idx || !out)
		return -EINVAL;
	*out = NULL;
	if (!index_fields_valid(idx))
		return -EINVAL;
	if (idx->chunk_count != ckpt_chunk_count(&idx->table, idx->blob_bytes, idx->chunk_bytes) ||
	    (idx->chunk_count && !idx->chunk_crc))
		return -EINVAL;
	if (ckpt_table_check_layout(&idx->table, idx->shard_bytes, idx->blob_offset,
				    idx->blob_bytes, NULL, 0) < 0)
		return -EINVAL;
	job_len = strlen(idx->job);
	table_bytes = ckpt_table_encoded_size(idx->table.tensors, idx->table.count);
	total = INDEX_FIXED_BYTES + PROTO_PAD8(job_len + 2) - 2 + table_bytes +
		(size_t)idx->chunk_count * 4 + 4;
	buf = malloc(total);
	if (!buf)
		return -ENOMEM;

	wr_init(&w, buf, total);
	wr_bytes(&w, index_magic, sizeof(index_magic));
	wr_u32(&w, INDEX_VERSION);
	wr_u32(&w, idx->rank);
	wr_u32(&w, idx->world_size);
	wr_u32(&w, idx->chunk_bytes);
	wr_u64(&w, idx->step);
	wr_u64(&w, idx->shard_bytes);
	wr_u64(&w, idx->blob_offset);
	wr_u64(&w, idx->blob_bytes);
	wr_u32(&w, idx->blob_crc32c);
	wr_u32(&w, idx->chunk_count);
	wr_u64(&w, (uint64_t)idx->created_unix_ns);
	wr_u64(&w, table_bytes);
	wr_u16(&w, (uint16_t)job_len);
	wr_bytes(&w, idx->job, job_len);
	/* The fixed part ends 2 bytes past an 8-byte boundary: pad job so the
	 * table starts 8-aligned. */
	wr_zeros(&w, PROTO_PAD8(job_len + 2) - (job_len + 2));
	if (!w.ok) {
		free(buf);
		return -EINVAL;
	}
	n = ckpt_table_encode(idx->table.tensors, idx->table.count, buf + w.pos, total - w.pos);
	if (n < 0 || (size_t)n != table_bytes) {
		free(buf);
		return n < 0 ? n : -EINVAL;
	}
	w.pos += (size_t)n;
	for (uint32_t i = 0; i < idx->chunk_count; i++)
		wr_u32(&w, idx->chunk_crc[i]);
	wr_u32(&w, ckpt_crc32c(0, buf, w.pos));
	if (!w.ok || w.pos != total) {
		free(buf);
		return -EINVAL;
	}
	*out = buf;
	return (ssize_t)total;
}

int ckpt_index_decode(const void *buf, size_t len, struct ckpt_index *out)
{
	const uint8_t *p = buf;
	struct ckpt_index idx;
	uint64_t table_bytes;
	size_t job_len;
	const uint8_t *q;
	struct rd r;
	int ret;

	if (!buf || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	memset(&idx, 0, sizeof(idx));
	if (len < INDEX_FIXED_BYTES + 4)
		return -EBADMSG;
	if (memcmp(p, index_magic, sizeof(index_magic)) != 0)
		return -EBADMSG;
	if (get_le32(p + 8) != INDEX_VERSION)
		return -EPROTONOSUPPORT;
	if (ckpt_crc32c(0, p, len - 4) != get_le32(p + len - 4))
		return -EBADMSG;

	rd_init(&r, p + 12, len - 12 - 4);
	idx.rank = rd_u32(&r);
	idx.world_size = rd_u32(&r);
	idx.chunk_bytes = rd_u32(&r);
	idx.step = rd_u64(&r);
	idx.shard_bytes = rd_u64(&r);
	idx.blob_offset = rd_u64(&r);
	idx.blob_bytes = rd_u64(&r);
	idx.blob_crc32c = rd_u32(&r);
	idx.chunk_count = rd_u32(&r);
	idx.created_unix_ns = (int64_t)rd_u64(&r);
	table_bytes = rd_u64(&r);
	job_len = rd_u16(&r);
	if (!r.ok || job_len > CKPT_JOB_NAME_MAX)
		return -EBADMSG;
	q = rd_take(&r, job_len);
	if (!q || memchr(q, '\0', job_len))
		return -EBADMSG;
	memcpy(idx.job, q, job_len);
	q = rd_take(&r, PROTO_PAD8(job_len + 2) - (job_len + 2));
	if (!r.ok)
		return -EBADMSG;
	for (size_t i = 0; i < PROTO_PAD8(job_len + 2) - (job_len + 2); i++)
		if (q[i])
			return -EBADMSG;
	if (!index_fields_valid(&idx))
		return -EBADMSG;
	/* What follows must be exactly the table and the chunk CRCs. */
	if (table_bytes > r.len - r.pos ||
	    (r.len - r.pos - table_bytes) != (uint64_t)idx.chunk_count * 4)
		return -EBADMSG;

	ret = ckpt_table_decode(r.p + r.pos, (size_t)table_bytes, &idx.table);
	if (ret < 0)
		return ret;
	r.pos += (size_t)table_bytes;
	ret = -EBADMSG;
	if (ckpt_table_check_layout(&idx.table, idx.shard_bytes, idx.blob_offset,
				    idx.blob_bytes, NULL, 0) < 0)
		goto fail;
	if (idx.chunk_count != ckpt_chunk_count(&idx.table, idx.blob_bytes, idx.chunk_bytes))
		goto fail;
	if (idx.chunk_count) {
		idx.chunk_crc = malloc((size_t)idx.chunk_count * sizeof(uint32_t));
		if (!idx.chunk_crc) {
			ret = -ENOMEM;
			goto fail;
		}
		for (uint32_t i = 0; i < idx.chunk_count; i++)
			idx.chunk_crc[i] = rd_u32(&r);
	}
	if (!r.ok || r.pos != r.len)
		goto fail;
	*out = idx;
	return 0;
fail:
	ckpt_index_free(&idx);
	return ret;
}

void ckpt_index_free(struct ckpt_index *idx)
{
	if (!idx)
		return;
	ckpt_table_free(&idx->table);
	free(idx->chunk_crc);
	idx->chunk_crc = NULL;
	idx->chunk_count = 0;
}
