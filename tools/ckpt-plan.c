/* SPDX-License-Identifier: MIT */
/*
 * ckpt-plan: size a checkpointed training run before it starts. For a
 * model, a machine and a parallel layout (or every layout of the GPU count)
 * it prints the GPU memory per rank, what each rank hands ckptd per
 * checkpoint, the staging memory ckptd needs per node, the stall and the
 * times to durable and to S3, and the checkpoint interval that loses the
 * least time to failures, for ckptd and for synchronous saving side by
 * side. The arithmetic is ckpt-plan-calc.c; docs/PLANNING.md explains it.
 *
 * Exit status: 0 the plan fits, 1 it does not (or no layout does), 2 usage,
 * 3 a file could not be read.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ckpt-build-config.h"
#include "ckpt-plan.h"

enum { EXIT_NOFIT = 1, EXIT_USAGE = 2, EXIT_FILE = 3 };

static const char *prog = "ckpt-plan";

#define GIB (1024.0 * 1024.0 * 1024.0)
#define GB 1e9
#define MIB_U (1ull << 20)

static void errmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void errmsg(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---- presets ------------------------------------------------------------ */

static const struct plan_model model_presets[] = {
	/* Llama 3 / 3.1 / 3.3 70B and Llama 3 / 3.1 8B (Meta's model cards). */
	{ .name = "llama3-70b", .layers = 80, .hidden = 8192, .heads = 64, .kv_heads = 8,
	  .ffn = 28672, .vocab = 128256, .seq = 8192 },
	{ .name = "llama3-8b", .layers = 32, .hidden = 4096, .heads = 32, .kv_heads = 8,
	  .ffn = 14336, .vocab = 128256, .seq = 8192 },
};

/*
 * HBM as the driver reports it (nvidia-smi's total). Bandwidths are
 * planning figures, not measurements: override them with what the
 * machine's own runs of ckpt-bench and fio give (docs/PLANNING.md).
 * MTBF per node: Meta's Llama 3 report, 419 unexpected interruptions in
 * 54 days on 16,384 GPUs, is about 6,300 hours per 8-GPU node.
 */
static const struct plan_machine machine_presets[] = {
	{ .name = "p5.48xlarge", .gpus_per_node = 8, .hbm_bytes = 81559 * MIB_U,
	  .host_bytes = 2048ull << 30, .d2h_bw = 25 * GB, .host_copy_bw = 100 * GB,
	  .fs_write_bw = 5 * GB, .fs_read_bw = 10 * GB, .s3_bw = 2 * GB, .net_bw = 25 * GB,
	  .mtbf_node_s = 6300 * 3600.0, .restart_s = 300 },
	{ .name = "p5en.48xlarge", .gpus_per_node = 8, .hbm_bytes = 143771 * MIB_U,
	  .host_bytes = 2048ull << 30, .d2h_bw = 25 * GB, .host_copy_bw = 150 * GB,
	  .fs_write_bw = 5 * GB, .fs_read_bw = 10 * GB, .s3_bw = 2 * GB, .net_bw = 25 * GB,
	  .mtbf_node_s = 6300 * 3600.0, .restart_s = 300 },
};

/* ---- options --------------------------------------------------------------- */

struct opts {
	struct plan_model model;
	bool have_model, have_desc;
	struct plan_desc desc;
	const char *desc_path;
	struct plan_train train;
	struct plan_machine mc;
	struct plan_ckptd cd;
	const char *ckptd_config;
	bool partners_set;
	uint32_t nodes, world;
	struct plan_layout layout;
	bool all, json, ranks;
	unsigned top;
	double hbm_limit, host_limit;
	const char *job;
};

static void usage_short(FILE *f)
{
	fprintf(f, "usage: %s [--model NAME | --model-file FILE | dims] [--machine NAME] "
		   "--nodes N [--tp N --pp N --cp N | --all] [options]\n"
		   "Try '%s --help'.\n", prog, prog);
}

static void usage(void)
{
	printf(
"usage: ckpt-plan [OPTIONS]\n"
"Size a checkpointed training run before it starts: per-GPU memory of a\n"
"parallel layout, the bytes each rank hands ckptd per checkpoint, ckptd's\n"
"staging memory per node, the stall and the times to durable and to S3,\n"
"and the checkpoint interval that loses the least time to failures\n"
"(Young/Daly), for ckptd and for synchronous saving side by side.\n"
"No daemon is needed. Sizes take a binary unit (80GiB, 2TiB); bandwidths\n"
"are GB/s (10^9 bytes per second).\n"
"\n"
"Model (a preset, explicit dimensions, or a trainer's description):\n"
"  --model NAME        llama3-70b or llama3-8b (Llama 3.x dimensions)\n"
"  --layers N, --hidden N, --heads N, --kv-heads N, --ffn N, --vocab N\n"
"                      a Llama-style decoder (GQA, SwiGLU); any of them\n"
"                      overrides the preset\n"
"  --seq N             sequence length (8192)\n"
"  --tied              input and output embeddings shared\n"
"  --model-file FILE   what ckpt-train --describe-model prints: exact\n"
"                      per-rank shard, index and slot bytes over --world ranks\n"
"  --world N           ranks of a --model-file model (data parallel)\n"
"\n"
"Training:\n"
"  --precision P       bf16 (default), fp16 or fp32 weights\n"
"  --optimizer O       adam (default: fp32 master, two moments) or sgd\n"
"                      (fp32 master, momentum)\n"
"  --no-distributed-optimizer  optimizer state replicated over data parallel\n"
"                      ranks (default: sharded over dp x cp, ZeRO-1)\n"
"  --micro-batch N     sequences per micro-batch (1)\n"
"  --global-batch N    sequences per step (1024)\n"
"  --vpp N             interleaved pipeline: model chunks per rank (1: none)\n"
"  --recompute R       selective (default; also what flash attention keeps),\n"
"                      full (only each layer's input) or none\n"
"\n"
"Layout:\n"
"  --nodes N           nodes (required but for --model-file)\n"
"  --tp N, --pp N, --cp N  tensor, pipeline, context parallel degrees (1);\n"
"                      dp is what is left: nodes x GPUs / (tp x pp x cp)\n"
"  --dp N              data parallel degree, checked against the rest\n"
"  --all               every layout of the GPU count, ranked, as a table\n"
"  --top N             rows of the --all table (20; 0: all)\n"
"\n"
"Machine (a preset, then any of these):\n"
"  --machine NAME      p5.48xlarge (8 x H100 80GB, 2 TiB; the default) or\n"
"                      p5en.48xlarge, alias h200 (8 x H200 141GB, 2 TiB)\n"
"  --gpus-per-node N   GPUs (ranks) per node\n"
"  --hbm SIZE          memory per GPU\n"
"  --host-memory SIZE  memory per node\n"
"  --d2h-bw GBPS       device to host copy, per GPU (25)\n"
"  --host-copy-bw GBPS all of a node's copies into shared memory together\n"
"  --fs-write-bw GBPS, --fs-read-bw GBPS  per node, to and from the root\n"
"  --s3-bw GBPS        upload per node (2)\n"
"  --net-bw GBPS       to partner nodes, per node (25)\n"
"  --mtbf-node HOURS   mean time between failures of one node (6300)\n"
"  --restart SECONDS   relaunch after a failure, before reading state (300)\n"
"  --hbm-limit F       a layout fits below this fraction of HBM (0.8: the\n"
"                      threshold below which Fujii et al. saw no OOM)\n"
"  --host-limit F      ckptd's staging and partner copies fit below this\n"
"                      fraction of host memory (0.5)\n"
"\n"
"ckptd:\n"
"  --ckptd-config FILE read staging_bytes, slots_per_rank, partner_memory,\n"
"                      partners and chunk_size from ckptd's configuration,\n"
"                      and warn when its staging cannot hold the planned slots\n"
"  --slots-per-rank N  staging slots per rank (2)\n"
"  --partners N        partner nodes holding copies of a node's ranks\n"
"                      (0: no partner copies; default 1, or 0 when the\n"
"                      config's partner_memory is 0)\n"
"  --chunk-size SIZE   checksum chunk (4MiB)\n"
"  --job NAME          job name, for the index bytes (ckpt-train)\n"
"\n"
"Output:\n"
"  --ranks             with --model-file: every rank's files\n"
"  --json              one JSON document on standard output\n"
"  --help, -h          this help\n"
"  --version, -V       the version\n"
"\n"
"Exit status: 0 the plan fits; 1 it does not fit (GPU memory, host memory,\n"
"or the staging of --ckptd-config), or no layout does; 2 usage error; 3 a\n"
"file could not be read.\n"
"\n"
"Example (Llama 3.3 70B on 32 p5.48xlarge nodes):\n"
"  ckpt-plan --model llama3-70b --machine p5.48xlarge --nodes 32 --tp 8 --pp 8\n");
}

