/* SPDX-License-Identifier: MIT */
/*
 * libckpt connection handling: connect and handshake, reading the socket
 * (any call may drain it under the lock, one at a time may wait on it with
 * the lock released; replies go to their waiters, STATUS to the records),
 * step records, events, listing and reconnects.
 */
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "internal.h"

#define CKPT_DEFAULT_CONNECT_MS 10000u
/* Upper bound on slots we accept from ckptd (bounds our slot table). */
#define CKPT_MAX_SLOTS 65536u
/* ckpt_wait() and the block policy re-check the socket at least this often,
 * so that a reconnect by another thread is noticed. */
#define CKPT_WAIT_SLICE_MS 200
#define CKPT_MAX_RECV_FDS 8
/* A STATUS answering one of our last this many requests whose caller gave
 * up waiting (a QUERY with a timeout) is applied, not a protocol error. */
#define CKPT_SEQ_WINDOW 4096u

struct conn {
	int fd;
	struct ckpt_arena *arena;
	struct ckpt_msg_hello_ok ok;
};

/* Milliseconds left until deadline (-1: no deadline), never below 0. */
static int remaining_ms(int64_t deadline)
{
	int64_t left;

	if (deadline < 0)
		return -1;
	left = deadline - ckpt_mono_ms();
	if (left < 0)
		return 0;
	return left > INT_MAX ? INT_MAX : (int)left;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* An error code from the daemon must be negative; anything else is a
 * protocol violation. */
static int daemon_error(int32_t code)
{
	if (code >= 0 || code == INT32_MIN)
		return -CKPT_E_PROTOCOL;
	return code;
}

static void close_fds(int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		close(fds[i]);
}

/*
 * Read one packet without blocking. Returns 1 with *m filled, 0 if nothing
 * is ready, -CKPT_E_DISCONNECTED on EOF or reset, -CKPT_E_PROTOCOL (or
 * -CKPT_E_VERSION) for a malformed packet, or -errno. Every received fd is
 * closed unless it is the one fd of a HELLO_OK and fd_out is given.
 */
static int sock_recv(int fd, struct ckpt_msg *m, int *fd_out)
{
	uint8_t buf[CKPT_MSG_MAX_BYTES];
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * CKPT_MAX_RECV_FDS)];
	} cbuf;
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
	struct msghdr mh = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = cbuf.buf,
		.msg_controllen = sizeof(cbuf.buf),
	};
	int fds[CKPT_MAX_RECV_FDS];
	unsigned nfds = 0;
	bool extra_fds = false;
	ssize_t n;
	int r;

	do
		n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		if (errno == ECONNRESET || errno == EPIPE || errno == ENOTCONN)
			return -CKPT_E_DISCONNECTED;
		return -errno;
	}

	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		size_t cnt;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		cnt = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < cnt; i++) {
			int rfd;

			memcpy(&rfd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (nfds < CKPT_MAX_RECV_FDS)
				fds[nfds++] = rfd;
			else {
				close(rfd);
				extra_fds = true;
			}
		}
	}

	if (n == 0 && nfds == 0 && !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
		return -CKPT_E_DISCONNECTED;
	if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || extra_fds) {
		r = -CKPT_E_PROTOCOL;
		goto fail;
	}
	r = ckpt_msg_decode(buf, (size_t)n, m);
	if (r < 0) {
		r = r == -EPROTONOSUPPORT ? -CKPT_E_VERSION : -CKPT_E_PROTOCOL;
		goto fail;
	}
	if (nfds != ckpt_msg_fd_count(m->type)) {
		r = -CKPT_E_PROTOCOL;
		goto fail;
	}
	if (nfds == 1) {
		if (fd_out)
			*fd_out = fds[0];
		else
			close(fds[0]);
	}
	return 1;

fail:
	close_fds(fds, nfds);
	return r;
}

static int sock_send(int fd, const struct ckpt_msg *m)
{
	uint8_t buf[CKPT_MSG_MAX_BYTES];
	ssize_t len, n;

	len = ckpt_msg_encode(m, buf, sizeof(buf));
	if (len < 0)
		return (int)len;
	do
		n = send(fd, buf, (size_t)len, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN)
			return -CKPT_E_DISCONNECTED;
		return -errno;
	}
	if (n != len)
		return -CKPT_E_DISCONNECTED;
	return 0;
}

void ctx_arena_unref(struct ckpt_arena *arena)
{
	if (!arena || --arena->refs > 0)
		return;
	munmap(arena->base, arena->bytes);
	free(arena);
}

/* Map the memfd of a HELLO_OK after checking it against what ckptd said. */
static int arena_map(int memfd, const struct ckpt_msg_hello_ok *ok, struct ckpt_arena **out)
{
	struct ckpt_arena *arena;
	struct stat stbuf;
	uint64_t bytes;
	void *base;
	int seals;

	if (ok->slots == 0 || ok->slots > CKPT_MAX_SLOTS || ok->slot_bytes == 0 ||
	    ok->slot_bytes % CKPT_ALIGN != 0 ||
	    __builtin_mul_overflow(ok->slot_bytes, (uint64_t)ok->slots, &bytes) ||
	    bytes != ok->arena_bytes || bytes > SIZE_MAX)
		return -CKPT_E_PROTOCOL;
	if (fstat(memfd, &stbuf) < 0)
		return -errno;
	if (!S_ISREG(stbuf.st_mode) || stbuf.st_size < 0 || (uint64_t)stbuf.st_size < bytes)
		return -CKPT_E_PROTOCOL;
	/* Without a shrink seal ckptd could truncate the memfd under us and
	 * turn every later access into SIGBUS in the trainer. */
	seals = fcntl(memfd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return -CKPT_E_PROTOCOL;

	arena = calloc(1, sizeof(*arena));
	if (!arena)
		return -ENOMEM;
	base = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
		    memfd, 0);
	if (base == MAP_FAILED) {
		int r = -errno;

		free(arena);
		return r;
	}
	arena->base = base;
	arena->bytes = (size_t)bytes;
	arena->refs = 1;
	*out = arena;
	return 0;
}

