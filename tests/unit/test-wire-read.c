/* SPDX-License-Identifier: MIT */
/*
 * READ_RANGES and READ_RANGES_OK (PROTOCOL.md, Semantics 13): the exact
 * bytes, round trips, packing reads into one packet (ckpt_msg_read_add),
 * and everything the decoder must refuse.
 */
#include <errno.h>
#include <string.h>

#include "check.h"
#include "proto.h"

static uint8_t buf[CKPT_MSG_MAX_BYTES];

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static struct ckpt_msg read_msg(uint64_t step)
{
	struct ckpt_msg m;

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_READ_RANGES;
	m.seq = 9;
	m.u.read_ranges.step = step;
	m.u.read_ranges.slot = 1;
	return m;
}

static void test_bytes(void)
{
	static const uint8_t want[] = {
		0x43, 0x4b, 0x50, 0x54, 0x01, 0x00, 0x11, 0x00, /* magic, version 1, type 17 */
		0x4d, 0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00, /* length 77, seq 9 */
		0x07, 0, 0, 0, 0, 0, 0, 0,                      /* step 7 */
		0x01, 0, 0, 0, 0x02, 0, 0, 0,                   /* slot 1, count 2 */
		0x03, 0, 0, 0,                                  /* rank 3 */
		0x00, 0x10, 0, 0, 0, 0, 0, 0,                   /* offset 4096 */
		0x08, 0, 0, 0, 0, 0, 0, 0,                      /* length 8 */
		0x01, 0x00, 'w',                                /* name "w" */
		0x00, 0, 0, 0,                                  /* rank 0 */
		0, 0, 0, 0, 0, 0, 0, 0,                         /* offset 0 */
		0, 0, 0, 0, 0, 0, 0, 0,                         /* length 0 */
		0x00, 0x00,                                     /* the blob */
	};
	struct ckpt_msg m = read_msg(7), out;
	ssize_t n;

	CHECK_EQ(ckpt_msg_read_add(&m, 3, "w", 4096, 8), 0);
	CHECK_EQ(ckpt_msg_read_add(&m, 0, NULL, 0, 0), 0);
	n = ckpt_msg_encode(&m, buf, sizeof(buf));
	CHECK_EQ(n, (ssize_t)sizeof(want));
	CHECK(n == (ssize_t)sizeof(want) && memcmp(buf, want, sizeof(want)) == 0);
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), 0);
	CHECK_EQ(out.u.read_ranges.count, 2);
	CHECK_EQ(out.u.read_ranges.items[0].rank, 3);
	CHECK_EQ(out.u.read_ranges.items[0].offset, 4096);
	CHECK_EQ(out.u.read_ranges.items[0].length, 8);
	CHECK(strcmp(out.u.read_ranges.names + out.u.read_ranges.items[0].name_off, "w") == 0);
	CHECK_EQ(out.u.read_ranges.items[1].name_len, 0);
	CHECK(strcmp(ckpt_msg_type_name(CKPT_MSG_READ_RANGES), "READ_RANGES") == 0);
	CHECK(strcmp(ckpt_msg_type_name(CKPT_MSG_READ_RANGES_OK), "READ_RANGES_OK") == 0);
	CHECK_EQ(ckpt_msg_fd_count(CKPT_MSG_READ_RANGES), 0);
	/* Every shorter prefix is refused, and so is a byte more. */
	for (ssize_t k = 0; k < n; k++) {
		put32(buf + 8, (uint32_t)k);
		CHECK(ckpt_msg_decode(buf, (size_t)k, &out) < 0);
	}
	memcpy(buf, want, sizeof(want));
	buf[sizeof(want)] = 0;
	put32(buf + 8, (uint32_t)sizeof(want) + 1);
	CHECK_EQ(ckpt_msg_decode(buf, sizeof(want) + 1, &out), -EBADMSG);
}

/* Reads are packed until the packet or the count is full. */
static void test_packing(void)
{
	char name[CKPT_TENSOR_NAME_MAX + 1];
	struct ckpt_msg m = read_msg(1), out;
	uint32_t added = 0;
	ssize_t n;

	memset(name, 'a', CKPT_TENSOR_NAME_MAX);
	name[CKPT_TENSOR_NAME_MAX] = '\0';
	while (ckpt_msg_read_add(&m, added, name, added, 1) == 0)
		added++;
	/* 32 + k * (22 + 255) <= 4096 */
	CHECK_EQ(added, (CKPT_MSG_MAX_BYTES - 32) / (22 + CKPT_TENSOR_NAME_MAX));
	n = ckpt_msg_encode(&m, buf, sizeof(buf));
	CHECK(n > 0 && n <= (ssize_t)CKPT_MSG_MAX_BYTES);
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), 0);
	CHECK_EQ(out.u.read_ranges.count, added);
	CHECK(strcmp(out.u.read_ranges.names + out.u.read_ranges.items[added - 1].name_off,
		     name) == 0);

	m = read_msg(1);
	added = 0;
	while (ckpt_msg_read_add(&m, 0, NULL, 0, 1) == 0)
		added++;
	CHECK_EQ(added, CKPT_READ_MAX);
	CHECK_EQ(ckpt_msg_read_add(&m, 0, NULL, 0, 1), -ENOSPC);
	n = ckpt_msg_encode(&m, buf, sizeof(buf));
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), 0);

	m = read_msg(1);
	CHECK_EQ(ckpt_msg_read_add(&m, 0, "a/b", 0, 1), -EINVAL);
	CHECK_EQ(ckpt_msg_read_add(&m, 0, "..", 0, 1), -EINVAL);
	CHECK_EQ(ckpt_msg_read_add(&m, 0, "w", UINT64_MAX, 2), -EINVAL);
	CHECK_EQ(m.u.read_ranges.count, 0);
	/* An empty READ_RANGES is not a message. */
	CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);
}