static bool parse_u32(const char *name, const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < min || v > max) {
		errmsg("--%s: '%s' is not a whole number from %u to %u", name, s, min, max);
		return false;
	}
	*out = (uint32_t)v;
	return true;
}

static bool parse_double(const char *name, const char *s, double min, double max, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= min && v <= max)) {
		errmsg("--%s: '%s' is not a number from %g to %g", name, s, min, max);
		return false;
	}
	*out = v;
	return true;
}

static bool parse_size_opt(const char *name, const char *s, uint64_t *out)
{
	if (plan_parse_size(s, out) < 0 || *out == 0) {
		errmsg("--%s: '%s' is not a size (80GiB, 2TiB, 65536)", name, s);
		return false;
	}
	return true;
}

static bool set_precision(struct plan_train *t, const char *p, const char *o)
{
	uint32_t w;
	if (!strcmp(p, "bf16") || !strcmp(p, "fp16"))
		w = 2;
	else if (!strcmp(p, "fp32"))
		w = 4;
	else {
		errmsg("--precision: '%s' is not bf16, fp16 or fp32", p);
		return false;
	}
	uint32_t moments;
	if (!strcmp(o, "adam"))
		moments = 2;
	else if (!strcmp(o, "sgd"))
		moments = 1;
	else {
		errmsg("--optimizer: '%s' is not adam or sgd", o);
		return false;
	}
	t->weight_bytes = w;
	t->grad_bytes = 4;
	/* fp32 weights are their own master copy. */
	t->optim_bytes = 4 * moments + (w == 4 ? 0 : 4);
	return true;
}

enum {
	O_MODEL = 256, O_LAYERS, O_HIDDEN, O_HEADS, O_KVHEADS, O_FFN, O_VOCAB, O_SEQ, O_TIED,
	O_MODELFILE, O_WORLD, O_PRECISION, O_OPTIMIZER, O_NODISTOPT, O_MICRO, O_GLOBAL, O_VPP,
	O_RECOMPUTE, O_NODES, O_TP, O_PP, O_CP, O_DP, O_ALL, O_TOP, O_MACHINE, O_GPN, O_HBM,
	O_HOST, O_D2H, O_HOSTCOPY, O_FSW, O_FSR, O_S3, O_NET, O_MTBF, O_RESTART, O_HBMLIMIT,
	O_HOSTLIMIT, O_CKPTDCONF, O_SLOTS, O_PARTNERS, O_CHUNK, O_JOB, O_RANKS, O_JSON,
};

