/* SPDX-License-Identifier: MIT */
/*
 * The peer link's libfabric transport: the RDM endpoint, its address
 * vector and completion queue (fabric setup), memory registration for
 * providers that need it (FI_MR_LOCAL), and the transfers that carry
 * shards and indexes between nodes. Not here: who is up and what a
 * control message means (peer.c), what partner memory keeps (partner.c);
 * a transfer that ends hands its result to them.
 *
 * Control messages (peerwire.h) are untagged sends into pre-posted
 * buffers. Bulk data (shards, indexes) are tagged sends straight from the
 * rank's slot (copy) or from partner memory (fetch) into buffers the
 * receiver posted for exactly that transfer: tag = xfer id << 24 | piece,
 * piece 0 the index, 1.. the shard in piece_bytes pieces. A receiver posts
 * its buffers before it answers ACCEPT or GO, so nothing lands unasked, and
 * what lands is checked against the index (chunk CRCs) and the index
 * against the digest the votes carried before anyone restores from it.
 */
#include <errno.h>
#include <stdarg.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptd.h"
#include "coord.h"
#include "jobs.h"
#include "peer.h"
#include "peer_internal.h"
#include "peerwire.h"

/* ---- Memory registration (providers with FI_MR_LOCAL) ------------------ */

void *mr_desc(struct peerlink *pl, const void *buf, size_t len, uint64_t access,
	      struct fid_mr **mr)
{
	*mr = NULL;
	if (!pl->mr_local || len == 0)
		return NULL;
	if (fi_mr_reg(pl->domain, buf, len, access, 0, 0, 0, mr, NULL) < 0) {
		*mr = NULL;
		return NULL;
	}
	return fi_mr_desc(*mr);
}

void mr_close(struct fid_mr **mr)
{
	if (*mr)
		fi_close(&(*mr)->fid);
	*mr = NULL;
}


/* ---- Fabric ------------------------------------------------------------- */

int fabric_open(struct peerlink *pl)
{
	const struct ckptd_config *cfg = pl->d->cfg;
	struct fi_info *hints = fi_allocinfo();
	struct fi_cq_attr cq_attr;
	struct fi_av_attr av_attr;
	char host[256], port[32];
	const char *node = NULL, *service = NULL;
	uint64_t flags = 0;
	int r;

	if (!hints)
		return -ENOMEM;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_TAGGED;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_VIRT_ADDR |
				      FI_MR_PROV_KEY;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->fabric_attr->prov_name = strdup(cfg->fabric_provider);
	if (pl->explicit_peers) {
		if (peer_entry(cfg->peers, pl->me, host, sizeof(host), port, sizeof(port)) < 0) {
			log_error("peer", "peers: entry %u is not HOST:PORT", pl->me);
			fi_freeinfo(hints);
			return -EINVAL;
		}
		node = host;
		service = port;
		flags = FI_SOURCE;
	} else if (*cfg->fabric_address) {
		node = cfg->fabric_address;
		flags = FI_SOURCE;
	}
	r = fi_getinfo(FI_VERSION(1, 12), node, service, flags, hints, &pl->info);
	fi_freeinfo(hints);
	if (r < 0) {
		log_error("peer", "no libfabric provider '%s' for address %s%s%s: %s (fi_info -p "
			  "'%s' lists what this machine offers)", cfg->fabric_provider,
			  node ? node : "(any)", service ? ":" : "", service ? service : "",
			  fi_strerror(-r), cfg->fabric_provider);
		return -ENODEV;
	}
	pl->mr_local = (pl->info->domain_attr->mr_mode & FI_MR_LOCAL) != 0;
	pl->max_msg = pl->info->ep_attr->max_msg_size;
	if ((r = fi_fabric(pl->info->fabric_attr, &pl->fabric, NULL)) < 0 ||
	    (r = fi_domain(pl->fabric, pl->info, &pl->domain, NULL)) < 0)
		goto fail;
	memset(&av_attr, 0, sizeof(av_attr));
	av_attr.type = FI_AV_UNSPEC;
	av_attr.count = pl->n * 4;
	if ((r = fi_av_open(pl->domain, &av_attr, &pl->av, NULL)) < 0)
		goto fail;
	memset(&cq_attr, 0, sizeof(cq_attr));
	cq_attr.format = FI_CQ_FORMAT_TAGGED;
	cq_attr.size = 4096;
	cq_attr.wait_obj = FI_WAIT_FD;
	r = fi_cq_open(pl->domain, &cq_attr, &pl->cq, NULL);
	if (r < 0) {
		/* No wait fd: the loop polls instead (peer_poll_ms). */
		cq_attr.wait_obj = FI_WAIT_NONE;
		if ((r = fi_cq_open(pl->domain, &cq_attr, &pl->cq, NULL)) < 0)
			goto fail;
		pl->cq_fd = -1;
	} else if (fi_control(&pl->cq->fid, FI_GETWAIT, &pl->cq_fd) < 0) {
		pl->cq_fd = -1;
	}
	if ((r = fi_endpoint(pl->domain, pl->info, &pl->ep, NULL)) < 0 ||
	    (r = fi_ep_bind(pl->ep, &pl->av->fid, 0)) < 0 ||
	    (r = fi_ep_bind(pl->ep, &pl->cq->fid, FI_TRANSMIT | FI_RECV)) < 0 ||
	    (r = fi_enable(pl->ep)) < 0)
		goto fail;
	pl->myaddr_len = sizeof(pl->myaddr);
	if ((r = fi_getname(&pl->ep->fid, pl->myaddr, &pl->myaddr_len)) < 0)
		goto fail;
	return 0;
fail:
	log_error("peer", "libfabric setup with provider %s failed: %s", cfg->fabric_provider,
		  fi_strerror(-r));
	return -EIO;
}

