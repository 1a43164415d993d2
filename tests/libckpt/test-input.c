/* SPDX-License-Identifier: MIT */
/*
 * What libckpt refuses at the call, before anything reaches ckptd: step
 * numbers above CKPT_STEP_MAX and tensor names outside the character set
 * (FORMAT.md, "Step numbers", "Tensor names"); and that a refused HELLO
 * reaches the caller with ckptd's own reason (ckpt_options.error).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake.h"

#define SLOT_BYTES (256u << 10)
#define WORLD_REASON "job job-1: rank 1 says world size 4, connected ranks say 2"

static ckpt_options base_opts(const char *path, char *err, size_t errlen)
{
	ckpt_options o = {
		.struct_size = sizeof(ckpt_options),
		.socket_path = path,
		.job = "job-1",
		.rank = 1,
		.world_size = 4,
		.max_save_bytes = 64 << 10,
		.connect_timeout_ms = 2000,
		.error = err,
		.error_bytes = errlen,
	};
	return o;
}

/* ---- the fake daemons ------------------------------------------------ */

/* Reads the HELLO, then refuses it as ckptd refuses a world-size mismatch. */
static int serve_refuse_world(int lfd, void *arg)
{
	struct ckpt_msg m;
	int cfd = fake_accept(lfd, 5000);

	(void)arg;
	if (cfd < 0 || fake_recv(cfd, &m, 5000) < 0 || m.type != CKPT_MSG_HELLO)
		return 1;
	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_ERROR;
	m.seq = 1;
	m.u.error.code = -CKPT_E_REFUSED;
	snprintf(m.u.error.message, sizeof(m.u.error.message), "%s", WORLD_REASON);
	if (fake_send(cfd, &m, NULL, 0) < 0)
		return 1;
	close(cfd);
	return 0;
}

/* Refuses at once, before the HELLO is read (as ckptd does at accept:
 * credentials, max_clients), and closes. */
static int serve_refuse_at_accept(int lfd, void *arg)
{
	struct ckpt_msg m;
	int cfd = fake_accept(lfd, 5000);

	(void)arg;
	if (cfd < 0)
		return 1;
	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_ERROR;
	m.u.error.code = -CKPT_E_REFUSED;
	snprintf(m.u.error.message, sizeof(m.u.error.message),
		 "ckptd serves at most 3 connections (max_clients)");
	if (fake_send(cfd, &m, NULL, 0) < 0)
		return 1;
	close(cfd);
	return 0;
}

/* Accepts the HELLO; anything the client sends after it but BYE is a
 * failure: every refusal under test happens inside libckpt. */
static int serve_accept(int lfd, void *arg)
{
	struct ckpt_msg m;
	void *base;
	int cfd = fake_accept(lfd, 5000);

	(void)arg;
	if (cfd < 0 || fake_hello(cfd, 2, SLOT_BYTES, 0, &base) < 0)
		return 1;
	for (;;) {
		if (fake_recv(cfd, &m, 10000) < 0)
			return 0; /* closed */
		if (m.type == CKPT_MSG_BYE)
			return 0;
		fprintf(stderr, "fake ckptd: unexpected %s (step %llu)\n",
			ckpt_msg_type_name(m.type), (unsigned long long)m.u.step.step);
		return 1;
	}
}

/* ---- the tests ----------------------------------------------------------- */

static int test_refusal_reason(void)
{
	struct fake f;
	char err[256] = "x";
	ckpt_ctx *ctx = NULL;
	ckpt_options o;
	int r;

	CHECK(fake_start(&f, serve_refuse_world, NULL) == 0);
	o = base_opts(f.path, err, sizeof(err));
	r = ckpt_connect(&o, &ctx);
	CHECK_EQ(fake_stop(&f, 5000), 0);
	CHECK_EQ(r, -CKPT_E_REFUSED);
	CHECK(ctx == NULL);
	if (strcmp(err, WORLD_REASON) != 0) {
		fprintf(stderr, "refusal reason: \"%s\"\n", err);
		return 1;
	}

	CHECK(fake_start(&f, serve_refuse_at_accept, NULL) == 0);
	/* The ERROR and the close may come before the HELLO goes out. */
	err[0] = 'x';
	r = ckpt_connect(&o, &ctx);
	CHECK_EQ(fake_stop(&f, 5000), 0);
	CHECK_EQ(r, -CKPT_E_REFUSED);
	if (!strstr(err, "max_clients")) {
		fprintf(stderr, "refusal at accept: \"%s\"\n", err);
		return 1;
	}

	/* Refused by libckpt itself: the reason says what is wrong. */
	o = base_opts(f.path, err, sizeof(err));
	o.rank = 4;
	CHECK_EQ(ckpt_connect(&o, &ctx), -EINVAL);
	CHECK(strstr(err, "rank 4") && strstr(err, "world size 4"));
	o = base_opts(f.path, err, sizeof(err));
	o.job = "bad/\xff";
	CHECK_EQ(ckpt_connect(&o, &ctx), -CKPT_E_BAD_NAME);
	CHECK(strstr(err, "bad/\\xff") != NULL);
	/* A buffer too small is cut, still terminated. */
	o = base_opts(f.path, err, 8);
	o.job = "bad/\xff";
	memset(err, 'x', sizeof(err));
	CHECK_EQ(ckpt_connect(&o, &ctx), -CKPT_E_BAD_NAME);
	CHECK_EQ(strlen(err), 7);
	return 0;
}

