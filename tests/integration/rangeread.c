/* SPDX-License-Identifier: MIT */
/*
 * ckpt-test-rangeread: ranged reads of other ranks' items (ckpt_read_ranges)
 * against a real ckptd, driven by rangeread.sh.
 *
 *   --save:    ranks 0..2 of a world of 3 (one context each, in this
 *              process) save steps 10 and 20, each rank its own tensors
 *              and blob; step 30 is left open (rank 2 never saves it) and
 *              read while open; then the ranks leave.
 *   --read:    a rank of a world of 2 (another world size: resharding)
 *              reads slices of every rank's tensors and blobs of step 10
 *              and 20 and compares them byte for byte, including reads
 *              longer than its slot; then the bad cases.
 *   --old-daemon: against a stand-in for an older ckptd (this process
 *              serves the socket; its features notice lacks "read_ranges"):
 *              -EOPNOTSUPP and a reason saying ckptd is too old.
 *   --corrupt: after rangeread.sh flipped a byte at offset 100 of step 10's
 *              rank-000002.shard (chunk 0 of rank 2's first tensor): reads
 *              of that chunk fail with -CKPT_E_CORRUPT naming the file,
 *              reads of other chunks still work; and a byte of step 10's
 *              rank-000001.index: reads of rank 1 fail the digest check.
 *
 * Every byte is a pure function of (step, rank, tensor, offset), so reads
 * are checked by regenerating the data. Exit status 0 when every
 * expectation held, 1 otherwise, 2 on bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <fcntl.h>

#include "ckpt.h"
#include "proto.h"

#define WORLD 3
#define NT 4          /* tensors per rank; tensor NT-1 has a rank-specific name */
#define CHUNK 65536u  /* rangeread.sh starts ckptd with --chunk-size 64KiB */

static const char *sock_path;
static const char *job = "reshard";
static int failures;

#define CHECK(cond, ...)                                              \
	do {                                                          \
		if (!(cond)) {                                        \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                 \
			fputc('\n', stderr);                          \
			failures++;                                   \
		}                                                     \
	} while (0)

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

/* Byte `off` of item (step, rank, t); t == NT is the blob. */
static uint8_t gen_byte(uint64_t step, uint32_t rank, uint32_t t, uint64_t off)
{
	uint64_t v = mix64(mix64(step * 1000003u + rank * 131u + t) ^ (off / 8));

	return (uint8_t)(v >> ((off % 8) * 8));
}

static void gen_fill(uint64_t step, uint32_t rank, uint32_t t, uint64_t off, uint8_t *buf,
		     uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		buf[i] = gen_byte(step, rank, t, off + i);
}

/* The first differing offset, or -1. */
static int64_t gen_cmp(uint64_t step, uint32_t rank, uint32_t t, uint64_t off,
		       const uint8_t *buf, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		if (buf[i] != gen_byte(step, rank, t, off + i))
			return (int64_t)i;
	return -1;
}

/* Rank r's tensor t: f32 of rows x 1000; sizes differ per rank, and rank 2's
 * first tensor is larger than a reader's slot. */
static uint64_t tensor_rows(uint32_t rank, uint32_t t)
{
	static const uint64_t rows[WORLD][NT] = {
		{ 100, 7, 1, 33 },
		{ 250, 3, 2, 17 },
		{ 5000, 9, 1, 65 }, /* 20 MB */
	};
	return rows[rank][t];
}

static uint64_t tensor_bytes(uint32_t rank, uint32_t t)
{
	return tensor_rows(rank, t) * 1000 * 4;
}

static void tensor_name(char *buf, size_t cap, uint32_t rank, uint32_t t)
{
	if (t == NT - 1)
		snprintf(buf, cap, "only.rank%u.state", rank);
	else
		snprintf(buf, cap, "layers.%u.weight", t);
}

static const uint64_t blob_bytes[WORLD] = { 1000, 0, 70001 };

