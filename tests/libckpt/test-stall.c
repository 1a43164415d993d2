/* SPDX-License-Identifier: MIT */
/*
 * libckpt's save stall reports (STALL, PROTOCOL.md "Extensions within
 * version 1") against fake ckptds: a daemon that sends no features notice
 * (every ckptd before STALL) never receives one, nor does one whose notice
 * does not name "stall"; a daemon that announces it gets exactly one STALL
 * per accepted save, right after SAVE_OK and before the next SAVE, with the
 * rank's stall in it; and the features of one connection do not survive a
 * reconnect to a daemon that does not announce them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake.h"

#define SLOT_BYTES (512u << 10)
#define SAVES 3
/* Each save sleeps this long between begin and finish: a lower bound of
 * the stall it must report (sleeping never takes less). */
#define SAVE_SLEEP_MS 50

struct serve_opts {
	const char *notice; /* features notice tokens, or NULL for none */
};

static int send_notice(int cfd, const char *tokens)
{
	struct ckpt_msg m;

	ckpt_msg_features_notice(&m, 0);
	snprintf(m.u.status.reason, sizeof(m.u.status.reason), "%s", tokens);
	return fake_send(cfd, &m, NULL, 0);
}

static int send_save_ok(int cfd, const struct ckpt_msg *save)
{
	struct ckpt_msg r = { .type = CKPT_MSG_SAVE_OK, .seq = save->seq };

	r.u.save_ok.step = save->u.save.step;
	r.u.save_ok.slot = save->u.save.slot;
	return fake_send(cfd, &r, NULL, 0);
}

static int send_durable(int cfd, uint64_t step, uint32_t slot)
{
	struct ckpt_msg m = { .type = CKPT_MSG_STATUS };

	m.u.status.step = step;
	m.u.status.state = CKPT_STATE_DURABLE;
	m.u.status.slot_freed = slot;
	return fake_send(cfd, &m, NULL, 0);
}

/*
 * Serve one connection: answer every SAVE, free its slot, and count what
 * comes. With stall_expected, the message after each SAVE_OK must be the
 * STALL of that step. Returns 0 or a failure code (> 0).
 */
static int serve_conn(int cfd, const char *notice, bool stall_expected, int saves_wanted)
{
	struct ckpt_msg m;
	uint8_t *arena;
	int saves = 0, stalls = 0;

	if (fake_hello(cfd, 1, SLOT_BYTES, 0, (void **)&arena) < 0)
		return 2;
	if (notice && send_notice(cfd, notice) < 0)
		return 3;
	while (saves < saves_wanted && fake_recv(cfd, &m, 10000) == 0) {
		if (m.type == CKPT_MSG_STALL) {
			fprintf(stderr, "fake ckptd: STALL step %llu without a SAVE before it\n",
				(unsigned long long)m.u.stall.step);
			return 4;
		}
		if (m.type != CKPT_MSG_SAVE)
			return 5;
		saves++;
		if (send_save_ok(cfd, &m) < 0)
			return 6;
		if (stall_expected) {
			struct ckpt_msg s;

			if (fake_recv(cfd, &s, 10000) < 0 || s.type != CKPT_MSG_STALL) {
				fprintf(stderr, "fake ckptd: no STALL after SAVE_OK of step %llu\n",
					(unsigned long long)m.u.save.step);
				return 7;
			}
			if (s.u.stall.step != m.u.save.step ||
			    !(s.u.stall.seconds >= SAVE_SLEEP_MS / 1000.0) ||
			    !(s.u.stall.seconds < 60)) {
				fprintf(stderr, "fake ckptd: STALL step %llu seconds %g for step %llu\n",
					(unsigned long long)s.u.stall.step, s.u.stall.seconds,
					(unsigned long long)m.u.save.step);
				return 8;
			}
			stalls++;
		}
		/* After its last save the client may already be gone. */
		(void)send_durable(cfd, m.u.save.step, m.u.save.slot);
	}
	/* Whatever else comes until the client leaves: no STALL allowed
	 * unless announced, and never a second one. */
	while (fake_recv(cfd, &m, 10000) == 0) {
		if (m.type == CKPT_MSG_STALL) {
			fprintf(stderr, "fake ckptd: unexpected STALL step %llu (notice \"%s\")\n",
				(unsigned long long)m.u.stall.step, notice ? notice : "(none)");
			return 10;
		}
		if (m.type == CKPT_MSG_BYE)
			break;
	}
	if (saves != saves_wanted || stalls != (stall_expected ? saves_wanted : 0)) {
		fprintf(stderr, "fake ckptd: %d saves, %d stalls\n", saves, stalls);
		return 11;
	}
	return 0;
}

