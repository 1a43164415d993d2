/* SPDX-License-Identifier: MIT */
/*
 * The peer link (peer.h): libfabric RDM endpoint, rendezvous, heartbeats,
 * the global commit's messages, partner copies and partner fetches.
 *
 * Control messages (peerwire.h) are untagged sends into pre-posted
 * buffers. Bulk data (shards, indexes) are tagged sends straight from the
 * rank's slot (copy) or from partner memory (fetch) into buffers the
 * receiver posted for exactly that transfer: tag = xfer id << 24 | piece,
 * piece 0 the index, 1.. the shard in piece_bytes pieces. A receiver posts
 * its buffers before it answers ACCEPT or GO, so nothing lands unasked, and
 * what lands is checked against the index (chunk CRCs) and the index
 * against the digest the votes carried before anyone restores from it.
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
#include <rdma/fi_cm.h>
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
#include "agree.h"
#include "peer.h"
#include "peerwire.h"

#define CTRL_RECVS 64
#define PIECE_BYTES (1u << 20)
#define SEND_WINDOW 8
#define RECV_WINDOW 32
#define HOLDER_MAX 16

struct node {
	bool have_addr, up;
	fi_addr_t fa;
	uint8_t addr[PEER_ADDR_MAX];
	size_t addr_len;
	uint64_t epoch;          /* its incarnation, 0 unknown */
	uint64_t file_epoch;     /* epoch of the rendezvous file last read */
	bool rdv_reading;        /* its rendezvous file is being read on a worker */
	int64_t last_heard_ns;
	/* Control messages the provider had no room for yet, in order. Per
	 * node: a peer that does not take messages must not hold up others. */
	struct op *pending_head, *pending_tail;
	unsigned pending;
};

#define PENDING_MAX 256
#define RECENT_COMMITS 64
#define SPARE_BUFFERS 4
#define STOP_GRACE_S 5

enum op_kind { OP_CTRL_RECV, OP_CTRL_SEND, OP_PIECE_SEND, OP_PIECE_RECV };

struct xfer;

struct op {
	struct fi_context2 fctx; /* first: the provider's context */
	enum op_kind kind;
	struct op *next;         /* pending (sends waiting for room) */
	struct xfer *x;
	uint8_t *buf;
	size_t len;
	uint32_t node;
	uint64_t tag;
	struct fid_mr *mr;
	bool posted;
	struct op *xprev, *xnext; /* the transfer's posted pieces */
};

/* Partner memory: one rank's shard of one step, as node `from` sent it. */
struct pentry {
	struct pentry *next;
	char job[CKPT_JOB_NAME_MAX + 1];
	uint64_t step;
	uint32_t rank, world_size, from;
	uint64_t shard_bytes, index_bytes;
	uint8_t sha[32];
	uint8_t *mem;            /* index, then shard */
	uint64_t mem_len;        /* mapped */
	bool complete, committed, dropped;
	unsigned users;          /* transfers reading or writing mem */
};

/* A slot held for partner copies (one per target). */
struct hold {
	struct client *c;
	uint32_t slot;
	uint64_t step;
	unsigned refs;
	void *index;
};

struct fetch_req {
	struct fetch_req *next;
	pthread_cond_t cv;
	bool done;
	int result;
	char err[CKPT_REASON_MAX + 1];
	char job[CKPT_JOB_NAME_MAX + 1];
	uint64_t step;
	uint32_t rank;
	uint8_t *dst;
	uint64_t cap;
	void *index;
	uint64_t index_bytes, shard_bytes;
	unsigned tried;          /* partners asked so far */
};

enum xfer_kind { X_COPY_OUT, X_COPY_IN, X_SERVE, X_FETCH };

struct xfer {
	struct xfer *next;
	enum xfer_kind kind;
	uint64_t id;
	uint32_t node;
	char job[CKPT_JOB_NAME_MAX + 1];
	uint64_t step;
	uint32_t rank, world_size;
	uint64_t shard_bytes, index_bytes;
	uint8_t sha[32];
	uint32_t piece_bytes;
	const uint8_t *src_index, *src_shard; /* send side */
	uint8_t *dst_index, *dst_shard;       /* receive side */
	uint64_t npieces, next_piece, done_pieces;
	unsigned outstanding;
	bool started, remote_done, finished, cancelled;
	bool allocating;         /* X_COPY_IN: its memory is being mapped on a worker */
	int status, remote_status;
	char reason[CKPT_REASON_MAX + 1];
	int64_t deadline_ns, started_ns;
	struct fid_mr *mr_index, *mr_shard;
	struct hold *hold;       /* X_COPY_OUT */
	struct pentry *pe;       /* X_COPY_IN, X_SERVE */
	struct fetch_req *req;   /* X_FETCH */
	struct op *ops;          /* pieces posted and not completed */
};