static ckpt_ctx *connect_rank(uint32_t rank, uint32_t world, uint64_t max_save)
{
	char why[256] = "";
	ckpt_options o = {
		.struct_size = sizeof(o),
		.socket_path = sock_path,
		.job = job,
		.rank = rank,
		.world_size = world,
		.max_save_bytes = max_save,
		.error = why,
		.error_bytes = sizeof(why),
	};
	ckpt_ctx *ctx = NULL;
	int r = ckpt_connect(&o, &ctx);

	if (r < 0) {
		fprintf(stderr, "connect rank %u: %s: %s\n", rank, ckpt_strerror(r), why);
		exit(1);
	}
	return ctx;
}

static int save_rank(ckpt_ctx *ctx, uint32_t rank, uint64_t step)
{
	ckpt_save *s = NULL;
	uint8_t *buf;
	int r;

	r = ckpt_save_begin(ctx, step, &s);
	if (r < 0)
		return r;
	for (uint32_t t = 0; t < NT; t++) {
		char name[64];
		ckpt_tensor_desc d = { .name = name, .dtype = CKPT_DTYPE_F32, .ndim = 2 };
		uint64_t n = tensor_bytes(rank, t);

		tensor_name(name, sizeof(name), rank, t);
		d.shape[0] = d.global_shape[0] = tensor_rows(rank, t);
		d.shape[1] = d.global_shape[1] = 1000;
		buf = malloc(n);
		if (!buf) {
			ckpt_save_abort(s);
			return -ENOMEM;
		}
		gen_fill(step, rank, t, 0, buf, n);
		r = ckpt_save_add(s, &d, buf);
		free(buf);
		if (r < 0) {
			ckpt_save_abort(s);
			return r;
		}
	}
	if (blob_bytes[rank]) {
		buf = malloc(blob_bytes[rank]);
		if (!buf) {
			ckpt_save_abort(s);
			return -ENOMEM;
		}
		gen_fill(step, rank, NT, 0, buf, blob_bytes[rank]);
		r = ckpt_save_set_blob(s, buf, blob_bytes[rank]);
		free(buf);
		if (r < 0) {
			ckpt_save_abort(s);
			return r;
		}
	}
	return ckpt_save_finish(s);
}

static int do_save(void)
{
	ckpt_ctx *ctx[WORLD];
	ckpt_status st;
	uint64_t steps[] = { 10, 20 };
	uint8_t one;
	ckpt_read rd;
	char why[256];
	int r;

	for (uint32_t rank = 0; rank < WORLD; rank++)
		ctx[rank] = connect_rank(rank, WORLD, 24u << 20);
	for (size_t i = 0; i < 2; i++) {
		for (uint32_t rank = 0; rank < WORLD; rank++) {
			r = save_rank(ctx[rank], rank, steps[i]);
			CHECK(r == 0, "rank %u save of step %" PRIu64 ": %s", rank, steps[i],
			      ckpt_strerror(r));
		}
		for (uint32_t rank = 0; rank < WORLD; rank++) {
			r = ckpt_wait(ctx[rank], steps[i], 60000, &st);
			CHECK(r == 0 && st.state == CKPT_STATE_COMMITTED,
			      "rank %u step %" PRIu64 " not committed: %s %s", rank, steps[i],
			      ckpt_state_name(st.state), st.reason);
		}
	}
	/* Step 30: saved by ranks 0 and 1 only, so it is open, not committed. */
	for (uint32_t rank = 0; rank < 2; rank++) {
		r = save_rank(ctx[rank], rank, 30);
		CHECK(r == 0, "rank %u save of step 30: %s", rank, ckpt_strerror(r));
	}
	r = ckpt_wait(ctx[0], 30, 200, &st);
	rd = (ckpt_read){ .rank = 0, .tensor = "layers.0.weight", .length = 1, .dst = &one };
	r = ckpt_read_ranges(ctx[0], 30, &rd, 1);
	ckpt_read_error(ctx[0], why, sizeof(why));
	CHECK(r == -CKPT_E_NO_CHECKPOINT && rd.result == r,
	      "read of open step 30: %d (%s) result %d, want -CKPT_E_NO_CHECKPOINT; %s", r,
	      ckpt_strerror(r), rd.result, why);
	CHECK(strstr(why, "step 30") && strstr(why, "not committed"),
	      "the reason for an open step does not say it: \"%s\"", why);
	printf("open step refused: %s\n", why);
	for (uint32_t rank = 0; rank < WORLD; rank++)
		ckpt_close(ctx[rank]);
	return 0;
}

