/* SPDX-License-Identifier: MIT */
/*
 * The optional STALL message and the features notice (PROTOCOL.md,
 * "Extensions within version 1"): the exact bytes, the value limits (NaN,
 * infinities, negative, -0, a day or more are malformed, both to the
 * decoder and to the encoder), and the token list.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "proto.h"

static uint8_t buf[CKPT_MSG_MAX_BYTES];

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t bits_of(double v)
{
	uint64_t b;

	memcpy(&b, &v, sizeof(b));
	return b;
}

static struct ckpt_msg stall(uint64_t step, double seconds)
{
	struct ckpt_msg m;

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_STALL;
	m.seq = 77;
	m.u.stall.step = step;
	m.u.stall.seconds = seconds;
	return m;
}

/* A valid STALL of `step` with its seconds field replaced by raw bits. */
static int decode_with_bits(uint64_t step, uint64_t bits)
{
	struct ckpt_msg m = stall(step, 1.0), out;
	ssize_t n = ckpt_msg_encode(&m, buf, sizeof(buf));

	if (n != 32)
		return -1000;
	put64(buf + 24, bits);
	return ckpt_msg_decode(buf, (size_t)n, &out);
}

static void test_bytes(void)
{
	/* 0.25 s is 0x3fd0000000000000. */
	static const uint8_t want[32] = {
		0x43, 0x4b, 0x50, 0x54, 0x01, 0x00, 0x0f, 0x00, /* magic, version 1, type 15 */
		0x20, 0x00, 0x00, 0x00, 0x4d, 0x00, 0x00, 0x00, /* length 32, seq 77 */
		0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* step 42 */
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xd0, 0x3f, /* seconds 0.25 */
	};
	struct ckpt_msg m = stall(42, 0.25), out;
	ssize_t n = ckpt_msg_encode(&m, buf, sizeof(buf));

	CHECK_EQ(n, 32);
	CHECK(memcmp(buf, want, sizeof(want)) == 0);
	CHECK_EQ(ckpt_msg_decode(want, sizeof(want), &out), 0);
	CHECK_EQ(out.type, CKPT_MSG_STALL);
	CHECK_EQ(out.seq, 77);
	CHECK_EQ(out.u.stall.step, 42);
	CHECK(out.u.stall.seconds == 0.25);
	CHECK(strcmp(ckpt_msg_type_name(CKPT_MSG_STALL), "STALL") == 0);
	CHECK_EQ(ckpt_msg_fd_count(CKPT_MSG_STALL), 0);
	/* Trailing bytes and a short body are malformed. */
	CHECK_EQ(ckpt_msg_decode(want, 31, &out), -EBADMSG);
	memcpy(buf, want, 32);
	buf[8] = 31;
	CHECK_EQ(ckpt_msg_decode(buf, 31, &out), -EBADMSG);
	buf[32] = 0;
	buf[8] = 33;
	CHECK_EQ(ckpt_msg_decode(buf, 33, &out), -EBADMSG);
}

static void test_values(void)
{
	struct ckpt_msg m, out;
	static const double good[] = {
		0.0, 5e-324 /* smallest subnormal */, 1e-6, 0.1, 59.9, 3600, 86399.999,
	};
	static const double bad[] = {
		-0.0, -1e-9, -1, 86400.0, 1e300, HUGE_VAL, -HUGE_VAL,
	};

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		ssize_t n;

		m = stall(1, good[i]);
		n = ckpt_msg_encode(&m, buf, sizeof(buf));
		CHECK_EQ(n, 32);
		CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), 0);
		CHECK(bits_of(out.u.stall.seconds) == bits_of(good[i]));
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		m = stall(1, bad[i]);
		CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);
		CHECK_EQ(decode_with_bits(1, bits_of(bad[i])), -EBADMSG);
	}
	m = stall(1, NAN);
	CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);
	/* Every NaN: quiet, signalling, negative, with payload. */
	CHECK_EQ(decode_with_bits(1, 0x7ff8000000000000ull), -EBADMSG);
	CHECK_EQ(decode_with_bits(1, 0x7ff0000000000001ull), -EBADMSG);
	CHECK_EQ(decode_with_bits(1, 0xfff8000000000000ull), -EBADMSG);
	CHECK_EQ(decode_with_bits(1, 0x7fffffffffffffffull), -EBADMSG);
	CHECK_EQ(decode_with_bits(1, 0xffffffffffffffffull), -EBADMSG);
	/* The step is checked too. */
	m = stall(CKPT_NO_STEP, 1.0);
	CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);
	CHECK_EQ(decode_with_bits(CKPT_NO_STEP, bits_of(1.0)), -1000);
	CHECK_EQ(decode_with_bits(0, bits_of(1.0)), 0);
}

