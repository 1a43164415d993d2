/* SPDX-License-Identifier: MIT */
/* Wire messages: every type round-trips; every malformed form is refused. */
#include <errno.h>
#include <string.h>

#include "check.h"
#include "proto.h"

static uint8_t buf[CKPT_MSG_MAX_BYTES + 64];

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

/* Encode m, overwrite the u64 at byte off with step, decode into *out. */
static int decode_with_step(const struct ckpt_msg *m, size_t off, uint64_t step,
			    struct ckpt_msg *out)
{
	ssize_t n = ckpt_msg_encode(m, buf, sizeof(buf));

	if (n < (ssize_t)(off + 8))
		return -1000000;
	put64(buf + off, step);
	return ckpt_msg_decode(buf, (size_t)n, out);
}

/*
 * Step numbers are 0..9999999999 (FORMAT.md, "Step numbers"): a message
 * naming a larger one is -ERANGE, with the type, seq and step kept for the
 * refusal, and nothing can encode one.
 */
static int check_step_range(void)
{
	static const uint32_t types[] = {
		CKPT_MSG_SAVE, CKPT_MSG_SAVE_OK, CKPT_MSG_SKIP, CKPT_MSG_QUERY, CKPT_MSG_STALL,
		CKPT_MSG_RESTORE, CKPT_MSG_RESTORE_OK, CKPT_MSG_STATUS,
	};
	const uint64_t max = 9999999999ull;
	struct ckpt_msg m, out;
	int failed = 0;

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		memset(&m, 0, sizeof(m));
		m.type = types[i];
		m.seq = 41;
		m.u.step.step = 5; /* every one of these bodies starts with its step */
		switch (types[i]) {
		case CKPT_MSG_SAVE:
			m.u.save.data_bytes = m.u.save.table_offset = 4096;
			m.u.save.table_bytes = 64;
			break;
		case CKPT_MSG_RESTORE_OK:
			m.u.restore_ok.data_bytes = m.u.restore_ok.table_offset = 4096;
			m.u.restore_ok.table_bytes = 64;
			break;
		case CKPT_MSG_STALL:
			m.u.stall.seconds = 0.5;
			break;
		case CKPT_MSG_STATUS:
			m.u.status.state = CKPT_STATE_FAILED;
			m.u.status.error = -5;
			break;
		}
		int r0 = decode_with_step(&m, 16, max, &out);
		int r1 = decode_with_step(&m, 16, max + 1, &out);
		bool kept = out.type == types[i] && out.seq == 41 && out.u.step.step == max + 1;
		int r2 = decode_with_step(&m, 16, UINT64_MAX - 1, &out);
		if (r0 != 0 || r1 != -ERANGE || !kept || r2 != -ERANGE) {
			fprintf(stderr, "%s: step %llu -> %d, %llu -> %d (kept %d), %llu -> %d\n",
				ckpt_msg_type_name(types[i]), (unsigned long long)max, r0,
				(unsigned long long)max + 1, r1, kept,
				(unsigned long long)UINT64_MAX - 1, r2);
			failed++;
		}
		m.u.step.step = max + 1;
		if (ckpt_msg_encode(&m, buf, sizeof(buf)) != -EINVAL) {
			fprintf(stderr, "%s of step %llu encodes\n", ckpt_msg_type_name(types[i]),
				(unsigned long long)max + 1);
			failed++;
		}
	}
	/* "No step" stays what it was where a field allows it. */
	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_RESTORE;
	m.u.restore.step = CKPT_NO_STEP;
	CHECK_EQ(decode_with_step(&m, 16, CKPT_NO_STEP, &out), 0);
	m.type = CKPT_MSG_SKIP;
	m.u.step.step = 5;
	CHECK_EQ(decode_with_step(&m, 16, CKPT_NO_STEP, &out), -EBADMSG);
	/* HELLO_OK's latest step, a LIST_OK's steps. */
	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_HELLO_OK;
	m.u.hello_ok.slots = 1;
	m.u.hello_ok.slot_bytes = m.u.hello_ok.arena_bytes = 1u << 20;
	m.u.hello_ok.chunk_bytes = 1u << 20;
	m.u.hello_ok.latest_step = CKPT_NO_STEP;
	CHECK_EQ(decode_with_step(&m, 48, max, &out), 0);
	CHECK_EQ(decode_with_step(&m, 48, max + 1, &out), -EBADMSG);
	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_LIST_OK;
	m.u.list_ok.total = m.u.list_ok.count = 1;
	m.u.list_ok.steps[0] = 7;
	CHECK_EQ(decode_with_step(&m, 24, max, &out), 0);
	CHECK_EQ(decode_with_step(&m, 24, max + 1, &out), -EBADMSG);
	return failed;
}

