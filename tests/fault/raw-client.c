/* SPDX-License-Identifier: MIT */
/*
 * ckpt-raw-client: speaks the libckpt <-> ckptd protocol by hand to feed
 * ckptd malformed and hostile input (PROTOCOL.md, "Malformed input").
 *
 * Each case opens its own connection, misbehaves once, and requires that
 * ckptd answers ERROR and/or closes the connection. The spec says a
 * protocol error is answered with ERROR (best effort) and a close, so a
 * connection left open is a failure too.
 *
 * usage: ckpt-raw-client --socket PATH [--root DIR] [--case NAME]... [--list]
 *        ckpt-raw-client --socket PATH --hello JOB
 * (--root: ckptd's checkpoint root, for the cases that look at the files)
 * Exit 0 if every case was refused properly, 1 otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "proto.h"

#define REPLY_TIMEOUT_MS 5000
#define TABLE_MAGIC 0x54544b43u /* "CKTT", FORMAT.md tensor table */
#define HDR CKPT_WIRE_HDR_BYTES

static const char *sock_path;
static const char *root_path; /* --root: the daemon's checkpoint root, for cases that look */
/* --job, --rank, --world, --step: who the "skip" case is and what it skips. */
static const char *opt_job;
static uint32_t opt_rank, opt_world = 1;
static uint64_t opt_step = 10;
static unsigned job_counter;

/* ---- little-endian builders ------------------------------------------ */

struct buf {
	uint8_t b[2 * CKPT_MSG_MAX_BYTES + 64];
	size_t n;
};

static void put8(struct buf *w, uint8_t v) { w->b[w->n++] = v; }
static void put16(struct buf *w, uint16_t v) { put8(w, (uint8_t)v); put8(w, (uint8_t)(v >> 8)); }
static void put32(struct buf *w, uint32_t v) { put16(w, (uint16_t)v); put16(w, (uint16_t)(v >> 16)); }
static void put64(struct buf *w, uint64_t v) { put32(w, (uint32_t)v); put32(w, (uint32_t)(v >> 32)); }
static void putbytes(struct buf *w, const void *p, size_t n)
{
	if (n) /* p may be NULL for none */
		memcpy(w->b + w->n, p, n);
	w->n += n;
}

static void set32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void set16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

/* Header with the real length filled in by finish(). */
static void begin_msg(struct buf *w, uint32_t type, uint32_t seq)
{
	w->n = 0;
	put32(w, CKPT_WIRE_MAGIC);
	put16(w, CKPT_WIRE_VERSION);
	put16(w, (uint16_t)type);
	put32(w, 0);
	put32(w, seq);
}

static void finish_msg(struct buf *w)
{
	set32(w->b + 8, (uint32_t)w->n);
}

/* HELLO with an arbitrary job name (len bytes, may hold NUL). */
static void build_hello(struct buf *w, const char *job, size_t len, uint32_t rank,
			uint32_t world, uint64_t max_save)
{
	begin_msg(w, CKPT_MSG_HELLO, 1);
	put16(w, (uint16_t)len);
	putbytes(w, job, len);
	put32(w, rank);
	put32(w, world);
	put32(w, rank);
	put32(w, 0);
	put64(w, max_save);
	put32(w, (uint32_t)getpid());
	finish_msg(w);
}

/* ---- socket helpers ----------------------------------------------------- */

static int fail_count;

