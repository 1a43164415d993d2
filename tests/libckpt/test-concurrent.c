/* SPDX-License-Identifier: MIT */
/*
 * A call that waits for ckptd does not shut out the context's other
 * threads: while one thread's restore (and then a listing) waits on a slow
 * fake ckptd, another thread's ckpt_poll / ckpt_next_event keep returning
 * at once, the outcome ckptd sends meanwhile reaches them (and makes
 * ckpt_fd readable), and a third thread's save is answered while the
 * restore is still waiting: every reply reaches the call that asked.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake.h"

#define SLOT_BYTES (256u << 10)
#define RESTORE_DELAY_MS 2000
#define COMMIT_AFTER_MS 400  /* into the restore's wait */
#define LIST_DELAY_MS 1000
/* What "at once" means for a call that only looks at memory and the
 * socket; the slow calls take seconds. */
#define PROMPT_MS 500

static int send_status(int cfd, uint64_t step, uint32_t state, uint32_t slot)
{
	struct ckpt_msg m = { .type = CKPT_MSG_STATUS };

	m.u.status.step = step;
	m.u.status.state = state;
	m.u.status.slot_freed = slot;
	return fake_send(cfd, &m, NULL, 0);
}

static int put_restore(uint8_t *slot, struct ckpt_msg *r)
{
	struct ckpt_tensor t = { .name = "w", .dtype = CKPT_DTYPE_U8, .ndim = 1,
				 .global_shape = { 16 }, .shape = { 16 }, .nbytes = 16 };
	ssize_t n;

	memset(slot, 0x5a, 16);
	n = ckpt_table_encode(&t, 1, slot + CKPT_ALIGN, SLOT_BYTES - CKPT_ALIGN);
	if (n <= 0)
		return -1;
	r->u.restore_ok.data_bytes = CKPT_ALIGN;
	r->u.restore_ok.table_offset = CKPT_ALIGN;
	r->u.restore_ok.table_bytes = (uint64_t)n;
	return 0;
}

/*
 * Answers SAVE at once (and frees its slot), RESTORE after
 * RESTORE_DELAY_MS with step 1's COMMITTED sent COMMIT_AFTER_MS into that
 * wait, LIST after LIST_DELAY_MS.
 */
static int serve(int lfd, void *arg)
{
	struct ckpt_msg m, restore_req = { 0 }, list_req = { 0 };
	int64_t restore_due = -1, commit_due = -1, list_due = -1;
	uint8_t *arena;
	int cfd, releases = 0;

	(void)arg;
	cfd = fake_accept(lfd, 5000);
	if (cfd < 0 || fake_hello(cfd, 3, SLOT_BYTES, 0, (void **)&arena) < 0)
		return 2;
	for (;;) {
		int64_t now = test_now_ms(), next = now + 10000;
		struct ckpt_msg r;

		if (commit_due >= 0 && now >= commit_due) {
			send_status(cfd, 1, CKPT_STATE_COMMITTED, CKPT_NO_SLOT);
			commit_due = -1;
		}
		if (restore_due >= 0 && now >= restore_due) {
			memset(&r, 0, sizeof(r));
			r.type = CKPT_MSG_RESTORE_OK;
			r.seq = restore_req.seq;
			r.u.restore_ok.step = 1;
			r.u.restore_ok.slot = restore_req.u.restore.slot;
			if (put_restore(arena + (size_t)r.u.restore_ok.slot * SLOT_BYTES, &r) < 0)
				return 3;
			fake_send(cfd, &r, NULL, 0);
			restore_due = -1;
		}
		if (list_due >= 0 && now >= list_due) {
			memset(&r, 0, sizeof(r));
			r.type = CKPT_MSG_LIST_OK;
			r.seq = list_req.seq;
			r.u.list_ok.total = 1;
			r.u.list_ok.count = 1;
			r.u.list_ok.steps[0] = 1;
			fake_send(cfd, &r, NULL, 0);
			list_due = -1;
		}
		if (commit_due >= 0 && commit_due < next)
			next = commit_due;
		if (restore_due >= 0 && restore_due < next)
			next = restore_due;
		if (list_due >= 0 && list_due < next)
			next = list_due;
		{
			struct pollfd p = { .fd = cfd, .events = POLLIN };
			int left = (int)(next - test_now_ms());

			if (poll(&p, 1, left < 0 ? 0 : left) == 0)
				continue;
		}
		if (fake_recv(cfd, &m, 0) < 0)
			break;
		memset(&r, 0, sizeof(r));
		r.seq = m.seq;
		switch (m.type) {
		case CKPT_MSG_SAVE:
			r.type = CKPT_MSG_SAVE_OK;
			r.u.save_ok.step = m.u.save.step;
			r.u.save_ok.slot = m.u.save.slot;
			fake_send(cfd, &r, NULL, 0);
			send_status(cfd, m.u.save.step, CKPT_STATE_DURABLE, m.u.save.slot);
			break;
		case CKPT_MSG_RESTORE:
			restore_req = m;
			restore_due = test_now_ms() + RESTORE_DELAY_MS;
			commit_due = test_now_ms() + COMMIT_AFTER_MS;
			break;
		case CKPT_MSG_LIST:
			list_req = m;
			list_due = test_now_ms() + LIST_DELAY_MS;
			break;
		case CKPT_MSG_RELEASE:
			releases++;
			break;
		case CKPT_MSG_BYE:
			return releases == 1 ? 0 : 4;
		default:
			fprintf(stderr, "fake ckptd: unexpected message %u\n", m.type);
			return 5;
		}
	}
	return 6;
}

