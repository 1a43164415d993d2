/* SPDX-License-Identifier: MIT */
/*
 * store: durable writes, LATEST, job and step listing (committed only or
 * not), manifest and index reads, and remove_tree not following symlinks.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "store.h"
#include "test-common.h"

static char tmp[4096];

static int test_file_io(int dirfd)
{
	char big[10000];
	void *buf = NULL;
	size_t len = 0;
	struct stat st;

	memset(big, 'x', sizeof(big));
	CHECK_EQ(store_write_file_durable(dirfd, "f", "hello", 5), 0);
	CHECK(fstatat(dirfd, "f.tmp", &st, 0) < 0 && errno == ENOENT);
	CHECK_EQ(store_read_file(dirfd, "f", 100, &buf, &len), 0);
	CHECK_EQ(len, 5);
	CHECK(memcmp(buf, "hello\0", 6) == 0);
	free(buf);
	buf = NULL;
	/* Replacing is atomic: the new content, whole. */
	CHECK_EQ(store_write_file_durable(dirfd, "f", big, sizeof(big)), 0);
	CHECK_EQ(store_read_file(dirfd, "f", sizeof(big), &buf, &len), 0);
	CHECK_EQ(len, sizeof(big));
	CHECK(memcmp(buf, big, sizeof(big)) == 0);
	free(buf);
	buf = NULL;
	CHECK_EQ(store_read_file(dirfd, "f", sizeof(big) - 1, &buf, &len), -EFBIG);
	CHECK_EQ(store_read_file(dirfd, "missing", 100, &buf, &len), -ENOENT);
	CHECK_EQ(store_write_file_durable(dirfd, "a/b", "x", 1), -EINVAL);
	/* A symlink is not read through. */
	CHECK_EQ(symlinkat("f", dirfd, "link"), 0);
	CHECK_EQ(store_read_file(dirfd, "link", 100000, &buf, &len), -ELOOP);
	CHECK_EQ(store_fsync_dir(dirfd), 0);
	return 0;
fail:
	free(buf);
	return 1;
}

static int test_latest(int dirfd)
{
	uint64_t step = 0;

	CHECK_EQ(mkdirat(dirfd, "lat", 0755), 0);
	int fd = openat(dirfd, "lat", O_RDONLY | O_DIRECTORY);

	CHECK(fd >= 0);
	CHECK_EQ(store_read_latest(fd, &step), -ENOENT);
	CHECK_EQ(store_write_latest(fd, 42), 0);
	CHECK_EQ(store_read_latest(fd, &step), 0);
	CHECK_EQ(step, 42);
	CHECK_EQ(store_write_latest(fd, 9999999999ull), 0);
	CHECK_EQ(store_read_latest(fd, &step), 0);
	CHECK_EQ(step, 9999999999ull);
	CHECK_EQ(store_write_file_durable(fd, CKPT_LATEST_NAME, "12x\n", 4), 0);
	CHECK_EQ(store_read_latest(fd, &step), -EBADMSG);
	CHECK_EQ(store_write_file_durable(fd, CKPT_LATEST_NAME, "", 0), 0);
	CHECK_EQ(store_read_latest(fd, &step), -EBADMSG);
	CHECK_EQ(store_write_file_durable(fd, CKPT_LATEST_NAME, "99999999999999999999999\n", 24), 0);
	CHECK_EQ(store_read_latest(fd, &step), -EBADMSG);
	close(fd);
	return 0;
fail:
	return 1;
}