/* Another thread polls all the time: the reads must not shut it out. It
 * notes when each of its polls finished. */
#define POLL_STAMPS (1u << 20)
static volatile bool poll_stop;
static volatile unsigned long polls;
static double poll_done_ms[POLL_STAMPS];
/* Polls the other thread finished well inside the last ckpt_read_ranges
 * (1 ms from either end: had the call held the context lock all along,
 * none could have). */
static unsigned long polls_during;

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

struct want {
	uint64_t step;
	uint32_t rank, t;  /* t == NT: the blob */
	uint64_t offset, length;
};

static int read_and_check(ckpt_ctx *ctx, const struct want *w, size_t n)
{
	ckpt_read *reads = calloc(n, sizeof(*reads));
	char names[64][64];
	int bad = 0, r;

	if (!reads || n > 64)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		tensor_name(names[i], sizeof(names[i]), w[i].rank, w[i].t);
		reads[i] = (ckpt_read){
			.rank = w[i].rank,
			.tensor = w[i].t == NT ? NULL : names[i],
			.offset = w[i].offset,
			.length = w[i].length,
			.dst = w[i].length ? malloc(w[i].length) : NULL,
			.result = 12345,
			.total = 777,
		};
		if (w[i].length && !reads[i].dst)
			return -ENOMEM;
	}
	unsigned long polls_before = polls, polls_after;
	double t0 = now_ms(), t1;
	r = ckpt_read_ranges(ctx, w[0].step, reads, n);
	t1 = now_ms();
	polls_after = polls;
	polls_during = 0;
	for (unsigned long p = polls_before; p < polls_after && p < POLL_STAMPS; p++)
		polls_during += poll_done_ms[p] > t0 + 1 && poll_done_ms[p] < t1 - 1;
	CHECK(r == 0, "reads of step %" PRIu64 ": %s", w[0].step, ckpt_strerror(r));
	for (size_t i = 0; i < n; i++) {
		uint64_t total = w[i].t == NT ? blob_bytes[w[i].rank] : tensor_bytes(w[i].rank, w[i].t);
		int64_t at;

		CHECK(reads[i].result == 0, "read %zu: %s", i, ckpt_strerror(reads[i].result));
		CHECK(reads[i].total == total, "read %zu: total %" PRIu64 ", want %" PRIu64, i,
		      reads[i].total, total);
		at = reads[i].result == 0 ? gen_cmp(w[i].step, w[i].rank, w[i].t, w[i].offset,
						    reads[i].dst, w[i].length) : -1;
		CHECK(at < 0, "read %zu (step %" PRIu64 " rank %u item %u bytes %" PRIu64 "+%" PRIu64
		      "): differs at %" PRId64, i, w[i].step, w[i].rank, w[i].t, w[i].offset,
		      w[i].length, at);
		bad += at >= 0;
		free(reads[i].dst);
	}
	free(reads);
	return bad ? -EBADMSG : 0;
}


static void *poller(void *arg)
{
	ckpt_ctx *ctx = arg;
	ckpt_status st;

	while (!poll_stop) {
		ckpt_poll(ctx, 10, &st);
		(void)ckpt_next_event(ctx, &st);
		if (polls < POLL_STAMPS)
			poll_done_ms[polls] = now_ms();
		polls++;
	}
	return NULL;
}

