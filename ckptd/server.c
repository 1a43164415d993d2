/* SPDX-License-Identifier: MIT */
/*
 * The client side of the protocol (proto/PROTOCOL.md): sending, clients
 * (accepting, killing, each connection's loop source) and requests (one
 * handler per message). A client that breaks the protocol gets an ERROR
 * and is disconnected; nobody else notices. Over 1,000 lines, as one
 * concept: the client protocol.
 *
 * Not here: the event loop, the listening socket and the daemon's start-up
 * and shut-down (loop.c); saving, committing and restoring themselves
 * (writer.c, coord.c, restore.c, agree.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agree.h"
#include "ckptd.h"
#include "arena.h"
#include "coord.h"
#include "jobs.h"
#include "memtier.h"
#include "rangeread.h"
#include "restore.h"
#include "writer.h"
#include "loop.h"
#include "server.h"
#include "s3.h"
#include "uploader.h"

/* ---- Sending -------------------------------------------------------- */

static void client_update_events(struct client *c)
{
	loop_mod(c->d, &c->source, EPOLLIN | (c->want_out ? EPOLLOUT : 0));
}

static int client_flush(struct client *c)
{
	while (c->out_head) {
		struct outmsg *o = c->out_head;
		ssize_t n = send(c->fd, o->buf, o->len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			return -errno;
		}
		c->out_head = o->next;
		if (!c->out_head)
			c->out_tail = NULL;
		free(o);
	}
	bool want = c->out_head != NULL;
	if (want != c->want_out) {
		c->want_out = want;
		client_update_events(c);
	}
	return 0;
}

void client_send(struct client *c, const struct ckpt_msg *m)
{
	uint8_t buf[CKPT_MSG_MAX_BYTES];
	ssize_t len;

	if (c->dead)
		return;
	len = ckpt_msg_encode(m, buf, sizeof(buf));
	if (len < 0) {
		log_error("server", "cannot encode %s for client=%llu: %s",
			  ckpt_msg_type_name(m->type), (unsigned long long)c->id,
			  strerror((int)-len));
		return;
	}
	if (!c->out_head) {
		ssize_t n = send(c->fd, buf, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n == len)
			return;
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			return; /* the read side will see the hang-up */
	}
	struct outmsg *o = malloc(sizeof(*o) + (size_t)len);
	if (!o) {
		client_kill(c, "out of memory queueing a reply");
		return;
	}
	o->next = NULL;
	o->len = (size_t)len;
	memcpy(o->buf, buf, (size_t)len);
	if (c->out_tail)
		c->out_tail->next = o;
	else
		c->out_head = o;
	c->out_tail = o;
	if (!c->want_out) {
		c->want_out = true;
		client_update_events(c);
	}
}

void client_send_status(struct client *c, uint64_t step, enum ckpt_state state, int error,
			uint32_t slot_freed, const char *reason)
{
	struct ckpt_msg m;

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_STATUS;
	m.u.status.step = step;
	m.u.status.state = state;
	m.u.status.error = error;
	m.u.status.slot_freed = slot_freed;
	if (reason)
		snprintf(m.u.status.reason, sizeof(m.u.status.reason), "%s", reason);
	client_send(c, &m);
}

void client_send_error(struct client *c, uint32_t seq, int code, const char *fmt, ...)
{
	struct ckpt_msg m;
	va_list ap;

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_ERROR;
	m.seq = seq;
	m.u.error.code = code;
	va_start(ap, fmt);
	vsnprintf(m.u.error.message, sizeof(m.u.error.message), fmt, ap);
	va_end(ap);
	client_send(c, &m);
}

/* ---- Clients -------------------------------------------------------- */

struct client *job_client_for_rank(struct job *job, uint32_t rank)
{
	for (struct client *c = job->d->clients; c; c = c->next)
		if (!c->dead && c->hello_done && c->job == job && c->rank == rank)
			return c;
	return NULL;
}

void client_free(struct client *c)
{
	struct daemon *d = c->d;

	for (struct client **p = &d->clients; *p; p = &(*p)->next) {
		if (*p == c) {
			*p = c->next;
			break;
		}
	}
	retain_take_arena(c);
	arena_destroy(c);
	free(c->own_index);
	while (c->out_head) {
		struct outmsg *o = c->out_head;
		c->out_head = o->next;
		free(o);
	}
	free(c);
}

void client_unref(struct client *c)
{
	if (--c->refs == 0 && c->dead)
		client_free(c);
}

/* Close the connection now; the arena lives on until in-flight I/O on it
 * is finished. */
void client_kill(struct client *c, const char *why)
{
	struct daemon *d = c->d;

	if (c->dead)
		return;
	/* Best effort: whatever is queued may still fit. */
	client_flush(c);
	c->dead = true;
	loop_del(d, &c->source);
	close(c->fd);
	c->fd = -1;
	d->n_clients--;
	if (c->hello_done)
		metrics_add(M_CLIENTS_CONNECTED, -1);
	slots_watch(c);
	if (c->hello_done || c->hello_pending) {
		log_info("server", "client gone client=%llu job=%s rank=%u pid=%d reason=\"%s\"",
			 (unsigned long long)c->id, c->job->name, c->rank, (int)c->pid, why);
		c->job->clients--;
		if (c->job->clients == 0)
			c->job->world_size = 0;
		/* Connected ranks are counted before this: see coord_rank_gone. */
		coord_rank_gone(c->job, c->rank, "disconnected");
		job_release(c->job);
	} else {
		log_debug("server", "client gone client=%llu reason=\"%s\"",
			  (unsigned long long)c->id, why);
	}
	agree_client_gone(c);
	client_unref(c); /* the connection's own reference */
}

