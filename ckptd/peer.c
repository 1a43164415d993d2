/* SPDX-License-Identifier: MIT */
/*
 * The peer link (peer.h): membership and the global commit's messages.
 * Which nodes are up (HELLO, heartbeats, epochs), rejections, control
 * messages sent and received, the coordinator's votes and outcomes, and the
 * link's life cycle. Not here: how nodes find each other's addresses
 * (rendezvous.c), the libfabric endpoint and the bulk transfers (fabric.c),
 * partner memory, partner copies and fetches (partner.c); what the four
 * share is peer_internal.h.
 *
 * One concept, though longer than most files: the link's control plane.
 * Receiving, the commit's messages and the life cycle all read and change
 * the same per-node state (address, epoch, up, the sends that wait for
 * room), and each of those rules is easier to check where the others are
 * in view.
 *
 * Completions come through the CQ's wait fd in the loop's epoll set; while
 * transfers are in flight the loop also polls every millisecond, since
 * providers progress sends only when their CQ is read.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "ckptd.h"
#include "coord.h"
#include "server.h"
#include "agree.h"
#include "peer.h"
#include "peer_internal.h"
#include "peerwire.h"

/* CKPTD_TEST_FAULT, read once in peer_init: fault injection for tests. */
static char test_fault[64];

bool peer_test_fault(const char *name)
{
	return test_fault[0] && strcmp(test_fault, name) == 0;
}

int64_t peer_timeout_ns(const struct peerlink *pl)
{
	return (int64_t)pl->d->cfg->peer_timeout_ms * 1000000;
}

bool peer_is_leader(const struct daemon *d)
{
	return !d->peer || d->peer->me == 0;
}

static void node_metric(struct peerlink *pl, uint32_t k, bool up)
{
	char label[16];
	unsigned n_up = 0;

	snprintf(label, sizeof(label), "%u", k);
	metrics_set(M_PEER_UP, up ? 1 : 0, label);
	for (uint32_t i = 0; i < pl->n; i++)
		n_up += i != pl->me && pl->nodes[i].up;
	metrics_set(M_PEERS_UP, n_up);
}

/* ---- Rejections -------------------------------------------------------- */

