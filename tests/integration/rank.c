/* SPDX-License-Identifier: MIT */
/*
 * ckpt-test-rank: one training rank for the integration and fault tests.
 *
 * It saves a deterministic, random-looking tensor set through libckpt and
 * restores it again. Everything it writes is a pure function of
 * (seed, rank, step, tensor), so a restore is checked byte for byte by
 * regenerating the data: no reference copy is kept anywhere.
 *
 * The tensor *set* (names, dtypes, shapes) depends on (seed, rank) only,
 * and the shapes of sharded tensors on the seed only, so every rank of a
 * job agrees on the global shape of each sharded tensor.
 *
 * Exit status: 0 when every expectation held, 1 otherwise, 2 on bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"

#define ALIGN 4096u
#define GEN_CHUNK (1u << 20)
#define MAX_STEPS 100000

struct tensor {
	char name[CKPT_TENSOR_NAME_MAX + 1];
	ckpt_tensor_desc desc;
	uint64_t nbytes;
};

struct opts {
	const char *socket;
	const char *job;
	uint32_t rank, world;
	uint64_t seed;
	uint64_t *steps;
	size_t nsteps;
	uint64_t first, every, count;
	uint32_t ntensors;
	uint64_t min_bytes, max_bytes, blob_bytes;
	bool wait;
	int timeout_ms;
	const char *restore;       /* "latest" or a step number */
	uint64_t expect_step;      /* CKPT_STEP_LATEST: not checked */
	bool expect_fallback;
	bool agree;                /* --agree: CKPT_RESTORE_AGREE */
	bool expect_restore_error; /* the restore must fail */
	unsigned sleep_between_ms;
	bool reconnect_loop;
	const char *stop_file;
	bool accept_skipped, accept_aborted;
	uint64_t *expect_fail;
	size_t nexpect_fail;
	uint64_t die_step;         /* CKPT_STEP_LATEST: never */
	bool die_after_finish;     /* else die halfway through the copy */
	uint32_t connect_timeout_ms;
	uint64_t scribble_step;    /* --scribble-step: write into the slot after finish */
	uint64_t gate_step;        /* --gate STEP:PATH */
	const char *gate_file;
	const char *latest_after;  /* --latest-after PATH: print ckpt_latest once PATH exists */
};

static struct opts o;
static struct tensor *tensors;
static uint32_t ntensors;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;

	printf("rank %u ", o.rank);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* ---- deterministic data ---------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

static uint64_t hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
	return mix64(mix64(mix64(mix64(a) ^ b) ^ c) ^ d);
}

struct rng {
	uint64_t s;
};

static uint64_t rng_next(struct rng *r)
{
	r->s += 0x9e3779b97f4a7c15ull;
	return mix64(r->s);
}

static uint64_t rng_range(struct rng *r, uint64_t lo, uint64_t hi)
{
	if (hi <= lo)
		return lo;
	return lo + rng_next(r) % (hi - lo + 1);
}

/* Key of the byte stream of tensor `idx` (or the blob, idx UINT32_MAX). */
static uint64_t data_key(uint64_t step, uint32_t idx)
{
	return hash4(o.seed, o.rank, step, idx);
}

/*
 * Bytes [off, off+len) of the stream `key`; off must be a multiple of 8.
 * Counter based, so any piece can be regenerated on its own.
 */
static void gen_fill(uint64_t key, uint64_t off, void *buf, size_t len)
{
	uint8_t *p = buf;
	uint64_t word = off / 8;

	while (len >= 8) {
		uint64_t v = mix64(key + word * 0x9e3779b97f4a7c15ull);

		memcpy(p, &v, 8);
		p += 8;
		len -= 8;
		word++;
	}
	if (len) {
		uint64_t v = mix64(key + word * 0x9e3779b97f4a7c15ull);

		memcpy(p, &v, len);
	}
}

/* Compare data against the stream; returns -1 if equal, else the first
 * differing byte offset. */
static int64_t gen_compare(uint64_t key, const void *data, uint64_t len)
{
	static uint8_t *ref;
	const uint8_t *d = data;
	uint64_t off;

	if (!ref) {
		ref = malloc(GEN_CHUNK);
		if (!ref)
			return 0;
	}
	for (off = 0; off < len; off += GEN_CHUNK) {
		size_t n = len - off < GEN_CHUNK ? (size_t)(len - off) : GEN_CHUNK;

		gen_fill(key, off, ref, n);
		if (memcmp(ref, d + off, n) != 0) {
			for (size_t i = 0; i < n; i++)
				if (ref[i] != d[off + i])
					return (int64_t)(off + i);
		}
	}
	return -1;
}

/* ---- the tensor set ---------------------------------------------------- */

static const uint32_t dtypes[] = {
	CKPT_DTYPE_F32, CKPT_DTYPE_BF16, CKPT_DTYPE_F16, CKPT_DTYPE_F64,
	CKPT_DTYPE_I64, CKPT_DTYPE_U8, CKPT_DTYPE_I32, CKPT_DTYPE_BOOL,
	CKPT_DTYPE_F8E4M3, CKPT_DTYPE_U16,
};