/* A broken protocol: say why, then hang up. */
static void client_protocol_error(struct client *c, uint32_t seq, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void client_protocol_error(struct client *c, uint32_t seq, int code, const char *fmt, ...)
{
	char msg[CKPT_REASON_MAX + 1];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_warn("server", "protocol error, disconnecting client=%llu pid=%d job=%s rank=%d error=\"%s\"",
		 (unsigned long long)c->id, (int)c->pid, c->hello_done ? c->job->name : "-",
		 c->hello_done ? (int)c->rank : -1, msg);
	client_send_error(c, seq, code, "%s", msg);
	client_kill(c, msg);
}

static bool peer_allowed(struct daemon *d, int fd, struct ucred *cred)
{
	socklen_t len = sizeof(*cred);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, &len) < 0)
		return false;
	if (cred->uid == geteuid() || cred->uid == 0)
		return true;
	if (d->cfg->allowed_gid == (gid_t)-1)
		return false;
	if (cred->gid == d->cfg->allowed_gid)
		return true;
	gid_t groups[256];
	len = sizeof(groups);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) == 0) {
		for (size_t i = 0; i < len / sizeof(gid_t); i++)
			if (groups[i] == d->cfg->allowed_gid)
				return true;
	}
	return false;
}

/* Refuse a connection that was never a client: an ERROR (seq 0, best
 * effort: the client's first read gets the reason), then close. */