/* Wait for fd to become readable; 0 on readable/hangup, -ETIMEDOUT. */
static int wait_readable(int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r;

	do
		r = poll(&p, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	return r == 0 ? -ETIMEDOUT : 0;
}

static void set_why(char *why, size_t whylen, const char *text)
{
	if (why && whylen)
		snprintf(why, whylen, "%s", text);
}

/*
 * The connection broke during the handshake. ckptd may have refused us
 * with an ERROR and closed before it read our HELLO: then the kernel
 * reports the reset first and still holds the ERROR. The refusal is what
 * the caller needs to hear; `err` if there is none.
 */
static int pending_refusal(int fd, int err, char *why, size_t whylen)
{
	struct ckpt_msg m;

	for (int i = 0; i < 2; i++) {
		int r = sock_recv(fd, &m, NULL);

		if (r == 1 && m.type == CKPT_MSG_ERROR) {
			set_why(why, whylen, m.u.error.message);
			return daemon_error(m.u.error.code);
		}
		if (r != -CKPT_E_DISCONNECTED)
			break;
	}
	return err;
}

/* One HELLO / HELLO_OK exchange on a connected socket. A refusal's reason
 * (ckptd's ERROR text) goes to why. */
static int handshake(int fd, const struct ckpt_msg_hello *hello, int64_t deadline,
		     struct conn *out, char *why, size_t whylen)
{
	struct ckpt_msg m = { .type = CKPT_MSG_HELLO, .seq = 1 };
	int memfd = -1;
	int r;

	m.u.hello = *hello;
	r = sock_send(fd, &m);
	if (r == -CKPT_E_DISCONNECTED)
		return pending_refusal(fd, r, why, whylen);
	if (r < 0)
		return r;
	for (;;) {
		r = sock_recv(fd, &m, &memfd);
		if (r == -CKPT_E_DISCONNECTED)
			return pending_refusal(fd, r, why, whylen);
		if (r < 0)
			return r;
		if (r == 1)
			break;
		r = wait_readable(fd, remaining_ms(deadline));
		if (r < 0)
			return r;
	}
	if (m.type == CKPT_MSG_ERROR && (m.seq == 1 || m.seq == 0)) {
		set_why(why, whylen, m.u.error.message);
		return daemon_error(m.u.error.code);
	}
	if (m.type != CKPT_MSG_HELLO_OK || m.seq != 1) {
		if (memfd >= 0)
			close(memfd);
		return -CKPT_E_PROTOCOL;
	}
	r = arena_map(memfd, &m.u.hello_ok, &out->arena);
	/* The mapping keeps the memory; the fd is not needed any more. */
	close(memfd);
	if (r < 0)
		return r;
	out->fd = fd;
	out->ok = m.u.hello_ok;
	return 0;
}

static bool connect_retryable(int err)
{
	/* ckptd may be starting (no socket yet, or not listening yet), its
	 * backlog may be full, or it has not yet seen our previous connection
	 * close (BUSY for our job and rank). */
	return err == -ENOENT || err == -ECONNREFUSED || err == -EAGAIN ||
	       err == -CKPT_E_BUSY;
}

#define CKPT_DEFAULT_HANDSHAKE_MS 120000

static int conn_open(const char *path, const struct ckpt_msg_hello *hello, int timeout_ms,
		     int handshake_ms, struct conn *out, char *why, size_t whylen)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int64_t deadline = ckpt_mono_ms() + timeout_ms;
	size_t plen = strlen(path);
	char attempt_why[CKPT_REASON_MAX + 1], last_why[CKPT_REASON_MAX + 1] = "";
	int r, last_err = 0;

	if (plen == 0)
		return -EINVAL;
	if (plen >= sizeof(addr.sun_path))
		return -ENAMETOOLONG;
	memcpy(addr.sun_path, path, plen + 1);

	for (;;) {
		int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

		if (fd < 0)
			return -errno;
		attempt_why[0] = '\0';
		if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
			r = -errno;
		} else {
			/* Once ckptd has accepted, it may take a while to fault
			 * in a large arena before it answers: the handshake has
			 * its own limit; the connect timeout bounds the wait
			 * for the socket. */
			int64_t hs = ckpt_mono_ms() + handshake_ms;
			r = handshake(fd, hello, hs > deadline ? hs : deadline, out, attempt_why,
				      sizeof(attempt_why));
		}
		if (r == 0)
			return 0;
		close(fd);
		/* Out of time while retrying: the reason we retried says more
		 * than the timeout does. */
		if (r == -ETIMEDOUT && last_err) {
			set_why(why, whylen, last_why);
			return last_err;
		}
		if (!connect_retryable(r) || remaining_ms(deadline) == 0) {
			set_why(why, whylen, attempt_why);
			return r;
		}
		last_err = r;
		memcpy(last_why, attempt_why, sizeof(last_why));
		sleep_ms(remaining_ms(deadline) < 50 ? remaining_ms(deadline) : 50);
	}
}

static void ctx_install(ckpt_ctx *ctx, struct conn *c, uint8_t *slots)
{
	struct epoll_event ev = { .events = EPOLLIN };

	/* The socket joins ckpt_fd()'s set; failing that (no memory), the
	 * connection still works, only ckpt_fd() misses its readiness. */
	(void)epoll_ctl(ctx->epoll_fd, EPOLL_CTL_ADD, c->fd, &ev);
	ctx->fd = c->fd;
	ctx->arena = c->arena;
	ctx->slots = slots;
	ctx->slot_bytes = c->ok.slot_bytes;
	ctx->slot_count = c->ok.slots;
	ctx->chunk_bytes = c->ok.chunk_bytes;
	ctx->skip_policy = (c->ok.flags & CKPT_HELLO_F_SKIP_POLICY) != 0;
	ctx->hello_latest = c->ok.latest_step;
	/* Only this connection's notice may enable optional messages. */
	ctx->features = 0;
	ctx->generation++;
	ctx->next_seq = 2; /* 1 was the HELLO */
}

