/* SPDX-License-Identifier: MIT */
/*
 * Fuzz the S3 client's parsers: every reply parser over the input as XML,
 * and the name checks and s3:// URL parser over it as a string. The seed
 * corpus (corpus/) is replayed by meson test with any compiler.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "s3.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *body = (const char *)data;
	char code[64], msg[128];
	if (s3_xml_parse_error(body, size, code, sizeof(code), msg, sizeof(msg)) == 0)
		FUZZ_ASSERT(strlen(code) < sizeof(code) && strlen(msg) < sizeof(msg));

	struct s3_list l;
	if (s3_xml_parse_list(body, size, &l) == 0) {
		for (size_t i = 0; i < l.n_objects; i++)
			FUZZ_ASSERT(l.objects[i].key && l.objects[i].etag);
		for (size_t i = 0; i < l.n_parts; i++)
			FUZZ_ASSERT(l.parts[i].number >= 1 && l.parts[i].number <= S3_PARTS_MAX);
		FUZZ_ASSERT(!l.truncated || (l.next_marker && *l.next_marker));
		s3_list_free(&l);
	}
	char *v = NULL;
	if (s3_xml_get(body, size, "InitiateMultipartUploadResult", "UploadId", &v) == 0)
		FUZZ_ASSERT(v != NULL);
	free(v);

	char *s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	if (s3_key_check(s) == 0)
		FUZZ_ASSERT(strlen(s) <= S3_KEY_MAX && s[0] != '/' && !strstr(s, "//") &&
			    !strstr(s, "/../") && !strchr(s, '\n'));
	struct s3_url u;
	char err[256];
	if (s3_url_parse(s, &u, err, sizeof(err)) == 0) {
		FUZZ_ASSERT(s3_bucket_check(u.bucket) == 0);
		FUZZ_ASSERT(!*u.prefix || s3_key_check(u.prefix) == 0);
		s3_url_free(&u);
	}
	free(s);
	return 0;
}
