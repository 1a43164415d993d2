/* SPDX-License-Identifier: MIT */
/*
 * A forked child's ckpt_close() leaves the parent's connection alone: no
 * BYE on the shared socket (ckptd would end the parent's connection), no
 * message read off it. The child's other calls fail without touching it.
 * Then the parent saves and waits for the commit on the same connection.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fake.h"

#define SLOT_BYTES (64u << 10)

static int send_status(int cfd, uint64_t step, uint32_t state, uint32_t slot)
{
	struct ckpt_msg m = { .type = CKPT_MSG_STATUS };

	m.u.status.step = step;
	m.u.status.state = state;
	m.u.status.slot_freed = slot;
	return fake_send(cfd, &m, NULL, 0);
}

/* Like ckptd: a BYE ends the connection. The first message must be the
 * parent's SAVE. */
static int serve(int lfd, void *arg)
{
	struct ckpt_msg m, r;
	int cfd;

	(void)arg;
	cfd = fake_accept(lfd, 5000);
	if (cfd < 0 || fake_hello(cfd, 1, SLOT_BYTES, 0, NULL) < 0)
		return 2;
	if (fake_recv(cfd, &m, 10000) < 0)
		return 3;
	if (m.type != CKPT_MSG_SAVE) {
		fprintf(stderr, "fake ckptd: got message %u before the parent's SAVE%s\n", m.type,
			m.type == CKPT_MSG_BYE ? " (the child's BYE)" : "");
		close(cfd);
		return 4;
	}
	memset(&r, 0, sizeof(r));
	r.type = CKPT_MSG_SAVE_OK;
	r.seq = m.seq;
	r.u.save_ok.step = m.u.save.step;
	r.u.save_ok.slot = m.u.save.slot;
	fake_send(cfd, &r, NULL, 0);
	send_status(cfd, m.u.save.step, CKPT_STATE_DURABLE, m.u.save.slot);
	send_status(cfd, m.u.save.step, CKPT_STATE_COMMITTED, CKPT_NO_SLOT);
	if (fake_recv(cfd, &m, 10000) < 0 || m.type != CKPT_MSG_BYE)
		return 5;
	return 0;
}

static int child(ckpt_ctx *ctx)
{
	ckpt_status st;
	ckpt_save *s = NULL;
	int r = 0;

	/* Nothing of the parent's connection is read or sent. */
	if (ckpt_poll(ctx, 1, &st) != -CKPT_E_DISCONNECTED ||
	    ckpt_next_event(ctx, &st) != -CKPT_E_DISCONNECTED ||
	    ckpt_save_begin(ctx, 1, &s) != -CKPT_E_DISCONNECTED)
		r = 10;
	ckpt_close(ctx);
	return r;
}

int main(void)
{
	struct fake f;
	ckpt_options o = { .struct_size = sizeof(o), .job = "fork-job", .world_size = 1,
			   .max_save_bytes = 4096, .connect_timeout_ms = 5000 };
	ckpt_tensor_desc d = { .name = "w", .dtype = CKPT_DTYPE_U8, .ndim = 1,
			       .global_shape = { 32 }, .shape = { 32 } };
	uint8_t buf[32] = { 1, 2, 3 };
	ckpt_ctx *ctx = NULL;
	ckpt_save *s = NULL;
	ckpt_status st;
	int status = 0;
	pid_t pid;

	CHECK(fake_start(&f, serve, NULL) == 0);
	o.socket_path = f.path;
	CHECK_EQ(ckpt_connect(&o, &ctx), 0);

	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0)
		_exit(child(ctx));
	CHECK_EQ(waitpid(pid, &status, 0), pid);

	/* The child is gone, its copy closed: the connection still works. */
	CHECK_EQ(ckpt_save_begin(ctx, 1, &s), 0);
	CHECK_EQ(ckpt_save_add(s, &d, buf), 0);
	CHECK_EQ(ckpt_save_finish(s), 0);
	CHECK_EQ(ckpt_wait(ctx, 1, 5000, &st), 0);
	CHECK_EQ(st.state, CKPT_STATE_COMMITTED);
	CHECK(WIFEXITED(status));
	CHECK_EQ(WEXITSTATUS(status), 0);
	ckpt_close(ctx);
	CHECK_EQ(fake_stop(&f, 5000), 0);
	printf("test-libckpt-fork: ok\n");
	return 0;
}
