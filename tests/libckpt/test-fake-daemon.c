/* SPDX-License-Identifier: MIT */
/*
 * libckpt against a fake ckptd that follows the protocol: slot layout of
 * a save, slot accounting, the skip and block policies, outcomes and
 * events, listing, restore, and an automatic reconnect.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake.h"

#define SLOT_BYTES (512u << 10)

static uint8_t pattern(uint32_t idx, uint64_t k)
{
	return (uint8_t)(idx * 7 + k * 13 + 1);
}

static int send_status(int cfd, uint64_t step, uint32_t state, uint32_t slot)
{
	struct ckpt_msg m = { .type = CKPT_MSG_STATUS };

	m.u.status.step = step;
	m.u.status.state = state;
	m.u.status.slot_freed = slot;
	return fake_send(cfd, &m, NULL, 0);
}

/* What ckptd checks of a SAVE, and more: layout, padding, contents. */
static int check_save(const uint8_t *slot, const struct ckpt_msg_save *s)
{
	struct ckpt_table t;
	char err[256];

	CHECK(s->table_offset % CKPT_ALIGN == 0 && s->data_bytes % CKPT_ALIGN == 0);
	CHECK(s->table_offset >= s->data_bytes);
	CHECK(s->table_offset + s->table_bytes <= SLOT_BYTES);
	CHECK(ckpt_table_decode(slot + s->table_offset, s->table_bytes, &t) == 0);
	if (ckpt_table_check_layout(&t, s->data_bytes, s->blob_offset, s->blob_bytes, err,
				    sizeof(err)) < 0) {
		fprintf(stderr, "fake ckptd: layout: %s\n", err);
		return 1;
	}
	for (uint32_t i = 0; i < t.count; i++) {
		const struct ckpt_tensor *x = &t.tensors[i];
		uint64_t end = x->data_offset + x->nbytes;

		for (uint64_t k = 0; k < x->nbytes; k++)
			CHECK(slot[x->data_offset + k] == pattern(i, k));
		/* Padding up to the next boundary is zeroed. */
		for (uint64_t k = end; k % CKPT_ALIGN; k++)
			CHECK(slot[k] == 0);
	}
	if (s->blob_bytes)
		CHECK(memcmp(slot + s->blob_offset, "rng-state-v2", s->blob_bytes) == 0);
	ckpt_table_free(&t);
	return 0;
}

/* Write a shard the way ckptd would after reading and verifying it. */
static int put_restore(uint8_t *slot, struct ckpt_msg *reply)
{
	struct ckpt_tensor t[2] = {
		{ .name = "layer0.weight", .dtype = CKPT_DTYPE_F32, .ndim = 2,
		  .global_shape = { 4, 10 }, .shape = { 4, 10 }, .data_offset = 0, .nbytes = 160 },
		{ .name = "step", .dtype = CKPT_DTYPE_I64, .ndim = 0, .data_offset = 4096,
		  .nbytes = 8 },
	};
	ssize_t n;

	for (uint32_t i = 0; i < 2; i++)
		for (uint64_t k = 0; k < t[i].nbytes; k++)
			slot[t[i].data_offset + k] = pattern(i, k);
	memcpy(slot + 8192, "blob!", 5);
	n = ckpt_table_encode(t, 2, slot + 3 * 4096, SLOT_BYTES - 3 * 4096);
	CHECK(n > 0);
	reply->u.restore_ok.data_bytes = 3 * 4096;
	reply->u.restore_ok.table_offset = 3 * 4096;
	reply->u.restore_ok.table_bytes = (uint64_t)n;
	reply->u.restore_ok.blob_offset = 8192;
	reply->u.restore_ok.blob_bytes = 5;
	return 0;
}

