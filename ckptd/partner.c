/* SPDX-License-Identifier: MIT */
/*
 * Partner copies (peer.h): each node's ranks' shards of a step, copied
 * into its partner nodes' memory, from which a replaced node restores
 * them. Here: partner memory (its budget, spare buffers, which copies stay
 * once a step commits or fails), both sides of a copy, and partner
 * fetches, peer_fetch() included (the one call from a restore worker).
 * Not here: how the pieces travel (fabric.c), and the checks every
 * message passes before it reaches these handlers (peer.c).
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ckptd.h"
#include "server.h"
#include "writer.h"
#include "peer.h"
#include "peer_internal.h"
#include "peerwire.h"

pthread_mutex_t fetch_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- Partner memory ------------------------------------------------------ */

void store_gauge(struct peerlink *pl)
{
	metrics_set(M_PARTNER_BYTES, (double)pl->store_bytes);
}

/* Memory for a copy of `need` bytes: whole 2 MiB from 2 MiB up, so that
 * spare buffers fit the next step's copy of a rank that grew a little. */
static uint64_t copy_mem_len(uint64_t need)
{
	uint64_t huge = 2ull << 20;

	return need >= huge ? (need + huge - 1) / huge * huge : need;
}

/* A spare buffer of exactly len bytes, or NULL. Its bytes stay counted. */
static uint8_t *spare_take(struct peerlink *pl, uint64_t len)
{
	for (int i = 0; i < SPARE_BUFFERS; i++) {
		if (pl->spare[i].mem && pl->spare[i].len == len) {
			uint8_t *mem = pl->spare[i].mem;
			pl->spare[i].mem = NULL;
			return mem;
		}
	}
	return NULL;
}

/* Fresh memory, faulted in at once (on a worker: faulting costs more than
 * receiving into it). */
static uint8_t *copy_mem_map(uint64_t len)
{
	void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (mem == MAP_FAILED)
		return NULL;
	/* No MADV_HUGEPAGE: where the kernel compacts memory for it, a
	 * fresh huge-page mapping can take seconds per GiB. */
	for (uint64_t off = 0; off < len; off += 4096)
		((volatile uint8_t *)mem)[off] = 0;
	return mem;
}

/* A copy's memory is no longer used: kept as a spare (still counted) or
 * given back (no longer counted). */
static void copy_mem_put(struct peerlink *pl, uint8_t *mem, uint64_t len)
{
	if (!pl->stopping) {
		for (int i = 0; i < SPARE_BUFFERS; i++) {
			if (!pl->spare[i].mem) {
				pl->spare[i].mem = mem;
				pl->spare[i].len = len;
				return;
			}
		}
	}
	munmap(mem, len);
	pl->store_bytes -= len;
}

/* Give spare buffers back until `need` more bytes fit the budget. */
static void spare_trim(struct peerlink *pl, uint64_t need)
{
	for (int i = 0; i < SPARE_BUFFERS; i++) {
		if (pl->spare[i].mem && pl->store_bytes + need > pl->d->cfg->partner_memory) {
			munmap(pl->spare[i].mem, pl->spare[i].len);
			pl->store_bytes -= pl->spare[i].len;
			pl->spare[i].mem = NULL;
		}
	}
}

void pentry_drop(struct peerlink *pl, struct pentry *pe)
{
	pe->dropped = true;
	if (pe->users)
		return;
	for (struct pentry **p = &pl->store; *p; p = &(*p)->next) {
		if (*p == pe) {
			*p = pe->next;
			break;
		}
	}
	if (pe->mem)
		copy_mem_put(pl, pe->mem, pe->mem_len);
	else
		pl->store_bytes -= pe->mem_len;
	store_gauge(pl);
	free(pe);
}

/* Room for `need` more bytes of (job, rank): what can never be the newest
 * committed copy goes first. */