static int do_read(void)
{
	/* A small slot (8 MiB or so): rank 2's 20 MB tensor takes rounds. */
	ckpt_ctx *ctx = connect_rank(0, 2, 4096);
	uint64_t slot = ckpt_slot_bytes(ctx);
	char why[256];
	uint8_t buf[64];
	pthread_t th;
	int r;

	printf("reader's slot: %" PRIu64 " bytes\n", slot);
	CHECK(slot < tensor_bytes(2, 0), "the slot (%" PRIu64 ") is not smaller than the big tensor",
	      slot);
	{
		/* Slices of every rank's items, chunk-aligned or not, across
		 * chunk boundaries, whole items, empty reads. */
		struct want w[] = {
			{ 10, 0, 0, 0, 400000 },                     /* whole tensor */
			{ 10, 1, 0, 12345, 300001 },                 /* odd start, many chunks */
			{ 10, 2, 0, CHUNK - 3, 6 },                  /* across one chunk boundary */
			{ 10, 2, 3, 0, 0 },                          /* only the total */
			{ 10, 1, 3, 4 * 1000 * 16, 4 * 1000 },       /* one row */
			{ 10, 0, NT, 0, 1000 },                      /* rank 0's whole blob */
			{ 10, 2, NT, 65530, 70001 - 65530 },         /* the end of rank 2's blob */
			{ 10, 1, NT, 0, 0 },                         /* rank 1 saved no blob */
			{ 10, 0, 2, 3999, 1 },                       /* the last byte */
			{ 10, 2, 2, 0, 4000 },
		};
		r = read_and_check(ctx, w, sizeof(w) / sizeof(w[0]));
		CHECK(r == 0, "slices of step 10");
	}
	{
		struct want w[] = {
			{ 20, 2, 0, 0, 5000ull * 4000 },             /* longer than the slot */
			{ 20, 1, 1, 1, 11998 },
			{ 20, 2, 0, 7 * 1000 * 1000 + 5, 9 * 1000 * 1000 }, /* across rounds */
			{ 20, 0, NT, 500, 500 },
		};
		poll_stop = false;
		pthread_create(&th, NULL, poller, ctx);
		r = read_and_check(ctx, w, sizeof(w) / sizeof(w[0]));
		poll_stop = true;
		pthread_join(th, NULL);
		CHECK(r == 0, "big reads of step 20");
		printf("polls another thread finished during the reads: %lu\n", polls_during);
		CHECK(polls_during >= 2, "ckpt_poll on another thread made no progress during "
		      "ckpt_read_ranges (%lu polls)", polls_during);
	}
	{
		/* Many small reads: more than one READ_RANGES. */
		struct want w[64];

		for (uint32_t i = 0; i < 64; i++) {
			uint32_t rank = i % WORLD, t = i % NT;

			w[i] = (struct want){ 20, rank, t, (uint64_t)i * 777 % (tensor_bytes(rank, t) - 200),
					      100 + i };
		}
		r = read_and_check(ctx, w, 64);
		CHECK(r == 0, "64 small reads");
	}
	{
		/* The bad cases, in one batch with good reads. */
		ckpt_read rd[] = {
			{ .rank = 1, .tensor = "layers.0.weight", .offset = 8, .length = 8, .dst = buf },
			{ .rank = 1, .tensor = "no.such.tensor", .length = 8, .dst = buf + 8 },
			{ .rank = 0, .tensor = "only.rank2.state", .length = 8, .dst = buf + 8 },
			{ .rank = 1, .tensor = "layers.1.weight", .offset = 11990, .length = 11,
			  .dst = buf + 16 },
			{ .rank = 3, .tensor = "layers.0.weight", .length = 8, .dst = buf + 32 },
			{ .rank = 0, .tensor = NULL, .offset = 1001, .length = 0, .dst = NULL },
			{ .rank = 0, .tensor = "bad/name", .length = 1, .dst = buf },
			{ .rank = 0, .tensor = "layers.0.weight", .length = 1, .dst = NULL },
			{ .rank = 2, .tensor = NULL, .offset = 3, .length = 5, .dst = buf + 40 },
		};
		int want[] = { 0, -ENOENT, -ENOENT, -ERANGE, -ENOENT, -ERANGE,
			       -CKPT_E_BAD_NAME, -EINVAL, 0 };
		uint64_t want_total[] = { 1000000, 0, 0, 12000, 0, 1000, 0, 0, 70001 };
		size_t n = sizeof(rd) / sizeof(rd[0]);

		r = ckpt_read_ranges(ctx, 10, rd, n);
		ckpt_read_error(ctx, why, sizeof(why));
		printf("bad batch: %s; reason: %s\n", ckpt_strerror(r), why);
		CHECK(r == -ENOENT, "the batch returns %d (%s), want the first failure -ENOENT", r,
		      ckpt_strerror(r));
		for (size_t i = 0; i < n; i++) {
			CHECK(rd[i].result == want[i], "bad batch read %zu: %d (%s), want %d", i,
			      rd[i].result, ckpt_strerror(rd[i].result), want[i]);
			CHECK(rd[i].total == want_total[i], "bad batch read %zu: total %" PRIu64
			      ", want %" PRIu64, i, rd[i].total, want_total[i]);
		}
		CHECK(gen_cmp(10, 1, 0, 8, buf, 8) < 0, "the good read of a bad batch differs");
		CHECK(gen_cmp(10, 2, NT, 3, buf + 40, 5) < 0, "the blob read of a bad batch differs");
		CHECK(strstr(why, "no tensor") && strstr(why, "no.such.tensor") && strstr(why, "rank 1"),
		      "the reason does not name the tensor and rank: \"%s\"", why);
	}
	{
		/* Longer than the slot and beyond the item: refused once its
		 * size is known, nothing more is asked for. */
		uint8_t *big = malloc(tensor_bytes(2, 0));
		ckpt_read rd = { .rank = 2, .tensor = "layers.0.weight", .offset = 1,
				 .length = tensor_bytes(2, 0), .dst = big };

		r = big ? ckpt_read_ranges(ctx, 20, &rd, 1) : -ENOMEM;
		ckpt_read_error(ctx, why, sizeof(why));
		CHECK(r == -ERANGE && rd.result == -ERANGE && rd.total == tensor_bytes(2, 0),
		      "a long read past the end: %s, total %" PRIu64, ckpt_strerror(r), rd.total);
		CHECK(strstr(why, "beyond"), "the reason for a long read past the end: \"%s\"", why);
		free(big);
	}
	{
		ckpt_read rd = { .rank = 0, .tensor = "layers.0.weight", .length = 4, .dst = buf };

		r = ckpt_read_ranges(ctx, 15, &rd, 1);
		ckpt_read_error(ctx, why, sizeof(why));
		CHECK(r == -CKPT_E_NO_CHECKPOINT && rd.result == r,
		      "a step never saved: %s, want -CKPT_E_NO_CHECKPOINT", ckpt_strerror(r));
		CHECK(strstr(why, "step 15"), "the reason does not name step 15: \"%s\"", why);
		r = ckpt_read_ranges(ctx, CKPT_STEP_MAX + 1, &rd, 1);
		CHECK(r == -ERANGE, "a step above the range: %s, want -ERANGE", ckpt_strerror(r));
		r = ckpt_read_ranges(ctx, 10, &rd, 0);
		CHECK(r == 0, "an empty batch: %s", ckpt_strerror(r));
		r = ckpt_read_ranges(ctx, 10, &rd, 1);
		ckpt_read_error(ctx, why, sizeof(why));
		CHECK(r == 0 && why[0] == '\0', "after a good call the reason is \"%s\"", why);
	}
	/* The connection is still good: a save of this rank works. */
	ckpt_close(ctx);
	return 0;
}