/* Valid but unusual names too: spaces, UTF-8, punctuation. */
static const char *const stems[][2] = {
	{ "model.layers.", ".self_attn.q_proj.weight" },
	{ "model.layers.", ".mlp.down_proj.weight" },
	{ "optimizer.state.", ".exp_avg" },
	{ "optimizer.state.", ".exp_avg_sq" },
	{ "tensor with spaces ", "" },
	{ "gr\xc3\xb6\xc3\x9f" "e-", ":\xe2\x88\x87" },
	{ "embed_tokens[", "]" },
	{ "..", ".." },
};

static uint64_t log_uniform(struct rng *r, uint64_t lo, uint64_t hi)
{
	/* Uniform in log2 space, in 1/64 steps, so KiB and 100s of MiB both occur. */
	unsigned llo = 0, lhi = 0;
	uint64_t v;

	if (hi <= lo)
		return lo;
	while ((2ull << llo) <= lo)
		llo++;
	while ((2ull << lhi) <= hi)
		lhi++;
	v = rng_range(r, (uint64_t)llo * 64, (uint64_t)(lhi + 1) * 64);
	v = (1ull << (v / 64)) + ((1ull << (v / 64)) / 64) * (v % 64);
	if (v < lo)
		v = lo;
	if (v > hi)
		v = hi;
	return v;
}

static int build_tensor_set(void)
{
	uint32_t n = o.ntensors + (o.ntensors >= 3 ? 1 : 0);

	tensors = calloc(n ? n : 1, sizeof(*tensors));
	if (!tensors)
		return -ENOMEM;
	for (uint32_t i = 0; i < o.ntensors; i++) {
		struct tensor *t = &tensors[i];
		ckpt_tensor_desc *d = &t->desc;
		/* Layout choices shared by all ranks: kind, and for sharded
		 * tensors the whole shape. */
		struct rng common = { hash4(o.seed, i, 0x5ade, 0) };
		struct rng mine = { hash4(o.seed, i, o.rank, 1) };
		unsigned kind = rng_next(&common) % 6;
		bool sharded = kind >= 4;
		struct rng *r = sharded ? &common : &mine;
		uint32_t dtype = dtypes[rng_next(r) % (sizeof(dtypes) / sizeof(dtypes[0]))];
		uint64_t es = ckpt_dtype_size((int)dtype);
		uint64_t target = log_uniform(r, o.min_bytes, o.max_bytes);
		uint64_t nelem = target / es ? target / es : 1;
		static const uint64_t colchoice[] = { 1, 3, 7, 64, 1000, 4096 };

		snprintf(t->name, sizeof(t->name), "%s%u%s", stems[i % 8][0], i, stems[i % 8][1]);
		d->name = t->name;
		d->dtype = dtype;
		switch (kind) {
		case 0: /* 1-D */
			d->ndim = 1;
			d->shape[0] = nelem;
			break;
		case 1: case 2: { /* 2-D */
			uint64_t cols = colchoice[rng_next(r) % 6];

			if (cols > nelem)
				cols = nelem;
			d->ndim = 2;
			d->shape[0] = nelem / cols;
			d->shape[1] = cols;
			break;
		}
		case 3: { /* 3-D */
			uint64_t a = rng_range(r, 1, 8), b = colchoice[rng_next(r) % 6];

			while (a * b > nelem && b > 1)
				b /= 2;
			while (a * b > nelem && a > 1)
				a--;
			d->ndim = 3;
			d->shape[0] = a;
			d->shape[1] = b;
			d->shape[2] = nelem / (a * b);
			break;
		}
		case 4: /* a row slice of a global 2-D tensor */
		case 5: { /* a column slice of a global 2-D tensor */
			uint64_t cols = colchoice[rng_next(r) % 6];

			if (cols > nelem)
				cols = nelem;
			d->ndim = 2;
			d->shape[0] = nelem / cols;
			d->shape[1] = cols;
			break;
		}
		}
		for (uint32_t k = 0; k < d->ndim; k++)
			d->global_shape[k] = d->shape[k];
		if (kind == 4) {
			d->global_shape[0] = d->shape[0] * o.world;
			d->offset[0] = d->shape[0] * o.rank;
		} else if (kind == 5) {
			d->global_shape[1] = d->shape[1] * o.world;
			d->offset[1] = d->shape[1] * o.rank;
		}
		t->nbytes = ckpt_tensor_bytes(d);
		if (t->nbytes == 0) {
			fprintf(stderr, "rank %u: bad generated tensor %s\n", o.rank, t->name);
			return -EINVAL;
		}
	}
	ntensors = o.ntensors;
	if (o.ntensors >= 3) { /* a scalar */
		struct tensor *t = &tensors[ntensors++];

		snprintf(t->name, sizeof(t->name), "scalar.loss_scale");
		t->desc.name = t->name;
		t->desc.dtype = CKPT_DTYPE_F32;
		t->desc.ndim = 0;
		t->nbytes = ckpt_tensor_bytes(&t->desc);
		if (t->nbytes != 4) {
			fprintf(stderr, "rank %u: ckpt_tensor_bytes(scalar f32) = %" PRIu64 ", want 4\n",
				o.rank, t->nbytes);
			return -EINVAL;
		}
	}
	return 0;
}

static uint64_t round_up(uint64_t v)
{
	return (v + ALIGN - 1) / ALIGN * ALIGN;
}

static uint64_t save_bytes(void)
{
	uint64_t sum = round_up(o.blob_bytes);

	for (uint32_t i = 0; i < ntensors; i++)
		sum += round_up(tensors[i].nbytes);
	return sum;
}