static const struct option longopts[] = {
	{ "model", required_argument, NULL, O_MODEL },
	{ "layers", required_argument, NULL, O_LAYERS },
	{ "hidden", required_argument, NULL, O_HIDDEN },
	{ "heads", required_argument, NULL, O_HEADS },
	{ "kv-heads", required_argument, NULL, O_KVHEADS },
	{ "ffn", required_argument, NULL, O_FFN },
	{ "vocab", required_argument, NULL, O_VOCAB },
	{ "seq", required_argument, NULL, O_SEQ },
	{ "tied", no_argument, NULL, O_TIED },
	{ "model-file", required_argument, NULL, O_MODELFILE },
	{ "world", required_argument, NULL, O_WORLD },
	{ "precision", required_argument, NULL, O_PRECISION },
	{ "optimizer", required_argument, NULL, O_OPTIMIZER },
	{ "no-distributed-optimizer", no_argument, NULL, O_NODISTOPT },
	{ "micro-batch", required_argument, NULL, O_MICRO },
	{ "global-batch", required_argument, NULL, O_GLOBAL },
	{ "vpp", required_argument, NULL, O_VPP },
	{ "recompute", required_argument, NULL, O_RECOMPUTE },
	{ "nodes", required_argument, NULL, O_NODES },
	{ "tp", required_argument, NULL, O_TP },
	{ "pp", required_argument, NULL, O_PP },
	{ "cp", required_argument, NULL, O_CP },
	{ "dp", required_argument, NULL, O_DP },
	{ "all", no_argument, NULL, O_ALL },
	{ "top", required_argument, NULL, O_TOP },
	{ "machine", required_argument, NULL, O_MACHINE },
	{ "gpus-per-node", required_argument, NULL, O_GPN },
	{ "hbm", required_argument, NULL, O_HBM },
	{ "host-memory", required_argument, NULL, O_HOST },
	{ "d2h-bw", required_argument, NULL, O_D2H },
	{ "host-copy-bw", required_argument, NULL, O_HOSTCOPY },
	{ "fs-write-bw", required_argument, NULL, O_FSW },
	{ "fs-read-bw", required_argument, NULL, O_FSR },
	{ "s3-bw", required_argument, NULL, O_S3 },
	{ "net-bw", required_argument, NULL, O_NET },
	{ "mtbf-node", required_argument, NULL, O_MTBF },
	{ "restart", required_argument, NULL, O_RESTART },
	{ "hbm-limit", required_argument, NULL, O_HBMLIMIT },
	{ "host-limit", required_argument, NULL, O_HOSTLIMIT },
	{ "ckptd-config", required_argument, NULL, O_CKPTDCONF },
	{ "slots-per-rank", required_argument, NULL, O_SLOTS },
	{ "partners", required_argument, NULL, O_PARTNERS },
	{ "chunk-size", required_argument, NULL, O_CHUNK },
	{ "job", required_argument, NULL, O_JOB },
	{ "ranks", no_argument, NULL, O_RANKS },
	{ "json", no_argument, NULL, O_JSON },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, struct opts *o)
{
	struct plan_model dims = { 0 };
	const char *precision = "bf16", *optimizer = "adam", *machine = "p5.48xlarge";
	struct plan_machine over = { 0 };
	double mtbf_h = -1, restart = -1;
	uint32_t gpn = 0, slots = 0, partners = 0, dp = 0;
	uint64_t chunk = 0;
	bool tied = false;
	int c;

	memset(o, 0, sizeof(*o));
	o->train = (struct plan_train){ .distributed_optimizer = true, .micro_batch = 1,
					.global_batch = 1024, .vpp = 1 };
	o->layout = (struct plan_layout){ .tp = 1, .pp = 1, .cp = 1 };
	o->cd = (struct plan_ckptd){ .slots_per_rank = 2, .partners = 1, .chunk_bytes = 4 * MIB_U };
	o->top = 20;
	o->hbm_limit = 0.8;
	o->host_limit = 0.5;
	o->job = "ckpt-train";

	while ((c = getopt_long(argc, argv, "hV", longopts, NULL)) != -1) {
		bool ok = true;
		switch (c) {
		case O_MODEL: {
			size_t i, n = sizeof(model_presets) / sizeof(model_presets[0]);
			for (i = 0; i < n && strcmp(optarg, model_presets[i].name); i++)
				;
			if (i == n) {
				errmsg("--model: '%s' is not a preset (llama3-70b, llama3-8b)", optarg);
				return EXIT_USAGE;
			}
			o->model = model_presets[i];
			o->have_model = true;
			break;
		}
		case O_LAYERS: ok = parse_u32("layers", optarg, 1, 100000, &dims.layers); break;
		case O_HIDDEN: ok = parse_u32("hidden", optarg, 1, 1u << 20, &dims.hidden); break;
		case O_HEADS: ok = parse_u32("heads", optarg, 1, 1u << 16, &dims.heads); break;
		case O_KVHEADS: ok = parse_u32("kv-heads", optarg, 1, 1u << 16, &dims.kv_heads); break;
		case O_FFN: ok = parse_u32("ffn", optarg, 1, 1u << 24, &dims.ffn); break;
		case O_VOCAB: {
			uint32_t v;
			ok = parse_u32("vocab", optarg, 1, 1u << 30, &v);
			dims.vocab = v;
			break;
		}
		case O_SEQ: ok = parse_u32("seq", optarg, 1, 1u << 24, &dims.seq); break;
		case O_TIED: tied = true; break;
		case O_MODELFILE: o->desc_path = optarg; break;
		case O_WORLD: ok = parse_u32("world", optarg, 1, 1u << 24, &o->world); break;
		case O_PRECISION: precision = optarg; break;
		case O_OPTIMIZER: optimizer = optarg; break;
		case O_NODISTOPT: o->train.distributed_optimizer = false; break;
		case O_MICRO: ok = parse_u32("micro-batch", optarg, 1, 1u << 20, &o->train.micro_batch); break;
		case O_GLOBAL: ok = parse_u32("global-batch", optarg, 1, 1u << 30, &o->train.global_batch); break;
		case O_VPP: ok = parse_u32("vpp", optarg, 1, 1024, &o->train.vpp); break;
		case O_RECOMPUTE:
			if (!strcmp(optarg, "selective"))
				o->train.recompute = PLAN_RECOMPUTE_SELECTIVE;
			else if (!strcmp(optarg, "full"))
				o->train.recompute = PLAN_RECOMPUTE_FULL;
			else if (!strcmp(optarg, "none"))
				o->train.recompute = PLAN_RECOMPUTE_NONE;
			else {
				errmsg("--recompute: '%s' is not selective, full or none", optarg);
				return EXIT_USAGE;
			}
			break;
		case O_NODES: ok = parse_u32("nodes", optarg, 1, 1u << 20, &o->nodes); break;
		case O_TP: ok = parse_u32("tp", optarg, 1, 1u << 16, &o->layout.tp); break;
		case O_PP: ok = parse_u32("pp", optarg, 1, 1u << 16, &o->layout.pp); break;
		case O_CP: ok = parse_u32("cp", optarg, 1, 1u << 16, &o->layout.cp); break;
		case O_DP: ok = parse_u32("dp", optarg, 1, 1u << 24, &dp); break;
		case O_ALL: o->all = true; break;
		case O_TOP: ok = parse_u32("top", optarg, 0, 1u << 20, &o->top); break;
		case O_MACHINE: machine = optarg; break;
		case O_GPN: ok = parse_u32("gpus-per-node", optarg, 1, 1024, &gpn); break;
		case O_HBM: ok = parse_size_opt("hbm", optarg, &over.hbm_bytes); break;
		case O_HOST: ok = parse_size_opt("host-memory", optarg, &over.host_bytes); break;
		case O_D2H: ok = parse_double("d2h-bw", optarg, 1e-6, 1e6, &over.d2h_bw); break;
		case O_HOSTCOPY: ok = parse_double("host-copy-bw", optarg, 1e-6, 1e6, &over.host_copy_bw); break;
		case O_FSW: ok = parse_double("fs-write-bw", optarg, 1e-6, 1e6, &over.fs_write_bw); break;
		case O_FSR: ok = parse_double("fs-read-bw", optarg, 1e-6, 1e6, &over.fs_read_bw); break;
		case O_S3: ok = parse_double("s3-bw", optarg, 1e-6, 1e6, &over.s3_bw); break;
		case O_NET: ok = parse_double("net-bw", optarg, 1e-6, 1e6, &over.net_bw); break;
		case O_MTBF: ok = parse_double("mtbf-node", optarg, 1e-3, 1e9, &mtbf_h); break;
		case O_RESTART: ok = parse_double("restart", optarg, 0, 1e7, &restart); break;
		case O_HBMLIMIT: ok = parse_double("hbm-limit", optarg, 0.01, 1, &o->hbm_limit); break;
		case O_HOSTLIMIT: ok = parse_double("host-limit", optarg, 0.01, 1, &o->host_limit); break;
		case O_CKPTDCONF: o->ckptd_config = optarg; break;
		case O_SLOTS: ok = parse_u32("slots-per-rank", optarg, 1, 64, &slots); break;
		case O_PARTNERS:
			ok = parse_u32("partners", optarg, 0, 16, &partners);
			o->partners_set = true;
			break;
		case O_CHUNK:
			ok = parse_size_opt("chunk-size", optarg, &chunk);
			if (ok && (chunk < (64u << 10) || chunk > (64u << 20) || chunk % 4096)) {
				errmsg("--chunk-size: '%s' is not a multiple of 4KiB from 64KiB to 64MiB",
				       optarg);
				ok = false;
			}
			break;
		case O_JOB: o->job = optarg; break;
		case O_RANKS: o->ranks = true; break;
		case O_JSON: o->json = true; break;
		case 'h': usage(); return 0;
		case 'V': printf("ckpt-plan %s\n", CKPT_VERSION); return 0;
		default: usage_short(stderr); return EXIT_USAGE;
		}
		if (!ok)
			return EXIT_USAGE;
	}
	if (optind < argc) {
		errmsg("unexpected argument '%s'", argv[optind]);
		usage_short(stderr);
		return EXIT_USAGE;
	}

	/* The machine: its preset, then each flag. */
	size_t i, n = sizeof(machine_presets) / sizeof(machine_presets[0]);
	if (!strcmp(machine, "h200"))
		machine = "p5en.48xlarge";
	for (i = 0; i < n && strcmp(machine, machine_presets[i].name); i++)
		;
	if (i == n) {
		errmsg("--machine: '%s' is not a preset (p5.48xlarge, p5en.48xlarge or h200)", machine);
		return EXIT_USAGE;
	}
	o->mc = machine_presets[i];
	if (gpn)
		o->mc.gpus_per_node = gpn;
	if (over.hbm_bytes)
		o->mc.hbm_bytes = over.hbm_bytes;
	if (over.host_bytes)
		o->mc.host_bytes = over.host_bytes;
	if (over.d2h_bw) o->mc.d2h_bw = over.d2h_bw * GB;
	if (over.host_copy_bw) o->mc.host_copy_bw = over.host_copy_bw * GB;
	if (over.fs_write_bw) o->mc.fs_write_bw = over.fs_write_bw * GB;
	if (over.fs_read_bw) o->mc.fs_read_bw = over.fs_read_bw * GB;
	if (over.s3_bw) o->mc.s3_bw = over.s3_bw * GB;
	if (over.net_bw) o->mc.net_bw = over.net_bw * GB;
	if (mtbf_h >= 0)
		o->mc.mtbf_node_s = mtbf_h * 3600.0;
	if (restart >= 0)
		o->mc.restart_s = restart;

	if (!set_precision(&o->train, precision, optimizer))
		return EXIT_USAGE;

	/* ckptd: its configuration, then each flag. */
	if (o->ckptd_config) {
		char why[512];
		o->cd.partner_memory = 0;
		int r = plan_ckptd_load(o->ckptd_config, &o->cd, why, sizeof(why));
		if (r < 0) {
			errmsg("--ckptd-config: %s", why);
			return r == -EINVAL ? EXIT_USAGE : EXIT_FILE;
		}
		if (o->cd.partner_memory == 0)
			o->cd.partners = 0;
	}
	if (slots)
		o->cd.slots_per_rank = slots;
	if (o->partners_set)
		o->cd.partners = partners;
	if (chunk)
		o->cd.chunk_bytes = chunk;

	if (o->desc_path) {
		char why[512];
		if (o->have_model || dims.layers || dims.hidden) {
			errmsg("--model-file describes the model: no --model or dimensions with it");
			return EXIT_USAGE;
		}
		int r = plan_desc_load(o->desc_path, &o->desc, why, sizeof(why));
		if (r < 0) {
			errmsg("--model-file: %s", why);
			return r == -EINVAL ? EXIT_USAGE : EXIT_FILE;
		}
		o->have_desc = true;
		if (!o->world) {
			errmsg("--model-file needs --world (the ranks that share the model)");
			return EXIT_USAGE;
		}
		if (!gpn)
			o->mc.gpus_per_node = o->world;
		if (o->world % o->mc.gpus_per_node) {
			errmsg("--world %u is not a whole number of nodes of %u ranks (--gpus-per-node)",
			       o->world, o->mc.gpus_per_node);
			return EXIT_USAGE;
		}
		o->nodes = o->world / o->mc.gpus_per_node;
		o->layout = (struct plan_layout){ .tp = 1, .pp = 1, .cp = 1, .dp = o->world };
		return -1;
	}
	if (o->ranks || o->world) {
		errmsg("--ranks and --world go with --model-file");
		return EXIT_USAGE;
	}

	/* The model: its preset, then each dimension. */
	if (dims.layers) o->model.layers = dims.layers;
	if (dims.hidden) o->model.hidden = dims.hidden;
	if (dims.heads) o->model.heads = dims.heads;
	if (dims.kv_heads) o->model.kv_heads = dims.kv_heads;
	if (dims.ffn) o->model.ffn = dims.ffn;
	if (dims.vocab) o->model.vocab = dims.vocab;
	if (dims.seq) o->model.seq = dims.seq;
	if (tied) o->model.tied = true;
	if (!o->have_model) {
		snprintf(o->model.name, sizeof(o->model.name), "custom");
		if (!o->model.seq)
			o->model.seq = 8192;
		if (!o->model.kv_heads)
			o->model.kv_heads = o->model.heads;
	}
	if (!o->model.layers || !o->model.hidden || !o->model.heads || !o->model.ffn ||
	    !o->model.vocab) {
		errmsg("no model: --model NAME, --model-file FILE, or --layers, --hidden, --heads, "
		       "--ffn and --vocab");
		return EXIT_USAGE;
	}
	if (o->model.hidden % o->model.heads || o->model.heads % o->model.kv_heads) {
		errmsg("--heads must divide --hidden, and --kv-heads must divide --heads");
		return EXIT_USAGE;
	}
	if (!o->nodes) {
		errmsg("--nodes is required");
		return EXIT_USAGE;
	}
	uint64_t gpus = (uint64_t)o->nodes * o->mc.gpus_per_node;
	uint64_t mp = (uint64_t)o->layout.tp * o->layout.pp * o->layout.cp;
	if (!o->all) {
		if (gpus % mp) {
			errmsg("tp x pp x cp = %" PRIu64 " does not divide the %" PRIu64 " GPUs", mp, gpus);
			return EXIT_USAGE;
		}
		o->layout.dp = (uint32_t)(gpus / mp);
		if (dp && dp != o->layout.dp) {
			errmsg("--dp %u: %u nodes x %u GPUs / (tp x pp x cp) is %u", dp, o->nodes,
			       o->mc.gpus_per_node, o->layout.dp);
			return EXIT_USAGE;
		}
	}
	return -1;
}

