/* SPDX-License-Identifier: MIT */
/*
 * Restore: a worker reads one rank's shard of a committed step into the
 * client's slot with its own io_uring (O_DIRECT where possible, many reads
 * in flight), checks the index against the manifest digest and every chunk
 * against the index, and writes the tensor table after the data. A step
 * that does not verify gives way to the next older committed step.
 *
 * With the S3 tier on, a step the root lacks (or whose copy of this rank's
 * files does not verify) is fetched from S3 first: the rank's index and
 * shard with parallel ranged GETs into the root (a temporary name, then a
 * rename over whatever was there), then the normal read and verification.
 * Once every rank of a step that only S3 had has fetched it, the manifest
 * is written in the root too and the step is committed there again.
 *
 * One concept, kept in one file although it is long: serving a restore
 * through the tiers (own memory, partner memory, the root, S3). The tiers
 * share one attempt's state, its fallback to the next tier and the next
 * older step, and one verification, so that every tier is checked alike.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agree.h"
#include "ckptd.h"
#include "coord.h"
#include "jobs.h"
#include "memtier.h"
#include "restore.h"
#include "server.h"
#include "peer.h"
#include "s3.h"
#include "uploader.h"
#include "zshard.h"

struct restore {
	struct client *c;
	struct job *job;
	uint32_t slot, flags, seq, rank;
	uint64_t want;
	uint64_t *cand;
	bool *cand_s3only;         /* committed on S3, not in the root */
	uint64_t *root_steps;      /* committed in the root at the start (pinned), ascending */
	size_t n_root;
	uint64_t *pinned_s3;       /* S3's steps as the uploader knew them (pinned there) */
	size_t n_pinned_s3;
	size_t ncand;
	struct s3_origin s3;       /* cfg NULL: no S3 tier */
	/* The S3 manifest of the step being tried, when it came from there. */
	struct ckpt_manifest *s3m;
	char *s3m_json;
	size_t s3m_len;
	bool adopted;              /* the step became committed in the root */
	bool from_s3;              /* the restored step's files came from S3 */
	const char *tier;          /* where the restored shard came from */
	struct retained *own;      /* a departed rank's arena (pinned), or NULL */
	uint8_t *base;
	uint64_t slot_bytes;
	unsigned qd;
	uint64_t req_bytes;
	enum direct_io_mode direct_mode;
	/* An agreed restore's attempt (agree.c): `want` only, no fallback;
	 * the outcome goes to the round, not to the client. NULL otherwise. */
	struct agree_rank *agree;
	/* result */
	int result;
	char err[CKPT_REASON_MAX + 1];
	struct ckpt_msg_restore_ok ok;
};

void reason_append(char *buf, size_t cap, const char *fmt, ...)
{
	size_t len = strnlen(buf, cap);
	va_list ap;

	if (len + 1 >= cap)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + len, cap - len, fmt, ap);
	va_end(ap);
}

/* A chunk of the shard, by position, for checking as soon as it is read. */
struct chunk_ref {
	uint64_t off, len;
	uint64_t k;         /* index into the index's chunk_crc */
	uint32_t extent;    /* tensor index, or table.count for the blob */
};

