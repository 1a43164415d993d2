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

/* Length of the UTF-8 sequence at s[0..left) (shortest form, no
 * surrogates, at most U+10FFFF), or 0 if it is not one. */
static size_t utf8_seq_len(const unsigned char *s, size_t left)
{
	size_t n;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4;
	else
		return 0;
	if (left < n)
		return 0;
	for (size_t i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if ((s[0] == 0xe0 && s[1] < 0xa0) ||  /* overlong */
	    (s[0] == 0xed && s[1] >= 0xa0) ||  /* surrogate */
	    (s[0] == 0xf0 && s[1] < 0x90) ||  /* overlong */
	    (s[0] == 0xf4 && s[1] >= 0x90))   /* above U+10FFFF */
		return 0;
	return n;
}

const char *ckpt_tensor_name_problem(const char *name, size_t len)
{
	const unsigned char *s = (const unsigned char *)name;

	if (!name || len == 0)
		return "is empty";
	if (len > CKPT_TENSOR_NAME_MAX)
		return "is longer than 255 bytes";
	if ((len == 1 && name[0] == '.') ||
	    (len == 2 && name[0] == '.' && name[1] == '.'))
		return "is \".\" or \"..\"";
	for (size_t i = 0; i < len;) {
		size_t n;

		if (s[i] == '/')
			return "holds '/'";
		if (s[i] < 0x20 || s[i] == 0x7f)
			return "holds a control character (NUL, U+0001..U+001F or DEL)";
		/* Exactly what a manifest could always hold (JSON is UTF-8):
		 * no committed step has a name this refuses. */
		n = utf8_seq_len(s + i, len - i);
		if (n == 0)
			return "is not valid UTF-8";
		i += n;
	}
	return NULL;
}

int ckpt_tensor_name_check(const char *name, size_t len)
{
	return ckpt_tensor_name_problem(name, len) ? -CKPT_E_BAD_NAME : 0;
}

static bool quote_plain(unsigned char c)
{
	return c >= 0x20 && c < 0x7f && c != '\\' && c != '"';
}

void ckpt_name_quote(char *out, size_t cap, const char *name, size_t len)
{
	static const char digits[] = "0123456789abcdef";
	size_t need = 0, o = 0, room;

	if (cap == 0)
		return;
	for (size_t i = 0; name && i < len; i++)
		need += quote_plain((unsigned char)name[i]) ? 1 : 4;
	/* Cut short, and say so, rather than mid-escape. */
	room = need < cap ? need : cap > 4 ? cap - 4 : 0;
	for (size_t i = 0; name && i < len; i++) {
		unsigned char c = (unsigned char)name[i];
		size_t w = quote_plain(c) ? 1 : 4;

		if (o + w > room)
			break;
		if (w == 1) {
			out[o++] = (char)c;
		} else {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = digits[c >> 4];
			out[o++] = digits[c & 15];
		}
	}
	if (need >= cap && cap > 4) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
}

static int name_result(int n, size_t cap)
{
	if (n < 0 || (size_t)n >= cap)
		return -ENAMETOOLONG;
	return n;
}

int ckpt_step_dirname(char *buf, size_t cap, uint64_t step)
{
	/* Ten digits keep `ls` order == step order: the reason step numbers
	 * end at CKPT_STEP_MAX (FORMAT.md, "Step numbers"). The buffer is
	 * never left unformatted: a failure leaves it empty. */
	if (cap > 0)
		buf[0] = '\0';
	if (step > CKPT_STEP_MAX)
		return -ERANGE;
	int n = name_result(snprintf(buf, cap, "step-%010llu", (unsigned long long)step), cap);
	if (n < 0 && cap > 0)
		buf[0] = '\0';
	return n;
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