void peer_reject(struct peerlink *pl, const char *reason, const char *fmt, ...)
{
	char text[512];
	va_list ap;
	int64_t now = ckpt_mono_ns();

	metrics_inc(M_PEER_REJECTED_TOTAL, reason);
	/* A flood of bad messages is logged at most ten times a second. */
	if (now - pl->reject_log_ns < 100000000) {
		pl->reject_quiet++;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	log_warn("peer", "message rejected reason=%s detail=\"%s\"%s", reason, text,
		 pl->reject_quiet ? " (and others not logged)" : "");
	pl->reject_log_ns = now;
	pl->reject_quiet = 0;
}

/* ---- Sending control messages ------------------------------------------ */

int peer_op_post(struct peerlink *pl, struct op *op)
{
	struct node *nd = &pl->nodes[op->node];
	ssize_t r;

	if (!pl->ep)
		return -FI_ECANCELED; /* abandoned at stop */
	switch (op->kind) {
	case OP_CTRL_SEND:
		r = fi_send(pl->ep, op->buf, op->len, op->mr ? fi_mr_desc(op->mr) : NULL, nd->fa,
			    &op->fctx);
		break;
	case OP_PIECE_SEND:
		r = fi_tsend(pl->ep, op->buf, op->len, op->mr ? fi_mr_desc(op->mr) : NULL, nd->fa,
			     op->tag, &op->fctx);
		break;
	case OP_PIECE_RECV:
		r = fi_trecv(pl->ep, op->buf, op->len, op->mr ? fi_mr_desc(op->mr) : NULL,
			     FI_ADDR_UNSPEC, op->tag, 0, &op->fctx);
		break;
	default:
		r = fi_recv(pl->ep, op->buf, op->len, pl->ctrl_mr ? fi_mr_desc(pl->ctrl_mr) : NULL,
			    FI_ADDR_UNSPEC, &op->fctx);
		break;
	}
	if (r == 0)
		op->posted = true;
	return (int)r;
}

static void pending_push(struct peerlink *pl, struct op *op)
{
	struct node *nd = &pl->nodes[op->node];

	op->next = NULL;
	if (nd->pending_tail)
		nd->pending_tail->next = op;
	else
		nd->pending_head = op;
	nd->pending_tail = op;
	nd->pending++;
	pl->pending++;
}

static void op_free(struct op *op)
{
	if (!op)
		return;
	if (op->kind == OP_CTRL_SEND) {
		mr_close(&op->mr);
		free(op->buf);
	}
	free(op);
}

int peer_send_msg(struct peerlink *pl, uint32_t node, struct peer_msg *m)
{
	struct node *nd = &pl->nodes[node];
	struct op *op;
	int len, r;

	if (node >= pl->n || node == pl->me || !nd->have_addr)
		return -ENOTCONN;
	m->h.from_node = pl->me;
	m->h.to_node = node;
	m->h.nodes = pl->n;
	m->h.from_epoch = pl->epoch;
	m->h.to_epoch = nd->epoch;
	m->h.seq = ++pl->seq;
	m->h.cluster = pl->cluster;
	op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	op->buf = malloc(PEER_MSG_MAX);
	if (!op->buf) {
		free(op);
		return -ENOMEM;
	}
	len = peer_encode(m, pl->key, pl->keylen, op->buf, PEER_MSG_MAX);
	if (len < 0) {
		op_free(op);
		return len;
	}
	op->kind = OP_CTRL_SEND;
	op->len = (size_t)len;
	op->node = node;
	mr_desc(pl, op->buf, op->len, FI_SEND, &op->mr);
	if (nd->pending >= PENDING_MAX) {
		log_debug("peer", "dropping %s to node=%u: %u messages wait for it",
			  peer_type_name(m->h.type), node, nd->pending);
		op_free(op);
		return -ENOBUFS;
	}
	if (nd->pending_head) {
		pending_push(pl, op);
		return 0;
	}
	r = peer_op_post(pl, op);
	if (r == -FI_EAGAIN) {
		pending_push(pl, op);
		return 0;
	}
	if (r < 0) {
		log_warn("peer", "send failed node=%u type=%s error=\"%s\"", node,
			 peer_type_name(m->h.type), fi_strerror(-r));
		op_free(op);
		return r;
	}
	return 0;
}

void peer_msg_init(struct peer_msg *m, enum peer_type type)
{
	memset(m, 0, sizeof(*m));
	m->h.type = (uint16_t)type;
}

void peer_msg_job(struct peer_msg *m, const char *job, uint64_t step)
{
	snprintf(m->job, sizeof(m->job), "%s", job);
	m->step = step;
}

void peer_msg_shard(struct peer_msg *m, const struct rank_vote *v)
{
	m->shard_bytes = v->shard_bytes;
	m->blob_bytes = v->blob_bytes;
	m->blob_crc32c = v->blob_crc32c;
	m->index_bytes = v->index_bytes;
	memcpy(m->index_sha256, v->index_sha256, 32);
}

void peer_send_hello(struct peerlink *pl, uint32_t node, bool ack)
{
	struct peer_msg m;

	peer_msg_init(&m, ack ? PEER_HELLO_ACK : PEER_HELLO);
	memcpy(m.addr, pl->myaddr, pl->myaddr_len);
	m.addr_len = (uint32_t)pl->myaddr_len;
	snprintf(m.cluster_id, sizeof(m.cluster_id), "%s", pl->d->cfg->cluster_id);
	peer_send_msg(pl, node, &m);
}

/* ---- Receiving ---------------------------------------------------------- */

static void pending_drop(struct peerlink *pl, uint32_t k);

static void node_lost(struct peerlink *pl, uint32_t k, const char *why)
{
	struct node *nd = &pl->nodes[k];
	bool was_up = nd->up;

	nd->up = false;
	pending_drop(pl, k);
	if (was_up) {
		log_warn("peer", "peer lost node=%u reason=\"%s\"", k, why);
		node_metric(pl, k, false);
		char peer[32];
		snprintf(peer, sizeof(peer), "node %u", k);
		events_peer_lost(peer, why);
	}
	for (struct xfer *x = pl->xfers; x; x = x->next)
		if (x->node == k && !x->finished)
			xfer_fail(x, -ECONNRESET, "node %u lost: %s", k, why);
	for (struct xfer *x = pl->xfers, *next; x; x = next) {
		next = x->next;
		if (x->node == k)
			xfer_progress(pl, x);
	}
	coord_peer_lost(pl->d, k, why);
	agree_node_lost(pl->d, k, why);
}

static void on_hello(struct peerlink *pl, const struct peer_msg *m)
{
	uint32_t k = m->h.from_node;
	struct node *nd = &pl->nodes[k];

	if (strcmp(m->cluster_id, pl->d->cfg->cluster_id) != 0) {
		peer_reject(pl, "cluster", "HELLO from node %u of cluster '%s', this is '%s'", k,
		       m->cluster_id, pl->d->cfg->cluster_id);
		return;
	}
	if (nd->epoch && nd->epoch != m->h.from_epoch) {
		/* The same node, a new daemon: what the old one voted for is
		 * gone with it. */
		if (!nd->up)
			log_info("peer", "peer restarted node=%u epoch=%016llx", k,
				 (unsigned long long)m->h.from_epoch);
		node_lost(pl, k, "restarted");
	}
	if (peer_node_set_addr(pl, k, m->addr, m->addr_len) < 0) {
		peer_reject(pl, "malformed", "HELLO from node %u with an address provider %s cannot use",
		       k, pl->d->cfg->fabric_provider);
		return;
	}
	nd->epoch = m->h.from_epoch;
	nd->last_heard_ns = ckpt_mono_ns();
	if (!nd->up) {
		nd->up = true;
		log_info("peer", "peer up node=%u epoch=%016llx", k, (unsigned long long)nd->epoch);
		node_metric(pl, k, true);
	}
	if (m->h.type == PEER_HELLO)
		peer_send_hello(pl, k, true);
}

static void on_message(struct peerlink *pl, const uint8_t *buf, size_t len)
{
	struct peer_msg m;
	char err[256];
	int r = peer_decode(buf, len, pl->key, pl->keylen, &m, err, sizeof(err));

	if (r < 0) {
		peer_reject(pl, r == -EPERM ? "auth" : "malformed", "%s", err);
		return;
	}
	if (m.h.cluster != pl->cluster || m.h.nodes != pl->n) {
		peer_reject(pl, "cluster", "%s from node %u of another group (%u nodes, cluster hash "
		       "%016llx)", peer_type_name(m.h.type), m.h.from_node, m.h.nodes,
		       (unsigned long long)m.h.cluster);
		return;
	}
	if (m.h.to_node != pl->me) {
		peer_reject(pl, "malformed", "%s for node %u arrived at node %u",
		       peer_type_name(m.h.type), m.h.to_node, pl->me);
		return;
	}
	uint32_t k = m.h.from_node;
	struct node *nd = &pl->nodes[k];
	if (m.h.type == PEER_HELLO || m.h.type == PEER_HELLO_ACK) {
		on_hello(pl, &m);
		return;
	}
	if (m.h.to_epoch != pl->epoch) {
		/* For an earlier daemon on this node (e.g. a heartbeat that
		 * crossed this one's HELLO): the sender learns who is here. */
		peer_reject(pl, "stale", "%s from node %u for an earlier incarnation of this daemon",
		       peer_type_name(m.h.type), k);
		peer_send_hello(pl, k, false);
		return;
	}
	if (!nd->up && nd->epoch && m.h.from_epoch == nd->epoch) {
		/* The same incarnation, heard again after it was given up
		 * for lost (a stall, a partition that healed): up again. The
		 * steps open when it was lost have failed already. */
		nd->up = true;
		log_info("peer", "peer up again node=%u epoch=%016llx", k,
			 (unsigned long long)nd->epoch);
		node_metric(pl, k, true);
	}
	if (!nd->up || m.h.from_epoch != nd->epoch) {
		peer_reject(pl, "epoch", "%s from node %u epoch %016llx, which is not the one this daemon "
		       "knows (%016llx)", peer_type_name(m.h.type), k,
		       (unsigned long long)m.h.from_epoch, (unsigned long long)nd->epoch);
		/* It may not know us: introduce ourselves. */
		peer_send_hello(pl, k, false);
		return;
	}
	nd->last_heard_ns = ckpt_mono_ns();
	switch (m.h.type) {
	case PEER_HEARTBEAT:
		break;
	case PEER_VOTE:
		if (pl->me != 0) {
			peer_reject(pl, "conflict", "VOTE from node %u to node %u, which does not lead", k,
			       pl->me);
			break;
		}
		coord_peer_vote(pl->d, k, &m);
		break;
	case PEER_COMMITTED:
		if (k != 0) {
			peer_reject(pl, "conflict", "COMMITTED job=%s step=%llu from node %u, which does "
			       "not lead", m.job, (unsigned long long)m.step, k);
			break;
		}
		coord_peer_committed(pl->d, &m);
		peer_step_committed(pl->d, m.job, m.step);
		break;
	case PEER_ABORT:
		if (pl->me != 0 && k != 0) {
			peer_reject(pl, "conflict", "ABORT from node %u, which does not lead", k);
			break;
		}
		coord_peer_abort(pl->d, k, &m);
		peer_step_failed(pl->d, m.job, m.step);
		break;
	case PEER_COPY_OFFER:
		partner_on_copy_offer(pl, k, &m);
		break;
	case PEER_COPY_ACCEPT:
		partner_on_copy_accept(pl, k, &m);
		break;
	case PEER_COPY_DONE:
		partner_on_remote_done(pl, k, &m, X_COPY_IN);
		break;
	case PEER_FETCH:
		partner_on_fetch(pl, k, &m);
		break;
	case PEER_FETCH_HAVE:
		partner_on_fetch_have(pl, k, &m);
		break;
	case PEER_FETCH_GO:
		partner_on_fetch_go(pl, k, &m);
		break;
	case PEER_FETCH_DONE:
		partner_on_remote_done(pl, k, &m, X_FETCH);
		break;
	case PEER_AGREE_JOIN:
	case PEER_AGREE_REPORT:
		if (pl->me != 0) {
			peer_reject(pl, "conflict", "%s from node %u to node %u, which does not lead",
			       peer_type_name(m.h.type), k, pl->me);
			break;
		}
		agree_peer_message(pl->d, k, &m);
		break;
	case PEER_AGREE_TRY:
	case PEER_AGREE_DONE:
		if (k != 0) {
			peer_reject(pl, "conflict", "%s from node %u, which does not lead",
			       peer_type_name(m.h.type), k);
			break;
		}
		agree_peer_message(pl->d, k, &m);
		break;
	default:
		break;
	}
}

/* The control messages' receive buffers, posted once at start; each is
 * posted again as its message is handled (on_completion). */
static int post_ctrl_recvs(struct peerlink *pl)
{
	pl->ctrl_bufs = malloc((size_t)CTRL_RECVS * PEER_MSG_MAX);
	if (!pl->ctrl_bufs)
		return -ENOMEM;
	if (pl->mr_local &&
	    fi_mr_reg(pl->domain, pl->ctrl_bufs, (size_t)CTRL_RECVS * PEER_MSG_MAX, FI_RECV, 0, 0,
		      0, &pl->ctrl_mr, NULL) < 0)
		return -EIO;
	for (int i = 0; i < CTRL_RECVS; i++) {
		struct op *op = &pl->ctrl[i];
		op->kind = OP_CTRL_RECV;
		op->buf = pl->ctrl_bufs + (size_t)i * PEER_MSG_MAX;
		op->len = PEER_MSG_MAX;
		int r = peer_op_post(pl, op);
		if (r < 0) {
			log_error("peer", "posting receive buffers: %s", fi_strerror(-r));
			return -EIO;
		}
	}
	return 0;
}

static void on_completion(struct peerlink *pl, struct op *op, size_t len, int err)
{
	struct xfer *x;

	op->posted = false;
	switch (op->kind) {
	case OP_CTRL_RECV:
		if (err == 0)
			on_message(pl, op->buf, len);
		else if (err != -FI_ECANCELED)
			peer_reject(pl, "malformed", "receive failed: %s", fi_strerror(-err));
		if (err != -FI_ECANCELED && peer_op_post(pl, op) < 0)
			log_warn("peer", "could not repost a receive buffer");
		break;
	case OP_CTRL_SEND:
		if (err && err != -FI_ECANCELED)
			log_debug("peer", "send to node=%u failed: %s", op->node, fi_strerror(-err));
		op_free(op);
		break;
	case OP_PIECE_SEND:
	case OP_PIECE_RECV:
		x = op->x;
		x->outstanding--;
		if (op->xprev)
			op->xprev->xnext = op->xnext;
		else
			x->ops = op->xnext;
		if (op->xnext)
			op->xnext->xprev = op->xprev;
		if (err)
			xfer_fail(x, err, "piece %llu: %s",
				  (unsigned long long)(op->tag & ((1ull << PEER_TAG_PIECE_BITS) - 1)),
				  fi_strerror(-err));
		else if (op->kind == OP_PIECE_RECV && len != op->len)
			xfer_fail(x, -CKPT_E_CORRUPT, "piece of %zu bytes, %zu expected", len,
				  op->len);
		else
			x->done_pieces++;
		x->deadline_ns = ckpt_mono_ns() + peer_timeout_ns(pl);
		free(op);
		xfer_progress(pl, x);
		break;
	}
}

static void drain_cq(struct peerlink *pl)
{
	struct fi_cq_tagged_entry e[32];

	/* After abandon_transfers() what is left in the queue names
	 * operations that are gone. */
	if (!pl->ep)
		return;
	for (;;) {
		ssize_t n = fi_cq_read(pl->cq, e, 32);
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry ee;
			memset(&ee, 0, sizeof(ee));
			if (fi_cq_readerr(pl->cq, &ee, 0) > 0 && ee.op_context)
				on_completion(pl, ee.op_context, ee.len, -(int)ee.err);
			continue;
		}
		if (n <= 0)
			break;
		for (ssize_t i = 0; i < n; i++)
			on_completion(pl, e[i].op_context, e[i].len, 0);
	}
}

