/* SPDX-License-Identifier: MIT */
/* MANIFEST.json: decode; what decodes encodes, decodes again, and encodes
 * to the same text. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ckpt_manifest m, again;
	char err[512], *text = NULL, *text2 = NULL;
	size_t len = 0, len2 = 0;

	int ret = ckpt_manifest_decode((const char *)data, size, &m, err, sizeof(err));

	if (ret < 0) {
		/* Every refusal says why. */
		FUZZ_ASSERT(ret != -EBADMSG || err[0] != '\0');
		return 0;
	}
	FUZZ_ASSERT(ckpt_manifest_encode(&m, &text, &len) == 0);
	FUZZ_ASSERT(ckpt_manifest_decode(text, len, &again, err, sizeof(err)) == 0);
	FUZZ_ASSERT(ckpt_manifest_encode(&again, &text2, &len2) == 0);
	FUZZ_ASSERT(len == len2 && memcmp(text, text2, len) == 0);
	free(text);
	free(text2);
	ckpt_manifest_free(&again);
	ckpt_manifest_free(&m);
	return 0;
}
