/* SPDX-License-Identifier: MIT */
/* MANIFEST.json: decode; what decodes encodes, decodes again, and encodes
 * to the same text. Each input is tried as is and, when it is a JSON
 * object, with its checksum recomputed, so that the fuzzer also reaches
 * the field checks behind the checksum. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fuzz.h"
#include "proto.h"

static void one(const char *data, size_t size)
{
	struct ckpt_manifest m, again;
	char err[512], *text = NULL, *text2 = NULL;
	size_t len = 0, len2 = 0;
	int ret = ckpt_manifest_decode(data, size, &m, err, sizeof(err));

	if (ret < 0) {
		/* Every refusal says why. */
		FUZZ_ASSERT(ret != -EBADMSG || err[0] != '\0');
		return;
	}
	FUZZ_ASSERT(ckpt_manifest_encode(&m, &text, &len) == 0);
	FUZZ_ASSERT(ckpt_manifest_decode(text, len, &again, err, sizeof(err)) == 0);
	FUZZ_ASSERT(ckpt_manifest_encode(&again, &text2, &len2) == 0);
	FUZZ_ASSERT(len == len2 && memcmp(text, text2, len) == 0);
	free(text);
	free(text2);
	ckpt_manifest_free(&again);
	ckpt_manifest_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *root;
	char *canon, *text, sum[32];

	one((const char *)data, size);
	root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
	if (!root)
		return 0;
	if (json_is_object(root)) {
		json_object_del(root, "checksum");
		canon = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
		if (canon) {
			snprintf(sum, sizeof(sum), "crc32c:%08x",
				 ckpt_crc32c(0, canon, strlen(canon)));
			free(canon);
			json_object_set_new(root, "checksum", json_string(sum));
			text = json_dumps(root, JSON_COMPACT);
			if (text) {
				one(text, strlen(text));
				free(text);
			}
		}
	}
	json_decref(root);
	return 0;
}