static void pending_pop(struct peerlink *pl, struct node *nd)
{
	struct op *op = nd->pending_head;

	nd->pending_head = op->next;
	if (!nd->pending_head)
		nd->pending_tail = NULL;
	nd->pending--;
	pl->pending--;
}

static void retry_pending(struct peerlink *pl)
{
	for (uint32_t k = 0; k < pl->n && pl->pending; k++) {
		struct node *nd = &pl->nodes[k];
		while (nd->pending_head) {
			struct op *op = nd->pending_head;
			int r = peer_op_post(pl, op);
			if (r == -FI_EAGAIN)
				break;
			pending_pop(pl, nd);
			if (r < 0)
				op_free(op);
		}
	}
}

/* What waits for a lost node will not be wanted when it is back. */
static void pending_drop(struct peerlink *pl, uint32_t k)
{
	struct node *nd = &pl->nodes[k];

	while (nd->pending_head) {
		struct op *op = nd->pending_head;
		pending_pop(pl, nd);
		op_free(op);
	}
}

static void take_fetches(struct peerlink *pl)
{
	struct fetch_req *q;

	pthread_mutex_lock(&fetch_lock);
	q = pl->fetch_q;
	pl->fetch_q = NULL;
	pthread_mutex_unlock(&fetch_lock);
	while (q) {
		struct fetch_req *next = q->next;
		if (pl->stopping)
			fetch_complete(pl, q, -ECANCELED, "ckptd is stopping");
		else
			fetch_next(pl, q);
		q = next;
	}
}

