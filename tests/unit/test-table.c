/* SPDX-License-Identifier: MIT */
/* Tensor tables: round trip, every per-entry check, every layout check. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "proto.h"

#define N 4
static struct ckpt_tensor ts[N];
static char names[N][32];
static uint8_t enc[1 << 16];

static void sample(void)
{
	memset(ts, 0, sizeof(ts));
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "layer.%d.weight", i);
		ts[i].name = names[i];
	}
	/* 2-D slice of a 16x8 f32 tensor: rows 4..7 */
	ts[0].dtype = CKPT_DTYPE_F32;
	ts[0].ndim = 2;
	ts[0].global_shape[0] = 16;
	ts[0].global_shape[1] = 8;
	ts[0].offset[0] = 4;
	ts[0].shape[0] = 4;
	ts[0].shape[1] = 8;
	ts[0].nbytes = 4 * 8 * 4;
	ts[0].data_offset = 0;
	ts[0].crc32c = 0xdeadbeef;
	/* scalar */
	ts[1].dtype = CKPT_DTYPE_I64;
	ts[1].ndim = 0;
	ts[1].nbytes = 8;
	ts[1].data_offset = 4096;
	/* empty tensor (a zero dimension) */
	ts[2].dtype = CKPT_DTYPE_BF16;
	ts[2].ndim = 1;
	ts[2].nbytes = 0;
	ts[2].data_offset = 8192;
	/* 8-D u8 */
	ts[3].dtype = CKPT_DTYPE_U8;
	ts[3].ndim = 8;
	for (int d = 0; d < 8; d++)
		ts[3].global_shape[d] = ts[3].shape[d] = 2;
	ts[3].nbytes = 256;
	ts[3].data_offset = 8192;
}

static ssize_t encode_after(void (*mutate)(void))
{
	sample();
	mutate();
	return ckpt_table_encode(ts, N, enc, sizeof(enc));
}

/* Encodes the entries even when invalid, byte for byte as FORMAT.md says
 * (on a little-endian host), so the decoder's checks can be tested. */
static size_t raw_encode(const struct ckpt_tensor *t, uint32_t count, uint8_t *p)
{
	size_t pos = 24;

	memset(p, 0, 24);
	memcpy(p, "CKTT", 4);
	p[4] = 1;
	memcpy(p + 8, &count, 4);
	for (uint32_t i = 0; i < count; i++) {
		size_t nl = strlen(t[i].name), pad = (8 - nl % 8) % 8;
		uint16_t nl16 = (uint16_t)nl;

		memcpy(p + pos, &nl16, 2);
		p[pos + 2] = (uint8_t)t[i].dtype;
		p[pos + 3] = (uint8_t)t[i].ndim;
		memcpy(p + pos + 4, &t[i].crc32c, 4);
		memcpy(p + pos + 8, &t[i].data_offset, 8);
		memcpy(p + pos + 16, &t[i].nbytes, 8);
		pos += 24;
		for (uint32_t d = 0; d < t[i].ndim; d++, pos += 8)
			memcpy(p + pos, &t[i].global_shape[d], 8);
		for (uint32_t d = 0; d < t[i].ndim; d++, pos += 8)
			memcpy(p + pos, &t[i].offset[d], 8);
		for (uint32_t d = 0; d < t[i].ndim; d++, pos += 8)
			memcpy(p + pos, &t[i].shape[d], 8);
		memcpy(p + pos, t[i].name, nl);
		memset(p + pos + nl, 0, pad);
		pos += nl + pad;
	}
	uint64_t total = pos;
	memcpy(p + 16, &total, 8);
	return pos;
}

static int raw_decode(void)
{
	struct ckpt_table t;
	size_t n = raw_encode(ts, N, enc);
	int ret = ckpt_table_decode(enc, n, &t);

	if (ret == 0)
		ckpt_table_free(&t);
	return ret;
}