/* ---- saving ------------------------------------------------------------ */

static bool retryable(int err)
{
	return err == -CKPT_E_DISCONNECTED || err == -ECONNREFUSED || err == -ENOENT ||
	       err == -EPIPE || err == -ECONNRESET || err == -ETIMEDOUT ||
	       err == -ENOTCONN || err == -CKPT_E_BUSY;
}

static bool in_list(const uint64_t *v, size_t n, uint64_t x)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == x)
			return true;
	return false;
}

/* Fill and hand over one step. 0, or a negative error from libckpt. */
/* The last tensor reserved in the slot (--scribble-step writes into it). */
static uint8_t *last_reserved;
static uint64_t last_reserved_bytes;

static int save_one(ckpt_ctx *ctx, ckpt_save *sv, uint64_t step)
{
	uint8_t *blob = NULL;
	int r;

	for (uint32_t i = 0; i < ntensors; i++) {
		struct tensor *t = &tensors[i];
		uint64_t key = data_key(step, i);

		if (step == o.die_step && !o.die_after_finish && i == ntensors / 2) {
			say("step %" PRIu64 " dying mid-copy (SIGKILL)", step);
			raise(SIGKILL);
		}
		/* Small odd tensors go through the copying call, the rest are
		 * generated straight into the arena: both paths are used. */
		if ((i & 1) && t->nbytes <= (4u << 20)) {
			void *buf = malloc(t->nbytes);

			if (!buf)
				return -ENOMEM;
			gen_fill(key, 0, buf, t->nbytes);
			r = ckpt_save_add(sv, &t->desc, buf);
			free(buf);
			if (r < 0) {
				say("step %" PRIu64 " ckpt_save_add(%s): %s", step, t->name, ckpt_strerror(r));
				ckpt_save_abort(sv);
				return r;
			}
		} else {
			void *dst = NULL;

			r = ckpt_save_reserve(sv, &t->desc, &dst);
			if (r < 0) {
				say("step %" PRIu64 " ckpt_save_reserve(%s): %s", step, t->name, ckpt_strerror(r));
				ckpt_save_abort(sv);
				return r;
			}
			if ((uintptr_t)dst % ALIGN) {
				say("step %" PRIu64 " ckpt_save_reserve(%s) returned unaligned %p", step, t->name, dst);
				ckpt_save_abort(sv);
				return -EINVAL;
			}
			gen_fill(key, 0, dst, t->nbytes);
			last_reserved = dst;
			last_reserved_bytes = t->nbytes;
		}
	}
	if (o.blob_bytes) {
		blob = malloc(o.blob_bytes);
		if (!blob) {
			ckpt_save_abort(sv);
			return -ENOMEM;
		}
		gen_fill(data_key(step, UINT32_MAX), 0, blob, o.blob_bytes);
		r = ckpt_save_set_blob(sv, blob, o.blob_bytes);
		free(blob);
		if (r < 0) {
			say("step %" PRIu64 " ckpt_save_set_blob: %s", step, ckpt_strerror(r));
			ckpt_save_abort(sv);
			return r;
		}
	}
	(void)ctx;
	return ckpt_save_finish(sv);
}

static const char *state_word(int state)
{
	switch (state) {
	case CKPT_STATE_COMMITTED: return "committed";
	case CKPT_STATE_SKIPPED: return "skipped";
	case CKPT_STATE_FAILED: return "FAILED";
	case CKPT_STATE_PENDING: return "pending";
	case CKPT_STATE_DURABLE: return "durable";
	default: return "unknown";
	}
}

/* Is a final outcome acceptable for `step`? */
static bool outcome_ok(uint64_t step, const ckpt_status *st)
{
	if (in_list(o.expect_fail, o.nexpect_fail, step))
		return st->state == CKPT_STATE_FAILED;
	if (st->state == CKPT_STATE_COMMITTED)
		return true;
	if (st->state == CKPT_STATE_SKIPPED)
		return o.accept_skipped;
	if (st->state == CKPT_STATE_FAILED && st->error == -CKPT_E_ABORTED)
		return o.accept_aborted;
	if (o.reconnect_loop && st->state == CKPT_STATE_FAILED &&
	    (st->error == -CKPT_E_DISCONNECTED || st->error == -CKPT_E_ABORTED))
		return true;
	return false;
}

static void print_outcome(uint64_t step, const ckpt_status *st, double stall)
{
	if (st->state == CKPT_STATE_COMMITTED)
		say("step %" PRIu64 " committed (stall %.1f ms)", step, stall);
	else
		say("step %" PRIu64 " %s%s%s%s%s", step, state_word(st->state),
		    st->error ? ": " : "", st->error ? ckpt_strerror(st->error) : "",
		    st->reason[0] ? ": " : "", st->reason);
}

static int wait_outcome(ckpt_ctx *ctx, uint64_t step, ckpt_status *st)
{
	int r = ckpt_wait(ctx, step, o.timeout_ms, st);

	if (r == -ETIMEDOUT) {
		say("step %" PRIu64 " no outcome within %d ms (state %s)", step, o.timeout_ms,
		    state_word(st->state));
		return r;
	}
	if (r < 0) {
		memset(st, 0, sizeof(*st));
		st->step = step;
		st->state = CKPT_STATE_FAILED;
		st->error = r;
		snprintf(st->reason, sizeof(st->reason), "ckpt_wait: %s", ckpt_strerror(r));
	}
	return 0;
}