static void refuse_connection(int fd, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void refuse_connection(int fd, int code, const char *fmt, ...)
{
	struct ckpt_msg m = { .type = CKPT_MSG_ERROR };
	uint8_t buf[CKPT_MSG_MAX_BYTES];
	va_list ap;

	m.u.error.code = code;
	va_start(ap, fmt);
	vsnprintf(m.u.error.message, sizeof(m.u.error.message), fmt, ap);
	va_end(ap);
	ssize_t n = ckpt_msg_encode(&m, buf, sizeof(buf));
	/* Best effort: the connection is refused whether the peer reads it or not. */
	if (n > 0)
		(void)send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
	close(fd);
}

static void on_client_readable(struct client *c);

/* The loop's batch holds every client it has events for: a handler
 * earlier in the batch may kill it. */
static void client_hold(struct loop_source *src)
{
	((struct client *)src->data)->refs++;
}

static void client_release(struct loop_source *src)
{
	client_unref(src->data);
}

static void client_on_events(struct daemon *d, struct loop_source *src, uint32_t events)
{
	struct client *c = src->data;

	/* Killed by a handler earlier in this batch: still allocated (see
	 * client_hold), nothing more to do. */
	if (c->dead)
		return;
	if (events & EPOLLOUT)
		if (client_flush(c) < 0)
			client_kill(c, "send failed");
	if (!c->dead && (events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
		on_client_readable(c);
}

void server_accept(struct daemon *d, struct loop_source *src, uint32_t events)
{
	for (;;) {
		int fd = accept4(d->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				log_warn("server", "accept: %s", strerror(errno));
			return;
		}
		struct ucred cred = { 0 };
		if (!peer_allowed(d, fd, &cred)) {
			refuse_connection(fd, -CKPT_E_REFUSED, "uid %u is not allowed to use this "
					  "ckptd (same user, root or allowed_group only)",
					  (unsigned)cred.uid);
			log_warn("server", "refused peer uid=%u gid=%u pid=%d", (unsigned)cred.uid,
				 (unsigned)cred.gid, (int)cred.pid);
			continue;
		}
		if (d->n_clients >= d->cfg->max_clients || d->stopping) {
			log_warn("server", "refused peer pid=%d: %s", (int)cred.pid,
				 d->stopping ? "shutting down" : "max_clients reached");
			if (d->stopping)
				refuse_connection(fd, -CKPT_E_DISCONNECTED, "ckptd is shutting down");
			else
				refuse_connection(fd, -CKPT_E_REFUSED, "ckptd serves at most %u "
						  "connections (max_clients)", d->cfg->max_clients);
			continue;
		}
		struct client *c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->d = d;
		c->fd = fd;
		c->id = ++d->next_client_id;
		c->pid = cred.pid;
		c->uid = cred.uid;
		c->arena_fd = -1;
		c->fixed_base = -1;
		c->last_step = CKPT_NO_STEP;
		c->stall_step = CKPT_NO_STEP;
		c->refs = 1;
		c->source = (struct loop_source){ .fd = -1, .handler = client_on_events,
						  .hold = client_hold, .release = client_release,
						  .data = c };
		if (loop_add(d, &c->source, fd, EPOLLIN) < 0) {
			close(fd);
			free(c);
			continue;
		}
		c->next = d->clients;
		d->clients = c;
		d->n_clients++;
		log_debug("server", "client connected client=%llu pid=%d uid=%u",
			  (unsigned long long)c->id, (int)c->pid, (unsigned)c->uid);
	}
}

/* ---- Requests ------------------------------------------------------- */

/* Whether (job, rank) is held by a live connection, connected or connecting. */
static bool rank_taken(struct job *job, uint32_t rank)
{
	for (struct client *c = job->d->clients; c; c = c->next)
		if (!c->dead && (c->hello_done || c->hello_pending) && c->job == job &&
		    c->rank == rank)
			return true;
	return false;
}

/* The arena is populated: the rank is connected. */
static void hello_finish(struct client *c)
{
	struct daemon *d = c->d;
	struct job *job = c->job;

	writer_register_arena(c);
	c->hello_pending = false;
	c->hello_done = true;
	c->generation = ++d->generation;
	metrics_add(M_CLIENTS_CONNECTED, 1);

	struct ckpt_msg ok;
	uint8_t buf[CKPT_MSG_MAX_BYTES];
	memset(&ok, 0, sizeof(ok));
	ok.type = CKPT_MSG_HELLO_OK;
	ok.seq = c->hello_seq;
	ok.u.hello_ok.slots = c->slots;
	ok.u.hello_ok.flags = d->cfg->backpressure == BACKPRESSURE_SKIP ? CKPT_HELLO_F_SKIP_POLICY : 0;
	ok.u.hello_ok.slot_bytes = c->slot_bytes;
	ok.u.hello_ok.arena_bytes = c->arena_bytes;
	ok.u.hello_ok.chunk_bytes = (uint32_t)d->cfg->chunk_bytes;
	ok.u.hello_ok.latest_step = job_latest(job);
	ssize_t len = ckpt_msg_encode(&ok, buf, sizeof(buf));
	if (len < 0) {
		client_kill(c, "encode HELLO_OK");
		return;
	}
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = buf, .iov_len = (size_t)len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	memset(cbuf, 0, sizeof(cbuf));
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &c->arena_fd, sizeof(int));
	if (sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) != len) {
		client_kill(c, "sending HELLO_OK");
		return;
	}
	/* The optional messages we take, as a STATUS that older clients
	 * ignore (PROTOCOL.md, "Extensions within version 1"); it goes
	 * before anything else, in particular before any SAVE_OK. */
	struct ckpt_msg notice;
	ckpt_msg_features_notice(&notice, CKPT_FEATURE_STALL | CKPT_FEATURE_AGREE |
				 CKPT_FEATURE_READ);
	client_send(c, &notice);
	log_info("server", "rank connected job=%s rank=%u world=%u pid=%d slots=%u slot_bytes=%llu",
		 job->name, c->rank, c->world_size, (int)c->pid, c->slots,
		 (unsigned long long)c->slot_bytes);
}

struct populate {
	struct client *c;
	int result;
	char err[CKPT_REASON_MAX + 1];
};

static void populate_run(void *arg)
{
	struct populate *p = arg;

	p->result = arena_populate(p->c, p->err, sizeof(p->err));
}

static void populate_done(void *arg)
{
	struct populate *p = arg;
	struct client *c = p->c;

	c->d->busy--;
	if (!c->dead) {
		if (p->result < 0) {
			log_warn("server", "arena refused job=%s rank=%u error=\"%s\"", c->job->name,
				 c->rank, p->err);
			client_send_error(c, c->hello_seq, p->result, "%s", p->err);
			client_kill(c, "arena");
		} else {
			hello_finish(c);
		}
	}
	free(p);
	client_unref(c);
}

static void hello_continue(struct client *c, struct job *job, const struct ckpt_msg_hello *h,
			   uint32_t seq);

/* A HELLO waiting for its job's takeover (jobs.c, job_open). */
struct hello_wait {
	struct client *c;
	uint32_t seq;
	struct ckpt_msg_hello h;
};

static void hello_job_ready(void *arg, struct job *job, int error, const char *reason)
{
	struct hello_wait *hw = arg;
	struct client *c = hw->c;

	c->hello_job_wait = false;
	if (!c->dead) {
		if (job) {
			hello_continue(c, job, &hw->h, hw->seq);
		} else {
			log_warn("server", "HELLO refused client=%llu job=%s rank=%u pid=%d error=\"%s\"",
				 (unsigned long long)c->id, hw->h.job, hw->h.rank, (int)c->pid,
				 reason ? reason : strerror(-error));
			client_send_error(c, hw->seq, error, "%s", reason ? reason : strerror(-error));
			client_kill(c, "job not available here");
		}
	}
	client_unref(c);
	free(hw);
}

/*
 * A rank of the job came with another world size: the job's ranks disagree,
 * and its open steps would wait for a rank that may never come with theirs.
 * They fail now, saying why, so that every wait ends.
 */
static void fail_open_steps_world(struct job *job, uint32_t rank, uint32_t world)
{
	struct step **open = NULL;
	size_t n = job_open_steps(job, &open);

	for (size_t i = 0; i < n; i++)
		coord_fail(open[i], -CKPT_E_ABORTED, "job %s: rank %u connected with world size "
			   "%u, step %llu has %u ranks: the job's ranks disagree on the world size",
			   job->name, rank, world, (unsigned long long)open[i]->step,
			   open[i]->world_size);
	free(open);
}

static void on_hello(struct client *c, const struct ckpt_msg *m)
{
	struct daemon *d = c->d;
	const struct ckpt_msg_hello *h = &m->u.hello;

	if (c->hello_done || c->hello_pending || c->hello_job_wait) {
		client_protocol_error(c, m->seq, -CKPT_E_PROTOCOL, "second HELLO");
		return;
	}
	if (ckpt_job_name_check(h->job, strlen(h->job)) < 0 || h->rank >= h->world_size) {
		client_protocol_error(c, m->seq, -CKPT_E_BAD_NAME, "bad HELLO: job \"%.64s\" rank %u world %u",
				      h->job, h->rank, h->world_size);
		return;
	}
	/* Opening the job is metadata I/O on the shared root (and, the first
	 * time, its takeover and recovery): on a worker; this rank waits,
	 * every other client goes on being served. */
	struct hello_wait *hw = calloc(1, sizeof(*hw));
	if (!hw) {
		client_send_error(c, m->seq, -ENOMEM, "out of memory");
		client_kill(c, "out of memory");
		return;
	}
	hw->c = c;
	hw->seq = m->seq;
	hw->h = *h;
	c->refs++;
	c->hello_job_wait = true;
	if (job_open(d, h->job, hello_job_ready, hw) < 0) {
		c->hello_job_wait = false;
		c->refs--;
		free(hw);
		client_send_error(c, m->seq, -ENOMEM, "out of memory opening job %s", h->job);
		client_kill(c, "out of memory");
	}
}

static void hello_continue(struct client *c, struct job *job, const struct ckpt_msg_hello *h,
			   uint32_t seq)
{
	struct daemon *d = c->d;
	char err[CKPT_REASON_MAX + 1];

	if (job->clients > 0 && job->world_size != h->world_size) {
		log_warn("server", "rank refused job=%s rank=%u pid=%d world=%u: the connected "
			 "ranks say world=%u", job->name, h->rank, (int)c->pid, h->world_size,
			 job->world_size);
		client_send_error(c, seq, -CKPT_E_REFUSED,
			   "job %s: rank %u says world size %u, connected ranks say %u",
			   job->name, h->rank, h->world_size, job->world_size);
		fail_open_steps_world(job, h->rank, h->world_size);
		client_kill(c, "world size mismatch");
		job_release(job);
		return;
	}
	if (rank_taken(job, h->rank)) {
		client_send_error(c, seq, -CKPT_E_BUSY,
			   "job %s: rank %u is already connected", job->name, h->rank);
		client_kill(c, "duplicate rank");
		job_release(job);
		return;
	}
	c->job = job;
	c->rank = h->rank;
	c->world_size = h->world_size;
	c->local_rank = h->local_rank;
	int r = arena_create(c, h->max_save_bytes, d->cfg->slots_per_rank, err, sizeof(err));
	if (r < 0) {
		c->job = NULL;
		log_warn("server", "arena refused job=%s rank=%u error=\"%s\"", h->job, h->rank, err);
		client_send_error(c, seq, r == -ENOMEM ? -CKPT_E_REFUSED : r, "%s", err);
		client_kill(c, "arena");
		job_release(job);
		return;
	}
	/* The rank counts for the job from now on (world size, duplicates). */
	c->hello_pending = true;
	c->hello_seq = seq;
	coord_rank_back(job, c->rank);
	job->clients++;
	job->world_size = h->world_size;

	struct populate *p = calloc(1, sizeof(*p));
	if (p) {
		p->c = c;
		c->refs++;
		d->busy++;
		if (workers_submit(d->workers, populate_run, populate_done, p) == 0)
			return;
		c->refs--;
		d->busy--;
		free(p);
	}
	/* No worker to spare the memory for: do it here. */
	r = arena_populate(c, err, sizeof(err));
	if (r < 0) {
		client_send_error(c, seq, r, "%s", err);
		client_kill(c, "arena");
		return;
	}
	hello_finish(c);
}

static bool slot_ok(struct client *c, const struct ckpt_msg *m, uint32_t slot)
{
	if (slot >= c->slots) {
		client_protocol_error(c, m->seq, -CKPT_E_PROTOCOL, "slot %u out of range (%u slots)",
				      slot, c->slots);
		return false;
	}
	if (c->slot_state[slot] != SLOT_CLIENT) {
		client_protocol_error(c, m->seq, -CKPT_E_PROTOCOL,
				      "slot %u is not the client's (busy with an earlier request)",
				      slot);
		return false;
	}
	return true;
}

static bool step_order_ok(struct client *c, const struct ckpt_msg *m, uint64_t step)
{
	if (step == CKPT_NO_STEP) {
		client_protocol_error(c, m->seq, -CKPT_E_PROTOCOL, "step %llu is reserved",
				      (unsigned long long)step);
		return false;
	}
	if (c->last_step != CKPT_NO_STEP && step <= c->last_step) {
		client_protocol_error(c, m->seq, -CKPT_E_STEP_ORDER,
				      "step %llu after step %llu: steps must increase",
				      (unsigned long long)step, (unsigned long long)c->last_step);
		return false;
	}
	return true;
}

/* The step record a SAVE or SKIP of this client belongs to, or NULL with
 * the refusal already sent. */
static struct step *step_for_client(struct client *c, const struct ckpt_msg *m, uint64_t step)
{
	struct job *job = c->job;
	struct step *st;

	if (job_is_committed(job, step)) {
		client_send_error(c, m->seq, -CKPT_E_EXISTS, "job %s step %llu is already committed",
			   job->name, (unsigned long long)step);
		return NULL;
	}
	st = step_find(job, step);
	if (st && st->state == STEP_FAILED) {
		if (c->generation < st->failed_generation) {
			client_send_error(c, m->seq, -CKPT_E_ABORTED, "job %s step %llu was abandoned: %s",
				   job->name, (unsigned long long)step, st->reason);
			return NULL;
		}
		if (st->removing || st->inflight) {
			client_send_error(c, m->seq, -CKPT_E_BUSY,
				   "job %s step %llu: the abandoned attempt is still being removed",
				   job->name, (unsigned long long)step);
			return NULL;
		}
		if (step_reopen(st, c->world_size) < 0) {
			client_send_error(c, m->seq, -ENOMEM, "out of memory");
			return NULL;
		}
	}
	if (st && st->state == STEP_COMMITTING) {
		client_send_error(c, m->seq, -CKPT_E_EXISTS, "job %s step %llu is being committed",
			   job->name, (unsigned long long)step);
		return NULL;
	}
	if (!st)
		st = step_get(job, step, c->world_size);
	if (!st) {
		client_send_error(c, m->seq, -ENOMEM, "out of memory");
		return NULL;
	}
	if (st->world_size != c->world_size) {
		client_send_error(c, m->seq, -CKPT_E_REFUSED, "job %s step %llu has world size %u, not %u",
			   job->name, (unsigned long long)step, st->world_size, c->world_size);
		return NULL;
	}
	int64_t missing = coord_missing_rank(job, st);
	if (missing >= 0) {
		coord_fail(st, -CKPT_E_ABORTED, "rank %lld left job %s and has not come back",
			   (long long)missing, job->name);
		client_send_error(c, m->seq, -CKPT_E_ABORTED,
			   "job %s step %llu cannot commit: rank %lld left the job and has not "
			   "come back", job->name, (unsigned long long)step, (long long)missing);
		return NULL;
	}
	if (st->votes[c->rank].durable || st->saving[c->rank]) {
		client_send_error(c, m->seq, -CKPT_E_EXISTS, "job %s step %llu: rank %u already saved it",
			   job->name, (unsigned long long)step, c->rank);
		return NULL;
	}
	return st;
}

static void on_save(struct client *c, const struct ckpt_msg *m)
{
	const struct ckpt_msg_save *s = &m->u.save;
	char err[CKPT_REASON_MAX + 1];
	struct ckpt_table table;
	struct step *st;
	int r;

	if (!slot_ok(c, m, s->slot) || !step_order_ok(c, m, s->step))
		return;
	uint64_t sb = c->slot_bytes;
	if (s->data_bytes > sb || s->table_offset > sb || s->table_bytes > sb - s->table_offset ||
	    s->table_offset < s->data_bytes || s->data_bytes % CKPT_ALIGN ||
	    s->table_bytes > CKPT_TABLE_MAX_BYTES) {
		client_protocol_error(c, m->seq, -CKPT_E_PROTOCOL,
				      "SAVE step %llu: data %llu, table %llu+%llu do not fit a %llu-byte slot",
				      (unsigned long long)s->step, (unsigned long long)s->data_bytes,
				      (unsigned long long)s->table_offset,
				      (unsigned long long)s->table_bytes, (unsigned long long)sb);
		return;
	}
	/* Copy the table out of shared memory before looking at it: the
	 * client can change the arena under us. */
	void *copy = malloc(s->table_bytes ? s->table_bytes : 1);
	if (!copy) {
		client_send_error(c, m->seq, -ENOMEM, "out of memory for a %llu-byte tensor table",
			   (unsigned long long)s->table_bytes);
		return;
	}
	memcpy(copy, c->arena + (uint64_t)s->slot * sb + s->table_offset, s->table_bytes);
	r = ckpt_table_decode_why(copy, s->table_bytes, &table, err, sizeof(err));
	free(copy);
	if (r < 0) {
		client_protocol_error(c, m->seq, r == -CKPT_E_BAD_NAME ? -CKPT_E_BAD_NAME : -CKPT_E_PROTOCOL,
				      "SAVE step %llu: tensor table refused: %s",
				      (unsigned long long)s->step,
				      r == -CKPT_E_BAD_NAME ? err :
				      r == -E2BIG ? "too large" : "malformed");
		return;
	}
	if (ckpt_table_check_layout(&table, s->data_bytes, s->blob_offset, s->blob_bytes, err,
				    sizeof(err)) < 0) {
		ckpt_table_free(&table);
		client_protocol_error(c, m->seq, -CKPT_E_PROTOCOL, "SAVE step %llu: %s",
				      (unsigned long long)s->step, err);
		return;
	}
	c->last_step = s->step;
	st = step_for_client(c, m, s->step);
	if (!st) {
		ckpt_table_free(&table);
		return;
	}
	st->saving[c->rank] = 1;
	st->inflight++;
	c->slot_state[s->slot] = SLOT_SAVING;
	c->slot_step[s->slot] = s->step;
	/* The slot no longer holds the previous durable shard; and a rank of
	 * the job that saves makes what a departed one left obsolete. */
	retain_note_slot_used(c, s->slot);
	retain_drop(c->d, c->job->name, c->rank);
	/* Accepted: the rank goes back to training now. Opening files and
	 * submitting the first writes happen after the reply, so they never
	 * add to the rank's stall; a failure there arrives as a STATUS. */
	struct ckpt_msg ok;
	memset(&ok, 0, sizeof(ok));
	ok.type = CKPT_MSG_SAVE_OK;
	ok.seq = m->seq;
	ok.u.save_ok.step = s->step;
	ok.u.save_ok.slot = s->slot;
	client_send(c, &ok);
	c->stall_step = s->step;
	metrics_add(M_STAGED_BYTES_TOTAL, (double)s->data_bytes, c->job->name);
	slots_watch(c);
	r = writer_start(c, st, s->slot, s, &table, err, sizeof(err));
	ckpt_table_free(&table);
	if (r < 0) {
		c->slot_state[s->slot] = SLOT_CLIENT;
		slots_watch(c);
		log_warn("writer", "save failed job=%s step=%llu rank=%u error=\"%s\"",
			 c->job->name, (unsigned long long)s->step, c->rank, err);
		client_send_status(c, s->step, CKPT_STATE_FAILED, r, s->slot, err);
		coord_save_done(st, c->rank);
		coord_fail(st, -CKPT_E_ABORTED, "rank %u: %s", c->rank, err);
		return;
	}
	log_debug("server", "save accepted job=%s step=%llu rank=%u bytes=%llu",
		  c->job->name, (unsigned long long)s->step, c->rank,
		  (unsigned long long)s->data_bytes);
}

/*
 * Why a SKIP of `step` by c concerns no open step c takes part in, or NULL
 * if it does (or no rank has saved the step yet, so it is c's to open).
 */
static const char *skip_ignored(struct client *c, const struct step *st, uint64_t step,
				char *buf, size_t len)
{
	if (job_is_committed(c->job, step))
		return "the step is already committed and is kept";
	if (!st)
		return NULL;
	if (st->state == STEP_COMMITTING || st->state == STEP_COMMITTED)
		return "the step is being committed";
	if (st->state != STEP_OPEN)
		return "the step has already failed";
	if (st->world_size != c->world_size) {
		snprintf(buf, len, "the open step has world size %u, the rank %u",
			 st->world_size, c->world_size);
		return buf;
	}
	if (st->votes[c->rank].durable || st->saving[c->rank])
		return "the rank's save of the step was accepted before";
	return NULL;
}

/*
 * A SKIP only ever concerns an open step the sender takes part in
 * (PROTOCOL.md, SKIP): it abandons that step (opening it abandoned if no
 * rank has saved it yet, so that the others learn at once). Any other SKIP,
 * say for a step that is committed (a rank rolled back and counts again),
 * is answered SKIPPED with why nothing was done, and changes nothing.
 */
static void on_skip(struct client *c, const struct ckpt_msg *m)
{
	uint64_t step = m->u.step.step;
	char buf[CKPT_REASON_MAX + 1], reason[CKPT_REASON_MAX + 1];

	if (!step_order_ok(c, m, step))
		return;
	c->last_step = step;
	log_warn("server", "save skipped (no free slot) job=%s step=%llu rank=%u",
		 c->job->name, (unsigned long long)step, c->rank);
	events_save_skipped(c->job->name, step, c->rank);
	struct step *st = step_find(c->job, step);
	const char *ignored = skip_ignored(c, st, step, buf, sizeof(buf));
	if (ignored) {
		log_info("server", "SKIP changes nothing job=%s step=%llu rank=%u why=\"%s\"",
			 c->job->name, (unsigned long long)step, c->rank, ignored);
		snprintf(reason, sizeof(reason), "skipped: no free slot (backpressure policy skip); "
			 "job %s step %llu: %s", c->job->name, (unsigned long long)step, ignored);
		client_send_status(c, step, CKPT_STATE_SKIPPED, -CKPT_E_SKIPPED, CKPT_NO_SLOT,
				   reason);
		return;
	}
	if (!st)
		st = step_get(c->job, step, c->world_size);
	if (st) {
		st->skipped = true;
		coord_fail(st, -CKPT_E_ABORTED, "rank %u skipped step %llu (no free slot)",
			   c->rank, (unsigned long long)step);
	}
	client_send_status(c, step, CKPT_STATE_SKIPPED, -CKPT_E_SKIPPED, CKPT_NO_SLOT,
			   "skipped: no free slot (backpressure policy skip)");
}

static void on_query(struct client *c, const struct ckpt_msg *m)
{
	struct ckpt_msg r;

	memset(&r, 0, sizeof(r));
	r.type = CKPT_MSG_STATUS;
	r.seq = m->seq;
	coord_state_of(c->job, m->u.step.step, &r.u.status);
	struct step *st = step_find(c->job, m->u.step.step);
	if (st && st->state == STEP_OPEN && c->rank < st->world_size && st->votes[c->rank].durable)
		r.u.status.state = CKPT_STATE_DURABLE;
	client_send(c, &r);
}

/* Answer LIST with the union of `base` (the root's committed steps) and
 * `extra` (S3's), both ascending: the newest CKPT_LIST_MAX. */
static void send_list(struct client *c, uint32_t seq, const uint64_t *base, size_t n_base,
		      const uint64_t *extra, size_t n_extra)
{
	struct ckpt_msg r;
	size_t n = n_base + n_extra, total = 0;
	uint64_t *all = malloc((n ? n : 1) * sizeof(*all));

	memset(&r, 0, sizeof(r));
	r.type = CKPT_MSG_LIST_OK;
	r.seq = seq;
	if (!all) {
		client_send_error(c, seq, -ENOMEM, "LIST: out of memory");
		return;
	}
	/* Merge two ascending lists, dropping duplicates. */
	size_t i = 0, k = 0;
	while (i < n_base || k < n_extra) {
		uint64_t s;
		if (k >= n_extra || (i < n_base && base[i] <= extra[k])) {
			s = base[i++];
			if (k < n_extra && extra[k] == s)
				k++;
		} else {
			s = extra[k++];
		}
		all[total++] = s;
	}
	r.u.list_ok.total = (uint32_t)total;
	for (size_t j = total > CKPT_LIST_MAX ? total - CKPT_LIST_MAX : 0; j < total; j++)
		r.u.list_ok.steps[r.u.list_ok.count++] = all[j];
	free(all);
	client_send(c, &r);
}

/*
 * LIST reads the root's manifests (and asks S3, with the S3 tier on) on a
 * worker: this daemon's memory of the job lags on a node that missed a
 * COMMITTED, and an agreed restore chooses from the same list.
 */
struct list_job {
	struct client *c;
	uint32_t seq;
	struct s3_origin s3;
	uint64_t *steps;
	size_t n;
	uint64_t *root;
	size_t n_root;
	int root_error;
	/* The worker's own: the client may go, and its job with it, before
	 * the listing is done. */
	int dirfd;
	char job[CKPT_JOB_NAME_MAX + 1];
};

static void list_run(void *arg)
{
	struct list_job *lj = arg;
	char err[300] = "";

	lj->root_error = store_list_steps(lj->dirfd, true, &lj->root, &lj->n_root);
	if (lj->root_error < 0)
		log_warn("server", "LIST: cannot list the root job=%s error=\"%s\"; answering from "
			 "memory", lj->job, strerror(-lj->root_error));
	if (!lj->s3.cfg || lj->s3.current)
		return;
	if (s3_sync_list_steps(lj->s3.cfg, lj->s3.bucket, lj->s3.job_key, &lj->steps, &lj->n, err,
			       sizeof(err)) < 0)
		log_warn("server", "LIST: cannot list S3 job=%s error=\"%s\"", lj->job, err);
}

static void list_done(void *arg)
{
	struct list_job *lj = arg;
	struct client *c = lj->c;

	c->d->busy--;
	if (!c->dead) {
		const uint64_t *base = lj->root_error < 0 ? c->job->committed : lj->root;
		size_t n_base = lj->root_error < 0 ? c->job->n_committed : lj->n_root;
		if (lj->s3.current)
			send_list(c, lj->seq, base, n_base, lj->s3.steps, lj->s3.n_steps);
		else
			send_list(c, lj->seq, base, n_base, lj->steps, lj->n);
	}
	client_unref(c);
	close(lj->dirfd);
	uploader_origin_free(&lj->s3);
	free(lj->steps);
	free(lj->root);
	free(lj);
}

static void on_list(struct client *c, const struct ckpt_msg *m)
{
	struct daemon *d = c->d;
	struct list_job *lj = calloc(1, sizeof(*lj));

	if (!lj) {
		send_list(c, m->seq, c->job->committed, c->job->n_committed, NULL, 0);
		return;
	}
	if (!d->uploader || uploader_origin(d, c->job->name, &lj->s3) < 0)
		memset(&lj->s3, 0, sizeof(lj->s3));
	lj->c = c;
	lj->seq = m->seq;
	snprintf(lj->job, sizeof(lj->job), "%s", c->job->name);
	lj->dirfd = fcntl(c->job->dirfd, F_DUPFD_CLOEXEC, 0);
	if (lj->dirfd >= 0) {
		c->refs++;
		d->busy++;
		if (workers_submit(d->workers, list_run, list_done, lj) == 0)
			return;
		c->refs--;
		d->busy--;
		close(lj->dirfd);
	}
	uploader_origin_free(&lj->s3);
	free(lj);
	send_list(c, m->seq, c->job->committed, c->job->n_committed, NULL, 0);
}

static void on_restore(struct client *c, const struct ckpt_msg *m)
{
	const struct ckpt_msg_restore *rq = &m->u.restore;

	if (!slot_ok(c, m, rq->slot))
		return;
	int r = restore_start(c, rq->slot, rq->step, rq->flags, m->seq);
	if (r == -CKPT_E_NO_CHECKPOINT) {
		if (rq->step == CKPT_NO_STEP)
			client_send_error(c, m->seq, r, "job %s has no committed step", c->job->name);
		else
			client_send_error(c, m->seq, r, "job %s has no committed step %llu", c->job->name,
				   (unsigned long long)rq->step);
	} else if (r < 0) {
		client_send_error(c, m->seq, r, "restore: %s", strerror(-r));
	}
}

static void on_restore_agreed(struct client *c, const struct ckpt_msg *m)
{
	const struct ckpt_msg_restore *rq = &m->u.restore;

	if (!slot_ok(c, m, rq->slot))
		return;
	agree_request(c, rq->slot, rq->step, rq->flags, m->seq);
}

static void on_release(struct client *c, const struct ckpt_msg *m)
{
	uint32_t slot = m->u.release.slot;

	/* A slot still being read into is not the client's to release. */
	if (slot >= c->slots || c->slot_state[slot] != SLOT_RESTORED) {
		client_protocol_error(c, m->seq, -CKPT_E_PROTOCOL,
				      "RELEASE of slot %u, which holds no finished restore", slot);
		return;
	}
	c->slot_state[slot] = SLOT_CLIENT;
}

/*
 * A rank's report of how long its last accepted save stalled it. The
 * decoder has checked the value (finite, >= 0, under a day). A report of
 * another step, or a second one, is dropped: it may be late for a step
 * abandoned meanwhile, and it is only a metric.
 */
static void on_stall(struct client *c, const struct ckpt_msg *m)
{
	const struct ckpt_msg_stall *s = &m->u.stall;
	uint32_t warn_ms = c->d->cfg->stall_warn_ms;

	if (s->step != c->stall_step) {
		log_debug("server", "STALL ignored job=%s rank=%u step=%llu (not the last SAVE)",
			  c->job->name, c->rank, (unsigned long long)s->step);
		return;
	}
	c->stall_step = CKPT_NO_STEP;
	metrics_observe(M_SAVE_STALL_SECONDS, s->seconds, c->job->name);
	metrics_add(M_SAVE_STALL_SECONDS_TOTAL, s->seconds, c->job->name);
	if (warn_ms && s->seconds * 1000 >= warn_ms) {
		log_warn("server", "save stalled the rank job=%s step=%llu rank=%u seconds=%.3f",
			 c->job->name, (unsigned long long)s->step, c->rank, s->seconds);
		events_save_stall(c->job->name, s->step, c->rank, s->seconds);
	}
}

static void on_message(struct client *c, const struct ckpt_msg *m)
{
	if (!c->hello_done && m->type != CKPT_MSG_HELLO) {
		client_protocol_error(c, m->seq, -CKPT_E_PROTOCOL, "%s before HELLO",
				      ckpt_msg_type_name(m->type));
		return;
	}
	switch (m->type) {
	case CKPT_MSG_HELLO:
		on_hello(c, m);
		break;
	case CKPT_MSG_SAVE:
		on_save(c, m);
		break;
	case CKPT_MSG_SKIP:
		on_skip(c, m);
		break;
	case CKPT_MSG_QUERY:
		on_query(c, m);
		break;
	case CKPT_MSG_LIST:
		on_list(c, m);
		break;
	case CKPT_MSG_RESTORE:
		on_restore(c, m);
		break;
	case CKPT_MSG_RELEASE:
		on_release(c, m);
		break;
	case CKPT_MSG_BYE:
		c->goodbye = true;
		client_kill(c, "said goodbye");
		break;
	case CKPT_MSG_STALL:
		on_stall(c, m);
		break;
	case CKPT_MSG_RESTORE_AGREED:
		on_restore_agreed(c, m);
		break;
	case CKPT_MSG_READ_RANGES:
		if (slot_ok(c, m, m->u.read_ranges.slot))
			rangeread_start(c, m);
		break;
	default:
		client_protocol_error(c, m->seq, -CKPT_E_PROTOCOL, "unexpected %s from a client",
				      ckpt_msg_type_name(m->type));
		break;
	}
}

static void on_client_readable(struct client *c)
{
	/* Several packets per wake-up, but not forever: others wait too. */
	for (int i = 0; i < 32 && !c->dead; i++) {
		uint8_t buf[CKPT_MSG_MAX_BYTES + 1];
		char cbuf[CMSG_SPACE(sizeof(int) * 8)];
		struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
				     .msg_controllen = sizeof(cbuf) };
		ssize_t n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);

		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				return;
			client_kill(c, strerror(errno));
			return;
		}
		if (n == 0) {
			client_kill(c, "hang-up");
			return;
		}
		/* No client message carries fds: close any that came. */
		unsigned nfds = 0;
		for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
			if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
				size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
				for (size_t j = 0; j < k; j++) {
					int fd;
					memcpy(&fd, CMSG_DATA(cm) + j * sizeof(int), sizeof(int));
					close(fd);
					nfds++;
				}
			}
		}
		if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
			client_protocol_error(c, 0, -CKPT_E_PROTOCOL, "%s",
					      mh.msg_flags & MSG_TRUNC ? "message over 4096 bytes"
								       : "truncated control data");
			return;
		}
		if (nfds) {
			client_protocol_error(c, 0, -CKPT_E_PROTOCOL,
					      "%u file descriptor(s) attached to a client message", nfds);
			return;
		}
		struct ckpt_msg m;
		int r = ckpt_msg_decode(buf, (size_t)n, &m);
		if (r == -ERANGE) {
			client_protocol_error(c, m.seq, -ERANGE, "%s of step %llu: step numbers are "
					      "0..%llu (FORMAT.md, \"Step numbers\")",
					      ckpt_msg_type_name(m.type),
					      (unsigned long long)m.u.step.step,
					      (unsigned long long)CKPT_STEP_MAX);
			return;
		}
		if (r < 0) {
			client_protocol_error(c, 0, r == -EPROTONOSUPPORT ? -CKPT_E_VERSION
					      : r == -CKPT_E_BAD_NAME ? -CKPT_E_BAD_NAME : -CKPT_E_PROTOCOL,
					      "malformed message of %zd bytes: %s", n,
					      r == -EPROTONOSUPPORT ? "protocol version not supported"
					      : r == -CKPT_E_BAD_NAME ? "bad name" : "does not decode");
			return;
		}
		on_message(c, &m);
	}
}
