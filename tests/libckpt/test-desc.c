/* SPDX-License-Identifier: MIT */
/*
 * ckpt_tensor_desc's versioning and the 64-bit blob accessor:
 *  - struct_size 0 (what existing callers' initialisers give) is the
 *    original layout, sizeof() is the current one, a larger one from a
 *    newer ckpt.h is accepted when its unknown bytes are zero and refused
 *    (-E2BIG, said by ckpt_save_error) when they are not; one too small
 *    for any layout is -EINVAL;
 *  - a binary built against libckpt 0.1 gets the LIBCKPT_0.1 versions,
 *    which read and write only the 0.1 layout: the descriptors here end
 *    at an unmapped page, so a byte past them would crash the test;
 *  - ckpt_restore_tensor_at never writes past struct_size, leaves 0 as 0;
 *  - ckpt_restore_blob_ptr hands out the blob.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake.h"

#define SLOT_BYTES (256u << 10)
#define NTENSORS 6

/* libckpt 0.1's ckpt_tensor_desc, as a binary built then has it. */
struct desc_v0_1 {
	const char *name;
	uint32_t dtype;
	uint32_t ndim;
	uint64_t global_shape[CKPT_MAX_DIMS];
	uint64_t offset[CKPT_MAX_DIMS];
	uint64_t shape[CKPT_MAX_DIMS];
};

/* A descriptor from a newer ckpt.h, with a field this library lacks. */
struct desc_newer {
	ckpt_tensor_desc d;
	uint64_t future;
};

static int serve(int lfd, void *arg)
{
	struct ckpt_msg m, r, saved = { 0 };
	struct ckpt_table t;
	uint8_t *arena;
	int cfd;

	(void)arg;
	cfd = fake_accept(lfd, 5000);
	if (cfd < 0 || fake_hello(cfd, 1, SLOT_BYTES, 0, (void **)&arena) < 0)
		return 2;
	while (fake_recv(cfd, &m, 10000) == 0) {
		memset(&r, 0, sizeof(r));
		r.seq = m.seq;
		switch (m.type) {
		case CKPT_MSG_SAVE:
			if (ckpt_table_decode(arena + m.u.save.table_offset, m.u.save.table_bytes,
					      &t) < 0 || t.count != NTENSORS)
				return 3;
			for (uint32_t i = 0; i < t.count; i++)
				if (t.tensors[i].ndim != 1 || t.tensors[i].shape[0] != 8 + i)
					return 4;
			ckpt_table_free(&t);
			saved = m;
			r.type = CKPT_MSG_SAVE_OK;
			r.u.save_ok.step = m.u.save.step;
			r.u.save_ok.slot = m.u.save.slot;
			fake_send(cfd, &r, NULL, 0);
			{
				struct ckpt_msg s = { .type = CKPT_MSG_STATUS };

				s.u.status.step = m.u.save.step;
				s.u.status.state = CKPT_STATE_COMMITTED;
				s.u.status.slot_freed = m.u.save.slot;
				fake_send(cfd, &s, NULL, 0);
			}
			break;
		case CKPT_MSG_RESTORE:
			/* The slot still holds what was saved. */
			if (saved.type != CKPT_MSG_SAVE || m.u.restore.slot != saved.u.save.slot)
				return 5;
			r.type = CKPT_MSG_RESTORE_OK;
			r.u.restore_ok.step = saved.u.save.step;
			r.u.restore_ok.slot = m.u.restore.slot;
			r.u.restore_ok.data_bytes = saved.u.save.data_bytes;
			r.u.restore_ok.table_offset = saved.u.save.table_offset;
			r.u.restore_ok.table_bytes = saved.u.save.table_bytes;
			r.u.restore_ok.blob_offset = saved.u.save.blob_offset;
			r.u.restore_ok.blob_bytes = saved.u.save.blob_bytes;
			fake_send(cfd, &r, NULL, 0);
			break;
		case CKPT_MSG_RELEASE:
			break;
		case CKPT_MSG_BYE:
			return 0;
		default:
			return 6;
		}
	}
	return 7;
}

/* Room for one object that ends where an unmapped page begins. */
static void *at_page_end(size_t bytes)
{
	long page = sysconf(_SC_PAGESIZE);
	uint8_t *p = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED || mprotect(p + page, (size_t)page, PROT_NONE) < 0)
		return NULL;
	memset(p, 0, (size_t)page);
	return p + page - bytes;
}