static int test_listing(const char *root)
{
	char path[4200];
	int rootfd = -1, jobfd = -1;
	char **jobs = NULL;
	size_t njobs = 0, n = 0;
	uint64_t *steps = NULL, latest;

	CHECK_EQ(fixture_make_step(root, "jobB", 1, 2, true), 0);
	CHECK_EQ(fixture_make_step(root, "jobA", 10, 2, true), 0);
	CHECK_EQ(fixture_make_step(root, "jobA", 20, 2, true), 0);
	CHECK_EQ(fixture_make_step(root, "jobA", 30, 2, false), 0);
	rootfd = open(root, O_RDONLY | O_DIRECTORY);
	CHECK(rootfd >= 0);
	/* Things that are not jobs. */
	CHECK_EQ(mkdirat(rootfd, ".hidden", 0755), 0);
	CHECK_EQ(mkdirat(rootfd, "bad name", 0755), 0);
	CHECK_EQ(store_write_file_durable(rootfd, "file", "x", 1), 0);
	CHECK_EQ(symlinkat("jobA", rootfd, "linkjob"), 0);

	CHECK_EQ(store_list_jobs(rootfd, &jobs, &njobs), 0);
	CHECK_EQ(njobs, 2);
	CHECK(!strcmp(jobs[0], "jobA") && !strcmp(jobs[1], "jobB"));

	jobfd = openat(rootfd, "jobA", O_RDONLY | O_DIRECTORY);
	CHECK(jobfd >= 0);
	/* Names that are almost step directories. */
	CHECK_EQ(mkdirat(jobfd, "step-12", 0755), 0);
	CHECK_EQ(mkdirat(jobfd, "step-000000001x", 0755), 0);
	CHECK_EQ(store_write_file_durable(jobfd, "step-0000000005", "x", 1), 0);
	CHECK_EQ(symlinkat("step-0000000010", jobfd, "step-0000000007"), 0);

	CHECK_EQ(store_list_steps(jobfd, true, &steps, &n), 0);
	CHECK_EQ(n, 2);
	CHECK(steps[0] == 10 && steps[1] == 20);
	free(steps);
	steps = NULL;
	CHECK_EQ(store_list_steps(jobfd, false, &steps, &n), 0);
	CHECK_EQ(n, 3);
	CHECK(steps[0] == 10 && steps[1] == 20 && steps[2] == 30);
	free(steps);
	steps = NULL;
	CHECK_EQ(store_read_latest(jobfd, &latest), 0);
	CHECK_EQ(latest, 20);

	/* Manifest and index reads. */
	{
		struct ckpt_manifest m;
		struct ckpt_index idx;
		char err[512] = "";
		uint8_t bad[32] = { 0 };
		int stepfd = openat(jobfd, "step-0000000020", O_RDONLY | O_DIRECTORY);
		struct stat st;
		uint64_t sum = 0;

		CHECK(stepfd >= 0);
		CHECK_EQ(store_read_manifest(jobfd, 20, &m, err, sizeof(err)), 0);
		CHECK(!strcmp(m.job, "jobA"));
		CHECK_EQ(m.step, 20);
		CHECK_EQ(m.world_size, 2);
		CHECK_EQ(m.ranks[1].table.count, 3);
		CHECK(!strcmp(m.ranks[1].table.tensors[0].name, "layer0.weight"));
		CHECK_EQ(m.ranks[1].table.tensors[0].offset[0], FIXTURE_ROWS);
		for (uint32_t r = 0; r < 2; r++) {
			char name[32];

			ckpt_shard_filename(name, sizeof(name), r);
			CHECK_EQ(fstatat(stepfd, name, &st, 0), 0);
			sum += (uint64_t)st.st_size;
			ckpt_index_filename(name, sizeof(name), r);
			CHECK_EQ(fstatat(stepfd, name, &st, 0), 0);
			sum += (uint64_t)st.st_size;
		}
		CHECK_EQ(store_manifest_bytes(&m), sum);

		CHECK_EQ(store_read_index(stepfd, 1, m.ranks[1].index_sha256, &idx,
					  err, sizeof(err)), 0);
		CHECK_EQ(idx.rank, 1);
		CHECK_EQ(idx.step, 20);
		CHECK_EQ(idx.table.count, 3);
		ckpt_index_free(&idx);
		CHECK_EQ(store_read_index(stepfd, 1, NULL, &idx, err, sizeof(err)), 0);
		ckpt_index_free(&idx);
		CHECK_EQ(store_read_index(stepfd, 1, bad, &idx, err, sizeof(err)), -EBADMSG);
		CHECK_CONTAINS(err, "index digest mismatch");
		CHECK_CONTAINS(err, "rank-000001.index");
		CHECK(store_read_index(stepfd, 7, NULL, &idx, err, sizeof(err)) == -ENOENT);
		ckpt_manifest_free(&m);

		CHECK_EQ(store_read_manifest(jobfd, 30, &m, err, sizeof(err)), -ENOENT);
		CHECK_CONTAINS(err, "step-0000000030/MANIFEST.json");
		CHECK_EQ(store_read_manifest(jobfd, 31, &m, err, sizeof(err)), -ENOENT);
		close(stepfd);
	}
	close(jobfd);
	close(rootfd);
	store_strv_free(jobs, njobs);
	(void)path;
	return 0;
fail:
	free(steps);
	store_strv_free(jobs, njobs);
	if (jobfd >= 0)
		close(jobfd);
	if (rootfd >= 0)
		close(rootfd);
	return 1;
}