static int chunk_ref_cmp(const void *a, const void *b)
{
	const struct chunk_ref *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

static struct chunk_ref *chunk_refs(const struct ckpt_index *idx, uint64_t *count)
{
	struct chunk_ref *refs = calloc(idx->chunk_count ? idx->chunk_count : 1, sizeof(*refs));
	uint64_t k = 0;

	if (!refs)
		return NULL;
	for (uint32_t i = 0; i <= idx->table.count; i++) {
		uint64_t base = i < idx->table.count ? idx->table.tensors[i].data_offset : idx->blob_offset;
		uint64_t nbytes = i < idx->table.count ? idx->table.tensors[i].nbytes : idx->blob_bytes;
		for (uint64_t off = 0; off < nbytes && k < idx->chunk_count; off += idx->chunk_bytes, k++) {
			refs[k].off = base + off;
			refs[k].len = nbytes - off < idx->chunk_bytes ? nbytes - off : idx->chunk_bytes;
			refs[k].k = k;
			refs[k].extent = i;
		}
	}
	qsort(refs, k, sizeof(*refs), chunk_ref_cmp);
	*count = k;
	return refs;
}

/*
 * Read the shard into the slot with io_uring (many reads in flight) and
 * check each chunk's CRC-32C as soon as every byte before its end has
 * arrived, so checking overlaps reading.
 */
static int read_and_verify_fd(struct restore *rs, int fd, bool direct,
			      const struct ckpt_index *idx, const char *where,
			      bool *direct_refused, char *err, size_t errlen)
{
	uint64_t bytes = idx->shard_bytes;
	struct io_uring ring;
	struct stat sb;
	uint64_t nrefs = 0, next_ref = 0;
	struct chunk_ref *refs = NULL;
	uint8_t *piece_done = NULL;
	int r;

	if (fstat(fd, &sb) < 0) {
		r = -errno;
		snprintf(err, errlen, "fstat of %s: %s", where, strerror(-r));
		return r;
	}
	if ((uint64_t)sb.st_size != bytes) {
		snprintf(err, errlen, "%s is %lld bytes, the index says %llu", where,
			 (long long)sb.st_size, (unsigned long long)bytes);
		return -CKPT_E_CORRUPT;
	}
	uint64_t req = rs->req_bytes, npieces = (bytes + req - 1) / req;
	refs = chunk_refs(idx, &nrefs);
	piece_done = calloc(npieces ? npieces : 1, 1);
	if (!refs || !piece_done) {
		free(refs);
		free(piece_done);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	r = io_uring_queue_init(rs->qd, &ring, 0);
	if (r < 0) {
		snprintf(err, errlen, "io_uring for %s: %s", where, strerror(-r));
		free(refs);
		free(piece_done);
		return r;
	}
	uint64_t next_piece = 0, watermark_piece = 0;
	unsigned inflight = 0, reported = 0;
	r = 0;
	while (r == 0 && (watermark_piece < npieces || next_ref < nrefs)) {
		while (inflight < rs->qd && next_piece < npieces) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			if (!sqe)
				break;
			uint64_t off = next_piece * req;
			uint64_t len = bytes - off < req ? bytes - off : req;
			io_uring_prep_read(sqe, fd, rs->base + off, (unsigned)len, off);
			io_uring_sqe_set_data64(sqe, next_piece);
			next_piece++;
			inflight++;
		}
		if (inflight) {
			struct io_uring_cqe *cqe;
			io_uring_submit(&ring);
			metrics_add(M_IO_URING_IN_FLIGHT, (double)inflight - reported, "read");
			reported = inflight;
			int w = io_uring_wait_cqe(&ring, &cqe);
			if (w < 0) {
				r = w;
				snprintf(err, errlen, "reading %s: %s", where, strerror(-r));
				break;
			}
			uint64_t piece = io_uring_cqe_get_data64(cqe);
			uint64_t off = piece * req;
			uint64_t len = bytes - off < req ? bytes - off : req;
			int res = cqe->res;
			io_uring_cqe_seen(&ring, cqe);
			inflight--;
			if (res < 0) {
				r = res;
				if (direct && res == -EINVAL)
					*direct_refused = true;
				snprintf(err, errlen, "reading %s at %llu: %s", where,
					 (unsigned long long)off, strerror(-r));
				break;
			}
			if ((uint64_t)res < len) {
				/* Short read inside a file of the right size: finish
				 * it synchronously. */
				ssize_t n = pread(fd, rs->base + off + res, len - (uint64_t)res,
						  (off_t)(off + (uint64_t)res));
				if (n != (ssize_t)(len - (uint64_t)res)) {
					r = n < 0 ? -errno : -CKPT_E_CORRUPT;
					if (direct && r == -EINVAL)
						*direct_refused = true;
					snprintf(err, errlen, "%s ends early at %llu", where,
						 (unsigned long long)(off + (uint64_t)res));
					break;
				}
			}
			piece_done[piece] = 1;
			while (watermark_piece < npieces && piece_done[watermark_piece])
				watermark_piece++;
		}
		uint64_t watermark = watermark_piece * req < bytes ? watermark_piece * req : bytes;
		for (; next_ref < nrefs && refs[next_ref].off + refs[next_ref].len <= watermark; next_ref++) {
			const struct chunk_ref *c = &refs[next_ref];
			if (ckpt_crc32c(0, rs->base + c->off, c->len) != idx->chunk_crc[c->k]) {
				snprintf(err, errlen,
					 "%s: checksum mismatch in %s%s%s at shard offset %llu (chunk %llu)",
					 where, c->extent < idx->table.count ? "tensor \"" : "",
					 c->extent < idx->table.count ? idx->table.tensors[c->extent].name
								      : "the user blob",
					 c->extent < idx->table.count ? "\"" : "",
					 (unsigned long long)c->off, (unsigned long long)c->k);
				r = -CKPT_E_CORRUPT;
				break;
			}
		}
		if (r == 0 && !inflight && next_piece >= npieces && next_ref < nrefs) {
			snprintf(err, errlen, "%s: chunk %llu lies beyond the shard", where,
				 (unsigned long long)refs[next_ref].k);
			r = -CKPT_E_CORRUPT;
		}
	}
	/* Reap what is still in flight before the ring and buffer go away. */
	while (inflight > 0) {
		struct io_uring_cqe *cqe;
		if (io_uring_wait_cqe(&ring, &cqe) < 0)
			break;
		io_uring_cqe_seen(&ring, cqe);
		inflight--;
	}
	io_uring_queue_exit(&ring);
	metrics_add(M_IO_URING_IN_FLIGHT, -(double)reported, "read");
	free(refs);
	free(piece_done);
	return r;
}

/*
 * Some file systems accept O_DIRECT at open and refuse O_DIRECT reads
 * (EINVAL; e.g. FUSE after a remount): such a refusal says nothing about
 * the bytes, so the shard is read again through the page cache, as
 * ckpt-inspect and ckpt-restore do, whatever direct_io says (it is about
 * how saves write).
 */
static int read_and_verify(struct restore *rs, int stepfd, const char *name,
			   const struct ckpt_index *idx, const char *where,
			   char *err, size_t errlen)
{
	bool direct = rs->direct_mode != DIRECT_IO_OFF, refused = false;
	int fd, r;

	fd = openat(stepfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | (direct ? O_DIRECT : 0));
	if (fd < 0 && direct && errno == EINVAL) {
		direct = false;
		fd = openat(stepfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	}
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "opening %s: %s", where, strerror(-r));
		return r;
	}
	r = read_and_verify_fd(rs, fd, direct, idx, where, &refused, err, errlen);
	close(fd);
	if (r == 0 || !refused)
		return r;
	log_warn("restore", "O_DIRECT read refused, reading buffered job=%s rank=%u file=%s "
		 "error=\"%s\"", rs->job->name, rs->rank, where, err);
	metrics_inc(M_RESTORE_BUFFERED_FALLBACK_TOTAL, rs->job->name);
	err[0] = '\0';
	fd = openat(stepfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "opening %s: %s", where, strerror(-r));
		return r;
	}
	refused = false;
	r = read_and_verify_fd(rs, fd, false, idx, where, &refused, err, errlen);
	close(fd);
	return r;
}

