/* SPDX-License-Identifier: MIT */
/*
 * libckpt against a fake ckptd that misbehaves: garbage, wrong fds,
 * truncated and oversized packets, a memfd that does not match, closing
 * mid-save, unsolicited STATUS for steps and slots that do not exist.
 * libckpt must return an error, never crash, and leak neither fds nor
 * mappings.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake.h"

#define SLOT_BYTES (256u << 10)

enum scenario {
	GARBAGE,
	NO_FD,
	TWO_FDS,
	TRUNCATED,
	OVERSIZED,
	REFUSED,
	SMALL_MEMFD,
	UNSEALED,
	EOF_AT_HELLO,
	WRONG_SEQ,
	SILENT,
	BUSY_FOREVER,
	CLOSE_MID_SAVE,
	CLOSE_AFTER_SAVE_OK,
	JUNK_STATUS,
	FD_ON_SAVE_OK,
	ERROR_ON_SAVE,
};

static const char *scenario_name[] = {
	"garbage", "no-fd", "two-fds", "truncated", "oversized", "refused",
	"small-memfd", "unsealed", "eof-at-hello", "wrong-seq", "silent",
	"busy-forever", "close-mid-save", "close-after-save-ok", "junk-status",
	"fd-on-save-ok", "error-on-save",
};

/* Wait for the client to hang up, so the child outlives its connection. */
static void wait_eof(int cfd)
{
	struct ckpt_msg m;

	while (fake_recv(cfd, &m, 5000) == 0)
		;
}

static int send_status(int cfd, uint64_t step, uint32_t state, int32_t error, uint32_t slot)
{
	struct ckpt_msg m = { .type = CKPT_MSG_STATUS, .seq = 0 };

	m.u.status.step = step;
	m.u.status.state = state;
	m.u.status.error = error;
	m.u.status.slot_freed = slot;
	snprintf(m.u.status.reason, sizeof(m.u.status.reason), "fake");
	return fake_send(cfd, &m, NULL, 0);
}