/* ---- one layout -------------------------------------------------------- */

struct plan_row {
	struct plan_layout l;
	const char *why;         /* a rule the layout breaks, else NULL */
	struct plan_memory mem;
	struct plan_ckpt ck;
	struct plan_interval async, sync;
	bool fits_hbm, fits_host;
	double staging_budget;   /* bytes ckptd gives staging on a node */
};

static double staging_budget(const struct opts *o)
{
	return o->cd.staging_bytes ? (double)o->cd.staging_bytes : (double)o->mc.host_bytes / 2;
}

static void evaluate(const struct opts *o, const struct plan_layout *l, struct plan_row *row)
{
	memset(row, 0, sizeof(*row));
	row->l = *l;
	plan_layout_check(&o->model, &o->train, &o->mc, l, &row->why);
	plan_memory_of(&o->model, &o->train, l, &row->mem);
	plan_ckpt_of(&o->model, &o->train, &o->mc, &o->cd, l, &row->mem, &row->ck);
	/* Async: the next save may start once a slot is free again. */
	double write_s = row->ck.durable_s - row->ck.stall_s;
	double min_async = o->cd.slots_per_rank > 1 ? write_s / (o->cd.slots_per_rank - 1) : write_s;
	plan_interval_of(row->ck.stall_s, row->ck.durable_s, min_async, row->ck.restore_s, &o->mc,
			 o->nodes, &row->async);
	plan_interval_of(row->ck.sync_save_s, 0, 0, row->ck.restore_s, &o->mc, o->nodes, &row->sync);
	row->fits_hbm = row->mem.total <= o->hbm_limit * (double)o->mc.hbm_bytes;
	row->staging_budget = staging_budget(o);
	row->fits_host = (double)(row->ck.staging_node + row->ck.partner_node) <=
			 o->host_limit * (double)o->mc.host_bytes &&
			 (!o->ckptd_config || ((double)row->ck.staging_node <= row->staging_budget &&
			  (!o->cd.partner_memory || row->ck.partner_node <= o->cd.partner_memory)));
}