static int roundtrip(const struct ckpt_msg *m)
{
	struct ckpt_msg out;
	ssize_t n = ckpt_msg_encode(m, buf, sizeof(buf));

	if (n < (ssize_t)CKPT_WIRE_HDR_BYTES) {
		fprintf(stderr, "encode %s: %zd\n", ckpt_msg_type_name(m->type), n);
		return -1;
	}
	if (ckpt_msg_decode(buf, (size_t)n, &out) != 0) {
		fprintf(stderr, "decode %s failed\n", ckpt_msg_type_name(m->type));
		return -1;
	}
	if (memcmp(&out, m, sizeof(out)) != 0) {
		fprintf(stderr, "%s does not round-trip\n", ckpt_msg_type_name(m->type));
		return -1;
	}
	/* Every proper prefix is refused: the length field disagrees. */
	for (ssize_t k = 0; k < n; k++)
		if (ckpt_msg_decode(buf, (size_t)k, &out) != -EBADMSG) {
			fprintf(stderr, "%s: prefix of %zd accepted\n", ckpt_msg_type_name(m->type), k);
			return -1;
		}
	return (int)n;
}

/* Encode m, let fix() damage it, expect decode to return want. */
static int decode_of(const struct ckpt_msg *m, void (*fix)(uint8_t *, size_t *))
{
	struct ckpt_msg out;
	size_t n = (size_t)ckpt_msg_encode(m, buf, sizeof(buf));

	fix(buf, &n);
	return ckpt_msg_decode(buf, n, &out);
}

static void bad_magic(uint8_t *p, size_t *n) { p[0] ^= 1; (void)n; }
static void bad_version(uint8_t *p, size_t *n) { put16(p + 4, 2); (void)n; }
static void bad_version0(uint8_t *p, size_t *n) { put16(p + 4, 0); (void)n; }
static void bad_type(uint8_t *p, size_t *n) { put16(p + 6, 99); (void)n; }
static void type_zero(uint8_t *p, size_t *n) { put16(p + 6, 0); (void)n; }
static void len_long(uint8_t *p, size_t *n) { put32(p + 8, (uint32_t)*n + 1); }
static void len_short(uint8_t *p, size_t *n) { put32(p + 8, (uint32_t)*n - 1); }
static void len_huge(uint8_t *p, size_t *n) { put32(p + 8, 0xffffffffu); (void)n; }
static void trailing(uint8_t *p, size_t *n) { p[*n] = 0; (*n)++; put32(p + 8, (uint32_t)*n); }
static void truncate1(uint8_t *p, size_t *n) { (*n)--; put32(p + 8, (uint32_t)*n); }
static void oversize(uint8_t *p, size_t *n)
{
	memset(p + *n, 0, CKPT_MSG_MAX_BYTES + 1 - *n);
	*n = CKPT_MSG_MAX_BYTES + 1;
	put32(p + 8, (uint32_t)*n);
}
/* The first string of a HELLO starts right after the header. */
static void str_len_up(uint8_t *p, size_t *n) { put16(p + 16, (uint16_t)(p[16] + 1)); (void)n; }
static void str_nul(uint8_t *p, size_t *n) { p[18 + 1] = 0; (void)n; }
static void nothing(uint8_t *p, size_t *n) { (void)p; (void)n; }

static struct ckpt_msg hello(void)
{
	struct ckpt_msg m;

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_HELLO;
	m.seq = 7;
	strcpy(m.u.hello.job, "llama");
	m.u.hello.rank = 3;
	m.u.hello.world_size = 8;
	m.u.hello.local_rank = 1;
	m.u.hello.max_save_bytes = 1ull << 33;
	m.u.hello.pid = 4242;
	return m;
}