static int serve(int lfd, void *arg)
{
	enum scenario sc = (enum scenario)(long)arg;
	uint8_t buf[CKPT_MSG_MAX_BYTES * 2];
	struct ckpt_msg m, hello;
	int cfd, memfd, fds[2];
	ssize_t n;

	cfd = fake_accept(lfd, 5000);
	if (cfd < 0)
		return 2;
	if (sc != CLOSE_MID_SAVE && sc != CLOSE_AFTER_SAVE_OK && sc != JUNK_STATUS &&
	    sc != FD_ON_SAVE_OK && sc != ERROR_ON_SAVE) {
		if (fake_recv(cfd, &hello, 5000) < 0 || hello.type != CKPT_MSG_HELLO)
			return 3;
	}
	fake_hello_ok(&m, 2, SLOT_BYTES, CKPT_HELLO_F_SKIP_POLICY);
	switch (sc) {
	case GARBAGE:
		fake_send_raw(cfd, "hello garbage", 13, NULL, 0);
		break;
	case NO_FD:
		fake_send(cfd, &m, NULL, 0);
		break;
	case TWO_FDS:
		fds[0] = fake_memfd(2 * SLOT_BYTES, 0, true, NULL);
		fds[1] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		fake_send(cfd, &m, fds, 2);
		break;
	case TRUNCATED:
		memfd = fake_memfd(2 * SLOT_BYTES, 0, true, NULL);
		n = ckpt_msg_encode(&m, buf, sizeof(buf));
		fake_send_raw(cfd, buf, (size_t)n - 4, &memfd, 1);
		break;
	case OVERSIZED:
		memfd = fake_memfd(2 * SLOT_BYTES, 0, true, NULL);
		n = ckpt_msg_encode(&m, buf, sizeof(buf));
		memset(buf + n, 0, sizeof(buf) - (size_t)n);
		fake_send_raw(cfd, buf, sizeof(buf), &memfd, 1);
		break;
	case REFUSED:
		m.type = CKPT_MSG_ERROR;
		m.u.error.code = -CKPT_E_REFUSED;
		snprintf(m.u.error.message, sizeof(m.u.error.message), "uid 1234 not allowed");
		fake_send(cfd, &m, NULL, 0);
		break;
	case SMALL_MEMFD:
		memfd = fake_memfd(SLOT_BYTES, 0, true, NULL);
		fake_send(cfd, &m, &memfd, 1);
		break;
	case UNSEALED:
		memfd = fake_memfd(2 * SLOT_BYTES, 0, false, NULL);
		fake_send(cfd, &m, &memfd, 1);
		break;
	case EOF_AT_HELLO:
		close(cfd);
		return 0;
	case WRONG_SEQ:
		memfd = fake_memfd(2 * SLOT_BYTES, 0, true, NULL);
		m.seq = 7;
		fake_send(cfd, &m, &memfd, 1);
		break;
	case SILENT:
		break;
	case BUSY_FOREVER:
		for (;;) {
			m.type = CKPT_MSG_ERROR;
			m.u.error.code = -CKPT_E_BUSY;
			fake_send(cfd, &m, NULL, 0);
			close(cfd);
			cfd = fake_accept(lfd, 700);
			if (cfd < 0)
				return 0;
			if (fake_recv(cfd, &hello, 5000) < 0)
				return 4;
		}
	case CLOSE_MID_SAVE:
	case CLOSE_AFTER_SAVE_OK:
	case JUNK_STATUS:
	case FD_ON_SAVE_OK:
	case ERROR_ON_SAVE:
		if (fake_hello(cfd, 2, SLOT_BYTES, CKPT_HELLO_F_SKIP_POLICY, NULL) < 0)
			return 5;
		if (sc == JUNK_STATUS) {
			/* Steps nobody saved, slots nobody holds. */
			send_status(cfd, 999, CKPT_STATE_DURABLE, 0, 0);
			send_status(cfd, 1000, CKPT_STATE_FAILED, -EIO, 12345);
			send_status(cfd, 1001, CKPT_STATE_COMMITTED, 0, CKPT_NO_SLOT);
		}
		if (fake_recv(cfd, &m, 5000) < 0 || m.type != CKPT_MSG_SAVE)
			return 6;
		if (sc == CLOSE_MID_SAVE) {
			close(cfd);
			return 0;
		}
		if (sc == ERROR_ON_SAVE) {
			uint32_t seq = m.seq;

			memset(&m, 0, sizeof(m));
			m.type = CKPT_MSG_ERROR;
			m.seq = seq;
			m.u.error.code = -CKPT_E_EXISTS;
			fake_send(cfd, &m, NULL, 0);
			wait_eof(cfd);
			return 0;
		}
		{
			struct ckpt_msg ok = { .type = CKPT_MSG_SAVE_OK, .seq = m.seq };

			ok.u.save_ok.step = m.u.save.step;
			ok.u.save_ok.slot = m.u.save.slot;
			if (sc == FD_ON_SAVE_OK) {
				memfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
				fake_send(cfd, &ok, &memfd, 1);
				break;
			}
			fake_send(cfd, &ok, NULL, 0);
		}
		if (sc == CLOSE_AFTER_SAVE_OK) {
			close(cfd);
			return 0;
		}
		/* JUNK_STATUS: a slot out of range, then a packet that does
		 * not decode. */
		send_status(cfd, 1, CKPT_STATE_DURABLE, 0, 7);
		fake_recv(cfd, &m, 5000); /* the SKIP of step 3 */
		if (m.type != CKPT_MSG_SKIP || m.u.step.step != 3)
			return 7;
		fake_send_raw(cfd, "junkjunkjunkjunk", 16, NULL, 0);
		break;
	}
	wait_eof(cfd);
	return 0;
}

static ckpt_options opts_for(const char *path, uint32_t timeout_ms)
{
	ckpt_options o = {
		.struct_size = sizeof(ckpt_options),
		.socket_path = path,
		.job = "fault-job",
		.world_size = 1,
		.max_save_bytes = 64 << 10,
		.connect_timeout_ms = timeout_ms,
		.handshake_timeout_ms = timeout_ms,
	};
	return o;
}

/* Connect-time failures: the expected error and nothing left behind. */
static int expect_connect_error(enum scenario sc, int want, uint32_t timeout_ms)
{
	struct fake f;
	ckpt_ctx *ctx = NULL;
	ckpt_options o;
	int fds = count_fds(), maps = count_memfd_maps();
	int64_t t0;
	int r, st;

	CHECK(fake_start(&f, serve, (void *)(long)sc) == 0);
	o = opts_for(f.path, timeout_ms);
	t0 = test_now_ms();
	r = ckpt_connect(&o, &ctx);
	if (r != want)
		fprintf(stderr, "%s: connect returned %d (%s), want %d (%s)\n",
			scenario_name[sc], r, ckpt_strerror(r), want, ckpt_strerror(want));
	CHECK_EQ(r, want);
	CHECK(ctx == NULL);
	CHECK(test_now_ms() - t0 < (int64_t)timeout_ms + 1500);
	st = fake_stop(&f, 5000);
	CHECK_EQ(st, 0);
	CHECK_EQ(count_fds(), fds);
	CHECK_EQ(count_memfd_maps(), maps);
	return 0;
}