static bool feasible(const struct plan_row *r)
{
	return !r->why && r->fits_hbm && r->fits_host;
}

/* Feasible first; then the smaller pipeline bubble, the smaller tensor and
 * context parallel degrees (less communication on the critical path), the
 * less memory. */
static int row_cmp(const void *a, const void *b)
{
	const struct plan_row *x = a, *y = b;
	if (feasible(x) != feasible(y))
		return feasible(x) ? -1 : 1;
	if (fabs(x->mem.bubble - y->mem.bubble) > 1e-9)
		return x->mem.bubble < y->mem.bubble ? -1 : 1;
	if (x->l.tp != y->l.tp)
		return x->l.tp < y->l.tp ? -1 : 1;
	if (x->l.cp != y->l.cp)
		return x->l.cp < y->l.cp ? -1 : 1;
	return x->mem.total < y->mem.total ? -1 : x->mem.total > y->mem.total;
}

/* ---- warnings ------------------------------------------------------------ */

static void add_warning(json_t *warnings, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_warning(json_t *warnings, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	json_array_append_new(warnings, json_string(buf));
}

/* What --ckptd-config cannot hold of a plan whose nodes need staging bytes
 * of slots (ranks x slots_per_rank x slot_bytes) and partner bytes. */
static void ckptd_warnings(const struct opts *o, uint64_t staging, uint32_t ranks,
			   uint64_t slot_bytes, uint64_t partner, json_t *warnings)
{
	if (!o->ckptd_config)
		return;
	double budget = staging_budget(o);
	if ((double)staging > budget)
		add_warning(warnings, "%s: staging_bytes %s%.0f cannot hold the planned slots: "
			    "%u ranks x %u slots x %" PRIu64 " bytes = %" PRIu64 " bytes per node; "
			    "raise staging_bytes to at least %" PRIu64 " or lower slots_per_rank",
			    o->ckptd_config, o->cd.staging_bytes ? "" : "(half of RAM) ", budget,
			    ranks, o->cd.slots_per_rank, slot_bytes, staging, staging);
	if (o->cd.partner_memory && partner > o->cd.partner_memory)
		add_warning(warnings, "%s: partner_memory %" PRIu64 " cannot hold %u partner "
			    "node(s)' copies: %" PRIu64 " bytes needed (two steps of every rank)",
			    o->ckptd_config, o->cd.partner_memory, o->cd.partners, partner);
}

/* ---- output ------------------------------------------------------------------ */

static json_t *json_interval(const struct plan_interval *iv, double cost, double durable)
{
	return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f}", "save_cost_s", cost,
			 "durable_s", durable, "interval_s", iv->interval_s,
			 "overhead", iv->overhead, "loss_per_failure_s", iv->loss_per_failure_s,
			 "job_mtbf_s", iv->mtbf_s);
}

static json_t *json_row(const struct plan_row *r)
{
	json_t *j = json_pack("{s:i, s:i, s:i, s:i, s:b, s:b, s:b}",
			      "tp", r->l.tp, "pp", r->l.pp, "cp", r->l.cp, "dp", r->l.dp,
			      "feasible", feasible(r), "fits_hbm", r->fits_hbm,
			      "fits_host", r->fits_host);
	if (r->why)
		json_object_set_new(j, "invalid", json_string(r->why));
	json_object_set_new(j, "gpu_memory", json_pack(
		"{s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:i, s:i, s:f}",
		"params_total", (json_int_t)r->mem.params_total,
		"params_per_gpu", (json_int_t)r->mem.params_stage,
		"weights_bytes", r->mem.weights, "grads_bytes", r->mem.grads,
		"optimizer_bytes", r->mem.optim, "activations_bytes", r->mem.activations,
		"total_bytes", r->mem.total, "microbatches", r->mem.microbatches,
		"in_flight", r->mem.in_flight, "bubble", r->mem.bubble));
	json_object_set_new(j, "checkpoint", json_pack(
		"{s:f, s:I, s:I, s:f, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f}",
		"state_bytes", r->ck.state_total,
		"shard_bytes_per_rank", (json_int_t)r->ck.shard_rank,
		"shard_bytes_per_node", (json_int_t)r->ck.shard_node,
		"state_bytes_per_node_mean", r->ck.state_node_mean,
		"slot_bytes", (json_int_t)r->ck.slot_bytes,
		"staging_bytes_per_node", (json_int_t)r->ck.staging_node,
		"partner_bytes_per_node", (json_int_t)r->ck.partner_node,
		"stall_s", r->ck.stall_s, "durable_s", r->ck.durable_s, "s3_upload_s", r->ck.s3_s,
		"partner_copy_s", r->ck.partner_s, "restore_s", r->ck.restore_s));
	json_object_set_new(j, "async", json_interval(&r->async, r->ck.stall_s, r->ck.durable_s));
	json_object_set_new(j, "sync", json_interval(&r->sync, r->ck.sync_save_s, r->ck.sync_save_s));
	return j;
}