/* Skip policy, two slots. */
static int serve_skip(int lfd, void *arg)
{
	struct ckpt_msg m, r;
	uint8_t *arena;
	int cfd, saves = 0, skips = 0, releases = 0;
	uint32_t slot_of_1 = CKPT_NO_SLOT, restore_slot = CKPT_NO_SLOT;

	(void)arg;
	cfd = fake_accept(lfd, 5000);
	if (cfd < 0 || fake_hello(cfd, 2, SLOT_BYTES, CKPT_HELLO_F_SKIP_POLICY, (void **)&arena) < 0)
		return 2;
	while (fake_recv(cfd, &m, 10000) == 0) {
		memset(&r, 0, sizeof(r));
		r.seq = m.seq;
		switch (m.type) {
		case CKPT_MSG_SAVE:
			if (check_save(arena + (size_t)m.u.save.slot * SLOT_BYTES, &m.u.save))
				return 3;
			if (m.u.save.step == 1)
				slot_of_1 = m.u.save.slot;
			r.type = CKPT_MSG_SAVE_OK;
			r.u.save_ok.step = m.u.save.step;
			r.u.save_ok.slot = m.u.save.slot;
			fake_send(cfd, &r, NULL, 0);
			saves++;
			break;
		case CKPT_MSG_SKIP:
			if (m.u.step.step != 3)
				return 4;
			skips++;
			/* Step 1 becomes durable (its slot is free) and commits. */
			send_status(cfd, 1, CKPT_STATE_DURABLE, slot_of_1);
			send_status(cfd, 1, CKPT_STATE_COMMITTED, CKPT_NO_SLOT);
			break;
		case CKPT_MSG_LIST:
			r.type = CKPT_MSG_LIST_OK;
			r.u.list_ok.total = 1;
			r.u.list_ok.count = 1;
			r.u.list_ok.steps[0] = 1;
			fake_send(cfd, &r, NULL, 0);
			break;
		case CKPT_MSG_RESTORE:
			if (m.u.restore.step != 5 || m.u.restore.flags != 0)
				return 5;
			restore_slot = m.u.restore.slot;
			r.type = CKPT_MSG_RESTORE_OK;
			r.u.restore_ok.step = 1;
			r.u.restore_ok.slot = m.u.restore.slot;
			r.u.restore_ok.flags = CKPT_RESTORE_OK_F_FELL_BACK;
			snprintf(r.u.restore_ok.warning, sizeof(r.u.restore_ok.warning),
				 "step 5: chunk 3 of rank 0 does not verify; restored step 1");
			if (put_restore(arena + (size_t)restore_slot * SLOT_BYTES, &r))
				return 6;
			fake_send(cfd, &r, NULL, 0);
			break;
		case CKPT_MSG_RELEASE:
			if (m.u.release.slot != restore_slot)
				return 7;
			releases++;
			break;
		case CKPT_MSG_BYE:
			break;
		default:
			return 8;
		}
	}
	/* Saves 1 and 2 sent; 4 refused by libckpt itself (duplicate names). */
	if (saves != 2 || skips != 1 || releases != 1) {
		fprintf(stderr, "fake ckptd: saves %d skips %d releases %d\n", saves, skips,
			releases);
		return 9;
	}
	return 0;
}

