/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

int ckpt_job_name_check(const char *job, size_t len)
{
	if (!job || len == 0 || len > CKPT_JOB_NAME_MAX || job[0] == '.')
		return -CKPT_E_BAD_NAME;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)job[i];

		/* Explicit ranges, not isalnum(): the locale must not matter. */
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return -CKPT_E_BAD_NAME;
	}
	return 0;
}

int ckpt_tensor_name_check(const char *name, size_t len)
{
	if (!name || len == 0 || len > CKPT_TENSOR_NAME_MAX)
		return -CKPT_E_BAD_NAME;
	if ((len == 1 && name[0] == '.') ||
	    (len == 2 && name[0] == '.' && name[1] == '.'))
		return -CKPT_E_BAD_NAME;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)name[i];

		if (c < 0x20 || c == 0x7f || c == '/')
			return -CKPT_E_BAD_NAME;
	}
	return 0;
}

static int name_result(int n, size_t cap)
{
	if (n < 0 || (size_t)n >= cap)
		return -ENAMETOOLONG;
	return n;
}

int ckpt_step_dirname(char *buf, size_t cap, uint64_t step)
{
	/* Ten digits keep `ls` order == step order up to 9999999999; larger
	 * steps get more digits and ckpt_step_dirname_parse refuses them. */
	if (step > 9999999999ull)
		return -ENAMETOOLONG;
	return name_result(snprintf(buf, cap, "step-%010llu", (unsigned long long)step), cap);
}

int ckpt_shard_filename(char *buf, size_t cap, uint32_t rank)
{
	if (rank > 999999u)
		return -ENAMETOOLONG;
	return name_result(snprintf(buf, cap, "rank-%06u.shard", rank), cap);
}

int ckpt_index_filename(char *buf, size_t cap, uint32_t rank)
{
	if (rank > 999999u)
		return -ENAMETOOLONG;
	return name_result(snprintf(buf, cap, "rank-%06u.index", rank), cap);
}

int ckpt_step_dirname_parse(const char *name, uint64_t *step)
{
	uint64_t v = 0;

	if (!name || strncmp(name, "step-", 5) != 0)
		return -EINVAL;
	for (int i = 0; i < 10; i++) {
		char c = name[5 + i];

		if (c < '0' || c > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(c - '0');
	}
	if (name[15] != '\0')
		return -EINVAL;
	if (step)
		*step = v;
	return 0;
}

int ckpt_default_socket_path(char *buf, size_t cap)
{
	const char *env = getenv("CKPT_SOCKET");

	if (env && env[0])
		return name_result(snprintf(buf, cap, "%s", env), cap);
	env = getenv("XDG_RUNTIME_DIR");
	if (geteuid() != 0 && env && env[0])
		return name_result(snprintf(buf, cap, "%s/ckptd.sock", env), cap);
	return name_result(snprintf(buf, cap, "/run/ckpt/ckptd.sock"), cap);
}

void ckpt_hex(char *out, const uint8_t *bytes, size_t n)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[bytes[i] >> 4];
		out[2 * i + 1] = digits[bytes[i] & 15];
	}
	out[2 * n] = '\0';
}

/* Indexed by enum ckpt_dtype; the values are pinned on disk. */
static const struct {
	const char *name;
	uint8_t size;
} dtypes[] = {
	[CKPT_DTYPE_U8] = { "u8", 1 },
	[CKPT_DTYPE_I8] = { "i8", 1 },
	[CKPT_DTYPE_U16] = { "u16", 2 },
	[CKPT_DTYPE_I16] = { "i16", 2 },
	[CKPT_DTYPE_U32] = { "u32", 4 },
	[CKPT_DTYPE_I32] = { "i32", 4 },
	[CKPT_DTYPE_U64] = { "u64", 8 },
	[CKPT_DTYPE_I64] = { "i64", 8 },
	[CKPT_DTYPE_F16] = { "f16", 2 },
	[CKPT_DTYPE_BF16] = { "bf16", 2 },
	[CKPT_DTYPE_F32] = { "f32", 4 },
	[CKPT_DTYPE_F64] = { "f64", 8 },
	[CKPT_DTYPE_BOOL] = { "bool", 1 },
	[CKPT_DTYPE_F8E4M3] = { "f8e4m3", 1 },
	[CKPT_DTYPE_F8E5M2] = { "f8e5m2", 1 },
};

size_t ckpt_proto_dtype_size(uint32_t dtype)
{
	if (dtype >= sizeof(dtypes) / sizeof(dtypes[0]))
		return 0;
	return dtypes[dtype].size;
}

const char *ckpt_proto_dtype_name(uint32_t dtype)
{
	if (dtype >= sizeof(dtypes) / sizeof(dtypes[0]))
		return NULL;
	return dtypes[dtype].name;
}

uint32_t proto_dtype_from_name(const char *name)
{
	for (uint32_t i = 1; i < sizeof(dtypes) / sizeof(dtypes[0]); i++)
		if (dtypes[i].name && strcmp(dtypes[i].name, name) == 0)
			return i;
	return 0;
}