static bool stop_requested(void)
{
	return o.stop_file && access(o.stop_file, F_OK) == 0;
}

static ckpt_options conn_opts;

/* Block before step `step` until the gate file exists (--gate STEP:PATH). */
static int pass_gate(uint64_t step)
{
	double deadline = now_ms() + o.timeout_ms;

	if (!o.gate_file || step != o.gate_step)
		return 0;
	while (access(o.gate_file, F_OK) != 0) {
		if (now_ms() > deadline) {
			say("step %" PRIu64 " gate %s did not open within %d ms", step, o.gate_file,
			    o.timeout_ms);
			return -ETIMEDOUT;
		}
		sleep_ms(20);
	}
	return 0;
}

/*
 * --reconnect-loop: a step lost to a ckptd crash is saved again on a fresh
 * connection (libckpt keeps a context's step order across its own
 * reconnects, so the same step needs a new context). A step that another
 * rank already got committed comes back -CKPT_E_EXISTS: that is success.
 */
static int reconnect(ckpt_ctx **ctx, double deadline)
{
	int r;

	ckpt_close(*ctx);
	*ctx = NULL;
	for (;;) {
		r = ckpt_connect(&conn_opts, ctx);
		if (r == 0)
			return 0;
		if (now_ms() > deadline || !retryable(r)) {
			say("reconnect: %s (%d)", ckpt_strerror(r), r);
			return r;
		}
		sleep_ms(50);
	}
}

static int run_saves(ckpt_ctx **ctxp)
{
	uint64_t *accepted = calloc(o.nsteps ? o.nsteps : 1, sizeof(uint64_t));
	double *stalls = calloc(o.nsteps ? o.nsteps : 1, sizeof(double));
	size_t naccepted = 0, committed = 0, retries = 0;
	int bad = 0;

	if (!accepted || !stalls)
		return 1;
	for (size_t si = 0; o.count == 0 || si < o.nsteps; si++) {
		uint64_t step = o.nsteps ? o.steps[si] : o.first + si * o.every;
		double retry_deadline = now_ms() + o.timeout_ms;
		ckpt_save *sv = NULL;
		double t0, stall;
		ckpt_status st;
		int r;

		if (o.nsteps == 0 && si >= MAX_STEPS)
			break;
		if (stop_requested())
			break;
		if (si && o.sleep_between_ms)
			sleep_ms(o.sleep_between_ms);
		if (pass_gate(step) < 0) {
			bad = 1;
			break;
		}
again:
		if (o.reconnect_loop && retries && now_ms() > retry_deadline) {
			say("step %" PRIu64 " could not be saved within %d ms", step, o.timeout_ms);
			bad = 1;
			break;
		}
		if (o.reconnect_loop && !*ctxp) {
			if (reconnect(ctxp, retry_deadline) < 0) {
				bad = 1;
				break;
			}
			say("reconnected");
		}
		t0 = now_ms();
		r = ckpt_save_begin(*ctxp, step, &sv);
		if (r == -CKPT_E_SKIPPED) {
			say("step %" PRIu64 " skipped at begin (no free slot)", step);
			if (!o.reconnect_loop && o.nsteps)
				accepted[naccepted++] = step; /* its outcome must say SKIPPED */
			continue;
		}
		if (r < 0 && o.reconnect_loop && retryable(r)) {
			if (stop_requested())
				break;
			retries++;
			ckpt_close(*ctxp);
			*ctxp = NULL;
			sleep_ms(50);
			goto again;
		}
		if (r < 0) {
			say("step %" PRIu64 " ckpt_save_begin: %s (%d)", step, ckpt_strerror(r), r);
			bad = 1;
			break;
		}
		r = save_one(*ctxp, sv, step);
		if (r < 0) {
			if (o.reconnect_loop && retryable(r)) {
				say("step %" PRIu64 " lost to a disconnect at finish (%s): saving it again",
				    step, ckpt_strerror(r));
				retries++;
				ckpt_close(*ctxp);
				*ctxp = NULL;
				goto again;
			}
			if (o.reconnect_loop && r == -CKPT_E_EXISTS) {
				say("step %" PRIu64 " committed (by the other ranks' first attempt)", step);
				committed++;
				continue;
			}
			if ((o.reconnect_loop || o.accept_aborted) && r == -CKPT_E_ABORTED) {
				say("step %" PRIu64 " FAILED at finish: %s", step, ckpt_strerror(r));
				continue;
			}
			/* A step already abandoned by the job (another rank died)
			 * may be refused at once: that is its outcome. */
			if (in_list(o.expect_fail, o.nexpect_fail, step)) {
				say("step %" PRIu64 " FAILED at finish: %s", step, ckpt_strerror(r));
				continue;
			}
			say("step %" PRIu64 " ckpt_save_finish: %s (%d)", step, ckpt_strerror(r), r);
			bad = 1;
			break;
		}
		/* The stall the trainer sees: begin, copy, finish. */
		stall = now_ms() - t0;
		if (step == o.scribble_step && last_reserved && last_reserved_bytes) {
			/* A late copy into the slot, as an unsynchronised GPU
			 * copy would make: the save must fail, not commit. */
			volatile uint8_t *p = last_reserved + last_reserved_bytes / 2;
			double until = now_ms() + 300;
			say("step %" PRIu64 " accepted; writing into its slot for 300 ms", step);
			while (now_ms() < until)
				(*p)++;
		}
		if (step == o.die_step && o.die_after_finish) {
			say("step %" PRIu64 " accepted; dying now (SIGKILL)", step);
			raise(SIGKILL);
		}
		if (!o.wait && !o.reconnect_loop) {
			if (naccepted < o.nsteps) {
				stalls[naccepted] = stall;
				accepted[naccepted++] = step;
			}
			say("step %" PRIu64 " accepted (stall %.1f ms)", step, stall);
			continue;
		}
		if (wait_outcome(*ctxp, step, &st) < 0) {
			bad = 1;
			if (o.reconnect_loop)
				break;
			continue;
		}
		print_outcome(step, &st, stall);
		if (o.reconnect_loop && st.state == CKPT_STATE_FAILED &&
		    st.error == -CKPT_E_DISCONNECTED) {
			retries++;
			ckpt_close(*ctxp);
			*ctxp = NULL;
			goto again;
		}
		if (!outcome_ok(step, &st))
			bad = 1;
		if (st.state == CKPT_STATE_COMMITTED)
			committed++;
	}
	/* Without --wait, collect every outcome now: nothing may be lost. */
	for (size_t i = 0; i < naccepted; i++) {
		ckpt_status st;

		if (wait_outcome(*ctxp, accepted[i], &st) < 0) {
			bad = 1;
			continue;
		}
		print_outcome(accepted[i], &st, stalls[i]);
		if (!outcome_ok(accepted[i], &st))
			bad = 1;
		if (st.state == CKPT_STATE_COMMITTED)
			committed++;
	}
	say("done: %zu committed, %zu retries after disconnects%s", committed, retries,
	    bad ? ", with errors" : "");
	free(accepted);
	free(stalls);
	return bad;
}

