/* SPDX-License-Identifier: MIT */
/*
 * Shard writes: straight from the client's arena slot to
 * step-N/rank-R.shard with io_uring (O_DIRECT where the file system takes
 * it), many requests in flight across all saves, while a worker checksums
 * the same bytes. Then fdatasync, the rank index (written durably by a
 * worker), and a vote to the coordinator.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptd.h"
#include "coord.h"
#include "memtier.h"
#include "server.h"
#include "writer.h"
#include "peer.h"

enum io_op { IO_WRITE = 1, IO_FSYNC = 2 };

struct io_req {
	struct save_job *job;
	uint64_t start;            /* where the request began (a short write moves off) */
	uint64_t off;
	uint32_t len;
	uint8_t op;
};

struct save_job {
	struct save_job *next;     /* d->writing */
	struct daemon *d;
	struct client *c;
	struct step *st;
	uint32_t slot, rank;
	uint64_t step;
	uint8_t *base;
	uint64_t data_bytes, blob_offset, blob_bytes;
	uint32_t chunk_bytes;
	struct ckpt_table table;
	int stepfd, fd;
	int job_dirfd;             /* the job's, borrowed: the job outlives its saves */
	bool direct;
	uint64_t next_off, written;
	unsigned inflight;
	int err;
	char errmsg[CKPT_REASON_MAX + 1];
	bool sync_sent, synced, csum_done, index_started;
	/* The checksums run ahead of the writes: a range is written only
	 * once every chunk in it was checksummed (csum_upto, published by the
	 * worker; with extents out of order, only when all are). */
	bool csum_ordered;
	_Atomic uint64_t csum_upto;
	int ring_efd;              /* wakes the loop to submit what became writable */
	/* The re-check of the slot (slot_recheck) trails the writes: chunks
	 * inside the written prefix go to a worker in batches. */
	uint32_t request_bytes;    /* this save's write request size */
	uint8_t *req_done;         /* per request: every byte of it written */
	uint64_t nreqs, reqs_prefix;
	uint64_t *chunk_off;       /* per chunk: shard offset, length, extent */
	uint32_t *chunk_len, *chunk_ext;
	uint64_t recheck_next;     /* chunks before it re-checked */
	bool recheck_running;
	uint32_t *chunk_crc;
	uint64_t nchunks;
	uint32_t blob_crc;
	struct rank_vote vote;
	void *index_buf;           /* the encoded index, for a partner copy */
	int64_t started_ns;
	char shard_name[32], index_name[32], step_name[32];
};

static void inflight_gauge(struct daemon *d)
{
	metrics_set(M_IO_URING_IN_FLIGHT, d->ring_inflight, "write");
}

void slots_watch(struct client *c)
{
	bool all_busy = !c->dead && c->slots > 0 && c->slot_state;

	for (uint32_t i = 0; all_busy && i < c->slots; i++)
		if (c->slot_state[i] != SLOT_SAVING)
			all_busy = false;
	if (all_busy && !c->slots_busy_since) {
		c->slots_busy_since = ckpt_mono_ns();
	} else if (!all_busy && c->slots_busy_since) {
		double secs = (double)(ckpt_mono_ns() - c->slots_busy_since) / 1e9;
		uint32_t warn_ms = c->d->cfg->stall_warn_ms;

		c->slots_busy_since = 0;
		metrics_add(M_SLOT_WAIT_SECONDS_TOTAL, secs, c->job->name);
		if (warn_ms && secs * 1000 >= warn_ms) {
			log_warn("writer", "no free staging slot job=%s rank=%u seconds=%.3f slots=%u",
				 c->job->name, c->rank, secs, c->slots);
			events_stall(c->job->name, c->rank, secs);
		}
	}
}

int writer_init(struct daemon *d)
{
	struct io_uring_params p = { 0 };
	int r;

	r = io_uring_queue_init_params(d->cfg->queue_depth * 2 < 8 ? 8 : d->cfg->queue_depth * 2,
				       &d->ring, &p);
	if (r < 0)
		return r;
	d->ring_ready = true;
	r = io_uring_register_eventfd(&d->ring, d->ring_efd);
	if (r < 0)
		return r;
	if (d->cfg->fixed_buffers) {
		d->fixed_used = calloc(FIXED_BUFFERS, 1);
		r = d->fixed_used ? io_uring_register_buffers_sparse(&d->ring, FIXED_BUFFERS) : -ENOMEM;
		if (r < 0)
			log_info("writer", "no registered buffers, plain writes: %s", strerror(-r));
		d->fixed_ok = r == 0;
	}
	return 0;
}