/* ---- Transfers ----------------------------------------------------------- */

uint64_t xfer_new_id(struct peerlink *pl)
{
	uint64_t id = (pl->next_xfer++) & PEER_XFER_MASK;

	return id ? id : (pl->next_xfer++) & PEER_XFER_MASK;
}

struct xfer *xfer_new(struct peerlink *pl, enum xfer_kind kind, uint32_t node,
		      const char *job, uint64_t step, uint32_t rank)
{
	struct xfer *x = calloc(1, sizeof(*x));

	if (!x)
		return NULL;
	x->kind = kind;
	x->node = node;
	snprintf(x->job, sizeof(x->job), "%s", job);
	x->step = step;
	x->rank = rank;
	x->started_ns = ckpt_mono_ns();
	x->deadline_ns = x->started_ns + peer_timeout_ns(pl);
	x->next = pl->xfers;
	pl->xfers = x;
	pl->d->busy++;
	return x;
}

struct xfer *xfer_find(struct peerlink *pl, enum xfer_kind kind, uint32_t node,
		       uint64_t id)
{
	for (struct xfer *x = pl->xfers; x; x = x->next)
		if (x->kind == kind && x->node == node && x->id == id && !x->finished)
			return x;
	return NULL;
}

static void piece_span(const struct xfer *x, uint64_t piece, uint64_t *off, uint64_t *len)
{
	if (piece == 0) {
		*off = 0;
		*len = x->index_bytes;
		return;
	}
	*off = (piece - 1) * x->piece_bytes;
	*len = x->shard_bytes - *off < x->piece_bytes ? x->shard_bytes - *off : x->piece_bytes;
}

uint64_t pieces_of(uint64_t shard_bytes, uint32_t piece_bytes)
{
	return 1 + (shard_bytes + piece_bytes - 1) / piece_bytes;
}

void xfer_fail(struct xfer *x, int err, const char *fmt, ...)
{
	va_list ap;

	if (x->status < 0)
		return;
	x->status = err < 0 ? err : -EIO;
	va_start(ap, fmt);
	vsnprintf(x->reason, sizeof(x->reason), fmt, ap);
	va_end(ap);
}

