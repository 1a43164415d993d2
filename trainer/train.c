/* SPDX-License-Identifier: MIT */
/*
 * ckpt-train: a data-parallel byte-level language-model trainer over MPI
 * that checkpoints through libckpt (the reference integration of it).
 *
 * The model is the MLP language model of model.h. Each step every rank
 * takes its own rows of a batch drawn from a shared deterministic RNG,
 * computes the gradient, and the gradients are averaged ZeRO-1 style:
 * each rank owns a contiguous slice [lo, lo+len) of the flat parameter
 * vector with its fp32 master weights and AdamW moments; the other ranks
 * send it their gradient for that slice (MPI_Alltoallv), it sums them in
 * rank order (so the result never depends on MPI's reduction algorithm),
 * updates its slice and all slices are gathered back (MPI_Allgatherv).
 * Same flags and world size: bitwise the same run, also across resumes.
 *
 * A checkpoint of step N is, per rank, its slice of the master weights and
 * of both moments (tensors "master", "adam_m", "adam_v": slices of 1-D
 * tensors of n_params elements), plus a blob with the step, the data RNG
 * and position and the configuration the state belongs to.
 *
 * --device cuda (built with -Dgpu=enabled) runs the same loop with the
 * state on the GPUs: gpu.c does the model step, the reduction to owners
 * (NCCL) and AdamW there, with the same slices, formulas and checkpoint
 * tensors, so the two variants' checkpoints are interchangeable.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "corpus.h"
#include "gpu.h"
#include "model.h"

/* The sample text shipped with ckpt: installed, or in the source tree. */
#ifndef CKPT_TRAIN_SAMPLE
#define CKPT_TRAIN_SAMPLE ""
#endif
#ifndef CKPT_TRAIN_SAMPLE_SRC
#define CKPT_TRAIN_SAMPLE_SRC ""
#endif

enum ckpt_mode { MODE_OFF, MODE_SYNC, MODE_ASYNC };
enum device { DEVICE_CPU, DEVICE_CUDA };

struct options {
	struct model_config model;
	uint32_t batch, seq;
	double lr, min_lr_frac, wd, clip, beta1, beta2, eps;
	uint64_t steps, warmup, seed, log_every, ckpt_every;
	enum ckpt_mode mode;
	enum device device;
	const char *socket, *job, *sync_dir, *dump, *data, *man_dir, *cache;
	int resume;            /* 1: resume from newest committed; 0: --no-resume */
	uint64_t resume_step;  /* 0: newest; else --resume STEP */
	uint64_t wait_ms;      /* how long to wait for the last save at exit */
	uint64_t step_sleep_ms; /* pause after each step (tests: a slow job) */
};

/* The user blob of a checkpoint; also the header of a --dump file. */
#define BLOB_MAGIC 0x314e5254544b4301ULL /* "\1CKTTRN1" */
#define BLOB_VERSION 1
struct train_blob {
	uint64_t magic;
	uint32_t version, world;
	uint64_t step;
	uint64_t data_rng;      /* RNG that draws the batch rows */
	uint64_t data_pos;      /* bytes of targets consumed so far */
	uint64_t data_hash, data_len;
	uint64_t n_params, lo, len;
	uint32_t ctx, embd, hidden, layers;
	uint64_t reserved[4];
};

struct trainer {
	struct options o;
	int rank, world;
	struct model_layout lay;
	struct model_work work;
	struct corpus text;
	float *params, *grad;           /* full vector */
	float *master, *m, *v, *gsum;   /* owned slice */
	float *gparts;                  /* world x len: received gradient parts */
	uint8_t *decay;                 /* owned slice: weight decay applies */
	int *counts, *displs;           /* per rank slice, for MPI */
	size_t lo, len;
	uint8_t *ctxbuf, *tgtbuf;
	uint64_t step, data_rng, data_pos;
	ckpt_ctx *ck;
	uint64_t last_saved;
	double stall_s;
	uint64_t saves, saves_failed;
	/* Reconnect backoff while ckptd is unreachable: the same on every
	 * rank (decided collectively); retry_at is rank 0's clock only. */
	double backoff_s;       /* 0: reachable */
	double retry_at;
	/* --device cuda: the state lives on the GPU (gpu.h); the host
	 * params/master/m/v above are then only staging for --dump and
	 * --ckpt-mode sync, and grad/gsum/gparts/decay/work are unused. */
	struct gpu *gpu;
};

/* Bytes a rank asks ckptd for beyond its tensors and blob (max_save_bytes):
 * room for the extents' alignment padding. Part of --describe-model. */
#define SAVE_RESERVE_BYTES (4 * 4096)

/* First and longest wait between save attempts while ckptd is unreachable. */
#define BACKOFF_FIRST_S 1.0
#define BACKOFF_MAX_S 30.0

static int g_rank;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stdout, fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "ckpt-train: rank %d: ", g_rank);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
	MPI_Abort(MPI_COMM_WORLD, 1);
	exit(1);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t xorshift64s(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dULL;
}

