/* SPDX-License-Identifier: MIT */
/*
 * Ranged reads (PROTOCOL.md, READ_RANGES): a rank asks for byte ranges of
 * any rank's tensors and blobs of a committed step of its own job, e.g. to
 * load a checkpoint at another world size. A worker reads the step's
 * manifest, each named rank's index (checked against the manifest's
 * digest) and, from the rank's shard in the root, exactly the chunks that
 * cover each range; every chunk is checked against the index's CRC-32C
 * before any of its bytes go into the slot.
 *
 * Served from the root only: the memory tiers hold one rank's own shard,
 * and S3-only steps must be restored into the root first.
 *
 * libckpt cuts a long read into slot-sized requests, and the ranks of a
 * resharded job read the same few files: the manifests and indexes that
 * verified are kept (a few, as copies) and used again while the file is
 * the same one (device, inode, size, times).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptd.h"
#include "coord.h"
#include "jobs.h"
#include "memtier.h"
#include "rangeread.h"
#include "server.h"

/* What the batch needs of one rank's files, loaded at its first read. */
struct rank_files {
	uint32_t rank;
	int result;                 /* 0, or why none of this rank's items can be read */
	char err[CKPT_REASON_MAX + 1];
	struct ckpt_index idx;
	bool have_idx;
	uint64_t *chunk_first;      /* per extent (the tensors, then the blob): its first chunk */
	int fd;                     /* the shard, or -1 */
	char shard[64];             /* "<job>/step-N/rank-R.shard", for messages */
};

struct rangeread {
	struct client *c;
	struct job *job;
	uint32_t seq;
	bool pinned;
	uint8_t *base;              /* the slot */
	struct ckpt_msg_read_ranges rq;
	struct ckpt_msg_read_ranges_ok ok;
	uint64_t bytes;             /* handed over */
	unsigned failed;
	unsigned cached;            /* manifest and indexes found in the cache */
};

