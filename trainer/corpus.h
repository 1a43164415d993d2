/* SPDX-License-Identifier: MIT */
/* Training text for ckpt-train: any file of bytes (UTF-8 text). */
#ifndef CKPT_TRAIN_CORPUS_H
#define CKPT_TRAIN_CORPUS_H

#include <stddef.h>
#include <stdint.h>

struct corpus {
	uint8_t *bytes;
	size_t len;
	uint64_t hash; /* FNV-1a of the bytes: a resume must see the same text */
};

/* Read the whole file at path. Returns 0 or -errno. */
int corpus_load(const char *path, struct corpus *c);
void corpus_free(struct corpus *c);

/*
 * Build the default Japanese corpus at cache_path from the manual pages
 * that Debian's manpages-ja package installs under man_dir (gzip'd roff):
 * every page decompressed in name order, roff requests and comments
 * dropped. Written to a temporary file, fsync'd and renamed, so a
 * concurrent or interrupted build never leaves a partial cache.
 * Returns 0, -ENOENT if man_dir has no pages, or -errno.
 */
int corpus_build_manpages(const char *man_dir, const char *cache_path);

#endif