static void note(const char *cs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(const char *cs, const char *fmt, ...)
{
	va_list ap;

	printf("  [%s] ", cs);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static int connect_sock(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

static int send_raw(int fd, const void *p, size_t n, int pass_fd)
{
	struct iovec iov = { (void *)p, n };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (pass_fd >= 0) {
		struct cmsghdr *c;

		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = sizeof(u.buf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
	}
	if (sendmsg(fd, &mh, MSG_NOSIGNAL) < 0)
		return -errno;
	return 0;
}

/*
 * Receive one message within timeout_ms. Returns 1 with *m decoded (and
 * *rfd the fd it carried, or -1), 0 if the peer closed, -ETIMEDOUT, or
 * another -errno (-EBADMSG: ckptd sent something that does not decode).
 */
static int recv_msg(int fd, int timeout_ms, struct ckpt_msg *m, int *rfd)
{
	uint8_t b[CKPT_MSG_MAX_BYTES];
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { b, sizeof(b) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	struct pollfd pfd = { fd, POLLIN, 0 };
	ssize_t n;
	int r;

	if (rfd)
		*rfd = -1;
	r = poll(&pfd, 1, timeout_ms);
	if (r < 0)
		return -errno;
	if (r == 0)
		return -ETIMEDOUT;
	n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return errno == ECONNRESET ? 0 : -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int nfd = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));

			for (int i = 0; i < nfd; i++) {
				int x;

				memcpy(&x, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (rfd && *rfd < 0)
					*rfd = x;
				else
					close(x);
			}
		}
	}
	if (n == 0)
		return 0;
	if (ckpt_msg_decode(b, (size_t)n, m) < 0)
		return -EBADMSG;
	return 1;
}

/* A connection after a good HELLO: the arena is mapped. */
struct session {
	int fd;
	uint8_t *arena;
	uint64_t arena_bytes, slot_bytes;
	uint32_t slots;
	char job[64];
};

static void session_close(struct session *s)
{
	if (s->arena)
		munmap(s->arena, s->arena_bytes);
	if (s->fd >= 0)
		close(s->fd);
	s->arena = NULL;
	s->fd = -1;
}

/* Connect and HELLO as `rank` of the `world`-rank job `job`. 0 or -errno. */
static int session_open_as(struct session *s, const char *cs, uint64_t max_save, const char *job,
			   uint32_t rank, uint32_t world)
{
	struct buf w;
	struct ckpt_msg m;
	int mfd = -1, r;

	memset(s, 0, sizeof(*s));
	s->fd = connect_sock();
	if (s->fd < 0) {
		note(cs, "connect: %s", strerror(-s->fd));
		return s->fd;
	}
	snprintf(s->job, sizeof(s->job), "%s", job);
	build_hello(&w, s->job, strlen(s->job), rank, world, max_save);
	r = send_raw(s->fd, w.b, w.n, -1);
	if (r < 0)
		goto fail;
	r = recv_msg(s->fd, REPLY_TIMEOUT_MS, &m, &mfd);
	if (r <= 0 || m.type != CKPT_MSG_HELLO_OK || mfd < 0) {
		note(cs, "a valid HELLO got no HELLO_OK with an fd (r=%d type=%s%s%s)", r,
		     r > 0 ? ckpt_msg_type_name(m.type) : "-",
		     r > 0 && m.type == CKPT_MSG_ERROR ? ": " : "",
		     r > 0 && m.type == CKPT_MSG_ERROR ? m.u.error.message : "");
		r = -EPROTO;
		goto fail;
	}
	s->slots = m.u.hello_ok.slots;
	s->slot_bytes = m.u.hello_ok.slot_bytes;
	s->arena_bytes = m.u.hello_ok.arena_bytes;
	s->arena = mmap(NULL, s->arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	close(mfd);
	if (s->arena == MAP_FAILED) {
		s->arena = NULL;
		r = -errno;
		note(cs, "mmap arena: %s", strerror(errno));
		goto fail;
	}
	return 0;
fail:
	if (mfd >= 0)
		close(mfd);
	session_close(s);
	return r < 0 ? r : -EPROTO;
}

/* Connect and HELLO as rank 0 of the 1-rank job `job`. 0 or -errno. */
static int session_open_job(struct session *s, const char *cs, uint64_t max_save, const char *job)
{
	return session_open_as(s, cs, max_save, job, 0, 1);
}

/* Connect and HELLO as rank 0 of a fresh 1-rank job. 0 or -errno. */
static int session_open(struct session *s, const char *cs, uint64_t max_save)
{
	char job[64];

	snprintf(job, sizeof(job), "raw-%d-%u", (int)getpid(), job_counter++);
	return session_open_job(s, cs, max_save, job);
}

/*
 * The misbehaviour was sent on fd: require ERROR and/or a close within the
 * timeout, and a close in the end. Unsolicited STATUS messages are skipped.
 */
static void expect_refused_with(const char *cs, int fd, int code, const char *text)
{
	bool got_error = false, got_want = false;
	struct ckpt_msg m;
	int r;

	for (;;) {
		r = recv_msg(fd, REPLY_TIMEOUT_MS, &m, NULL);
		if (r == 0 && (code || text) && !got_want) {
			note(cs, "FAIL: closed without an ERROR %d saying \"%s\"", code,
			     text ? text : "");
			fail_count++;
			return;
		}
		if (r == 0) {
			note(cs, "ok: %s", got_error ? "ERROR, then closed" : "closed (no ERROR)");
			return;
		}
		if (r == -ETIMEDOUT) {
			note(cs, "FAIL: %s", got_error ? "ERROR but the connection stayed open"
						       : "no ERROR and no close within 5 s");
			fail_count++;
			return;
		}
		if (r < 0) {
			note(cs, "FAIL: receive: %s", strerror(-r));
			fail_count++;
			return;
		}
		if (m.type == CKPT_MSG_ERROR) {
			note(cs, "ERROR %d (%s): %s", m.u.error.code,
			     m.u.error.code > -1000 ? strerror(-m.u.error.code) : "service error",
			     m.u.error.message);
			got_error = true;
			got_want |= (!code || m.u.error.code == code) &&
				    (!text || strstr(m.u.error.message, text));
		} else if (m.type != CKPT_MSG_STATUS) {
			note(cs, "FAIL: got %s instead of ERROR", ckpt_msg_type_name(m.type));
			fail_count++;
			return;
		}
	}
}

static void expect_refused(const char *cs, int fd)
{
	expect_refused_with(cs, fd, 0, NULL);
}

/* Open a session, send what build() makes of it, require a refusal. */
static void refused_in_session(const char *cs, void (*build)(struct session *s, struct buf *w))
{
	struct session s;
	struct buf w;

	if (session_open(&s, cs, 1 << 20) < 0) {
		fail_count++;
		return;
	}
	build(&s, &w);
	send_raw(s.fd, w.b, w.n, -1);
	expect_refused(cs, s.fd);
	session_close(&s);
}

/* ---- tables -------------------------------------------------------------- */

struct raw_tensor {
	const char *name;
	size_t name_len;
	uint8_t dtype;
	uint64_t data_offset, nbytes; /* u8, 1-D: shape = nbytes */
};

/* Hand-built tensor table (FORMAT.md) so that hostile entries can be made. */
static size_t build_table(uint8_t *dst, const struct raw_tensor *t, uint32_t count,
			  uint32_t claim_count)
{
	struct buf *w = calloc(1, sizeof(*w));
	size_t n;

	put32(w, TABLE_MAGIC);
	put16(w, 1);
	put16(w, 0);
	put32(w, claim_count);
	put32(w, 0);
	put64(w, 0); /* total, patched below */
	for (uint32_t i = 0; i < count; i++) {
		static const uint8_t zeros[8];

		put16(w, (uint16_t)t[i].name_len);
		put8(w, t[i].dtype);
		put8(w, 1);
		put32(w, 0);
		put64(w, t[i].data_offset);
		put64(w, t[i].nbytes);
		put64(w, t[i].nbytes); /* global shape */
		put64(w, 0);           /* offset */
		put64(w, t[i].nbytes); /* shape */
		putbytes(w, t[i].name, t[i].name_len);
		putbytes(w, zeros, (8 - t[i].name_len % 8) % 8);
	}
	for (int i = 0; i < 8; i++)
		w->b[16 + i] = (uint8_t)((uint64_t)w->n >> (8 * i));
	memcpy(dst, w->b, w->n);
	n = w->n;
	free(w);
	return n;
}

/* SAVE for a table placed at table_offset in `slot`. */
static void build_save(struct buf *w, uint64_t step, uint32_t slot, uint64_t data_bytes,
		       uint64_t table_offset, uint64_t table_bytes)
{
	begin_msg(w, CKPT_MSG_SAVE, 7);
	put64(w, step);
	put32(w, slot);
	put32(w, 0);
	put64(w, data_bytes);
	put64(w, table_offset);
	put64(w, table_bytes);
	put64(w, 0);
	put64(w, 0);
	finish_msg(w);
}

/* One good tensor of 8 KiB at offset 0, table at 8 KiB, in `slot`. */
static size_t good_table(struct session *s, uint32_t slot, uint64_t step)
{
	struct raw_tensor t = { "w", 1, CKPT_DTYPE_U8, 0, 8192 };
	uint8_t *base = s->arena + (uint64_t)slot * s->slot_bytes;

	memset(base, (int)step, 8192);
	return build_table(base + 8192, &t, 1, 1);
}

/* Send a SAVE whose slot holds the given tensors; expect refusal. */
static void save_with_tensors(const char *cs, const struct raw_tensor *t, uint32_t n)
{
	struct session s;
	struct buf w;
	size_t tb;

	if (session_open(&s, cs, 1 << 20) < 0) {
		fail_count++;
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		if (t[i].data_offset < s.slot_bytes)
			memset(s.arena + t[i].data_offset, 0x5a,
			       t[i].nbytes < s.slot_bytes - t[i].data_offset ?
			       t[i].nbytes : s.slot_bytes - t[i].data_offset);
	tb = build_table(s.arena + (512u << 10), t, n, n);
	build_save(&w, 10, 0, 512u << 10, 512u << 10, tb);
	send_raw(s.fd, w.b, w.n, -1);
	expect_refused(cs, s.fd);
	session_close(&s);
}

/* ---- cases -------------------------------------------------------------- */

static void valid_hello(struct buf *w)
{
	char job[64];

	snprintf(job, sizeof(job), "raw-%d-%u", (int)getpid(), job_counter++);
	build_hello(w, job, strlen(job), 0, 1, 1 << 20);
}

static void send_first(const char *cs, const struct buf *w, int pass_fd)
{
	int fd = connect_sock();

	if (fd < 0) {
		note(cs, "FAIL: connect: %s", strerror(-fd));
		fail_count++;
		return;
	}
	if (send_raw(fd, w->b, w->n, pass_fd) < 0) {
		/* ckptd may close first; that is a refusal too. */
		note(cs, "ok: send refused (%s)", strerror(errno));
		close(fd);
		return;
	}
	expect_refused(cs, fd);
	close(fd);
}

static void case_wrong_magic(const char *cs)
{
	struct buf w;

	valid_hello(&w);
	set32(w.b, 0x12345678);
	send_first(cs, &w, -1);
}

static void case_wrong_version(const char *cs)
{
	struct buf w;

	valid_hello(&w);
	set16(w.b + 4, 2);
	send_first(cs, &w, -1);
}

static void case_length_long(const char *cs)
{
	struct buf w;

	valid_hello(&w);
	set32(w.b + 8, (uint32_t)w.n + 100);
	send_first(cs, &w, -1);
}

static void case_length_short(const char *cs)
{
	struct buf w;

	valid_hello(&w);
	set32(w.b + 8, (uint32_t)w.n - 4);
	send_first(cs, &w, -1);
}

static void case_length_huge(const char *cs)
{
	struct buf w;

	valid_hello(&w);
	set32(w.b + 8, 0xffffffffu);
	send_first(cs, &w, -1);
}

static void case_truncated_header(const char *cs)
{
	struct buf w;

	valid_hello(&w);
	w.n = 10;
	send_first(cs, &w, -1);
}

static void case_truncated_body(const char *cs)
{
	struct buf w;

	valid_hello(&w);
	w.n -= 9;
	finish_msg(&w); /* consistent length, body cut short */
	send_first(cs, &w, -1);
}

static void case_empty_packet(const char *cs)
{
	struct buf w;

	w.n = 0;
	send_first(cs, &w, -1);
}

static void case_oversized_packet(const char *cs)
{
	struct buf w;

	valid_hello(&w);
	memset(w.b + w.n, 'A', 2 * CKPT_MSG_MAX_BYTES - w.n);
	w.n = 2 * CKPT_MSG_MAX_BYTES;
	finish_msg(&w);
	send_first(cs, &w, -1);
}

static void case_unknown_type(const char *cs)
{
	struct buf w;

	begin_msg(&w, 99, 1);
	finish_msg(&w);
	send_first(cs, &w, -1);
}

static void case_before_hello(const char *cs)
{
	struct buf w;

	begin_msg(&w, CKPT_MSG_LIST, 1);
	finish_msg(&w);
	send_first(cs, &w, -1);
}

static void case_save_before_hello(const char *cs)
{
	struct buf w;

	build_save(&w, 10, 0, 8192, 8192, 64);
	send_first(cs, &w, -1);
}

static void case_server_message(const char *cs)
{
	struct buf w;

	/* A daemon-to-client type sent by a client. */
	begin_msg(&w, CKPT_MSG_SAVE_OK, 1);
	put64(&w, 10);
	put32(&w, 0);
	finish_msg(&w);
	send_first(cs, &w, -1);
}

static void build_second_hello(struct session *s, struct buf *w)
{
	build_hello(w, s->job, strlen(s->job), 0, 1, 1 << 20);
}

static void case_second_hello(const char *cs)
{
	refused_in_session(cs, build_second_hello);
}

static void hostile_job(const char *cs, const char *job, size_t len)
{
	struct buf w;

	build_hello(&w, job, len, 0, 1, 1 << 20);
	send_first(cs, &w, -1);
}

static void case_job_dotdot(const char *cs) { hostile_job(cs, "../x", 4); }
static void case_job_slash(const char *cs) { hostile_job(cs, "a/b", 3); }
static void case_job_empty(const char *cs) { hostile_job(cs, "", 0); }
static void case_job_dot(const char *cs) { hostile_job(cs, "..", 2); }
static void case_job_hidden(const char *cs) { hostile_job(cs, ".hidden", 7); }
static void case_job_ctrl(const char *cs) { hostile_job(cs, "bad\x01\n\x1bjob", 9); }
static void case_job_nul(const char *cs) { hostile_job(cs, "ab\0../cd", 8); }
static void case_job_utf8(const char *cs) { hostile_job(cs, "j\xc3\xb6" "b", 4); }

static void case_job_long(const char *cs)
{
	char job[200];

	memset(job, 'j', sizeof(job));
	hostile_job(cs, job, sizeof(job));
}

static void case_rank_ge_world(const char *cs)
{
	struct buf w;

	build_hello(&w, "rank-ge-world", 13, 4, 4, 1 << 20);
	send_first(cs, &w, -1);
}

static void case_hello_with_fd(const char *cs)
{
	struct buf w;
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	valid_hello(&w);
	send_first(cs, &w, fd);
	close(fd);
}

static void case_list_with_fd(const char *cs)
{
	struct session s;
	struct buf w;
	int fd;

	if (session_open(&s, cs, 1 << 20) < 0) {
		fail_count++;
		return;
	}
	fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	begin_msg(&w, CKPT_MSG_LIST, 2);
	finish_msg(&w);
	send_raw(s.fd, w.b, w.n, fd);
	close(fd);
	expect_refused(cs, s.fd);
	session_close(&s);
}

static void case_save_slot_range(const char *cs)
{
	struct session s;
	struct buf w;
	size_t tb;

	if (session_open(&s, cs, 1 << 20) < 0) {
		fail_count++;
		return;
	}
	tb = good_table(&s, 0, 10);
	build_save(&w, 10, s.slots, 8192, 8192, tb);
	send_raw(s.fd, w.b, w.n, -1);
	expect_refused(cs, s.fd);
	session_close(&s);
}

static void build_restore_slot_range(struct session *s, struct buf *w)
{
	begin_msg(w, CKPT_MSG_RESTORE, 3);
	put64(w, CKPT_NO_STEP);
	put32(w, s->slots + 7);
	put32(w, 0);
	finish_msg(w);
}

static void case_restore_slot_range(const char *cs)
{
	refused_in_session(cs, build_restore_slot_range);
}

static void build_table_bytes_huge(struct session *s, struct buf *w)
{
	good_table(s, 0, 10);
	/* Within the protocol's table limit, far beyond the slot. */
	build_save(w, 10, 0, 8192, 8192, CKPT_TABLE_MAX_BYTES);
}

static void case_table_bytes_huge(const char *cs)
{
	refused_in_session(cs, build_table_bytes_huge);
}

static void build_table_offset_huge(struct session *s, struct buf *w)
{
	good_table(s, 0, 10);
	build_save(w, 10, 0, 8192, (UINT64_MAX / 4096 - 10) * 4096, 64);
}

static void case_table_offset_huge(const char *cs)
{
	refused_in_session(cs, build_table_offset_huge);
}

static void case_table_count_huge(const char *cs)
{
	struct session s;
	struct raw_tensor t = { "w", 1, CKPT_DTYPE_U8, 0, 8192 };
	struct buf w;
	size_t tb;

	if (session_open(&s, cs, 1 << 20) < 0) {
		fail_count++;
		return;
	}
	tb = build_table(s.arena + 8192, &t, 1, 0xffffffffu);
	build_save(&w, 10, 0, 8192, 8192, tb);
	send_raw(s.fd, w.b, w.n, -1);
	expect_refused(cs, s.fd);
	session_close(&s);
}

static void build_table_garbage(struct session *s, struct buf *w)
{
	memset(s->arena + 8192, 0xee, 4096);
	build_save(w, 10, 0, 8192, 8192, 4096);
}

static void case_table_garbage(const char *cs)
{
	refused_in_session(cs, build_table_garbage);
}

static void case_name_slash(const char *cs)
{
	struct raw_tensor t = { "../../etc/passwd", 16, CKPT_DTYPE_U8, 0, 4096 };

	save_with_tensors(cs, &t, 1);
}

static void case_name_dotdot(const char *cs)
{
	struct raw_tensor t = { "..", 2, CKPT_DTYPE_U8, 0, 4096 };

	save_with_tensors(cs, &t, 1);
}

static void case_name_ctrl(const char *cs)
{
	struct raw_tensor t = { "a\nb\x1b[31m", 8, CKPT_DTYPE_U8, 0, 4096 };

	save_with_tensors(cs, &t, 1);
}

static void case_name_nul(const char *cs)
{
	struct raw_tensor t = { "ab\0cd", 5, CKPT_DTYPE_U8, 0, 4096 };

	save_with_tensors(cs, &t, 1);
}

static void case_name_empty(const char *cs)
{
	struct raw_tensor t = { "", 0, CKPT_DTYPE_U8, 0, 4096 };

	save_with_tensors(cs, &t, 1);
}

static void case_name_duplicate(const char *cs)
{
	struct raw_tensor t[2] = { { "w", 1, CKPT_DTYPE_U8, 0, 4096 },
				   { "w", 1, CKPT_DTYPE_U8, 4096, 4096 } };

	save_with_tensors(cs, t, 2);
}

static void case_extents_overlap(const char *cs)
{
	struct raw_tensor t[2] = { { "a", 1, CKPT_DTYPE_U8, 0, 8192 },
				   { "b", 1, CKPT_DTYPE_U8, 4096, 4096 } };

	save_with_tensors(cs, t, 2);
}

static void case_extent_outside(const char *cs)
{
	/* Past data_bytes (512 KiB) and past the slot. */
	struct raw_tensor t = { "a", 1, CKPT_DTYPE_U8, 64ull << 30, 4096 };

	save_with_tensors(cs, &t, 1);
}

static void case_bad_dtype(const char *cs)
{
	struct raw_tensor t = { "a", 1, 200, 0, 4096 };

	save_with_tensors(cs, &t, 1);
}

static void case_step_backwards(const char *cs)
{
	struct session s;
	struct ckpt_msg m;
	struct buf w;
	size_t tb;
	int r;

	if (session_open(&s, cs, 1 << 20) < 0) {
		fail_count++;
		return;
	}
	tb = good_table(&s, 0, 10);
	build_save(&w, 10, 0, 8192, 8192, tb);
	send_raw(s.fd, w.b, w.n, -1);
	do
		r = recv_msg(s.fd, REPLY_TIMEOUT_MS, &m, NULL);
	while (r == 1 && m.type == CKPT_MSG_STATUS);
	if (r != 1 || m.type != CKPT_MSG_SAVE_OK) {
		note(cs, "FAIL: a valid SAVE got %s", r == 1 ? ckpt_msg_type_name(m.type) : "nothing");
		if (r == 1 && m.type == CKPT_MSG_ERROR)
			note(cs, "  ERROR %d: %s", m.u.error.code, m.u.error.message);
		fail_count++;
		session_close(&s);
		return;
	}
	tb = good_table(&s, 1 % s.slots, 5);
	build_save(&w, 5, 1 % s.slots, 8192, 8192, tb);
	send_raw(s.fd, w.b, w.n, -1);
	expect_refused(cs, s.fd);
	session_close(&s);
}

static void case_step_repeat(const char *cs)
{
	struct session s;
	struct ckpt_msg m;
	struct buf w;
	size_t tb;
	int r;

	if (session_open(&s, cs, 1 << 20) < 0) {
		fail_count++;
		return;
	}
	begin_msg(&w, CKPT_MSG_SKIP, 4);
	put64(&w, 20);
	finish_msg(&w);
	send_raw(s.fd, w.b, w.n, -1);
	/* SKIP has no reply of its own; a STATUS may come. Give it a moment. */
	r = recv_msg(s.fd, 200, &m, NULL);
	if (r == 0) {
		note(cs, "FAIL: a valid SKIP closed the connection");
		fail_count++;
		session_close(&s);
		return;
	}
	tb = good_table(&s, 0, 20);
	build_save(&w, 20, 0, 8192, 8192, tb);
	send_raw(s.fd, w.b, w.n, -1);
	expect_refused(cs, s.fd);
	session_close(&s);
}

static void build_release_not_held(struct session *s, struct buf *w)
{
	begin_msg(w, CKPT_MSG_RELEASE, 5);
	put32(w, 0);
	finish_msg(w);
}

static void case_release_not_held(const char *cs)
{
	refused_in_session(cs, build_release_not_held);
}

static void build_trailing_bytes(struct session *s, struct buf *w)
{
	begin_msg(w, CKPT_MSG_LIST, 6);
	put32(w, 0xdeadbeef);
	finish_msg(w);
}

static void case_trailing_bytes(const char *cs)
{
	refused_in_session(cs, build_trailing_bytes);
}

static void case_huge_max_save(const char *cs)
{
	struct buf w;
	char job[64];

	/* More staging than any machine has: refused, never allocated. */
	snprintf(job, sizeof(job), "raw-%d-huge", (int)getpid());
	build_hello(&w, job, strlen(job), 0, 1, UINT64_MAX / 2);
	send_first(cs, &w, -1);
}

/*
 * max_save_bytes whose slot size (max + max/32, rounded up to 2 MiB) is
 * 2^63 + 2 MiB: two such slots wrap a 64-bit product to 4 MiB. ckptd must
 * refuse it, not map 4 MiB and then trust 2^63-byte slots. A SAVE of slot 1
 * follows at once, to expose a daemon that accepted it.
 */
static void case_arena_size_wraps(const char *cs)
{
	struct buf w;
	char job[64];
	int fd = connect_sock();

	if (fd < 0) {
		note(cs, "FAIL: connect: %s", strerror(-fd));
		fail_count++;
		return;
	}
	snprintf(job, sizeof(job), "raw-%d-wrap", (int)getpid());
	build_hello(&w, job, strlen(job), 0, 1, 8943875914527676809ull);
	send_raw(fd, w.b, w.n, -1);
	build_save(&w, 10, 1, 8192, 8192, 64);
	send_raw(fd, w.b, w.n, -1);
	expect_refused(cs, fd);
	close(fd);
}

/* ---- STALL (PROTOCOL.md, "Extensions within version 1") ---------------- */

#define F64_NAN 0x7ff8000000000000ull
#define F64_INF 0x7ff0000000000000ull
#define F64_MINUS_ONE 0xbff0000000000000ull
#define F64_MINUS_ZERO 0x8000000000000000ull
#define F64_ONE_DAY 0x40f5180000000000ull /* 86400.0 */
#define F64_1E300 0x7e37e43c8800759cull
#define F64_HALF 0x3fe0000000000000ull

static void build_stall(struct buf *w, uint64_t step, uint64_t seconds_bits)
{
	begin_msg(w, CKPT_MSG_STALL, 8);
	put64(w, step);
	put64(w, seconds_bits);
	finish_msg(w);
}

/* A valid SAVE of step 10 in slot 0, answered SAVE_OK. 0 or -1. */
static int save_step_10(const char *cs, struct session *s)
{
	struct ckpt_msg m;
	struct buf w;
	size_t tb;
	int r;

	tb = good_table(s, 0, 10);
	build_save(&w, 10, 0, 8192, 8192, tb);
	send_raw(s->fd, w.b, w.n, -1);
	do
		r = recv_msg(s->fd, REPLY_TIMEOUT_MS, &m, NULL);
	while (r == 1 && m.type == CKPT_MSG_STATUS);
	if (r != 1 || m.type != CKPT_MSG_SAVE_OK) {
		note(cs, "FAIL: a valid SAVE got %s", r == 1 ? ckpt_msg_type_name(m.type) : "nothing");
		fail_count++;
		return -1;
	}
	return 0;
}

/* After an accepted SAVE of step 10, a STALL of it that is malformed
 * (its value, or its length) must be refused like any malformed input. */
static void stall_after_save(const char *cs, uint64_t bits, bool trailing)
{
	struct session s;
	struct buf w;

	if (session_open(&s, cs, 1 << 20) < 0) {
		fail_count++;
		return;
	}
	if (save_step_10(cs, &s) < 0) {
		session_close(&s);
		return;
	}
	build_stall(&w, 10, bits);
	if (trailing) {
		put32(&w, 0);
		finish_msg(&w);
	}
	send_raw(s.fd, w.b, w.n, -1);
	expect_refused(cs, s.fd);
	session_close(&s);
}

static void case_stall_nan(const char *cs) { stall_after_save(cs, F64_NAN, false); }
static void case_stall_inf(const char *cs) { stall_after_save(cs, F64_INF, false); }
static void case_stall_negative(const char *cs) { stall_after_save(cs, F64_MINUS_ONE, false); }
static void case_stall_minus_zero(const char *cs) { stall_after_save(cs, F64_MINUS_ZERO, false); }
static void case_stall_one_day(const char *cs) { stall_after_save(cs, F64_ONE_DAY, false); }
static void case_stall_huge(const char *cs) { stall_after_save(cs, F64_1E300, false); }
static void case_stall_trailing(const char *cs) { stall_after_save(cs, F64_HALF, true); }

static void case_stall_short(const char *cs)
{
	struct session s;
	struct buf w;

	if (session_open(&s, cs, 1 << 20) < 0) {
		fail_count++;
		return;
	}
	begin_msg(&w, CKPT_MSG_STALL, 8);
	put64(&w, 10);
	finish_msg(&w);
	send_raw(s.fd, w.b, w.n, -1);
	expect_refused(cs, s.fd);
	session_close(&s);
}

static void case_stall_before_hello(const char *cs)
{
	struct buf w;

	build_stall(&w, 10, F64_HALF);
	send_first(cs, &w, -1);
}

/*
 * Not malformed, so not refused: a well-formed STALL of a step this
 * connection never saved (or a second one of a saved step) is ignored, and
 * the connection keeps working. Also checks the features notice that must
 * come right after HELLO_OK and announce "stall".
 */
static void case_stall_unknown_step_ignored(const char *cs)
{
	struct session s;
	struct ckpt_msg m;
	struct buf w;
	int r;

	if (session_open(&s, cs, 1 << 20) < 0) {
		fail_count++;
		return;
	}
	r = recv_msg(s.fd, REPLY_TIMEOUT_MS, &m, NULL);
	if (r != 1 || !ckpt_msg_is_features_notice(&m) ||
	    !(ckpt_features_parse(m.u.status.reason) & CKPT_FEATURE_STALL)) {
		note(cs, "FAIL: no features notice naming stall after HELLO_OK");
		fail_count++;
		session_close(&s);
		return;
	}
	build_stall(&w, 999, F64_HALF);
	send_raw(s.fd, w.b, w.n, -1);
	if (save_step_10(cs, &s) < 0) {
		session_close(&s);
		return;
	}
	build_stall(&w, 10, F64_HALF);
	send_raw(s.fd, w.b, w.n, -1);
	send_raw(s.fd, w.b, w.n, -1); /* again: ignored */
	build_stall(&w, 11, F64_HALF);
	send_raw(s.fd, w.b, w.n, -1);
	begin_msg(&w, CKPT_MSG_LIST, 9);
	finish_msg(&w);
	send_raw(s.fd, w.b, w.n, -1);
	do
		r = recv_msg(s.fd, REPLY_TIMEOUT_MS, &m, NULL);
	while (r == 1 && m.type == CKPT_MSG_STATUS);
	if (r != 1 || m.type != CKPT_MSG_LIST_OK || m.seq != 9) {
		note(cs, "FAIL: after ignorable STALLs, LIST got %s",
		     r == 1 ? ckpt_msg_type_name(m.type) : r == 0 ? "a close" : "nothing");
		fail_count++;
	} else {
		note(cs, "ok: ignored, connection still serves");
	}
	session_close(&s);
}

/* ---- step numbers (FORMAT.md, "Step numbers") -------------------------- */

#define STEP_TOO_BIG 10000000000ull /* one past the ten digits of step-NNNNNNNNNN */

/* A message naming a step past the range: an ERROR -ERANGE that quotes
 * the step, then a close; never a step record, a file or a slot used. */
static void step_range_refused(const char *cs, uint32_t type)
{
	struct session s;
	struct buf w;

	if (session_open(&s, cs, 1 << 20) < 0) {
		fail_count++;
		return;
	}
	begin_msg(&w, type, 11);
	put64(&w, STEP_TOO_BIG);
	if (type == CKPT_MSG_SAVE) {
		size_t tb = good_table(&s, 0, 10);

		build_save(&w, STEP_TOO_BIG, 0, 8192, 8192, tb);
	} else if (type == CKPT_MSG_RESTORE) {
		put32(&w, 0);
		put32(&w, 0);
		finish_msg(&w);
	} else if (type == CKPT_MSG_STALL) {
		put64(&w, F64_HALF);
		finish_msg(&w);
	} else {
		finish_msg(&w);
	}
	send_raw(s.fd, w.b, w.n, -1);
	expect_refused_with(cs, s.fd, -ERANGE, "10000000000");
	session_close(&s);
}

static void case_step_range_save(const char *cs) { step_range_refused(cs, CKPT_MSG_SAVE); }
static void case_step_range_skip(const char *cs) { step_range_refused(cs, CKPT_MSG_SKIP); }
static void case_step_range_query(const char *cs) { step_range_refused(cs, CKPT_MSG_QUERY); }
static void case_step_range_restore(const char *cs) { step_range_refused(cs, CKPT_MSG_RESTORE); }
static void case_step_range_stall(const char *cs) { step_range_refused(cs, CKPT_MSG_STALL); }

/* ---- tensor names (FORMAT.md, "Tensor names") ---------------------------- */

/* A name that is not UTF-8 is refused with the SAVE, naming the tensor:
 * it must never reach the manifest, which is written after every shard. */
static void name_refused(const char *cs, const char *name, size_t len, const char *why)
{
	struct raw_tensor t = { name, len, CKPT_DTYPE_U8, 0, 4096 };
	struct session s;
	struct buf w;
	size_t tb;

	if (session_open(&s, cs, 1 << 20) < 0) {
		fail_count++;
		return;
	}
	memset(s.arena, 0x5a, 4096);
	tb = build_table(s.arena + (512u << 10), &t, 1, 1);
	build_save(&w, 10, 0, 512u << 10, 512u << 10, tb);
	send_raw(s.fd, w.b, w.n, -1);
	expect_refused_with(cs, s.fd, -CKPT_E_BAD_NAME, why);
	session_close(&s);
}

static void case_name_not_utf8(const char *cs) { name_refused(cs, "w\xff", 2, "not valid UTF-8"); }
static void case_name_latin1(const char *cs) { name_refused(cs, "caf\xe9", 4, "not valid UTF-8"); }
static void case_name_overlong(const char *cs) { name_refused(cs, "a\xc0\xaf", 3, "not valid UTF-8"); }
static void case_name_surrogate(const char *cs) { name_refused(cs, "\xed\xa0\x80", 3, "not valid UTF-8"); }
static void case_name_cut(const char *cs) { name_refused(cs, "cut\xe2\x88", 5, "not valid UTF-8"); }

/* ---- SKIP (PROTOCOL.md, SKIP) -------------------------------------------- */

/* Wait for the unsolicited STATUS of step in state; 0 or -1. */
static int wait_status(const char *cs, int fd, uint64_t step, uint32_t state, char *reason,
		       size_t len)
{
	struct ckpt_msg m;

	for (;;) {
		int r = recv_msg(fd, 10000, &m, NULL);

		if (r != 1) {
			note(cs, "FAIL: no STATUS %s of step %llu (%s)", state == CKPT_STATE_COMMITTED ?
			     "COMMITTED" : "SKIPPED", (unsigned long long)step,
			     r == 0 ? "closed" : strerror(-r));
			return -1;
		}
		if (m.type == CKPT_MSG_ERROR) {
			note(cs, "FAIL: ERROR %d: %s", m.u.error.code, m.u.error.message);
			return -1;
		}
		if (m.type == CKPT_MSG_STATUS && m.u.status.step == step) {
			if (m.u.status.state == state) {
				if (reason)
					snprintf(reason, len, "%s", m.u.status.reason);
				return 0;
			}
			if (m.u.status.state == CKPT_STATE_FAILED ||
			    m.u.status.state == CKPT_STATE_SKIPPED) {
				note(cs, "FAIL: step %llu: state %u: %s", (unsigned long long)step,
				     m.u.status.state, m.u.status.reason);
				return -1;
			}
		}
	}
}

/*
 * A rank that comes back (a new connection: step order starts afresh, as
 * for a trainer that rolled back) and SKIPs a step that is committed: the
 * SKIP is answered SKIPPED, and the committed step stays committed, on
 * disk and restorable. Today's failure mode: a fresh open step of that
 * number was created and failed, and the committed directory went to
 * .trash while LATEST still named it.
 */
static void case_skip_committed_step(const char *cs)
{
	struct session s;
	struct ckpt_msg m;
	struct buf w;
	char job[64], reason[CKPT_REASON_MAX + 1];
	size_t tb;
	int r;

	snprintf(job, sizeof(job), "raw-%d-skipc", (int)getpid());
	if (session_open_job(&s, cs, 1 << 20, job) < 0) {
		fail_count++;
		return;
	}
	tb = good_table(&s, 0, 10);
	build_save(&w, 10, 0, 8192, 8192, tb);
	send_raw(s.fd, w.b, w.n, -1);
	if (wait_status(cs, s.fd, 10, CKPT_STATE_COMMITTED, NULL, 0) < 0)
		goto fail;
	session_close(&s);

	/* Back as the same rank, counting from an earlier step. */
	if (session_open_job(&s, cs, 1 << 20, job) < 0)
		goto fail;
	begin_msg(&w, CKPT_MSG_SKIP, 12);
	put64(&w, 10);
	finish_msg(&w);
	send_raw(s.fd, w.b, w.n, -1);
	if (wait_status(cs, s.fd, 10, CKPT_STATE_SKIPPED, reason, sizeof(reason)) < 0)
		goto fail;
	note(cs, "SKIPPED: %s", reason);
	/* Whatever a removal would do runs on a worker: give it time. */
	usleep(500 * 1000);
	if (root_path) {
		char path[512];

		snprintf(path, sizeof(path), "%s/%s/step-0000000010/MANIFEST.json", root_path, job);
		if (access(path, F_OK) != 0) {
			note(cs, "FAIL: %s is gone after the SKIP", path);
			goto fail;
		}
	}
	/* Still committed, and still readable: restore it exactly. */
	begin_msg(&w, CKPT_MSG_RESTORE, 13);
	put64(&w, 10);
	put32(&w, 0);
	put32(&w, CKPT_RESTORE_F_EXACT);
	finish_msg(&w);
	send_raw(s.fd, w.b, w.n, -1);
	do
		r = recv_msg(s.fd, 10000, &m, NULL);
	while (r == 1 && m.type == CKPT_MSG_STATUS);
	if (r != 1 || m.type != CKPT_MSG_RESTORE_OK || m.u.restore_ok.step != 10) {
		note(cs, "FAIL: RESTORE of step 10 after the SKIP got %s%s%s",
		     r == 1 ? ckpt_msg_type_name(m.type) : "nothing",
		     r == 1 && m.type == CKPT_MSG_ERROR ? ": " : "",
		     r == 1 && m.type == CKPT_MSG_ERROR ? m.u.error.message : "");
		goto fail;
	}
	for (size_t i = 0; i < 8192; i++)
		if (s.arena[i] != 10) {
			note(cs, "FAIL: restored byte %zu is %u, saved 10", i, s.arena[i]);
			goto fail;
		}
	if (!strstr(reason, "committed")) {
		note(cs, "FAIL: the SKIPPED reason does not say the step is committed");
		goto fail;
	}
	note(cs, "ok: SKIPPED, step 10 still committed and restorable");
	session_close(&s);
	return;
fail:
	fail_count++;
	session_close(&s);
}

/*
 * --job J --rank R --world W --step N: connect as that rank, SKIP step N,
 * require the SKIPPED answer, and leave. For scripts that set the scene
 * (not a hostile case: without --job it does nothing).
 */
static void case_skip(const char *cs)
{
	struct session s;
	struct buf w;
	char reason[CKPT_REASON_MAX + 1];

	if (!opt_job) {
		note(cs, "ok: nothing to do without --job");
		return;
	}
	if (session_open_as(&s, cs, 1 << 20, opt_job, opt_rank, opt_world) < 0) {
		fail_count++;
		return;
	}
	begin_msg(&w, CKPT_MSG_SKIP, 14);
	put64(&w, opt_step);
	finish_msg(&w);
	send_raw(s.fd, w.b, w.n, -1);
	if (wait_status(cs, s.fd, opt_step, CKPT_STATE_SKIPPED, reason, sizeof(reason)) < 0)
		fail_count++;
	else
		note(cs, "ok: SKIPPED: %s", reason);
	session_close(&s);
}

/* ---- READ_RANGES (PROTOCOL.md, Semantics 13) ----------------------------- */

/* A READ_RANGES of one read; the name is put as given (any bytes). */
static void build_read_one(struct buf *w, uint64_t step, uint32_t slot, uint32_t count,
			   uint32_t rank, uint64_t offset, uint64_t length, const char *name,
			   size_t name_len)
{
	begin_msg(w, CKPT_MSG_READ_RANGES, 8);
	put64(w, step);
	put32(w, slot);
	put32(w, count);
	put32(w, rank);
	put64(w, offset);
	put64(w, length);
	put16(w, (uint16_t)name_len);
	putbytes(w, name, name_len);
	finish_msg(w);
}

static void build_read_slot_range(struct session *s, struct buf *w)
{
	build_read_one(w, 10, s->slots + 3, 1, 0, 0, 8, "w", 1);
}

static void case_read_slot_range(const char *cs) { refused_in_session(cs, build_read_slot_range); }

static void build_read_count_zero(struct session *s, struct buf *w)
{
	build_read_one(w, 10, 0, 0, 0, 0, 8, "w", 1);
}

static void case_read_count_zero(const char *cs) { refused_in_session(cs, build_read_count_zero); }

static void build_read_name_dotdot(struct session *s, struct buf *w)
{
	build_read_one(w, 10, 0, 1, 0, 0, 8, "../../etc/passwd", 16);
}

static void case_read_name_dotdot(const char *cs) { refused_in_session(cs, build_read_name_dotdot); }

static void build_read_wraps(struct session *s, struct buf *w)
{
	build_read_one(w, 10, 0, 1, 0, UINT64_MAX - 3, 8, "w", 1);
}

static void case_read_wraps(const char *cs) { refused_in_session(cs, build_read_wraps); }

/* Wait for the reply to seq 8, skipping unsolicited STATUS. */
static int read_reply(int fd, struct ckpt_msg *m)
{
	int r;

	do
		r = recv_msg(fd, REPLY_TIMEOUT_MS, m, NULL);
	while (r == 1 && m->type == CKPT_MSG_STATUS && m->seq == 0);
	return r;
}

/*
 * Not malformed, answered, and the connection stays: reads longer than the
 * slot (ERROR -CKPT_E_TOO_BIG), and a read of a step that only another job
 * (--job, the good job, which has it) committed: a client reads its own
 * job only, so for it the step is not committed.
 */
static void case_read_refusals(const char *cs)
{
	struct session s;
	struct ckpt_msg m;
	struct buf w;
	int r;

	if (session_open(&s, cs, 1 << 20) < 0) {
		fail_count++;
		return;
	}
	build_read_one(&w, 10, 0, 1, 0, 0, s.slot_bytes + 1, NULL, 0);
	send_raw(s.fd, w.b, w.n, -1);
	r = read_reply(s.fd, &m);
	if (r != 1 || m.type != CKPT_MSG_ERROR || m.u.error.code != -CKPT_E_TOO_BIG) {
		note(cs, "FAIL: a read longer than the slot got %s (%d)",
		     r == 1 ? ckpt_msg_type_name(m.type) : "nothing",
		     r == 1 && m.type == CKPT_MSG_ERROR ? m.u.error.code : 0);
		fail_count++;
	} else {
		note(cs, "ok: longer than the slot: ERROR %d: %s", m.u.error.code,
		     m.u.error.message);
	}
	build_read_one(&w, opt_step, 0, 1, 0, 0, 0, NULL, 0);
	send_raw(s.fd, w.b, w.n, -1);
	r = read_reply(s.fd, &m);
	if (r != 1 || m.type != CKPT_MSG_READ_RANGES_OK || m.u.read_ranges_ok.count != 1 ||
	    m.u.read_ranges_ok.results[0].result != -CKPT_E_NO_CHECKPOINT) {
		note(cs, "FAIL: a read of another job's step %llu got %s (result %d)",
		     (unsigned long long)opt_step, r == 1 ? ckpt_msg_type_name(m.type) : "nothing",
		     r == 1 && m.type == CKPT_MSG_READ_RANGES_OK ? m.u.read_ranges_ok.results[0].result
								 : 0);
		fail_count++;
	} else {
		note(cs, "ok: another job's step: %s", m.u.read_ranges_ok.message);
	}
	session_close(&s);
}

struct test_case {
	const char *name;
	void (*fn)(const char *);
};

static const struct test_case cases[] = {
	{ "wrong-magic", case_wrong_magic },
	{ "wrong-version", case_wrong_version },
	{ "length-too-long", case_length_long },
	{ "length-too-short", case_length_short },
	{ "length-huge", case_length_huge },
	{ "truncated-header", case_truncated_header },
	{ "truncated-body", case_truncated_body },
	{ "empty-packet", case_empty_packet },
	{ "oversized-packet", case_oversized_packet },
	{ "unknown-type", case_unknown_type },
	{ "list-before-hello", case_before_hello },
	{ "save-before-hello", case_save_before_hello },
	{ "daemon-message-from-client", case_server_message },
	{ "second-hello", case_second_hello },
	{ "job-dotdot-x", case_job_dotdot },
	{ "job-slash", case_job_slash },
	{ "job-empty", case_job_empty },
	{ "job-dotdot", case_job_dot },
	{ "job-hidden", case_job_hidden },
	{ "job-200-chars", case_job_long },
	{ "job-control-chars", case_job_ctrl },
	{ "job-embedded-nul", case_job_nul },
	{ "job-utf8", case_job_utf8 },
	{ "rank-ge-world", case_rank_ge_world },
	{ "hello-max-save-huge", case_huge_max_save },
	{ "hello-arena-size-wraps", case_arena_size_wraps },
	{ "hello-with-fd", case_hello_with_fd },
	{ "list-with-fd", case_list_with_fd },
	{ "save-slot-out-of-range", case_save_slot_range },
	{ "restore-slot-out-of-range", case_restore_slot_range },
	{ "table-bytes-huge", case_table_bytes_huge },
	{ "table-offset-huge", case_table_offset_huge },
	{ "table-count-huge", case_table_count_huge },
	{ "table-garbage", case_table_garbage },
	{ "tensor-name-slash", case_name_slash },
	{ "tensor-name-dotdot", case_name_dotdot },
	{ "tensor-name-control", case_name_ctrl },
	{ "tensor-name-nul", case_name_nul },
	{ "tensor-name-empty", case_name_empty },
	{ "tensor-name-duplicate", case_name_duplicate },
	{ "extents-overlap", case_extents_overlap },
	{ "extent-outside-slot", case_extent_outside },
	{ "bad-dtype", case_bad_dtype },
	{ "step-backwards", case_step_backwards },
	{ "step-repeat-after-skip", case_step_repeat },
	{ "release-not-held", case_release_not_held },
	{ "read-ranges-slot-range", case_read_slot_range },
	{ "read-ranges-count-zero", case_read_count_zero },
	{ "read-ranges-name-dotdot", case_read_name_dotdot },
	{ "read-ranges-range-wraps", case_read_wraps },
	{ "read-ranges-refusals", case_read_refusals },
	{ "trailing-bytes", case_trailing_bytes },
	{ "stall-nan", case_stall_nan },
	{ "stall-infinite", case_stall_inf },
	{ "stall-negative", case_stall_negative },
	{ "stall-minus-zero", case_stall_minus_zero },
	{ "stall-one-day", case_stall_one_day },
	{ "stall-huge", case_stall_huge },
	{ "stall-trailing-bytes", case_stall_trailing },
	{ "stall-short-body", case_stall_short },
	{ "stall-before-hello", case_stall_before_hello },
	{ "stall-unknown-step-ignored", case_stall_unknown_step_ignored },
	{ "step-range-save", case_step_range_save },
	{ "step-range-skip", case_step_range_skip },
	{ "step-range-query", case_step_range_query },
	{ "step-range-restore", case_step_range_restore },
	{ "step-range-stall", case_step_range_stall },
	{ "tensor-name-not-utf8", case_name_not_utf8 },
	{ "tensor-name-latin1", case_name_latin1 },
	{ "tensor-name-overlong", case_name_overlong },
	{ "tensor-name-surrogate", case_name_surrogate },
	{ "tensor-name-truncated-utf8", case_name_cut },
	{ "skip-committed-step", case_skip_committed_step },
	{ "skip", case_skip },
};

/*
 * --hello JOB: one well-formed HELLO (rank 0 of 1) and print what ckptd
 * answers ("ERROR code=C message=M" or "HELLO_OK"). Exit 0 on an ERROR (a
 * refusal is what the tests that use it expect), 1 otherwise.
 */
static int hello_once(const char *job)
{
	struct buf w;
	struct ckpt_msg m;
	int mfd = -1, r, fd = connect_sock();

	if (fd < 0) {
		printf("connect: %s\n", strerror(-fd));
		return 1;
	}
	build_hello(&w, job, strlen(job), 0, 1, 1 << 20);
	if (send_raw(fd, w.b, w.n, -1) < 0) {
		printf("send: %s\n", strerror(errno));
		close(fd);
		return 1;
	}
	r = recv_msg(fd, 30000, &m, &mfd);
	if (mfd >= 0)
		close(mfd);
	close(fd);
	if (r <= 0) {
		printf("no reply: %s\n", r == 0 ? "connection closed" : strerror(-r));
		return 1;
	}
	if (m.type == CKPT_MSG_ERROR) {
		printf("ERROR code=%d message=%s\n", m.u.error.code, m.u.error.message);
		return 0;
	}
	printf("%s\n", ckpt_msg_type_name(m.type));
	return 1;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "root", required_argument, NULL, 'r' },
		{ "job", required_argument, NULL, 'j' },
		{ "rank", required_argument, NULL, 'R' },
		{ "world", required_argument, NULL, 'W' },
		{ "step", required_argument, NULL, 'S' },
		{ "case", required_argument, NULL, 'c' },
		{ "list", no_argument, NULL, 'l' },
		{ "hello", required_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *only[64], *hello_job = NULL;
	size_t nonly = 0, ncases = sizeof(cases) / sizeof(cases[0]), ran = 0;
	int c;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 's': sock_path = optarg; break;
		case 'h': hello_job = optarg; break;
		case 'r': root_path = optarg; break;
		case 'j': opt_job = optarg; break;
		case 'R': opt_rank = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'W': opt_world = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'S': opt_step = strtoull(optarg, NULL, 10); break;
		case 'c':
			if (nonly < 64)
				only[nonly++] = optarg;
			break;
		case 'l':
			for (size_t i = 0; i < ncases; i++)
				puts(cases[i].name);
			return 0;
		default:
			fprintf(stderr, "usage: ckpt-raw-client --socket PATH [--root DIR] [--case NAME]... [--list] | --hello JOB\n"
				"  [--job J --rank R --world W --step N] (for the case \"skip\")\n");
			return 2;
		}
	}
	if (!sock_path) {
		fprintf(stderr, "ckpt-raw-client: --socket is required\n");
		return 2;
	}
	if (hello_job)
		return hello_once(hello_job);
	for (size_t i = 0; i < ncases; i++) {
		bool run = nonly == 0;

		for (size_t k = 0; k < nonly; k++)
			if (!strcmp(only[k], cases[i].name))
				run = true;
		if (!run)
			continue;
		printf("case %s\n", cases[i].name);
		fflush(stdout);
		cases[i].fn(cases[i].name);
		ran++;
	}
	if (ran == 0) {
		fprintf(stderr, "ckpt-raw-client: no such case\n");
		return 2;
	}
	printf("%zu cases, %d failed\n", ran, fail_count);
	return fail_count ? 1 : 0;
}