static int add_named(ckpt_save *s, const char *name)
{
	static const uint8_t data[16];
	ckpt_tensor_desc d = { .name = name, .dtype = CKPT_DTYPE_U8, .ndim = 1,
			       .global_shape = { 16 }, .shape = { 16 } };

	return ckpt_save_add(s, &d, data);
}

static int test_steps_and_names(void)
{
	struct fake f;
	char err[256];
	ckpt_ctx *ctx = NULL;
	ckpt_save *s = NULL;
	ckpt_restore *rs = NULL;
	ckpt_options o;
	void *dst;

	CHECK(fake_start(&f, serve_accept, NULL) == 0);
	o = base_opts(f.path, err, sizeof(err));
	CHECK_EQ(ckpt_connect(&o, &ctx), 0);
	CHECK_EQ(err[0], '\0');

	/* Step numbers end where ten digits do. */
	CHECK_EQ(ckpt_save_begin(ctx, CKPT_STEP_MAX + 1, &s), -ERANGE);
	CHECK_EQ(ckpt_save_begin(ctx, UINT64_MAX - 1, &s), -ERANGE);
	CHECK(s == NULL);
	CHECK_EQ(ckpt_restore_open(ctx, CKPT_STEP_MAX + 1, 0, &rs), -ERANGE);
	CHECK(rs == NULL);
	{
		ckpt_status st;

		CHECK_EQ(ckpt_wait(ctx, CKPT_STEP_MAX + 1, 100, &st), -ERANGE);
		CHECK_EQ(ckpt_poll(ctx, CKPT_STEP_MAX + 1, &st), -ERANGE);
	}
	CHECK_EQ(ckpt_save_begin(ctx, CKPT_STEP_MAX, &s), 0);

	/* Names: refused at the call, with the tensor named; the handle
	 * stays usable. */
	static const char *const bad[] = {
		"w\xff", "\xc3", "over\xc0\xaflong", "sur\xed\xa0\x80rogate", "big\xf4\x90\x80\x80",
		"tab\t", "del\x7f", "a/b", "..", "",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int r = add_named(s, bad[i]);

		if (r != -CKPT_E_BAD_NAME) {
			fprintf(stderr, "name %zu accepted (%d)\n", i, r);
			return 1;
		}
		CHECK(strstr(ckpt_save_error(s), "tensor name") != NULL);
		CHECK(strstr(ckpt_save_error(s), "step 9999999999") != NULL);
	}
	CHECK_EQ(add_named(s, "w\xff"), -CKPT_E_BAD_NAME);
	if (!strstr(ckpt_save_error(s), "\"w\\xff\"") ||
	    !strstr(ckpt_save_error(s), "not valid UTF-8")) {
		fprintf(stderr, "ckpt_save_error: \"%s\"\n", ckpt_save_error(s));
		return 1;
	}
	{
		ckpt_tensor_desc d = { .name = "r\xe9sum\xe9", .dtype = CKPT_DTYPE_U8, .ndim = 1,
				       .global_shape = { 16 }, .shape = { 16 } };
		CHECK_EQ(ckpt_save_reserve(s, &d, &dst), -CKPT_E_BAD_NAME);
	}
	/* Valid UTF-8, including 4-byte sequences, is a name. */
	CHECK_EQ(add_named(s, "gr\xc3\xb6\xc3\x9f" "e.\xe2\x88\x87.\xf0\x9f\x98\x80"), 0);
	CHECK_EQ(ckpt_save_error(s)[0], '\0');
	CHECK_EQ(add_named(s, "layer0.weight"), 0);
	ckpt_save_abort(s);
	CHECK(ckpt_save_error(NULL) != NULL);

	ckpt_close(ctx);
	CHECK_EQ(fake_stop(&f, 5000), 0);
	return 0;
}

int main(void)
{
	int r = test_refusal_reason() || test_steps_and_names();

	if (!r)
		printf("ok\n");
	return r ? 1 : 0;
}