static int ctx_connect_now(ckpt_ctx *ctx, int timeout_ms, char *why, size_t whylen)
{
	struct conn c = { .fd = -1 };
	uint8_t *slots;
	int r;

	r = conn_open(ctx->socket_path, &ctx->hello, timeout_ms, (int)ctx->handshake_timeout_ms, &c,
		      why, whylen);
	if (r < 0)
		return r;
	slots = calloc(c.ok.slots, 1);
	if (!slots) {
		close(c.fd);
		ctx_arena_unref(c.arena);
		return -ENOMEM;
	}
	ctx_install(ctx, &c, slots);
	return 0;
}

static void eventfd_signal(int fd)
{
	uint64_t one = 1;

	(void)!write(fd, &one, sizeof(one));
}

static void eventfd_clear(int fd)
{
	uint64_t v;

	(void)!read(fd, &v, sizeof(v));
}

void ctx_notify(ckpt_ctx *ctx)
{
	pthread_cond_broadcast(&ctx->cond);
	if (ctx->polling)
		eventfd_signal(ctx->wake_fd);
}

void ctx_news_clear(ckpt_ctx *ctx)
{
	eventfd_clear(ctx->news_fd);
}

/* Sleep on ctx->cond for at most timeout_ms (< 0: until woken). */
static void cond_wait_ms(ckpt_ctx *ctx, int timeout_ms)
{
	struct timespec ts;

	if (timeout_ms < 0) {
		pthread_cond_wait(&ctx->cond, &ctx->lock);
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	(void)pthread_cond_timedwait(&ctx->cond, &ctx->lock, &ts);
}

/*
 * Connect with ctx->lock released: a handshake may take minutes (ckptd
 * faults in a large arena), and nothing of the context is needed for it
 * but the immutable options. One thread connects; the others wait for
 * its outcome, and try themselves if it failed.
 */
int ctx_ensure_connected(ckpt_ctx *ctx, int timeout_ms)
{
	int64_t deadline = ckpt_mono_ms() + timeout_ms;
	struct conn c = { .fd = -1 };
	uint8_t *slots = NULL;
	int r;

	for (;;) {
		if (ctx->fd >= 0)
			return 0;
		if (!ctx->connecting)
			break;
		if (remaining_ms(deadline) == 0)
			return -ETIMEDOUT;
		cond_wait_ms(ctx, remaining_ms(deadline));
	}
	ctx->connecting = true;
	pthread_mutex_unlock(&ctx->lock);
	r = conn_open(ctx->socket_path, &ctx->hello, remaining_ms(deadline),
		      (int)ctx->handshake_timeout_ms, &c, NULL, 0);
	if (r == 0) {
		slots = calloc(c.ok.slots, 1);
		if (!slots) {
			close(c.fd);
			ctx_arena_unref(c.arena);
			r = -ENOMEM;
		}
	}
	pthread_mutex_lock(&ctx->lock);
	ctx->connecting = false;
	if (r == 0)
		ctx_install(ctx, &c, slots);
	ctx_notify(ctx);
	return r;
}

/* ---- Step records and events ------------------------------------------ */

static bool state_final(int state)
{
	return state == CKPT_STATE_COMMITTED || state == CKPT_STATE_SKIPPED ||
	       state == CKPT_STATE_FAILED;
}

static struct step_record *record_find(ckpt_ctx *ctx, uint64_t step)
{
	for (unsigned i = 0; i < CKPT_STEP_RECORDS; i++)
		if (ctx->records[i].used && ctx->records[i].st.step == step)
			return &ctx->records[i];
	return NULL;
}

/* A slot for a new record: an unused one, else the oldest final one, else
 * the oldest. */
static struct step_record *record_new(ckpt_ctx *ctx)
{
	struct step_record *oldest = NULL, *oldest_final = NULL;

	for (unsigned i = 0; i < CKPT_STEP_RECORDS; i++) {
		struct step_record *rec = &ctx->records[i];

		if (!rec->used)
			return rec;
		if (!oldest || rec->seen < oldest->seen)
			oldest = rec;
		if (state_final(rec->st.state) && (!oldest_final || rec->seen < oldest_final->seen))
			oldest_final = rec;
	}
	return oldest_final ? oldest_final : oldest;
}

static void event_push(ckpt_ctx *ctx, const ckpt_status *st)
{
	unsigned tail;

	if (ctx->ev_count == CKPT_EVENT_QUEUE) {
		/* Nobody reads events: keep the newest. */
		ctx->ev_head = (ctx->ev_head + 1) % CKPT_EVENT_QUEUE;
		ctx->ev_count--;
	}
	tail = (ctx->ev_head + ctx->ev_count) % CKPT_EVENT_QUEUE;
	ctx->events[tail] = *st;
	ctx->ev_count++;
}

void ctx_record(ckpt_ctx *ctx, uint64_t step, int state, int error, const char *reason)
{
	struct step_record *rec = record_find(ctx, step);

	if (rec && rec->st.state == state && rec->st.error == error)
		return;
	if (!rec) {
		rec = record_new(ctx);
		memset(rec, 0, sizeof(*rec));
		rec->used = true;
		rec->st.step = step;
	}
	rec->seen = ++ctx->record_clock;
	rec->st.state = state;
	rec->st.error = error;
	snprintf(rec->st.reason, sizeof(rec->st.reason), "%s", reason ? reason : "");
	event_push(ctx, &rec->st);
	eventfd_signal(ctx->news_fd);
	ctx_notify(ctx);
}

/*
 * The connection is gone or can no longer be trusted: close it, drop the
 * arena (handles keep their own reference), and fail every step whose
 * outcome would have come over it.
 */
void ctx_drop(ckpt_ctx *ctx, int error, const char *why)
{
	char reason[256];

	if (ctx->fd < 0)
		return;
	/* Out of ckpt_fd()'s set first: a poller's duplicate of the socket
	 * would keep it there. */
	(void)epoll_ctl(ctx->epoll_fd, EPOLL_CTL_DEL, ctx->fd, NULL);
	close(ctx->fd);
	ctx->fd = -1;
	ctx->drop_error = error;
	eventfd_signal(ctx->news_fd);
	ctx_notify(ctx);
	ctx_arena_unref(ctx->arena);
	ctx->arena = NULL;
	free(ctx->slots);
	ctx->slots = NULL;

	for (unsigned i = 0; i < CKPT_STEP_RECORDS; i++) {
		struct step_record *rec = &ctx->records[i];

		if (!rec->used || state_final(rec->st.state))
			continue;
		snprintf(reason, sizeof(reason), "rank %u step %llu: %s", ctx->hello.rank,
			 (unsigned long long)rec->st.step, why);
		ctx_record(ctx, rec->st.step, CKPT_STATE_FAILED, error, reason);
	}
}

static void ctx_apply_status(ckpt_ctx *ctx, const struct ckpt_msg_status *s)
{
	uint32_t slot = s->slot_freed;
	int error = 0;

	/* Only a slot ckptd actually holds for a save comes back this way;
	 * anything else is ignored rather than freeing a slot a handle uses. */
	if (slot != CKPT_NO_SLOT && ctx->slots && slot < ctx->slot_count &&
	    ctx->slots[slot] == SLOT_DAEMON)
		ctx->slots[slot] = SLOT_FREE;
	if (s->state == CKPT_STATE_UNKNOWN || s->state > CKPT_STATE_FAILED)
		return;
	if (s->state == CKPT_STATE_FAILED)
		error = s->error < 0 ? daemon_error(s->error) : -CKPT_E_PROTOCOL;
	else if (s->state == CKPT_STATE_SKIPPED)
		/* Same code as our own record of the skip, so it is not reported twice. */
		error = s->error < 0 ? daemon_error(s->error) : -CKPT_E_SKIPPED;
	ctx_record(ctx, s->step, (int)s->state, error, s->reason);
}

/*
 * ckptd took a save: the slot is its own from now on, and the step is
 * pending. Applied when SAVE_OK is read, by whichever thread reads it, so
 * that the STATUS behind it (which may free the slot or finish the step)
 * is applied after it, as ckptd sent them.
 */
static void ctx_apply_save_ok(ckpt_ctx *ctx, const struct ckpt_msg_save *req,
			      const struct ckpt_msg_save_ok *ok)
{
	char reason[256];

	if (ok->step != req->step || ok->slot != req->slot || !ctx->slots ||
	    ok->slot >= ctx->slot_count || ctx->slots[ok->slot] != SLOT_SAVING)
		return; /* ckpt_save_finish() drops the connection for it */
	ctx->slots[ok->slot] = SLOT_DAEMON;
	ctx->have_last_step = true;
	ctx->last_step = ok->step;
	snprintf(reason, sizeof(reason), "rank %u step %llu: accepted by ckptd", ctx->hello.rank,
		 (unsigned long long)ok->step);
	ctx_record(ctx, ok->step, CKPT_STATE_PENDING, 0, reason);
}

/* ---- The socket reader -------------------------------------------------- */

static const char *drop_reason(int err)
{
	return err == -CKPT_E_DISCONNECTED ? "ckptd disconnected" : ckpt_strerror(err);
}

static int ctx_recv(ckpt_ctx *ctx, struct ckpt_msg *m)
{
	int r;

	if (ctx->fd < 0)
		return -CKPT_E_DISCONNECTED;
	r = sock_recv(ctx->fd, m, NULL);
	if (r < 0)
		ctx_drop(ctx, r, drop_reason(r));
	return r;
}

static struct ckpt_waiter *waiter_find(ckpt_ctx *ctx, uint32_t seq)
{
	for (struct ckpt_waiter *w = ctx->waiters; w; w = w->next)
		if (!w->done && w->seq == seq && w->generation == ctx->generation)
			return w;
	return NULL;
}

/* Whether seq is one of our recent requests on this connection. */
static bool seq_issued(const ckpt_ctx *ctx, uint32_t seq)
{
	uint32_t back = ctx->next_seq - seq;

	return seq != 0 && back >= 1 && back <= CKPT_SEQ_WINDOW;
}

/*
 * Handle one message: a reply goes to the waiter of its seq, STATUS to
 * the records. Returns 0, or a negative error after dropping the
 * connection.
 */
static int ctx_dispatch(ckpt_ctx *ctx, const struct ckpt_msg *m)
{
	if (m->seq != 0) {
		struct ckpt_waiter *w = waiter_find(ctx, m->seq);

		if (m->type == CKPT_MSG_STATUS && (w || seq_issued(ctx, m->seq))) {
			/* An answer to QUERY: news for everyone, even when
			 * its caller stopped waiting. */
			ctx_apply_status(ctx, &m->u.status);
		}
		if (w) {
			if (w->request && w->request->type == CKPT_MSG_SAVE &&
			    m->type == CKPT_MSG_SAVE_OK)
				ctx_apply_save_ok(ctx, &w->request->u.save, &m->u.save_ok);
			*w->reply = *m;
			w->done = true;
			ctx_notify(ctx);
			return 0;
		}
		if (m->type == CKPT_MSG_STATUS && seq_issued(ctx, m->seq))
			return 0;
		ctx_drop(ctx, -CKPT_E_PROTOCOL, "unexpected message from ckptd");
		return -CKPT_E_PROTOCOL;
	}
	if (m->type == CKPT_MSG_STATUS) {
		/* ckptd's features notice (PROTOCOL.md, Semantics 10); to
		 * ctx_apply_status it would be a no-op, as it is to older
		 * releases of this library. */
		if (ckpt_msg_is_features_notice(m))
			ctx->features = ckpt_features_parse(m->u.status.reason);
		else
			ctx_apply_status(ctx, &m->u.status);
		return 0;
	}
	if (m->type == CKPT_MSG_ERROR) {
		/* ckptd is about to close us; say why: as the answer of every
		 * request waiting, else by dropping the connection. */
		int code = daemon_error(m->u.error.code);
		bool answered = false;

		for (struct ckpt_waiter *w = ctx->waiters; w; w = w->next) {
			if (w->done || w->generation != ctx->generation)
				continue;
			*w->reply = *m;
			w->done = true;
			answered = true;
		}
		if (answered) {
			ctx_notify(ctx);
			return 0;
		}
		ctx_drop(ctx, code, m->u.error.message);
		return code;
	}
	ctx_drop(ctx, -CKPT_E_PROTOCOL, "unexpected message from ckptd");
	return -CKPT_E_PROTOCOL;
}

int ctx_send(ckpt_ctx *ctx, struct ckpt_msg *m)
{
	int r;

	if (ctx->fd < 0)
		return -CKPT_E_DISCONNECTED;
	m->seq = ctx->next_seq++;
	if (ctx->next_seq == 0)
		ctx->next_seq = 1;
	r = sock_send(ctx->fd, m);
	if (r == -CKPT_E_DISCONNECTED)
		ctx_drop(ctx, r, drop_reason(r));
	return r;
}

/* Drain, stopping once *done is set: what came after our reply is read
 * after the caller has handled it, as ckptd sent them. */
static int ctx_drain_until(ckpt_ctx *ctx, const bool *done)
{
	struct ckpt_msg m;
	int r;

	while (ctx->fd >= 0 && !*done) {
		r = ctx_recv(ctx, &m);
		if (r <= 0)
			return r;
		r = ctx_dispatch(ctx, &m);
		if (r < 0)
			return r;
	}
	return *done ? 0 : -CKPT_E_DISCONNECTED;
}

void ctx_wait_io(ckpt_ctx *ctx, int timeout_ms)
{
	struct pollfd p[2];
	int fd;

	if (ctx->polling || ctx->fd < 0) {
		cond_wait_ms(ctx, timeout_ms);
		return;
	}
	/* A duplicate, so that a drop by another thread (which closes
	 * ctx->fd, and may reuse its number) never leaves us polling a
	 * descriptor that is not the socket; the drop wakes us. */
	fd = fcntl(ctx->fd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0) {
		cond_wait_ms(ctx, timeout_ms < 0 || timeout_ms > 10 ? 10 : timeout_ms);
		return;
	}
	ctx->polling = true;
	pthread_mutex_unlock(&ctx->lock);
	p[0] = (struct pollfd){ .fd = fd, .events = POLLIN };
	p[1] = (struct pollfd){ .fd = ctx->wake_fd, .events = POLLIN };
	(void)poll(p, 2, timeout_ms);
	pthread_mutex_lock(&ctx->lock);
	close(fd);
	/* Cleared with the lock held: a wake-up sent after this is for state
	 * the caller has not checked yet, and the next poll sees it. */
	eventfd_clear(ctx->wake_fd);
	ctx->polling = false;
	/* Another waiter may take over the socket. */
	pthread_cond_broadcast(&ctx->cond);
}

int ctx_await(ckpt_ctx *ctx, uint32_t seq, int timeout_ms, struct ckpt_msg *reply)
{
	return ctx_await_request(ctx, seq, NULL, timeout_ms, reply);
}

int ctx_await_request(ckpt_ctx *ctx, uint32_t seq, const struct ckpt_msg *request,
		      int timeout_ms, struct ckpt_msg *reply)
{
	int64_t deadline = timeout_ms < 0 ? -1 : ckpt_mono_ms() + timeout_ms;
	struct ckpt_waiter w = { .seq = seq, .generation = ctx->generation, .reply = reply,
				 .request = request };
	int r;

	if (ctx->fd < 0)
		return -CKPT_E_DISCONNECTED;
	w.next = ctx->waiters;
	ctx->waiters = &w;
	for (;;) {
		int left;

		if (!w.done && ctx->fd >= 0 && ctx->generation == w.generation) {
			r = ctx_drain_until(ctx, &w.done);
			if (r < 0 && !w.done)
				break;
		}
		/* The reply came on the connection it was asked on; that one
		 * may have been dropped since (the caller checks, if it needs
		 * the connection), but not replaced. */
		if (w.done && (ctx->generation == w.generation || reply->type == CKPT_MSG_ERROR)) {
			r = 0;
			break;
		}
		if (ctx->fd < 0 || ctx->generation != w.generation) {
			/* Dropped, here or by another thread (and maybe
			 * reconnected since): the reply will never come. */
			r = ctx->generation == w.generation && ctx->drop_error ? ctx->drop_error
									      : -CKPT_E_DISCONNECTED;
			break;
		}
		left = remaining_ms(deadline);
		if (left == 0) {
			r = -ETIMEDOUT;
			break;
		}
		ctx_wait_io(ctx, left < 0 || left > CKPT_WAIT_SLICE_MS ? CKPT_WAIT_SLICE_MS : left);
	}
	for (struct ckpt_waiter **pp = &ctx->waiters; *pp; pp = &(*pp)->next) {
		if (*pp == &w) {
			*pp = w.next;
			break;
		}
	}
	return r;
}

int ctx_drain(ckpt_ctx *ctx)
{
	struct ckpt_msg m;
	int r;

	while (ctx->fd >= 0) {
		r = ctx_recv(ctx, &m);
		if (r <= 0)
			return r;
		r = ctx_dispatch(ctx, &m);
		if (r < 0)
			return r;
	}
	return -CKPT_E_DISCONNECTED;
}

int ctx_find_free_slot(const ckpt_ctx *ctx)
{
	if (!ctx->slots)
		return -1;
	for (uint32_t i = 0; i < ctx->slot_count; i++)
		if (ctx->slots[i] == SLOT_FREE)
			return (int)i;
	return -1;
}

int ctx_wait_free_slot(ckpt_ctx *ctx)
{
	for (;;) {
		bool daemon_holds = false;
		int r, slot;

		r = ctx_drain(ctx);
		if (r < 0)
			return r;
		slot = ctx_find_free_slot(ctx);
		if (slot >= 0)
			return slot;
		for (uint32_t i = 0; i < ctx->slot_count; i++)
			daemon_holds |= ctx->slots[i] == SLOT_DAEMON;
		/* Every slot is held by an open handle of ours: waiting would
		 * wait forever. */
		if (!daemon_holds)
			return -CKPT_E_BUSY;
		ctx_wait_io(ctx, CKPT_WAIT_SLICE_MS);
	}
}

/* ---- Public API ----------------------------------------------------------- */

static void close_if_open(int fd)
{
	if (fd >= 0)
		close(fd);
}

static void ctx_sync_fini(ckpt_ctx *ctx)
{
	close_if_open(ctx->epoll_fd);
	close_if_open(ctx->news_fd);
	close_if_open(ctx->wake_fd);
	pthread_cond_destroy(&ctx->cond);
	pthread_mutex_destroy(&ctx->lock);
}

/* The lock, the condition variable and the descriptors that live as long
 * as the context; on failure nothing is left. */
static int ctx_sync_init(ckpt_ctx *ctx)
{
	struct epoll_event ev = { .events = EPOLLIN };
	pthread_condattr_t ca;
	int r;

	r = pthread_mutex_init(&ctx->lock, NULL);
	if (r != 0)
		return -r;
	r = pthread_condattr_init(&ca);
	if (r == 0) {
		r = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		if (r == 0)
			r = pthread_cond_init(&ctx->cond, &ca);
		pthread_condattr_destroy(&ca);
	}
	if (r != 0) {
		pthread_mutex_destroy(&ctx->lock);
		return -r;
	}
	ctx->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	ctx->news_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ctx->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ctx->epoll_fd < 0 || ctx->news_fd < 0 || ctx->wake_fd < 0 ||
	    epoll_ctl(ctx->epoll_fd, EPOLL_CTL_ADD, ctx->news_fd, &ev) < 0) {
		r = -errno;
		ctx_sync_fini(ctx);
		return r;
	}
	return 0;
}