/* Every chunk of a shard already in the slot (a partner's copy). */
static int verify_in_memory(struct restore *rs, const struct ckpt_index *idx, const char *where,
			    char *err, size_t errlen)
{
	uint64_t nrefs = 0;
	struct chunk_ref *refs = chunk_refs(idx, &nrefs);
	int r = 0;

	if (!refs) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < nrefs; i++) {
		const struct chunk_ref *c = &refs[i];
		if (c->off + c->len > idx->shard_bytes ||
		    ckpt_crc32c(0, rs->base + c->off, c->len) != idx->chunk_crc[c->k]) {
			snprintf(err, errlen, "%s: checksum mismatch at shard offset %llu (chunk %llu)",
				 where, (unsigned long long)c->off, (unsigned long long)c->k);
			r = -CKPT_E_CORRUPT;
			break;
		}
	}
	free(refs);
	return r;
}

/*
 * A shard already in the slot, from memory (own or a partner's), checked as
 * a file is: its index (ibytes at buf) against the manifest's digest, the
 * index against the manifest and the copy's size, every chunk against the
 * index. 0 with idx filled, or -CKPT_E_CORRUPT with err set.
 */
static int check_from_memory(struct restore *rs, uint64_t step, const struct ckpt_manifest *m,
			     const void *buf, uint64_t ibytes, uint64_t sbytes,
			     struct ckpt_index *idx, const char *where, char *err, size_t errlen)
{
	uint8_t sha[32];
	int r;

	store_sha256(buf, ibytes, sha);
	if (memcmp(sha, m->ranks[rs->rank].index_sha256, 32) != 0) {
		snprintf(err, errlen, "its index does not match the manifest's digest");
		return -CKPT_E_CORRUPT;
	}
	r = ckpt_index_decode(buf, ibytes, idx);
	if (r < 0) {
		snprintf(err, errlen, "its index does not decode: %s", strerror(-r));
		return -CKPT_E_CORRUPT;
	}
	if (idx->shard_bytes != sbytes || idx->step != step || idx->rank != rs->rank ||
	    idx->shard_bytes != m->ranks[rs->rank].shard_bytes) {
		snprintf(err, errlen, "index, manifest and copy disagree");
		ckpt_index_free(idx);
		return -CKPT_E_CORRUPT;
	}
	r = verify_in_memory(rs, idx, where, err, errlen);
	if (r < 0) {
		ckpt_index_free(idx);
		return r;
	}
	return 0;
}

/*
 * The memory tiers, before the root: this node's own memory (the arena a
 * departed rank left, memtier.c), then its partner nodes' memory (partner.c).
 * Returns 1 when the slot holds a verified shard (idx filled, rs->tier
 * set), 0 when neither has it or it does not verify (the root is next).
 */
static int try_memory(struct restore *rs, uint64_t step, const struct ckpt_manifest *m,
		      struct ckpt_index *idx, const char *where)
{
	struct daemon *d = rs->c->d;
	char err[CKPT_REASON_MAX + 1] = "";
	uint64_t ibytes = 0, sbytes = 0;
	int r;

	if (rs->own) {
		const void *ibuf = NULL;
		r = retain_copy(rs->own, step, rs->base, rs->slot_bytes, &ibuf, &ibytes, &sbytes);
		if (r == 0) {
			r = check_from_memory(rs, step, m, ibuf, ibytes, sbytes, idx, where, err,
					      sizeof(err));
			if (r == 0) {
				rs->tier = "memory";
				return 1;
			}
			memset(idx, 0, sizeof(*idx));
			log_info("restore", "own memory not used job=%s step=%llu rank=%u reason=\"%s\"",
				 rs->job->name, (unsigned long long)step, rs->rank, err);
		}
	}
	if (!peer_fetch_enabled(d))
		return 0;
	void *buf = NULL;
	r = peer_fetch(d, rs->job->name, step, rs->rank, rs->base, rs->slot_bytes, &buf, &ibytes,
		       &sbytes, err, sizeof(err));
	if (r == -ENOENT)
		return 0;
	if (r == 0)
		r = check_from_memory(rs, step, m, buf, ibytes, sbytes, idx, where, err, sizeof(err));
	free(buf);
	if (r == 0) {
		rs->tier = "partner";
		return 1;
	}
	memset(idx, 0, sizeof(*idx));
	log_warn("restore", "partner copy not used job=%s step=%llu rank=%u error=\"%s\"",
		 rs->job->name, (unsigned long long)step, rs->rank, err);
	return 0;
}

