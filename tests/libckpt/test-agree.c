/* SPDX-License-Identifier: MIT */
/*
 * CKPT_RESTORE_AGREE against fake ckptds: with a features notice that
 * lists "agree" the request goes out as RESTORE_AGREED and ckptd's answer
 * comes back; without one (an older ckptd) the call fails with
 * -EOPNOTSUPP and nothing is sent but the round trip that settles the
 * features, not even when the restore is the first call after connect.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fake.h"

#define SLOT_BYTES (512u << 10)

struct serve_opts {
	const char *notice; /* features notice tokens, or NULL for none */
};

static int serve_one(int lfd, void *arg)
{
	const struct serve_opts *o = arg;
	struct ckpt_msg m, r;
	int cfd = fake_accept(lfd, 5000);

	if (cfd < 0)
		return 2;
	if (fake_hello(cfd, 1, SLOT_BYTES, 0, NULL) < 0)
		return 3;
	if (o->notice) {
		ckpt_msg_features_notice(&m, 0);
		snprintf(m.u.status.reason, sizeof(m.u.status.reason), "%s", o->notice);
		if (fake_send(cfd, &m, NULL, 0) < 0)
			return 4;
	}
	for (;;) {
		if (fake_recv(cfd, &m, 10000) < 0)
			return 0; /* the client went away */
		memset(&r, 0, sizeof(r));
		r.seq = m.seq;
		switch (m.type) {
		case CKPT_MSG_QUERY:
			r.type = CKPT_MSG_STATUS;
			r.u.status.step = m.u.step.step;
			r.u.status.slot_freed = CKPT_NO_SLOT;
			break;
		case CKPT_MSG_RESTORE_AGREED:
			if (!o->notice || !strstr(o->notice, "agree") ||
			    m.u.restore.step != CKPT_NO_STEP || m.u.restore.flags != 0)
				return 5;
			r.type = CKPT_MSG_ERROR;
			r.u.error.code = -CKPT_E_NO_CHECKPOINT;
			snprintf(r.u.error.message, sizeof(r.u.error.message), "nothing");
			break;
		case CKPT_MSG_BYE:
			close(cfd);
			return 0;
		default:
			fprintf(stderr, "fake ckptd: unexpected %s\n", ckpt_msg_type_name(m.type));
			return 6;
		}
		if (fake_send(cfd, &r, NULL, 0) < 0)
			return 7;
	}
}

static int run(const char *notice, int want)
{
	struct serve_opts so = { .notice = notice };
	struct fake f;
	ckpt_options o = { .struct_size = sizeof(o), .job = "agree-job", .world_size = 1,
			   .max_save_bytes = 64 << 10, .connect_timeout_ms = 5000 };
	ckpt_ctx *ctx = NULL;
	ckpt_restore *res = NULL;

	CHECK(fake_start(&f, serve_one, &so) == 0);
	o.socket_path = f.path;
	CHECK_EQ(ckpt_connect(&o, &ctx), 0);
	CHECK_EQ(ckpt_restore_open(ctx, CKPT_STEP_LATEST, CKPT_RESTORE_AGREE, &res), want);
	CHECK(res == NULL);
	/* Unknown flags are refused before anything is sent. */
	CHECK_EQ(ckpt_restore_open(ctx, CKPT_STEP_LATEST, 1u << 7, &res), -EINVAL);
	ckpt_close(ctx);
	CHECK_EQ(fake_stop(&f, 15000), 0);
	return 0;
}

int main(void)
{
	if (run("stall agree", -CKPT_E_NO_CHECKPOINT) || run("agree", -CKPT_E_NO_CHECKPOINT) ||
	    run("stall", -EOPNOTSUPP) || run(NULL, -EOPNOTSUPP))
		return 1;
	printf("test_agree: ok\n");
	return 0;
}