/* A read failed: its result, and the batch's message if it is the first. */
static void read_failed(struct rangeread *rr, uint32_t i, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void read_failed(struct rangeread *rr, uint32_t i, int code, const char *fmt, ...)
{
	va_list ap;

	rr->ok.results[i].result = code;
	if (rr->failed++ == 0) {
		va_start(ap, fmt);
		vsnprintf(rr->ok.message, sizeof(rr->ok.message), fmt, ap);
		va_end(ap);
	}
}

/* A file of a committed step that does not match its manifest is damage;
 * anything else (EIO, EACCES, ENOMEM) is an error reading it. */
static int damage_or(int r)
{
	return r == -EBADMSG || r == -ENOENT || r == -EINVAL ? -CKPT_E_CORRUPT : r;
}

/* ---- Verified manifests and indexes of recent reads -------------------- */

/* Which file a cache entry was read from: a step number committed again
 * after retention removed it has new files. */
struct file_id {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime, ctime;
};

/* What a read needs of a step's manifest. */
struct manifest_sum {
	uint32_t world_size;
	struct rank_sum {
		uint8_t index_sha256[32];
		uint64_t shard_bytes;
	} *ranks;                   /* world_size entries */
};

#define CACHE_MANIFESTS 4
#define CACHE_INDEXES 32

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t cache_clock;
static struct cached_manifest {
	uint64_t last_use;          /* 0: unused */
	char job[CKPT_JOB_NAME_MAX + 1];
	uint64_t step;
	struct file_id id;
	struct manifest_sum sum;
} cached_manifests[CACHE_MANIFESTS];
static struct cached_index {
	uint64_t last_use;          /* 0: unused */
	char job[CKPT_JOB_NAME_MAX + 1];
	uint64_t step;
	uint32_t rank;
	uint8_t sha256[32];         /* the manifest's digest it matched */
	struct file_id id;
	struct ckpt_index idx;
} cached_indexes[CACHE_INDEXES];

static int file_id_of(int dirfd, const char *name, struct file_id *id)
{
	struct stat sb;

	if (fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	memset(id, 0, sizeof(*id));
	id->dev = sb.st_dev;
	id->ino = sb.st_ino;
	id->size = sb.st_size;
	id->mtime = sb.st_mtim;
	id->ctime = sb.st_ctim;
	return 0;
}

static bool file_id_eq(const struct file_id *a, const struct file_id *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
	       a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

static int manifest_sum_copy(struct manifest_sum *dst, const struct manifest_sum *src)
{
	dst->world_size = src->world_size;
	dst->ranks = calloc(src->world_size ? src->world_size : 1, sizeof(*dst->ranks));
	if (!dst->ranks)
		return -ENOMEM;
	memcpy(dst->ranks, src->ranks, src->world_size * sizeof(*dst->ranks));
	return 0;
}

static int index_copy(struct ckpt_index *dst, const struct ckpt_index *src)
{
	*dst = *src;
	dst->chunk_crc = NULL;
	if (ckpt_table_copy(&dst->table, &src->table) < 0)
		return -ENOMEM;
	dst->chunk_crc = malloc(src->chunk_count ? src->chunk_count * sizeof(uint32_t) : 1);
	if (!dst->chunk_crc) {
		ckpt_table_free(&dst->table);
		return -ENOMEM;
	}
	memcpy(dst->chunk_crc, src->chunk_crc, src->chunk_count * sizeof(uint32_t));
	return 0;
}

/* The least recently used of n entries of `size` bytes whose first field
 * is last_use. */
static void *cache_victim(void *entries, size_t n, size_t size)
{
	uint8_t *best = entries;

	for (size_t i = 0; i < n; i++) {
		uint8_t *e = (uint8_t *)entries + i * size;

		if (*(uint64_t *)e < *(uint64_t *)best)
			best = e;
	}
	return best;
}

/* The step's manifest, from the cache (1) or read and checked (0); -ENOENT
 * (no manifest: not committed), or another -errno with a reason in err. */
static int manifest_get(const char *job, int jobfd, uint64_t step, const char *dn,
			struct manifest_sum *out, char *err, size_t errlen)
{
	char path[64];
	struct file_id id;
	struct ckpt_manifest m;
	struct cached_manifest *e;
	int r;

	snprintf(path, sizeof(path), "%s/%s", dn, CKPT_MANIFEST_NAME);
	r = file_id_of(jobfd, path, &id);
	if (r < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(-r));
		return r;
	}
	pthread_mutex_lock(&cache_lock);
	for (size_t i = 0; i < CACHE_MANIFESTS; i++) {
		e = &cached_manifests[i];
		if (e->last_use && e->step == step && !strcmp(e->job, job) && file_id_eq(&e->id, &id)) {
			e->last_use = ++cache_clock;
			r = manifest_sum_copy(out, &e->sum);
			pthread_mutex_unlock(&cache_lock);
			if (r < 0)
				snprintf(err, errlen, "out of memory");
			return r < 0 ? r : 1;
		}
	}
	pthread_mutex_unlock(&cache_lock);

	memset(&m, 0, sizeof(m));
	r = store_read_manifest(jobfd, step, &m, err, errlen);
	if (r < 0)
		return r;
	if (strcmp(m.job, job) != 0) {
		snprintf(err, errlen, "%s is job %s's", path, m.job);
		ckpt_manifest_free(&m);
		return -EBADMSG;
	}
	out->world_size = m.world_size;
	out->ranks = calloc(m.world_size ? m.world_size : 1, sizeof(*out->ranks));
	if (!out->ranks) {
		ckpt_manifest_free(&m);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < m.world_size; i++) {
		memcpy(out->ranks[i].index_sha256, m.ranks[i].index_sha256, 32);
		out->ranks[i].shard_bytes = m.ranks[i].shard_bytes;
	}
	ckpt_manifest_free(&m);

	pthread_mutex_lock(&cache_lock);
	e = cache_victim(cached_manifests, CACHE_MANIFESTS, sizeof(cached_manifests[0]));
	free(e->sum.ranks);
	memset(e, 0, sizeof(*e));
	if (manifest_sum_copy(&e->sum, out) == 0) {
		snprintf(e->job, sizeof(e->job), "%s", job);
		e->step = step;
		e->id = id;
		e->last_use = ++cache_clock;
	}
	pthread_mutex_unlock(&cache_lock);
	return 0;
}

/* Rank `rank`'s index, from the cache (1) or read and checked against the
 * manifest's digest (0). Errors as store_read_index. */
static int index_get(const char *job, uint64_t step, int stepfd, uint32_t rank,
		     const uint8_t *sha256, struct ckpt_index *out, char *err, size_t errlen)
{
	char name[32];
	struct file_id id;
	struct cached_index *e;
	int r;

	ckpt_index_filename(name, sizeof(name), rank);
	r = file_id_of(stepfd, name, &id);
	if (r < 0) {
		snprintf(err, errlen, "%s: %s", name, strerror(-r));
		return r;
	}
	pthread_mutex_lock(&cache_lock);
	for (size_t i = 0; i < CACHE_INDEXES; i++) {
		e = &cached_indexes[i];
		if (e->last_use && e->step == step && e->rank == rank && !strcmp(e->job, job) &&
		    !memcmp(e->sha256, sha256, 32) && file_id_eq(&e->id, &id)) {
			e->last_use = ++cache_clock;
			r = index_copy(out, &e->idx);
			pthread_mutex_unlock(&cache_lock);
			if (r < 0)
				snprintf(err, errlen, "out of memory");
			return r < 0 ? r : 1;
		}
	}
	pthread_mutex_unlock(&cache_lock);

	r = store_read_index(stepfd, rank, sha256, out, err, errlen);
	if (r < 0)
		return r;
	pthread_mutex_lock(&cache_lock);
	e = cache_victim(cached_indexes, CACHE_INDEXES, sizeof(cached_indexes[0]));
	if (e->last_use)
		ckpt_index_free(&e->idx);
	memset(e, 0, sizeof(*e));
	if (index_copy(&e->idx, out) == 0) {
		snprintf(e->job, sizeof(e->job), "%s", job);
		e->step = step;
		e->rank = rank;
		memcpy(e->sha256, sha256, 32);
		e->id = id;
		e->last_use = ++cache_clock;
	}
	pthread_mutex_unlock(&cache_lock);
	return 0;
}

static void rank_files_load(struct rank_files *rf, struct rangeread *rr,
			    const struct manifest_sum *m, int stepfd, const char *dn)
{
	const struct rank_sum *mr;
	char name[32], why[CKPT_REASON_MAX + 1] = "";
	struct ckpt_index *idx = &rf->idx;
	struct stat sb;
	uint64_t k = 0;
	int r;

	snprintf(rf->shard, sizeof(rf->shard), "%s/%s/", rr->job->name, dn);
	ckpt_shard_filename(name, sizeof(name), rf->rank);
	snprintf(rf->shard + strlen(rf->shard), sizeof(rf->shard) - strlen(rf->shard), "%s", name);
	if (rf->rank >= m->world_size) {
		rf->result = -ENOENT;
		snprintf(rf->err, sizeof(rf->err), "job %s step %llu was saved by %u ranks: no rank %u",
			 rr->job->name, (unsigned long long)rr->rq.step, m->world_size, rf->rank);
		return;
	}
	mr = &m->ranks[rf->rank];
	r = index_get(rr->job->name, rr->rq.step, stepfd, rf->rank, mr->index_sha256, idx, why,
		      sizeof(why));
	if (r == 1)
		rr->cached++;
	if (r < 0) {
		rf->result = damage_or(r);
		snprintf(rf->err, sizeof(rf->err), "job %s %s: %s", rr->job->name, dn, why);
		return;
	}
	rf->have_idx = true;
	if (idx->step != rr->rq.step || idx->rank != rf->rank ||
	    idx->shard_bytes != mr->shard_bytes || strcmp(idx->job, rr->job->name) != 0) {
		rf->result = -CKPT_E_CORRUPT;
		ckpt_index_filename(name, sizeof(name), rf->rank);
		snprintf(rf->err, sizeof(rf->err),
			 "job %s %s/%s: the index is for job %s step %llu rank %u of %llu bytes, "
			 "the manifest says rank %u of %llu bytes", rr->job->name, dn, name, idx->job,
			 (unsigned long long)idx->step, idx->rank,
			 (unsigned long long)idx->shard_bytes, rf->rank,
			 (unsigned long long)mr->shard_bytes);
		return;
	}
	rf->chunk_first = calloc((size_t)idx->table.count + 1, sizeof(*rf->chunk_first));
	if (!rf->chunk_first) {
		rf->result = -ENOMEM;
		snprintf(rf->err, sizeof(rf->err), "out of memory");
		return;
	}
	/* Chunks are numbered through the extents in table order, then the
	 * blob (FORMAT.md, rank index). */
	for (uint32_t i = 0; i <= idx->table.count; i++) {
		uint64_t nbytes = i < idx->table.count ? idx->table.tensors[i].nbytes : idx->blob_bytes;

		rf->chunk_first[i] = k;
		k += nbytes / idx->chunk_bytes + (nbytes % idx->chunk_bytes != 0);
	}
	ckpt_shard_filename(name, sizeof(name), rf->rank);
	rf->fd = openat(stepfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (rf->fd < 0 || fstat(rf->fd, &sb) < 0) {
		r = -errno;
		rf->result = damage_or(r);
		snprintf(rf->err, sizeof(rf->err), "opening %s: %s", rf->shard, strerror(-r));
		return;
	}
	if ((uint64_t)sb.st_size != idx->shard_bytes) {
		rf->result = -CKPT_E_CORRUPT;
		snprintf(rf->err, sizeof(rf->err), "%s is %lld bytes, its index says %llu", rf->shard,
			 (long long)sb.st_size, (unsigned long long)idx->shard_bytes);
	}
}

static void rank_files_free(struct rank_files *rf)
{
	if (rf->fd >= 0)
		close(rf->fd);
	if (rf->have_idx)
		ckpt_index_free(&rf->idx);
	free(rf->chunk_first);
}

/* Exactly len bytes at off, or -errno; a file that ends first is -ENODATA. */
static int pread_full(int fd, uint8_t *buf, uint64_t len, uint64_t off)
{
	while (len) {
		ssize_t n = pread(fd, buf, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ENODATA;
		buf += n;
		off += (uint64_t)n;
		len -= (uint64_t)n;
	}
	return 0;
}

/*
 * Bytes [offset, offset + length) of extent `ext` (file bytes [base, base +
 * nbytes)) into dst, chunk by chunk, each chunk checked before use. A chunk
 * wholly inside the range is read in place; the range's partial first and
 * last chunks go through the bounce buffer (chunk_bytes).
 */
static int read_extent(struct rank_files *rf, uint32_t ext, const char *what, uint64_t base,
		       uint64_t nbytes, uint64_t offset, uint64_t length, uint8_t *dst,
		       uint8_t *bounce, char *err, size_t errlen)
{
	uint64_t cb = rf->idx.chunk_bytes, end = offset + length;

	if (length == 0)
		return 0;
	for (uint64_t c = offset / cb; c <= (end - 1) / cb; c++) {
		uint64_t cstart = c * cb;
		uint64_t clen = nbytes - cstart < cb ? nbytes - cstart : cb;
		uint64_t k = rf->chunk_first[ext] + c;
		bool whole = cstart >= offset && cstart + clen <= end;
		uint8_t *buf = whole ? dst + (cstart - offset) : bounce;
		uint32_t crc;
		int r;

		r = pread_full(rf->fd, buf, clen, base + cstart);
		if (r < 0) {
			snprintf(err, errlen, "reading %s (file bytes [%llu, %llu), %s): %s", rf->shard,
				 (unsigned long long)(base + cstart),
				 (unsigned long long)(base + cstart + clen), what,
				 r == -ENODATA ? "the file ends first" : strerror(-r));
			return r == -ENODATA ? -CKPT_E_CORRUPT : r;
		}
		crc = ckpt_crc32c(0, buf, clen);
		if (k >= rf->idx.chunk_count || crc != rf->idx.chunk_crc[k]) {
			snprintf(err, errlen,
				 "%s: chunk %llu (file bytes [%llu, %llu), %s) fails its CRC-32C: "
				 "the index says %08x, the file has %08x", rf->shard,
				 (unsigned long long)k, (unsigned long long)(base + cstart),
				 (unsigned long long)(base + cstart + clen), what,
				 k < rf->idx.chunk_count ? rf->idx.chunk_crc[k] : 0, crc);
			return -CKPT_E_CORRUPT;
		}
		if (!whole) {
			uint64_t from = cstart > offset ? cstart : offset;
			uint64_t to = cstart + clen < end ? cstart + clen : end;

			memcpy(dst + (from - offset), bounce + (from - cstart), to - from);
		}
	}
	return 0;
}

static void rangeread_run(void *arg)
{
	struct rangeread *rr = arg;
	const struct ckpt_msg_read_ranges *rq = &rr->rq;
	struct rank_files *files = NULL;
	struct manifest_sum m = { 0 };
	char dn[32], err[CKPT_REASON_MAX + 1] = "";
	uint8_t *bounce = NULL;
	size_t bounce_cap = 0;
	uint64_t cursor = 0;
	uint32_t nfiles = 0;
	int stepfd = -1, r;

	ckpt_step_dirname(dn, sizeof(dn), rq->step);
	r = manifest_get(rr->job->name, rr->job->dirfd, rq->step, dn, &m, err, sizeof(err));
	if (r == 1) {
		rr->cached++;
		r = 0;
	}
	if (r == 0) {
		stepfd = openat(rr->job->dirfd, dn, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		if (stepfd < 0) {
			r = -errno;
			snprintf(err, sizeof(err), "opening %s: %s", dn, strerror(-r));
		}
	}
	files = calloc(rq->count, sizeof(*files));
	if (r == 0 && !files) {
		r = -ENOMEM;
		snprintf(err, sizeof(err), "out of memory");
	}
	for (uint32_t i = 0; i < rq->count; i++) {
		const struct ckpt_msg_read_item *it = &rq->items[i];
		const char *name = it->name_len ? rq->names + it->name_off : NULL;
		struct ckpt_msg_read_result *out = &rr->ok.results[i];
		uint8_t *dst = rr->base + cursor;
		struct rank_files *rf = NULL;
		char what[CKPT_TENSOR_NAME_MAX + 16];
		uint64_t base, nbytes;
		uint32_t ext;

		cursor += it->length;
		if (r == -ENOENT) {
			read_failed(rr, i, -CKPT_E_NO_CHECKPOINT,
				    "job %s step %llu is not committed in the root (no %s/%s)",
				    rr->job->name, (unsigned long long)rq->step, dn, CKPT_MANIFEST_NAME);
			continue;
		}
		if (r < 0) {
			read_failed(rr, i, damage_or(r), "job %s: %s", rr->job->name, err);
			continue;
		}
		for (uint32_t f = 0; f < nfiles && !rf; f++)
			if (files[f].rank == it->rank)
				rf = &files[f];
		if (!rf) {
			rf = &files[nfiles++];
			rf->rank = it->rank;
			rf->fd = -1;
			rank_files_load(rf, rr, &m, stepfd, dn);
		}
		if (rf->result < 0) {
			read_failed(rr, i, rf->result, "%s", rf->err);
			continue;
		}
		if (name) {
			int t = ckpt_table_find(&rf->idx.table, name);
			char q[CKPT_TENSOR_NAME_MAX + 8];

			ckpt_name_quote(q, sizeof(q), name, it->name_len);
			snprintf(what, sizeof(what), "tensor \"%s\"", q);
			if (t < 0) {
				read_failed(rr, i, -ENOENT, "job %s step %llu rank %u has no tensor \"%s\"",
					    rr->job->name, (unsigned long long)rq->step, it->rank, q);
				continue;
			}
			ext = (uint32_t)t;
			base = rf->idx.table.tensors[t].data_offset;
			nbytes = rf->idx.table.tensors[t].nbytes;
		} else {
			snprintf(what, sizeof(what), "the blob");
			ext = rf->idx.table.count;
			base = rf->idx.blob_offset;
			nbytes = rf->idx.blob_bytes;
		}
		out->total = nbytes;
		if (it->offset > nbytes || it->length > nbytes - it->offset) {
			read_failed(rr, i, -ERANGE,
				    "job %s step %llu rank %u, %s: bytes %llu..%llu are beyond its %llu",
				    rr->job->name, (unsigned long long)rq->step, it->rank, what,
				    (unsigned long long)it->offset,
				    (unsigned long long)(it->offset + it->length),
				    (unsigned long long)nbytes);
			continue;
		}
		if (it->length && bounce_cap < rf->idx.chunk_bytes) {
			free(bounce);
			bounce_cap = rf->idx.chunk_bytes;
			bounce = malloc(bounce_cap);
			if (!bounce) {
				bounce_cap = 0;
				read_failed(rr, i, -ENOMEM, "out of memory");
				continue;
			}
		}
		int e = read_extent(rf, ext, what, base, nbytes, it->offset, it->length, dst, bounce,
				    err, sizeof(err));
		if (e < 0) {
			read_failed(rr, i, e, "%s", err);
			continue;
		}
		rr->bytes += it->length;
	}
	for (uint32_t f = 0; f < nfiles; f++)
		rank_files_free(&files[f]);
	free(files);
	free(bounce);
	if (stepfd >= 0)
		close(stepfd);
	free(m.ranks);
}

static void rangeread_done(void *arg)
{
	struct rangeread *rr = arg;
	struct client *c = rr->c;
	struct job *job = rr->job;
	struct ckpt_msg m;

	if (rr->pinned)
		job_pin(job, rr->rq.step, -1);
	c->d->busy--;
	if (rr->failed)
		log_warn("rangeread", "read job=%s step=%llu rank=%u reads=%u failed=%u bytes=%llu "
			 "error=\"%s\"", job->name, (unsigned long long)rr->rq.step, c->rank,
			 rr->rq.count, rr->failed, (unsigned long long)rr->bytes, rr->ok.message);
	else
		log_debug("rangeread", "read job=%s step=%llu rank=%u reads=%u bytes=%llu cached=%u",
			  job->name, (unsigned long long)rr->rq.step, c->rank, rr->rq.count,
			  (unsigned long long)rr->bytes, rr->cached);
	if (!c->dead) {
		c->slot_state[rr->rq.slot] = SLOT_CLIENT;
		memset(&m, 0, sizeof(m));
		m.type = CKPT_MSG_READ_RANGES_OK;
		m.seq = rr->seq;
		m.u.read_ranges_ok = rr->ok;
		client_send(c, &m);
	}
	job->restores--;
	client_unref(c);
	free(rr);
	job_release(job);
}

static void refuse(struct client *c, uint32_t seq, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void refuse(struct client *c, uint32_t seq, int code, const char *fmt, ...)
{
	char why[CKPT_REASON_MAX + 1];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	log_warn("rangeread", "refused job=%s rank=%u error=\"%s\"", c->job->name, c->rank, why);
	client_send_error(c, seq, code, "%s", why);
}

void rangeread_start(struct client *c, const struct ckpt_msg *m)
{
	const struct ckpt_msg_read_ranges *rq = &m->u.read_ranges;
	struct daemon *d = c->d;
	struct job *job = c->job;
	struct rangeread *rr;
	uint64_t sum = 0;

	/* The decoder has bounded the sum to 64 bits; the slot bounds it here.
	 * Reads are of the client's own job: the request cannot name another. */
	for (uint32_t i = 0; i < rq->count; i++)
		sum += rq->items[i].length;
	if (sum > c->slot_bytes) {
		refuse(c, m->seq, -CKPT_E_TOO_BIG,
		       "READ_RANGES of %llu bytes does not fit a slot of %llu bytes",
		       (unsigned long long)sum, (unsigned long long)c->slot_bytes);
		return;
	}
	rr = calloc(1, sizeof(*rr));
	if (!rr) {
		refuse(c, m->seq, -ENOMEM, "READ_RANGES: out of memory");
		return;
	}
	rr->c = c;
	rr->job = job;
	rr->seq = m->seq;
	rr->rq = *rq;
	rr->base = c->arena + (uint64_t)rq->slot * c->slot_bytes;
	rr->ok.step = rq->step;
	rr->ok.slot = rq->slot;
	rr->ok.count = rq->count;
	/* Retention keeps the step while it is read (a step committed by
	 * another node that this one has not heard of is not pinned). */
	rr->pinned = job_is_committed(job, rq->step);
	if (rr->pinned)
		job_pin(job, rq->step, +1);
	retain_note_slot_used(c, rq->slot);
	c->slot_state[rq->slot] = SLOT_RESTORING;
	c->refs++;
	d->busy++;
	job->restores++;
	if (workers_submit(d->workers, rangeread_run, rangeread_done, rr) < 0) {
		job->restores--;
		d->busy--;
		c->refs--;
		c->slot_state[rq->slot] = SLOT_CLIENT;
		if (rr->pinned)
			job_pin(job, rq->step, -1);
		free(rr);
		refuse(c, m->seq, -ENOMEM, "READ_RANGES: out of memory");
	}
}
