/* SPDX-License-Identifier: MIT */
#include <isa-l/crc.h>

#include "proto.h"

/*
 * ISA-L's crc32_iscsi() neither pre- nor post-inverts, so the standard
 * CRC-32C is ~crc32_iscsi(buf, len, ~crc). Its length is an int: feed it
 * in pieces.
 */
uint32_t ckpt_crc32c(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint32_t c = ~crc;

	while (len > 0) {
		size_t n = len > (size_t)(1u << 30) ? (size_t)(1u << 30) : len;

		c = crc32_iscsi((unsigned char *)p, (int)n, c);
		p += n;
		len -= n;
	}
	return ~c;
}

/* Reflected Castagnoli polynomial. */
#define CRC32C_POLY 0x82f63b78u

static uint32_t gf2_matrix_times(const uint32_t *mat, uint32_t vec)
{
	uint32_t sum = 0;

	for (; vec; vec >>= 1, mat++)
		if (vec & 1)
			sum ^= *mat;
	return sum;
}

static void gf2_matrix_square(uint32_t *square, const uint32_t *mat)
{
	for (int n = 0; n < 32; n++)
		square[n] = gf2_matrix_times(mat, mat[n]);
}

/*
 * Appending len_b bytes to A multiplies crc(A) by x^(8 len_b) modulo the
 * polynomial; the pre/post inversions cancel out, so
 * crc(A || B) = crc(A) * x^(8 len_b) ^ crc(B). The multiplication is done by
 * repeatedly squaring the "shift by one zero bit" operator (as in zlib).
 */
uint32_t ckpt_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
	uint32_t even[32], odd[32];
	uint32_t row = 1;

	if (len_b == 0)
		return crc_a;

	odd[0] = CRC32C_POLY; /* operator for one zero bit */
	for (int n = 1; n < 32; n++) {
		odd[n] = row;
		row <<= 1;
	}
	gf2_matrix_square(even, odd); /* two zero bits */
	gf2_matrix_square(odd, even); /* four zero bits */

	do {
		gf2_matrix_square(even, odd);
		if (len_b & 1)
			crc_a = gf2_matrix_times(even, crc_a);
		len_b >>= 1;
		if (len_b == 0)
			break;
		gf2_matrix_square(odd, even);
		if (len_b & 1)
			crc_a = gf2_matrix_times(odd, crc_a);
		len_b >>= 1;
	} while (len_b != 0);

	return crc_a ^ crc_b;
}