struct peerlink {
	struct daemon *d;
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	int cq_fd, timer_fd, wake_fd;
	bool mr_local;
	size_t max_msg;
	uint32_t me, n;
	uint64_t epoch, cluster, seq, next_xfer;
	uint8_t key[PEER_KEY_MAX];
	size_t keylen;
	uint8_t myaddr[PEER_ADDR_MAX];
	size_t myaddr_len;
	struct node *nodes;
	struct op ctrl[CTRL_RECVS];
	uint8_t *ctrl_bufs;
	struct fid_mr *ctrl_mr;
	unsigned pending;        /* over all nodes */
	struct xfer *xfers;
	struct pentry *store;
	uint64_t store_bytes;
	/* Steps committed lately, as the leader said: a partner copy that
	 * completes after the commit (its job may be gone from this daemon
	 * by then) still becomes the newest. */
	struct {
		char job[CKPT_JOB_NAME_MAX + 1];
		uint64_t step;
	} recent[RECENT_COMMITS];
	unsigned recent_next;
	/* Buffers of dropped copies, kept for the next ones (the next step's
	 * copy of a rank is usually the same size): faulting fresh memory in
	 * costs more than receiving into it. Counted in store_bytes. */
	struct {
		uint8_t *mem;
		uint64_t len;
	} spare[SPARE_BUFFERS];
	struct fetch_req *fetch_q; /* under fetch_lock */
	char rdv[PATH_MAX];
	bool explicit_peers, stopping, duplicate_logged;
	int64_t stop_ns;         /* when peer_stop() was called */
	int64_t reject_log_ns;
	unsigned reject_quiet;
};

static pthread_mutex_t fetch_lock = PTHREAD_MUTEX_INITIALIZER;

/* CKPTD_TEST_FAULT, read once in peer_init: fault injection for tests. */
static char test_fault[64];

bool peer_test_fault(const char *name)
{
	return test_fault[0] && strcmp(test_fault, name) == 0;
}

static int64_t timeout_ns(const struct peerlink *pl)
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

/* ---- Memory registration (providers with FI_MR_LOCAL) ------------------ */

