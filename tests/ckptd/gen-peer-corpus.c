/* SPDX-License-Identifier: MIT */
/*
 * Writes the seed corpus of fuzz-peer: a message of every type (peer-sample.h),
 * tagged under the fuzzer's key (<type>-keyed) and without a key (<type>).
 *   gen-peer-corpus <dir>   (writes <dir>/peer/...)
 * The output is committed under tests/ckptd/corpus/; run it again only
 * when the encoding changes.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "peer-sample.h"
#include "peerwire.h"

static int errors;

static void put(const char *dir, const char *name, const void *data, size_t len)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		errors++;
	}
}

int main(int argc, char **argv)
{
	char dir[4096];

	if (argc != 2) {
		fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
		return 2;
	}
	snprintf(dir, sizeof(dir), "%s/peer", argv[1]);
	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		fprintf(stderr, "%s: %s\n", dir, strerror(errno));
		return 1;
	}
	for (unsigned t = 1; t < PEER_TYPE_MAX; t++) {
		uint8_t buf[PEER_MSG_MAX];
		struct peer_msg m;
		char name[64];
		size_t i;

		snprintf(name, sizeof(name), "%s", peer_type_name(t));
		for (i = 0; name[i]; i++)
			name[i] = name[i] == '_' ? '-' : (char)tolower((unsigned char)name[i]);
		peer_sample(&m, t);
		for (int keyed = 0; keyed <= 1; keyed++) {
			int n = keyed ? peer_encode(&m, peer_sample_key, sizeof(peer_sample_key),
						    buf, sizeof(buf))
				      : peer_encode(&m, NULL, 0, buf, sizeof(buf));
			if (n < 0) {
				fprintf(stderr, "encode %s: %s\n", name, strerror(-n));
				errors++;
				continue;
			}
			if (keyed)
				snprintf(name + i, sizeof(name) - i, "-keyed");
			put(dir, name, buf, (size_t)n);
		}
	}
	return errors ? 1 : 0;
}