/* ---- restoring ----------------------------------------------------------- */

static int desc_equal(const ckpt_tensor_desc *a, const ckpt_tensor_desc *b)
{
	if (a->dtype != b->dtype || a->ndim != b->ndim)
		return 0;
	for (uint32_t k = 0; k < a->ndim && k < CKPT_MAX_DIMS; k++)
		if (a->global_shape[k] != b->global_shape[k] || a->offset[k] != b->offset[k] ||
		    a->shape[k] != b->shape[k])
			return 0;
	return 1;
}

static int run_restore(ckpt_ctx *ctx)
{
	uint64_t want = CKPT_STEP_LATEST, step;
	ckpt_restore *rs = NULL;
	const char *warning;
	uint64_t total = 0;
	int bad = 0, r, count;
	double t0 = now_ms();

	if (strcmp(o.restore, "latest") != 0) {
		char *end;

		errno = 0;
		want = strtoull(o.restore, &end, 10);
		if (errno || *end || end == o.restore) {
			fprintf(stderr, "bad --restore %s\n", o.restore);
			return 2;
		}
	}
	r = ckpt_restore_open(ctx, want, o.agree ? CKPT_RESTORE_AGREE : 0, &rs);
	if (r < 0) {
		say("restore %s: ckpt_restore_open: %s (%d)%s", o.restore, ckpt_strerror(r), r,
		    o.expect_restore_error ? " (as expected)" : "");
		return o.expect_restore_error ? 0 : 1;
	}
	if (o.expect_restore_error) {
		say("restore %s: restored step %" PRIu64 ", expected an error", o.restore,
		    ckpt_restore_step(rs));
		ckpt_restore_close(rs);
		return 1;
	}
	step = ckpt_restore_step(rs);
	warning = ckpt_restore_warning(rs);
	if (warning)
		say("restore %s: fell back to step %" PRIu64 ": %s", o.restore, step, warning);
	if (o.expect_fallback && !warning) {
		say("restore %s: expected a fallback warning, got none (step %" PRIu64 ")", o.restore, step);
		bad = 1;
	}
	if (!o.expect_fallback && warning) {
		say("restore %s: unexpected fallback", o.restore);
		bad = 1;
	}
	if (o.expect_step != CKPT_STEP_LATEST && step != o.expect_step) {
		say("restore %s: restored step %" PRIu64 ", expected %" PRIu64, o.restore, step,
		    o.expect_step);
		bad = 1;
	}
	count = ckpt_restore_tensor_count(rs);
	if (count != (int)ntensors) {
		say("restore: step %" PRIu64 " has %d tensors, expected %u", step, count, ntensors);
		bad = 1;
	}
	for (int i = 0; i < count; i++) {
		ckpt_tensor_desc d;
		uint32_t k;

		r = ckpt_restore_tensor_at(rs, i, &d);
		if (r < 0) {
			say("restore: ckpt_restore_tensor_at(%d): %s", i, ckpt_strerror(r));
			bad = 1;
			continue;
		}
		for (k = 0; k < ntensors; k++)
			if (d.name && strcmp(d.name, tensors[k].name) == 0)
				break;
		if (k == ntensors) {
			say("restore: unexpected tensor \"%s\"", d.name ? d.name : "(null)");
			bad = 1;
		} else if (!desc_equal(&d, &tensors[k].desc)) {
			say("restore: tensor \"%s\" has a different dtype/shape/slice", d.name);
			bad = 1;
		}
	}
	for (uint32_t i = 0; i < ntensors; i++) {
		struct tensor *t = &tensors[i];
		uint64_t key = data_key(step, i);
		int64_t diff;

		if (t->nbytes <= (1u << 20)) {
			void *buf = malloc(t->nbytes);

			if (!buf)
				return 1;
			r = ckpt_restore_tensor(rs, t->name, buf, t->nbytes);
			diff = r < 0 ? 0 : gen_compare(key, buf, t->nbytes);
			free(buf);
			if (r == 0 || r == (int)t->nbytes)
				r = 0;
		} else {
			const void *p = NULL;
			size_t len = 0;

			r = ckpt_restore_tensor_ptr(rs, t->name, &p, &len);
			if (r >= 0 && len != t->nbytes) {
				say("restore: tensor \"%s\" is %zu bytes, expected %" PRIu64, t->name, len,
				    t->nbytes);
				bad = 1;
				continue;
			}
			diff = r < 0 ? 0 : gen_compare(key, p, t->nbytes);
		}
		if (r < 0) {
			say("restore: tensor \"%s\": %s (%d)", t->name, ckpt_strerror(r), r);
			bad = 1;
		} else if (diff >= 0) {
			say("restore: tensor \"%s\" of step %" PRIu64 " differs at byte %" PRId64
			    " of %" PRIu64, t->name, step, diff, t->nbytes);
			bad = 1;
		}
		total += t->nbytes;
	}
	r = ckpt_restore_blob(rs, NULL, 0);
	if (r < 0 || (uint64_t)r != o.blob_bytes) {
		say("restore: blob is %d bytes (%s), expected %" PRIu64, r,
		    r < 0 ? ckpt_strerror(r) : "ok", o.blob_bytes);
		bad = 1;
	} else if (o.blob_bytes) {
		void *buf = malloc(o.blob_bytes);

		if (!buf)
			return 1;
		r = ckpt_restore_blob(rs, buf, o.blob_bytes);
		if (r != (int)o.blob_bytes || gen_compare(data_key(step, UINT32_MAX), buf, o.blob_bytes) >= 0) {
			say("restore: blob of step %" PRIu64 " differs", step);
			bad = 1;
		}
		free(buf);
	}
	ckpt_restore_close(rs);
	if (!bad)
		say("restored step %" PRIu64 " ok (%u tensors, %" PRIu64 " bytes, %.0f ms)", step,
		    ntensors, total, now_ms() - t0);
	return bad;
}