void writer_register_arena(struct client *c)
{
	struct daemon *d = c->d;
	unsigned n = (unsigned)((c->arena_bytes + FIXED_PIECE - 1) / FIXED_PIECE);
	struct iovec iov[64];
	unsigned base, run = 0;
	int r;

	c->fixed_base = -1;
	if (!d->fixed_ok || n == 0 || n > 64)
		return;
	for (base = 0; base < FIXED_BUFFERS; base++) {
		run = d->fixed_used[base] ? 0 : run + 1;
		if (run == n)
			break;
	}
	if (run != n)
		return;
	base = base + 1 - n;
	for (unsigned i = 0; i < n; i++) {
		uint64_t off = (uint64_t)i * FIXED_PIECE;
		iov[i].iov_base = c->arena + off;
		iov[i].iov_len = c->arena_bytes - off < FIXED_PIECE ? c->arena_bytes - off : FIXED_PIECE;
	}
	/* Pins the pages: refused beyond RLIMIT_MEMLOCK without
	 * CAP_IPC_LOCK, in which case plain writes do the job. */
	r = io_uring_register_buffers_update_tag(&d->ring, base, iov, NULL, n);
	if (r < 0) {
		log_debug("writer", "arena not registered job=%s rank=%u error=\"%s\"",
			  c->job->name, c->rank, strerror(-r));
		return;
	}
	for (unsigned i = 0; i < n; i++)
		d->fixed_used[base + i] = 1;
	c->fixed_base = (int)base;
	c->fixed_count = n;
}

void writer_unregister_arena(struct client *c)
{
	struct daemon *d = c->d;
	struct iovec iov[64];

	if (c->fixed_base < 0 || !d->ring_ready)
		return;
	memset(iov, 0, sizeof(iov));
	io_uring_register_buffers_update_tag(&d->ring, (unsigned)c->fixed_base, iov, NULL,
					     c->fixed_count);
	for (unsigned i = 0; i < c->fixed_count; i++)
		d->fixed_used[c->fixed_base + (int)i] = 0;
	c->fixed_base = -1;
}

void writer_fini(struct daemon *d)
{
	if (d->ring_ready)
		io_uring_queue_exit(&d->ring);
	d->ring_ready = false;
	free(d->fixed_used);
	d->fixed_used = NULL;
}

/* Queue a write of [off, off+len) of the job's slot, from a registered
 * buffer when the range lies inside one. */
static void prep_write(struct save_job *j, struct io_uring_sqe *sqe, uint64_t off, uint32_t len)
{
	struct client *c = j->c;
	uint8_t *addr = j->base + off;

	if (c->fixed_base >= 0 && len > 0) {
		uint64_t aoff = (uint64_t)(addr - c->arena);
		uint64_t piece = aoff / FIXED_PIECE;
		if ((aoff + len - 1) / FIXED_PIECE == piece) {
			io_uring_prep_write_fixed(sqe, j->fd, addr, len, off,
						  c->fixed_base + (int)piece);
			return;
		}
	}
	io_uring_prep_write(sqe, j->fd, addr, len, off);
}

static void job_set_error(struct save_job *j, int err, const char *what)
{
	if (j->err)
		return;
	j->err = err;
	snprintf(j->errmsg, sizeof(j->errmsg), "%s %s/%s/%s for rank %u, step %llu: %s",
		 what, j->st->job->name, j->step_name, j->shard_name, j->rank,
		 (unsigned long long)j->step, strerror(-err));
}

/* The extents (tensors in table order, then the blob) lie in ascending
 * shard order: what is checksummed is a prefix of the shard. */