static void tick(struct peerlink *pl)
{
	int64_t now = ckpt_mono_ns();
	struct peer_msg m;

	if (!pl->duplicate_logged)
		rdv_read_start(pl, pl->me);
	for (uint32_t k = 0; k < pl->n; k++) {
		struct node *nd = &pl->nodes[k];
		if (k == pl->me)
			continue;
		if (nd->up && now - nd->last_heard_ns > peer_timeout_ns(pl)) {
			char why[64];
			snprintf(why, sizeof(why), "silent for %lld ms",
				 (long long)((now - nd->last_heard_ns) / 1000000));
			node_lost(pl, k, why);
		}
		if (!nd->up) {
			rdv_read_start(pl, k);
			if (nd->have_addr)
				peer_send_hello(pl, k, false);
		} else {
			peer_msg_init(&m, PEER_HEARTBEAT);
			peer_send_msg(pl, k, &m);
		}
	}
	/* Outcomes this node may have missed are asked for again; the leader
	 * ends steps that wait too long. */
	if (!pl->stopping)
		coord_peer_tick(pl->d, now, peer_timeout_ns(pl));
	for (struct xfer *x = pl->xfers, *next; x; x = next) {
		next = x->next;
		if (!x->finished && x->status == 0 && now > x->deadline_ns) {
			xfer_fail(x, -ETIMEDOUT, "no progress for %u ms", pl->d->cfg->peer_timeout_ms);
			xfer_progress(pl, x);
		}
	}
}