static int add_tensors(ckpt_save *s, bool with_blob)
{
	ckpt_tensor_desc w = { .name = "layer0.weight", .dtype = CKPT_DTYPE_BF16, .ndim = 2,
			       .global_shape = { 8, 1000 }, .offset = { 4, 0 },
			       .shape = { 4, 1000 } };
	ckpt_tensor_desc sc = { .name = "step", .dtype = CKPT_DTYPE_I64, .ndim = 0 };
	ckpt_tensor_desc big = { .name = "big", .dtype = CKPT_DTYPE_U8, .ndim = 1,
				 .global_shape = { SLOT_BYTES }, .shape = { SLOT_BYTES } };
	ckpt_tensor_desc bad = sc;
	uint8_t buf[8000];
	void *dst;

	for (uint64_t k = 0; k < sizeof(buf); k++)
		buf[k] = pattern(0, k);
	CHECK_EQ(ckpt_save_add(s, &w, buf), 0);
	CHECK_EQ(ckpt_save_reserve(s, &sc, &dst), 0);
	CHECK(((uintptr_t)dst % CKPT_ALIGN) == 0);
	for (uint64_t k = 0; k < 8; k++)
		((uint8_t *)dst)[k] = pattern(1, k);
	/* Refused up front, without spoiling the save. */
	CHECK_EQ(ckpt_save_add(s, &big, buf), -CKPT_E_TOO_BIG);
	bad.name = "a/b";
	CHECK_EQ(ckpt_save_add(s, &bad, buf), -CKPT_E_BAD_NAME);
	bad.name = "x";
	bad.dtype = 77;
	CHECK_EQ(ckpt_save_add(s, &bad, buf), -EINVAL);
	if (with_blob) {
		CHECK_EQ(ckpt_save_set_blob(s, "first blob, replaced", 20), 0);
		CHECK_EQ(ckpt_save_set_blob(s, "rng-state-v2", 12), 0);
	}
	return 0;
}

