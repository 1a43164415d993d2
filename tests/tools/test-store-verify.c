/* SPDX-License-Identifier: MIT */
/*
 * store_verify_rank: a good step verifies; a flipped byte in a tensor or
 * the blob, a truncated shard, a corrupted index, a shard replaced by a
 * symlink and an edited manifest are all caught and named.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "store.h"
#include "test-common.h"

struct prog {
	uint64_t calls, last_done, last_total;
	bool monotonic;
};

static void on_progress(void *opaque, uint64_t done, uint64_t total)
{
	struct prog *p = opaque;

	if (done < p->last_done || done > total)
		p->monotonic = false;
	p->calls++;
	p->last_done = done;
	p->last_total = total;
}

static int verify_all(int jobfd, uint64_t step, struct store_verify_result *res,
		      uint32_t *bad_rank)
{
	struct ckpt_manifest m;
	char err[512];
	int r = store_read_manifest(jobfd, step, &m, err, sizeof(err));

	if (r < 0) {
		snprintf(res->first_error, sizeof(res->first_error), "%s", err);
		return r;
	}
	for (uint32_t i = 0; i < m.world_size; i++) {
		r = store_verify_rank(jobfd, &m, i, NULL, NULL, res);
		if (r < 0) {
			*bad_rank = i;
			break;
		}
	}
	ckpt_manifest_free(&m);
	return r;
}

int main(void)
{
	char tmp[4096], root[4200], path[4400];
	struct store_verify_result res;
	struct ckpt_manifest m = { 0 };
	struct prog p = { .monotonic = true };
	char err[512];
	uint32_t bad_rank = UINT32_MAX;
	int jobfd = -1, ret = 1;
	uint64_t woff;

	if (fixture_tmpdir(tmp, sizeof(tmp)) < 0)
		return 1;
	snprintf(root, sizeof(root), "%s/root", tmp);
	CHECK_EQ(fixture_make_step(root, "job", 5, 3, true), 0);
	snprintf(path, sizeof(path), "%s/job", root);
	jobfd = open(path, O_RDONLY | O_DIRECTORY);
	CHECK(jobfd >= 0);

	/* A good step, with progress reported up to the total. */
	CHECK_EQ(store_read_manifest(jobfd, 5, &m, err, sizeof(err)), 0);
	for (uint32_t i = 0; i < 3; i++) {
		p.last_done = 0;
		CHECK_EQ(store_verify_rank(jobfd, &m, i, on_progress, &p, &res), 0);
		CHECK_EQ(res.bad_chunks, 0);
		CHECK_EQ(res.chunks, 10);
		CHECK_EQ(res.bytes, FIXTURE_ROWS * FIXTURE_COLS * 4 + FIXTURE_COLS * 4 + 8 + 1000);
		CHECK(res.first_error[0] == '\0');
		CHECK_EQ(p.last_done, p.last_total);
		CHECK_EQ(p.last_done, res.bytes);
	}
	CHECK(p.monotonic);
	CHECK_EQ(p.calls, 30);
	CHECK_EQ(store_verify_rank(jobfd, &m, 3, NULL, NULL, &res), -EINVAL);

	/* A flipped byte in the third chunk of rank 1's layer0.weight. */
	snprintf(path, sizeof(path), "%s/job/step-0000000005/rank-000001.shard", root);
	woff = 2 * FIXTURE_CHUNK_BYTES + 123;
	CHECK_EQ(fixture_flip_byte(path, woff), 0);
	CHECK_EQ(store_verify_rank(jobfd, &m, 0, NULL, NULL, &res), 0);
	CHECK_EQ(store_verify_rank(jobfd, &m, 1, NULL, NULL, &res), -EBADMSG);
	CHECK_EQ(res.bad_chunks, 1);
	CHECK_EQ(res.chunks, 10);
	fprintf(stderr, "flipped byte: %s\n", res.first_error);
	CHECK_CONTAINS(res.first_error, "layer0.weight");
	CHECK_CONTAINS(res.first_error, "rank 1");
	CHECK_CONTAINS(res.first_error, "step 5");
	CHECK_CONTAINS(res.first_error, "step-0000000005/rank-000001.shard");
	{
		char off[64];

		snprintf(off, sizeof(off), "byte offset %u", 2 * FIXTURE_CHUNK_BYTES);
		CHECK_CONTAINS(res.first_error, off);
	}
	CHECK_EQ(fixture_flip_byte(path, woff), 0);
	CHECK_EQ(store_verify_rank(jobfd, &m, 1, NULL, NULL, &res), 0);

	/* The blob is checked too. */
	CHECK_EQ(fixture_flip_byte(path, fixture_blob_offset() + 999), 0);
	CHECK_EQ(store_verify_rank(jobfd, &m, 1, NULL, NULL, &res), -EBADMSG);
	CHECK_CONTAINS(res.first_error, "blob");
	CHECK_EQ(fixture_flip_byte(path, fixture_blob_offset() + 999), 0);

	/* Padding between extents is not covered by any checksum. */
	CHECK_EQ(fixture_flip_byte(path, FIXTURE_ROWS * FIXTURE_COLS * 4 + 10), 0);
	CHECK_EQ(store_verify_rank(jobfd, &m, 1, NULL, NULL, &res), 0);
	CHECK_EQ(fixture_flip_byte(path, FIXTURE_ROWS * FIXTURE_COLS * 4 + 10), 0);

	/* A truncated shard. */
	{
		struct stat st;

		CHECK_EQ(stat(path, &st), 0);
		CHECK_EQ(truncate(path, st.st_size - 4096), 0);
		CHECK_EQ(store_verify_rank(jobfd, &m, 1, NULL, NULL, &res), -EBADMSG);
		fprintf(stderr, "truncated: %s\n", res.first_error);
		CHECK_CONTAINS(res.first_error, "rank-000001.shard");
		CHECK_CONTAINS(res.first_error, "truncated");
		CHECK_CONTAINS(res.first_error, "rank 1");
	}

	/* A missing shard. */
	CHECK_EQ(unlink(path), 0);
	CHECK_EQ(store_verify_rank(jobfd, &m, 1, NULL, NULL, &res), -ENOENT);
	CHECK_CONTAINS(res.first_error, "rank-000001.shard");

	/* A shard that is a symlink (here to a good copy) is not followed. */
	snprintf(path, sizeof(path), "%s/job/step-0000000005/rank-000002.shard", root);
	{
		char other[4400];

		snprintf(other, sizeof(other), "%s/elsewhere.shard", tmp);
		CHECK_EQ(rename(path, other), 0);
		CHECK_EQ(symlink(other, path), 0);
		CHECK_EQ(store_verify_rank(jobfd, &m, 2, NULL, NULL, &res), -ELOOP);
		CHECK_CONTAINS(res.first_error, "rank-000002.shard");
		CHECK_EQ(unlink(path), 0);
		CHECK_EQ(rename(other, path), 0);
		CHECK_EQ(store_verify_rank(jobfd, &m, 2, NULL, NULL, &res), 0);
	}

	/* A corrupted index (one byte in its chunk table). */
	snprintf(path, sizeof(path), "%s/job/step-0000000005/rank-000000.index", root);
	{
		struct stat st;

		CHECK_EQ(stat(path, &st), 0);
		CHECK_EQ(fixture_flip_byte(path, (uint64_t)st.st_size - 8), 0);
		CHECK_EQ(store_verify_rank(jobfd, &m, 0, NULL, NULL, &res), -EBADMSG);
		fprintf(stderr, "index: %s\n", res.first_error);
		CHECK_CONTAINS(res.first_error, "rank-000000.index");
		CHECK_CONTAINS(res.first_error, "digest mismatch");
		CHECK_CONTAINS(res.first_error, "rank 0");
	}
	ckpt_manifest_free(&m);
	memset(&m, 0, sizeof(m));

	/* An edited manifest fails its checksum. */
	CHECK_EQ(fixture_make_step(root, "job", 6, 2, true), 0);
	CHECK_EQ(verify_all(jobfd, 6, &res, &bad_rank), 0);
	snprintf(path, sizeof(path), "%s/job/step-0000000006/MANIFEST.json", root);
	{
		int fd = open(path, O_RDWR);
		char buf[65536];
		ssize_t n;
		char *q;

		CHECK(fd >= 0);
		n = pread(fd, buf, sizeof(buf) - 1, 0);
		CHECK(n > 0);
		buf[n] = '\0';
		q = strstr(buf, "\"nbytes\": 400000");
		CHECK(q != NULL);
		q[strlen("\"nbytes\": ")] = '5'; /* 500000: still a valid number */
		CHECK_EQ(pwrite(fd, buf, (size_t)n, 0), n);
		close(fd);
		CHECK_EQ(store_read_manifest(jobfd, 6, &m, err, sizeof(err)), -EBADMSG);
		memset(&m, 0, sizeof(m));
		fprintf(stderr, "manifest: %s\n", err);
		CHECK_CONTAINS(err, "step-0000000006/MANIFEST.json");
	}
	ret = 0;
fail:
	ckpt_manifest_free(&m);
	if (jobfd >= 0)
		close(jobfd);
	fixture_rmtree(tmp);
	return ret;
}
