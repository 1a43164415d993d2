/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"
#include "store.h"

#define ALIGN_UP(x) (((x) + CKPT_ALIGN - 1) & ~(uint64_t)(CKPT_ALIGN - 1))
#define NTENSORS 3
#define BLOB_BYTES 1000u

static uint64_t rng_next(uint64_t *s)
{
	/* xorshift64*: deterministic data, so a failure can be replayed. */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

static void fill_tensors(struct ckpt_tensor *t, uint32_t rank, uint32_t world)
{
	uint64_t off = 0;

	memset(t, 0, NTENSORS * sizeof(*t));
	t[0].name = "layer0.weight";
	t[0].dtype = CKPT_DTYPE_F32;
	t[0].ndim = 2;
	t[0].global_shape[0] = (uint64_t)world * FIXTURE_ROWS;
	t[0].global_shape[1] = FIXTURE_COLS;
	t[0].offset[0] = (uint64_t)rank * FIXTURE_ROWS;
	t[0].shape[0] = FIXTURE_ROWS;
	t[0].shape[1] = FIXTURE_COLS;
	t[0].nbytes = FIXTURE_ROWS * FIXTURE_COLS * 4;

	t[1].name = "layer0.bias";
	t[1].dtype = CKPT_DTYPE_F32;
	t[1].ndim = 1;
	t[1].global_shape[0] = FIXTURE_COLS;
	t[1].shape[0] = FIXTURE_COLS;
	t[1].nbytes = FIXTURE_COLS * 4;

	t[2].name = "step";
	t[2].dtype = CKPT_DTYPE_I64;
	t[2].ndim = 0;
	t[2].nbytes = 8;

	for (int i = 0; i < NTENSORS; i++) {
		t[i].data_offset = off;
		off = ALIGN_UP(off + t[i].nbytes);
	}
}

uint64_t fixture_blob_offset(void)
{
	struct ckpt_tensor t[NTENSORS];

	fill_tensors(t, 0, 1);
	return ALIGN_UP(t[NTENSORS - 1].data_offset + t[NTENSORS - 1].nbytes);
}

static int mkdir_at(int dirfd, const char *name)
{
	if (mkdirat(dirfd, name, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* Chunk CRCs of every extent, in table order, then the blob. */
static uint32_t *chunk_crcs(const uint8_t *data, const struct ckpt_tensor *t,
			    uint64_t blob_off, uint64_t blob_bytes,
			    uint32_t *count)
{
	uint64_t n = 0;
	uint32_t *v = malloc(64 * sizeof(*v));

	if (!v)
		return NULL;
	for (int i = 0; i <= NTENSORS; i++) {
		uint64_t off = i < NTENSORS ? t[i].data_offset : blob_off;
		uint64_t len = i < NTENSORS ? t[i].nbytes : blob_bytes;

		for (uint64_t c = 0; c < len; c += FIXTURE_CHUNK_BYTES) {
			uint64_t l = len - c < FIXTURE_CHUNK_BYTES ? len - c : FIXTURE_CHUNK_BYTES;

			v[n++] = ckpt_crc32c(0, data + off + c, l);
		}
	}
	*count = (uint32_t)n;
	return v;
}

static int make_rank(int stepfd, const char *job, uint64_t step, uint32_t rank,
		     uint32_t world, int64_t now, struct ckpt_tensor *t,
		     struct ckpt_manifest_rank *mr)
{
	char name[32];
	uint64_t seed = ((step * 1000003u + rank) << 1) | 1, blob_off, shard_bytes;
	uint8_t *data = NULL;
	void *enc = NULL;
	ssize_t enc_len;
	struct ckpt_index idx = { 0 };
	int r = -ENOMEM;

	fill_tensors(t, rank, world);
	blob_off = fixture_blob_offset();
	shard_bytes = ALIGN_UP(blob_off + BLOB_BYTES);
	data = calloc(1, shard_bytes);
	if (!data)
		goto out;
	for (uint64_t i = 0; i < shard_bytes; i += 8) {
		uint64_t v = rng_next(&seed);

		memcpy(data + i, &v, 8);
	}
	/* Padding between extents is zero, as ckptd writes it. */
	for (int i = 0; i < NTENSORS; i++) {
		uint64_t end = t[i].data_offset + t[i].nbytes;
		uint64_t next = i + 1 < NTENSORS ? t[i + 1].data_offset : blob_off;

		memset(data + end, 0, next - end);
		t[i].crc32c = ckpt_crc32c(0, data + t[i].data_offset, t[i].nbytes);
	}
	memset(data + blob_off + BLOB_BYTES, 0, shard_bytes - blob_off - BLOB_BYTES);

	snprintf(idx.job, sizeof(idx.job), "%s", job);
	idx.step = step;
	idx.rank = rank;
	idx.world_size = world;
	idx.chunk_bytes = FIXTURE_CHUNK_BYTES;
	idx.shard_bytes = shard_bytes;
	idx.blob_offset = blob_off;
	idx.blob_bytes = BLOB_BYTES;
	idx.blob_crc32c = ckpt_crc32c(0, data + blob_off, BLOB_BYTES);
	idx.created_unix_ns = now;
	idx.table.count = NTENSORS;
	idx.table.tensors = t;
	idx.chunk_crc = chunk_crcs(data, t, blob_off, BLOB_BYTES, &idx.chunk_count);
	if (!idx.chunk_crc)
		goto out;

	ckpt_shard_filename(name, sizeof(name), rank);
	r = store_write_file_durable(stepfd, name, data, shard_bytes);
	if (r < 0)
		goto out;
	enc_len = ckpt_index_encode(&idx, &enc);
	if (enc_len < 0) {
		r = (int)enc_len;
		goto out;
	}
	ckpt_index_filename(name, sizeof(name), rank);
	r = store_write_file_durable(stepfd, name, enc, (size_t)enc_len);
	if (r < 0)
		goto out;

	mr->rank = rank;
	mr->shard_bytes = shard_bytes;
	mr->blob_bytes = BLOB_BYTES;
	mr->blob_crc32c = idx.blob_crc32c;
	mr->index_bytes = (uint64_t)enc_len;
	store_sha256(enc, (size_t)enc_len, mr->index_sha256);
	mr->table.count = NTENSORS;
	mr->table.tensors = t;
out:
	free(idx.chunk_crc);
	free(enc);
	free(data);
	return r;
}

int fixture_make_step(const char *root, const char *job, uint64_t step,
		      uint32_t world_size, bool commit)
{
	char dname[32];
	int rootfd = -1, jobfd = -1, stepfd = -1, r;
	struct ckpt_tensor *tensors = NULL;
	struct ckpt_manifest m = { 0 };
	struct timespec ts;
	char *json = NULL;
	size_t json_len;
	uint64_t latest;

	if (mkdir(root, 0755) < 0 && errno != EEXIST)
		return -errno;
	rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		return -errno;
	r = mkdir_at(rootfd, job);
	if (r < 0)
		goto out;
	jobfd = openat(rootfd, job, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (jobfd < 0) {
		r = -errno;
		goto out;
	}
	r = ckpt_step_dirname(dname, sizeof(dname), step);
	if (r < 0)
		goto out;
	r = mkdir_at(jobfd, dname);
	if (r < 0)
		goto out;
	stepfd = openat(jobfd, dname, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (stepfd < 0) {
		r = -errno;
		goto out;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(m.job, sizeof(m.job), "%s", job);
	m.step = step;
	m.world_size = world_size;
	m.chunk_bytes = FIXTURE_CHUNK_BYTES;
	m.created_unix_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	tensors = calloc((size_t)world_size * NTENSORS, sizeof(*tensors));
	m.ranks = calloc(world_size, sizeof(*m.ranks));
	r = -ENOMEM;
	if (!tensors || !m.ranks)
		goto out;
	for (uint32_t rank = 0; rank < world_size; rank++) {
		r = make_rank(stepfd, job, step, rank, world_size, m.created_unix_ns,
			      tensors + (size_t)rank * NTENSORS, &m.ranks[rank]);
		if (r < 0)
			goto out;
	}
	r = 0;
	if (!commit)
		goto out;
	r = ckpt_manifest_encode(&m, &json, &json_len);
	if (r < 0)
		goto out;
	r = store_write_file_durable(stepfd, CKPT_MANIFEST_NAME, json, json_len);
	if (r < 0)
		goto out;
	if (store_read_latest(jobfd, &latest) < 0 || latest < step)
		r = store_write_latest(jobfd, step);
out:
	free(json);
	free(m.ranks);
	free(tensors);
	if (stepfd >= 0)
		close(stepfd);
	if (jobfd >= 0)
		close(jobfd);
	close(rootfd);
	return r;
}

int fixture_flip_byte(const char *path, uint64_t offset)
{
	uint8_t b;
	int fd = open(path, O_RDWR | O_CLOEXEC), r = 0;

	if (fd < 0)
		return -errno;
	if (pread(fd, &b, 1, (off_t)offset) != 1) {
		r = -EIO;
		goto out;
	}
	b ^= 0xff;
	if (pwrite(fd, &b, 1, (off_t)offset) != 1)
		r = -EIO;
	/* Flush so that a verifier reading with O_DIRECT sees the change. */
	else if (fsync(fd) < 0)
		r = -errno;
out:
	close(fd);
	return r;
}

int fixture_tmpdir(char *buf, size_t cap)
{
	const char *base = getenv("TMPDIR");

	if (!base || !*base)
		base = "/tmp";
	if ((size_t)snprintf(buf, cap, "%s/ckpt-test-XXXXXX", base) >= cap)
		return -ENAMETOOLONG;
	return mkdtemp(buf) ? 0 : -errno;
}

void fixture_rmtree(const char *path)
{
	char dir[4096];
	const char *slash = strrchr(path, '/');
	int fd;

	if (!slash)
		return;
	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	fd = open(slash == path ? "/" : dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	store_remove_tree(fd, slash + 1);
	close(fd);
}