static int fill_save(ckpt_ctx *ctx, uint64_t step, int *result)
{
	static float w[256];
	ckpt_tensor_desc d = { .name = "w", .dtype = CKPT_DTYPE_F32, .ndim = 1,
			       .global_shape = { 256 }, .shape = { 256 } };
	ckpt_save *s = NULL;

	*result = ckpt_save_begin(ctx, step, &s);
	if (*result < 0)
		return 0;
	CHECK_EQ(ckpt_save_add(s, &d, w), 0);
	*result = ckpt_save_finish(s);
	return 0;
}

static int test_close_mid_save(void)
{
	struct fake f;
	ckpt_ctx *ctx = NULL;
	ckpt_options o;
	ckpt_status st;
	int fds = count_fds(), maps = count_memfd_maps();
	int64_t t0;
	int r;

	CHECK(fake_start(&f, serve, (void *)(long)CLOSE_MID_SAVE) == 0);
	o = opts_for(f.path, 500);
	CHECK_EQ(ckpt_connect(&o, &ctx), 0);
	CHECK(fill_save(ctx, 1, &r) == 0);
	CHECK_EQ(r, -CKPT_E_DISCONNECTED);
	/* Never accepted: nothing to report for it. */
	CHECK_EQ(ckpt_poll(ctx, 1, &st), 0);
	CHECK_EQ(st.state, CKPT_STATE_UNKNOWN);
	/* Dropped (no arena); ckpt_fd stays the same valid descriptor. */
	CHECK(ckpt_fd(ctx) >= 0);
	CHECK(ckpt_arena(ctx, NULL) == NULL);
	CHECK_EQ(fake_stop(&f, 5000), 0);
	/* Nobody listens any more: the automatic reconnect gives up fast. */
	t0 = test_now_ms();
	CHECK(fill_save(ctx, 2, &r) == 0);
	CHECK_EQ(r, -CKPT_E_DISCONNECTED);
	CHECK(test_now_ms() - t0 < 1500);
	CHECK(ckpt_reconnect(ctx) < 0);
	ckpt_close(ctx);
	CHECK_EQ(count_fds(), fds);
	CHECK_EQ(count_memfd_maps(), maps);
	return 0;
}

static int test_close_after_save_ok(void)
{
	struct fake f;
	ckpt_ctx *ctx = NULL;
	ckpt_options o;
	ckpt_status st;
	int fds = count_fds(), maps = count_memfd_maps();
	int r;

	CHECK(fake_start(&f, serve, (void *)(long)CLOSE_AFTER_SAVE_OK) == 0);
	o = opts_for(f.path, 2000);
	CHECK_EQ(ckpt_connect(&o, &ctx), 0);
	CHECK(fill_save(ctx, 1, &r) == 0);
	CHECK_EQ(r, 0);
	CHECK_EQ(ckpt_wait(ctx, 1, 3000, &st), 0);
	CHECK_EQ(st.state, CKPT_STATE_FAILED);
	CHECK_EQ(st.error, -CKPT_E_DISCONNECTED);
	CHECK(strstr(st.reason, "step 1") != NULL);
	CHECK_EQ(ckpt_next_event(ctx, &st), 1);
	CHECK_EQ(st.state, CKPT_STATE_PENDING);
	CHECK_EQ(ckpt_next_event(ctx, &st), 1);
	CHECK_EQ(st.state, CKPT_STATE_FAILED);
	CHECK_EQ(ckpt_next_event(ctx, &st), 0);
	CHECK_EQ(fake_stop(&f, 5000), 0);
	ckpt_close(ctx);
	CHECK_EQ(count_fds(), fds);
	CHECK_EQ(count_memfd_maps(), maps);
	return 0;
}