static bool extents_ordered(const struct save_job *j)
{
	uint64_t end = 0;

	for (uint32_t i = 0; i < j->table.count; i++) {
		const struct ckpt_tensor *t = &j->table.tensors[i];
		if (t->data_offset < end)
			return false;
		end = t->data_offset + t->nbytes;
	}
	return j->blob_bytes == 0 || j->blob_offset >= end;
}

static void csum_publish(struct save_job *j, uint64_t upto, uint64_t *woken)
{
	atomic_store_explicit(&j->csum_upto, upto, memory_order_release);
	/* Wake the loop about once per write request's worth. */
	if (upto - *woken >= j->d->cfg->request_bytes || upto == UINT64_MAX) {
		*woken = upto;
		/* A failed write means the counter is already non-zero:
		 * the loop wakes anyway. */
		(void)eventfd_write(j->ring_efd, 1);
	}
}

/* CRC-32C of each chunk of one extent into chunk_crc[*k...], and of the
 * whole extent (combined from its chunks), publishing progress. */
static uint32_t extent_crc_publish(struct save_job *j, uint64_t offset, uint64_t nbytes,
				   uint64_t *k, uint64_t *woken)
{
	uint32_t whole = 0;

	for (uint64_t off = 0; off < nbytes; off += j->chunk_bytes) {
		uint64_t n = nbytes - off < j->chunk_bytes ? nbytes - off : j->chunk_bytes;
		uint32_t crc = ckpt_crc32c(0, j->base + offset + off, n);
		j->chunk_crc[(*k)++] = crc;
		whole = off ? ckpt_crc32c_combine(whole, crc, n) : crc;
		if (j->csum_ordered)
			csum_publish(j, offset + off + n, woken);
	}
	return whole;
}

/* Worker: checksum every extent (tensors, then the blob) chunk by chunk. */
static void csum_run(void *arg)
{
	struct save_job *j = arg;
	uint64_t k = 0, woken = 0;

	for (uint32_t i = 0; i < j->table.count; i++) {
		struct ckpt_tensor *t = &j->table.tensors[i];
		t->crc32c = extent_crc_publish(j, t->data_offset, t->nbytes, &k, &woken);
	}
	j->blob_crc = extent_crc_publish(j, j->blob_offset, j->blob_bytes, &k, &woken);
	csum_publish(j, UINT64_MAX, &woken);
}

/*
 * The slot must still hold what was checksummed once its bytes are
 * written. A rank that writes into its slot after ckpt_save_finish (say an
 * unsynchronised GPU copy into reserved memory) may have changed bytes
 * after they were checksummed and before or while they were written; the
 * index would then describe other bytes than the shard, or the shard other
 * bytes than the rank had. Every chunk is checksummed again once its write
 * completed (the writes only ever start after the first checksum of their
 * chunks); one that differs fails the save, naming the tensor and offset.
 */
struct recheck {
	struct save_job *j;
	uint64_t k0, k1;
	int result;
	char errmsg[CKPT_REASON_MAX + 1];
};

static void recheck_run(void *arg)
{
	struct recheck *rc = arg;
	struct save_job *j = rc->j;

	for (uint64_t k = rc->k0; k < rc->k1; k++) {
		if (ckpt_crc32c(0, j->base + j->chunk_off[k], j->chunk_len[k]) == j->chunk_crc[k])
			continue;
		bool blob = j->chunk_ext[k] == j->table.count;
		uint64_t ext_off = blob ? j->blob_offset
					: j->table.tensors[j->chunk_ext[k]].data_offset;
		uint64_t off = j->chunk_off[k] - ext_off;
		snprintf(rc->errmsg, sizeof(rc->errmsg),
			 "rank %u wrote into its slot after ckpt_save_finish: step %llu, "
			 "%s%s%s bytes %llu..%llu changed while ckptd saved them (%s/%s/%s)",
			 j->rank, (unsigned long long)j->step, blob ? "the blob" : "tensor '",
			 blob ? "" : j->table.tensors[j->chunk_ext[k]].name, blob ? "," : "',",
			 (unsigned long long)off, (unsigned long long)(off + j->chunk_len[k] - 1),
			 j->st->job->name, j->step_name, j->shard_name);
		rc->result = -CKPT_E_CORRUPT;
		return;
	}
}

static void recheck_pump(struct save_job *j);
static void job_advance(struct save_job *j);

