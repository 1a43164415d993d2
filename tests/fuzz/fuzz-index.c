/* SPDX-License-Identifier: MIT */
/* Rank indexes: decode, and re-encode to the same bytes. Each input is
 * tried as is and with its trailer CRC fixed up, so that the fuzzer also
 * reaches the field checks behind the checksum. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "proto.h"

static void one(const uint8_t *data, size_t size)
{
	struct ckpt_index idx;
	void *out = NULL;
	ssize_t n;

	if (ckpt_index_decode(data, size, &idx) < 0)
		return;
	n = ckpt_index_encode(&idx, &out);
	FUZZ_ASSERT(n >= 0 && (size_t)n == size);
	FUZZ_ASSERT(memcmp(out, data, size) == 0);
	free(out);
	ckpt_index_free(&idx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *copy;
	uint32_t crc;

	one(data, size);
	if (size < 4)
		return 0;
	copy = malloc(size);
	if (!copy)
		return 0;
	memcpy(copy, data, size);
	crc = ckpt_crc32c(0, copy, size - 4);
	for (int i = 0; i < 4; i++)
		copy[size - 4 + i] = (uint8_t)(crc >> (8 * i));
	one(copy, size);
	free(copy);
	return 0;
}