static bool store_make_room(struct peerlink *pl, const char *job, uint32_t rank, uint64_t step,
			    uint64_t need)
{
	uint64_t budget = pl->d->cfg->partner_memory;

	if (need > budget)
		return false;
	/* A spare buffer of the right size is taken as it is; the others go
	 * first. */
	for (int i = 0; i < SPARE_BUFFERS; i++)
		if (pl->spare[i].mem && pl->spare[i].len == need)
			return true;
	spare_trim(pl, need);
	for (struct pentry *pe = pl->store, *next; pe && pl->store_bytes + need > budget; pe = next) {
		next = pe->next;
		if (pe->users || pe->dropped)
			continue;
		/* Older uncommitted copies of the same rank, and any copy
		 * of a step older than a committed newer one. */
		if (strcmp(pe->job, job) == 0 && pe->rank == rank && pe->step < step && !pe->committed)
			pentry_drop(pl, pe);
	}
	for (struct pentry *pe = pl->store, *next; pe && pl->store_bytes + need > budget; pe = next) {
		next = pe->next;
		if (pe->users || pe->dropped)
			continue;
		bool newer_committed = false;
		for (struct pentry *q = pl->store; q; q = q->next)
			if (q != pe && q->committed && strcmp(q->job, pe->job) == 0 &&
			    q->rank == pe->rank && q->step > pe->step)
				newer_committed = true;
		if (newer_committed || !pe->complete)
			pentry_drop(pl, pe);
	}
	return pl->store_bytes + need <= budget;
}

bool recently_committed(const struct peerlink *pl, const char *job, uint64_t step)
{
	for (unsigned i = 0; i < RECENT_COMMITS; i++)
		if (pl->recent[i].step == step && strcmp(pl->recent[i].job, job) == 0)
			return true;
	return false;
}

void peer_step_committed(struct daemon *d, const char *job, uint64_t step)
{
	struct peerlink *pl = d->peer;

	if (!pl)
		return;
	if (!recently_committed(pl, job, step)) {
		unsigned i = pl->recent_next++ % RECENT_COMMITS;
		snprintf(pl->recent[i].job, sizeof(pl->recent[i].job), "%s", job);
		pl->recent[i].step = step;
	}
	for (struct pentry *pe = pl->store; pe; pe = pe->next)
		if (!pe->dropped && pe->complete && pe->step == step && strcmp(pe->job, job) == 0)
			pe->committed = true;
	/* Only the newest committed copy of each rank stays. */
	for (struct pentry *pe = pl->store, *next; pe; pe = next) {
		next = pe->next;
		if (pe->dropped || strcmp(pe->job, job) != 0 || pe->step >= step)
			continue;
		bool superseded = false;
		for (struct pentry *q = pl->store; q; q = q->next)
			if (q->committed && !q->dropped && q->step == step && q->rank == pe->rank &&
			    strcmp(q->job, job) == 0)
				superseded = true;
		if (superseded)
			pentry_drop(pl, pe);
	}
}

void peer_step_failed(struct daemon *d, const char *job, uint64_t step)
{
	struct peerlink *pl = d->peer;

	if (!pl)
		return;
	for (struct pentry *pe = pl->store, *next; pe; pe = next) {
		next = pe->next;
		if (!pe->committed && pe->step == step && strcmp(pe->job, job) == 0)
			pentry_drop(pl, pe);
	}
}

static struct pentry *store_find(struct peerlink *pl, const char *job, uint64_t step,
				 uint32_t rank)
{
	for (struct pentry *pe = pl->store; pe; pe = pe->next)
		if (!pe->dropped && pe->complete && pe->committed && pe->rank == rank &&
		    pe->step == step && strcmp(pe->job, job) == 0)
			return pe;
	return NULL;
}

/* ---- Partner copies: sending ------------------------------------------- */

void hold_release(struct peerlink *pl, struct hold *h)
{
	if (--h->refs)
		return;
	struct client *c = h->c;
	if (!c->dead && h->slot < c->slots) {
		c->slot_state[h->slot] = SLOT_CLIENT;
		slots_watch(c);
		client_send_status(c, h->step, CKPT_STATE_UNKNOWN, 0, h->slot, NULL);
	}
	client_unref(c);
	free(h->index);
	free(h);
	(void)pl;
}