/* --latest-after PATH: connected (so ckptd knows the job), wait for PATH,
 * then print what ckpt_latest and ckpt_list say. */
static int run_latest(ckpt_ctx *ctx)
{
	double deadline = now_ms() + o.timeout_ms;
	uint64_t latest = 0, steps[64];
	int r, n;

	while (access(o.latest_after, F_OK) != 0) {
		if (now_ms() > deadline) {
			say("%s did not appear within %d ms", o.latest_after, o.timeout_ms);
			return 1;
		}
		sleep_ms(20);
	}
	r = ckpt_latest(ctx, &latest);
	n = ckpt_list(ctx, steps, 64);
	if (r < 0 || n < 0) {
		say("ckpt_latest: %s, ckpt_list: %s", ckpt_strerror(r), ckpt_strerror(n));
		return 1;
	}
	say("latest %" PRIu64 ", %d committed steps, newest listed %" PRIu64, latest, n,
	    n > 0 ? steps[(n < 64 ? n : 64) - 1] : 0);
	return 0;
}

/* ---- command line -------------------------------------------------------- */

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	double mult = 1;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	if (*end) {
		if (!strcmp(end, "K") || !strcmp(end, "KiB") || !strcmp(end, "k"))
			mult = 1024.0;
		else if (!strcmp(end, "M") || !strcmp(end, "MiB"))
			mult = 1024.0 * 1024;
		else if (!strcmp(end, "G") || !strcmp(end, "GiB"))
			mult = 1024.0 * 1024 * 1024;
		else
			return -EINVAL;
	}
	*out = (uint64_t)(v * mult);
	return 0;
}

static int parse_list(const char *s, uint64_t **out, size_t *n)
{
	char *copy = strdup(s), *tok, *save = NULL;
	size_t cap = 16;
	uint64_t *v = malloc(cap * sizeof(*v));

	*n = 0;
	if (!copy || !v)
		return -ENOMEM;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (*n == cap) {
			uint64_t *nv = realloc(v, (cap *= 2) * sizeof(*v));

			if (!nv)
				return -ENOMEM;
			v = nv;
		}
		if (parse_u64(tok, &v[*n]) < 0) {
			free(copy);
			free(v);
			return -EINVAL;
		}
		(*n)++;
	}
	free(copy);
	*out = v;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ckpt-test-rank --socket PATH --job NAME --rank R --world N [options]\n"
		"  --seed S               data seed (default 1)\n"
		"  --steps 10,20,30       steps to save (or --first A --every B --count C; C 0: until stopped)\n"
		"  --tensors N --min-bytes B --max-bytes B   random tensor set (sizes accept K/M/G)\n"
		"  --blob-bytes B         user blob per save\n"
		"  --wait                 wait for each step's outcome and require COMMITTED\n"
		"  --timeout-ms MS        per outcome/restore/reconnect (default 60000)\n"
		"  --restore latest|STEP [--expect-step N] [--expect-fallback]\n"
		"  --agree                restore one step for the whole job (CKPT_RESTORE_AGREE)\n"
		"  --expect-restore-error the restore must fail (its error is printed)\n"
		"  --latest-after PATH    once PATH exists, print ckpt_latest and ckpt_list\n"
		"  --sleep-between-ms MS  pause between saves\n"
		"  --reconnect-loop       keep saving through ckptd restarts\n"
		"  --stop-file PATH       stop saving once PATH exists\n"
		"  --accept-skipped       a SKIPPED outcome is fine\n"
		"  --accept-aborted       a FAILED(-CKPT_E_ABORTED) outcome is fine\n"
		"  --expect-fail 20,30    these steps must end FAILED\n"
		"  --die-in-step S --die-when copy|finish   SIGKILL self during step S\n"
		"  --connect-timeout-ms MS\n"
		"  --gate STEP:PATH       before saving STEP, wait until PATH exists\n"
		"  --scribble-step S      keep writing into step S's slot for 300 ms after finish\n");
}