static void recheck_done(void *arg)
{
	struct recheck *rc = arg;
	struct save_job *j = rc->j;

	j->recheck_running = false;
	if (rc->result < 0 && !j->err) {
		j->err = rc->result;
		memcpy(j->errmsg, rc->errmsg, sizeof(j->errmsg));
	}
	j->recheck_next = rc->k1;
	free(rc);
	recheck_pump(j);
	job_advance(j);
}

#define RECHECK_BATCH (32ull << 20)

/* Loop: hand the chunks that lie in the written prefix to a worker. */
static void recheck_pump(struct save_job *j)
{
	uint64_t prefix = j->reqs_prefix * j->request_bytes, k1, bytes = 0;
	bool all = j->reqs_prefix == j->nreqs;
	struct recheck *rc;

	if (j->recheck_running || j->err || !j->csum_done || j->recheck_next >= j->nchunks)
		return;
	if (!j->csum_ordered && !all)
		return;
	for (k1 = j->recheck_next; k1 < j->nchunks; k1++) {
		if (!all && j->chunk_off[k1] + j->chunk_len[k1] > prefix)
			break;
		bytes += j->chunk_len[k1];
	}
	if (k1 == j->recheck_next || (k1 < j->nchunks && bytes < RECHECK_BATCH))
		return;
	rc = calloc(1, sizeof(*rc));
	if (rc) {
		rc->j = j;
		rc->k0 = j->recheck_next;
		rc->k1 = k1;
	}
	if (!rc || workers_submit(j->d->workers, recheck_run, recheck_done, rc) < 0) {
		free(rc);
		job_set_error(j, -ENOMEM, "re-checking the slot of");
		return;
	}
	j->recheck_running = true;
}

static void job_advance(struct save_job *j);

static void csum_done(void *arg)
{
	struct save_job *j = arg;
	struct daemon *d = j->d;

	j->csum_done = true;
	recheck_pump(j);
	job_advance(j);
	writer_pump(d); /* writes that waited for the checksums */
}

/* Whether the next write request of j covers only checksummed chunks. */
static bool csum_covers(struct save_job *j, uint64_t len)
{
	if (j->csum_done)
		return true;
	return atomic_load_explicit(&j->csum_upto, memory_order_acquire) >= j->next_off + len;
}

/*
 * Write the index in place and fdatasync it. No temp file and rename: the
 * step directory is invisible to every reader until its manifest exists,
 * and the commit fsyncs the directory before writing the manifest.
 */
static int write_index(int stepfd, const char *name, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	int fd = openat(stepfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0640);
	int r = 0;

	if (fd < 0)
		return -errno;
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			break;
		}
		p += n;
		len -= (size_t)n;
	}
	if (r == 0 && fdatasync(fd) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	return r;
}

/*
 * Worker, before the vote: on a node that does not lead a group, the vote
 * goes to a leader that never fsyncs this node's view of the directories
 * (on a shared root each client has its own; on a node-local cache only
 * this node can), so the entries of this rank's shard and index in the
 * step directory, and the step directory's own entry in the job
 * directory, are made durable here. A single daemon or the leader does
 * both in its commit, before the manifest.
 */
static int entries_durable(struct save_job *j)
{
	const struct daemon *d = j->d;
	int r;

	if (coord_is_leader(d))
		return 0;
	r = store_fsync_dir(j->stepfd);
	if (r < 0) {
		snprintf(j->errmsg, sizeof(j->errmsg), "fsync %s/%s for rank %u, step %llu: %s",
			 j->st->job->name, j->step_name, j->rank, (unsigned long long)j->step,
			 strerror(-r));
		return r;
	}
	r = store_fsync_dir(j->job_dirfd);
	if (r < 0)
		snprintf(j->errmsg, sizeof(j->errmsg), "fsync %s for rank %u, step %llu: %s",
			 j->st->job->name, j->rank, (unsigned long long)j->step, strerror(-r));
	return r;
}