static json_t *json_inputs(const struct opts *o)
{
	json_t *j = json_object();
	if (o->have_desc)
		json_object_set_new(j, "model", json_pack("{s:s, s:s, s:I, s:I, s:I}",
			"file", o->desc_path, "model", o->desc.model,
			"n_params", (json_int_t)o->desc.n_params,
			"blob_bytes", (json_int_t)o->desc.blob_bytes,
			"save_reserve_bytes", (json_int_t)o->desc.save_reserve_bytes));
	else
		json_object_set_new(j, "model", json_pack(
			"{s:s, s:i, s:i, s:i, s:i, s:i, s:I, s:i, s:b}",
			"name", o->model.name, "layers", o->model.layers, "hidden", o->model.hidden,
			"heads", o->model.heads, "kv_heads", o->model.kv_heads, "ffn", o->model.ffn,
			"vocab", (json_int_t)o->model.vocab, "seq", o->model.seq, "tied", o->model.tied));
	json_object_set_new(j, "training", json_pack("{s:i, s:i, s:i, s:b, s:i, s:i, s:i}",
		"weight_bytes", o->train.weight_bytes, "grad_bytes", o->train.grad_bytes,
		"optimizer_bytes", o->train.optim_bytes,
		"distributed_optimizer", o->train.distributed_optimizer,
		"micro_batch", o->train.micro_batch, "global_batch", o->train.global_batch,
		"vpp", o->train.vpp));
	json_object_set_new(j, "machine", json_pack(
		"{s:s, s:i, s:i, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
		"name", o->mc.name, "nodes", o->nodes, "gpus_per_node", o->mc.gpus_per_node,
		"hbm_bytes", (json_int_t)o->mc.hbm_bytes, "host_bytes", (json_int_t)o->mc.host_bytes,
		"d2h_bw", o->mc.d2h_bw, "host_copy_bw", o->mc.host_copy_bw,
		"fs_write_bw", o->mc.fs_write_bw, "fs_read_bw", o->mc.fs_read_bw,
		"s3_bw", o->mc.s3_bw, "net_bw", o->mc.net_bw, "mtbf_node_s", o->mc.mtbf_node_s,
		"restart_s", o->mc.restart_s, "hbm_limit", o->hbm_limit, "host_limit", o->host_limit));
	json_object_set_new(j, "ckptd", json_pack("{s:I, s:i, s:I, s:i, s:I, s:f}",
		"staging_bytes", (json_int_t)o->cd.staging_bytes,
		"slots_per_rank", o->cd.slots_per_rank,
		"partner_memory", (json_int_t)o->cd.partner_memory, "partners", o->cd.partners,
		"chunk_bytes", (json_int_t)o->cd.chunk_bytes, "staging_budget", staging_budget(o)));
	if (o->ckptd_config)
		json_object_set_new(json_object_get(j, "ckptd"), "config",
				    json_string(o->ckptd_config));
	return j;
}

static void print_json(json_t *doc)
{
	char *s = json_dumps(doc, JSON_INDENT(1) | JSON_REAL_PRECISION(9));
	if (s) {
		fputs(s, stdout);
		fputc('\n', stdout);
		free(s);
	}
}

static void print_warnings(json_t *warnings)
{
	size_t i;
	json_t *w;
	json_array_foreach(warnings, i, w)
		fprintf(stderr, "%s: warning: %s\n", prog, json_string_value(w));
}

/* "1h 12m", "42 s", "350 ms". */
static void human_time(char *buf, size_t cap, double s)
{
	if (s < 1)
		snprintf(buf, cap, "%.0f ms", s * 1e3);
	else if (s < 120)
		snprintf(buf, cap, "%.1f s", s);
	else if (s < 7200)
		snprintf(buf, cap, "%.1f min", s / 60);
	else
		snprintf(buf, cap, "%.1f h", s / 3600);
}