static int serve_one(int lfd, void *arg)
{
	const struct serve_opts *o = arg;
	int cfd = fake_accept(lfd, 5000), r;
	bool expect = o->notice && (ckpt_features_parse(o->notice) & CKPT_FEATURE_STALL);

	if (cfd < 0)
		return 2;
	r = serve_conn(cfd, o->notice, expect, SAVES);
	close(cfd);
	return r;
}

/* First connection announces stall and is dropped after one save; the
 * client's automatic reconnect reaches a daemon that does not. */
static int serve_reconnect(int lfd, void *arg)
{
	int cfd, r;

	(void)arg;
	cfd = fake_accept(lfd, 5000);
	if (cfd < 0)
		return 2;
	if (fake_hello(cfd, 1, SLOT_BYTES, 0, NULL) < 0 || send_notice(cfd, "stall") < 0)
		return 3;
	{
		struct ckpt_msg m, s;

		if (fake_recv(cfd, &m, 10000) < 0 || m.type != CKPT_MSG_SAVE ||
		    send_save_ok(cfd, &m) < 0)
			return 4;
		if (fake_recv(cfd, &s, 10000) < 0 || s.type != CKPT_MSG_STALL ||
		    s.u.stall.step != m.u.save.step)
			return 5;
	}
	close(cfd);
	cfd = fake_accept(lfd, 10000);
	if (cfd < 0)
		return 6;
	r = serve_conn(cfd, NULL, false, 2);
	close(cfd);
	return r ? 20 + r : 0;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int save_one(ckpt_ctx *ctx, uint64_t step)
{
	ckpt_tensor_desc d = { .name = "w", .dtype = CKPT_DTYPE_U8, .ndim = 1,
			       .global_shape = { 4096 }, .shape = { 4096 } };
	uint8_t buf[4096];
	ckpt_save *s = NULL;
	int r;

	memset(buf, (int)step, sizeof(buf));
	r = ckpt_save_begin(ctx, step, &s);
	if (r < 0)
		return r;
	sleep_ms(SAVE_SLEEP_MS);
	r = ckpt_save_add(s, &d, buf);
	if (r < 0) {
		ckpt_save_abort(s);
		return r;
	}
	return ckpt_save_finish(s);
}

static int run_saves(const char *notice)
{
	struct serve_opts so = { .notice = notice };
	struct fake f;
	ckpt_options o = { .struct_size = sizeof(o), .job = "stall-job", .world_size = 1,
			   .max_save_bytes = 64 << 10, .connect_timeout_ms = 5000 };
	ckpt_ctx *ctx = NULL;
	int fds = count_fds();

	CHECK(fake_start(&f, serve_one, &so) == 0);
	o.socket_path = f.path;
	CHECK_EQ(ckpt_connect(&o, &ctx), 0);
	for (uint64_t step = 1; step <= SAVES; step++)
		CHECK_EQ(save_one(ctx, step * 10), 0);
	ckpt_close(ctx);
	CHECK_EQ(fake_stop(&f, 15000), 0);
	CHECK_EQ(count_fds(), fds);
	return 0;
}

static int test_reconnect_forgets(void)
{
	struct fake f;
	ckpt_options o = { .struct_size = sizeof(o), .job = "stall-job", .world_size = 1,
			   .max_save_bytes = 64 << 10, .connect_timeout_ms = 5000 };
	ckpt_ctx *ctx = NULL;
	int r = -1;

	CHECK(fake_start(&f, serve_reconnect, NULL) == 0);
	o.socket_path = f.path;
	CHECK_EQ(ckpt_connect(&o, &ctx), 0);
	CHECK_EQ(save_one(ctx, 1), 0);
	/* The daemon hangs up; a save begun now finds out and reconnects
	 * (one try each), so allow a few. */
	for (int i = 0; i < 50 && r != 0; i++) {
		r = save_one(ctx, 2);
		if (r == -CKPT_E_DISCONNECTED)
			sleep_ms(100);
		else
			CHECK_EQ(r, 0);
	}
	CHECK_EQ(r, 0);
	CHECK_EQ(save_one(ctx, 3), 0);
	ckpt_close(ctx);
	CHECK_EQ(fake_stop(&f, 15000), 0);
	return 0;
}

int main(void)
{
	int failed = 0;

	/* An older ckptd: no notice, so no STALL (it would drop us for it). */
	failed += run_saves(NULL);
	/* A notice of features we do not know: still no STALL. */
	failed += run_saves("zstd resume_v2");
	failed += run_saves("");
	/* Announced: one STALL per save, in order, with the stall in it. */
	failed += run_saves("stall");
	failed += run_saves("zstd stall");
	failed += test_reconnect_forgets();
	if (failed) {
		fprintf(stderr, "test-libckpt-stall: %d test(s) failed\n", failed);
		return 1;
	}
	printf("test-libckpt-stall: ok\n");
	return 0;
}