bool peer_copy_start(struct client *c, uint32_t slot, const struct step *st, uint32_t rank,
		     const struct rank_vote *v, void *index)
{
	struct daemon *d = c->d;
	struct peerlink *pl = d->peer;
	struct hold *h;

	if (!pl || pl->stopping || d->cfg->partner_memory == 0 || !index ||
	    v->index_bytes > pl->max_msg) {
		free(index);
		return false;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		free(index);
		return false;
	}
	h->c = c;
	h->slot = slot;
	h->step = st->step;
	h->index = index;
	h->refs = 1; /* ours until the loop below is done */
	c->refs++;
	uint32_t partners = d->cfg->partners < pl->n - 1 ? d->cfg->partners : pl->n - 1;
	for (uint32_t p = 1; p <= partners; p++) {
		uint32_t node = (pl->me + p) % pl->n;
		if (!pl->nodes[node].up)
			continue;
		struct xfer *x = xfer_new(pl, X_COPY_OUT, node, st->job->name, st->step, rank);
		if (!x)
			break;
		x->id = xfer_new_id(pl);
		x->world_size = st->world_size;
		x->shard_bytes = v->shard_bytes;
		x->index_bytes = v->index_bytes;
		memcpy(x->sha, v->index_sha256, 32);
		x->piece_bytes = pl->max_msg < PIECE_BYTES ? (uint32_t)pl->max_msg : PIECE_BYTES;
		x->npieces = pieces_of(x->shard_bytes, x->piece_bytes);
		x->src_index = index;
		x->src_shard = c->arena + (uint64_t)slot * c->slot_bytes;
		x->hold = h;
		h->refs++;
		struct peer_msg m;
		peer_msg_init(&m, PEER_COPY_OFFER);
		peer_msg_job(&m, x->job, x->step);
		m.world_size = x->world_size;
		m.rank = rank;
		peer_msg_shard(&m, v);
		m.xfer = x->id;
		m.piece_bytes = x->piece_bytes;
		m.status = 1;
		if (peer_send_msg(pl, node, &m) < 0)
			xfer_fail(x, -ENOTCONN, "node %u unreachable", node);
		xfer_progress(pl, x);
	}
	bool held = h->refs > 1;
	if (!held) {
		/* Nobody to copy to: the caller frees the slot as usual. */
		c->refs--;
		free(h->index);
		free(h);
		return false;
	}
	hold_release(pl, h); /* drops ours; the transfers keep theirs */
	return true;
}

/* The receiving side of a copy has its memory: post the receives, accept. */
static void copy_in_ready(struct peerlink *pl, struct xfer *x)
{
	struct peer_msg a;

	x->dst_index = x->pe->mem;
	x->dst_shard = x->pe->mem + x->index_bytes;
	xfer_start_receive(pl, x);
	peer_msg_init(&a, PEER_COPY_ACCEPT);
	peer_msg_job(&a, x->job, x->step);
	a.rank = x->rank;
	a.world_size = x->world_size;
	a.xfer = x->id;
	a.status = 1;
	peer_send_msg(pl, x->node, &a);
	xfer_progress(pl, x);
}

struct copy_alloc {
	struct peerlink *pl;
	struct xfer *x;
	uint64_t len;
	uint8_t *mem;
};

static void copy_alloc_run(void *arg)
{
	struct copy_alloc *ca = arg;

	ca->mem = copy_mem_map(ca->len);
}

static void copy_alloc_done(void *arg)
{
	struct copy_alloc *ca = arg;
	struct peerlink *pl = ca->pl;
	struct xfer *x = ca->x;

	x->outstanding--;
	x->allocating = false;
	if (ca->mem && x->status == 0) {
		x->pe->mem = ca->mem;
		copy_in_ready(pl, x);
	} else {
		if (ca->mem) {
			/* Ended meanwhile (node lost, stopping): the entry
			 * gives the memory back with its own. */
			x->pe->mem = ca->mem;
		} else if (x->status == 0) {
			struct peer_msg a;
			xfer_fail(x, -ENOMEM, "cannot map %llu bytes for the copy",
				  (unsigned long long)ca->len);
			peer_msg_init(&a, PEER_COPY_ACCEPT);
			peer_msg_job(&a, x->job, x->step);
			a.rank = x->rank;
			a.world_size = x->world_size;
			a.xfer = x->id;
			snprintf(a.reason, sizeof(a.reason), "node %u cannot map %llu bytes", pl->me,
				 (unsigned long long)ca->len);
			peer_send_msg(pl, x->node, &a);
		}
		xfer_progress(pl, x);
	}
	free(ca);
}

