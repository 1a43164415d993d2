/* SPDX-License-Identifier: MIT */
/* Minimal checks for the unit tests: count failures, report, go on. */
#ifndef CKPT_TEST_CHECK_H
#define CKPT_TEST_CHECK_H

#include <stdio.h>

static int check_failures;

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "%s:%d: check failed: %s\n",         \
				__FILE__, __LINE__, #cond);                  \
			check_failures++;                                    \
		}                                                            \
	} while (0)

#define CHECK_EQ(a, b)                                                       \
	do {                                                                 \
		long long check_a_ = (long long)(a), check_b_ = (long long)(b); \
		if (check_a_ != check_b_) {                                  \
			fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", \
				__FILE__, __LINE__, #a, check_a_, #b, check_b_); \
			check_failures++;                                    \
		}                                                            \
	} while (0)

static inline int check_result(const char *name)
{
	if (check_failures) {
		fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
		return 1;
	}
	printf("%s: ok\n", name);
	return 0;
}

#endif