/* Worker: encode and durably write the rank index. */
static void index_run(void *arg)
{
	struct save_job *j = arg;
	struct ckpt_index idx;
	void *buf = NULL;
	ssize_t n;
	int r;

	memset(&idx, 0, sizeof(idx));
	snprintf(idx.job, sizeof(idx.job), "%s", j->st->job->name);
	idx.step = j->step;
	idx.rank = j->rank;
	idx.world_size = j->st->world_size;
	idx.chunk_bytes = j->chunk_bytes;
	idx.shard_bytes = j->data_bytes;
	idx.blob_offset = j->blob_offset;
	idx.blob_bytes = j->blob_bytes;
	idx.blob_crc32c = j->blob_crc;
	idx.created_unix_ns = 0;
	{
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		idx.created_unix_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	}
	idx.table = j->table;
	idx.chunk_count = (uint32_t)j->nchunks;
	idx.chunk_crc = j->chunk_crc;
	n = ckpt_index_encode(&idx, &buf);
	if (n < 0) {
		r = (int)n;
		goto fail;
	}
	r = write_index(j->stepfd, j->index_name, buf, (size_t)n);
	if (r < 0)
		goto fail;
	r = entries_durable(j);
	if (r < 0)
		goto fail_msg;
	store_sha256(buf, (size_t)n, j->vote.index_sha256);
	j->vote.index_bytes = (uint64_t)n;
	metrics_add(M_WRITTEN_BYTES_TOTAL, (double)n, j->st->job->name);
	j->index_buf = buf;
	return;
fail:
	snprintf(j->errmsg, sizeof(j->errmsg),
		 "writing index %s/%s/%s for rank %u, step %llu: %s",
		 j->st->job->name, j->step_name, j->index_name, j->rank,
		 (unsigned long long)j->step, strerror(-r));
fail_msg:
	free(buf);
	j->err = r;
}

static void job_free(struct save_job *j)
{
	if (j->fd >= 0)
		close(j->fd);
	if (j->stepfd >= 0)
		close(j->stepfd);
	ckpt_table_free(&j->table);
	ckpt_table_free(&j->vote.table);
	free(j->chunk_crc);
	free(j->chunk_off);
	free(j->chunk_len);
	free(j->chunk_ext);
	free(j->req_done);
	free(j->index_buf);
	free(j);
}

static void writing_remove(struct save_job *j)
{
	for (struct save_job **p = &j->d->writing; *p; p = &(*p)->next) {
		if (*p == j) {
			*p = j->next;
			break;
		}
	}
}

/* The save is over, durable or not: free the slot, tell the rank and the
 * coordinator. */
static void job_finish(struct save_job *j)
{
	struct daemon *d = j->d;
	struct client *c = j->c;
	struct step *st = j->st;
	double secs = (double)(ckpt_mono_ns() - j->started_ns) / 1e9;

	writing_remove(j);
	metrics_add(M_QUEUE_DEPTH, -1, "write");
	/* A durable shard of a step still open is copied to the partner
	 * nodes straight from the slot, which stays ckptd's until then; also
	 * when its rank died meanwhile (the job was killed right after the
	 * save): the copy holds the client, so the arena stays mapped, and
	 * this shard is what a replaced node will restore from. */
	bool held = false;
	if (!j->err && st->state != STEP_FAILED)
		retain_note_durable(c, j->slot, j->step, j->data_bytes, j->index_buf,
				    j->vote.index_bytes);
	if (!j->err && st->state != STEP_FAILED && d->peer) {
		j->vote.shard_bytes = j->data_bytes;
		j->vote.blob_bytes = j->blob_bytes;
		j->vote.blob_crc32c = j->blob_crc;
		held = peer_copy_start(c, j->slot, st, j->rank, &j->vote, j->index_buf);
		j->index_buf = NULL;
	}
	uint32_t freed = held ? CKPT_NO_SLOT : j->slot;
	if (!held && !c->dead && j->slot < c->slots) {
		c->slot_state[j->slot] = SLOT_CLIENT;
		slots_watch(c);
	}
	if (j->err) {
		log_warn("writer", "save failed job=%s step=%llu rank=%u error=\"%s\"",
			 st->job->name, (unsigned long long)j->step, j->rank, j->errmsg);
		if (!c->dead)
			client_send_status(c, j->step, CKPT_STATE_FAILED, j->err, j->slot,
					   j->errmsg);
		coord_save_done(st, j->rank);
		coord_fail(st, -CKPT_E_ABORTED, "%s", j->errmsg);
	} else {
		log_info("writer", "durable job=%s step=%llu rank=%u bytes=%llu seconds=%.3f direct=%d",
			 st->job->name, (unsigned long long)j->step, j->rank,
			 (unsigned long long)j->data_bytes, secs, j->direct);
		metrics_observe(M_TIME_TO_DURABLE_SECONDS, secs, st->job->name);
		if (st->state == STEP_FAILED) {
			if (!c->dead)
				client_send_status(c, j->step, CKPT_STATE_FAILED, st->error,
						   j->slot, st->reason);
			coord_save_done(st, j->rank);
		} else {
			if (!c->dead)
				client_send_status(c, j->step, CKPT_STATE_DURABLE, 0, freed, NULL);
			j->vote.durable = true;
			j->vote.shard_bytes = j->data_bytes;
			j->vote.blob_bytes = j->blob_bytes;
			j->vote.blob_crc32c = j->blob_crc;
			j->vote.table = j->table;   /* handed to the coordinator */
			memset(&j->table, 0, sizeof(j->table));
			coord_save_done(st, j->rank);
			coord_vote(st, j->rank, &j->vote);
			memset(&j->vote, 0, sizeof(j->vote));
		}
	}
	d->busy--;
	client_unref(c);
	job_free(j);
}

