/* SPDX-License-Identifier: MIT */
/*
 * What an upload checks before bytes leave for S3 (see uploader.h,
 * "Verification"), on the worker threads: each rank's index against the
 * manifest (size, SHA-256), kept as the shard's chunk CRCs, and every
 * range of a shard about to be sent against those CRCs. A mismatch is
 * -EBADMSG with what differed; reporting it, and failing the step's
 * upload, is upload.c's. Nothing here talks to S3.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "ckptd.h"
#include "store.h"
#include "uploader_internal.h"

int read_exact(int fd, void *buf, uint64_t len, uint64_t off)
{
	for (uint64_t done = 0; done < len;) {
		ssize_t n = pread(fd, (uint8_t *)buf + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -ENODATA;
		done += (uint64_t)n;
	}
	return 0;
}

/* CRC-32C of len bytes of fd at off, chained onto crc. */
static int crc_file(int fd, uint64_t off, uint64_t len, uint32_t *crc)
{
	uint8_t tmp[65536];

	while (len) {
		size_t n = len < sizeof(tmp) ? (size_t)len : sizeof(tmp);
		int r = read_exact(fd, tmp, n, off);
		if (r < 0)
			return r;
		*crc = ckpt_crc32c(*crc, tmp, n);
		off += n;
		len -= n;
	}
	return 0;
}

/*
 * Worker thread: check that buf, the bytes [off, off + len) of shard o
 * about to leave for S3, match the chunk CRCs of the rank's index. A chunk
 * that reaches outside the range is completed from the file (fd), so every
 * byte in buf is covered by a whole chunk's check. -EBADMSG with the chunk
 * in why on a mismatch.
 */
int verify_range(const struct obj *o, int fd, const uint8_t *buf, uint64_t off,
		 uint64_t len, char *why, size_t cap)
{
	size_t lo = 0, hi = o->nchunks;
	uint64_t end = off + len;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (o->chunks[mid].off + o->chunks[mid].len <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < o->nchunks && o->chunks[i].off < end; i++) {
		const struct vchunk *c = &o->chunks[i];
		uint64_t a = c->off > off ? c->off : off;
		uint64_t b = c->off + c->len < end ? c->off + c->len : end;
		uint32_t crc = 0;
		int r = 0;

		if (c->off < off)
			r = crc_file(fd, c->off, off - c->off, &crc);
		if (r == 0 && b > a)
			crc = ckpt_crc32c(crc, buf + (a - off), (size_t)(b - a));
		if (r == 0 && c->off + c->len > end)
			r = crc_file(fd, end, c->off + c->len - end, &crc);
		if (r < 0)
			return r;
		if (crc != c->crc) {
			snprintf(why, cap, "rank=%u file=%s chunk_offset=%" PRIu64 " chunk_bytes=%u "
				 "crc32c=%08x index_crc32c=%08x", o->rank, o->name, c->off, c->len, crc,
				 c->crc);
			return -EBADMSG;
		}
	}
	return 0;
}

static int chunk_cmp(const void *a, const void *b)
{
	const struct vchunk *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

/*
 * Worker thread: read each rank's index, check its size and SHA-256
 * against the manifest, and keep its chunk CRCs with the rank's shard for
 * verify_range. The first failure goes into t->err / t->why (the task is
 * idle on the loop meanwhile).
 */
void upload_index_run(void *arg)
{
	struct task *t = arg;
	size_t world = t->n_objs / 2;

	for (size_t i = 0; i < world; i++) {
		struct obj *s = &t->objs[i], *x = &t->objs[world + i];
		void *buf = NULL;
		size_t len = 0;
		uint8_t sha[32];
		unsigned int dl;
		struct ckpt_index idx = { 0 };
		int r = store_read_file(t->stepfd, x->name, MANIFEST_MAX, &buf, &len);

		if (r < 0) {
			t->err = r;
			snprintf(t->why, sizeof(t->why), "reading %s of step %" PRIu64 ": %s", x->name,
				 t->step, strerror(-r));
			return;
		}
		if (len != x->size || !EVP_Digest(buf, len, sha, &dl, EVP_sha256(), NULL) ||
		    memcmp(sha, x->index_sha256, 32) != 0) {
			char hex[65];
			ckpt_hex(hex, sha, 32);
			free(buf);
			t->err = -EBADMSG;
			snprintf(t->why, sizeof(t->why), "rank=%zu file=%s bytes=%zu sha256=%s "
				 "manifest_bytes=%" PRIu64 " manifest_sha256=%s", i, x->name, len,
				 len == x->size ? hex : "-", x->size, x->index_hex);
			return;
		}
		r = ckpt_index_decode(buf, len, &idx);
		free(buf);
		if (r < 0) {
			t->err = -EBADMSG;
			snprintf(t->why, sizeof(t->why), "rank=%zu file=%s: not a valid index", i,
				 x->name);
			return;
		}
		s->chunks = calloc(idx.chunk_count ? idx.chunk_count : 1, sizeof(*s->chunks));
		if (!s->chunks) {
			ckpt_index_free(&idx);
			t->err = -ENOMEM;
			snprintf(t->why, sizeof(t->why), "out of memory");
			return;
		}
		/* Chunks: each tensor's extent in table order, then the blob,
		 * each cut into chunk_bytes pieces (FORMAT.md). */
		size_t n = 0;
		uint32_t cb = idx.chunk_bytes;
		for (uint32_t k = 0; k <= idx.table.count; k++) {
			uint64_t eo = k < idx.table.count ? idx.table.tensors[k].data_offset : idx.blob_offset;
			uint64_t el = k < idx.table.count ? idx.table.tensors[k].nbytes : idx.blob_bytes;
			for (uint64_t d = 0; d < el && n < idx.chunk_count; d += cb) {
				s->chunks[n].off = eo + d;
				s->chunks[n].len = (uint32_t)(el - d < cb ? el - d : cb);
				s->chunks[n].crc = idx.chunk_crc[n];
				n++;
			}
		}
		s->nchunks = n;
		qsort(s->chunks, n, sizeof(*s->chunks), chunk_cmp);
		ckpt_index_free(&idx);
	}
}