static void print_layout(const struct opts *o, const struct plan_row *r)
{
	const struct plan_memory *m = &r->mem;
	const struct plan_ckpt *c = &r->ck;
	char a[32], b[32];
	uint32_t gpus = o->nodes * o->mc.gpus_per_node;

	printf("model %s: %.2f B parameters (vocabulary padded to %" PRIu64 "), seq %u\n",
	       o->model.name, (double)m->params_total / 1e9, plan_vocab_padded(&o->model, r->l.tp),
	       o->model.seq);
	printf("machine %s: %u nodes x %u GPUs of %.1f GiB, %.0f GiB host memory per node\n",
	       o->mc.name, o->nodes, o->mc.gpus_per_node, (double)o->mc.hbm_bytes / GIB,
	       (double)o->mc.host_bytes / GIB);
	printf("layout tp %u pp %u cp %u dp %u%s: micro-batch %u, %u micro-batches per step, "
	       "%u in flight, bubble %.1f%%\n", r->l.tp, r->l.pp, r->l.cp, r->l.dp,
	       r->why ? " (INVALID)" : "", o->train.micro_batch, m->microbatches, m->in_flight,
	       m->bubble * 100);
	if (r->why)
		printf("  invalid: %s\n", r->why);
	printf("\nGPU memory per rank (the most loaded pipeline stage)\n");
	printf("  parameters      %8.2f GiB  (%.2f B parameters x %u bytes)\n", m->weights / GIB,
	       (double)m->params_stage / 1e9, o->train.weight_bytes);
	printf("  gradients       %8.2f GiB\n", m->grads / GIB);
	printf("  optimizer       %8.2f GiB  (%u bytes per parameter%s)\n", m->optim / GIB,
	       o->train.optim_bytes, o->train.distributed_optimizer ? ", sharded over dp x cp" : "");
	printf("  activations     %8.2f GiB\n", m->activations / GIB);
	printf("  total           %8.2f GiB of %.1f GiB: %s (limit %.0f%%)\n", m->total / GIB,
	       (double)o->mc.hbm_bytes / GIB, r->fits_hbm ? "fits" : "DOES NOT FIT",
	       o->hbm_limit * 100);
	printf("\nCheckpoint (%u bytes per parameter: weights and optimizer state)\n",
	       o->train.weight_bytes + o->train.optim_bytes);
	printf("  per checkpoint  %8.1f GB  over %u ranks\n", c->state_total / GB, gpus);
	printf("  per rank        %8.2f GB  (the most loaded rank's shard)\n",
	       (double)c->shard_rank / GB);
	printf("  per node        %8.1f GB  mean, %.1f GB the most loaded node\n",
	       c->state_node_mean / GB, (double)c->shard_node / GB);
	printf("  ckptd staging   %8.1f GiB per node: %u ranks x %u slots x %.2f GiB\n",
	       (double)c->staging_node / GIB, o->mc.gpus_per_node, o->cd.slots_per_rank,
	       (double)c->slot_bytes / GIB);
	printf("  partner copies  %8.1f GiB per node (%u partner node%s, two steps)\n",
	       (double)c->partner_node / GIB, o->cd.partners, o->cd.partners == 1 ? "" : "s");
	printf("  host memory     %8.1f GiB of %.0f GiB: %s (limit %.0f%%%s)\n",
	       (double)(c->staging_node + c->partner_node) / GIB, (double)o->mc.host_bytes / GIB,
	       r->fits_host ? "fits" : "DOES NOT FIT", o->host_limit * 100,
	       o->ckptd_config ? ", and the config's staging_bytes" : "");
	printf("  S3 upload       %8.1f s per node at %.1f GB/s\n", c->s3_s, o->mc.s3_bw / GB);
	if (o->cd.partners)
		printf("  partner copy    %8.1f s per node at %.1f GB/s\n", c->partner_s,
		       o->mc.net_bw / GB);
	printf("  restore         %8.1f s per node from the root at %.1f GB/s\n", c->restore_s,
	       o->mc.fs_read_bw / GB);
	human_time(a, sizeof(a), r->async.mtbf_s);
	printf("\nFailures: MTBF %.0f h per node, %s for the job's %u nodes\n",
	       o->mc.mtbf_node_s / 3600, a, o->nodes);
	printf("                       %14s %14s\n", "ckptd (async)", "synchronous");
	human_time(a, sizeof(a), c->stall_s);
	human_time(b, sizeof(b), c->sync_save_s);
	printf("  stall per save       %14s %14s\n", a, b);
	human_time(a, sizeof(a), c->durable_s);
	printf("  time to durable      %14s %14s\n", a, b);
	human_time(a, sizeof(a), r->async.interval_s);
	human_time(b, sizeof(b), r->sync.interval_s);
	printf("  best interval        %14s %14s\n", a, b);
	human_time(a, sizeof(a), r->async.loss_per_failure_s);
	human_time(b, sizeof(b), r->sync.loss_per_failure_s);
	printf("  lost per failure     %14s %14s\n", a, b);
	printf("  time lost overall    %13.2f%% %13.2f%%\n", r->async.overhead * 100,
	       r->sync.overhead * 100);
}

static void print_table(const struct opts *o, const struct plan_row *rows, size_t n)
{
	size_t shown = 0, ok = 0;
	for (size_t i = 0; i < n; i++)
		ok += feasible(&rows[i]);
	printf("model %s, %u nodes x %u GPUs (%s): %zu layouts, %zu feasible\n", o->model.name,
	       o->nodes, o->mc.gpus_per_node, o->mc.name, n, ok);
	printf("%4s %3s %3s %3s %4s %9s %7s %9s %9s %9s %8s %8s %9s %7s %9s %7s\n", "rank", "tp",
	       "pp", "cp", "dp", "GiB/GPU", "bubble", "shard GB", "node GB", "stage GiB", "stall",
	       "durable", "interval", "lost", "sync int", "lost");
	for (size_t i = 0; i < n && (!o->top || shown < o->top); i++) {
		const struct plan_row *r = &rows[i];
		char st[16], du[16], ia[16], is[16];
		human_time(st, sizeof(st), r->ck.stall_s);
		human_time(du, sizeof(du), r->ck.durable_s);
		human_time(ia, sizeof(ia), r->async.interval_s);
		human_time(is, sizeof(is), r->sync.interval_s);
		char label[8];
		snprintf(label, sizeof(label), "%zu", i + 1);
		printf("%4s %3u %3u %3u %4u %8.1f%s %6.1f%% %9.2f %9.1f %8.1f%s %8s %8s %9s %6.2f%% "
		       "%9s %6.2f%%\n", feasible(r) ? label : "-", r->l.tp, r->l.pp, r->l.cp, r->l.dp,
		       r->mem.total / GIB, r->fits_hbm ? " " : "!", r->mem.bubble * 100,
		       (double)r->ck.shard_rank / GB, (double)r->ck.shard_node / GB,
		       (double)r->ck.staging_node / GIB, r->fits_host ? " " : "!", st, du, ia,
		       r->async.overhead * 100, is, r->sync.overhead * 100);
		shown++;
	}
	printf("(! does not fit: GPU memory over %.0f%% of HBM, or ckptd's host memory; '-' in rank:"
	       " not feasible. Ranked by pipeline bubble, then tp, cp and memory.)\n",
	       o->hbm_limit * 100);
}

/* ---- a described model ---------------------------------------------------- */