static int test_skip_policy(void)
{
	struct fake f;
	ckpt_options o = { .struct_size = sizeof(o), .job = "llama-70b", .rank = 0,
			   .world_size = 1, .max_save_bytes = 256 << 10,
			   .connect_timeout_ms = 2000 };
	ckpt_ctx *ctx = NULL;
	ckpt_save *s1 = NULL, *s2 = NULL;
	ckpt_restore *rs = NULL;
	ckpt_status st;
	ckpt_tensor_desc d;
	uint64_t steps[4] = { 0 }, latest = 0;
	const void *ptr;
	size_t len;
	uint8_t out[160];
	char blob[16];
	int fds = count_fds();
	int states[16], nev = 0;

	CHECK(fake_start(&f, serve_skip, NULL) == 0);
	o.socket_path = f.path;
	CHECK_EQ(ckpt_connect(&o, &ctx), 0);
	CHECK_EQ(ckpt_slot_count(ctx), 2);
	CHECK_EQ(ckpt_slot_bytes(ctx), SLOT_BYTES);
	CHECK(ckpt_arena(ctx, &len) != NULL && len == 2 * SLOT_BYTES);
	CHECK(ckpt_fd(ctx) >= 0);

	/* Two saves in flight fill both slots. */
	CHECK_EQ(ckpt_save_begin(ctx, 1, &s1), 0);
	CHECK(add_tensors(s1, true) == 0);
	CHECK_EQ(ckpt_save_finish(s1), 0);
	CHECK_EQ(ckpt_poll(ctx, 1, &st), 0);
	CHECK_EQ(st.state, CKPT_STATE_PENDING);
	CHECK_EQ(ckpt_save_begin(ctx, 1, &s1), -CKPT_E_STEP_ORDER);
	CHECK_EQ(ckpt_save_begin(ctx, 2, &s2), 0);
	CHECK(add_tensors(s2, false) == 0);
	CHECK_EQ(ckpt_save_finish(s2), 0);

	/* No slot: skipped, reported to ckptd, which then frees step 1's. */
	CHECK_EQ(ckpt_save_begin(ctx, 3, &s1), -CKPT_E_SKIPPED);
	CHECK_EQ(ckpt_poll(ctx, 3, &st), 0);
	CHECK_EQ(st.state, CKPT_STATE_SKIPPED);
	CHECK_EQ(st.error, -CKPT_E_SKIPPED);
	CHECK_EQ(ckpt_wait(ctx, 1, 3000, &st), 0);
	CHECK_EQ(st.state, CKPT_STATE_COMMITTED);
	CHECK_EQ(ckpt_wait(ctx, 2, 50, &st), -ETIMEDOUT);
	CHECK_EQ(st.state, CKPT_STATE_PENDING);

	/* Duplicate names are caught here; the slot comes back. */
	CHECK_EQ(ckpt_save_begin(ctx, 4, &s1), 0);
	CHECK(add_tensors(s1, false) == 0);
	CHECK(add_tensors(s1, false) == 0);
	CHECK_EQ(ckpt_save_finish(s1), -EINVAL);
	CHECK_EQ(ckpt_save_begin(ctx, 4, &s1), 0);
	ckpt_save_abort(s1);

	CHECK_EQ(ckpt_latest(ctx, &latest), 0);
	CHECK_EQ(latest, 1);
	CHECK_EQ(ckpt_list(ctx, steps, 4), 1);
	CHECK_EQ(steps[0], 1);
	CHECK_EQ(ckpt_list(ctx, NULL, 0), 1);

	/* Restore: ckptd fell back from 5 to 1. */
	CHECK_EQ(ckpt_restore_open(ctx, 5, 0, &rs), 0);
	CHECK_EQ(ckpt_restore_step(rs), 1);
	CHECK(ckpt_restore_warning(rs) && strstr(ckpt_restore_warning(rs), "step 5"));
	CHECK_EQ(ckpt_restore_tensor_count(rs), 2);
	CHECK_EQ(ckpt_restore_tensor_at(rs, 0, &d), 0);
	CHECK(strcmp(d.name, "layer0.weight") == 0 && d.ndim == 2 && d.shape[1] == 10);
	CHECK_EQ(ckpt_restore_tensor_at(rs, 2, &d), -EINVAL);
	CHECK_EQ(ckpt_restore_tensor(rs, "layer0.weight", out, sizeof(out)), 0);
	for (size_t k = 0; k < sizeof(out); k++)
		CHECK(out[k] == pattern(0, k));
	CHECK_EQ(ckpt_restore_tensor(rs, "layer0.weight", out, 4), -EMSGSIZE);
	CHECK_EQ(ckpt_restore_tensor(rs, "layer0.weight", NULL, 160), 0);
	CHECK_EQ(ckpt_restore_tensor(rs, "nope", out, 4), -CKPT_E_NOT_FOUND);
	CHECK_EQ(ckpt_restore_tensor_ptr(rs, "step", &ptr, &len), 0);
	CHECK(len == 8 && ((const uint8_t *)ptr)[7] == pattern(1, 7));
	CHECK_EQ(ckpt_restore_blob(rs, blob, 2), 5);
	CHECK_EQ(ckpt_restore_blob(rs, blob, sizeof(blob)), 5);
	CHECK(memcmp(blob, "blob!", 5) == 0);
	ckpt_restore_close(rs);

	/* pending 1, pending 2, skipped 3, durable 1, committed 1 */
	while (nev < 16 && ckpt_next_event(ctx, &st) == 1)
		states[nev++] = st.state;
	CHECK_EQ(nev, 5);
	CHECK(states[0] == CKPT_STATE_PENDING && states[1] == CKPT_STATE_PENDING &&
	      states[2] == CKPT_STATE_SKIPPED && states[3] == CKPT_STATE_DURABLE &&
	      states[4] == CKPT_STATE_COMMITTED);

	ckpt_close(ctx);
	CHECK_EQ(fake_stop(&f, 5000), 0);
	CHECK_EQ(count_fds(), fds);
	return 0;
}