static int do_corrupt(void)
{
	ckpt_ctx *ctx = connect_rank(1, 2, 4096);
	uint8_t *big = malloc(2 * CHUNK);
	char why[256];
	ckpt_read rd[3];
	int r;

	if (!big)
		return -ENOMEM;
	rd[0] = (ckpt_read){ .rank = 2, .tensor = "layers.0.weight", .offset = 90, .length = 20,
			     .dst = big };
	rd[1] = (ckpt_read){ .rank = 2, .tensor = "layers.0.weight", .offset = CHUNK,
			     .length = CHUNK, .dst = big + CHUNK };
	rd[2] = (ckpt_read){ .rank = 0, .tensor = "layers.0.weight", .length = 64, .dst = big + 100 };
	r = ckpt_read_ranges(ctx, 10, rd, 3);
	ckpt_read_error(ctx, why, sizeof(why));
	printf("corrupt chunk: %s; reason: %s\n", ckpt_strerror(r), why);
	CHECK(r == -CKPT_E_CORRUPT && rd[0].result == -CKPT_E_CORRUPT,
	      "a read of the damaged chunk: %s / %s, want -CKPT_E_CORRUPT", ckpt_strerror(r),
	      ckpt_strerror(rd[0].result));
	CHECK(strstr(why, "reshard/step-0000000010/rank-000002.shard") && strstr(why, "CRC-32C"),
	      "the reason does not name the file and the check: \"%s\"", why);
	CHECK(rd[1].result == 0 && gen_cmp(10, 2, 0, CHUNK, big + CHUNK, CHUNK) < 0,
	      "the next chunk of the damaged tensor: %s", ckpt_strerror(rd[1].result));
	CHECK(rd[2].result == 0 && gen_cmp(10, 0, 0, 0, big + 100, 64) < 0,
	      "another rank's tensor: %s", ckpt_strerror(rd[2].result));
	/* Rank 1's index of step 10 was changed after ckptd had read it. */
	rd[0] = (ckpt_read){ .rank = 1, .tensor = "layers.0.weight", .length = 20, .dst = big };
	r = ckpt_read_ranges(ctx, 10, rd, 1);
	ckpt_read_error(ctx, why, sizeof(why));
	printf("changed index: %s; reason: %s\n", ckpt_strerror(r), why);
	CHECK(r == -CKPT_E_CORRUPT, "a read of a rank whose index changed: %s, want "
	      "-CKPT_E_CORRUPT", ckpt_strerror(r));
	CHECK(strstr(why, "rank-000001.index") && strstr(why, "step-0000000010"),
	      "the reason does not name the index: \"%s\"", why);
	/* Step 20 is untouched. */
	rd[0] = (ckpt_read){ .rank = 2, .tensor = "layers.0.weight", .offset = 90, .length = 20,
			     .dst = big };
	r = ckpt_read_ranges(ctx, 20, rd, 1);
	CHECK(r == 0 && gen_cmp(20, 2, 0, 90, big, 20) < 0, "step 20: %s", ckpt_strerror(r));
	free(big);
	ckpt_close(ctx);
	return 0;
}