static int test_remove_tree(int dirfd)
{
	struct stat st;
	int fd = -1;

	/* outside/keep must survive removing tree/, which links to it. */
	CHECK_EQ(mkdirat(dirfd, "outside", 0755), 0);
	fd = openat(dirfd, "outside", O_RDONLY | O_DIRECTORY);
	CHECK(fd >= 0);
	CHECK_EQ(store_write_file_durable(fd, "keep", "k", 1), 0);
	close(fd);
	fd = -1;

	CHECK_EQ(mkdirat(dirfd, "tree", 0755), 0);
	CHECK_EQ(mkdirat(dirfd, "tree/a", 0755), 0);
	CHECK_EQ(mkdirat(dirfd, "tree/a/b", 0755), 0);
	fd = openat(dirfd, "tree/a/b", O_RDONLY | O_DIRECTORY);
	CHECK(fd >= 0);
	CHECK_EQ(store_write_file_durable(fd, "x", "x", 1), 0);
	close(fd);
	fd = -1;
	CHECK_EQ(symlinkat("../../outside", dirfd, "tree/a/dirlink"), 0);
	CHECK_EQ(symlinkat("../outside/keep", dirfd, "tree/filelink"), 0);
	CHECK_EQ(symlinkat("/nonexistent", dirfd, "tree/dangling"), 0);

	CHECK_EQ(store_remove_tree(dirfd, "tree"), 0);
	CHECK(fstatat(dirfd, "tree", &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT);
	CHECK_EQ(fstatat(dirfd, "outside/keep", &st, AT_SYMLINK_NOFOLLOW), 0);
	CHECK(S_ISREG(st.st_mode));
	/* Gone already: nothing to do. */
	CHECK_EQ(store_remove_tree(dirfd, "tree"), 0);
	/* A symlink to a directory is removed as a link. */
	CHECK_EQ(symlinkat("outside", dirfd, "toplink"), 0);
	CHECK_EQ(store_remove_tree(dirfd, "toplink"), 0);
	CHECK_EQ(fstatat(dirfd, "outside/keep", &st, AT_SYMLINK_NOFOLLOW), 0);
	CHECK_EQ(store_remove_tree(dirfd, ".."), -EINVAL);
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	return 1;
}

int main(void)
{
	char root[4200];
	int dirfd, failed = 0;

	if (fixture_tmpdir(tmp, sizeof(tmp)) < 0) {
		perror("mkdtemp");
		return 1;
	}
	dirfd = open(tmp, O_RDONLY | O_DIRECTORY);
	if (dirfd < 0)
		return 1;
	snprintf(root, sizeof(root), "%s/root", tmp);
	failed |= test_file_io(dirfd);
	failed |= test_latest(dirfd);
	failed |= test_listing(root);
	failed |= test_remove_tree(dirfd);
	close(dirfd);
	fixture_rmtree(tmp);
	return failed ? 1 : 0;
}