static void test_notice(void)
{
	struct ckpt_msg m, out;
	ssize_t n;

	ckpt_msg_features_notice(&m, CKPT_FEATURES_KNOWN | 0x80000000u);
	CHECK(strcmp(m.u.status.reason, "stall agree read_ranges") == 0);
	CHECK(ckpt_msg_is_features_notice(&m));
	/* An ordinary STATUS to the decoder, so v1 clients accept it. */
	n = ckpt_msg_encode(&m, buf, sizeof(buf));
	CHECK(n > 0);
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), 0);
	CHECK(ckpt_msg_is_features_notice(&out));
	CHECK_EQ(ckpt_features_parse(out.u.status.reason), CKPT_FEATURES_KNOWN);

	ckpt_msg_features_notice(&m, 0);
	CHECK(strcmp(m.u.status.reason, "") == 0);
	CHECK(ckpt_msg_is_features_notice(&m));
	CHECK_EQ(ckpt_features_parse(m.u.status.reason), 0);

	/* Not a notice: any other step, state, error, slot or seq. */
	ckpt_msg_features_notice(&m, CKPT_FEATURE_STALL);
	out = m;
	out.u.status.step = 7;
	CHECK(!ckpt_msg_is_features_notice(&out));
	out = m;
	out.u.status.state = CKPT_STATE_FAILED;
	CHECK(!ckpt_msg_is_features_notice(&out));
	out = m;
	out.u.status.error = -1;
	CHECK(!ckpt_msg_is_features_notice(&out));
	out = m;
	out.u.status.slot_freed = 0;
	CHECK(!ckpt_msg_is_features_notice(&out));
	out = m;
	out.seq = 3;
	CHECK(!ckpt_msg_is_features_notice(&out));
	out = m;
	out.type = CKPT_MSG_ERROR;
	CHECK(!ckpt_msg_is_features_notice(&out));
	CHECK(!ckpt_msg_is_features_notice(NULL));

	/* Tokens: unknown and malformed ones are skipped. */
	CHECK_EQ(ckpt_features_parse(NULL), 0);
	CHECK_EQ(ckpt_features_parse(""), 0);
	CHECK_EQ(ckpt_features_parse("stall"), CKPT_FEATURE_STALL);
	CHECK_EQ(ckpt_features_parse("zstd stall resume_v2"), CKPT_FEATURE_STALL);
	CHECK_EQ(ckpt_features_parse("  stall  "), CKPT_FEATURE_STALL);
	CHECK_EQ(ckpt_features_parse("zstd resume"), 0);
	CHECK_EQ(ckpt_features_parse("stalls"), 0);
	CHECK_EQ(ckpt_features_parse("stal"), 0);
	CHECK_EQ(ckpt_features_parse("STALL"), 0);
	CHECK_EQ(ckpt_features_parse("stall,x"), 0);
	CHECK_EQ(ckpt_features_parse("stall\tx"), 0);
	CHECK_EQ(ckpt_features_parse("agree"), CKPT_FEATURE_AGREE);
	CHECK_EQ(ckpt_features_parse("stall agree"), CKPT_FEATURE_STALL | CKPT_FEATURE_AGREE);
	CHECK_EQ(ckpt_features_parse("agreed"), 0);
}

/* RESTORE_AGREED (16): RESTORE's body and checks, its own type. */
static void test_restore_agreed(void)
{
	struct ckpt_msg m, out;
	ssize_t n;

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_RESTORE_AGREED;
	m.seq = 9;
	m.u.restore.step = CKPT_NO_STEP;
	m.u.restore.slot = 1;
	m.u.restore.flags = CKPT_RESTORE_F_EXACT;
	n = ckpt_msg_encode(&m, buf, sizeof(buf));
	CHECK_EQ(n, 16 + 16);
	CHECK_EQ(buf[6], 16);
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), 0);
	CHECK_EQ(out.type, CKPT_MSG_RESTORE_AGREED);
	CHECK(out.u.restore.step == CKPT_NO_STEP && out.u.restore.slot == 1 &&
	      out.u.restore.flags == CKPT_RESTORE_F_EXACT);
	CHECK(strcmp(ckpt_msg_type_name(CKPT_MSG_RESTORE_AGREED), "RESTORE_AGREED") == 0);
	m.u.restore.flags = 2;
	CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);
	m.u.restore.flags = 0;
	m.u.restore.slot = CKPT_NO_SLOT;
	CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);
	CHECK_EQ(ckpt_msg_fd_count(CKPT_MSG_RESTORE_AGREED), 0);
}

int main(void)
{
	test_bytes();
	test_values();
	test_notice();
	test_restore_agreed();
	return check_result("test-wire-stall");
}