/* Completions, queued sends, transfers: what the provider's progress needs. */
static void progress(struct peerlink *pl)
{
	drain_cq(pl);
	retry_pending(pl);
	for (struct xfer *x = pl->xfers, *next; x; x = next) {
		next = x->next;
		xfer_progress(pl, x);
	}
}

void peer_dispatch(struct daemon *d)
{
	struct peerlink *pl = d->peer;
	uint64_t v;

	if (!pl)
		return;
	if (read(pl->timer_fd, &v, sizeof(v)) == (ssize_t)sizeof(v))
		tick(pl);
	if (read(pl->wake_fd, &v, sizeof(v)) == (ssize_t)sizeof(v) || pl->fetch_q)
		take_fetches(pl);
	progress(pl);
}

/*
 * Stopping, and some transfer still waits for the provider after the
 * grace period (sends to a peer cut off without a reset complete only
 * when TCP gives up, minutes later): close the endpoint, after which no
 * completion can arrive, and end them here so that ckptd can exit.
 */
static void abandon_transfers(struct peerlink *pl)
{
	unsigned n = 0;

	fi_close(&pl->ep->fid);
	pl->ep = NULL;
	for (uint32_t k = 0; k < pl->n; k++)
		pending_drop(pl, k);
	for (struct xfer **p = &pl->xfers; *p;) {
		struct xfer *x = *p;
		if (x->allocating) {
			/* A worker still maps its memory: it ends when that
			 * is done (copy_alloc_done). */
			p = &x->next;
			continue;
		}
		*p = x->next;
		n++;
		while (x->ops) {
			struct op *op = x->ops;
			x->ops = op->xnext;
			free(op);
		}
		switch (x->kind) {
		case X_COPY_OUT:
			hold_release(pl, x->hold);
			break;
		case X_COPY_IN:
			x->pe->users--;
			pentry_drop(pl, x->pe);
			break;
		case X_SERVE:
			if (--x->pe->users == 0 && x->pe->dropped)
				pentry_drop(pl, x->pe);
			break;
		case X_FETCH:
			free(x->dst_index);
			fetch_complete(pl, x->req, -ECANCELED, "ckptd is stopping");
			break;
		}
		mr_close(&x->mr_index);
		mr_close(&x->mr_shard);
		pl->d->busy--;
		free(x);
	}
	log_warn("peer", "stopping: %u transfers still waited for their peers after %d s; "
		 "the endpoint is closed", n, STOP_GRACE_S);
}