/* Post what the window allows; sends and receives alike. */
void xfer_pump(struct peerlink *pl, struct xfer *x)
{
	bool send = x->kind == X_COPY_OUT || x->kind == X_SERVE;
	unsigned window = send ? SEND_WINDOW : RECV_WINDOW;

	if (!x->started || x->status < 0)
		return;
	while (x->outstanding < window && x->next_piece < x->npieces) {
		uint64_t off, len;
		struct op *op = calloc(1, sizeof(*op));
		if (!op) {
			xfer_fail(x, -ENOMEM, "out of memory");
			return;
		}
		piece_span(x, x->next_piece, &off, &len);
		op->kind = send ? OP_PIECE_SEND : OP_PIECE_RECV;
		op->x = x;
		op->node = x->node;
		op->len = len;
		op->tag = x->id << PEER_TAG_PIECE_BITS | x->next_piece;
		if (send) {
			op->buf = (uint8_t *)(x->next_piece ? x->src_shard + off : x->src_index);
			op->mr = x->next_piece ? x->mr_shard : x->mr_index;
		} else {
			op->buf = x->next_piece ? x->dst_shard + off : x->dst_index;
			op->mr = x->next_piece ? x->mr_shard : x->mr_index;
		}
		int r = peer_op_post(pl, op);
		if (r == -FI_EAGAIN) {
			free(op);
			return;
		}
		if (r < 0) {
			free(op);
			xfer_fail(x, -EIO, "posting piece %llu: %s",
				  (unsigned long long)x->next_piece, fi_strerror(-r));
			return;
		}
		op->xnext = x->ops;
		if (x->ops)
			x->ops->xprev = op;
		x->ops = op;
		x->outstanding++;
		x->next_piece++;
	}
}

/* Register the buffers of a transfer (FI_MR_LOCAL providers only). */
void xfer_register(struct peerlink *pl, struct xfer *x, bool send)
{
	uint64_t access = send ? FI_SEND : FI_RECV;

	mr_desc(pl, send ? x->src_index : x->dst_index, x->index_bytes, access, &x->mr_index);
	mr_desc(pl, send ? x->src_shard : x->dst_shard, x->shard_bytes, access, &x->mr_shard);
}

void xfer_start_receive(struct peerlink *pl, struct xfer *x)
{
	xfer_register(pl, x, false);
	x->started = true;
	xfer_pump(pl, x);
}