/* ---- flags ------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
"usage: mpirun -np N ckpt-train [options]\n"
"Model and training:\n"
"  --ctx N          context bytes (8)          --embd N      embedding width (16)\n"
"  --hidden N       hidden width (128)         --layers N    hidden layers (1)\n"
"  --batch N        rows per rank per step (4) --seq N       targets per row (32)\n"
"  --steps N        last step (300)            --lr X        peak learning rate (3e-3)\n"
"  --warmup N       warmup steps (20)          --min-lr-frac X  final lr / peak (0.1)\n"
"  --wd X           AdamW weight decay (0.01)  --clip X      gradient norm clip (1.0)\n"
"  --seed N         init and data seed (1)     --log-every N (10)\n"
"  --device cpu|cuda  where to train (cpu); cuda: one GPU per rank (NCCL), built\n"
"                   with meson -Dgpu=enabled\n"
"Data:\n"
"  --data PATH      UTF-8 text to train on. Default: a corpus built once from the\n"
"                   Japanese manual pages (--man-dir, /usr/share/man/ja) cached at\n"
"                   --corpus-cache (default $XDG_CACHE_HOME/ckpt-train/manpages-ja.txt),\n"
"                   else the sample text shipped with ckpt.\n"
"Checkpoints:\n"
"  --ckpt-mode async|sync|off (async)          --ckpt-every N  (0: never)\n"
"  --socket PATH    ckptd socket (libckpt default)  --job NAME (ckpt-train)\n"
"  --sync-dir DIR   where --ckpt-mode sync writes\n"
"  --resume STEP    resume from STEP           --no-resume  start fresh\n"
"  --wait-ms N      wait this long at exit for the last save's outcome (30000)\n"
"  While ckptd is unreachable, saves are skipped (reported as failed) and\n"
"  retried after 1 s, doubling up to 30 s; training never waits for ckptd.\n"
"Testing:\n"
"  --step-sleep-ms N  sleep N ms after every step (0)\n"
"  --dump PATH      write the final state; %%r in PATH is the rank, else .RANK is appended\n"
"  --describe-model print what a checkpoint of this model holds (JSON, for\n"
"                   ckpt-plan --model-file) and exit\n");
}

static uint64_t parse_u64(const char *name, const char *s, uint64_t min, uint64_t max)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < min || v > max)
		die("--%s: '%s' is not a whole number in [%" PRIu64 ", %" PRIu64 "]", name, s, min, max);
	return v;
}

static double parse_f(const char *name, const char *s, double min, double max)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= min && v <= max))
		die("--%s: '%s' is not a number in [%g, %g]", name, s, min, max);
	return v;
}

/*
 * What a checkpoint of this model holds, for planners (ckpt-plan
 * --model-file): rank r of W saves elements [n_params*r/W,
 * n_params*(r+1)/W) of each tensor (a 1-D slice, setup() below), then the
 * blob; it asks ckptd for that plus save_reserve_bytes per save
 * (ck_connect). Independent of the world size, so no MPI is needed for it.
 */
static void describe_model(const struct model_config *m)
{
	struct model_layout lay;
	if (model_layout(m, &lay) < 0)
		die("model sizes out of range");
	printf("{\n \"format\": \"ckpt-train-model\",\n \"version\": 1,\n"
	       " \"model\": \"mlp\",\n \"ctx\": %u,\n \"embd\": %u,\n \"hidden\": %u,\n"
	       " \"layers\": %u,\n \"n_params\": %zu,\n \"sharding\": \"contiguous\",\n"
	       " \"tensors\": [\n  {\"name\": \"master\", \"dtype\": \"f32\"},\n"
	       "  {\"name\": \"adam_m\", \"dtype\": \"f32\"},\n"
	       "  {\"name\": \"adam_v\", \"dtype\": \"f32\"}\n ],\n"
	       " \"blob_bytes\": %zu,\n \"save_reserve_bytes\": %d\n}\n",
	       m->ctx, m->embd, m->hidden, m->layers, lay.n_params, sizeof(struct train_blob),
	       SAVE_RESERVE_BYTES);
	fflush(stdout);
}

static void parse_args(int argc, char **argv, struct options *o)
{
	enum { O_CTX = 256, O_EMBD, O_HIDDEN, O_LAYERS, O_BATCH, O_SEQ, O_STEPS, O_LR,
	       O_WARMUP, O_MINLR, O_WD, O_CLIP, O_SEED, O_LOG, O_MODE, O_EVERY, O_SOCKET,
	       O_JOB, O_SYNCDIR, O_RESUME, O_NORESUME, O_DUMP, O_DATA, O_MANDIR, O_CACHE,
	       O_WAIT, O_SLEEP, O_DEVICE, O_DESCRIBE, O_HELP };
	static const struct option lo[] = {
		{"ctx", 1, 0, O_CTX}, {"embd", 1, 0, O_EMBD}, {"hidden", 1, 0, O_HIDDEN},
		{"layers", 1, 0, O_LAYERS}, {"batch", 1, 0, O_BATCH}, {"seq", 1, 0, O_SEQ},
		{"steps", 1, 0, O_STEPS}, {"lr", 1, 0, O_LR}, {"warmup", 1, 0, O_WARMUP},
		{"min-lr-frac", 1, 0, O_MINLR}, {"wd", 1, 0, O_WD}, {"clip", 1, 0, O_CLIP},
		{"seed", 1, 0, O_SEED}, {"log-every", 1, 0, O_LOG}, {"ckpt-mode", 1, 0, O_MODE},
		{"ckpt-every", 1, 0, O_EVERY}, {"socket", 1, 0, O_SOCKET}, {"job", 1, 0, O_JOB},
		{"sync-dir", 1, 0, O_SYNCDIR}, {"resume", 1, 0, O_RESUME},
		{"no-resume", 0, 0, O_NORESUME}, {"dump", 1, 0, O_DUMP}, {"data", 1, 0, O_DATA},
		{"man-dir", 1, 0, O_MANDIR}, {"corpus-cache", 1, 0, O_CACHE},
		{"wait-ms", 1, 0, O_WAIT}, {"step-sleep-ms", 1, 0, O_SLEEP},
		{"device", 1, 0, O_DEVICE}, {"describe-model", 0, 0, O_DESCRIBE},
		{"help", 0, 0, O_HELP}, {0, 0, 0, 0},
	};
	*o = (struct options){
		.model = {.ctx = 8, .embd = 16, .hidden = 128, .layers = 1},
		.batch = 4, .seq = 32, .lr = 3e-3, .min_lr_frac = 0.1, .wd = 0.01, .clip = 1.0,
		.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .steps = 300, .warmup = 20, .seed = 1,
		.log_every = 10, .mode = MODE_ASYNC, .job = "ckpt-train", .man_dir = "/usr/share/man/ja",
		.resume = 1, .wait_ms = 30000,
	};
	int c, describe = 0;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case O_CTX: o->model.ctx = (uint32_t)parse_u64("ctx", optarg, 1, 4096); break;
		case O_EMBD: o->model.embd = (uint32_t)parse_u64("embd", optarg, 1, 65536); break;
		case O_HIDDEN: o->model.hidden = (uint32_t)parse_u64("hidden", optarg, 1, 65536); break;
		case O_LAYERS: o->model.layers = (uint32_t)parse_u64("layers", optarg, 1, MODEL_MAX_LAYERS); break;
		case O_BATCH: o->batch = (uint32_t)parse_u64("batch", optarg, 1, 1 << 20); break;
		case O_SEQ: o->seq = (uint32_t)parse_u64("seq", optarg, 1, 1 << 20); break;
		case O_STEPS: o->steps = parse_u64("steps", optarg, 0, UINT64_MAX / 2); break;
		case O_LR: o->lr = parse_f("lr", optarg, 0, 10); break;
		case O_WARMUP: o->warmup = parse_u64("warmup", optarg, 0, UINT64_MAX / 2); break;
		case O_MINLR: o->min_lr_frac = parse_f("min-lr-frac", optarg, 0, 1); break;
		case O_WD: o->wd = parse_f("wd", optarg, 0, 10); break;
		case O_CLIP: o->clip = parse_f("clip", optarg, 0, 1e30); break;
		case O_SEED: o->seed = parse_u64("seed", optarg, 0, UINT64_MAX); break;
		case O_LOG: o->log_every = parse_u64("log-every", optarg, 1, UINT64_MAX); break;
		case O_EVERY: o->ckpt_every = parse_u64("ckpt-every", optarg, 0, UINT64_MAX); break;
		case O_MODE:
			if (!strcmp(optarg, "async"))
				o->mode = MODE_ASYNC;
			else if (!strcmp(optarg, "sync"))
				o->mode = MODE_SYNC;
			else if (!strcmp(optarg, "off"))
				o->mode = MODE_OFF;
			else
				die("--ckpt-mode: '%s' is not async, sync or off", optarg);
			break;
		case O_DEVICE:
			if (!strcmp(optarg, "cpu"))
				o->device = DEVICE_CPU;
			else if (!strcmp(optarg, "cuda"))
				o->device = DEVICE_CUDA;
			else
				die("--device: '%s' is not cpu or cuda", optarg);
			break;
		case O_SOCKET: o->socket = optarg; break;
		case O_JOB: o->job = optarg; break;
		case O_SYNCDIR: o->sync_dir = optarg; break;
		case O_RESUME: o->resume = 1; o->resume_step = parse_u64("resume", optarg, 1, UINT64_MAX - 1); break;
		case O_NORESUME: o->resume = 0; break;
		case O_DUMP: o->dump = optarg; break;
		case O_DATA: o->data = optarg; break;
		case O_MANDIR: o->man_dir = optarg; break;
		case O_CACHE: o->cache = optarg; break;
		case O_WAIT: o->wait_ms = parse_u64("wait-ms", optarg, 0, 86400000); break;
		case O_SLEEP: o->step_sleep_ms = parse_u64("step-sleep-ms", optarg, 0, 60000); break;
		case O_DESCRIBE: describe = 1; break;
		case 'h':
		case O_HELP:
			if (g_rank == 0)
				usage(stdout);
			MPI_Finalize();
			exit(0);
		default:
			if (g_rank == 0)
				usage(stderr);
			MPI_Finalize();
			exit(2);
		}
	}
	if (optind < argc)
		die("unexpected argument '%s'", argv[optind]);
	if (describe) {
		if (g_rank == 0)
			describe_model(&o->model);
		MPI_Finalize();
		exit(0);
	}
	if (o->mode == MODE_SYNC && o->ckpt_every && !o->sync_dir)
		die("--ckpt-mode sync needs --sync-dir");
}

