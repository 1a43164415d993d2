/* SPDX-License-Identifier: MIT */
/* CRC-32C: known vectors, chaining, and crc(A||B) from crc(A), crc(B). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "proto.h"

static uint32_t slow_crc32c(const uint8_t *p, size_t n)
{
	uint32_t c = 0xffffffffu;

	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
	}
	return ~c;
}

int main(void)
{
	static const uint8_t zeros32[32], ones32[32] = {
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	uint8_t inc[32];
	uint8_t *buf;
	size_t n = 1 << 20;

	CHECK_EQ(ckpt_crc32c(0, "123456789", 9), 0xe3069283u);
	CHECK_EQ(ckpt_crc32c(0, "", 0), 0);
	CHECK_EQ(ckpt_crc32c(0x12345678u, "", 0), 0x12345678u);
	/* RFC 3720, B.4 */
	for (int i = 0; i < 32; i++)
		inc[i] = (uint8_t)i;
	CHECK_EQ(ckpt_crc32c(0, zeros32, 32), 0x8a9136aau);
	CHECK_EQ(ckpt_crc32c(0, ones32, 32), 0x62a8ab43u);
	CHECK_EQ(ckpt_crc32c(0, inc, 32), 0x46dd794eu);

	buf = malloc(n);
	if (!buf)
		return 1;
	srand(42);
	for (size_t i = 0; i < n; i++)
		buf[i] = (uint8_t)rand();
	uint32_t whole = ckpt_crc32c(0, buf, n);
	CHECK_EQ(whole, slow_crc32c(buf, n));

	/* Chaining and combining at assorted split points. */
	size_t splits[] = { 0, 1, 3, 7, 8, 63, 4096, 65537, n / 2, n - 1, n };
	for (size_t i = 0; i < sizeof(splits) / sizeof(splits[0]); i++) {
		size_t a = splits[i];
		uint32_t ca = ckpt_crc32c(0, buf, a);
		uint32_t cb = ckpt_crc32c(0, buf + a, n - a);

		CHECK_EQ(ckpt_crc32c(ca, buf + a, n - a), whole);
		CHECK_EQ(ckpt_crc32c_combine(ca, cb, n - a), whole);
	}
	/* Three pieces, combined left to right. */
	uint32_t c1 = ckpt_crc32c(0, buf, 1000);
	uint32_t c2 = ckpt_crc32c(0, buf + 1000, 5000);
	uint32_t c3 = ckpt_crc32c(0, buf + 6000, n - 6000);
	CHECK_EQ(ckpt_crc32c_combine(ckpt_crc32c_combine(c1, c2, 5000), c3, n - 6000), whole);
	free(buf);
	return check_result("test-crc");
}