int peer_poll_ms(struct daemon *d)
{
	struct peerlink *pl = d->peer;

	if (!pl)
		return -1;
	if (pl->stopping && pl->xfers && pl->ep &&
	    ckpt_mono_ns() - pl->stop_ns > (int64_t)STOP_GRACE_S * 1000000000)
		abandon_transfers(pl);
	if (!pl->ep)
		return pl->xfers ? 10 : -1;
	/* Before every sleep of the loop: only what the provider needs; the
	 * timer and the fetch requests come as their own epoll events. */
	progress(pl);
	if (pl->xfers || pl->pending || pl->cq_fd < 0)
		return 1;
	struct fid *fids[1] = { &pl->cq->fid };
	for (int i = 0; i < 4; i++) {
		if (fi_trywait(pl->fabric, fids, 1) == 0)
			return -1;
		drain_cq(pl);
	}
	return 0;
}

int peer_fd(struct daemon *d)
{
	return d->peer ? d->peer->cq_fd : -1;
}

int peer_timer_fd(struct daemon *d)
{
	return d->peer ? d->peer->timer_fd : -1;
}

int peer_wake_fd(struct daemon *d)
{
	return d->peer ? d->peer->wake_fd : -1;
}

/* ---- Coordinator messages ----------------------------------------------- */

int peer_send_vote(struct daemon *d, const struct step *st, uint32_t rank,
		    const struct rank_vote *v, bool again)
{
	struct peer_msg m;

	peer_msg_init(&m, PEER_VOTE);
	m.status = again ? PEER_VOTE_AGAIN : 0;
	peer_msg_job(&m, st->job->name, st->step);
	m.world_size = st->world_size;
	m.rank = rank;
	peer_msg_shard(&m, v);
	if (!d->peer->nodes[0].up)
		return -ENOTCONN;
	return peer_send_msg(d->peer, 0, &m);
}

static void abort_msg(struct peer_msg *m, const char *job, uint64_t step, int error,
		      const char *reason)
{
	peer_msg_init(m, PEER_ABORT);
	peer_msg_job(m, job, step);
	m->status = error < 0 ? error : -EIO;
	snprintf(m->reason, sizeof(m->reason), "%s", reason ? reason : "");
}

void peer_send_abort_to(struct daemon *d, uint32_t node, const char *job, uint64_t step,
			int error, const char *reason)
{
	struct peer_msg m;

	abort_msg(&m, job, step, error, reason);
	peer_send_msg(d->peer, node, &m);
}