/* ---- data -------------------------------------------------------------- */

static void load_text(struct trainer *t)
{
	const struct options *o = &t->o;
	char cache[4096];
	const char *path = o->data;
	int r;

	if (!path) {
		if (o->cache) {
			snprintf(cache, sizeof(cache), "%s", o->cache);
		} else {
			const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
			if (xdg && *xdg)
				snprintf(cache, sizeof(cache), "%s/ckpt-train/manpages-ja.txt", xdg);
			else
				snprintf(cache, sizeof(cache), "%s/.cache/ckpt-train/manpages-ja.txt",
					 home && *home ? home : ".");
		}
		/* Rank 0 builds the cache once; the others wait for it. */
		if (t->rank == 0 && access(cache, R_OK) != 0) {
			char dir[4096];
			snprintf(dir, sizeof(dir), "%s", cache);
			for (char *p = dir + 1; *p; p++) {
				if (*p != '/')
					continue;
				*p = 0;
				mkdir(dir, 0755);
				*p = '/';
			}
			r = corpus_build_manpages(o->man_dir, cache);
			if (r == 0)
				say("corpus: built %s from %s", cache, o->man_dir);
			else
				say("corpus: no Japanese manual pages in %s (%s); using the sample text",
				    o->man_dir, strerror(-r));
		}
		MPI_Barrier(MPI_COMM_WORLD);
		if (access(cache, R_OK) == 0)
			path = cache;
		else if (access(CKPT_TRAIN_SAMPLE, R_OK) == 0)
			path = CKPT_TRAIN_SAMPLE;
		else
			path = CKPT_TRAIN_SAMPLE_SRC;
	}
	r = corpus_load(path, &t->text);
	if (r < 0)
		die("cannot read training text '%s': %s", path, strerror(-r));
	if (t->text.len < (size_t)o->model.ctx + o->seq + 1)
		die("training text '%s' has %zu bytes, fewer than ctx + seq + 1", path, t->text.len);
	if (t->rank == 0)
		say("data %s: %zu bytes", path, t->text.len);
}

/*
 * Draw the rows of this step for every rank (all ranks draw all of them,
 * so the RNG stays the same everywhere) and build this rank's examples.
 */
static void make_batch(struct trainer *t)
{
	const size_t K = t->o.model.ctx, S = t->o.seq, B = t->o.batch;
	const size_t span = t->text.len - K - S + 1;
	for (size_t i = 0; i < (size_t)t->world * B; i++) {
		size_t start = K + (size_t)(xorshift64s(&t->data_rng) % span);
		if (i / B != (size_t)t->rank)
			continue;
		size_t row = i % B;
		for (size_t s = 0; s < S; s++) {
			size_t e = row * S + s;
			memcpy(t->ctxbuf + e * K, t->text.bytes + start + s - K, K);
			t->tgtbuf[e] = t->text.bytes[start + s];
		}
	}
	t->data_pos += (uint64_t)t->world * B * S;
}

/* ---- optimizer --------------------------------------------------------- */

