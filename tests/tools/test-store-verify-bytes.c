/* SPDX-License-Identifier: MIT */
/*
 * store_verify_rank_bytes (the checks S3 verification runs): the index from
 * a buffer, the shard through a read function, asked front to back in
 * windows no larger than asked for, at aligned offsets. It agrees with
 * store_verify_rank on a good rank, a flipped byte, a wrong size, a bad
 * index, and a read error, which comes back as is.
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

struct reader {
	int fd;
	size_t window;
	uint64_t next;          /* where the next read must start at the latest */
	unsigned calls;
	bool in_order, aligned, within_window;
	uint64_t fail_at;       /* a read reaching this offset fails; UINT64_MAX: none */
};

static int read_fn(void *opaque, uint64_t offset, void *buf, size_t len)
{
	struct reader *rd = opaque;

	rd->calls++;
	if (offset + 4096 < rd->next)
		rd->in_order = false;
	if (offset % 4096)
		rd->aligned = false;
	if (len > rd->window)
		rd->within_window = false;
	rd->next = offset + len;
	if (rd->fail_at != UINT64_MAX && offset + len > rd->fail_at)
		return -ECONNRESET;
	if (pread(rd->fd, buf, len, (off_t)offset) != (ssize_t)len)
		return -EIO;
	return 0;
}

static int load(const char *path, void **buf, size_t *len)
{
	int fd = open(path, O_RDONLY);
	struct stat st;

	if (fd < 0 || fstat(fd, &st) < 0)
		return -1;
	*len = (size_t)st.st_size;
	*buf = malloc(*len ? *len : 1);
	if (!*buf || pread(fd, *buf, *len, 0) != (ssize_t)*len) {
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

int main(void)
{
	char tmp[4096], root[4200], path[4400], ipath[4400];
	struct store_verify_result res, ref;
	struct ckpt_manifest m = { 0 };
	struct reader rd;
	struct stat st;
	char err[512];
	void *index = NULL;
	size_t ilen = 0;
	int jobfd = -1, ret = 1;

	if (fixture_tmpdir(tmp, sizeof(tmp)) < 0)
		return 1;
	snprintf(root, sizeof(root), "%s/root", tmp);
	CHECK_EQ(fixture_make_step(root, "job", 5, 3, true), 0);
	snprintf(path, sizeof(path), "%s/job", root);
	jobfd = open(path, O_RDONLY | O_DIRECTORY);
	CHECK(jobfd >= 0);
	CHECK_EQ(store_read_manifest(jobfd, 5, &m, err, sizeof(err)), 0);

	snprintf(path, sizeof(path), "%s/job/step-0000000005/rank-000001.shard", root);
	snprintf(ipath, sizeof(ipath), "%s/job/step-0000000005/rank-000001.index", root);
	CHECK_EQ(load(ipath, &index, &ilen), 0);
	CHECK_EQ(stat(path, &st), 0);

#define RESET()                                                                     \
	do {                                                                        \
		memset(&rd, 0, sizeof(rd));                                         \
		rd.fd = open(path, O_RDONLY);                                       \
		rd.window = 8192;                                                   \
		rd.in_order = rd.aligned = rd.within_window = true;                 \
		rd.fail_at = UINT64_MAX;                                            \
	} while (0)

	/* A good rank, read in small windows: the same counts as from the file. */
	RESET();
	CHECK(rd.fd >= 0);
	CHECK_EQ(store_verify_rank_bytes(&m, 1, index, ilen, (uint64_t)st.st_size, read_fn,
					 &rd, 5000, NULL, NULL, &res), 0);
	CHECK_EQ(store_verify_rank(jobfd, &m, 1, NULL, NULL, &ref), 0);
	CHECK_EQ(res.chunks, ref.chunks);
	CHECK_EQ(res.bytes, ref.bytes);
	CHECK(rd.calls > 1);
	CHECK(rd.in_order && rd.aligned && rd.within_window);
	close(rd.fd);

	/* A flipped byte: the same message as store_verify_rank's. */
	CHECK_EQ(fixture_flip_byte(path, 2 * FIXTURE_CHUNK_BYTES + 123), 0);
	RESET();
	CHECK_EQ(store_verify_rank_bytes(&m, 1, index, ilen, (uint64_t)st.st_size, read_fn,
					 &rd, 0, NULL, NULL, &res), -EBADMSG);
	CHECK_EQ(store_verify_rank(jobfd, &m, 1, NULL, NULL, &ref), -EBADMSG);
	CHECK_EQ(res.bad_chunks, 1);
	CHECK(strcmp(res.first_error, ref.first_error) == 0);
	CHECK_CONTAINS(res.first_error, "step-0000000005/rank-000001.shard: rank 1 step 5: tensor");
	close(rd.fd);
	CHECK_EQ(fixture_flip_byte(path, 2 * FIXTURE_CHUNK_BYTES + 123), 0);

	/* A shard of the wrong size is named before any byte is read. */
	RESET();
	CHECK_EQ(store_verify_rank_bytes(&m, 1, index, ilen, (uint64_t)st.st_size + 1, read_fn,
					 &rd, 0, NULL, NULL, &res), -EBADMSG);
	CHECK_CONTAINS(res.first_error, "truncated or extended");
	CHECK_EQ(rd.calls, 0);
	close(rd.fd);

	/* An index that is not the manifest's. */
	RESET();
	((unsigned char *)index)[ilen - 8] ^= 1;
	CHECK_EQ(store_verify_rank_bytes(&m, 1, index, ilen, (uint64_t)st.st_size, read_fn,
					 &rd, 0, NULL, NULL, &res), -EBADMSG);
	CHECK_CONTAINS(res.first_error, "rank-000001.index: index digest mismatch");
	CHECK_CONTAINS(res.first_error, "rank 1 step 5");
	((unsigned char *)index)[ilen - 8] ^= 1;
	CHECK_EQ(store_verify_rank_bytes(&m, 1, index, ilen - 1, (uint64_t)st.st_size, read_fn,
					 &rd, 0, NULL, NULL, &res), -EBADMSG);
	close(rd.fd);

	/* A read error comes back as is, naming the offset. */
	RESET();
	rd.fail_at = 3 * FIXTURE_CHUNK_BYTES;
	CHECK_EQ(store_verify_rank_bytes(&m, 1, index, ilen, (uint64_t)st.st_size, read_fn,
					 &rd, 4096, NULL, NULL, &res), -ECONNRESET);
	CHECK_CONTAINS(res.first_error, "rank-000001.shard: read at byte offset");
	close(rd.fd);

	/* Bad arguments. */
	CHECK_EQ(store_verify_rank_bytes(&m, 3, index, ilen, 0, read_fn, &rd, 0, NULL, NULL,
					 &res), -EINVAL);
	CHECK_EQ(store_verify_rank_bytes(&m, 1, NULL, 0, 0, read_fn, &rd, 0, NULL, NULL, &res),
		 -EINVAL);
	CHECK_EQ(store_verify_rank_bytes(&m, 1, index, ilen, 0, NULL, NULL, 0, NULL, NULL, &res),
		 -EINVAL);
	ret = 0;
fail:
	free(index);
	if (m.ranks)
		ckpt_manifest_free(&m);
	if (jobfd >= 0)
		close(jobfd);
	fixture_rmtree(tmp);
	return ret;
}