static void set_1d(const char *name, uint64_t n, const char **pname, uint32_t *dtype,
		   uint32_t *ndim, uint64_t *global, uint64_t *shape)
{
	*pname = name;
	*dtype = CKPT_DTYPE_U8;
	*ndim = 1;
	global[0] = n;
	shape[0] = n;
}

int main(void)
{
	typedef int (*add_v0_1_fn)(ckpt_save *, const struct desc_v0_1 *, const void *);
	typedef uint64_t (*bytes_v0_1_fn)(const struct desc_v0_1 *);
	typedef int (*at_v0_1_fn)(const ckpt_restore *, int, struct desc_v0_1 *);
	struct fake f;
	ckpt_options o = { .struct_size = sizeof(o), .job = "desc-job", .world_size = 1,
			   .max_save_bytes = 64 << 10, .connect_timeout_ms = 5000 };
	uint8_t buf[64] = { 0 };
	ckpt_tensor_desc d0 = { .name = "zero", .dtype = CKPT_DTYPE_U8, .ndim = 1,
				.global_shape = { 8 }, .shape = { 8 } };
	ckpt_tensor_desc dcur = { .name = "current", .dtype = CKPT_DTYPE_U8, .ndim = 1,
				  .global_shape = { 9 }, .shape = { 9 },
				  .struct_size = sizeof(ckpt_tensor_desc) };
	struct desc_newer dn = { 0 };
	struct desc_v0_1 *old = at_page_end(sizeof(*old));
	ckpt_tensor_desc *cur_end = at_page_end(sizeof(ckpt_tensor_desc));
	ckpt_tensor_desc small = d0, out, *garbage = at_page_end(sizeof(ckpt_tensor_desc));
	struct desc_newer nout;
	add_v0_1_fn add_v0_1;
	bytes_v0_1_fn bytes_v0_1;
	at_v0_1_fn at_v0_1;
	ckpt_ctx *ctx = NULL;
	ckpt_save *s = NULL;
	ckpt_restore *rs = NULL;
	const void *blob;
	size_t blob_len;
	void *lib, *dst;

	CHECK(old && cur_end && garbage);
	lib = dlopen("libckpt.so.0", RTLD_NOW | RTLD_NOLOAD);
	CHECK(lib != NULL);
	add_v0_1 = (add_v0_1_fn)dlvsym(lib, "ckpt_save_add", "LIBCKPT_0.1");
	bytes_v0_1 = (bytes_v0_1_fn)dlvsym(lib, "ckpt_tensor_bytes", "LIBCKPT_0.1");
	at_v0_1 = (at_v0_1_fn)dlvsym(lib, "ckpt_restore_tensor_at", "LIBCKPT_0.1");
	CHECK(add_v0_1 && bytes_v0_1 && at_v0_1);
	CHECK(dlvsym(lib, "ckpt_save_reserve", "LIBCKPT_0.1") != NULL);
	CHECK(dlvsym(lib, "ckpt_restore_blob_ptr", "LIBCKPT_0.2") != NULL);

	dn.d = (ckpt_tensor_desc){ .name = "newer", .dtype = CKPT_DTYPE_U8, .ndim = 1,
				   .global_shape = { 10 }, .shape = { 10 },
				   .struct_size = sizeof(dn) };
	set_1d("old", 11, &old->name, &old->dtype, &old->ndim, old->global_shape, old->shape);
	*cur_end = (ckpt_tensor_desc){ .name = "cur-end", .dtype = CKPT_DTYPE_U8, .ndim = 1,
				       .global_shape = { 12 }, .shape = { 12 },
				       .struct_size = sizeof(ckpt_tensor_desc) };

	CHECK_EQ(ckpt_tensor_bytes(&d0), 8);
	CHECK_EQ(ckpt_tensor_bytes(&dcur), 9);
	CHECK_EQ(ckpt_tensor_bytes(&dn.d), 10);
	CHECK_EQ(bytes_v0_1(old), 11);
	CHECK_EQ(ckpt_tensor_bytes(cur_end), 12);

	CHECK(fake_start(&f, serve, NULL) == 0);
	o.socket_path = f.path;
	CHECK_EQ(ckpt_connect(&o, &ctx), 0);
	CHECK_EQ(ckpt_save_begin(ctx, 3, &s), 0);
	CHECK_EQ(ckpt_save_add(s, &d0, buf), 0);
	CHECK_EQ(ckpt_save_add(s, &dcur, buf), 0);
	CHECK_EQ(ckpt_save_add(s, &dn.d, buf), 0);
	CHECK_EQ(add_v0_1(s, old, buf), 0);
	CHECK_EQ(ckpt_save_reserve(s, cur_end, &dst), 0);
	/* Refused, and the save goes on. */
	dn.future = 1;
	dn.d.name = "refused";
	CHECK_EQ(ckpt_save_add(s, &dn.d, buf), -E2BIG);
	CHECK(strstr(ckpt_save_error(s), "struct_size") != NULL);
	CHECK_EQ(ckpt_tensor_bytes(&dn.d), 0);
	/* What a caller that never set struct_size may leave: small values
	 * are the original layout, huge ones refused unread (the struct
	 * ends at an unmapped page). */
	*garbage = d0;
	garbage->name = "garbage";
	garbage->struct_size = 0xdeadbeef;
	CHECK_EQ(ckpt_save_add(s, garbage, buf), -E2BIG);
	CHECK(strstr(ckpt_save_error(s), "not a size") != NULL);
	CHECK_EQ(ckpt_tensor_bytes(garbage), 0);
	small.struct_size = 8;
	small.name = "small";
	small.global_shape[0] = small.shape[0] = 13;
	CHECK_EQ(ckpt_tensor_bytes(&small), 13);
	CHECK_EQ(ckpt_save_add(s, &small, buf), 0);
	CHECK_EQ(ckpt_save_set_blob(s, "hello-blob", 10), 0);
	CHECK_EQ(ckpt_save_finish(s), 0);

	CHECK_EQ(ckpt_restore_open(ctx, 3, 0, &rs), 0);
	CHECK_EQ(ckpt_restore_tensor_count(rs), NTENSORS);
	/* 0 stays 0, the original fields are filled. */
	memset(&out, 0, sizeof(out));
	CHECK_EQ(ckpt_restore_tensor_at(rs, 0, &out), 0);
	CHECK(strcmp(out.name, "zero") == 0 && out.shape[0] == 8 && out.struct_size == 0);
	/* A newer caller's unknown field is left alone, its size kept. */
	memset(&nout, 0, sizeof(nout));
	nout.future = 42;
	nout.d.struct_size = sizeof(nout);
	CHECK_EQ(ckpt_restore_tensor_at(rs, 1, &nout.d), 0);
	CHECK(strcmp(nout.d.name, "current") == 0 && nout.d.shape[0] == 9);
	CHECK_EQ(nout.future, 42);
	CHECK_EQ(nout.d.struct_size, sizeof(nout));
	/* Ending at unmapped memory: nothing past the caller's struct. */
	memset(old, 0, sizeof(*old));
	CHECK_EQ(at_v0_1(rs, 3, old), 0);
	CHECK(strcmp(old->name, "old") == 0 && old->shape[0] == 11 && old->ndim == 1);
	memset(cur_end, 0, sizeof(*cur_end));
	cur_end->struct_size = sizeof(*cur_end);
	CHECK_EQ(ckpt_restore_tensor_at(rs, 4, cur_end), 0);
	CHECK(strcmp(cur_end->name, "cur-end") == 0 && cur_end->shape[0] == 12);
	/* Nothing set, as callers of the original API do: anything in
	 * struct_size is fine, and nothing past the struct is written. */
	memset(garbage, 0, sizeof(*garbage));
	garbage->struct_size = 0xdeadbeef;
	CHECK_EQ(ckpt_restore_tensor_at(rs, 5, garbage), 0);
	CHECK(strcmp(garbage->name, "small") == 0 && garbage->shape[0] == 13);
	CHECK_EQ(garbage->struct_size, 0xdeadbeef);
	out.struct_size = 8;
	CHECK_EQ(ckpt_restore_tensor_at(rs, 0, &out), 0);
	CHECK(strcmp(out.name, "zero") == 0 && out.struct_size == 8);

	CHECK_EQ(ckpt_restore_blob_ptr(rs, &blob, &blob_len), 0);
	CHECK_EQ(blob_len, 10);
	CHECK(memcmp(blob, "hello-blob", 10) == 0);
	CHECK_EQ(ckpt_restore_blob(rs, buf, sizeof(buf)), 10);
	ckpt_restore_close(rs);

	ckpt_close(ctx);
	CHECK_EQ(fake_stop(&f, 5000), 0);
	printf("test-libckpt-desc: ok\n");
	return 0;
}