static void xfer_finish(struct peerlink *pl, struct xfer *x)
{
	struct peer_msg m;
	double secs = (double)(ckpt_mono_ns() - x->started_ns) / 1e9;

	x->finished = true;
	switch (x->kind) {
	case X_COPY_OUT:
		if (x->status == 0) {
			metrics_inc(M_PARTNER_COPIES_TOTAL, "sent");
			log_info("peer", "partner copy sent job=%s step=%llu rank=%u node=%u bytes=%llu "
				 "seconds=%.3f", x->job, (unsigned long long)x->step, x->rank, x->node,
				 (unsigned long long)(x->shard_bytes + x->index_bytes), secs);
		} else if (x->status != -EAGAIN) {
			metrics_inc(M_PARTNER_COPIES_TOTAL, "failed");
			log_warn("peer", "partner copy failed job=%s step=%llu rank=%u node=%u "
				 "error=\"%s\"", x->job, (unsigned long long)x->step, x->rank, x->node,
				 x->reason);
		}
		if (x->started && x->status < 0 && !x->remote_done) {
			peer_msg_init(&m, PEER_COPY_DONE);
			peer_msg_job(&m, x->job, x->step);
			m.rank = x->rank;
			m.world_size = x->world_size;
			m.xfer = x->id;
			m.status = x->status;
			snprintf(m.reason, sizeof(m.reason), "%s", x->reason);
			peer_send_msg(pl, x->node, &m);
		}
		hold_release(pl, x->hold);
		break;
	case X_COPY_IN: {
		struct pentry *pe = x->pe;
		pe->users--;
		if (x->status == 0 && !pe->dropped) {
			uint8_t sha[32];
			store_sha256(pe->mem, pe->index_bytes, sha);
			if (memcmp(sha, pe->sha, 32) != 0) {
				xfer_fail(x, -CKPT_E_CORRUPT, "the index does not match its digest");
			} else {
				pe->complete = true;
				struct job *job = job_get(pl->d, pe->job, false);
				if ((job && job_is_committed(job, pe->step)) ||
				    recently_committed(pl, pe->job, pe->step))
					peer_step_committed(pl->d, pe->job, pe->step);
				metrics_inc(M_PARTNER_COPIES_TOTAL, "received");
				log_info("peer", "partner copy received job=%s step=%llu rank=%u "
					 "node=%u bytes=%llu seconds=%.3f", pe->job,
					 (unsigned long long)pe->step, pe->rank, x->node,
					 (unsigned long long)(pe->shard_bytes + pe->index_bytes), secs);
			}
		}
		if (x->status < 0 || pe->dropped) {
			if (x->status < 0) {
				metrics_inc(M_PARTNER_COPIES_TOTAL, "failed");
				log_warn("peer", "partner copy not kept job=%s step=%llu rank=%u "
					 "node=%u error=\"%s\"", x->job, (unsigned long long)x->step,
					 x->rank, x->node, x->reason);
			}
			pentry_drop(pl, pe);
		}
		break;
	}
	case X_SERVE:
		x->pe->users--;
		if (x->pe->dropped && x->pe->users == 0)
			pentry_drop(pl, x->pe);
		if (x->status < 0 && !x->remote_done) {
			peer_msg_init(&m, PEER_FETCH_DONE);
			peer_msg_job(&m, x->job, x->step);
			m.rank = x->rank;
			m.xfer = x->id;
			m.status = x->status;
			snprintf(m.reason, sizeof(m.reason), "%s", x->reason);
			peer_send_msg(pl, x->node, &m);
		}
		log_info("peer", "partner fetch served job=%s step=%llu rank=%u node=%u result=%s "
			 "seconds=%.3f", x->job, (unsigned long long)x->step, x->rank, x->node,
			 x->status ? "failed" : "ok", secs);
		break;
	case X_FETCH: {
		struct fetch_req *rq = x->req;
		if (x->status == 0) {
			rq->index = x->dst_index;
			rq->index_bytes = x->index_bytes;
			rq->shard_bytes = x->shard_bytes;
			x->dst_index = NULL;
			log_info("peer", "fetched from partner memory job=%s step=%llu rank=%u node=%u "
				 "bytes=%llu seconds=%.3f", x->job, (unsigned long long)x->step,
				 x->rank, x->node, (unsigned long long)x->shard_bytes, secs);
			fetch_complete(pl, rq, 0, "ok");
		} else {
			if (x->status != -ENOENT)
				log_warn("peer", "partner fetch failed job=%s step=%llu rank=%u node=%u "
					 "error=\"%s\"", x->job, (unsigned long long)x->step, x->rank,
					 x->node, x->reason);
			snprintf(rq->err, sizeof(rq->err), "node %u: %s", x->node, x->reason);
			free(x->dst_index);
			x->dst_index = NULL;
			fetch_next(pl, rq);
		}
		break;
	}
	}
	mr_close(&x->mr_index);
	mr_close(&x->mr_shard);
	for (struct xfer **p = &pl->xfers; *p; p = &(*p)->next) {
		if (*p == x) {
			*p = x->next;
			break;
		}
	}
	pl->d->busy--;
	free(x);
}

/* Decide what a transfer does next after any event. */
void xfer_progress(struct peerlink *pl, struct xfer *x)
{
	struct peer_msg m;

	if (x->finished)
		return;
	if (x->status < 0) {
		/* Receives still posted must complete (cancelled) before their
		 * buffers go. */
		if (x->outstanding && !x->cancelled) {
			x->cancelled = true;
			for (struct op *op = x->ops; op; op = op->xnext)
				if (op->kind == OP_PIECE_RECV && pl->ep)
					fi_cancel(&pl->ep->fid, &op->fctx);
		}
		if (x->outstanding == 0)
			xfer_finish(pl, x);
		return;
	}
	xfer_pump(pl, x);
	if (!x->started || x->done_pieces < x->npieces)
		return;
	switch (x->kind) {
	case X_COPY_OUT:
	case X_SERVE:
		peer_msg_init(&m, x->kind == X_COPY_OUT ? PEER_COPY_DONE : PEER_FETCH_DONE);
		peer_msg_job(&m, x->job, x->step);
		m.rank = x->rank;
		m.world_size = x->kind == X_COPY_OUT ? x->world_size : 0;
		m.xfer = x->id;
		peer_send_msg(pl, x->node, &m);
		x->remote_done = true;
		xfer_finish(pl, x);
		break;
	case X_COPY_IN:
	case X_FETCH:
		if (x->remote_done) {
			if (x->remote_status < 0)
				xfer_fail(x, x->remote_status, "the sender failed: %s", x->reason);
			xfer_finish(pl, x);
		}
		break;
	}
}