struct watcher {
	ckpt_ctx *ctx;
	atomic_bool stop;
	atomic_llong max_call_ms;   /* the longest ckpt_poll / ckpt_next_event */
	atomic_llong committed_at;  /* when step 1 was seen committed, or 0 */
	/* when ckpt_fd was first readable for the COMMITTED sent during
	 * the restore (earlier news, such as step 1's DURABLE, ignored) */
	atomic_llong fd_news_at;
	atomic_int calls;
	_Atomic int64_t start;
};

static void *watch(void *arg)
{
	struct watcher *w = arg;
	struct pollfd p = { .fd = ckpt_fd(w->ctx), .events = POLLIN };

	while (!atomic_load(&w->stop)) {
		ckpt_status st;
		int64_t t0, dt;

		/* As an event loop would: wait on ckpt_fd, then look. */
		if (poll(&p, 1, 20) == 1 && !atomic_load(&w->fd_news_at) &&
		    test_now_ms() - w->start >= COMMIT_AFTER_MS - 50)
			atomic_store(&w->fd_news_at, test_now_ms());
		t0 = test_now_ms();
		(void)ckpt_poll(w->ctx, 1, &st);
		while (ckpt_next_event(w->ctx, &st) == 1)
			;
		dt = test_now_ms() - t0;
		if (dt > atomic_load(&w->max_call_ms))
			atomic_store(&w->max_call_ms, dt);
		atomic_fetch_add(&w->calls, 1);
		if (ckpt_poll(w->ctx, 1, &st) == 0 && st.state == CKPT_STATE_COMMITTED &&
		    !atomic_load(&w->committed_at))
			atomic_store(&w->committed_at, test_now_ms());
	}
	return NULL;
}

static int save_step(ckpt_ctx *ctx, uint64_t step)
{
	ckpt_tensor_desc d = { .name = "w", .dtype = CKPT_DTYPE_U8, .ndim = 1,
			       .global_shape = { 64 }, .shape = { 64 } };
	uint8_t buf[64] = { 0 };
	ckpt_save *s = NULL;
	int r;

	r = ckpt_save_begin(ctx, step, &s);
	if (r < 0)
		return r;
	r = ckpt_save_add(s, &d, buf);
	if (r < 0) {
		ckpt_save_abort(s);
		return r;
	}
	return ckpt_save_finish(s);
}

struct saver {
	ckpt_ctx *ctx;
	int result;
	int64_t took_ms;
};