/* A valid one-read message, then one field spoiled. */
static ssize_t one_read(const char *name, uint64_t offset, uint64_t length)
{
	struct ckpt_msg m = read_msg(1);

	CHECK_EQ(ckpt_msg_read_add(&m, 0, name, offset, length), 0);
	return ckpt_msg_encode(&m, buf, sizeof(buf));
}

static void test_refused(void)
{
	struct ckpt_msg m, out;
	ssize_t n;

	/* Count 0 and count 65 on the wire. */
	n = one_read("w", 0, 1);
	put32(buf + 28, 0);
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), -EBADMSG);
	put32(buf + 28, CKPT_READ_MAX + 1);
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), -EBADMSG);
	/* No slot, no step. */
	n = one_read("w", 0, 1);
	put32(buf + 24, CKPT_NO_SLOT);
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), -EBADMSG);
	n = one_read("w", 0, 1);
	put64(buf + 16, CKPT_NO_STEP);
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), -EBADMSG);
	/* A step above the range is -ERANGE, with the step kept. */
	n = one_read("w", 0, 1);
	put64(buf + 16, CKPT_STEP_MAX + 1);
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), -ERANGE);
	CHECK_EQ(out.type, CKPT_MSG_READ_RANGES);
	CHECK(out.u.step.step == CKPT_STEP_MAX + 1);
	/* offset + length overflowing. */
	n = one_read("w", 0, 1);
	put64(buf + 36, UINT64_MAX);
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), -EBADMSG);
	/* A name that is not a tensor name: '/', NUL, a bad UTF-8 byte. */
	n = one_read("wa", 0, 1);
	buf[n - 1] = '/';
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), -EBADMSG);
	buf[n - 1] = '\0';
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), -EBADMSG);
	buf[n - 1] = (char)0xff;
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), -EBADMSG);
	/* The lengths of two reads summing past 64 bits. */
	m = read_msg(1);
	CHECK_EQ(ckpt_msg_read_add(&m, 0, NULL, 0, UINT64_MAX / 2 + 1), 0);
	CHECK_EQ(ckpt_msg_read_add(&m, 1, NULL, 0, UINT64_MAX / 2 + 1), 0);
	CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);

	/* READ_RANGES_OK: a positive result, count 0, round trip. */
	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_READ_RANGES_OK;
	m.seq = 3;
	m.u.read_ranges_ok.step = 5;
	m.u.read_ranges_ok.slot = 0;
	m.u.read_ranges_ok.count = 2;
	m.u.read_ranges_ok.results[0].total = 12;
	m.u.read_ranges_ok.results[1].result = -CKPT_E_CORRUPT;
	strcpy(m.u.read_ranges_ok.message, "a/step-0000000005/rank-000001.shard: chunk 0");
	n = ckpt_msg_encode(&m, buf, sizeof(buf));
	CHECK_EQ(n, 16 + 18 + 12 * 2 + (ssize_t)strlen(m.u.read_ranges_ok.message));
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), 0);
	CHECK_EQ(out.u.read_ranges_ok.results[1].result, -CKPT_E_CORRUPT);
	CHECK_EQ(out.u.read_ranges_ok.results[0].total, 12);
	CHECK(strcmp(out.u.read_ranges_ok.message, m.u.read_ranges_ok.message) == 0);
	put32(buf + 32, 1);
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), -EBADMSG);
	m.u.read_ranges_ok.results[0].result = 1;
	CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);
	m.u.read_ranges_ok.results[0].result = 0;
	m.u.read_ranges_ok.count = 0;
	CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);
}

static void test_feature(void)
{
	struct ckpt_msg m;

	ckpt_msg_features_notice(&m, CKPT_FEATURE_READ);
	CHECK(strcmp(m.u.status.reason, "read_ranges") == 0);
	CHECK_EQ(ckpt_features_parse("stall read_ranges"), CKPT_FEATURE_STALL | CKPT_FEATURE_READ);
	CHECK_EQ(ckpt_features_parse("read_range read"), 0);
}

int main(void)
{
	test_bytes();
	test_packing();
	test_refused();
	test_feature();
	return check_result("test-wire-read");
}