static void index_done(void *arg)
{
	job_finish(arg);
}

static void job_advance(struct save_job *j)
{
	struct daemon *d = j->d;

	if (j->inflight > 0 || !j->csum_done || j->index_started || j->recheck_running)
		return;
	if (j->err) {
		j->index_started = true;
		job_finish(j);
		return;
	}
	if (j->written < j->data_bytes)
		return; /* more to submit: writer_pump */
	if (!j->sync_sent) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&d->ring);
		struct io_req *req = malloc(sizeof(*req));

		if (!sqe || !req) {
			free(req);
			/* Ring full: a completion will bring us back here. */
			if (!sqe && d->ring_inflight > 0)
				return;
			job_set_error(j, -ENOMEM, "syncing");
			j->index_started = true;
			job_finish(j);
			return;
		}
		req->job = j;
		req->op = IO_FSYNC;
		req->off = 0;
		req->len = 0;
		io_uring_prep_fsync(sqe, j->fd, IORING_FSYNC_DATASYNC);
		io_uring_sqe_set_data(sqe, req);
		j->sync_sent = true;
		j->inflight++;
		d->ring_inflight++;
		io_uring_submit(&d->ring);
		inflight_gauge(d);
		return;
	}
	if (!j->synced || j->recheck_next < j->nchunks)
		return;
	j->index_started = true;
	if (workers_submit(d->workers, index_run, index_done, j) < 0) {
		job_set_error(j, -ENOMEM, "indexing");
		job_finish(j);
	}
}

/* Move j to the end of the writing list: requests go round-robin over
 * the saves in progress, so one rank (or job) cannot starve another. */
static void writing_requeue(struct daemon *d, struct save_job *j)
{
	struct save_job **p = &d->writing;

	if (!j->next)
		return;
	while (*p != j)
		p = &(*p)->next;
	*p = j->next;
	while (*p)
		p = &(*p)->next;
	*p = j;
	j->next = NULL;
}

void writer_pump(struct daemon *d)
{
	unsigned submitted = 0;

	while (d->ring_inflight < d->cfg->queue_depth) {
		struct save_job *j = d->writing;

		while (j && (j->err || j->next_off >= j->data_bytes ||
			     !csum_covers(j, j->data_bytes - j->next_off < j->request_bytes
						     ? j->data_bytes - j->next_off
						     : j->request_bytes)))
			j = j->next;
		if (!j)
			break;
		struct io_uring_sqe *sqe = io_uring_get_sqe(&d->ring);
		if (!sqe)
			break;
		struct io_req *req = malloc(sizeof(*req));
		if (!req) {
			/* Give the sqe back as a no-op that completes harmlessly. */
			io_uring_prep_nop(sqe);
			io_uring_sqe_set_data(sqe, NULL);
			d->ring_inflight++;
			break;
		}
		uint64_t left = j->data_bytes - j->next_off;
		req->job = j;
		req->op = IO_WRITE;
		req->start = req->off = j->next_off;
		req->len = (uint32_t)(left < j->request_bytes ? left : j->request_bytes);
		prep_write(j, sqe, req->off, req->len);
		io_uring_sqe_set_data(sqe, req);
		j->next_off += req->len;
		j->inflight++;
		d->ring_inflight++;
		submitted++;
		writing_requeue(d, j);
	}
	if (submitted)
		io_uring_submit(&d->ring);
	inflight_gauge(d);
}