static double lr_at(const struct options *o, uint64_t step)
{
	if (o->warmup && step <= o->warmup)
		return o->lr * (double)step / (double)o->warmup;
	double min_lr = o->lr * o->min_lr_frac;
	if (o->steps <= o->warmup)
		return o->lr;
	double p = (double)(step - o->warmup) / (double)(o->steps - o->warmup);
	if (p > 1)
		p = 1;
	return min_lr + 0.5 * (o->lr - min_lr) * (1 + cos(M_PI * p));
}

/* One training step; returns the mean loss over all ranks. */
static double train_step(struct trainer *t, uint64_t step, double *lr_out, double *norm_out)
{
	const struct options *o = &t->o;
	size_t rows = (size_t)o->batch * o->seq;

	/* Gradient norm and loss: per-rank parts gathered, summed in order. */
	double part[2] = {0.0, 0.0}, *all;

	make_batch(t);
	if (t->gpu) {
		/* The same quantities, computed on the device (gpu.c). */
		if (gpu_step(t->gpu, t->ctxbuf, t->tgtbuf, &part[1], &part[0]) < 0)
			die("step %" PRIu64 ": %s", step, gpu_error(t->gpu));
	} else {
		part[1] = model_step(&o->model, &t->lay, t->params, t->grad, &t->work,
				     t->ctxbuf, t->tgtbuf, rows);

		/* Reduce-scatter by hand: owners sum the parts in rank order. */
		MPI_Alltoallv(t->grad, t->counts, t->displs, MPI_FLOAT,
			      t->gparts, t->counts + t->world, t->displs + t->world, MPI_FLOAT,
			      MPI_COMM_WORLD);
		const float inv_world = 1.0f / (float)t->world;
		for (size_t i = 0; i < t->len; i++) {
			float s = 0.0f;
			for (int r = 0; r < t->world; r++)
				s += t->gparts[(size_t)r * t->len + i];
			t->gsum[i] = s * inv_world;
		}
		for (size_t i = 0; i < t->len; i++)
			part[0] += (double)t->gsum[i] * t->gsum[i];
	}
	all = malloc(sizeof(double) * 2 * (size_t)t->world);
	if (!all)
		die("out of memory");
	MPI_Allgather(part, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, MPI_COMM_WORLD);
	double sq = 0.0, lsum = 0.0;
	for (int r = 0; r < t->world; r++) {
		sq += all[2 * r];
		lsum += all[2 * r + 1];
	}
	free(all);
	double norm = sqrt(sq);
	float scale = (o->clip > 0 && norm > o->clip) ? (float)(o->clip / norm) : 1.0f;

	/* AdamW on the owned slice of the fp32 master weights. */
	double lr = lr_at(o, step);
	float b1 = (float)o->beta1, b2 = (float)o->beta2, eps = (float)o->eps;
	float bc1 = (float)(1.0 - pow(o->beta1, (double)step));
	float bc2 = (float)(1.0 - pow(o->beta2, (double)step));
	float flr = (float)lr, fwd = (float)o->wd;
	if (t->gpu) {
		struct gpu_adamw a = {
			.scale = scale, .beta1 = b1, .beta2 = b2, .eps = eps,
			.bc1 = bc1, .bc2 = bc2, .lr = flr, .wd = fwd,
		};
		if (gpu_update(t->gpu, &a) < 0)
			die("step %" PRIu64 ": %s", step, gpu_error(t->gpu));
	} else {
		for (size_t i = 0; i < t->len; i++) {
			float g = t->gsum[i] * scale;
			float mi = b1 * t->m[i] + (1.0f - b1) * g;
			float vi = b2 * t->v[i] + (1.0f - b2) * g * g;
			t->m[i] = mi;
			t->v[i] = vi;
			float upd = (mi / bc1) / (sqrtf(vi / bc2) + eps);
			if (t->decay[i])
				upd += fwd * t->master[i];
			t->master[i] -= flr * upd;
		}
		MPI_Allgatherv(t->master, (int)t->len, MPI_FLOAT, t->params, t->counts, t->displs,
			       MPI_FLOAT, MPI_COMM_WORLD);
	}
	*lr_out = lr;
	*norm_out = norm;
	return lsum / t->world;
}

/* ---- checkpoints ------------------------------------------------------- */

static void fill_blob(const struct trainer *t, struct train_blob *b)
{
	memset(b, 0, sizeof(*b));
	b->magic = BLOB_MAGIC;
	b->version = BLOB_VERSION;
	b->world = (uint32_t)t->world;
	b->step = t->step;
	b->data_rng = t->data_rng;
	b->data_pos = t->data_pos;
	b->data_hash = t->text.hash;
	b->data_len = t->text.len;
	b->n_params = t->lay.n_params;
	b->lo = t->lo;
	b->len = t->len;
	b->ctx = t->o.model.ctx;
	b->embd = t->o.model.embd;
	b->hidden = t->o.model.hidden;
	b->layers = t->o.model.layers;
}

static void slice_desc(const struct trainer *t, ckpt_tensor_desc *d, const char *name)
{
	memset(d, 0, sizeof(*d));
	d->name = name;
	d->dtype = CKPT_DTYPE_F32;
	d->ndim = 1;
	d->global_shape[0] = t->lay.n_params;
	d->offset[0] = t->lo;
	d->shape[0] = t->len;
}

/*
 * --device cuda: (re-)register ckpt's arena with CUDA, so that saves copy
 * device memory straight into it. Cheap when nothing changed; called
 * after each connect and whenever libckpt may have reconnected.
 */
static void attach_arena(struct trainer *t)
{
	const char *note = NULL;
	if (!t->gpu)
		return;
	gpu_arena_attach(t->gpu, t->ck, &note);
	if (note)
		say("ckpt: rank %d: %s", t->rank, note);
}