static void *mr_desc(struct peerlink *pl, const void *buf, size_t len, uint64_t access,
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

static void mr_close(struct fid_mr **mr)
{
	if (*mr)
		fi_close(&(*mr)->fid);
	*mr = NULL;
}

/* ---- Rejections -------------------------------------------------------- */

static void reject(struct peerlink *pl, const char *reason, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void reject(struct peerlink *pl, const char *reason, const char *fmt, ...)
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

static int op_post(struct peerlink *pl, struct op *op)
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

static int send_msg(struct peerlink *pl, uint32_t node, struct peer_msg *m)
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
	r = op_post(pl, op);
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

static void msg_init(struct peer_msg *m, enum peer_type type)
{
	memset(m, 0, sizeof(*m));
	m->h.type = (uint16_t)type;
}

static void msg_job(struct peer_msg *m, const char *job, uint64_t step)
{
	snprintf(m->job, sizeof(m->job), "%s", job);
	m->step = step;
}

static void send_hello(struct peerlink *pl, uint32_t node, bool ack)
{
	struct peer_msg m;

	msg_init(&m, ack ? PEER_HELLO_ACK : PEER_HELLO);
	memcpy(m.addr, pl->myaddr, pl->myaddr_len);
	m.addr_len = (uint32_t)pl->myaddr_len;
	snprintf(m.cluster_id, sizeof(m.cluster_id), "%s", pl->d->cfg->cluster_id);
	send_msg(pl, node, &m);
}

/* ---- Addresses and rendezvous ------------------------------------------- */

static int node_set_addr(struct peerlink *pl, uint32_t k, const uint8_t *addr, size_t len)
{
	struct node *nd = &pl->nodes[k];
	fi_addr_t fa;

	if (len == 0 || len > PEER_ADDR_MAX)
		return -EINVAL;
	if (nd->have_addr && nd->addr_len == len && memcmp(nd->addr, addr, len) == 0)
		return 0;
	if (fi_av_insert(pl->av, addr, 1, &fa, 0, NULL) != 1)
		return -EINVAL;
	/* The old address is left in the table: operations may still
	 * complete against it. */
	nd->fa = fa;
	memcpy(nd->addr, addr, len);
	nd->addr_len = len;
	nd->have_addr = true;
	return 0;
}

static int unhex(const char *s, uint8_t *out, size_t cap, size_t *len)
{
	size_t n = strlen(s);

	while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
		n--;
	if (n % 2 || n / 2 > cap)
		return -EINVAL;
	for (size_t i = 0; i < n / 2; i++) {
		unsigned v = 0;
		for (int j = 0; j < 2; j++) {
			char c = s[2 * i + (size_t)j];
			v <<= 4;
			if (c >= '0' && c <= '9')
				v |= (unsigned)(c - '0');
			else if (c >= 'a' && c <= 'f')
				v |= (unsigned)(c - 'a' + 10);
			else
				return -EINVAL;
		}
		out[i] = (uint8_t)v;
	}
	*len = n / 2;
	return 0;
}

static int mkdir_p(const char *path, mode_t mode)
{
	char tmp[PATH_MAX];
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(tmp, path, len + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, mode) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* node-<K>: "ckpt-peer 1", "node=K", "epoch=<16 hex>", "addr=<hex>". */
static int publish(struct peerlink *pl)
{
	char path[PATH_MAX + 32], tmp[PATH_MAX + 64];
	char addr[2 * PEER_ADDR_MAX + 1];
	FILE *f;

	snprintf(path, sizeof(path), "%s/node-%u", pl->rdv, pl->me);
	snprintf(tmp, sizeof(tmp), "%s/.node-%u.%d.tmp", pl->rdv, pl->me, (int)getpid());
	ckpt_hex(addr, pl->myaddr, pl->myaddr_len);
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fprintf(f, "ckpt-peer 1\nnode=%u\nepoch=%016llx\naddr=%s\n", pl->me,
		(unsigned long long)pl->epoch, addr);
	if (fflush(f) != 0 || fsync(fileno(f)) < 0) {
		int r = -errno;
		fclose(f);
		unlink(tmp);
		return r;
	}
	fclose(f);
	if (rename(tmp, path) < 0) {
		int r = -errno;
		unlink(tmp);
		return r;
	}
	return 0;
}

/* Node k's rendezvous file in rdv: 0 with its epoch and address, -ENOENT,
 * or -EBADMSG for a file that is not a node-k address. Blocking metadata
 * I/O on the shared root: on a worker only, once the loop runs. */
static int read_node_file(const char *rdv, uint32_t k, uint64_t *epoch_out,
			  uint8_t *addr, size_t *addr_len)
{
	char path[PATH_MAX + 32], line[2 * PEER_ADDR_MAX + 64];
	unsigned long long epoch = 0;
	unsigned node = UINT_MAX;
	bool magic = false;
	FILE *f;

	*addr_len = 0;
	snprintf(path, sizeof(path), "%s/node-%u", rdv, k);
	f = fopen(path, "r");
	if (!f)
		return -ENOENT;
	while (fgets(line, sizeof(line), f)) {
		if (strcmp(line, "ckpt-peer 1\n") == 0)
			magic = true;
		else if (sscanf(line, "node=%u", &node) == 1)
			;
		else if (sscanf(line, "epoch=%llx", &epoch) == 1)
			;
		else if (strncmp(line, "addr=", 5) == 0 &&
			 unhex(line + 5, addr, PEER_ADDR_MAX, addr_len) < 0)
			*addr_len = 0;
	}
	fclose(f);
	if (!magic || node != k || epoch == 0 || *addr_len == 0)
		return -EBADMSG;
	*epoch_out = epoch;
	return 0;
}

/* Whether this daemon's own rendezvous file still names it (at stop: the
 * loop has ended). */
static bool own_file_is_ours(const struct peerlink *pl)
{
	uint8_t addr[PEER_ADDR_MAX];
	size_t addr_len;
	uint64_t epoch = 0;

	return read_node_file(pl->rdv, pl->me, &epoch, addr, &addr_len) == 0 &&
	       epoch == pl->epoch;
}

/*
 * A look at one node's rendezvous file, on a worker: the file of a node
 * that is down (its address may be new), or this daemon's own (another
 * daemon started with the same node_index replaces it). The shared root's
 * metadata server may be slow or hung: the loop never waits for it, and
 * each file has at most one read in flight, so a file that hangs holds up
 * only its own node (and one worker).
 */
struct rdv_read {
	struct peerlink *pl;
	char rdv[PATH_MAX];
	uint32_t k;
	int result;
	uint64_t epoch;
	uint8_t addr[PEER_ADDR_MAX];
	size_t addr_len;
};

static void rdv_read_run(void *arg)
{
	struct rdv_read *rd = arg;

	rd->result = read_node_file(rd->rdv, rd->k, &rd->epoch, rd->addr, &rd->addr_len);
}

static void rdv_read_done(void *arg)
{
	struct rdv_read *rd = arg;
	struct peerlink *pl = rd->pl;
	struct node *nd = &pl->nodes[rd->k];
	uint32_t k = rd->k;

	nd->rdv_reading = false;
	if (k == pl->me) {
		if ((rd->result < 0 || rd->epoch != pl->epoch) && !pl->duplicate_logged) {
			/* Said once: the group cannot work like this, and the
			 * other nodes see node K "restart" at every message of
			 * either. */
			log_error("peer", "another daemon has published itself as node %u in %s: two "
				  "daemons with node_index %u? (this one: epoch %016llx)", pl->me,
				  pl->rdv, pl->me, (unsigned long long)pl->epoch);
			pl->duplicate_logged = true;
		}
		free(rd);
		return;
	}
	if (pl->stopping || nd->up)
		goto out;
	if (rd->result == -EBADMSG)
		log_warn("peer", "ignoring rendezvous file %s/node-%u: not a node-%u address",
			 pl->rdv, k, k);
	if (rd->result < 0 || rd->epoch == nd->file_epoch)
		goto out;
	if (node_set_addr(pl, k, rd->addr, rd->addr_len) < 0) {
		log_warn("peer", "rendezvous file %s/node-%u: address not usable by provider %s",
			 pl->rdv, k, pl->d->cfg->fabric_provider);
		goto out;
	}
	nd->file_epoch = rd->epoch;
	/* A new address: no need to wait for the next tick. */
	send_hello(pl, k, false);
out:
	free(rd);
}

static void rdv_read_start(struct peerlink *pl, uint32_t k)
{
	struct node *nd = &pl->nodes[k];
	struct rdv_read *rd;

	if (pl->explicit_peers || nd->rdv_reading)
		return;
	rd = calloc(1, sizeof(*rd));
	if (!rd)
		return;
	rd->pl = pl;
	rd->k = k;
	snprintf(rd->rdv, sizeof(rd->rdv), "%s", pl->rdv);
	if (workers_submit(pl->d->workers, rdv_read_run, rdv_read_done, rd) < 0) {
		free(rd);
		return;
	}
	nd->rdv_reading = true;
}

static int load_key(struct peerlink *pl)
{
	const struct ckptd_config *cfg = pl->d->cfg;
	char path[PATH_MAX + 8], tmp[PATH_MAX + 64];
	uint8_t buf[PEER_KEY_MAX + 1];
	ssize_t n;
	int fd;

	if (*cfg->peer_key_file) {
		snprintf(path, sizeof(path), "%s", cfg->peer_key_file);
	} else if (pl->explicit_peers) {
		log_warn("peer", "peers is set and peer_key_file is not: peer messages are not "
			 "authenticated");
		pl->keylen = 0;
		return 0;
	} else {
		snprintf(path, sizeof(path), "%s/key", pl->rdv);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT) {
			/* The first daemon creates it: written under a
			 * temporary name, then linked, so nobody reads half. */
			uint8_t key[32];
			if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key))
				return -EIO;
			snprintf(tmp, sizeof(tmp), "%s/.key.%d.tmp", pl->rdv, (int)getpid());
			int t = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
			if (t < 0)
				return -errno;
			bool ok = write(t, key, sizeof(key)) == (ssize_t)sizeof(key) && fsync(t) == 0;
			close(t);
			if (ok && link(tmp, path) < 0 && errno != EEXIST)
				ok = false;
			unlink(tmp);
			if (!ok)
				return -EIO;
		} else if (fd >= 0) {
			close(fd);
		}
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int r = -errno;
		log_error("peer", "cannot read the peer key %s: %s", path, strerror(-r));
		return r;
	}
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n < 16 || n > PEER_KEY_MAX) {
		log_error("peer", "peer key %s must hold 16 to %d bytes", path, PEER_KEY_MAX);
		return -EINVAL;
	}
	memcpy(pl->key, buf, (size_t)n);
	pl->keylen = (size_t)n;
	return 0;
}

