/* SPDX-License-Identifier: MIT */
/* Check macros for the tools tests: report where and fail the test. */
#ifndef CKPT_TEST_COMMON_H
#define CKPT_TEST_COMMON_H

#include <stdio.h>
#include <string.h>

#define CHECK(cond)                                                          \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, \
				__LINE__, #cond);                             \
			goto fail;                                            \
		}                                                             \
	} while (0)

#define CHECK_EQ(a, b)                                                       \
	do {                                                                  \
		long long _a = (long long)(a), _b = (long long)(b);           \
		if (_a != _b) {                                               \
			fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", \
				__FILE__, __LINE__, #a, _a, #b, _b);          \
			goto fail;                                            \
		}                                                             \
	} while (0)

#define CHECK_CONTAINS(hay, needle)                                          \
	do {                                                                  \
		if (!strstr((hay), (needle))) {                               \
			fprintf(stderr, "%s:%d: '%s' does not contain '%s'\n",  \
				__FILE__, __LINE__, (hay), (needle));         \
			goto fail;                                            \
		}                                                             \
	} while (0)

#endif
