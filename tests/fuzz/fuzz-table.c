/* SPDX-License-Identifier: MIT */
/* Tensor tables: decode, check the layout, copy, and re-encode to the same
 * bytes. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ckpt_table t, c;
	char err[256];
	uint8_t *out;
	ssize_t n;

	if (ckpt_table_decode(data, size, &t) < 0)
		return 0;
	(void)ckpt_table_check_layout(&t, UINT64_MAX, 0, 0, err, sizeof(err));
	(void)ckpt_table_check_layout(&t, 1u << 30, 4096, 4096, err, sizeof(err));
	if (t.count)
		FUZZ_ASSERT(ckpt_table_find(&t, t.tensors[t.count - 1].name) >= 0);
	FUZZ_ASSERT(ckpt_table_encoded_size(t.tensors, t.count) == size);
	out = malloc(size);
	if (out && ckpt_table_copy(&c, &t) == 0) {
		n = ckpt_table_encode(c.tensors, c.count, out, size);
		FUZZ_ASSERT(n >= 0 && (size_t)n == size);
		FUZZ_ASSERT(memcmp(out, data, size) == 0);
		ckpt_table_free(&c);
	}
	free(out);
	ckpt_table_free(&t);
	return 0;
}
