/* SPDX-License-Identifier: MIT */
/* Wire messages: decoding never crashes, and whatever decodes re-encodes to
 * the very same bytes (the encoding is canonical). */
#include <string.h>

#include "fuzz.h"
#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t out[CKPT_MSG_MAX_BYTES];
	struct ckpt_msg m;
	ssize_t n;

	if (ckpt_msg_decode(data, size, &m) < 0)
		return 0;
	(void)ckpt_msg_type_name(m.type);
	(void)ckpt_msg_fd_count(m.type);
	n = ckpt_msg_encode(&m, out, sizeof(out));
	FUZZ_ASSERT(n >= 0 && (size_t)n == size);
	FUZZ_ASSERT(memcmp(out, data, size) == 0);
	return 0;
}