void peer_send_abort(struct daemon *d, const char *job, uint64_t step, int error,
		     const char *reason)
{
	struct peerlink *pl = d->peer;

	if (!pl)
		return;
	if (pl->me != 0) {
		peer_send_abort_to(d, 0, job, step, error, reason);
		return;
	}
	if (peer_test_fault("drop-outcomes")) {
		log_warn("peer", "TEST FAULT: ABORT job=%s step=%llu not sent to any node", job,
			 (unsigned long long)step);
		return;
	}
	for (uint32_t k = 1; k < pl->n; k++)
		if (pl->nodes[k].up)
			peer_send_abort_to(d, k, job, step, error, reason);
}

void peer_send_committed_to(struct daemon *d, uint32_t node, const char *job, uint64_t step,
			    uint32_t world_size)
{
	struct peer_msg m;

	peer_msg_init(&m, PEER_COMMITTED);
	peer_msg_job(&m, job, step);
	m.world_size = world_size;
	peer_send_msg(d->peer, node, &m);
}

void peer_send_committed(struct daemon *d, const char *job, uint64_t step, uint32_t world_size)
{
	struct peerlink *pl = d->peer;

	if (!pl)
		return;
	if (peer_test_fault("drop-outcomes"))
		log_warn("peer", "TEST FAULT: COMMITTED job=%s step=%llu not sent to any node",
			 job, (unsigned long long)step);
	else
		for (uint32_t k = 1; k < pl->n; k++)
			if (pl->nodes[k].up)
				peer_send_committed_to(d, k, job, step, world_size);
	peer_step_committed(d, job, step);
}

bool peer_recently_committed(const struct daemon *d, const char *job, uint64_t step)
{
	return d->peer && recently_committed(d->peer, job, step);
}

/* Agreed restores (agree.c): a message of its own to one node. */
int peer_send_agree(struct daemon *d, uint32_t node, struct peer_msg *m)
{
	struct peerlink *pl = d->peer;

	if (!pl || node >= pl->n || !pl->nodes[node].up)
		return -ENOTCONN;
	return peer_send_msg(pl, node, m);
}

uint32_t peer_node_index(const struct daemon *d)
{
	return d->peer ? d->peer->me : 0;
}

/* ---- Life cycle ---------------------------------------------------------- */

int peer_init(struct daemon *d)
{
	const struct ckptd_config *cfg = d->cfg;
	struct peerlink *pl;
	int r;

	if (cfg->nodes <= 1)
		return 0;
	pl = calloc(1, sizeof(*pl));
	if (!pl)
		return -ENOMEM;
	pl->d = d;
	pl->cq_fd = pl->timer_fd = pl->wake_fd = -1;
	const char *fault = getenv("CKPTD_TEST_FAULT");
	if (fault && *fault) {
		snprintf(test_fault, sizeof(test_fault), "%s", fault);
		log_warn("peer", "TEST FAULT INJECTION ENABLED: CKPTD_TEST_FAULT=%s (tests only; "
			 "never set it in production)", test_fault);
	}
	pl->me = cfg->node_index;
	pl->n = cfg->nodes;
	pl->explicit_peers = *cfg->peers != '\0';
	pl->cluster = peer_cluster_hash(cfg->cluster_id);
	pl->nodes = calloc(pl->n, sizeof(*pl->nodes));
	d->peer = pl;
	if (!pl->nodes)
		return -ENOMEM;
	if (getrandom(&pl->epoch, sizeof(pl->epoch), 0) != (ssize_t)sizeof(pl->epoch) ||
	    getrandom(&pl->next_xfer, sizeof(pl->next_xfer), 0) != (ssize_t)sizeof(pl->next_xfer))
		return -EIO;
	pl->epoch |= 1;
	snprintf(pl->rdv, sizeof(pl->rdv), "%s", cfg->rendezvous_dir);
	if (!pl->explicit_peers && (r = rdv_mkdir_p(pl->rdv, 0700)) < 0) {
		log_error("peer", "cannot create rendezvous directory %s: %s", pl->rdv, strerror(-r));
		return r;
	}
	if ((r = peer_load_key(pl)) < 0)
		return r;
	if ((r = fabric_open(pl)) < 0)
		return r;
	if ((r = post_ctrl_recvs(pl)) < 0)
		return r;
	pl->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	pl->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (pl->timer_fd < 0 || pl->wake_fd < 0)
		return -errno;
	int64_t period = peer_timeout_ns(pl) / 4;
	struct itimerspec its = {
		.it_interval = { period / 1000000000, period % 1000000000 },
		.it_value = { 0, 1000000 },
	};
	timerfd_settime(pl->timer_fd, 0, &its, NULL);
	if (pl->explicit_peers) {
		char host[256], port[32];
		for (uint32_t k = 0; k < pl->n; k++) {
			fi_addr_t fa;
			if (k == pl->me)
				continue;
			if (peer_entry(cfg->peers, k, host, sizeof(host), port, sizeof(port)) < 0 ||
			    fi_av_insertsvc(pl->av, host, port, &fa, 0, NULL) != 1) {
				log_error("peer", "peers: entry %u is not an address provider %s can "
					  "reach", k, cfg->fabric_provider);
				return -EINVAL;
			}
			pl->nodes[k].fa = fa;
			pl->nodes[k].have_addr = true;
		}
	} else if ((r = rdv_publish(pl)) < 0) {
		log_error("peer", "cannot publish this node's address in %s: %s", pl->rdv,
			  strerror(-r));
		return r;
	}
	for (uint32_t k = 0; k < pl->n; k++)
		if (k != pl->me)
			node_metric(pl, k, false);
	store_gauge(pl);
	char addr[2 * PEER_ADDR_MAX + 1];
	ckpt_hex(addr, pl->myaddr, pl->myaddr_len);
	log_info("peer", "peer link up node=%u nodes=%u cluster=%s provider=%s epoch=%016llx "
		 "authenticated=%s rendezvous=%s", pl->me, pl->n, cfg->cluster_id,
		 pl->info->fabric_attr->prov_name, (unsigned long long)pl->epoch,
		 pl->keylen ? "yes" : "no", pl->explicit_peers ? "(peers)" : pl->rdv);
	return 0;
}

