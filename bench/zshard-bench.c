/* SPDX-License-Identifier: MIT */
/*
 * zshard-bench: how well the S3 tier's compression (s3_compress = zstd)
 * does on a real committed step: for every rank's shard, the ratio and
 * single-core throughput of compressing it as ckptd does (pieces along
 * tensors, one zstd frame each), with and without byte-shuffling of float
 * tensors, at the given zstd levels, side by side, and decompression.
 *
 *   zshard-bench [--levels 1,3] [--piece-bytes 4MiB] ROOT/JOB/STEP
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store.h"
#include "zshard.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *msg, int err)
{
	fprintf(stderr, "zshard-bench: %s%s%s\n", msg, err ? ": " : "", err ? strerror(-err) : "");
	exit(1);
}

int main(int argc, char **argv)
{
	int levels[8] = { 1, 3 }, nlevels = 2;
	uint64_t piece = 0;
	const char *path = NULL;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--levels") && i + 1 < argc) {
			nlevels = 0;
			for (char *s = strtok(argv[++i], ","); s && nlevels < 8; s = strtok(NULL, ","))
				levels[nlevels++] = atoi(s);
		} else if (!strcmp(argv[i], "--piece-bytes") && i + 1 < argc) {
			piece = strtoull(argv[++i], NULL, 10);
		} else if (argv[i][0] != '-' && !path) {
			path = argv[i];
		} else {
			fprintf(stderr, "usage: zshard-bench [--levels 1,3] [--piece-bytes N] ROOT/JOB/step-N\n");
			return 2;
		}
	}
	if (!path) {
		fprintf(stderr, "usage: zshard-bench [--levels 1,3] [--piece-bytes N] ROOT/JOB/step-N\n");
		return 2;
	}
	char jobdir[4096], *slash;
	snprintf(jobdir, sizeof(jobdir), "%s", path);
	while ((slash = strrchr(jobdir, '/')) && slash[1] == '\0')
		*slash = '\0';
	slash = strrchr(jobdir, '/');
	uint64_t step = 0;
	if (!slash || ckpt_step_dirname_parse(slash + 1, &step) < 0)
		die("the path must end in a step directory (step-NNNNNNNNNN)", 0);
	*slash = '\0';
	int jobfd = open(jobdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (jobfd < 0)
		die(jobdir, -errno);
	struct ckpt_manifest m;
	char err[512];
	int r = store_read_manifest(jobfd, step, &m, err, sizeof(err));
	if (r < 0)
		die(err, 0);
	if (!piece)
		piece = m.chunk_bytes;

	printf("| shuffle | level | raw MiB | compressed MiB | ratio | compress MB/s | decompress MB/s |\n");
	printf("|---|---|---|---|---|---|---|\n");
	for (int shuffle = 1; shuffle >= 0; shuffle--) {
		for (int li = 0; li < nlevels; li++) {
			uint64_t raw_total = 0, z_total = 0;
			double tc = 0, td = 0;
			for (uint32_t rk = 0; rk < m.world_size; rk++) {
				const struct ckpt_manifest_rank *mr = &m.ranks[rk];
				char name[64];
				snprintf(name, sizeof(name), "%s/step-%010" PRIu64 "/rank-%06u.shard",
					 jobdir, step, rk);
				int fd = open(name, O_RDONLY | O_CLOEXEC);
				if (fd < 0)
					die(name, -errno);
				uint8_t *raw = malloc(mr->shard_bytes ? mr->shard_bytes : 1);
				if (!raw || pread(fd, raw, mr->shard_bytes, 0) != (ssize_t)mr->shard_bytes)
					die(name, -EIO);
				close(fd);
				struct zpiece *p;
				size_t n, cap = 0;
				r = zshard_plan(&mr->table, mr->shard_bytes, piece, shuffle, &p, &n);
				if (r < 0)
					die("plan", r);
				for (size_t i = 0; i < n; i++)
					cap += zshard_bound(p[i].raw_len);
				uint8_t *obj = malloc(cap ? cap : 1), *tmp = malloc(piece), *back = malloc(piece);
				size_t z = 0;
				double t0 = now();
				for (size_t i = 0; i < n; i++) {
					p[i].z_offset = z;
					r = zshard_compress(&p[i], raw + p[i].raw_offset, tmp, obj + z, cap - z,
							    levels[li]);
					if (r < 0)
						die("compress", r);
					z += p[i].z_len;
				}
				double t1 = now();
				for (size_t i = 0; i < n; i++)
					if ((r = zshard_decompress(&p[i], obj + p[i].z_offset, tmp, back)) < 0 ||
					    memcmp(back, raw + p[i].raw_offset, p[i].raw_len) != 0)
						die("round trip", r ? r : -EBADMSG);
				td += now() - t1;
				tc += t1 - t0;
				raw_total += mr->shard_bytes;
				z_total += z + zshard_footer_bytes(n);
				free(raw);
				free(obj);
				free(tmp);
				free(back);
				free(p);
			}
			printf("| %s | %d | %.1f | %.1f | %.3f | %.0f | %.0f |\n", shuffle ? "yes" : "no",
			       levels[li], (double)raw_total / 1048576.0, (double)z_total / 1048576.0,
			       (double)raw_total / (double)z_total, (double)raw_total / tc / 1e6,
			       (double)raw_total / td / 1e6);
		}
	}
	ckpt_manifest_free(&m);
	close(jobfd);
	return 0;
}
