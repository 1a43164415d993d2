/* SPDX-License-Identifier: MIT */
#include "corpus.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

int corpus_load(const char *path, struct corpus *c)
{
	int err = 0;
	FILE *f = fopen(path, "rb");
	if (!f)
		return -errno;
	struct stat st;
	if (fstat(fileno(f), &st) < 0) {
		err = -errno;
		goto out;
	}
	memset(c, 0, sizeof(*c));
	c->bytes = malloc((size_t)st.st_size + 1);
	if (!c->bytes) {
		err = -ENOMEM;
		goto out;
	}
	c->len = fread(c->bytes, 1, (size_t)st.st_size, f);
	if (ferror(f)) {
		err = -EIO;
		corpus_free(c);
		goto out;
	}
	c->hash = fnv1a(c->bytes, c->len);
out:
	fclose(f);
	return err;
}

void corpus_free(struct corpus *c)
{
	if (!c)
		return;
	free(c->bytes);
	c->bytes = NULL;
	c->len = 0;
}

/* Keep only running text: roff requests (".XX") and comments go. */
static int keep_line(const char *line)
{
	if (line[0] == '.' || line[0] == '\'')
		return 0;
	if (line[0] == '\\' && line[1] == '"')
		return 0;
	return line[0] != '\n';
}

int corpus_build_manpages(const char *man_dir, const char *cache_path)
{
	char tmp[4096], cmd[8192];
	int err = 0;
	if (strchr(man_dir, '\'') || snprintf(tmp, sizeof(tmp), "%s.tmp.%d", cache_path, (int)getpid()) >= (int)sizeof(tmp))
		return -EINVAL;
	/* LC_ALL=C: the name order, hence the corpus, is the same everywhere. */
	snprintf(cmd, sizeof(cmd),
		 "find '%s' -name '*.gz' -type f 2>/dev/null | LC_ALL=C sort | xargs -r zcat 2>/dev/null",
		 man_dir);
	FILE *in = popen(cmd, "r");
	if (!in)
		return -errno;
	FILE *out = fopen(tmp, "wb");
	if (!out) {
		err = -errno;
		pclose(in);
		return err;
	}
	char *line = NULL;
	size_t cap = 0, total = 0;
	ssize_t n;
	while ((n = getline(&line, &cap, in)) > 0) {
		if (!keep_line(line))
			continue;
		if (fwrite(line, 1, (size_t)n, out) != (size_t)n) {
			err = -EIO;
			break;
		}
		total += (size_t)n;
	}
	free(line);
	pclose(in);
	if (!err && fflush(out) != 0)
		err = -errno;
	if (!err && fsync(fileno(out)) < 0)
		err = -errno;
	if (fclose(out) != 0 && !err)
		err = -errno;
	if (!err && total == 0)
		err = -ENOENT;
	if (!err && rename(tmp, cache_path) < 0)
		err = -errno;
	if (err)
		unlink(tmp);
	return err;
}