void peer_stop(struct daemon *d)
{
	struct peerlink *pl = d->peer;

	if (!pl || pl->stopping)
		return;
	pthread_mutex_lock(&fetch_lock);
	pl->stopping = true;
	pthread_mutex_unlock(&fetch_lock);
	pl->stop_ns = ckpt_mono_ns();
	for (struct xfer *x = pl->xfers; x; x = x->next)
		xfer_fail(x, -ECANCELED, "ckptd is stopping");
	take_fetches(pl);
	peer_dispatch(d);
}

void peer_fini(struct daemon *d)
{
	struct peerlink *pl = d->peer;

	if (!pl)
		return;
	pl->stopping = true;
	/* Transfers still here hold slots of clients being freed: their
	 * buffers go with the endpoint, which is closed first. */
	if (pl->ep)
		fi_close(&pl->ep->fid);
	while (pl->xfers) {
		struct xfer *x = pl->xfers;
		pl->xfers = x->next;
		if (x->kind == X_FETCH)
			fetch_complete(pl, x->req, -ECANCELED, "ckptd is stopping");
		if (x->kind == X_COPY_OUT && --x->hold->refs == 0) {
			client_unref(x->hold->c);
			free(x->hold->index);
			free(x->hold);
		}
		if (x->kind == X_FETCH)
			free(x->dst_index);
		mr_close(&x->mr_index);
		mr_close(&x->mr_shard);
		free(x);
	}
	for (uint32_t k = 0; k < pl->n; k++)
		pending_drop(pl, k);
	while (pl->store) {
		struct pentry *pe = pl->store;
		pl->store = pe->next;
		if (pe->mem)
			munmap(pe->mem, pe->mem_len);
		free(pe);
	}
	for (int i = 0; i < SPARE_BUFFERS; i++)
		if (pl->spare[i].mem)
			munmap(pl->spare[i].mem, pl->spare[i].len);
	mr_close(&pl->ctrl_mr);
	if (pl->cq)
		fi_close(&pl->cq->fid);
	if (pl->av)
		fi_close(&pl->av->fid);
	if (pl->domain)
		fi_close(&pl->domain->fid);
	if (pl->fabric)
		fi_close(&pl->fabric->fid);
	if (pl->info)
		fi_freeinfo(pl->info);
	if (pl->timer_fd >= 0)
		close(pl->timer_fd);
	if (pl->wake_fd >= 0)
		close(pl->wake_fd);
	if (!pl->explicit_peers && pl->myaddr_len && rdv_own_file_is_ours(pl)) {
		char path[PATH_MAX + 32];
		snprintf(path, sizeof(path), "%s/node-%u", pl->rdv, pl->me);
		unlink(path);
	}
	free(pl->ctrl_bufs);
	free(pl->nodes);
	free(pl);
	d->peer = NULL;
}