static void *save_later(void *arg)
{
	struct saver *s = arg;
	int64_t t0;

	usleep(200 * 1000); /* the restore is waiting by now */
	t0 = test_now_ms();
	s->result = save_step(s->ctx, 2);
	s->took_ms = test_now_ms() - t0;
	return NULL;
}

int main(void)
{
	struct fake f;
	ckpt_options o = { .struct_size = sizeof(o), .job = "slow-restore", .world_size = 1,
			   .max_save_bytes = 64 << 10, .connect_timeout_ms = 5000 };
	struct watcher w = { 0 };
	struct saver sv = { 0 };
	pthread_t wt, st;
	ckpt_ctx *ctx = NULL;
	ckpt_restore *rs = NULL;
	ckpt_status status;
	uint64_t steps[2];
	int64_t t0, restore_ms, list_ms;
	int fds = count_fds();

	CHECK(fake_start(&f, serve, NULL) == 0);
	o.socket_path = f.path;
	CHECK_EQ(ckpt_connect(&o, &ctx), 0);
	CHECK_EQ(save_step(ctx, 1), 0);
	CHECK_EQ(ckpt_poll(ctx, 1, &status), 0);
	CHECK(status.state == CKPT_STATE_PENDING || status.state == CKPT_STATE_DURABLE);
	while (ckpt_next_event(ctx, &status) == 1)
		;

	w.ctx = ctx;
	sv.ctx = ctx;
	t0 = test_now_ms();
	w.start = t0;
	CHECK(pthread_create(&wt, NULL, watch, &w) == 0);
	CHECK(pthread_create(&st, NULL, save_later, &sv) == 0);
	CHECK_EQ(ckpt_restore_open(ctx, CKPT_STEP_LATEST, 0, &rs), 0);
	restore_ms = test_now_ms() - t0;
	CHECK(pthread_join(st, NULL) == 0);
	CHECK_EQ(ckpt_restore_step(rs), 1);
	CHECK_EQ(ckpt_restore_tensor_count(rs), 1);
	ckpt_restore_close(rs);

	t0 = test_now_ms();
	CHECK_EQ(ckpt_list(ctx, steps, 2), 1);
	list_ms = test_now_ms() - t0;
	CHECK_EQ(steps[0], 1);
	atomic_store(&w.stop, true);
	CHECK(pthread_join(wt, NULL) == 0);

	fprintf(stderr, "restore %lld ms, list %lld ms, longest poll %lld ms over %d calls, "
		"save during restore %lld ms, committed seen after %lld ms, fd readable after "
		"%lld ms\n", (long long)restore_ms, (long long)list_ms,
		(long long)atomic_load(&w.max_call_ms), atomic_load(&w.calls),
		(long long)sv.took_ms, (long long)(atomic_load(&w.committed_at) - w.start),
		(long long)(atomic_load(&w.fd_news_at) - w.start));
	CHECK(restore_ms >= RESTORE_DELAY_MS - 100);
	CHECK(list_ms >= LIST_DELAY_MS - 100);
	/* The point: nobody waited behind the slow calls. */
	CHECK(atomic_load(&w.max_call_ms) < PROMPT_MS);
	CHECK(atomic_load(&w.calls) > 20);
	/* The outcome ckptd sent during the restore was seen during it. */
	CHECK(atomic_load(&w.committed_at) != 0);
	CHECK(atomic_load(&w.committed_at) - w.start < restore_ms);
	CHECK(atomic_load(&w.fd_news_at) != 0);
	CHECK(atomic_load(&w.fd_news_at) - w.start < restore_ms);
	/* A save's reply went to the saver, not to the waiting restore. */
	CHECK_EQ(sv.result, 0);
	CHECK(sv.took_ms < PROMPT_MS * 2);
	CHECK_EQ(ckpt_poll(ctx, 2, &status), 0);
	CHECK(status.state == CKPT_STATE_PENDING || status.state == CKPT_STATE_DURABLE);

	ckpt_close(ctx);
	CHECK_EQ(fake_stop(&f, 5000), 0);
	CHECK_EQ(count_fds(), fds);
	printf("test-libckpt-concurrent: ok\n");
	return 0;
}