enum {
	OPT_SOCKET = 256, OPT_JOB, OPT_RANK, OPT_WORLD, OPT_SEED, OPT_STEPS, OPT_FIRST,
	OPT_EVERY, OPT_COUNT, OPT_TENSORS, OPT_MIN, OPT_MAX, OPT_BLOB, OPT_WAIT, OPT_TIMEOUT,
	OPT_RESTORE, OPT_EXPECT_STEP, OPT_EXPECT_FALLBACK, OPT_SLEEP, OPT_RECONNECT,
	OPT_STOP_FILE, OPT_ACCEPT_SKIPPED, OPT_ACCEPT_ABORTED, OPT_EXPECT_FAIL, OPT_DIE_STEP,
	OPT_DIE_WHEN, OPT_CONNECT_TIMEOUT, OPT_HELP, OPT_GATE, OPT_SCRIBBLE, OPT_AGREE,
	OPT_EXPECT_RESTORE_ERROR, OPT_LATEST_AFTER,
};

static const struct option long_opts[] = {
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "job", required_argument, NULL, OPT_JOB },
	{ "rank", required_argument, NULL, OPT_RANK },
	{ "world", required_argument, NULL, OPT_WORLD },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "steps", required_argument, NULL, OPT_STEPS },
	{ "first", required_argument, NULL, OPT_FIRST },
	{ "every", required_argument, NULL, OPT_EVERY },
	{ "count", required_argument, NULL, OPT_COUNT },
	{ "tensors", required_argument, NULL, OPT_TENSORS },
	{ "min-bytes", required_argument, NULL, OPT_MIN },
	{ "max-bytes", required_argument, NULL, OPT_MAX },
	{ "blob-bytes", required_argument, NULL, OPT_BLOB },
	{ "wait", no_argument, NULL, OPT_WAIT },
	{ "timeout-ms", required_argument, NULL, OPT_TIMEOUT },
	{ "restore", required_argument, NULL, OPT_RESTORE },
	{ "expect-step", required_argument, NULL, OPT_EXPECT_STEP },
	{ "expect-fallback", no_argument, NULL, OPT_EXPECT_FALLBACK },
	{ "sleep-between-ms", required_argument, NULL, OPT_SLEEP },
	{ "reconnect-loop", no_argument, NULL, OPT_RECONNECT },
	{ "stop-file", required_argument, NULL, OPT_STOP_FILE },
	{ "accept-skipped", no_argument, NULL, OPT_ACCEPT_SKIPPED },
	{ "accept-aborted", no_argument, NULL, OPT_ACCEPT_ABORTED },
	{ "expect-fail", required_argument, NULL, OPT_EXPECT_FAIL },
	{ "die-in-step", required_argument, NULL, OPT_DIE_STEP },
	{ "die-when", required_argument, NULL, OPT_DIE_WHEN },
	{ "connect-timeout-ms", required_argument, NULL, OPT_CONNECT_TIMEOUT },
	{ "help", no_argument, NULL, OPT_HELP },
	{ "gate", required_argument, NULL, OPT_GATE },
	{ "scribble-step", required_argument, NULL, OPT_SCRIBBLE },
	{ "agree", no_argument, NULL, OPT_AGREE },
	{ "expect-restore-error", no_argument, NULL, OPT_EXPECT_RESTORE_ERROR },
	{ "latest-after", required_argument, NULL, OPT_LATEST_AFTER },
	{ NULL, 0, NULL, 0 },
};