void partner_on_copy_offer(struct peerlink *pl, uint32_t from, const struct peer_msg *m)
{
	struct peer_msg a;
	uint64_t need = m->shard_bytes + m->index_bytes;
	uint64_t mem_len = copy_mem_len(need);

	peer_msg_init(&a, PEER_COPY_ACCEPT);
	peer_msg_job(&a, m->job, m->step);
	a.rank = m->rank;
	a.world_size = m->world_size;
	a.xfer = m->xfer;
	if (pl->d->cfg->partner_memory == 0) {
		snprintf(a.reason, sizeof(a.reason), "node %u keeps no partner copies "
			 "(partner_memory is 0)", pl->me);
	} else if (m->piece_bytes > pl->max_msg || m->index_bytes > pl->max_msg) {
		snprintf(a.reason, sizeof(a.reason), "pieces larger than the provider's messages");
	} else if (!store_make_room(pl, m->job, m->rank, m->step, mem_len)) {
		snprintf(a.reason, sizeof(a.reason), "partner_memory full on node %u (%llu of %llu "
			 "bytes held, %llu more needed)", pl->me,
			 (unsigned long long)pl->store_bytes,
			 (unsigned long long)pl->d->cfg->partner_memory, (unsigned long long)need);
	} else {
		struct pentry *pe = calloc(1, sizeof(*pe));
		struct xfer *x = pe ? xfer_new(pl, X_COPY_IN, from, m->job, m->step, m->rank) : NULL;
		if (!x) {
			free(pe);
			snprintf(a.reason, sizeof(a.reason), "out of memory on node %u", pl->me);
		} else {
			snprintf(pe->job, sizeof(pe->job), "%s", m->job);
			pe->step = m->step;
			pe->rank = m->rank;
			pe->world_size = m->world_size;
			pe->from = from;
			pe->shard_bytes = m->shard_bytes;
			pe->index_bytes = m->index_bytes;
			memcpy(pe->sha, m->index_sha256, 32);
			pe->mem_len = mem_len;
			pe->mem = spare_take(pl, mem_len);
			if (!pe->mem)
				pl->store_bytes += mem_len;
			pe->users = 1;
			pe->next = pl->store;
			pl->store = pe;
			store_gauge(pl);
			x->id = m->xfer;
			x->world_size = m->world_size;
			x->shard_bytes = m->shard_bytes;
			x->index_bytes = m->index_bytes;
			memcpy(x->sha, m->index_sha256, 32);
			x->piece_bytes = m->piece_bytes;
			x->npieces = pieces_of(x->shard_bytes, x->piece_bytes);
			x->pe = pe;
			if (pe->mem) {
				copy_in_ready(pl, x);
				return;
			}
			/* Fresh memory is faulted in on a worker; the answer
			 * goes once it is ready. */
			struct copy_alloc *ca = calloc(1, sizeof(*ca));
			if (ca) {
				ca->pl = pl;
				ca->x = x;
				ca->len = mem_len;
				x->outstanding++;
				x->allocating = true;
				if (workers_submit(pl->d->workers, copy_alloc_run, copy_alloc_done, ca) == 0)
					return;
				x->outstanding--;
				x->allocating = false;
				free(ca);
			}
			xfer_fail(x, -ENOMEM, "out of memory on node %u", pl->me);
			xfer_progress(pl, x);
			snprintf(a.reason, sizeof(a.reason), "out of memory on node %u", pl->me);
		}
	}
	metrics_inc(M_PARTNER_COPIES_TOTAL, "refused");
	log_info("peer", "partner copy refused job=%s step=%llu rank=%u node=%u reason=\"%s\"",
		 m->job, (unsigned long long)m->step, m->rank, from, a.reason);
	a.status = 0;
	peer_send_msg(pl, from, &a);
}

void partner_on_copy_accept(struct peerlink *pl, uint32_t from, const struct peer_msg *m)
{
	struct xfer *x = xfer_find(pl, X_COPY_OUT, from, m->xfer);

	if (!x) {
		peer_reject(pl, "stale", "COPY_ACCEPT from node %u for no transfer of ours", from);
		return;
	}
	if (m->status != 1) {
		metrics_inc(M_PARTNER_COPIES_TOTAL, "refused");
		log_info("peer", "partner copy refused job=%s step=%llu rank=%u node=%u reason=\"%s\"",
			 x->job, (unsigned long long)x->step, x->rank, from, m->reason);
		x->remote_done = true;
		xfer_fail(x, -EAGAIN, "refused: %s", m->reason);
		xfer_progress(pl, x);
		return;
	}
	xfer_register(pl, x, true);
	x->started = true;
	xfer_progress(pl, x);
}