static int try_step(struct restore *rs, uint64_t step, char *err, size_t errlen)
{
	struct ckpt_manifest m;
	struct ckpt_index idx;
	char dn[32], shard[32], where[CKPT_JOB_NAME_MAX + 64];
	int stepfd = -1, r;
	bool have_m = false, have_idx = false;

	memset(&m, 0, sizeof(m));
	memset(&idx, 0, sizeof(idx));
	r = ckpt_step_dirname(dn, sizeof(dn), step);
	if (r < 0) {
		snprintf(err, errlen, "job %s: step %llu is not a step number", rs->job->name,
			 (unsigned long long)step);
		goto out;
	}
	ckpt_shard_filename(shard, sizeof(shard), rs->rank);
	snprintf(where, sizeof(where), "%s/%s/%s", rs->job->name, dn, shard);
	if (rs->s3m) {
		m = *rs->s3m; /* borrowed: not freed here */
	} else {
		r = store_read_manifest(rs->job->dirfd, step, &m, err, errlen);
		if (r < 0)
			goto out;
		have_m = true;
	}
	if (rs->rank >= m.world_size) {
		snprintf(err, errlen, "%s/%s was saved by %u ranks; rank %u is not among them",
			 rs->job->name, dn, m.world_size, rs->rank);
		r = -CKPT_E_NO_CHECKPOINT;
		goto out;
	}
	bool in_memory = !rs->s3m && try_memory(rs, step, &m, &idx, where) == 1;
	if (in_memory) {
		have_idx = true;
	} else {
		stepfd = openat(rs->job->dirfd, dn, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		if (stepfd < 0) {
			r = -errno;
			snprintf(err, errlen, "opening %s/%s: %s", rs->job->name, dn, strerror(-r));
			goto out;
		}
		r = store_read_index(stepfd, rs->rank, m.ranks[rs->rank].index_sha256, &idx, err,
				     errlen);
		if (r < 0)
			goto out;
		have_idx = true;
	}
	if (idx.shard_bytes != m.ranks[rs->rank].shard_bytes || idx.step != step ||
	    idx.rank != rs->rank) {
		snprintf(err, errlen, "%s/%s: index and manifest disagree for rank %u",
			 rs->job->name, dn, rs->rank);
		r = -CKPT_E_CORRUPT;
		goto out;
	}
	size_t tbytes = ckpt_table_encoded_size(idx.table.tensors, idx.table.count);
	uint64_t toff = (idx.shard_bytes + CKPT_ALIGN - 1) / CKPT_ALIGN * CKPT_ALIGN;
	if (toff + tbytes > rs->slot_bytes) {
		snprintf(err, errlen,
			 "%s: rank %u's shard (%llu bytes plus a %zu-byte table) does not fit a "
			 "%llu-byte slot; connect with a larger max_save_bytes",
			 where, rs->rank, (unsigned long long)idx.shard_bytes, tbytes,
			 (unsigned long long)rs->slot_bytes);
		r = -CKPT_E_TOO_BIG;
		goto out;
	}
	if (!in_memory) {
		r = read_and_verify(rs, stepfd, shard, &idx, where, err, errlen);
		if (r < 0)
			goto out;
	}
	if (!in_memory)
		rs->tier = "root";
	ssize_t n = ckpt_table_encode(idx.table.tensors, idx.table.count, rs->base + toff,
				      rs->slot_bytes - toff);
	if (n < 0) {
		r = (int)n;
		snprintf(err, errlen, "encoding the table: %s", strerror(-r));
		goto out;
	}
	rs->ok.step = step;
	rs->ok.slot = rs->slot;
	rs->ok.data_bytes = idx.shard_bytes;
	rs->ok.table_offset = toff;
	rs->ok.table_bytes = (uint64_t)n;
	rs->ok.blob_offset = idx.blob_offset;
	rs->ok.blob_bytes = idx.blob_bytes;
	r = 0;
out:
	if (stepfd >= 0)
		close(stepfd);
	if (have_idx)
		ckpt_index_free(&idx);
	if (have_m)
		ckpt_manifest_free(&m);
	return r;
}

/* ---- S3 ---------------------------------------------------------------- */

static bool s3_has(const struct restore *rs, uint64_t step)
{
	for (size_t i = 0; i < rs->s3.n_steps; i++)
		if (rs->s3.steps[i] == step)
			return true;
	return false;
}

static void s3m_drop(struct restore *rs)
{
	if (rs->s3m) {
		ckpt_manifest_free(rs->s3m);
		free(rs->s3m);
		rs->s3m = NULL;
	}
	free(rs->s3m_json);
	rs->s3m_json = NULL;
}

/* Fetch one file of the step into stepfd: a temporary name, data synced,
 * renamed over the old one (a reader of the old file keeps its inode). */
static int fetch_file(struct restore *rs, int stepfd, uint64_t step, const char *dn,
		      const char *name, uint64_t size, char *err, size_t errlen)
{
	char key[1200], tmp[48], zname[48];
	size_t nl = strlen(name);
	bool z = rs->s3m && rs->s3m->s3_encoding[0] && nl > 6 && !strcmp(name + nl - 6, ".shard");
	int r;

	snprintf(zname, sizeof(zname), "%s%s", name, ZSHARD_SUFFIX);
	r = ckpt_s3_step_key(key, sizeof(key), rs->s3.job_key, step, z ? zname : name);
	if (r < 0) {
		snprintf(err, errlen, "%s/%s/%s: no S3 key: %s", rs->job->name, dn, name, strerror(-r));
		return r;
	}
	snprintf(tmp, sizeof(tmp), "%s.s3.tmp", name);
	int fd = openat(stepfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0640);
	if (fd < 0) {
		snprintf(err, errlen, "%s/%s/%s: %s", rs->job->name, dn, tmp, strerror(errno));
		return -errno;
	}
	r = z ? s3_sync_get_zshard(rs->s3.cfg, rs->s3.bucket, key, size, fd, 4, NULL, NULL, err, errlen)
		  : s3_sync_get_file(rs->s3.cfg, rs->s3.bucket, key, size, fd, 4, NULL, NULL, err, errlen);
	if (r == 0 && fdatasync(fd) < 0) {
		r = -errno;
		snprintf(err, errlen, "%s/%s/%s: fdatasync: %s", rs->job->name, dn, tmp, strerror(-r));
	}
	close(fd);
	if (r == 0 && renameat(stepfd, tmp, stepfd, name) < 0) {
		r = -errno;
		snprintf(err, errlen, "%s/%s/%s: rename: %s", rs->job->name, dn, name, strerror(-r));
	}
	if (r < 0)
		unlinkat(stepfd, tmp, 0);
	return r;
}

/* Bring this rank's files of `step` from S3 into the root. */
static int fetch_from_s3(struct restore *rs, uint64_t step, char *err, size_t errlen)
{
	char dn[32], key[1200], name[32];
	int r;

	r = ckpt_step_dirname(dn, sizeof(dn), step);
	if (r < 0) {
		snprintf(err, errlen, "job %s: step %llu is not a step number", rs->job->name,
			 (unsigned long long)step);
		return r;
	}
	r = ckpt_s3_step_key(key, sizeof(key), rs->s3.job_key, step, CKPT_MANIFEST_NAME);
	if (r < 0) {
		snprintf(err, errlen, "job %s: no S3 key for step %llu: %s", rs->job->name,
			 (unsigned long long)step, strerror(-r));
		return r;
	}
	s3m_drop(rs);
	r = s3_sync_get_small(rs->s3.cfg, rs->s3.bucket, key, (uint64_t)1 << 30, &rs->s3m_json,
			      &rs->s3m_len, err, errlen);
	if (r < 0)
		return r;
	rs->s3m = calloc(1, sizeof(*rs->s3m));
	if (!rs->s3m)
		return -ENOMEM;
	char why[200] = "";
	r = ckpt_manifest_decode(rs->s3m_json, rs->s3m_len, rs->s3m, why, sizeof(why));
	if (r < 0 || rs->s3m->step != step || strcmp(rs->s3m->job, rs->job->name)) {
		snprintf(err, errlen, "s3://%s/%s: %s", rs->s3.bucket, key,
			 r < 0 ? why : "the manifest is for another job or step");
		free(rs->s3m);
		rs->s3m = NULL;
		return r < 0 ? r : -CKPT_E_CORRUPT;
	}
	if (rs->s3m->s3_encoding[0]) {
		if (strcmp(rs->s3m->s3_encoding, ZSHARD_ENCODING) != 0) {
			snprintf(err, errlen, "s3://%s/%s: shards stored as \"%s\", unknown here",
				 rs->s3.bucket, key, rs->s3m->s3_encoding);
			return -EPROTONOSUPPORT;
		}
		/* The root's copy of the manifest does not say how S3 stores
		 * the shards (FORMAT.md). */
		char *json = NULL;
		size_t len = 0;
		char enc[sizeof(rs->s3m->s3_encoding)];
		memcpy(enc, rs->s3m->s3_encoding, sizeof(enc));
		rs->s3m->s3_encoding[0] = '\0';
		r = ckpt_manifest_encode(rs->s3m, &json, &len);
		memcpy(rs->s3m->s3_encoding, enc, sizeof(enc));
		if (r < 0)
			return r;
		free(rs->s3m_json);
		rs->s3m_json = json;
		rs->s3m_len = len;
	}
	if (rs->rank >= rs->s3m->world_size) {
		snprintf(err, errlen, "s3://%s/%s: saved by %u ranks; rank %u is not among them",
			 rs->s3.bucket, key, rs->s3m->world_size, rs->rank);
		return -CKPT_E_NO_CHECKPOINT;
	}
	if (mkdirat(rs->job->dirfd, dn, 0750) < 0 && errno != EEXIST) {
		snprintf(err, errlen, "%s/%s: %s", rs->job->name, dn, strerror(errno));
		return -errno;
	}
	int stepfd = openat(rs->job->dirfd, dn, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (stepfd < 0) {
		snprintf(err, errlen, "%s/%s: %s", rs->job->name, dn, strerror(errno));
		return -errno;
	}
	const struct ckpt_manifest_rank *mr = &rs->s3m->ranks[rs->rank];
	ckpt_index_filename(name, sizeof(name), rs->rank);
	r = fetch_file(rs, stepfd, step, dn, name, mr->index_bytes, err, errlen);
	if (r == 0) {
		ckpt_shard_filename(name, sizeof(name), rs->rank);
		r = fetch_file(rs, stepfd, step, dn, name, mr->shard_bytes, err, errlen);
	}
	if (r == 0)
		r = store_fsync_dir(stepfd);
	close(stepfd);
	store_fsync_dir(rs->job->dirfd);
	return r;
}

/*
 * Ranks that fetched a step only S3 had; when all of a step's ranks have it
 * verified in the root, the manifest goes there too (written by the worker
 * of the last one) and the step is committed in the root again.
 */
struct adoption {
	struct adoption *next;
	char job[CKPT_JOB_NAME_MAX + 1];
	uint64_t step;
	uint32_t world, have;
	uint8_t *ranks;
};
static pthread_mutex_t adoption_lock = PTHREAD_MUTEX_INITIALIZER;
static struct adoption *adoptions;

static void adopt_rank(struct restore *rs, uint64_t step)
{
	struct adoption *a, **pp;
	char dn[32];

	pthread_mutex_lock(&adoption_lock);
	for (pp = &adoptions; (a = *pp); pp = &a->next)
		if (a->step == step && !strcmp(a->job, rs->job->name))
			break;
	if (!a) {
		a = calloc(1, sizeof(*a));
		if (a)
			a->ranks = calloc(rs->s3m->world_size, 1);
		if (!a || !a->ranks) {
			free(a);
			pthread_mutex_unlock(&adoption_lock);
			return;
		}
		snprintf(a->job, sizeof(a->job), "%s", rs->job->name);
		a->step = step;
		a->world = rs->s3m->world_size;
		a->next = adoptions;
		adoptions = a;
		pp = &adoptions;
	}
	if (rs->rank < a->world && !a->ranks[rs->rank]) {
		a->ranks[rs->rank] = 1;
		a->have++;
	}
	if (a->have == a->world) {
		*pp = a->next;
		free(a->ranks);
		free(a);
		int stepfd = -ERANGE;
		if (ckpt_step_dirname(dn, sizeof(dn), step) >= 0) {
			stepfd = openat(rs->job->dirfd, dn, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
			if (stepfd < 0)
				stepfd = -errno;
		}
		int r = stepfd < 0 ? stepfd
				   : store_write_file_durable(stepfd, CKPT_MANIFEST_NAME, rs->s3m_json,
							      rs->s3m_len);
		if (stepfd >= 0)
			close(stepfd);
		if (r == 0)
			r = store_fsync_dir(rs->job->dirfd);
		if (r == 0) {
			uint64_t latest = 0;
			if (store_read_latest(rs->job->dirfd, &latest) < 0 || latest < step)
				store_write_latest(rs->job->dirfd, step);
			rs->adopted = true;
		} else {
			log_warn("restore", "step fetched from S3 not committed in the root job=%s "
				 "step=%llu error=\"%s\"", rs->job->name, (unsigned long long)step,
				 strerror(-r));
		}
	}
	pthread_mutex_unlock(&adoption_lock);
}

/*
 * Candidates, newest first: the root's steps and S3's (rs->s3.steps),
 * those at or below `step` (all for CKPT_NO_STEP), only `step` itself
 * when it is asked for exactly. Replaces rs->cand.
 */
static int build_candidates(struct restore *rs, uint64_t step, uint32_t flags)
{
	size_t cap = rs->n_root + rs->s3.n_steps;
	uint64_t *cand = calloc(cap ? cap : 1, sizeof(*cand));
	bool *s3only = calloc(cap ? cap : 1, sizeof(*s3only));
	size_t n = 0, ir = rs->n_root, is = rs->s3.n_steps;

	if (!cand || !s3only) {
		free(cand);
		free(s3only);
		return -ENOMEM;
	}
	while (ir > 0 || is > 0) {
		uint64_t s;
		bool only = false;
		if (is > 0 && (ir == 0 || rs->s3.steps[is - 1] > rs->root_steps[ir - 1])) {
			s = rs->s3.steps[--is];
			only = true;
		} else {
			s = rs->root_steps[--ir];
			if (is > 0 && rs->s3.steps[is - 1] == s)
				is--;
		}
		if (step != CKPT_NO_STEP && s > step)
			continue;
		if (step != CKPT_NO_STEP && n == 0 && s != step)
			break; /* the requested step is not committed anywhere */
		s3only[n] = only;
		cand[n++] = s;
		if (flags & CKPT_RESTORE_F_EXACT)
			break;
	}
	free(rs->cand);
	free(rs->cand_s3only);
	rs->cand = cand;
	rs->cand_s3only = s3only;
	rs->ncand = n;
	return 0;
}

/* What S3 holds of the job now (the uploader's view may predate it). */
static void s3_refresh(struct restore *rs)
{
	char err[300] = "";
	uint64_t *steps = NULL;
	size_t n = 0;

	if (s3_sync_list_steps(rs->s3.cfg, rs->s3.bucket, rs->s3.job_key, &steps, &n, err,
			       sizeof(err)) < 0) {
		log_warn("restore", "cannot list S3 job=%s error=\"%s\"", rs->job->name, err);
		return;
	}
	free(rs->s3.steps);
	rs->s3.steps = steps;
	rs->s3.n_steps = n;
}

/* try_step, with S3 behind it: fetch what the root lacks or has damaged. */
static int try_step_tiers(struct restore *rs, size_t i, char *err, size_t errlen)
{
	uint64_t step = rs->cand[i];
	int r = -CKPT_E_NO_CHECKPOINT;
	char err2[CKPT_REASON_MAX + 1] = "";

	if (!rs->cand_s3only[i]) {
		r = try_step(rs, step, err, errlen);
		if (r == 0 || r == -CKPT_E_TOO_BIG || !rs->s3.cfg || !s3_has(rs, step))
			return r;
		log_warn("restore", "root copy does not restore, fetching it from S3 job=%s step=%llu "
			 "rank=%u error=\"%s\"", rs->job->name, (unsigned long long)step, rs->rank, err);
	}
	int f = fetch_from_s3(rs, step, err2, sizeof(err2));
	if (f < 0) {
		if (rs->cand_s3only[i])
			snprintf(err, errlen, "S3: %s", err2);
		else
			reason_append(err, errlen, "; S3: %s", err2);
		s3m_drop(rs);
		if (f == -ENOENT)
			f = -CKPT_E_NO_CHECKPOINT;
		/* S3 holds the step but could not hand it over: that is a read
		 * error (retried, then reported), even when the root's copy is
		 * damaged; only S3's own "not there" leaves the root's verdict. */
		if (r == -CKPT_E_NO_CHECKPOINT || rs->cand_s3only[i] || !restore_error_is_damage(f))
			return f;
		return r;
	}
	/* A root step keeps reading its own manifest; a step only S3 had
	 * reads the S3 one (the same bytes for a step ckptd uploaded). */
	if (!rs->cand_s3only[i])
		s3m_drop(rs);
	err[0] = '\0';
	r = try_step(rs, step, err, errlen);
	if (r == 0) {
		rs->from_s3 = true;
		log_info("restore", "fetched from S3 job=%s step=%llu rank=%u", rs->job->name,
			 (unsigned long long)step, rs->rank);
		if (rs->cand_s3only[i])
			adopt_rank(rs, step);
	}
	s3m_drop(rs);
	return r;
}

/*
 * A step that this rank can never restore: its bytes, index or manifest do
 * not verify or are missing. Anything else (EIO, EINTR, ENOMEM, EACCES, a
 * failed S3 request) says nothing about the checkpoint and is never
 * treated as damage.
 */
bool restore_error_is_damage(int r)
{
	return r == -CKPT_E_CORRUPT || r == -EBADMSG || r == -ENOENT || r == -ENOTDIR ||
	       r == -ELOOP || r == -E2BIG || r == -CKPT_E_NO_CHECKPOINT || r == -EPROTONOSUPPORT;
}

#define RESTORE_ATTEMPTS 3
#define RESTORE_RETRY_MS 200

/* try_step_tiers, again after a read error (a bounded number of times). */
static int try_step_retrying(struct restore *rs, size_t i, char *err, size_t errlen)
{
	for (unsigned attempt = 1;; attempt++) {
		err[0] = '\0';
		int r = try_step_tiers(rs, i, err, errlen);
		if (r == 0 || r == -CKPT_E_TOO_BIG || restore_error_is_damage(r))
			return r;
		if (attempt >= RESTORE_ATTEMPTS) {
			reason_append(err, errlen, " (read error, %u attempts)", attempt);
			return r;
		}
		log_warn("restore", "read error, retrying job=%s step=%llu rank=%u attempt=%u "
			 "error=\"%s\"", rs->job->name, (unsigned long long)rs->cand[i], rs->rank,
			 attempt, err);
		struct timespec ts = { 0, (long)RESTORE_RETRY_MS * attempt * 1000000L };
		nanosleep(&ts, NULL);
	}
}

/* An agreed restore's attempt: exactly rs->want, from the root's manifest
 * as it is now (this daemon's memory may lag), else S3. */
static void restore_run_agreed(struct restore *rs)
{
	char dn[32], path[64], err[CKPT_REASON_MAX + 1];
	uint64_t step = rs->want;

	ckpt_step_dirname(dn, sizeof(dn), step);
	snprintf(path, sizeof(path), "%s/%s", dn, CKPT_MANIFEST_NAME);
	/* Only a definite "not there" sends it to S3; any other error is
	 * for try_step to report. */
	bool in_root = faccessat(rs->job->dirfd, path, F_OK, 0) == 0 || errno != ENOENT;
	if (!in_root && rs->s3.cfg && !rs->s3.current)
		s3_refresh(rs);
	if (!in_root && !(rs->s3.cfg && s3_has(rs, step))) {
		rs->result = -CKPT_E_NO_CHECKPOINT;
		snprintf(rs->err, sizeof(rs->err), "%s/%s is not committed (no %s)%s", rs->job->name,
			 dn, CKPT_MANIFEST_NAME, rs->s3.cfg ? " in the root or on S3" : "");
		return;
	}
	uint64_t *cand = calloc(1, sizeof(*cand));
	bool *s3only = calloc(1, sizeof(*s3only));
	if (!cand || !s3only) {
		free(cand);
		free(s3only);
		rs->result = -ENOMEM;
		snprintf(rs->err, sizeof(rs->err), "out of memory");
		return;
	}
	cand[0] = step;
	s3only[0] = !in_root;
	free(rs->cand);
	free(rs->cand_s3only);
	rs->cand = cand;
	rs->cand_s3only = s3only;
	rs->ncand = 1;
	err[0] = '\0';
	rs->result = try_step_retrying(rs, 0, err, sizeof(err));
	snprintf(rs->err, sizeof(rs->err), "%s", err);
}

static void restore_run(void *arg)
{
	struct restore *rs = arg;
	char err[CKPT_REASON_MAX + 1];

	if (rs->agree) {
		restore_run_agreed(rs);
		return;
	}
	rs->result = -CKPT_E_NO_CHECKPOINT;
	snprintf(rs->err, sizeof(rs->err), "job %s has no committed step%s", rs->job->name,
		 rs->want == CKPT_NO_STEP ? "" : " at or below the one requested");
	if (rs->s3.cfg && !rs->s3.current) {
		/* The tier has not looked at this job yet (e.g. its directory is
		 * gone from the root): ask S3 itself. */
		s3_refresh(rs);
		if (build_candidates(rs, rs->want, rs->flags) < 0) {
			rs->result = -ENOMEM;
			snprintf(rs->err, sizeof(rs->err), "out of memory");
			return;
		}
	}
	for (size_t i = 0; i < rs->ncand; i++) {
		int r = try_step_retrying(rs, i, err, sizeof(err));
		if (r == 0) {
			if (i > 0)
				rs->ok.flags |= CKPT_RESTORE_OK_F_FELL_BACK;
			rs->result = 0;
			return;
		}
		log_warn("restore", "step does not restore job=%s step=%llu rank=%u error=\"%s\"",
			 rs->job->name, (unsigned long long)rs->cand[i], rs->rank, err);
		if (!restore_error_is_damage(r)) {
			/* A read error (or a slot too small) is not a reason to
			 * give this rank an older step than the others get. */
			rs->result = r;
			snprintf(rs->err, sizeof(rs->err), "step %llu: %s%s%s",
				 (unsigned long long)rs->cand[i], err,
				 rs->ok.warning[0] ? "; before that: " : "", rs->ok.warning);
			return;
		}
		reason_append(rs->ok.warning, sizeof(rs->ok.warning), "%sstep %llu not restored: %s",
		       rs->ok.warning[0] ? "; " : "", (unsigned long long)rs->cand[i], err);
		rs->result = -CKPT_E_CORRUPT;
		snprintf(rs->err, sizeof(rs->err), "%s", rs->ok.warning);
	}
}

static void restore_done(void *arg)
{
	struct restore *rs = arg;
	struct client *c = rs->c;
	struct ckpt_msg m;

	for (size_t i = 0; i < rs->n_root; i++)
		job_pin(rs->job, rs->root_steps[i], -1);
	uploader_pin(c->d, rs->job->name, rs->pinned_s3, rs->n_pinned_s3, -1);
	retain_unpin(c->d, rs->own);
	if (rs->adopted)
		coord_adopt(rs->job, rs->ok.step);
	c->d->busy--;
	if (rs->result == 0)
		metrics_add(M_RESTORE_BYTES_TOTAL, (double)rs->ok.data_bytes, rs->job->name,
			    rs->from_s3 ? "s3" : rs->tier ? rs->tier : "root");
	if (rs->agree) {
		/* The round answers the client once every rank has an outcome. */
		agree_attempt_done(rs->agree, rs->want, rs->result, rs->err, &rs->ok,
				   rs->from_s3 ? "s3" : rs->tier ? rs->tier : "root");
		goto free;
	}
	metrics_inc(M_RESTORES_TOTAL, rs->job->name,
		    rs->result < 0 ? "failed"
		    : rs->ok.flags & CKPT_RESTORE_OK_F_FELL_BACK ? "fell_back" : "ok");
	if (!c->dead) {
		memset(&m, 0, sizeof(m));
		m.seq = rs->seq;
		if (rs->result == 0) {
			c->slot_state[rs->slot] = SLOT_RESTORED;
			m.type = CKPT_MSG_RESTORE_OK;
			m.u.restore_ok = rs->ok;
			log_info("restore", "restored job=%s step=%llu rank=%u bytes=%llu tier=%s%s",
				 rs->job->name, (unsigned long long)rs->ok.step, rs->rank,
				 (unsigned long long)rs->ok.data_bytes,
				 rs->from_s3 ? "s3" : rs->tier ? rs->tier : "root",
				 rs->ok.flags & CKPT_RESTORE_OK_F_FELL_BACK ? " fell_back=1" : "");
		} else {
			c->slot_state[rs->slot] = SLOT_CLIENT;
			m.type = CKPT_MSG_ERROR;
			m.u.error.code = rs->result;
			snprintf(m.u.error.message, sizeof(m.u.error.message), "%s", rs->err);
		}
		client_send(c, &m);
	}
free:;
	struct job *job = rs->job;
	job->restores--;
	client_unref(c);
	uploader_origin_free(&rs->s3);
	free(rs->cand);
	free(rs->cand_s3only);
	free(rs->root_steps);
	free(rs->pinned_s3);
	free(rs);
	job_release(job);
}

static int restore_begin(struct client *c, uint32_t slot, uint64_t step, uint32_t flags,
			 uint32_t seq, struct agree_rank *agree)
{
	struct daemon *d = c->d;
	struct job *job = c->job;
	struct restore *rs = calloc(1, sizeof(*rs));

	if (!rs)
		return -ENOMEM;
	/* The root's committed steps (pinned against retention while the
	 * restore runs); S3's are added by the worker, which asks S3. */
	if (uploader_origin(d, job->name, &rs->s3) < 0)
		memset(&rs->s3, 0, sizeof(rs->s3));
	rs->n_root = job->n_committed;
	rs->root_steps = malloc((rs->n_root ? rs->n_root : 1) * sizeof(uint64_t));
	if (!rs->root_steps) {
		uploader_origin_free(&rs->s3);
		free(rs);
		return -ENOMEM;
	}
	if (rs->n_root) /* job->committed is NULL for none */
		memcpy(rs->root_steps, job->committed, rs->n_root * sizeof(uint64_t));
	int r = build_candidates(rs, step, flags);
	if (r < 0) {
		uploader_origin_free(&rs->s3);
		free(rs->root_steps);
		free(rs);
		return r;
	}
	if (rs->ncand == 0 && !rs->s3.cfg && !agree) {
		free(rs->root_steps);
		uploader_origin_free(&rs->s3);
		free(rs->cand);
		free(rs->cand_s3only);
		free(rs);
		return -CKPT_E_NO_CHECKPOINT;
	}
	for (size_t i = 0; i < rs->n_root; i++)
		job_pin(job, rs->root_steps[i], +1);
	if (rs->s3.n_steps && (rs->pinned_s3 = malloc(rs->s3.n_steps * sizeof(uint64_t)))) {
		memcpy(rs->pinned_s3, rs->s3.steps, rs->s3.n_steps * sizeof(uint64_t));
		rs->n_pinned_s3 = rs->s3.n_steps;
		uploader_pin(d, job->name, rs->pinned_s3, rs->n_pinned_s3, +1);
	}
	rs->c = c;
	rs->job = job;
	rs->own = retain_pin(d, job->name, c->rank);
	rs->slot = slot;
	rs->flags = flags;
	rs->seq = seq;
	rs->rank = c->rank;
	rs->want = step;
	rs->base = c->arena + (uint64_t)slot * c->slot_bytes;
	rs->slot_bytes = c->slot_bytes;
	rs->qd = d->cfg->queue_depth < 8 ? d->cfg->queue_depth : 8;
	rs->req_bytes = d->cfg->request_bytes;
	rs->direct_mode = d->cfg->direct_io;
	rs->agree = agree;
	c->slot_state[slot] = SLOT_RESTORING;
	c->refs++;
	d->busy++;
	/* The worker uses the job (its dirfd, name) even if the client goes:
	 * the job stays until restore_done, committed steps in memory or not. */
	job->restores++;
	if (workers_submit(d->workers, restore_run, restore_done, rs) < 0) {
		job->restores--;
		for (size_t i = 0; i < rs->n_root; i++)
			job_pin(job, rs->root_steps[i], -1);
		uploader_pin(d, job->name, rs->pinned_s3, rs->n_pinned_s3, -1);
		retain_unpin(d, rs->own);
		free(rs->pinned_s3);
		c->slot_state[slot] = SLOT_CLIENT;
		c->refs--;
		d->busy--;
		uploader_origin_free(&rs->s3);
		free(rs->cand);
		free(rs->cand_s3only);
		free(rs->root_steps);
		free(rs);
		return -ENOMEM;
	}
	return 0;
}

int restore_start(struct client *c, uint32_t slot, uint64_t step, uint32_t flags,
		  uint32_t seq)
{
	return restore_begin(c, slot, step, flags, seq, NULL);
}

int restore_attempt_start(struct client *c, uint32_t slot, uint64_t step,
			  struct agree_rank *agree)
{
	return restore_begin(c, slot, step, CKPT_RESTORE_F_EXACT, 0, agree);
}
