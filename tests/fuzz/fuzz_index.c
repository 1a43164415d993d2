/* SPDX-License-Identifier: MIT */
/* Rank indexes: decode, and re-encode to the same bytes. The trailer CRC
 * makes random mutations fail early; the seed corpus has valid files and
 * the fuzzer is best run with -use_value_profile=1. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ckpt_index idx;
	void *out = NULL;
	ssize_t n;

	if (ckpt_index_decode(data, size, &idx) < 0)
		return 0;
	n = ckpt_index_encode(&idx, &out);
	FUZZ_ASSERT(n >= 0 && (size_t)n == size);
	FUZZ_ASSERT(memcmp(out, data, size) == 0);
	free(out);
	ckpt_index_free(&idx);
	return 0;
}
