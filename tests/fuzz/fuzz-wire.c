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
	if (m.type == CKPT_MSG_STATUS && ckpt_msg_is_features_notice(&m))
		FUZZ_ASSERT((ckpt_features_parse(m.u.status.reason) & ~CKPT_FEATURES_KNOWN) == 0);
	/* What decodes as a STALL is a value ckptd may put in a histogram. */
	if (m.type == CKPT_MSG_STALL)
		FUZZ_ASSERT(m.u.stall.seconds >= 0 && m.u.stall.seconds < CKPT_STALL_MAX_SECONDS);
	n = ckpt_msg_encode(&m, out, sizeof(out));
	FUZZ_ASSERT(n >= 0 && (size_t)n == size);
	FUZZ_ASSERT(memcmp(out, data, size) == 0);
	return 0;
}