static int ck_connect(struct trainer *t, uint32_t timeout_ms)
{
	ckpt_options co = {
		.struct_size = sizeof(co),
		.socket_path = t->o.socket,
		.job = t->o.job,
		.rank = (uint32_t)t->rank,
		.world_size = (uint32_t)t->world,
		.local_rank = (uint32_t)t->rank,
		.max_save_bytes = 3 * (uint64_t)t->len * sizeof(float) + sizeof(struct train_blob) +
				  SAVE_RESERVE_BYTES,
		.connect_timeout_ms = timeout_ms,
	};
	char why[256] = "";
	co.error = why;
	co.error_bytes = sizeof(why);
	int r = ckpt_connect(&co, &t->ck);
	if (r == 0)
		attach_arena(t);
	else if (r == -CKPT_E_REFUSED || r == -CKPT_E_BAD_NAME)
		say("ckpt: rank %d: ckptd refused the connection: %s", t->rank, why);
	return r;
}

static void log_event(const struct trainer *t, const ckpt_status *st)
{
	switch (st->state) {
	case CKPT_STATE_COMMITTED:
		if (t->rank == 0)
			say("ckpt step %" PRIu64 " committed", st->step);
		break;
	case CKPT_STATE_SKIPPED:
		say("ckpt step %" PRIu64 " skipped: rank %d: %s", st->step, t->rank,
		    st->reason[0] ? st->reason : ckpt_strerror(st->error));
		break;
	case CKPT_STATE_FAILED:
		say("ckpt step %" PRIu64 " failed: rank %d: %s", st->step, t->rank,
		    st->reason[0] ? st->reason : ckpt_strerror(st->error));
		break;
	default:
		break;
	}
}

static void poll_events(struct trainer *t)
{
	ckpt_status st;
	if (!t->ck)
		return;
	while (ckpt_next_event(t->ck, &st) == 1)
		log_event(t, &st);
}

/*
 * Hand step t->step to ckptd. Returns 1 when ckptd could not be reached
 * (no connection, or it went away during the save), else 0 (saved, or
 * failed for another reason; failures are logged either way).
 */
static int save_async(struct trainer *t)
{
	ckpt_save *sv = NULL;
	ckpt_tensor_desc d;
	struct train_blob blob;
	double t0 = now_s();
	int r, unreachable = 0;

	t->saves++;
	if (!t->ck) {
		/* ckptd was down at start: try again, briefly. */
		r = ck_connect(t, 200);
		if (r < 0) {
			unreachable = 1;
			goto fail;
		}
	}
	r = ckpt_save_begin(t->ck, t->step, &sv);
	if (r < 0)
		goto fail;
	if (t->gpu) {
		/* The stall is the device-to-host copy into the arena. */
		static const char *const names[3] = {"master", "adam_m", "adam_v"};
		void *dst[3];
		attach_arena(t); /* ckpt_save_begin may have reconnected */
		for (int i = 0; i < 3; i++) {
			slice_desc(t, &d, names[i]);
			if ((r = ckpt_save_reserve(sv, &d, &dst[i])) < 0)
				goto abort;
		}
		if (gpu_save_to(t->gpu, dst[0], dst[1], dst[2]) < 0)
			die("ckpt step %" PRIu64 ": %s", t->step, gpu_error(t->gpu));
	} else {
		slice_desc(t, &d, "master");
		if ((r = ckpt_save_add(sv, &d, t->master)) < 0)
			goto abort;
		slice_desc(t, &d, "adam_m");
		if ((r = ckpt_save_add(sv, &d, t->m)) < 0)
			goto abort;
		slice_desc(t, &d, "adam_v");
		if ((r = ckpt_save_add(sv, &d, t->v)) < 0)
			goto abort;
	}
	fill_blob(t, &blob);
	if ((r = ckpt_save_set_blob(sv, &blob, sizeof(blob))) < 0)
		goto abort;
	r = ckpt_save_finish(sv);
	t->stall_s += now_s() - t0;
	if (r < 0)
		goto fail;
	t->last_saved = t->step;
	return 0;
abort:
	ckpt_save_abort(sv);
fail:
	t->stall_s += now_s() - t0;
	t->saves_failed++;
	if (r == -CKPT_E_DISCONNECTED)
		unreachable = 1;
	say("ckpt step %" PRIu64 " %s: rank %d: %s", t->step,
	    r == -CKPT_E_SKIPPED ? "skipped" : "failed", t->rank, ckpt_strerror(r));
	return unreachable;
}

/*
 * A save step in async mode. While ckptd is unreachable every reconnect
 * attempt costs up to its connect timeout, so attempts back off
 * exponentially in wall time. The ranks decide together: rank 0's clock
 * says whether to try (a flag it broadcasts, no waiting), and if any rank
 * could not reach ckptd all back off, so that no rank saves a step the
 * others skip (such a step could never commit).
 */
