/* SPDX-License-Identifier: MIT */
/* Names and sizes: ckpt_strerror, dtypes, tensor byte sizes, states. */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ckpt.h"

#define CHECK(cond)                                                                   \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			return 1;                                                     \
		}                                                                     \
	} while (0)

static int test_strerror(void)
{
	const char *seen[CKPT_E_VERSION - CKPT_E_PROTOCOL + 1];

	for (int e = CKPT_E_PROTOCOL; e <= CKPT_E_VERSION; e++) {
		const char *s = ckpt_strerror(-e);

		CHECK(s && *s && strcmp(s, "unknown error") != 0);
		/* Each code has its own text. */
		for (int k = CKPT_E_PROTOCOL; k < e; k++)
			CHECK(strcmp(seen[k - CKPT_E_PROTOCOL], s) != 0);
		seen[e - CKPT_E_PROTOCOL] = s;
	}
	CHECK(strcmp(ckpt_strerror(-ENOSPC), "No space left on device") == 0);
	CHECK(strcmp(ckpt_strerror(-ENOENT), "No such file or directory") == 0);
	CHECK(strcmp(ckpt_strerror(0), "success") == 0);
	CHECK(ckpt_strerror(-999999) != NULL);
	CHECK(ckpt_strerror(INT_MIN) != NULL);
	CHECK(ckpt_strerror(INT_MAX) != NULL);
	return 0;
}

static int test_dtypes(void)
{
	static const struct {
		int dtype;
		size_t size;
		const char *name;
	} want[] = {
		{ CKPT_DTYPE_U8, 1, "u8" },	  { CKPT_DTYPE_I8, 1, "i8" },
		{ CKPT_DTYPE_U16, 2, "u16" },	  { CKPT_DTYPE_I16, 2, "i16" },
		{ CKPT_DTYPE_U32, 4, "u32" },	  { CKPT_DTYPE_I32, 4, "i32" },
		{ CKPT_DTYPE_U64, 8, "u64" },	  { CKPT_DTYPE_I64, 8, "i64" },
		{ CKPT_DTYPE_F16, 2, "f16" },	  { CKPT_DTYPE_BF16, 2, "bf16" },
		{ CKPT_DTYPE_F32, 4, "f32" },	  { CKPT_DTYPE_F64, 8, "f64" },
		{ CKPT_DTYPE_BOOL, 1, "bool" },	  { CKPT_DTYPE_F8E4M3, 1, "f8e4m3" },
		{ CKPT_DTYPE_F8E5M2, 1, "f8e5m2" },
	};

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		CHECK(ckpt_dtype_size(want[i].dtype) == want[i].size);
		CHECK(ckpt_dtype_name(want[i].dtype) &&
		      strcmp(ckpt_dtype_name(want[i].dtype), want[i].name) == 0);
	}
	CHECK(ckpt_dtype_size(0) == 0 && ckpt_dtype_name(0) == NULL);
	CHECK(ckpt_dtype_size(16) == 0 && ckpt_dtype_name(16) == NULL);
	CHECK(ckpt_dtype_size(-1) == 0 && ckpt_dtype_name(-1) == NULL);
	CHECK(ckpt_dtype_size(INT_MAX) == 0);
	return 0;
}

static int test_tensor_bytes(void)
{
	ckpt_tensor_desc d = { .name = "w", .dtype = CKPT_DTYPE_F32, .ndim = 2,
			       .global_shape = { 8, 100 }, .offset = { 4, 0 },
			       .shape = { 4, 100 } };

	CHECK(ckpt_tensor_bytes(&d) == 4 * 100 * 4);
	CHECK(ckpt_tensor_bytes(NULL) == 0);

	/* A scalar. */
	d.ndim = 0;
	CHECK(ckpt_tensor_bytes(&d) == 4);

	/* Slice outside the global shape. */
	d.ndim = 2;
	d.offset[0] = 5;
	CHECK(ckpt_tensor_bytes(&d) == 0);
	d.offset[0] = UINT64_MAX;
	CHECK(ckpt_tensor_bytes(&d) == 0);
	d.offset[0] = 0;

	/* Unknown dtype, too many dims. */
	d.dtype = 99;
	CHECK(ckpt_tensor_bytes(&d) == 0);
	d.dtype = CKPT_DTYPE_BF16;
	d.ndim = CKPT_MAX_DIMS + 1;
	CHECK(ckpt_tensor_bytes(&d) == 0);

	/* Overflow of the byte count. */
	d.ndim = 3;
	for (int i = 0; i < 3; i++) {
		d.global_shape[i] = UINT64_MAX;
		d.offset[i] = 0;
		d.shape[i] = 1ull << 30;
	}
	CHECK(ckpt_tensor_bytes(&d) == 0);
	d.shape[2] = 1;
	CHECK(ckpt_tensor_bytes(&d) == (1ull << 61));
	d.dtype = CKPT_DTYPE_F64;
	CHECK(ckpt_tensor_bytes(&d) == (1ull << 63));
	d.shape[2] = 2;
	CHECK(ckpt_tensor_bytes(&d) == 0); /* 2^64 bytes */
	return 0;
}

static int test_states(void)
{
	CHECK(strcmp(ckpt_state_name(CKPT_STATE_UNKNOWN), "unknown") == 0);
	CHECK(strcmp(ckpt_state_name(CKPT_STATE_PENDING), "pending") == 0);
	CHECK(strcmp(ckpt_state_name(CKPT_STATE_DURABLE), "durable") == 0);
	CHECK(strcmp(ckpt_state_name(CKPT_STATE_COMMITTED), "committed") == 0);
	CHECK(strcmp(ckpt_state_name(CKPT_STATE_SKIPPED), "skipped") == 0);
	CHECK(strcmp(ckpt_state_name(CKPT_STATE_FAILED), "failed") == 0);
	CHECK(ckpt_state_name(42) != NULL);
	CHECK(ckpt_state_name(-1) != NULL);
	return 0;
}

int main(void)
{
	if (test_strerror() || test_dtypes() || test_tensor_bytes() || test_states())
		return 1;
	printf("ok\n");
	return 0;
}