/* "host:port" number k of the comma-separated list. */
static int peer_entry(const char *list, uint32_t k, char *host, size_t hcap, char *port,
		      size_t pcap)
{
	const char *p = list;

	for (uint32_t i = 0; i < k; i++) {
		p = strchr(p, ',');
		if (!p)
			return -EINVAL;
		p++;
	}
	const char *end = strchr(p, ',');
	size_t len = end ? (size_t)(end - p) : strlen(p);
	const char *colon = NULL;
	for (size_t i = 0; i < len; i++)
		if (p[i] == ':')
			colon = p + i;
	if (!colon || colon == p || (size_t)(colon - p) >= hcap ||
	    len - (size_t)(colon - p) - 1 >= pcap || len - (size_t)(colon - p) - 1 == 0)
		return -EINVAL;
	memcpy(host, p, (size_t)(colon - p));
	host[colon - p] = '\0';
	memcpy(port, colon + 1, len - (size_t)(colon - p) - 1);
	port[len - (size_t)(colon - p) - 1] = '\0';
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	return 0;
}

/* ---- Fabric ------------------------------------------------------------- */

static int fabric_open(struct peerlink *pl)
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
		int r = op_post(pl, op);
		if (r < 0) {
			log_error("peer", "posting receive buffers: %s", fi_strerror(-r));
			return -EIO;
		}
	}
	return 0;
}