int main(void)
{
	struct ckpt_msg m, out;
	ssize_t n;

	/* ---- round trips ---- */
	m = hello();
	CHECK(roundtrip(&m) > 0);
	memset(m.u.hello.job, 'j', CKPT_JOB_NAME_MAX);
	CHECK(roundtrip(&m) > 0);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_HELLO_OK;
	m.seq = 7;
	m.u.hello_ok.slots = 3;
	m.u.hello_ok.flags = CKPT_HELLO_F_SKIP_POLICY;
	m.u.hello_ok.slot_bytes = 2u << 20;
	m.u.hello_ok.arena_bytes = 6u << 20;
	m.u.hello_ok.chunk_bytes = 4u << 20;
	m.u.hello_ok.latest_step = CKPT_NO_STEP;
	CHECK(roundtrip(&m) > 0);
	CHECK_EQ(ckpt_msg_fd_count(CKPT_MSG_HELLO_OK), 1);
	CHECK_EQ(ckpt_msg_fd_count(CKPT_MSG_HELLO), 0);
	m.u.hello_ok.arena_bytes++;
	CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_SAVE;
	m.seq = 8;
	m.u.save.step = 100;
	m.u.save.slot = 1;
	m.u.save.data_bytes = 3 * 4096;
	m.u.save.table_offset = 3 * 4096;
	m.u.save.table_bytes = 200;
	m.u.save.blob_offset = 2 * 4096;
	m.u.save.blob_bytes = 17;
	CHECK(roundtrip(&m) > 0);
	out = m;
	out.u.save.blob_offset = 100; /* misaligned */
	CHECK_EQ(ckpt_msg_encode(&out, buf, sizeof(buf)), -EINVAL);
	out = m;
	out.u.save.table_offset = 4096; /* inside the data */
	CHECK_EQ(ckpt_msg_encode(&out, buf, sizeof(buf)), -EINVAL);
	out = m;
	out.u.save.blob_offset = 3 * 4096; /* blob past data_bytes */
	CHECK_EQ(ckpt_msg_encode(&out, buf, sizeof(buf)), -EINVAL);
	out = m;
	out.u.save.table_offset = UINT64_MAX - 4095; /* end overflows */
	out.u.save.table_bytes = 8192;
	CHECK_EQ(ckpt_msg_encode(&out, buf, sizeof(buf)), -EINVAL);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_SAVE_OK;
	m.seq = 8;
	m.u.save_ok.step = 100;
	m.u.save_ok.slot = 1;
	CHECK_EQ(roundtrip(&m), 16 + 12);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_STATUS;
	m.u.status.step = 100;
	m.u.status.state = CKPT_STATE_FAILED;
	m.u.status.error = -CKPT_E_ABORTED;
	m.u.status.slot_freed = 1;
	strcpy(m.u.status.reason, "rank 2 disconnected");
	CHECK(roundtrip(&m) > 0);
	memset(m.u.status.reason, 'r', CKPT_REASON_MAX);
	CHECK(roundtrip(&m) > 0);
	m.u.status.state = 6;
	CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);
	m.u.status.state = CKPT_STATE_DURABLE;
	m.u.status.error = 5;
	CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);
	m.u.status.error = 0;
	memset(m.u.status.reason, 'r', sizeof(m.u.status.reason)); /* no NUL */
	CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_SKIP;
	m.u.step.step = 5;
	CHECK_EQ(roundtrip(&m), 24);
	m.type = CKPT_MSG_QUERY;
	CHECK_EQ(roundtrip(&m), 24);
	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_LIST;
	CHECK_EQ(roundtrip(&m), 16);
	m.type = CKPT_MSG_BYE;
	CHECK_EQ(roundtrip(&m), 16);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_LIST_OK;
	CHECK(roundtrip(&m) > 0); /* empty */
	m.u.list_ok.total = 1000;
	m.u.list_ok.count = CKPT_LIST_MAX;
	for (uint32_t i = 0; i < CKPT_LIST_MAX; i++)
		m.u.list_ok.steps[i] = 1000 + 10 * i;
	n = roundtrip(&m);
	CHECK_EQ(n, 16 + 8 + 8 * CKPT_LIST_MAX);
	out = m;
	out.u.list_ok.total = 10;
	CHECK_EQ(ckpt_msg_encode(&out, buf, sizeof(buf)), -EINVAL); /* count > total */
	out = m;
	out.u.list_ok.count = CKPT_LIST_MAX + 1;
	CHECK_EQ(ckpt_msg_encode(&out, buf, sizeof(buf)), -EINVAL);
	out = m;
	out.u.list_ok.steps[5] = out.u.list_ok.steps[4];
	CHECK_EQ(ckpt_msg_encode(&out, buf, sizeof(buf)), -EINVAL); /* not ascending */
	out = m;
	out.u.list_ok.count = 3; /* partial, but not the newest 400 */
	CHECK_EQ(ckpt_msg_encode(&out, buf, sizeof(buf)), -EINVAL);
	/* A count over the limit on the wire. */
	n = ckpt_msg_encode(&m, buf, sizeof(buf));
	put32(buf + 20, CKPT_LIST_MAX + 1);
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), -EBADMSG);
	put32(buf + 16, 0xffffffffu);
	put32(buf + 20, 0xffffffffu);
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), -EBADMSG);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_RESTORE;
	m.u.restore.step = CKPT_NO_STEP;
	m.u.restore.slot = 0;
	m.u.restore.flags = CKPT_RESTORE_F_EXACT;
	CHECK(roundtrip(&m) > 0);
	m.u.restore.flags = 2;
	CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_RESTORE_OK;
	m.u.restore_ok.step = 90;
	m.u.restore_ok.slot = 2;
	m.u.restore_ok.flags = CKPT_RESTORE_OK_F_FELL_BACK;
	m.u.restore_ok.data_bytes = 8192;
	m.u.restore_ok.table_offset = 8192;
	m.u.restore_ok.table_bytes = 100;
	strcpy(m.u.restore_ok.warning, "step 100 rank 0: chunk 3 checksum mismatch");
	CHECK(roundtrip(&m) > 0);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_RELEASE;
	m.u.release.slot = 2;
	CHECK_EQ(roundtrip(&m), 20);
	m.u.release.slot = CKPT_NO_SLOT;
	CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_ERROR;
	m.u.error.code = -CKPT_E_PROTOCOL;
	strcpy(m.u.error.message, "second HELLO");
	CHECK(roundtrip(&m) > 0);
	m.u.error.code = 0;
	CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);

	/* ---- encoder limits ---- */
	m = hello();
	CHECK_EQ(ckpt_msg_encode(&m, buf, 10), -ENOBUFS);
	m.type = 99;
	CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);
	m = hello();
	memset(m.u.hello.job, 'j', sizeof(m.u.hello.job)); /* 129 bytes, no NUL */
	CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);
	m = hello();
	m.u.hello.rank = 8;
	CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);
	m = hello();
	m.u.hello.world_size = 0;
	m.u.hello.rank = 0;
	CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);
	m = hello();
	strcpy(m.u.hello.job, "../etc");
	CHECK_EQ(ckpt_msg_encode(&m, buf, sizeof(buf)), -EINVAL);

	/* ---- malformed on the wire ---- */
	m = hello();
	CHECK_EQ(decode_of(&m, nothing), 0);
	CHECK_EQ(decode_of(&m, bad_magic), -EBADMSG);
	CHECK_EQ(decode_of(&m, bad_version), -EPROTONOSUPPORT);
	CHECK_EQ(decode_of(&m, bad_version0), -EPROTONOSUPPORT);
	CHECK_EQ(decode_of(&m, bad_type), -EBADMSG);
	CHECK_EQ(decode_of(&m, type_zero), -EBADMSG);
	CHECK_EQ(decode_of(&m, len_long), -EBADMSG);
	CHECK_EQ(decode_of(&m, len_short), -EBADMSG);
	CHECK_EQ(decode_of(&m, len_huge), -EBADMSG);
	CHECK_EQ(decode_of(&m, trailing), -EBADMSG);
	CHECK_EQ(decode_of(&m, truncate1), -EBADMSG);
	CHECK_EQ(decode_of(&m, oversize), -E2BIG);
	CHECK_EQ(decode_of(&m, str_len_up), -EBADMSG);
	CHECK_EQ(decode_of(&m, str_nul), -EBADMSG);
	m.type = CKPT_MSG_BYE;
	CHECK_EQ(decode_of(&m, trailing), -EBADMSG);
	CHECK_EQ(decode_of(&m, truncate1), -EBADMSG);

	/* A HELLO whose job string claims 129 bytes (and has them). */
	memset(buf, 0, sizeof(buf));
	put32(buf, CKPT_WIRE_MAGIC);
	put16(buf + 4, 1);
	put16(buf + 6, CKPT_MSG_HELLO);
	put16(buf + 16, 129);
	memset(buf + 18, 'j', 129);
	n = 18 + 129 + 4 * 4 + 8 + 4;
	put32(buf + 18 + 129 + 4, 1); /* world_size */
	put32(buf + 8, (uint32_t)n);
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), -EBADMSG);
	/* The same with 128 bytes is fine. */
	memmove(buf + 18 + 128, buf + 18 + 129, (size_t)n - 18 - 129);
	put16(buf + 16, 128);
	put32(buf + 8, (uint32_t)(n - 1));
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)(n - 1), &out), 0);

	/* A STATUS whose reason claims 256 bytes. */
	memset(buf, 0, sizeof(buf));
	put32(buf, CKPT_WIRE_MAGIC);
	put16(buf + 4, 1);
	put16(buf + 6, CKPT_MSG_STATUS);
	put16(buf + 16 + 20, 256);
	memset(buf + 16 + 22, 'r', 256);
	n = 16 + 22 + 256;
	put32(buf + 8, (uint32_t)n);
	CHECK_EQ(ckpt_msg_decode(buf, (size_t)n, &out), -EBADMSG);

	CHECK_EQ(check_step_range(), 0);

	CHECK(strcmp(ckpt_msg_type_name(CKPT_MSG_RESTORE_OK), "RESTORE_OK") == 0);
	CHECK(strcmp(ckpt_msg_type_name(0), "UNKNOWN") == 0);
	CHECK(strcmp(ckpt_msg_type_name(1234), "UNKNOWN") == 0);
	return check_result("test-wire");
}