static int run_desc(const struct opts *o)
{
	const struct plan_desc *d = &o->desc;
	uint32_t W = o->world, per_node = o->mc.gpus_per_node;
	size_t job_len = strlen(o->job);
	struct plan_rank_files f, big = { 0 };
	uint64_t staging_max = 0, node_bytes_max = 0, total = 0;
	json_t *ranks = json_array(), *warnings = json_array();

	for (uint32_t node = 0; node < o->nodes; node++) {
		uint64_t staging = 0, node_bytes = 0;
		for (uint32_t r = node * per_node; r < (node + 1) * per_node; r++) {
			plan_desc_rank(d, r, W, job_len, o->cd.chunk_bytes, &f);
			staging += (uint64_t)o->cd.slots_per_rank * f.slot_bytes;
			node_bytes += f.shard_bytes;
			total += f.shard_bytes;
			if (f.shard_bytes > big.shard_bytes || r == 0)
				big = f;
			json_array_append_new(ranks, json_pack("{s:i, s:I, s:I, s:I, s:I, s:I, s:I}",
				"rank", r, "lo", (json_int_t)f.lo, "len", (json_int_t)f.len,
				"shard_bytes", (json_int_t)f.shard_bytes,
				"index_bytes", (json_int_t)f.index_bytes,
				"max_save_bytes", (json_int_t)f.max_save_bytes,
				"slot_bytes", (json_int_t)f.slot_bytes));
		}
		if (staging > staging_max)
			staging_max = staging;
		if (node_bytes > node_bytes_max)
			node_bytes_max = node_bytes;
	}
	uint64_t partner = (uint64_t)o->cd.partners * per_node * 2 *
			   plan_partner_copy_bytes(big.shard_bytes + big.index_bytes);
	ckptd_warnings(o, staging_max, per_node, big.slot_bytes, partner, warnings);
	double d2h = (double)big.shard_bytes / o->mc.d2h_bw;
	double host = (double)node_bytes_max / o->mc.host_copy_bw;
	double stall = d2h > host ? d2h : host;
	double durable = stall + (double)node_bytes_max / o->mc.fs_write_bw;
	bool fits = (double)(staging_max + partner) <= o->host_limit * (double)o->mc.host_bytes &&
		    json_array_size(warnings) == 0;

	if (o->json) {
		json_t *doc = json_inputs(o);
		json_object_set_new(doc, "world", json_integer(W));
		json_object_set_new(doc, "job", json_string(o->job));
		json_object_set_new(doc, "checkpoint", json_pack(
			"{s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:b}",
			"state_bytes", (json_int_t)total,
			"shard_bytes_per_rank_max", (json_int_t)big.shard_bytes,
			"shard_bytes_per_node_max", (json_int_t)node_bytes_max,
			"staging_bytes_per_node", (json_int_t)staging_max,
			"partner_bytes_per_node", (json_int_t)partner,
			"stall_s", stall, "durable_s", durable, "fits_host", fits));
		if (o->ranks)
			json_object_set_new(doc, "ranks", json_incref(ranks));
		json_object_set_new(doc, "warnings", json_incref(warnings));
		print_json(doc);
		json_decref(doc);
	} else {
		printf("model %s (%s): %" PRIu64 " parameters, %u tensors of %" PRIu64
		       " elements each cut into %u contiguous slices, blob %" PRIu64 " bytes\n",
		       d->model, o->desc_path, d->n_params, d->n_tensors, d->n_params, W,
		       d->blob_bytes);
		printf("checkpoint: %" PRIu64 " bytes of shards over %u ranks; the largest %" PRIu64
		       " bytes; %" PRIu64 " bytes on the fullest node\n", total, W, big.shard_bytes,
		       node_bytes_max);
		printf("ckptd staging per node: %" PRIu64 " bytes (%u ranks x %u slots; chunk %" PRIu64
		       ", job %s)\n", staging_max, per_node, o->cd.slots_per_rank, o->cd.chunk_bytes,
		       o->job);
		printf("stall per save %.3f s, durable after %.3f s\n", stall, durable);
		if (o->ranks) {
			printf("%6s %12s %12s %12s %14s %12s\n", "rank", "elements", "shard_bytes",
			       "index_bytes", "max_save_bytes", "slot_bytes");
			size_t i;
			json_t *r;
			json_array_foreach(ranks, i, r)
				printf("%6" JSON_INTEGER_FORMAT " %12" JSON_INTEGER_FORMAT
				       " %12" JSON_INTEGER_FORMAT " %12" JSON_INTEGER_FORMAT
				       " %14" JSON_INTEGER_FORMAT " %12" JSON_INTEGER_FORMAT "\n",
				       json_integer_value(json_object_get(r, "rank")),
				       json_integer_value(json_object_get(r, "len")),
				       json_integer_value(json_object_get(r, "shard_bytes")),
				       json_integer_value(json_object_get(r, "index_bytes")),
				       json_integer_value(json_object_get(r, "max_save_bytes")),
				       json_integer_value(json_object_get(r, "slot_bytes")));
		}
	}
	print_warnings(warnings);
	json_decref(ranks);
	json_decref(warnings);
	return fits ? 0 : EXIT_NOFIT;
}

/* ---- main ------------------------------------------------------------------ */

static size_t enumerate(const struct opts *o, struct plan_row **out)
{
	uint32_t gpus = o->nodes * o->mc.gpus_per_node;
	size_t n = 0, cap = 64;
	struct plan_row *rows = malloc(cap * sizeof(*rows));
	if (!rows)
		return 0;
	for (uint32_t tp = 1; tp <= gpus; tp++) {
		if (gpus % tp)
			continue;
		for (uint32_t pp = 1; pp <= gpus / tp; pp++) {
			if ((gpus / tp) % pp)
				continue;
			for (uint32_t cp = 1; cp <= gpus / tp / pp; cp++) {
				if ((gpus / tp / pp) % cp)
					continue;
				struct plan_layout l = { tp, pp, gpus / tp / pp / cp, cp };
				const char *why;
				/* Only layouts the model admits make the table. */
				if (plan_layout_check(&o->model, &o->train, &o->mc, &l, &why) < 0)
					continue;
				if (n == cap) {
					struct plan_row *g = realloc(rows, 2 * cap * sizeof(*rows));
					if (!g) {
						free(rows);
						return 0;
					}
					rows = g;
					cap *= 2;
				}
				evaluate(o, &l, &rows[n++]);
			}
		}
	}
	qsort(rows, n, sizeof(*rows), row_cmp);
	*out = rows;
	return n;
}

int main(int argc, char **argv)
{
	struct opts o;
	int rc = parse_args(argc, argv, &o);
	if (rc >= 0)
		return rc;
	if (o.have_desc)
		return run_desc(&o);

	json_t *warnings = json_array();
	if (!o.all) {
		struct plan_row row;
		evaluate(&o, &o.layout, &row);
		ckptd_warnings(&o, row.ck.staging_node, o.mc.gpus_per_node, row.ck.slot_bytes,
			       row.ck.partner_node, warnings);
		if (o.json) {
			json_t *doc = json_inputs(&o);
			json_object_set_new(doc, "layouts", json_pack("[o]", json_row(&row)));
			json_object_set_new(doc, "warnings", json_incref(warnings));
			print_json(doc);
			json_decref(doc);
		} else {
			print_layout(&o, &row);
		}
		print_warnings(warnings);
		json_decref(warnings);
		return feasible(&row) ? 0 : EXIT_NOFIT;
	}

	struct plan_row *rows = NULL;
	size_t n = enumerate(&o, &rows);
	size_t ok = 0;
	for (size_t i = 0; i < n; i++)
		ok += feasible(&rows[i]);
	if (n)
		ckptd_warnings(&o, rows[0].ck.staging_node, o.mc.gpus_per_node, rows[0].ck.slot_bytes,
			       rows[0].ck.partner_node, warnings);
	if (o.json) {
		json_t *doc = json_inputs(&o), *arr = json_array();
		for (size_t i = 0; i < n && (!o.top || i < o.top); i++)
			json_array_append_new(arr, json_row(&rows[i]));
		json_object_set_new(doc, "layouts_considered", json_integer((json_int_t)n));
		json_object_set_new(doc, "layouts_feasible", json_integer((json_int_t)ok));
		json_object_set_new(doc, "layouts", arr);
		json_object_set_new(doc, "warnings", json_incref(warnings));
		print_json(doc);
		json_decref(doc);
	} else {
		print_table(&o, rows, n);
	}
	print_warnings(warnings);
	json_decref(warnings);
	free(rows);
	return ok ? 0 : EXIT_NOFIT;
}