static void m_slice_outside(void) { ts[0].offset[0] = 13; }
static void m_offset_past(void) { ts[0].offset[1] = 9; ts[0].shape[1] = 0; ts[0].nbytes = 0; }
static void m_nbytes(void) { ts[0].nbytes += 4; }
static void m_misaligned(void) { ts[1].data_offset = 100; }
static void m_dtype(void) { ts[1].dtype = 99; }
static void m_dtype0(void) { ts[1].dtype = 0; }
static void m_ndim(void) { ts[3].ndim = 9; }
static void m_name_slash(void) { strcpy(names[2], "a/b"); }
static void m_name_dotdot(void) { strcpy(names[2], ".."); }
static void m_name_ctrl(void) { strcpy(names[2], "a\tb"); }
/* Not UTF-8: the manifest (JSON) could not hold it. */
static void m_name_latin1(void) { strcpy(names[2], "caf\xe9"); }
static void m_name_cut(void) { strcpy(names[2], "w\xe2\x88"); }
static void m_name_c1(void) { strcpy(names[2], "\xed\xa0\x80"); } /* a surrogate */
static void m_overflow(void)
{
	/* 2^32 * 2^32 elements: the product overflows 64 bits. */
	ts[0].ndim = 2;
	ts[0].global_shape[0] = ts[0].shape[0] = 1ull << 32;
	ts[0].global_shape[1] = ts[0].shape[1] = 1ull << 32;
	ts[0].offset[0] = ts[0].offset[1] = 0;
	ts[0].nbytes = 0;
}
static void m_overflow_bytes(void)
{
	/* Elements fit, bytes do not. */
	ts[0].ndim = 1;
	ts[0].global_shape[0] = ts[0].shape[0] = 1ull << 62;
	ts[0].offset[0] = 0;
	ts[0].nbytes = 0;
}
static void m_offset_overflow(void)
{
	ts[0].global_shape[0] = UINT64_MAX;
	ts[0].offset[0] = UINT64_MAX - 1;
	ts[0].shape[0] = 4; /* offset + shape wraps */
}