/* Whether the caller's ckpt_options has the field (it may be built against
 * an older, shorter ckpt.h). */
#define OPTS_HAS(opts, field) \
	((opts)->struct_size >= offsetof(ckpt_options, field) + sizeof((opts)->field))

static int connect_fail(char *why, size_t whylen, int r, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int connect_fail(char *why, size_t whylen, int r, const char *fmt, ...)
{
	va_list ap;

	if (why && whylen) {
		va_start(ap, fmt);
		vsnprintf(why, whylen, fmt, ap);
		va_end(ap);
	}
	return r;
}

CKPT_EXPORT int ckpt_connect(const ckpt_options *opts, ckpt_ctx **out)
{
	char qjob[3 * CKPT_JOB_NAME_MAX + 8];
	char *why = NULL;
	size_t whylen = 0;
	ckpt_ctx *ctx;
	size_t jlen;
	int r;

	if (!opts || !out || opts->struct_size < offsetof(ckpt_options, handshake_timeout_ms))
		return -EINVAL;
	if (OPTS_HAS(opts, error_bytes) && opts->error && opts->error_bytes) {
		why = opts->error;
		whylen = opts->error_bytes;
		why[0] = '\0';
	}
	/* A caller built against an older, shorter ckpt_options gets the
	 * defaults of the fields it does not know. */
	uint32_t handshake_ms = OPTS_HAS(opts, handshake_timeout_ms) ? opts->handshake_timeout_ms : 0;
	if (!opts->job)
		return connect_fail(why, whylen, -CKPT_E_BAD_NAME, "no job name given");
	jlen = strnlen(opts->job, CKPT_JOB_NAME_MAX + 1);
	r = ckpt_job_name_check(opts->job, jlen);
	if (r < 0) {
		ckpt_name_quote(qjob, sizeof(qjob), opts->job, jlen);
		return connect_fail(why, whylen, r, "job name \"%s\" refused: 1..%d of "
				    "[A-Za-z0-9._-], not starting with '.'", qjob, CKPT_JOB_NAME_MAX);
	}
	if (opts->world_size == 0 || opts->rank >= opts->world_size)
		return connect_fail(why, whylen, -EINVAL, "job %s: rank %u with world size %u "
				    "(the rank must be below the world size)", opts->job, opts->rank,
				    opts->world_size);
	if (opts->max_save_bytes == 0)
		return connect_fail(why, whylen, -EINVAL, "job %s rank %u: max_save_bytes is 0",
				    opts->job, opts->rank);

	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return connect_fail(why, whylen, -ENOMEM, "out of memory");
	ctx->fd = -1;
	ctx->epoll_fd = ctx->news_fd = ctx->wake_fd = -1;
	ctx->owner_pid = getpid();
	r = ctx_sync_init(ctx);
	if (r < 0) {
		free(ctx);
		return connect_fail(why, whylen, r, "job %s rank %u: %s", opts->job, opts->rank,
				    ckpt_strerror(r));
	}
	if (opts->socket_path) {
		size_t plen = strlen(opts->socket_path);

		if (plen >= sizeof(ctx->socket_path)) {
			r = -ENAMETOOLONG;
			goto fail;
		}
		memcpy(ctx->socket_path, opts->socket_path, plen + 1);
	} else {
		r = ckpt_default_socket_path(ctx->socket_path, sizeof(ctx->socket_path));
		if (r < 0)
			goto fail;
	}
	memcpy(ctx->hello.job, opts->job, jlen);
	ctx->hello.job[jlen] = '\0';
	ctx->hello.rank = opts->rank;
	ctx->hello.world_size = opts->world_size;
	ctx->hello.local_rank = opts->local_rank;
	ctx->hello.max_save_bytes = opts->max_save_bytes;
	ctx->hello.pid = (uint32_t)getpid();
	ctx->connect_timeout_ms = opts->connect_timeout_ms ? opts->connect_timeout_ms
							   : CKPT_DEFAULT_CONNECT_MS;
	if (ctx->connect_timeout_ms > INT_MAX)
		ctx->connect_timeout_ms = INT_MAX;
	ctx->handshake_timeout_ms = handshake_ms ? handshake_ms : CKPT_DEFAULT_HANDSHAKE_MS;
	if (ctx->handshake_timeout_ms > INT_MAX)
		ctx->handshake_timeout_ms = INT_MAX;

	r = ctx_connect_now(ctx, (int)ctx->connect_timeout_ms, why, whylen);
	if (r < 0)
		goto fail;
	*out = ctx;
	return 0;

fail:
	/* ckptd's own words if it gave any, else the code's. */
	if (why && !why[0])
		connect_fail(why, whylen, r, "job %s rank %u: %s (socket %s)", opts->job,
			     opts->rank, ckpt_strerror(r),
			     ctx->socket_path[0] ? ctx->socket_path : "?");
	ctx_sync_fini(ctx);
	free(ctx);
	return r;
}

/* A forked child's copy: drop it without a word to ckptd (the socket is
 * the parent's too) and without the lock (a thread of the parent may
 * have held it at the fork, and no thread of the parent is here to
 * release it). What is freed and unmapped is the child's copy only. */
static void ctx_close_forked(ckpt_ctx *ctx)
{
	if (ctx->fd >= 0)
		close(ctx->fd);
	close_if_open(ctx->epoll_fd);
	close_if_open(ctx->news_fd);
	close_if_open(ctx->wake_fd);
	ctx_arena_unref(ctx->arena); /* handles of the child hold their own */
	free(ctx->slots);
	free(ctx);
}

CKPT_EXPORT void ckpt_close(ckpt_ctx *ctx)
{
	if (!ctx)
		return;
	if (ctx_forked(ctx)) {
		ctx_close_forked(ctx);
		return;
	}
	pthread_mutex_lock(&ctx->lock);
	if (ctx->fd >= 0) {
		struct ckpt_msg m = { .type = CKPT_MSG_BYE };

		m.seq = ctx->next_seq;
		(void)sock_send(ctx->fd, &m); /* best effort: we leave either way */
		close(ctx->fd);
		ctx->fd = -1;
	}
	ctx_arena_unref(ctx->arena);
	free(ctx->slots);
	pthread_mutex_unlock(&ctx->lock);
	ctx_sync_fini(ctx);
	free(ctx);
}

CKPT_EXPORT int ckpt_reconnect(ckpt_ctx *ctx)
{
	int r;

	if (!ctx)
		return -EINVAL;
	if (ctx_forked(ctx))
		return -CKPT_E_DISCONNECTED;
	pthread_mutex_lock(&ctx->lock);
	if (ctx->fd >= 0)
		(void)ctx_drain(ctx); /* notices a close that already happened */
	r = ctx_ensure_connected(ctx, (int)ctx->connect_timeout_ms);
	pthread_mutex_unlock(&ctx->lock);
	return r;
}

CKPT_EXPORT uint64_t ckpt_slot_bytes(const ckpt_ctx *ctx)
{
	return ctx ? ctx->slot_bytes : 0;
}

CKPT_EXPORT uint32_t ckpt_slot_count(const ckpt_ctx *ctx)
{
	return ctx ? ctx->slot_count : 0;
}

CKPT_EXPORT void *ckpt_arena(const ckpt_ctx *ctx, size_t *bytes)
{
	ckpt_ctx *c = (ckpt_ctx *)ctx; /* the lock is not part of the value */
	void *base = NULL;
	size_t len = 0;

	if (c && !ctx_forked(c)) {
		pthread_mutex_lock(&c->lock);
		if (c->arena) {
			base = c->arena->base;
			len = c->arena->bytes;
		}
		pthread_mutex_unlock(&c->lock);
	}
	if (bytes)
		*bytes = len;
	return base;
}

CKPT_EXPORT int ckpt_fd(const ckpt_ctx *ctx)
{
	if (!ctx)
		return -EINVAL;
	return ctx->epoll_fd;
}

static void fill_status(ckpt_ctx *ctx, uint64_t step, ckpt_status *st)
{
	struct step_record *rec = record_find(ctx, step);

	if (rec) {
		*st = rec->st;
		return;
	}
	memset(st, 0, sizeof(*st));
	st->step = step;
	st->state = CKPT_STATE_UNKNOWN;
}

CKPT_EXPORT int ckpt_poll(ckpt_ctx *ctx, uint64_t step, ckpt_status *st)
{
	if (!ctx || !st)
		return -EINVAL;
	if (step > CKPT_STEP_MAX)
		return -ERANGE;
	if (ctx_forked(ctx))
		return -CKPT_E_DISCONNECTED;
	pthread_mutex_lock(&ctx->lock);
	(void)ctx_drain(ctx); /* a drop shows up in the records */
	fill_status(ctx, step, st);
	pthread_mutex_unlock(&ctx->lock);
	return 0;
}

/* Ask ckptd about a step we have no record of (e.g. saved before a
 * reconnect, or by another context of the same rank). */
static void ctx_query(ckpt_ctx *ctx, uint64_t step, int timeout_ms)
{
	struct ckpt_msg m = { .type = CKPT_MSG_QUERY };
	struct ckpt_msg reply;

	m.u.step.step = step;
	if (ctx->fd < 0 || ctx_send(ctx, &m) < 0)
		return;
	if (ctx_await(ctx, m.seq, timeout_ms, &reply) < 0)
		return;
	if (reply.type != CKPT_MSG_STATUS && reply.type != CKPT_MSG_ERROR)
		ctx_drop(ctx, -CKPT_E_PROTOCOL, "unexpected reply to QUERY");
}

/*
 * ckptd sends its features notice right after HELLO_OK, so it precedes the
 * answer to any request: one round trip settles what this connection may
 * send, even right after connecting.
 */
void ctx_settle_features(ckpt_ctx *ctx)
{
	ctx_query(ctx, 0, (int)ctx->handshake_timeout_ms);
}

CKPT_EXPORT int ckpt_wait(ckpt_ctx *ctx, uint64_t step, int timeout_ms, ckpt_status *st)
{
	int64_t deadline;
	int r = 0;

	if (!ctx || !st)
		return -EINVAL;
	/* No such step can be saved, nor asked about (ckptd would drop us). */
	if (step > CKPT_STEP_MAX)
		return -ERANGE;
	if (ctx_forked(ctx))
		return -CKPT_E_DISCONNECTED;
	deadline = timeout_ms < 0 ? -1 : ckpt_mono_ms() + timeout_ms;
	pthread_mutex_lock(&ctx->lock);
	(void)ctx_drain(ctx);
	if (!record_find(ctx, step))
		ctx_query(ctx, step, remaining_ms(deadline));
	for (;;) {
		int left;

		(void)ctx_drain(ctx);
		fill_status(ctx, step, st);
		if (state_final(st->state))
			break;
		if (ctx->fd < 0) {
			/* Nothing more will come for this step. */
			r = -CKPT_E_DISCONNECTED;
			break;
		}
		left = remaining_ms(deadline);
		if (left == 0) {
			r = -ETIMEDOUT;
			break;
		}
		ctx_wait_io(ctx, left < 0 || left > CKPT_WAIT_SLICE_MS ? CKPT_WAIT_SLICE_MS : left);
	}
	pthread_mutex_unlock(&ctx->lock);
	return r;
}

CKPT_EXPORT int ckpt_next_event(ckpt_ctx *ctx, ckpt_status *st)
{
	int r = 0;

	if (!ctx || !st)
		return -EINVAL;
	if (ctx_forked(ctx))
		return -CKPT_E_DISCONNECTED;
	pthread_mutex_lock(&ctx->lock);
	(void)ctx_drain(ctx);
	if (ctx->ev_count > 0) {
		*st = ctx->events[ctx->ev_head];
		ctx->ev_head = (ctx->ev_head + 1) % CKPT_EVENT_QUEUE;
		ctx->ev_count--;
		r = 1;
	}
	/* Only the event consumer clears ckpt_fd's news, and only once it
	 * has everything: a ckpt_wait() on another thread must not make an
	 * event loop miss events (the socket itself stays level-triggered). */
	if (ctx->ev_count == 0)
		ctx_news_clear(ctx);
	pthread_mutex_unlock(&ctx->lock);
	return r;
}

/* LIST -> LIST_OK, with ctx->lock held. */
static int ctx_list(ckpt_ctx *ctx, struct ckpt_msg *reply)
{
	struct ckpt_msg m = { .type = CKPT_MSG_LIST };
	int r;

	r = ctx_ensure_connected(ctx, ctx_auto_reconnect_ms(ctx));
	if (r < 0)
		return -CKPT_E_DISCONNECTED;
	r = ctx_send(ctx, &m);
	if (r < 0)
		return r;
	r = ctx_await(ctx, m.seq, -1, reply);
	if (r < 0)
		return r;
	if (reply->type == CKPT_MSG_ERROR)
		return daemon_error(reply->u.error.code);
	if (reply->type != CKPT_MSG_LIST_OK || reply->u.list_ok.count > CKPT_LIST_MAX ||
	    reply->u.list_ok.count > reply->u.list_ok.total) {
		ctx_drop(ctx, -CKPT_E_PROTOCOL, "bad reply to LIST");
		return -CKPT_E_PROTOCOL;
	}
	return 0;
}

/* LIST, with the reply on the heap: a LIST_OK is too big for the stack of
 * a small thread. On success *out is the caller's to free(). */
static int ctx_list_alloc(ckpt_ctx *ctx, struct ckpt_msg **out)
{
	struct ckpt_msg *reply = malloc(sizeof(*reply));
	int r;

	if (ctx_forked(ctx))
		return -CKPT_E_DISCONNECTED;
	if (!reply)
		return -ENOMEM;
	pthread_mutex_lock(&ctx->lock);
	r = ctx_list(ctx, reply);
	pthread_mutex_unlock(&ctx->lock);
	if (r < 0) {
		free(reply);
		return r;
	}
	*out = reply;
	return 0;
}

CKPT_EXPORT int ckpt_latest(ckpt_ctx *ctx, uint64_t *step)
{
	struct ckpt_msg *reply;
	int r;

	if (!ctx || !step)
		return -EINVAL;
	r = ctx_list_alloc(ctx, &reply);
	if (r < 0)
		return r;
	if (reply->u.list_ok.total == 0)
		r = -CKPT_E_NO_CHECKPOINT;
	else if (reply->u.list_ok.count == 0)
		r = -CKPT_E_PROTOCOL;
	else
		*step = reply->u.list_ok.steps[reply->u.list_ok.count - 1];
	free(reply);
	return r;
}

CKPT_EXPORT int ckpt_list(ckpt_ctx *ctx, uint64_t *steps, size_t cap)
{
	struct ckpt_msg *reply;
	int r;

	if (!ctx || (!steps && cap > 0))
		return -EINVAL;
	r = ctx_list_alloc(ctx, &reply);
	if (r < 0)
		return r;
	size_t n = reply->u.list_ok.count < cap ? reply->u.list_ok.count : cap;
	if (n)
		memcpy(steps, reply->u.list_ok.steps, n * sizeof(*steps));
	r = reply->u.list_ok.total > INT_MAX ? INT_MAX : (int)reply->u.list_ok.total;
	free(reply);
	return r;
}