void writer_on_cqe(struct daemon *d, struct io_uring_cqe *cqe)
{
	struct io_req *req = io_uring_cqe_get_data(cqe);
	int res = cqe->res;

	d->ring_inflight--;
	if (!req)
		return;
	struct save_job *j = req->job;
	j->inflight--;
	if (req->op == IO_WRITE) {
		if (res > 0)
			metrics_add(M_WRITTEN_BYTES_TOTAL, res, j->st->job->name);
		if (res < 0) {
			job_set_error(j, res, "writing");
		} else if ((uint32_t)res < req->len) {
			if (res == 0) {
				job_set_error(j, -EIO, "writing (no progress)");
			} else {
				/* Short write: queue the rest right away. */
				struct io_uring_sqe *sqe = io_uring_get_sqe(&d->ring);
				j->written += (uint64_t)res;
				if (sqe) {
					req->off += (uint64_t)res;
					req->len -= (uint32_t)res;
					prep_write(j, sqe, req->off, req->len);
					io_uring_sqe_set_data(sqe, req);
					j->inflight++;
					d->ring_inflight++;
					io_uring_submit(&d->ring);
					return;
				}
				job_set_error(j, -EBUSY, "writing (ring full on a short write)");
			}
		} else {
			j->written += (uint64_t)res;
			/* The whole request is written: its bytes left the slot. */
			j->req_done[req->start / j->request_bytes] = 1;
			while (j->reqs_prefix < j->nreqs && j->req_done[j->reqs_prefix])
				j->reqs_prefix++;
			recheck_pump(j);
		}
	} else if (req->op == IO_FSYNC) {
		if (res < 0)
			job_set_error(j, res, "syncing");
		else
			j->synced = true;
	}
	free(req);
	job_advance(j);
	inflight_gauge(d);
}

static int open_shard(struct save_job *j, char *err, size_t errlen)
{
	struct daemon *d = j->d;
	int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW;
	bool try_direct = d->cfg->direct_io == DIRECT_IO_ON ||
			  (d->cfg->direct_io == DIRECT_IO_AUTO && d->direct_io != 0);

	if (try_direct) {
		j->fd = openat(j->stepfd, j->shard_name, flags | O_DIRECT, 0640);
		if (j->fd >= 0) {
			j->direct = true;
			if (d->direct_io < 0)
				d->direct_io = 1;
			return 0;
		}
		if (errno != EINVAL || d->cfg->direct_io == DIRECT_IO_ON) {
			int r = -errno;
			snprintf(err, errlen, "opening %s/%s/%s%s: %s", j->st->job->name,
				 j->step_name, j->shard_name,
				 d->cfg->direct_io == DIRECT_IO_ON ? " with O_DIRECT (direct_io=on)" : "",
				 strerror(-r));
			return r;
		}
		log_info("writer", "file system refuses O_DIRECT, using buffered writes root=%s",
			 d->cfg->root);
		d->direct_io = 0;
	}
	j->fd = openat(j->stepfd, j->shard_name, flags, 0640);
	if (j->fd < 0) {
		int r = -errno;
		snprintf(err, errlen, "opening %s/%s/%s: %s", j->st->job->name, j->step_name,
			 j->shard_name, strerror(-r));
		return r;
	}
	j->direct = false;
	return 0;
}