int main(void)
{
	struct ckpt_table t, c;
	char err[512];
	ssize_t n;

	sample();
	n = ckpt_table_encode(ts, N, enc, sizeof(enc));
	CHECK(n > 0);
	CHECK_EQ((size_t)n, ckpt_table_encoded_size(ts, N));
	CHECK_EQ(n % 8, 0);
	CHECK_EQ(ckpt_table_encode(ts, N, enc, (size_t)n - 1), -ENOBUFS);
	CHECK_EQ(raw_encode(ts, N, enc + 32768), (size_t)n);
	CHECK(memcmp(enc, enc + 32768, (size_t)n) == 0); /* spec == code */
	CHECK_EQ(ckpt_table_decode(enc, (size_t)n, &t), 0);
	CHECK_EQ(t.count, N);
	for (int i = 0; i < N; i++) {
		CHECK(strcmp(t.tensors[i].name, ts[i].name) == 0);
		CHECK_EQ(t.tensors[i].dtype, ts[i].dtype);
		CHECK_EQ(t.tensors[i].ndim, ts[i].ndim);
		CHECK_EQ(t.tensors[i].nbytes, ts[i].nbytes);
		CHECK_EQ(t.tensors[i].data_offset, ts[i].data_offset);
		CHECK_EQ(t.tensors[i].crc32c, ts[i].crc32c);
		CHECK(memcmp(t.tensors[i].shape, ts[i].shape, sizeof(ts[i].shape)) == 0);
		CHECK(memcmp(t.tensors[i].offset, ts[i].offset, sizeof(ts[i].offset)) == 0);
		CHECK(memcmp(t.tensors[i].global_shape, ts[i].global_shape,
			     sizeof(ts[i].global_shape)) == 0);
	}
	CHECK_EQ(ckpt_table_find(&t, "layer.3.weight"), 3);
	CHECK_EQ(ckpt_table_find(&t, "layer.9.weight"), -1);
	CHECK_EQ(ckpt_table_check_layout(&t, 3 * 4096, 0, 0, err, sizeof(err)), 0);
	CHECK_EQ(ckpt_table_check_layout(&t, 3 * 4096, 3 * 4096, 0, err, sizeof(err)), 0);
	CHECK_EQ(ckpt_table_copy(&c, &t), 0);
	ckpt_table_free(&t);
	CHECK_EQ(c.count, N);
	CHECK(strcmp(c.tensors[2].name, "layer.2.weight") == 0);
	/* Re-encoding a decoded table gives the same bytes. */
	CHECK_EQ(ckpt_table_encode(c.tensors, c.count, enc + 32768, 32768), n);
	CHECK(memcmp(enc, enc + 32768, (size_t)n) == 0);

	/* ---- layout ---- */
	CHECK_EQ(ckpt_table_check_layout(&c, 2 * 4096, 0, 0, err, sizeof(err)), -EBADMSG);
	CHECK(strstr(err, "layer.3.weight") != NULL); /* out of bounds */
	CHECK_EQ(ckpt_table_check_layout(&c, 4 * 4096, 3 * 4096, 4097, err, sizeof(err)), -EBADMSG);
	CHECK(strstr(err, "blob") != NULL);
	CHECK_EQ(ckpt_table_check_layout(&c, 4 * 4096, 3 * 4096 + 8, 8, err, sizeof(err)), -EBADMSG);
	CHECK_EQ(ckpt_table_check_layout(&c, 4 * 4096, 3 * 4096, 4096, err, sizeof(err)), 0);
	CHECK_EQ(ckpt_table_check_layout(&c, 4 * 4096, 4096, 10, err, sizeof(err)), -EBADMSG);
	CHECK(strstr(err, "overlaps") != NULL && strstr(err, "layer.1.weight") != NULL);
	c.tensors[1].data_offset = 0; /* overlaps layer.0 */
	CHECK_EQ(ckpt_table_check_layout(&c, 4 * 4096, 0, 0, err, sizeof(err)), -EBADMSG);
	CHECK(strstr(err, "layer.0.weight") && strstr(err, "layer.1.weight"));
	c.tensors[1].data_offset = 4096;
	c.tensors[1].data_offset = 4000; /* misaligned */
	CHECK_EQ(ckpt_table_check_layout(&c, 4 * 4096, 0, 0, err, sizeof(err)), -EBADMSG);
	CHECK(strstr(err, "aligned") != NULL);
	c.tensors[1].data_offset = 4096;
	c.tensors[2].data_offset = 0; /* empty extents overlap nothing */
	CHECK_EQ(ckpt_table_check_layout(&c, 4 * 4096, 0, 0, err, sizeof(err)), 0);
	c.tensors[2].data_offset = 5 * 4096; /* but must lie inside */
	CHECK_EQ(ckpt_table_check_layout(&c, 4 * 4096, 0, 0, err, sizeof(err)), -EBADMSG);
	c.tensors[2].data_offset = 8192;
	c.tensors[3].nbytes = UINT64_MAX - 4095; /* end overflows */
	CHECK_EQ(ckpt_table_check_layout(&c, UINT64_MAX, 0, 0, err, sizeof(err)), -EBADMSG);
	c.tensors[3].nbytes = 256;
	strcpy(c.tensors[3].name, "layer.0.weight"); /* same length: fits the pool */
	CHECK_EQ(ckpt_table_check_layout(&c, 4 * 4096, 0, 0, err, sizeof(err)), -EBADMSG);
	CHECK(strstr(err, "layer.0.weight") && strstr(err, "more than once"));
	ckpt_table_free(&c);
	ckpt_table_free(&c); /* free is idempotent */
	ckpt_table_free(NULL);

	/* ---- per-entry checks: the encoder refuses, the decoder refuses ---- */
	void (*mutations[])(void) = {
		m_slice_outside, m_offset_past, m_nbytes, m_misaligned, m_dtype,
		m_dtype0, m_name_slash, m_name_dotdot, m_name_ctrl, m_name_latin1, m_name_cut,
		m_name_c1, m_overflow,
		m_overflow_bytes, m_offset_overflow,
	};
	for (size_t i = 0; i < sizeof(mutations) / sizeof(mutations[0]); i++) {
		CHECK_EQ(encode_after(mutations[i]), -EINVAL);
		sample();
		mutations[i]();
		if (raw_decode() != -EBADMSG) {
			fprintf(stderr, "mutation %zu accepted by the decoder\n", i);
			check_failures++;
		}
	}
	sample();
	m_ndim();
	CHECK_EQ(ckpt_table_encode(ts, N, enc, sizeof(enc)), -EINVAL);

	/* The decoder that ckptd runs on a SAVE's table names the entry and
	 * the problem, quoting the name in printable ASCII. */
	sample();
	m_name_latin1();
	n = (ssize_t)raw_encode(ts, N, enc);
	err[0] = 'x';
	CHECK_EQ(ckpt_table_decode_why(enc, (size_t)n, &t, err, sizeof(err)), -CKPT_E_BAD_NAME);
	if (!strstr(err, "tensor 2 of") || !strstr(err, "\"caf\\xe9\"") ||
	    !strstr(err, "not valid UTF-8")) {
		fprintf(stderr, "decode_why: \"%s\"\n", err);
		check_failures++;
	}
	CHECK_EQ(ckpt_table_decode(enc, (size_t)n, &t), -EBADMSG);
	sample();
	strcpy(names[1], "gr\xc3\xb6\xc3\x9f" "e");
	n = ckpt_table_encode(ts, N, enc, sizeof(enc));
	CHECK(n > 0);
	CHECK_EQ(ckpt_table_decode_why(enc, (size_t)n, &t, err, sizeof(err)), 0);
	CHECK_EQ(err[0], '\0');
	ckpt_table_free(&t);

	/* ---- framing ---- */
	sample();
	n = ckpt_table_encode(ts, N, enc, sizeof(enc));
	for (ssize_t k = 0; k < n; k++)
		if (ckpt_table_decode(enc, (size_t)k, &t) == 0) {
			fprintf(stderr, "prefix %zd accepted\n", k);
			check_failures++;
			ckpt_table_free(&t);
		}
	enc[0] ^= 1;
	CHECK_EQ(ckpt_table_decode(enc, (size_t)n, &t), -EBADMSG);
	enc[0] ^= 1;
	enc[4] = 2;
	CHECK_EQ(ckpt_table_decode(enc, (size_t)n, &t), -EPROTONOSUPPORT);
	enc[4] = 1;
	enc[6] = 1; /* reserved */
	CHECK_EQ(ckpt_table_decode(enc, (size_t)n, &t), -EBADMSG);
	enc[6] = 0;
	enc[8] = N + 1; /* count lies */
	CHECK_EQ(ckpt_table_decode(enc, (size_t)n, &t), -EBADMSG);
	enc[8] = N - 1;
	CHECK_EQ(ckpt_table_decode(enc, (size_t)n, &t), -EBADMSG);
	enc[8] = N;
	memset(enc + 8, 0xff, 4); /* count over the limit */
	CHECK_EQ(ckpt_table_decode(enc, (size_t)n, &t), -E2BIG);
	enc[8] = N; enc[9] = enc[10] = enc[11] = 0;
	enc[16]++; /* total lies */
	CHECK_EQ(ckpt_table_decode(enc, (size_t)n, &t), -EBADMSG);
	enc[16]--;
	enc[n] = 0;
	enc[16] += 8; /* trailing bytes, covered by total */
	CHECK_EQ(ckpt_table_decode(enc, (size_t)n + 8, &t), -EBADMSG);
	enc[16] -= 8;
	enc[n - 1] = 'x'; /* padding after the last name */
	CHECK_EQ(ckpt_table_decode(enc, (size_t)n, &t), -EBADMSG);
	enc[n - 1] = 0;
	CHECK_EQ(ckpt_table_decode(enc, (size_t)n, &t), 0);
	ckpt_table_free(&t);

	/* Empty table. */
	n = ckpt_table_encode(NULL, 0, enc, sizeof(enc));
	CHECK_EQ(n, 24);
	CHECK_EQ(ckpt_table_decode(enc, (size_t)n, &t), 0);
	CHECK_EQ(t.count, 0);
	CHECK_EQ(ckpt_table_check_layout(&t, 0, 0, 0, err, sizeof(err)), 0);
	CHECK_EQ(ckpt_table_copy(&c, &t), 0);
	ckpt_table_free(&c);
	ckpt_table_free(&t);
	return check_result("test-table");
}
