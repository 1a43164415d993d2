/* SPDX-License-Identifier: MIT */
/*
 * ckpt-fixture ROOT JOB WORLD_SIZE STEP...: write committed checkpoint
 * steps (see fixture.h). A STEP written as +N is left uncommitted (shards
 * and indexes, no manifest). For scripts and other test suites.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;

	if (!*s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return errno || *end ? -EINVAL : 0;
}

int main(int argc, char **argv)
{
	uint64_t world, step;

	if (argc < 5 || parse_u64(argv[3], &world) < 0 || world < 1 ||
	    world > 4096) {
		fprintf(stderr, "usage: %s ROOT JOB WORLD_SIZE STEP|+STEP...\n", argv[0]);
		return 2;
	}
	for (int i = 4; i < argc; i++) {
		bool commit = argv[i][0] != '+';
		int r;

		if (parse_u64(argv[i] + !commit, &step) < 0 || step >= 10000000000ull) {
			fprintf(stderr, "%s: bad step '%s'\n", argv[0], argv[i]);
			return 2;
		}
		r = fixture_make_step(argv[1], argv[2], step, (uint32_t)world, commit);
		if (r < 0) {
			fprintf(stderr, "%s: step %s: %s\n", argv[0], argv[i], strerror(-r));
			return 1;
		}
	}
	return 0;
}
