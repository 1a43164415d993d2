/* SPDX-License-Identifier: MIT */
/* ckpt_connect without a daemon, and with options it must refuse. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fake.h"

static ckpt_options base_opts(const char *path)
{
	ckpt_options o = {
		.struct_size = sizeof(ckpt_options),
		.socket_path = path,
		.job = "job-1",
		.rank = 0,
		.world_size = 2,
		.max_save_bytes = 1 << 20,
		.connect_timeout_ms = 300,
	};
	return o;
}

static int test_bad_options(const char *path)
{
	ckpt_ctx *ctx = (ckpt_ctx *)0x1;
	ckpt_options o;

	o = base_opts(path);
	o.struct_size = 4;
	CHECK_EQ(ckpt_connect(&o, &ctx), -EINVAL);
	o = base_opts(path);
	o.job = "../etc";
	CHECK_EQ(ckpt_connect(&o, &ctx), -CKPT_E_BAD_NAME);
	o.job = ".hidden";
	CHECK_EQ(ckpt_connect(&o, &ctx), -CKPT_E_BAD_NAME);
	o.job = "";
	CHECK_EQ(ckpt_connect(&o, &ctx), -CKPT_E_BAD_NAME);
	o.job = NULL;
	CHECK_EQ(ckpt_connect(&o, &ctx), -CKPT_E_BAD_NAME);
	o = base_opts(path);
	o.rank = 2;
	CHECK_EQ(ckpt_connect(&o, &ctx), -EINVAL);
	o = base_opts(path);
	o.world_size = 0;
	o.rank = 0;
	CHECK_EQ(ckpt_connect(&o, &ctx), -EINVAL);
	o = base_opts(path);
	o.max_save_bytes = 0;
	CHECK_EQ(ckpt_connect(&o, &ctx), -EINVAL);
	CHECK_EQ(ckpt_connect(NULL, &ctx), -EINVAL);
	o = base_opts(path);
	CHECK_EQ(ckpt_connect(&o, NULL), -EINVAL);
	{
		char longpath[200];

		memset(longpath, 'a', sizeof(longpath) - 1);
		longpath[sizeof(longpath) - 1] = '\0';
		o.socket_path = longpath;
		CHECK_EQ(ckpt_connect(&o, &ctx), -ENAMETOOLONG);
	}
	/* *out untouched on failure. */
	CHECK(ctx == (ckpt_ctx *)0x1);

	/* NULL everywhere a handle goes. */
	ckpt_close(NULL);
	ckpt_save_abort(NULL);
	ckpt_restore_close(NULL);
	CHECK_EQ(ckpt_reconnect(NULL), -EINVAL);
	CHECK_EQ(ckpt_save_begin(NULL, 1, NULL), -EINVAL);
	CHECK_EQ(ckpt_save_finish(NULL), -EINVAL);
	CHECK_EQ(ckpt_slot_count(NULL), 0);
	CHECK(ckpt_arena(NULL, NULL) == NULL);
	return 0;
}

/* No socket file: retried until the timeout, then a clear error. */
static int test_no_daemon(const char *path)
{
	ckpt_options o = base_opts(path);
	ckpt_ctx *ctx = NULL;
	int64_t t0 = test_now_ms(), dt;
	int fds = count_fds();
	int r;

	r = ckpt_connect(&o, &ctx);
	dt = test_now_ms() - t0;
	CHECK_EQ(r, -ENOENT);
	CHECK(ctx == NULL);
	CHECK(dt >= 250 && dt < 2000);
	CHECK(strstr(ckpt_strerror(r), "No such file") != NULL);
	CHECK_EQ(count_fds(), fds);
	return 0;
}

/* A socket file nobody listens on: ECONNREFUSED, also within the timeout. */
static int test_refused(const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	ckpt_options o = base_opts(path);
	ckpt_ctx *ctx = NULL;
	int64_t t0, dt;
	int fd, fds, r;

	fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
	CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0);
	close(fd); /* bound, never listening: the file stays, connects are refused */
	fds = count_fds();
	t0 = test_now_ms();
	r = ckpt_connect(&o, &ctx);
	dt = test_now_ms() - t0;
	unlink(path);
	CHECK_EQ(r, -ECONNREFUSED);
	CHECK(dt >= 250 && dt < 2000);
	CHECK_EQ(count_fds(), fds);
	return 0;
}

int main(void)
{
	char dir[] = "/tmp/ckpt-connect-XXXXXX";
	char path[128];
	int r;

	if (!mkdtemp(dir))
		return 77;
	snprintf(path, sizeof(path), "%s/ckptd.sock", dir);
	r = test_bad_options(path) || test_no_daemon(path) || test_refused(path);
	rmdir(dir);
	if (!r)
		printf("ok\n");
	return r ? 1 : 0;
}