/* ---- Transfers ----------------------------------------------------------- */

static uint64_t xfer_new_id(struct peerlink *pl)
{
	uint64_t id = (pl->next_xfer++) & PEER_XFER_MASK;

	return id ? id : (pl->next_xfer++) & PEER_XFER_MASK;
}

static struct xfer *xfer_new(struct peerlink *pl, enum xfer_kind kind, uint32_t node,
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
	x->deadline_ns = x->started_ns + timeout_ns(pl);
	x->next = pl->xfers;
	pl->xfers = x;
	pl->d->busy++;
	return x;
}

static struct xfer *xfer_find(struct peerlink *pl, enum xfer_kind kind, uint32_t node,
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

static uint64_t pieces_of(uint64_t shard_bytes, uint32_t piece_bytes)
{
	return 1 + (shard_bytes + piece_bytes - 1) / piece_bytes;
}

static void xfer_fail(struct xfer *x, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void xfer_fail(struct xfer *x, int err, const char *fmt, ...)
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
static void xfer_pump(struct peerlink *pl, struct xfer *x)
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
		int r = op_post(pl, op);
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
static void xfer_register(struct peerlink *pl, struct xfer *x, bool send)
{
	uint64_t access = send ? FI_SEND : FI_RECV;

	mr_desc(pl, send ? x->src_index : x->dst_index, x->index_bytes, access, &x->mr_index);
	mr_desc(pl, send ? x->src_shard : x->dst_shard, x->shard_bytes, access, &x->mr_shard);
}

static void pentry_drop(struct peerlink *pl, struct pentry *pe);
static bool recently_committed(const struct peerlink *pl, const char *job, uint64_t step);
static void pending_drop(struct peerlink *pl, uint32_t k);
static void fetch_next(struct peerlink *pl, struct fetch_req *rq);
static void fetch_complete(struct peerlink *pl, struct fetch_req *rq, int result,
			   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void hold_release(struct peerlink *pl, struct hold *h)
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
			msg_init(&m, PEER_COPY_DONE);
			msg_job(&m, x->job, x->step);
			m.rank = x->rank;
			m.world_size = x->world_size;
			m.xfer = x->id;
			m.status = x->status;
			snprintf(m.reason, sizeof(m.reason), "%s", x->reason);
			send_msg(pl, x->node, &m);
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
			msg_init(&m, PEER_FETCH_DONE);
			msg_job(&m, x->job, x->step);
			m.rank = x->rank;
			m.xfer = x->id;
			m.status = x->status;
			snprintf(m.reason, sizeof(m.reason), "%s", x->reason);
			send_msg(pl, x->node, &m);
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
static void xfer_progress(struct peerlink *pl, struct xfer *x)
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
		msg_init(&m, x->kind == X_COPY_OUT ? PEER_COPY_DONE : PEER_FETCH_DONE);
		msg_job(&m, x->job, x->step);
		m.rank = x->rank;
		m.world_size = x->kind == X_COPY_OUT ? x->world_size : 0;
		m.xfer = x->id;
		send_msg(pl, x->node, &m);
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

/* ---- Partner memory ------------------------------------------------------ */

static void store_gauge(struct peerlink *pl)
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

static void pentry_drop(struct peerlink *pl, struct pentry *pe)
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

static bool recently_committed(const struct peerlink *pl, const char *job, uint64_t step)
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
		msg_init(&m, PEER_COPY_OFFER);
		msg_job(&m, x->job, x->step);
		m.world_size = x->world_size;
		m.rank = rank;
		m.shard_bytes = v->shard_bytes;
		m.blob_bytes = v->blob_bytes;
		m.blob_crc32c = v->blob_crc32c;
		m.index_bytes = v->index_bytes;
		memcpy(m.index_sha256, v->index_sha256, 32);
		m.xfer = x->id;
		m.piece_bytes = x->piece_bytes;
		m.status = 1;
		if (send_msg(pl, node, &m) < 0)
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
	xfer_register(pl, x, false);
	x->started = true;
	xfer_pump(pl, x);
	msg_init(&a, PEER_COPY_ACCEPT);
	msg_job(&a, x->job, x->step);
	a.rank = x->rank;
	a.world_size = x->world_size;
	a.xfer = x->id;
	a.status = 1;
	send_msg(pl, x->node, &a);
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
			msg_init(&a, PEER_COPY_ACCEPT);
			msg_job(&a, x->job, x->step);
			a.rank = x->rank;
			a.world_size = x->world_size;
			a.xfer = x->id;
			snprintf(a.reason, sizeof(a.reason), "node %u cannot map %llu bytes", pl->me,
				 (unsigned long long)ca->len);
			send_msg(pl, x->node, &a);
		}
		xfer_progress(pl, x);
	}
	free(ca);
}