static int test_junk_status(void)
{
	struct fake f;
	ckpt_ctx *ctx = NULL;
	ckpt_save *s = NULL;
	ckpt_options o;
	ckpt_status st;
	int fds = count_fds(), maps = count_memfd_maps();
	int r, events = 0;

	CHECK(fake_start(&f, serve, (void *)(long)JUNK_STATUS) == 0);
	o = opts_for(f.path, 2000);
	CHECK_EQ(ckpt_connect(&o, &ctx), 0);
	CHECK(fill_save(ctx, 1, &r) == 0);
	CHECK_EQ(r, 0);
	/* Heard of, though never saved here. */
	CHECK_EQ(ckpt_poll(ctx, 999, &st), 0);
	CHECK_EQ(st.state, CKPT_STATE_DURABLE);
	CHECK_EQ(ckpt_poll(ctx, 1000, &st), 0);
	CHECK_EQ(st.state, CKPT_STATE_FAILED);
	CHECK_EQ(st.error, -EIO);
	/* One slot is ckptd's, one free: STATUS naming slot 7 freed nothing. */
	CHECK_EQ(ckpt_save_begin(ctx, 2, &s), 0);
	/* Both slots taken now (one by the open save): skip. */
	{
		ckpt_save *s2 = NULL;

		/* Finishing 3 before 2 would go backwards at ckptd. */
		CHECK_EQ(ckpt_save_begin(ctx, 3, &s2), -CKPT_E_SKIPPED);
	}
	ckpt_save_abort(s);
	/* Step 2 not possible any more (3 was skipped). */
	CHECK_EQ(ckpt_save_begin(ctx, 2, &s), -CKPT_E_STEP_ORDER);
	/* Then a packet that does not decode: the connection is dropped and
	 * step 1, durable but not committed, fails. */
	CHECK_EQ(ckpt_wait(ctx, 1, 3000, &st), 0);
	CHECK_EQ(st.state, CKPT_STATE_FAILED);
	CHECK_EQ(st.error, -CKPT_E_PROTOCOL);
	while (ckpt_next_event(ctx, &st) == 1)
		events++;
	/* 999, 1000, 1001, pending 1, durable 1, skipped 3, then at the drop
	 * failed 999 and failed 1 (nothing more will come for either). */
	CHECK_EQ(events, 8);
	CHECK_EQ(fake_stop(&f, 5000), 0);
	ckpt_close(ctx);
	CHECK_EQ(count_fds(), fds);
	CHECK_EQ(count_memfd_maps(), maps);
	return 0;
}

/* A reply that breaks the rules after a good connect. */
static int test_bad_save_reply(enum scenario sc, int want)
{
	struct fake f;
	ckpt_ctx *ctx = NULL;
	ckpt_save *s1 = NULL, *s2 = NULL;
	ckpt_options o;
	int fds = count_fds(), maps = count_memfd_maps();
	int r;

	CHECK(fake_start(&f, serve, (void *)(long)sc) == 0);
	o = opts_for(f.path, 2000);
	CHECK_EQ(ckpt_connect(&o, &ctx), 0);
	CHECK(fill_save(ctx, 1, &r) == 0);
	if (r != want)
		fprintf(stderr, "%s: finish returned %d, want %d\n", scenario_name[sc], r, want);
	CHECK_EQ(r, want);
	if (want == -CKPT_E_EXISTS) {
		/* Refused: the slot stayed ours, so both are free. */
		CHECK_EQ(ckpt_save_begin(ctx, 2, &s1), 0);
		CHECK_EQ(ckpt_save_begin(ctx, 3, &s2), 0);
		ckpt_save_abort(s2);
		ckpt_save_abort(s1);
	} else {
		/* Dropped: no arena, while ckpt_fd stays valid. */
		CHECK(ckpt_arena(ctx, NULL) == NULL);
		CHECK(ckpt_fd(ctx) >= 0);
	}
	ckpt_close(ctx);
	CHECK_EQ(fake_stop(&f, 5000), 0);
	CHECK_EQ(count_fds(), fds);
	CHECK_EQ(count_memfd_maps(), maps);
	return 0;
}

int main(void)
{
	static const struct {
		enum scenario sc;
		int want;
		uint32_t timeout_ms;
	} connect_cases[] = {
		{ GARBAGE, -CKPT_E_PROTOCOL, 2000 },
		{ NO_FD, -CKPT_E_PROTOCOL, 2000 },
		{ TWO_FDS, -CKPT_E_PROTOCOL, 2000 },
		{ TRUNCATED, -CKPT_E_PROTOCOL, 2000 },
		{ OVERSIZED, -CKPT_E_PROTOCOL, 2000 },
		{ REFUSED, -CKPT_E_REFUSED, 2000 },
		{ SMALL_MEMFD, -CKPT_E_PROTOCOL, 2000 },
		{ UNSEALED, -CKPT_E_PROTOCOL, 2000 },
		{ EOF_AT_HELLO, -CKPT_E_DISCONNECTED, 2000 },
		{ WRONG_SEQ, -CKPT_E_PROTOCOL, 2000 },
		{ SILENT, -ETIMEDOUT, 400 },
		{ BUSY_FOREVER, -CKPT_E_BUSY, 400 },
	};

	for (size_t i = 0; i < sizeof(connect_cases) / sizeof(connect_cases[0]); i++) {
		if (expect_connect_error(connect_cases[i].sc, connect_cases[i].want,
					 connect_cases[i].timeout_ms)) {
			fprintf(stderr, "scenario %s failed\n", scenario_name[connect_cases[i].sc]);
			return 1;
		}
	}
	if (test_close_mid_save() || test_close_after_save_ok() || test_junk_status() ||
	    test_bad_save_reply(FD_ON_SAVE_OK, -CKPT_E_PROTOCOL) ||
	    test_bad_save_reply(ERROR_ON_SAVE, -CKPT_E_EXISTS))
		return 1;
	printf("ok\n");
	return 0;
}
