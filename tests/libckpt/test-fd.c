/* SPDX-License-Identifier: MIT */
/*
 * ckpt_fd() is one descriptor for the life of the context: readable on
 * news until ckpt_next_event() has popped it all (ckpt_wait and ckpt_poll
 * leave it to the event consumer), readable when ckptd goes away, still
 * the same valid descriptor while disconnected and after a reconnect, and
 * readable again for the new connection's news.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fake.h"

#define SLOT_BYTES (64u << 10)

static int send_committed(int cfd, uint64_t step)
{
	struct ckpt_msg m = { .type = CKPT_MSG_STATUS };

	m.u.status.step = step;
	m.u.status.state = CKPT_STATE_COMMITTED;
	m.u.status.slot_freed = CKPT_NO_SLOT;
	return fake_send(cfd, &m, NULL, 0);
}

/* Two connections; each sends one outcome, the first then hangs up. */
static int serve(int lfd, void *arg)
{
	struct ckpt_msg m;
	int cfd;

	(void)arg;
	for (uint64_t step = 5; step <= 6; step++) {
		cfd = fake_accept(lfd, 5000);
		if (cfd < 0 || fake_hello(cfd, 1, SLOT_BYTES, 0, NULL) < 0)
			return 2;
		usleep(100 * 1000);
		if (send_committed(cfd, step) < 0)
			return 3;
		if (step == 6)
			break;
		usleep(300 * 1000);
		close(cfd);
	}
	while (fake_recv(cfd, &m, 5000) == 0)
		if (m.type == CKPT_MSG_BYE)
			return 0;
	return 5;
}

static int readable(int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r = poll(&p, 1, timeout_ms);

	if (r == 1 && (p.revents & POLLNVAL))
		return -1;
	return r;
}

int main(void)
{
	struct fake f;
	ckpt_options o = { .struct_size = sizeof(o), .job = "fd-job", .world_size = 1,
			   .max_save_bytes = 4096, .connect_timeout_ms = 5000 };
	ckpt_ctx *ctx = NULL;
	ckpt_status st;
	int fds = count_fds(), fd0;

	CHECK(fake_start(&f, serve, NULL) == 0);
	o.socket_path = f.path;
	CHECK_EQ(ckpt_connect(&o, &ctx), 0);
	fd0 = ckpt_fd(ctx);
	CHECK(fd0 >= 0);

	/* News: readable, until taken in. */
	CHECK_EQ(readable(fd0, 3000), 1);
	CHECK_EQ(ckpt_next_event(ctx, &st), 1);
	CHECK_EQ(st.step, 5);
	CHECK_EQ(ckpt_next_event(ctx, &st), 0);
	CHECK_EQ(readable(fd0, 0), 0);

	/* ckptd hangs up: readable; ckpt_poll finds the connection gone.
	 * Still the same descriptor, and valid. */
	CHECK_EQ(readable(fd0, 3000), 1);
	CHECK_EQ(ckpt_poll(ctx, 5, &st), 0);
	CHECK_EQ(st.state, CKPT_STATE_COMMITTED);
	CHECK(ckpt_arena(ctx, NULL) == NULL);
	CHECK_EQ(ckpt_fd(ctx), fd0);
	CHECK(fcntl(fd0, F_GETFD) >= 0);
	/* The drop is news until the event consumer has seen everything. */
	CHECK_EQ(ckpt_wait(ctx, 77, 100, &st), -CKPT_E_DISCONNECTED);
	CHECK_EQ(readable(fd0, 0), 1);
	CHECK_EQ(ckpt_next_event(ctx, &st), 0);
	CHECK_EQ(readable(fd0, 0), 0);

	/* Reconnected: same descriptor, and it carries the new
	 * connection's news. */
	CHECK_EQ(ckpt_reconnect(ctx), 0);
	CHECK_EQ(ckpt_fd(ctx), fd0);
	CHECK_EQ(readable(fd0, 3000), 1);
	CHECK_EQ(ckpt_next_event(ctx, &st), 1);
	CHECK_EQ(st.step, 6);
	CHECK_EQ(st.state, CKPT_STATE_COMMITTED);
	CHECK_EQ(readable(fd0, 0), 0);

	ckpt_close(ctx);
	CHECK_EQ(fake_stop(&f, 5000), 0);
	CHECK_EQ(count_fds(), fds);
	printf("test-libckpt-fd: ok\n");
	return 0;
}