static void on_copy_offer(struct peerlink *pl, uint32_t from, const struct peer_msg *m)
{
	struct peer_msg a;
	uint64_t need = m->shard_bytes + m->index_bytes;
	uint64_t mem_len = copy_mem_len(need);

	msg_init(&a, PEER_COPY_ACCEPT);
	msg_job(&a, m->job, m->step);
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
	send_msg(pl, from, &a);
}

static void on_copy_accept(struct peerlink *pl, uint32_t from, const struct peer_msg *m)
{
	struct xfer *x = xfer_find(pl, X_COPY_OUT, from, m->xfer);

	if (!x) {
		reject(pl, "stale", "COPY_ACCEPT from node %u for no transfer of ours", from);
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

static void on_remote_done(struct peerlink *pl, uint32_t from, const struct peer_msg *m,
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

static void fetch_complete(struct peerlink *pl, struct fetch_req *rq, int result,
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
static void fetch_next(struct peerlink *pl, struct fetch_req *rq)
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
		msg_init(&m, PEER_FETCH);
		msg_job(&m, rq->job, rq->step);
		m.rank = rq->rank;
		m.xfer = x->id;
		if (send_msg(pl, node, &m) < 0) {
			xfer_fail(x, -ENOTCONN, "unreachable");
			xfer_progress(pl, x);
			return;
		}
		return;
	}
	fetch_complete(pl, rq, -ENOENT, "no partner holds rank %u of step %llu", rq->rank,
		       (unsigned long long)rq->step);
}

static void on_fetch(struct peerlink *pl, uint32_t from, const struct peer_msg *m)
{
	struct pentry *pe = store_find(pl, m->job, m->step, m->rank);
	struct peer_msg a;

	msg_init(&a, PEER_FETCH_HAVE);
	msg_job(&a, m->job, m->step);
	a.rank = m->rank;
	a.xfer = m->xfer;
	if (!pe || pe->shard_bytes + pe->index_bytes == 0) {
		a.status = 0;
		send_msg(pl, from, &a);
		return;
	}
	struct xfer *x = xfer_new(pl, X_SERVE, from, m->job, m->step, m->rank);
	if (!x) {
		a.status = 0;
		send_msg(pl, from, &a);
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
	send_msg(pl, from, &a);
}

static void on_fetch_have(struct peerlink *pl, uint32_t from, const struct peer_msg *m)
{
	struct xfer *x = xfer_find(pl, X_FETCH, from, m->xfer);
	struct peer_msg go;

	if (!x) {
		reject(pl, "stale", "FETCH_HAVE from node %u for no fetch of ours", from);
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
	xfer_register(pl, x, false);
	x->started = true;
	xfer_pump(pl, x);
	msg_init(&go, PEER_FETCH_GO);
	msg_job(&go, x->job, x->step);
	go.rank = x->rank;
	go.xfer = x->id;
	send_msg(pl, from, &go);
	xfer_progress(pl, x);
}

static void on_fetch_go(struct peerlink *pl, uint32_t from, const struct peer_msg *m)
{
	struct xfer *x = xfer_find(pl, X_SERVE, from, m->xfer);

	if (!x) {
		reject(pl, "stale", "FETCH_GO from node %u for no fetch served here", from);
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

/* ---- Receiving ---------------------------------------------------------- */

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
		reject(pl, "cluster", "HELLO from node %u of cluster '%s', this is '%s'", k,
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
	if (node_set_addr(pl, k, m->addr, m->addr_len) < 0) {
		reject(pl, "malformed", "HELLO from node %u with an address provider %s cannot use",
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
		send_hello(pl, k, true);
}

static void on_message(struct peerlink *pl, const uint8_t *buf, size_t len)
{
	struct peer_msg m;
	char err[256];
	int r = peer_decode(buf, len, pl->key, pl->keylen, &m, err, sizeof(err));

	if (r < 0) {
		reject(pl, r == -EPERM ? "auth" : "malformed", "%s", err);
		return;
	}
	if (m.h.cluster != pl->cluster || m.h.nodes != pl->n) {
		reject(pl, "cluster", "%s from node %u of another group (%u nodes, cluster hash "
		       "%016llx)", peer_type_name(m.h.type), m.h.from_node, m.h.nodes,
		       (unsigned long long)m.h.cluster);
		return;
	}
	if (m.h.to_node != pl->me) {
		reject(pl, "malformed", "%s for node %u arrived at node %u",
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
		reject(pl, "stale", "%s from node %u for an earlier incarnation of this daemon",
		       peer_type_name(m.h.type), k);
		send_hello(pl, k, false);
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
		reject(pl, "epoch", "%s from node %u epoch %016llx, which is not the one this daemon "
		       "knows (%016llx)", peer_type_name(m.h.type), k,
		       (unsigned long long)m.h.from_epoch, (unsigned long long)nd->epoch);
		/* It may not know us: introduce ourselves. */
		send_hello(pl, k, false);
		return;
	}
	nd->last_heard_ns = ckpt_mono_ns();
	switch (m.h.type) {
	case PEER_HEARTBEAT:
		break;
	case PEER_VOTE:
		if (pl->me != 0) {
			reject(pl, "conflict", "VOTE from node %u to node %u, which does not lead", k,
			       pl->me);
			break;
		}
		coord_peer_vote(pl->d, k, &m);
		break;
	case PEER_COMMITTED:
		if (k != 0) {
			reject(pl, "conflict", "COMMITTED job=%s step=%llu from node %u, which does "
			       "not lead", m.job, (unsigned long long)m.step, k);
			break;
		}
		coord_peer_committed(pl->d, &m);
		peer_step_committed(pl->d, m.job, m.step);
		break;
	case PEER_ABORT:
		if (pl->me != 0 && k != 0) {
			reject(pl, "conflict", "ABORT from node %u, which does not lead", k);
			break;
		}
		coord_peer_abort(pl->d, k, &m);
		peer_step_failed(pl->d, m.job, m.step);
		break;
	case PEER_COPY_OFFER:
		on_copy_offer(pl, k, &m);
		break;
	case PEER_COPY_ACCEPT:
		on_copy_accept(pl, k, &m);
		break;
	case PEER_COPY_DONE:
		on_remote_done(pl, k, &m, X_COPY_IN);
		break;
	case PEER_FETCH:
		on_fetch(pl, k, &m);
		break;
	case PEER_FETCH_HAVE:
		on_fetch_have(pl, k, &m);
		break;
	case PEER_FETCH_GO:
		on_fetch_go(pl, k, &m);
		break;
	case PEER_FETCH_DONE:
		on_remote_done(pl, k, &m, X_FETCH);
		break;
	case PEER_AGREE_JOIN:
	case PEER_AGREE_REPORT:
		if (pl->me != 0) {
			reject(pl, "conflict", "%s from node %u to node %u, which does not lead",
			       peer_type_name(m.h.type), k, pl->me);
			break;
		}
		agree_peer_message(pl->d, k, &m);
		break;
	case PEER_AGREE_TRY:
	case PEER_AGREE_DONE:
		if (k != 0) {
			reject(pl, "conflict", "%s from node %u, which does not lead",
			       peer_type_name(m.h.type), k);
			break;
		}
		agree_peer_message(pl->d, k, &m);
		break;
	default:
		break;
	}
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
			reject(pl, "malformed", "receive failed: %s", fi_strerror(-err));
		if (err != -FI_ECANCELED && op_post(pl, op) < 0)
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
		x->deadline_ns = ckpt_mono_ns() + timeout_ns(pl);
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
			int r = op_post(pl, op);
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
		if (nd->up && now - nd->last_heard_ns > timeout_ns(pl)) {
			char why[64];
			snprintf(why, sizeof(why), "silent for %lld ms",
				 (long long)((now - nd->last_heard_ns) / 1000000));
			node_lost(pl, k, why);
		}
		if (!nd->up) {
			rdv_read_start(pl, k);
			if (nd->have_addr)
				send_hello(pl, k, false);
		} else {
			msg_init(&m, PEER_HEARTBEAT);
			send_msg(pl, k, &m);
		}
	}
	/* Outcomes this node may have missed are asked for again; the leader
	 * ends steps that wait too long. */
	if (!pl->stopping)
		coord_peer_tick(pl->d, now, timeout_ns(pl));
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

	msg_init(&m, PEER_VOTE);
	m.status = again ? PEER_VOTE_AGAIN : 0;
	msg_job(&m, st->job->name, st->step);
	m.world_size = st->world_size;
	m.rank = rank;
	m.shard_bytes = v->shard_bytes;
	m.blob_bytes = v->blob_bytes;
	m.blob_crc32c = v->blob_crc32c;
	m.index_bytes = v->index_bytes;
	memcpy(m.index_sha256, v->index_sha256, 32);
	if (!d->peer->nodes[0].up)
		return -ENOTCONN;
	return send_msg(d->peer, 0, &m);
}

static void abort_msg(struct peer_msg *m, const char *job, uint64_t step, int error,
		      const char *reason)
{
	msg_init(m, PEER_ABORT);
	msg_job(m, job, step);
	m->status = error < 0 ? error : -EIO;
	snprintf(m->reason, sizeof(m->reason), "%s", reason ? reason : "");
}

void peer_send_abort_to(struct daemon *d, uint32_t node, const char *job, uint64_t step,
			int error, const char *reason)
{
	struct peer_msg m;

	abort_msg(&m, job, step, error, reason);
	send_msg(d->peer, node, &m);
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

	msg_init(&m, PEER_COMMITTED);
	msg_job(&m, job, step);
	m.world_size = world_size;
	send_msg(d->peer, node, &m);
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
	return send_msg(pl, node, m);
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
	if (!pl->explicit_peers && (r = mkdir_p(pl->rdv, 0700)) < 0) {
		log_error("peer", "cannot create rendezvous directory %s: %s", pl->rdv, strerror(-r));
		return r;
	}
	if ((r = load_key(pl)) < 0)
		return r;
	if ((r = fabric_open(pl)) < 0)
		return r;
	if ((r = post_ctrl_recvs(pl)) < 0)
		return r;
	pl->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	pl->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (pl->timer_fd < 0 || pl->wake_fd < 0)
		return -errno;
	int64_t period = timeout_ns(pl) / 4;
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
	} else if ((r = publish(pl)) < 0) {
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
	if (!pl->explicit_peers && pl->myaddr_len && own_file_is_ours(pl)) {
		char path[PATH_MAX + 32];
		snprintf(path, sizeof(path), "%s/node-%u", pl->rdv, pl->me);
		unlink(path);
	}
	free(pl->ctrl_bufs);
	free(pl->nodes);
	free(pl);
	d->peer = NULL;
}