int writer_start(struct client *c, struct step *st, uint32_t slot,
		 const struct ckpt_msg_save *msg, struct ckpt_table *table,
		 char *err, size_t errlen)
{
	struct daemon *d = c->d;
	struct save_job *j = calloc(1, sizeof(*j));
	int r;

	if (!j) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	j->d = d;
	j->c = c;
	j->st = st;
	j->slot = slot;
	j->rank = c->rank;
	j->step = st->step;
	j->base = c->arena + (uint64_t)slot * c->slot_bytes;
	j->data_bytes = msg->data_bytes;
	j->blob_offset = msg->blob_offset;
	j->blob_bytes = msg->blob_bytes;
	j->chunk_bytes = (uint32_t)d->cfg->chunk_bytes;
	j->stepfd = -1;
	j->fd = -1;
	j->job_dirfd = st->job->dirfd;
	j->ring_efd = d->ring_efd;
	atomic_init(&j->csum_upto, 0);
	j->started_ns = ckpt_mono_ns();
	if (ckpt_step_dirname(j->step_name, sizeof(j->step_name), st->step) < 0) {
		free(j);
		snprintf(err, errlen, "job %s: step %llu is not a step number", st->job->name,
			 (unsigned long long)st->step);
		return -ERANGE;
	}
	ckpt_shard_filename(j->shard_name, sizeof(j->shard_name), c->rank);
	ckpt_index_filename(j->index_name, sizeof(j->index_name), c->rank);
	/* The job owns the table from here, whatever happens. */
	j->table = *table;
	memset(table, 0, sizeof(*table));

	j->csum_ordered = extents_ordered(j);
	j->nchunks = ckpt_chunk_count(&j->table, j->blob_bytes, j->chunk_bytes);
	j->chunk_crc = calloc(j->nchunks ? j->nchunks : 1, sizeof(uint32_t));
	j->chunk_off = calloc(j->nchunks ? j->nchunks : 1, sizeof(uint64_t));
	j->chunk_len = calloc(j->nchunks ? j->nchunks : 1, sizeof(uint32_t));
	j->chunk_ext = calloc(j->nchunks ? j->nchunks : 1, sizeof(uint32_t));
	j->request_bytes = (uint32_t)d->cfg->request_bytes;
	j->nreqs = (j->data_bytes + j->request_bytes - 1) / j->request_bytes;
	j->req_done = calloc(j->nreqs ? j->nreqs : 1, 1);
	if (!j->chunk_crc || !j->chunk_off || !j->chunk_len || !j->chunk_ext || !j->req_done ||
	    j->nchunks > UINT32_MAX) {
		r = -ENOMEM;
		snprintf(err, errlen, "out of memory for %llu chunk checksums",
			 (unsigned long long)j->nchunks);
		goto fail;
	}
	{
		uint64_t k = 0;
		for (uint32_t i = 0; i <= j->table.count; i++) {
			bool blob = i == j->table.count;
			uint64_t offset = blob ? j->blob_offset : j->table.tensors[i].data_offset;
			uint64_t nbytes = blob ? j->blob_bytes : j->table.tensors[i].nbytes;
			for (uint64_t off = 0; off < nbytes && k < j->nchunks;
			     off += j->chunk_bytes, k++) {
				j->chunk_off[k] = offset + off;
				j->chunk_len[k] = (uint32_t)(nbytes - off < j->chunk_bytes
								 ? nbytes - off : j->chunk_bytes);
				j->chunk_ext[k] = i;
			}
		}
	}
	if (mkdirat(st->job->dirfd, j->step_name, 0750) < 0 && errno != EEXIST) {
		r = -errno;
		snprintf(err, errlen, "creating %s/%s: %s", st->job->name, j->step_name,
			 strerror(-r));
		goto fail;
	}
	j->stepfd = openat(st->job->dirfd, j->step_name,
			   O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (j->stepfd < 0) {
		r = -errno;
		snprintf(err, errlen, "opening %s/%s: %s", st->job->name, j->step_name,
			 strerror(-r));
		goto fail;
	}
	r = open_shard(j, err, errlen);
	if (r < 0)
		goto fail;
	r = workers_submit(d->workers, csum_run, csum_done, j);
	if (r < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	c->refs++;
	d->busy++;
	j->next = d->writing;
	d->writing = j;
	metrics_add(M_QUEUE_DEPTH, 1, "write");
	writer_pump(d);
	return 0;
fail:
	job_free(j);
	return r;
}