static void save_async_step(struct trainer *t)
{
	int attempt = 1, lost, any_lost;
	double now = now_s();

	if (t->rank == 0)
		attempt = t->backoff_s == 0 || now >= t->retry_at;
	MPI_Bcast(&attempt, 1, MPI_INT, 0, MPI_COMM_WORLD);
	if (!attempt) {
		t->saves++;
		t->saves_failed++;
		if (t->rank == 0)
			say("ckpt step %" PRIu64 " failed: ckptd unreachable (retry in %.1f s)",
			    t->step, t->retry_at - now);
		return;
	}
	lost = save_async(t);
	MPI_Allreduce(&lost, &any_lost, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (any_lost) {
		t->backoff_s = t->backoff_s == 0 ? BACKOFF_FIRST_S : t->backoff_s * 2;
		if (t->backoff_s > BACKOFF_MAX_S)
			t->backoff_s = BACKOFF_MAX_S;
		/* A context that lost ckptd would reconnect inside the next
		 * ckpt_save_begin() with the timeout it was opened with (up to
		 * a second, a stall per attempt); a fresh connect is bounded
		 * by ck_connect's short timeout instead. Outcomes not yet
		 * reported are lost with the daemon anyway. */
		if (t->gpu)
			gpu_arena_detach(t->gpu); /* before the arena goes */
		ckpt_close(t->ck);
		t->ck = NULL;
		t->last_saved = 0;
		if (t->rank == 0) {
			t->retry_at = now_s() + t->backoff_s;
			say("ckpt: ckptd unreachable; next save attempt in %.0f s", t->backoff_s);
		}
	} else if (t->backoff_s != 0) {
		t->backoff_s = 0;
		if (t->rank == 0)
			say("ckpt: ckptd reachable again");
	}
}

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

/*
 * Write the rank's state to path durably: temp file, write, fsync,
 * rename, fsync the directory. With full_params the whole parameter
 * vector goes first (the --dump format); checkpoints hold only the slice.
 */
static int write_state(const struct trainer *t, const char *dir, const char *path, int full_params)
{
	char tmp[4200];
	struct train_blob blob;
	int err = 0, fd;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	fill_blob(t, &blob);
	err = write_all(fd, &blob, sizeof(blob));
	if (!err && full_params)
		err = write_all(fd, t->params, t->lay.n_params * sizeof(float));
	if (!err)
		err = write_all(fd, t->master, t->len * sizeof(float));
	if (!err)
		err = write_all(fd, t->m, t->len * sizeof(float));
	if (!err)
		err = write_all(fd, t->v, t->len * sizeof(float));
	if (!err && fsync(fd) < 0)
		err = -errno;
	if (close(fd) < 0 && !err)
		err = -errno;
	if (!err && rename(tmp, path) < 0)
		err = -errno;
	if (err) {
		unlink(tmp);
		return err;
	}
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	if (fsync(dfd) < 0)
		err = -errno;
	close(dfd);
	return err;
}

/* --device cuda: bring the state to the host buffers write_state() reads
 * (the whole parameter vector too with full_params). */
static void host_state(struct trainer *t, int full_params)
{
	if (t->gpu && gpu_download(t->gpu, full_params ? t->params : NULL, t->master, t->m,
				   t->v) < 0)
		die("copying the state from the GPU: %s", gpu_error(t->gpu));
}

/* The baseline people use today: every rank writes and fsyncs, then a barrier. */
static void save_sync(struct trainer *t)
{
	char path[4096];
	double t0 = now_s();
	t->saves++;
	host_state(t, 0);
	snprintf(path, sizeof(path), "%s/step-%010" PRIu64 ".rank-%06d", t->o.sync_dir, t->step, t->rank);
	int r = write_state(t, t->o.sync_dir, path, 0);
	if (r < 0) {
		t->saves_failed++;
		say("ckpt step %" PRIu64 " failed: rank %d: %s: %s", t->step, t->rank, path, strerror(-r));
	}
	int ok = r == 0, all_ok;
	MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	t->stall_s += now_s() - t0;
	if (all_ok && t->rank == 0)
		say("ckpt step %" PRIu64 " committed (sync, %.1f ms)", t->step, (now_s() - t0) * 1e3);
}

/*
 * Restore this rank's state of `step` (or CKPT_STEP_LATEST) with `flags`;
 * 0 or a negative error, *why set. The step restored is the blob's.
 */
static int restore_step(struct trainer *t, uint64_t want_step, unsigned flags, char *why,
			size_t whylen)
{
	ckpt_restore *rs = NULL;
	struct train_blob b, want;
	int r = ckpt_restore_open(t->ck, want_step, flags, &rs);
	if (r < 0) {
		snprintf(why, whylen, "open: %s", ckpt_strerror(r));
		return r;
	}
	uint64_t step = ckpt_restore_step(rs);
	if (ckpt_restore_warning(rs))
		say("resume: rank %d restores step %" PRIu64 ": %s", t->rank, step,
		    ckpt_restore_warning(rs));
	size_t n = t->len * sizeof(float);
	if (t->gpu) {
		/* Straight from the arena to the device. */
		static const char *const names[3] = {"master", "adam_m", "adam_v"};
		static const enum gpu_tensor which[3] = {GPU_MASTER, GPU_ADAM_M, GPU_ADAM_V};
		attach_arena(t); /* ckpt_restore_open may have reconnected */
		for (int i = 0; i < 3; i++) {
			const void *p;
			size_t len;
			r = ckpt_restore_tensor_ptr(rs, names[i], &p, &len);
			if (r == 0 && len != n)
				r = -EMSGSIZE;
			if (r < 0) {
				snprintf(why, whylen, "tensor: %s (a different model size or world size?)",
					 ckpt_strerror(r));
				goto out;
			}
			if (gpu_upload(t->gpu, which[i], p, len) < 0)
				die("restoring step %" PRIu64 ": %s", step, gpu_error(t->gpu));
		}
	} else if ((r = ckpt_restore_tensor(rs, "master", t->master, n)) < 0 ||
		   (r = ckpt_restore_tensor(rs, "adam_m", t->m, n)) < 0 ||
		   (r = ckpt_restore_tensor(rs, "adam_v", t->v, n)) < 0) {
		snprintf(why, whylen, "tensor: %s (a different model size or world size?)", ckpt_strerror(r));
		goto out;
	}
	r = ckpt_restore_blob(rs, &b, sizeof(b));
	if (r != (int)sizeof(b)) {
		snprintf(why, whylen, "blob of %d bytes, expected %zu", r, sizeof(b));
		r = r < 0 ? r : -CKPT_E_CORRUPT;
		goto out;
	}
	fill_blob(t, &want);
	r = -EINVAL;
	if (b.magic != BLOB_MAGIC || b.version != BLOB_VERSION)
		snprintf(why, whylen, "not a ckpt-train checkpoint (version %u)", b.version);
	else if (b.world != want.world || b.lo != want.lo || b.len != want.len ||
		 b.n_params != want.n_params)
		snprintf(why, whylen, "saved by %u ranks with %" PRIu64 " parameters; this job has %u and %" PRIu64,
			 b.world, b.n_params, want.world, want.n_params);
	else if (b.ctx != want.ctx || b.embd != want.embd || b.hidden != want.hidden || b.layers != want.layers)
		snprintf(why, whylen, "model shape differs (ctx %u embd %u hidden %u layers %u)",
			 b.ctx, b.embd, b.hidden, b.layers);
	else if (b.data_hash != want.data_hash || b.data_len != want.data_len)
		snprintf(why, whylen, "trained on different text (%" PRIu64 " bytes)", b.data_len);
	else if (b.step != step)
		snprintf(why, whylen, "blob says step %" PRIu64, b.step);
	else
		r = 0;
	if (r == 0) {
		t->step = b.step;
		t->data_rng = b.data_rng;
		t->data_pos = b.data_pos;
	}
out:
	ckpt_restore_close(rs);
	return r;
}

static void gather_params(struct trainer *t)
{
	if (t->gpu) {
		if (gpu_gather_params(t->gpu) < 0)
			die("resume: %s", gpu_error(t->gpu));
	} else {
		MPI_Allgatherv(t->master, (int)t->len, MPI_FLOAT, t->params, t->counts, t->displs,
			       MPI_FLOAT, MPI_COMM_WORLD);
	}
}

/*
 * For a ckptd without agreed restores: rank 0 chooses candidates (newest
 * first), all try each; the first that every rank restores wins.
 */
static void resume_by_candidates(struct trainer *t)
{
	enum { MAX_CAND = 16 };
	uint64_t cand[MAX_CAND] = {0};
	int n = 0;
	char why[300];

	if (t->rank == 0 && t->ck) {
		if (t->o.resume_step) {
			cand[n++] = t->o.resume_step;
		} else {
			uint64_t steps[4096];
			int total = ckpt_list(t->ck, steps, 4096);
			if (total < 0 && total != -CKPT_E_NO_CHECKPOINT)
				say("resume: listing checkpoints failed: %s", ckpt_strerror(total));
			int have = total < 0 ? 0 : (total > 4096 ? 4096 : total);
			for (int i = have - 1; i >= 0 && n < MAX_CAND; i--)
				cand[n++] = steps[i];
		}
	} else if (t->rank == 0 && t->o.resume_step) {
		die("--resume %" PRIu64 ": cannot reach ckptd", t->o.resume_step);
	}
	MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
	MPI_Bcast(cand, MAX_CAND, MPI_UINT64_T, 0, MPI_COMM_WORLD);
	for (int i = 0; i < n; i++) {
		int r = t->ck ? restore_step(t, cand[i], CKPT_RESTORE_EXACT, why, sizeof(why))
			      : -CKPT_E_DISCONNECTED;
		if (!t->ck)
			snprintf(why, sizeof(why), "not connected to ckptd");
		int ok = r == 0, all_ok;
		if (!ok)
			say("resume: rank %d cannot restore step %" PRIu64 ": %s", t->rank, cand[i], why);
		MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
		if (all_ok) {
			gather_params(t);
			if (t->rank == 0)
				say("resumed from step %" PRIu64, t->step);
			return;
		}
	}
	if (n > 0)
		die("no committed checkpoint could be restored by every rank; "
		    "start fresh with --no-resume");
	if (t->rank == 0)
		say("no checkpoint of job %s: starting fresh", t->o.job);
}

/*
 * Every rank must resume from the same step: ckptd's agreed restore gives
 * every rank the newest committed step that all of them can read and
 * verify (or the same error). What is left to check here is the trainer's
 * own blob (model shape, world, data), which no fallback would fix.
 */
static void resume(struct trainer *t)
{
	enum { OK = 0, NONE = 1, OLD_CKPTD = 2, FAILED = 3 };
	uint64_t want = t->o.resume_step ? t->o.resume_step : CKPT_STEP_LATEST;
	unsigned flags = CKPT_RESTORE_AGREE | (t->o.resume_step ? CKPT_RESTORE_EXACT : 0);
	char why[300] = "not connected to ckptd";
	int r = t->ck ? restore_step(t, want, flags, why, sizeof(why)) : -CKPT_E_DISCONNECTED;
	int code = r == 0 ? OK : r == -CKPT_E_NO_CHECKPOINT ? NONE : r == -EOPNOTSUPP ? OLD_CKPTD
		 : FAILED;
	int worst, best;

	MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	MPI_Allreduce(&code, &best, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	if (worst == OK) {
		gather_params(t);
		if (t->rank == 0)
			say("resumed from step %" PRIu64, t->step);
		return;
	}
	if (best == OLD_CKPTD && worst == OLD_CKPTD) {
		if (t->rank == 0)
			say("resume: ckptd cannot agree on a step; choosing one across ranks");
		resume_by_candidates(t);
		return;
	}
	if (code != OK)
		say("resume: rank %d: %s", t->rank, why);
	if (best == NONE && worst == NONE && !t->o.resume_step) {
		if (t->rank == 0)
			say("no checkpoint of job %s: starting fresh", t->o.job);
		return;
	}
	die("no committed checkpoint could be restored by every rank; "
	    "start fresh with --no-resume");
}

static void dump_state(const struct trainer *t)
{
	char path[4096], dir[4096];
	const char *p = strstr(t->o.dump, "%r");
	if (p)
		snprintf(path, sizeof(path), "%.*s%d%s", (int)(p - t->o.dump), t->o.dump, t->rank, p + 2);
	else
		snprintf(path, sizeof(path), "%s.%d", t->o.dump, t->rank);
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash)
		*(slash == dir ? slash + 1 : slash) = 0;
	else
		snprintf(dir, sizeof(dir), ".");
	int r = write_state(t, dir, path, 1);
	if (r < 0)
		die("--dump %s: %s", path, strerror(-r));
}

/* ---- setup ------------------------------------------------------------- */

/*
 * --device cuda: the device state, initialised from the host's. A missing
 * GPU (or a build without GPU support) is the caller's problem, not a
 * crash: every rank says why and the job exits with status 2.
 */
static void open_gpu(struct trainer *t, size_t rows)
{
	char why[512];
	struct gpu_setup s = {
		.model = &t->o.model, .lay = &t->lay, .rows = rows,
		.rank = t->rank, .world = t->world, .params = t->params,
	};
	int r = gpu_open(&s, &t->gpu, why, sizeof(why));
	if (r == -ENODEV || r == -ENOTSUP || r == -EINVAL) {
		fprintf(stderr, "ckpt-train: rank %d: --device cuda: %s\n", t->rank, why);
		fflush(stderr);
		MPI_Finalize();
		exit(2);
	}
	if (r < 0)
		die("--device cuda: %s", why);
}

static void setup(struct trainer *t)
{
	const struct options *o = &t->o;
	if (model_layout(&o->model, &t->lay) < 0)
		die("model sizes out of range");
	size_t N = t->lay.n_params;
	if (N > INT32_MAX)
		die("%zu parameters: more than MPI's int counts allow", N);
	if (N < (size_t)t->world)
		die("fewer parameters than ranks");
	t->counts = calloc(4 * (size_t)t->world, sizeof(int));
	if (!t->counts)
		die("out of memory");
	/* counts/displs [0, world): slices of the vector; [world, 2 world): parts received. */
	t->displs = t->counts + 2 * t->world;
	for (int r = 0; r < t->world; r++) {
		size_t lo = N * (size_t)r / (size_t)t->world, hi = N * (size_t)(r + 1) / (size_t)t->world;
		t->counts[r] = (int)(hi - lo);
		t->displs[r] = (int)lo;
		if (r == t->rank) {
			t->lo = lo;
			t->len = hi - lo;
		}
	}
	for (int r = 0; r < t->world; r++) {
		t->counts[t->world + r] = (int)t->len;
		t->displs[t->world + r] = (int)(t->len * (size_t)r);
	}
	size_t rows = (size_t)o->batch * o->seq;
	const int cpu = o->device == DEVICE_CPU;
	t->params = malloc(N * sizeof(float));
	t->master = malloc(t->len * sizeof(float));
	t->m = calloc(t->len, sizeof(float));
	t->v = calloc(t->len, sizeof(float));
	t->ctxbuf = malloc(rows * o->model.ctx);
	t->tgtbuf = malloc(rows);
	if (cpu) {
		t->grad = malloc(N * sizeof(float));
		t->gsum = malloc(t->len * sizeof(float));
		t->gparts = malloc(t->len * (size_t)t->world * sizeof(float));
		t->decay = malloc(t->len);
	}
	if (!t->params || !t->master || !t->m || !t->v || !t->ctxbuf || !t->tgtbuf ||
	    (cpu && (!t->grad || !t->gsum || !t->gparts || !t->decay ||
		     model_work_alloc(&o->model, rows, &t->work) < 0)))
		die("out of memory for %zu parameters", N);
	model_init(&o->model, &t->lay, t->params, o->seed);
	memcpy(t->master, t->params + t->lo, t->len * sizeof(float));
	for (size_t i = 0; cpu && i < t->len; i++)
		t->decay[i] = (uint8_t)model_decays(&t->lay, t->lo + i);
	t->data_rng = o->seed * 0x9e3779b97f4a7c15ULL + 0x6461746172ULL;
	if (!t->data_rng)
		t->data_rng = 1;
	if (!cpu)
		open_gpu(t, rows);
}

static void teardown(struct trainer *t)
{
	if (t->gpu)
		gpu_arena_detach(t->gpu); /* before the arena goes */
	ckpt_close(t->ck);
	gpu_close(t->gpu);
	model_work_free(&t->work);
	corpus_free(&t->text);
	free(t->params);
	free(t->grad);
	free(t->master);
	free(t->m);
	free(t->v);
	free(t->gsum);
	free(t->gparts);
	free(t->decay);
	free(t->ctxbuf);
	free(t->tgtbuf);
	free(t->counts);
}

int main(int argc, char **argv)
{
	static struct trainer t;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &t.rank);
	MPI_Comm_size(MPI_COMM_WORLD, &t.world);
	g_rank = t.rank;
	setvbuf(stdout, NULL, _IOLBF, 0);
	parse_args(argc, argv, &t.o);
	const struct options *o = &t.o;

	load_text(&t);
	setup(&t);
	if (t.rank == 0)
		say("model: mlp ctx %u embd %u hidden %u layers %u: %zu parameters; "
		    "%d ranks x batch %u x seq %u; ckpt %s every %" PRIu64,
		    o->model.ctx, o->model.embd, o->model.hidden, o->model.layers, t.lay.n_params,
		    t.world, o->batch, o->seq,
		    o->mode == MODE_ASYNC ? "async" : o->mode == MODE_SYNC ? "sync" : "off",
		    o->ckpt_every);
	if (t.gpu && t.rank == 0)
		say("device: cuda, %d ranks, rank 0 on %s", t.world, gpu_describe(t.gpu));

	if (o->mode == MODE_ASYNC) {
		int r = ck_connect(&t, 2000);
		if (r < 0)
			say("ckpt: rank %d cannot reach ckptd (%s): training without it for now",
			    t.rank, ckpt_strerror(r));
		if (o->resume)
			resume(&t);
	}

	double t0 = now_s();
	uint64_t first = t.step;
	for (uint64_t step = t.step + 1; step <= o->steps; step++) {
		double lr, norm;
		double loss = train_step(&t, step, &lr, &norm);
		t.step = step;
		if (t.rank == 0 && (step % o->log_every == 0 || step == first + 1 || step == o->steps))
			say("step %" PRIu64 " loss %.4f lr %.3e norm %.3f", step, loss, lr, norm);
		if (o->mode == MODE_ASYNC)
			poll_events(&t);
		if (o->ckpt_every && step % o->ckpt_every == 0) {
			if (o->mode == MODE_ASYNC)
				save_async_step(&t);
			else if (o->mode == MODE_SYNC)
				save_sync(&t);
		}
		if (o->step_sleep_ms) {
			struct timespec ts = {
				.tv_sec = (time_t)(o->step_sleep_ms / 1000),
				.tv_nsec = (long)(o->step_sleep_ms % 1000) * 1000000L,
			};
			while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
				;
		}
	}
	double secs = now_s() - t0;

	if (o->mode == MODE_ASYNC && t.ck && t.last_saved && o->wait_ms) {
		ckpt_status st;
		int r = ckpt_wait(t.ck, t.last_saved, (int)o->wait_ms, &st);
		if (r < 0)
			say("ckpt step %" PRIu64 " outcome unknown after %" PRIu64 " ms: rank %d: %s",
			    t.last_saved, o->wait_ms, t.rank, ckpt_strerror(r));
		poll_events(&t);
	}
	if (o->dump) {
		host_state(&t, 1);
		dump_state(&t);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	if (t.rank == 0)
		say("done: steps %" PRIu64 "..%" PRIu64 " in %.2f s (%.1f steps/s), rank 0 saves %" PRIu64
		    " (%" PRIu64 " failed), stall %.1f ms",
		    first + 1, o->steps, secs, secs > 0 ? (double)(o->steps - first) / secs : 0.0,
		    t.saves, t.saves_failed, t.stall_s * 1e3);
	teardown(&t);
	MPI_Finalize();
	return 0;
}