/* Block policy, one slot; the first connection drops after step 2. */
static int serve_block(int lfd, void *arg)
{
	struct ckpt_msg m, r;
	uint8_t *arena;
	int cfd;

	(void)arg;
	cfd = fake_accept(lfd, 5000);
	if (cfd < 0 || fake_hello(cfd, 1, SLOT_BYTES, 0, (void **)&arena) < 0)
		return 2;
	for (uint64_t step = 1; step <= 2; step++) {
		if (fake_recv(cfd, &m, 5000) < 0 || m.type != CKPT_MSG_SAVE ||
		    m.u.save.step != step || m.u.save.slot != 0)
			return 3;
		memset(&r, 0, sizeof(r));
		r.type = CKPT_MSG_SAVE_OK;
		r.seq = m.seq;
		r.u.save_ok.step = step;
		r.u.save_ok.slot = 0;
		fake_send(cfd, &r, NULL, 0);
		if (step == 1) {
			usleep(300 * 1000); /* the client blocks meanwhile */
			send_status(cfd, 1, CKPT_STATE_DURABLE, 0);
		}
	}
	close(cfd);

	/* The client comes back by itself at its next save. */
	cfd = fake_accept(lfd, 5000);
	if (cfd < 0 || fake_hello(cfd, 1, SLOT_BYTES, 0, (void **)&arena) < 0)
		return 4;
	if (fake_recv(cfd, &m, 5000) < 0 || m.type != CKPT_MSG_SAVE || m.u.save.step != 3)
		return 5;
	memset(&r, 0, sizeof(r));
	r.type = CKPT_MSG_SAVE_OK;
	r.seq = m.seq;
	r.u.save_ok.step = 3;
	fake_send(cfd, &r, NULL, 0);
	send_status(cfd, 3, CKPT_STATE_DURABLE, 0);
	send_status(cfd, 3, CKPT_STATE_COMMITTED, CKPT_NO_SLOT);
	while (fake_recv(cfd, &m, 5000) == 0)
		;
	return 0;
}

static int save_one(ckpt_ctx *ctx, uint64_t step)
{
	ckpt_tensor_desc d = { .name = "w", .dtype = CKPT_DTYPE_U8, .ndim = 1,
			       .global_shape = { 100 }, .shape = { 100 } };
	uint8_t buf[100];
	ckpt_save *s = NULL;
	int r;

	for (size_t k = 0; k < sizeof(buf); k++)
		buf[k] = pattern(0, k);
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

static int test_block_policy(void)
{
	struct fake f;
	ckpt_options o = { .struct_size = sizeof(o), .job = "job", .world_size = 4, .rank = 3,
			   .max_save_bytes = 1000, .connect_timeout_ms = 2000 };
	ckpt_ctx *ctx = NULL;
	ckpt_status st;
	int fds = count_fds(), maps = count_memfd_maps();
	int64_t t0, dt;
	void *arena1, *arena2;

	CHECK(fake_start(&f, serve_block, NULL) == 0);
	o.socket_path = f.path;
	CHECK_EQ(ckpt_connect(&o, &ctx), 0);
	arena1 = ckpt_arena(ctx, NULL);
	CHECK_EQ(save_one(ctx, 1), 0);
	t0 = test_now_ms();
	CHECK_EQ(save_one(ctx, 2), 0); /* waits for step 1's slot */
	dt = test_now_ms() - t0;
	CHECK(dt >= 200);
	/* The connection drops with step 2 in flight. */
	CHECK_EQ(ckpt_wait(ctx, 2, 3000, &st), 0);
	CHECK_EQ(st.state, CKPT_STATE_FAILED);
	CHECK_EQ(st.error, -CKPT_E_DISCONNECTED);
	CHECK_EQ(ckpt_poll(ctx, 1, &st), 0);
	CHECK_EQ(st.state, CKPT_STATE_FAILED); /* durable, never committed */
	/* Reconnects by itself. */
	CHECK_EQ(save_one(ctx, 3), 0);
	arena2 = ckpt_arena(ctx, NULL);
	CHECK(arena2 != NULL);
	(void)arena1;
	CHECK_EQ(ckpt_wait(ctx, 3, 3000, &st), 0);
	CHECK_EQ(st.state, CKPT_STATE_COMMITTED);
	ckpt_close(ctx);
	CHECK_EQ(fake_stop(&f, 5000), 0);
	CHECK_EQ(count_fds(), fds);
	CHECK_EQ(count_memfd_maps(), maps);
	return 0;
}

int main(void)
{
	if (test_skip_policy() || test_block_policy())
		return 1;
	printf("ok\n");
	return 0;
}