static int old_send(int fd, const struct ckpt_msg *m, int pass_fd)
{
	uint8_t out[CKPT_MSG_MAX_BYTES];
	char cbuf[CMSG_SPACE(sizeof(int))];
	ssize_t n = ckpt_msg_encode(m, out, sizeof(out));
	struct iovec iov = { .iov_base = out, .iov_len = n > 0 ? (size_t)n : 0 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (n < 0)
		return (int)n;
	if (pass_fd >= 0) {
		struct cmsghdr *cm;

		memset(cbuf, 0, sizeof(cbuf));
		mh.msg_control = cbuf;
		mh.msg_controllen = sizeof(cbuf);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
	}
	return sendmsg(fd, &mh, MSG_NOSIGNAL) == n ? 0 : -errno;
}

/* An older ckptd, as far as one client sees it: HELLO_OK, a notice
 * without "read_ranges", STATUS for every QUERY, until BYE or hang-up. */
static void *old_daemon(void *arg)
{
	int lfd = *(int *)arg, fd, memfd;
	uint8_t in[CKPT_MSG_MAX_BYTES];
	struct ckpt_msg m;
	ssize_t n;

	fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		return NULL;
	n = recv(fd, in, sizeof(in), 0);
	if (n <= 0 || ckpt_msg_decode(in, (size_t)n, &m) < 0 || m.type != CKPT_MSG_HELLO)
		goto out;
	memfd = memfd_create("old-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (memfd < 0 || ftruncate(memfd, 2u << 20) < 0 ||
	    fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		goto out;
	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_HELLO_OK;
	m.seq = 1;
	m.u.hello_ok = (struct ckpt_msg_hello_ok){ .slots = 1, .slot_bytes = 2u << 20,
		.arena_bytes = 2u << 20, .chunk_bytes = 1u << 20, .latest_step = CKPT_NO_STEP };
	if (old_send(fd, &m, memfd) < 0)
		goto out;
	close(memfd);
	ckpt_msg_features_notice(&m, CKPT_FEATURE_STALL | CKPT_FEATURE_AGREE);
	old_send(fd, &m, -1);
	while ((n = recv(fd, in, sizeof(in), 0)) > 0) {
		uint32_t seq;

		if (ckpt_msg_decode(in, (size_t)n, &m) < 0 || m.type == CKPT_MSG_BYE)
			break;
		CHECK(m.type == CKPT_MSG_QUERY, "the client sent %s to a ckptd that does not take it",
		      ckpt_msg_type_name(m.type));
		seq = m.seq;
		memset(&m, 0, sizeof(m));
		m.type = CKPT_MSG_STATUS;
		m.seq = seq;
		m.u.status.slot_freed = CKPT_NO_SLOT;
		old_send(fd, &m, -1);
	}
out:
	close(fd);
	return NULL;
}

static int do_old_daemon(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	uint8_t byte;
	ckpt_read rd = { .rank = 0, .tensor = "w", .length = 1, .dst = &byte };
	char why[256];
	pthread_t th;
	ckpt_ctx *ctx;
	int r;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	unlink(sock_path);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 1) < 0) {
		perror("old daemon socket");
		return -1;
	}
	pthread_create(&th, NULL, old_daemon, &lfd);
	ctx = connect_rank(0, 1, 4096);
	r = ckpt_read_ranges(ctx, 10, &rd, 1);
	ckpt_read_error(ctx, why, sizeof(why));
	printf("older ckptd: %s; reason: %s\n", ckpt_strerror(r), why);
	CHECK(r == -EOPNOTSUPP && rd.result == -EOPNOTSUPP, "against an older ckptd: %s",
	      ckpt_strerror(r));
	CHECK(strstr(why, "ckptd too old"), "the reason does not say ckptd is too old: \"%s\"", why);
	ckpt_close(ctx);
	pthread_join(th, NULL);
	close(lfd);
	unlink(sock_path);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "job", required_argument, NULL, 'j' },
		{ "save", no_argument, NULL, 'S' },
		{ "read", no_argument, NULL, 'R' },
		{ "corrupt", no_argument, NULL, 'C' },
		{ "old-daemon", no_argument, NULL, 'O' },
		{ NULL, 0, NULL, 0 },
	};
	int mode = 0, c;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 's': sock_path = optarg; break;
		case 'j': job = optarg; break;
		case 'S': case 'R': case 'C': case 'O': mode = c; break;
		default: return 2;
		}
	}
	if (!sock_path || !mode) {
		fprintf(stderr, "usage: %s --socket PATH [--job NAME] --save|--read|--corrupt|--old-daemon\n",
			argv[0]);
		return 2;
	}
	if (mode == 'S')
		do_save();
	else if (mode == 'R')
		do_read();
	else if (mode == 'O')
		do_old_daemon();
	else
		do_corrupt();
	if (failures)
		fprintf(stderr, "%d expectation(s) failed\n", failures);
	else
		printf("ok\n");
	return failures ? 1 : 0;
}