int main(int argc, char **argv)
{
	ckpt_options co = { .struct_size = sizeof(co) };
	ckpt_ctx *ctx = NULL;
	bool have_rank = false, have_world = false;
	uint64_t v;
	int c, r, ret;

	o.seed = 1;
	o.first = 10;
	o.every = 10;
	o.count = 1;
	o.ntensors = 8;
	o.min_bytes = 4096;
	o.max_bytes = 4u << 20;
	o.timeout_ms = 60000;
	o.expect_step = CKPT_STEP_LATEST;
	o.die_step = CKPT_STEP_LATEST;
	o.scribble_step = CKPT_STEP_LATEST;
	o.die_after_finish = true;
	o.connect_timeout_ms = 20000;

	while ((c = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
		const char *a = optarg;

		switch (c) {
		case OPT_SOCKET: o.socket = a; break;
		case OPT_JOB: o.job = a; break;
		case OPT_STEPS:
			if (parse_list(a, &o.steps, &o.nsteps) < 0 || o.nsteps == 0)
				goto bad;
			break;
		case OPT_EXPECT_FAIL:
			if (parse_list(a, &o.expect_fail, &o.nexpect_fail) < 0)
				goto bad;
			break;
		case OPT_RESTORE: o.restore = a; break;
		case OPT_WAIT: o.wait = true; break;
		case OPT_EXPECT_FALLBACK: o.expect_fallback = true; break;
		case OPT_AGREE: o.agree = true; break;
		case OPT_EXPECT_RESTORE_ERROR: o.expect_restore_error = true; break;
		case OPT_LATEST_AFTER: o.latest_after = a; break;
		case OPT_RECONNECT: o.reconnect_loop = true; break;
		case OPT_STOP_FILE: o.stop_file = a; break;
		case OPT_ACCEPT_SKIPPED: o.accept_skipped = true; break;
		case OPT_ACCEPT_ABORTED: o.accept_aborted = true; break;
		case OPT_DIE_WHEN:
			if (!strcmp(a, "copy"))
				o.die_after_finish = false;
			else if (!strcmp(a, "finish"))
				o.die_after_finish = true;
			else
				goto bad;
			break;
		case OPT_SCRIBBLE:
			if (parse_u64(a, &o.scribble_step) < 0)
				goto bad;
			break;
		case OPT_HELP: usage(stdout); return 0;
		case OPT_GATE: {
			char *colon = strchr(a, ':');

			if (!colon || colon == a || !colon[1])
				goto bad;
			*colon = '\0';
			if (parse_u64(a, &o.gate_step) < 0)
				goto bad;
			o.gate_file = colon + 1;
			break;
		}
		case '?': usage(stderr); return 2;
		default:
			if (parse_u64(a, &v) < 0)
				goto bad;
			switch (c) {
			case OPT_RANK: o.rank = (uint32_t)v; have_rank = true; break;
			case OPT_WORLD: o.world = (uint32_t)v; have_world = true; break;
			case OPT_SEED: o.seed = v; break;
			case OPT_FIRST: o.first = v; break;
			case OPT_EVERY: o.every = v; break;
			case OPT_COUNT: o.count = v; break;
			case OPT_TENSORS: o.ntensors = (uint32_t)v; break;
			case OPT_MIN: o.min_bytes = v; break;
			case OPT_MAX: o.max_bytes = v; break;
			case OPT_BLOB: o.blob_bytes = v; break;
			case OPT_TIMEOUT: o.timeout_ms = (int)v; break;
			case OPT_EXPECT_STEP: o.expect_step = v; break;
			case OPT_SLEEP: o.sleep_between_ms = (unsigned)v; break;
			case OPT_DIE_STEP: o.die_step = v; break;
			case OPT_CONNECT_TIMEOUT: o.connect_timeout_ms = (uint32_t)v; break;
			default: goto bad;
			}
		}
		continue;
bad:
		fprintf(stderr, "ckpt-test-rank: bad value for --%s: %s\n", long_opts[c - 256].name,
			a ? a : "");
		return 2;
	}
	if (!o.socket || !o.job || !have_rank || !have_world || o.rank >= o.world ||
	    o.min_bytes == 0 || o.min_bytes > o.max_bytes) {
		usage(stderr);
		return 2;
	}
	if (!o.nsteps && o.count) {
		o.nsteps = o.count;
		o.steps = calloc(o.nsteps, sizeof(*o.steps));
		if (!o.steps)
			return 1;
		for (uint64_t i = 0; i < o.count; i++)
			o.steps[i] = o.first + i * o.every;
	}
	if (build_tensor_set() < 0)
		return 1;

	co.socket_path = o.socket;
	co.job = o.job;
	co.rank = o.rank;
	co.world_size = o.world;
	co.local_rank = o.rank;
	co.max_save_bytes = save_bytes();
	co.connect_timeout_ms = o.connect_timeout_ms;
	conn_opts = co;
	static char connect_error[256];
	co.error = connect_error;
	co.error_bytes = sizeof(connect_error);
	r = ckpt_connect(&co, &ctx);
	if (r < 0) {
		say("ckpt_connect(%s, job %s): %s (%d): %s", o.socket, o.job, ckpt_strerror(r), r,
		    connect_error);
		return 1;
	}
	say("connected: job %s world %u, %u tensors, %.1f MiB per save, %u slots of %.1f MiB",
	    o.job, o.world, ntensors, co.max_save_bytes / 1048576.0, ckpt_slot_count(ctx),
	    ckpt_slot_bytes(ctx) / 1048576.0);
	if (ckpt_slot_bytes(ctx) < co.max_save_bytes) {
		say("slot of %" PRIu64 " bytes is smaller than max_save_bytes %" PRIu64,
		    ckpt_slot_bytes(ctx), co.max_save_bytes);
		ckpt_close(ctx);
		return 1;
	}
	if (o.latest_after)
		ret = run_latest(ctx);
	else if (o.restore)
		ret = run_restore(ctx);
	else
		ret = run_saves(&ctx);
	ckpt_close(ctx);
	return ret ? 1 : 0;
}