void partner_on_remote_done(struct peerlink *pl, uint32_t from, const struct peer_msg *m,
		    enum xfer_kind kind)
{
	struct xfer *x = xfer_find(pl, kind, from, m->xfer);

	if (!x)
		return; /* ended here already (timeout, cancel) */
	x->remote_done = true;
	x->remote_status = m->status < 0 ? m->status : 0;
	if (m->status < 0) {
		snprintf(x->reason, sizeof(x->reason), "%s", m->reason);
		x->status = m->status;
	}
	xfer_progress(pl, x);
}

/* ---- Partner fetches ---------------------------------------------------- */

bool peer_fetch_enabled(const struct daemon *d)
{
	return d->peer && d->cfg->partner_memory > 0;
}

void fetch_complete(struct peerlink *pl, struct fetch_req *rq, int result,
		    const char *fmt, ...)
{
	va_list ap;

	(void)pl;
	if (result < 0 && fmt && !rq->err[0]) {
		va_start(ap, fmt);
		vsnprintf(rq->err, sizeof(rq->err), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_lock(&fetch_lock);
	rq->result = result;
	rq->done = true;
	pthread_cond_signal(&rq->cv);
	pthread_mutex_unlock(&fetch_lock);
}

/* Ask the next partner that may hold this node's rank. */
void fetch_next(struct peerlink *pl, struct fetch_req *rq)
{
	uint32_t partners = pl->d->cfg->partners < pl->n - 1 ? pl->d->cfg->partners : pl->n - 1;

	while (rq->tried < partners && !pl->stopping) {
		uint32_t node = (pl->me + 1 + rq->tried) % pl->n;
		rq->tried++;
		if (!pl->nodes[node].up)
			continue;
		struct xfer *x = xfer_new(pl, X_FETCH, node, rq->job, rq->step, rq->rank);
		if (!x)
			break;
		x->id = xfer_new_id(pl);
		x->req = rq;
		x->dst_shard = rq->dst;
		struct peer_msg m;
		peer_msg_init(&m, PEER_FETCH);
		peer_msg_job(&m, rq->job, rq->step);
		m.rank = rq->rank;
		m.xfer = x->id;
		if (peer_send_msg(pl, node, &m) < 0) {
			xfer_fail(x, -ENOTCONN, "unreachable");
			xfer_progress(pl, x);
			return;
		}
		return;
	}
	fetch_complete(pl, rq, -ENOENT, "no partner holds rank %u of step %llu", rq->rank,
		       (unsigned long long)rq->step);
}

void partner_on_fetch(struct peerlink *pl, uint32_t from, const struct peer_msg *m)
{
	struct pentry *pe = store_find(pl, m->job, m->step, m->rank);
	struct peer_msg a;

	peer_msg_init(&a, PEER_FETCH_HAVE);
	peer_msg_job(&a, m->job, m->step);
	a.rank = m->rank;
	a.xfer = m->xfer;
	if (!pe || pe->shard_bytes + pe->index_bytes == 0) {
		a.status = 0;
		peer_send_msg(pl, from, &a);
		return;
	}
	struct xfer *x = xfer_new(pl, X_SERVE, from, m->job, m->step, m->rank);
	if (!x) {
		a.status = 0;
		peer_send_msg(pl, from, &a);
		return;
	}
	pe->users++;
	x->id = m->xfer;
	x->pe = pe;
	x->world_size = pe->world_size;
	x->shard_bytes = pe->shard_bytes;
	x->index_bytes = pe->index_bytes;
	x->piece_bytes = pl->max_msg < PIECE_BYTES ? (uint32_t)pl->max_msg : PIECE_BYTES;
	x->npieces = pieces_of(x->shard_bytes, x->piece_bytes);
	x->src_index = pe->mem;
	x->src_shard = pe->mem + pe->index_bytes;
	a.status = 1;
	a.world_size = pe->world_size;
	a.shard_bytes = pe->shard_bytes;
	a.index_bytes = pe->index_bytes;
	memcpy(a.index_sha256, pe->sha, 32);
	a.piece_bytes = x->piece_bytes;
	peer_send_msg(pl, from, &a);
}

void partner_on_fetch_have(struct peerlink *pl, uint32_t from, const struct peer_msg *m)
{
	struct xfer *x = xfer_find(pl, X_FETCH, from, m->xfer);
	struct peer_msg go;

	if (!x) {
		peer_reject(pl, "stale", "FETCH_HAVE from node %u for no fetch of ours", from);
		return;
	}
	if (m->status != 1) {
		xfer_fail(x, -ENOENT, "does not hold it");
		xfer_progress(pl, x);
		return;
	}
	if (m->shard_bytes > x->req->cap || m->piece_bytes > pl->max_msg ||
	    m->index_bytes > pl->max_msg) {
		xfer_fail(x, -CKPT_E_TOO_BIG, "a %llu-byte shard does not fit the %llu-byte slot",
			  (unsigned long long)m->shard_bytes, (unsigned long long)x->req->cap);
		xfer_progress(pl, x);
		return;
	}
	x->dst_index = malloc(m->index_bytes);
	if (!x->dst_index) {
		xfer_fail(x, -ENOMEM, "out of memory");
		xfer_progress(pl, x);
		return;
	}
	x->world_size = m->world_size;
	x->shard_bytes = m->shard_bytes;
	x->index_bytes = m->index_bytes;
	memcpy(x->sha, m->index_sha256, 32);
	x->piece_bytes = m->piece_bytes;
	x->npieces = pieces_of(x->shard_bytes, x->piece_bytes);
	xfer_start_receive(pl, x);
	peer_msg_init(&go, PEER_FETCH_GO);
	peer_msg_job(&go, x->job, x->step);
	go.rank = x->rank;
	go.xfer = x->id;
	peer_send_msg(pl, from, &go);
	xfer_progress(pl, x);
}

void partner_on_fetch_go(struct peerlink *pl, uint32_t from, const struct peer_msg *m)
{
	struct xfer *x = xfer_find(pl, X_SERVE, from, m->xfer);

	if (!x) {
		peer_reject(pl, "stale", "FETCH_GO from node %u for no fetch served here", from);
		return;
	}
	xfer_register(pl, x, true);
	x->started = true;
	xfer_progress(pl, x);
}

int peer_fetch(struct daemon *d, const char *job, uint64_t step, uint32_t rank, uint8_t *dst,
	       uint64_t cap, void **index, uint64_t *index_bytes, uint64_t *shard_bytes,
	       char *err, size_t errlen)
{
	struct peerlink *pl = d->peer;
	struct fetch_req rq;
	uint64_t one = 1;

	if (!peer_fetch_enabled(d))
		return -ENOENT;
	memset(&rq, 0, sizeof(rq));
	pthread_cond_init(&rq.cv, NULL);
	snprintf(rq.job, sizeof(rq.job), "%s", job);
	rq.step = step;
	rq.rank = rank;
	rq.dst = dst;
	rq.cap = cap;
	pthread_mutex_lock(&fetch_lock);
	if (pl->stopping) {
		pthread_mutex_unlock(&fetch_lock);
		pthread_cond_destroy(&rq.cv);
		snprintf(err, errlen, "ckptd is stopping");
		return -ECANCELED;
	}
	rq.next = pl->fetch_q;
	pl->fetch_q = &rq;
	pthread_mutex_unlock(&fetch_lock);
	if (write(pl->wake_fd, &one, sizeof(one)) < 0) {
		/* The eventfd cannot overflow here; the loop polls anyway. */
	}
	pthread_mutex_lock(&fetch_lock);
	while (!rq.done)
		pthread_cond_wait(&rq.cv, &fetch_lock);
	pthread_mutex_unlock(&fetch_lock);
	pthread_cond_destroy(&rq.cv);
	if (rq.result < 0) {
		snprintf(err, errlen, "%s", rq.err);
		return rq.result;
	}
	*index = rq.index;
	*index_bytes = rq.index_bytes;
	*shard_bytes = rq.shard_bytes;
	return 0;
}
