/* SPDX-License-Identifier: MIT */
/*
 * ckpt-plan's formulas against hand-computed cases, the seed case (Llama
 * 3.3 70B on 32 nodes of 8 H100: about 1 TB of state per checkpoint, about
 * 31 GB per node), and its command line (argv[1] is the binary).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "ckpt-plan.h"

static int failures;

#define CHECK(cond, ...) do { \
	if (!(cond)) { \
		fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
		fprintf(stderr, __VA_ARGS__); \
		fputc('\n', stderr); \
		failures++; \
	} \
} while (0)

static const struct plan_model llama70 = {
	.name = "llama3-70b", .layers = 80, .hidden = 8192, .heads = 64, .kv_heads = 8,
	.ffn = 28672, .vocab = 128256, .seq = 8192,
};
static const struct plan_model llama8 = {
	.name = "llama3-8b", .layers = 32, .hidden = 4096, .heads = 32, .kv_heads = 8,
	.ffn = 14336, .vocab = 128256, .seq = 8192,
};
static const struct plan_machine p5 = {
	.name = "p5.48xlarge", .gpus_per_node = 8, .hbm_bytes = 81559ull << 20,
	.host_bytes = 2048ull << 30, .d2h_bw = 25e9, .host_copy_bw = 100e9, .fs_write_bw = 5e9,
	.fs_read_bw = 10e9, .s3_bw = 2e9, .net_bw = 25e9, .mtbf_node_s = 6300 * 3600.0,
	.restart_s = 300,
};
static const struct plan_train bf16_adam = {
	.weight_bytes = 2, .grad_bytes = 4, .optim_bytes = 12, .distributed_optimizer = true,
	.micro_batch = 1, .global_batch = 1024, .vpp = 1,
};

static void test_params(void)
{
	/* Meta's published counts: 70,553,706,496 and 8,030,261,248. */
	CHECK(plan_params_total(&llama70, 1) == 70553706496ull, "%llu",
	      (unsigned long long)plan_params_total(&llama70, 1));
	CHECK(plan_params_total(&llama8, 1) == 8030261248ull, "%llu",
	      (unsigned long long)plan_params_total(&llama8, 1));
	/* 128256 is a multiple of 128 but not of 128 x 8. */
	CHECK(plan_vocab_padded(&llama70, 1) == 128256, "-");
	CHECK(plan_vocab_padded(&llama70, 8) == 129024, "%llu",
	      (unsigned long long)plan_vocab_padded(&llama70, 8));
	/* One layer by hand: q and o 8192^2 each, k and v 8192 x 1024 each,
	 * 3 x 8192 x 28672 for the MLP, two norms. */
	CHECK(plan_params_layer(&llama70) ==
	      2ull * 8192 * 8192 + 2ull * 8192 * 1024 + 3ull * 8192 * 28672 + 2 * 8192, "-");
}

/* A model small enough to add up by hand. */
static const struct plan_model tiny = {
	.name = "tiny", .layers = 2, .hidden = 64, .heads = 4, .kv_heads = 4, .ffn = 256,
	.vocab = 128, .seq = 16,
};

static void test_memory(void)
{
	struct plan_train t = bf16_adam;
	struct plan_memory m;
	struct plan_layout l = { .tp = 1, .pp = 1, .dp = 1, .cp = 1 };

	t.global_batch = 4;
	plan_memory_of(&tiny, &t, &l, &m);
	/* Per layer s*b*h*(18 + 4*ffn/h) = 16*64*34 = 34816; two layers; the
	 * embedding's 8sb + sbh = 1152; the output layer and loss
	 * 4sbh(1 + V/h) = 12288. */
	CHECK(fabs(m.activations - (2 * 34816.0 + 1152 + 12288)) < 1e-6, "%f", m.activations);
	/* 2 layers of 4*64*64 + 3*64*256 + 128, final norm 64, 2 x 128 x 64. */
	uint64_t p = 2 * (4 * 64 * 64 + 3 * 64 * 256 + 128) + 64 + 2 * 128 * 64;
	CHECK(m.params_total == p && m.params_stage == p, "%llu %llu",
	      (unsigned long long)m.params_total, (unsigned long long)m.params_stage);
	/* Megatron: 18 bytes per parameter on one data-parallel rank. */
	CHECK(fabs(m.weights + m.grads + m.optim - 18.0 * p) < 1e-6, "-");
	CHECK(m.bubble == 0 && m.in_flight == 1 && m.microbatches == 4, "-");

	/* pp 2: one layer per stage, two micro-batches in flight (1F1B), no
	 * output layer on the first stage; the bubble is (p-1)/(m+p-1). */
	l.pp = 2;
	plan_memory_of(&tiny, &t, &l, &m);
	CHECK(fabs(m.activations - (34816.0 * 2 + 1152 * 2)) < 1e-6, "%f", m.activations);
	CHECK(m.in_flight == 2 && fabs(m.bubble - 0.2) < 1e-12, "%u %f", m.in_flight, m.bubble);
	/* Fewer micro-batches than stages: only those are in flight. */
	t.global_batch = 1;
	plan_memory_of(&tiny, &t, &l, &m);
	CHECK(fabs(m.activations - (34816.0 + 1152)) < 1e-6, "%f", m.activations);

	/* tp and cp divide activations; the distributed optimizer 6 + 12/dp. */
	t.global_batch = 8;
	l = (struct plan_layout){ .tp = 2, .pp = 1, .dp = 4, .cp = 2 };
	plan_memory_of(&tiny, &t, &l, &m);
	double s = 8, act = 2 * s * 64 * 34 + 8 * s + s * 64 + 4 * s * 64 * (1 + 256.0 / 64);
	CHECK(fabs(m.activations - act / 2) < 1e-6, "%f vs %f", m.activations, act / 2);
	CHECK(fabs(m.optim - m.params_stage * 12.0 / 8) < 1e-6, "-");
	/* No recompute adds the attention scores, 5 a s^2 b per layer. */
	t.recompute = PLAN_RECOMPUTE_NONE;
	struct plan_memory m2;
	plan_memory_of(&tiny, &t, &l, &m2);
	CHECK(fabs(m2.activations - m.activations - 2 * 5.0 * 4 * s * s / 2) < 1e-6, "-");
}

static void test_layout_rules(void)
{
	const char *why;
	struct plan_layout l = { .tp = 16, .pp = 1, .dp = 16, .cp = 1 };
	CHECK(plan_layout_check(&llama70, &bf16_adam, &p5, &l, &why) == -EINVAL && why, "tp 16");
	l = (struct plan_layout){ .tp = 8, .pp = 3, .dp = 1, .cp = 1 };
	CHECK(plan_layout_check(&llama70, &bf16_adam, &p5, &l, &why) == -EINVAL, "pp 3");
	l = (struct plan_layout){ .tp = 8, .pp = 8, .dp = 4, .cp = 1 };
	CHECK(plan_layout_check(&llama70, &bf16_adam, &p5, &l, &why) == 0, "%s", why);
	l = (struct plan_layout){ .tp = 8, .pp = 1, .dp = 3, .cp = 1 };
	CHECK(plan_layout_check(&llama70, &bf16_adam, &p5, &l, &why) == -EINVAL, "1024 %% 3");
}

static void test_ckptd_rules(void)
{
	/* ckptd's arena: the save plus 1/32 (at least 8 MiB), 2 MiB pages. */
	CHECK(plan_slot_bytes(1 << 20) == 10u << 20, "%llu",
	      (unsigned long long)plan_slot_bytes(1 << 20));
	CHECK(plan_slot_bytes(1ull << 30) == 1056ull << 20, "-");
	CHECK(plan_slot_bytes((1ull << 30) + 1) == 1058ull << 20, "-");
	CHECK(plan_partner_copy_bytes(5000) == 5000, "-");
	CHECK(plan_partner_copy_bytes((2u << 20) + 1) == 4u << 20, "-");

	/* 10 f32 elements over 3 ranks (3, 3, 4), a 100-byte blob, job "j":
	 * extents 4096 + 4096; table 24 + (48 + 8); 2 chunks; the index
	 * 80 + 8 (job) + 80 + 8 + 4. */
	struct plan_desc d = { .n_params = 10, .n_tensors = 1, .blob_bytes = 100,
			       .save_reserve_bytes = 16384 };
	snprintf(d.tensor_name[0], sizeof(d.tensor_name[0]), "w");
	d.tensor_elem_bytes[0] = 4;
	struct plan_rank_files f;
	plan_desc_rank(&d, 2, 3, 1, 64 << 10, &f);
	CHECK(f.lo == 6 && f.len == 4, "%llu %llu", (unsigned long long)f.lo,
	      (unsigned long long)f.len);
	CHECK(f.shard_bytes == 8192 && f.index_bytes == 180, "%llu %llu",
	      (unsigned long long)f.shard_bytes, (unsigned long long)f.index_bytes);
	CHECK(f.max_save_bytes == 16 + 100 + 16384 && f.slot_bytes == 10u << 20, "-");
	/* 200 KiB per tensor in 64 KiB chunks: 4 chunks each. */
	d.n_params = 3 * 51200;
	plan_desc_rank(&d, 0, 3, 1, 64 << 10, &f);
	CHECK(f.shard_bytes == 204800 + 4096 && f.index_bytes == 80 + 8 + 80 + 4 * 5 + 4, "%llu %llu",
	      (unsigned long long)f.shard_bytes, (unsigned long long)f.index_bytes);
}

static void test_interval(void)
{
	struct plan_machine mc = p5;
	struct plan_interval iv;
	mc.mtbf_node_s = 3.6e6;
	mc.restart_s = 100;
	/* M = 3.6e6 / 10 = 360000 s, C = 60 s: Young sqrt(2CM) = 6572.67,
	 * Daly's higher-order estimate 6532.7. */
	plan_interval_of(60, 0, 0, 20, &mc, 10, &iv);
	CHECK(fabs(iv.mtbf_s - 360000) < 1e-6, "-");
	CHECK(fabs(iv.interval_s - 6532.7) < 0.5, "%f", iv.interval_s);
	CHECK(fabs(iv.loss_per_failure_s - (iv.interval_s / 2 + 120)) < 1e-6, "-");
	/* A lower bound wins over the optimum; lag adds to the loss. */
	plan_interval_of(60, 30, 9000, 20, &mc, 10, &iv);
	CHECK(iv.interval_s == 9000 && fabs(iv.loss_per_failure_s - (4500 + 30 + 120)) < 1e-6, "-");
}

static void test_seed_case(void)
{
	struct plan_ckptd cd = { .slots_per_rank = 2, .partners = 1, .chunk_bytes = 4 << 20 };
	struct plan_layout l = { .tp = 8, .pp = 8, .dp = 4, .cp = 1 };
	struct plan_memory m;
	struct plan_ckpt c;
	plan_memory_of(&llama70, &bf16_adam, &l, &m);
	plan_ckpt_of(&llama70, &bf16_adam, &p5, &cd, &l, &m, &c);
	/* 14 bytes per parameter (bf16 weights, fp32 master and two moments). */
	CHECK(c.state_total > 0.97e12 && c.state_total < 1.0e12, "%.4g", c.state_total);
	CHECK(c.state_node_mean > 30.5e9 && c.state_node_mean < 31.3e9, "%.4g", c.state_node_mean);
	CHECK(m.total < 0.8 * (double)p5.hbm_bytes, "%.4g", m.total);
	CHECK(c.shard_node >= c.state_node_mean, "-");
	CHECK(c.staging_node == 8ull * 2 * c.slot_bytes && c.slot_bytes > c.shard_rank, "-");
	/* The stall is the node's copy into shared memory at 100 GB/s. */
	CHECK(fabs(c.stall_s - (double)c.shard_node / 100e9) < 1e-9, "%f", c.stall_s);
	CHECK(c.sync_save_s > 10 * c.stall_s, "-");
}

static void test_parse_size(void)
{
	uint64_t v;
	CHECK(plan_parse_size("4MiB", &v) == 0 && v == 4u << 20, "-");
	CHECK(plan_parse_size("1.5G", &v) == 0 && v == 3ull << 29, "-");
	CHECK(plan_parse_size("65536", &v) == 0 && v == 65536, "-");
	CHECK(plan_parse_size("2TiB", &v) == 0 && v == 2ull << 40, "-");
	CHECK(plan_parse_size("0.1K", &v) == -EINVAL, "-");
	CHECK(plan_parse_size("-1", &v) == -EINVAL, "-");
	CHECK(plan_parse_size("12x", &v) == -EINVAL, "-");
	CHECK(plan_parse_size("99999999999T", &v) == -ERANGE, "-");
}

static void test_ckptd_config(void)
{
	char path[] = "/tmp/test-plan-XXXXXX", why[512];
	int fd = mkstemp(path);
	FILE *f = fdopen(fd, "w");
	fputs("# comment\nslots_per_rank = 4\n[other]\nstaging_bytes = 1G\n[ckptd]\n"
	      "; comment\n  staging_bytes = 64GiB  \npartner_memory=8G\nroot = /x\n", f);
	fclose(f);
	struct plan_ckptd cd = { .slots_per_rank = 2, .partners = 1 };
	CHECK(plan_ckptd_load(path, &cd, why, sizeof(why)) == 0, "%s", why);
	CHECK(cd.slots_per_rank == 4 && cd.staging_bytes == 64ull << 30 &&
	      cd.partner_memory == 8ull << 30, "%u %llu", cd.slots_per_rank,
	      (unsigned long long)cd.staging_bytes);
	f = fopen(path, "w");
	fputs("staging_bytes = 1G\nslots_per_rank = 0\n", f);
	fclose(f);
	CHECK(plan_ckptd_load(path, &cd, why, sizeof(why)) == -EINVAL && strstr(why, ":2: slots_per_rank"),
	      "%s", why);
	unlink(path);
	CHECK(plan_ckptd_load(path, &cd, why, sizeof(why)) == -ENOENT, "-");
}

/* Runs the binary; its standard output in *out (caller frees), exit status. */
static int run(const char *bin, const char *args, char **out)
{
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "%s %s 2>/dev/null", bin, args);
	FILE *p = popen(cmd, "r");
	size_t cap = 1 << 20, n = 0;
	*out = calloc(1, cap);
	if (!p || !*out)
		return -1;
	while (n + 1 < cap) {
		size_t k = fread(*out + n, 1, cap - 1 - n, p);
		if (!k)
			break;
		n += k;
	}
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_cli(const char *bin)
{
	char *out;
	json_error_t e;
	int rc = run(bin, "--model llama3-70b --machine p5.48xlarge --nodes 32 --tp 8 --pp 8 --json", &out);
	CHECK(rc == 0, "seed case exit status %d", rc);
	json_t *doc = json_loads(out, 0, &e);
	CHECK(doc, "not JSON: %s", e.text);
	json_t *ck = json_object_get(json_array_get(json_object_get(doc, "layouts"), 0), "checkpoint");
	double node = json_number_value(json_object_get(ck, "state_bytes_per_node_mean"));
	CHECK(node > 30.5e9 && node < 31.3e9, "%g", node);
	CHECK(json_is_true(json_object_get(json_array_get(json_object_get(doc, "layouts"), 0),
					   "feasible")), "-");
	json_decref(doc);
	free(out);

	rc = run(bin, "--model llama3-70b --nodes 32 --all --json --top 0", &out);
	doc = json_loads(out, 0, &e);
	CHECK(rc == 0 && doc, "--all: %d", rc);
	json_t *rows = json_object_get(doc, "layouts");
	size_t feasible = (size_t)json_integer_value(json_object_get(doc, "layouts_feasible"));
	CHECK(feasible > 0 && feasible < json_array_size(rows), "%zu of %zu", feasible,
	      json_array_size(rows));
	/* The ranking puts every feasible layout before every other. */
	for (size_t i = 0; i < json_array_size(rows); i++)
		CHECK(json_is_true(json_object_get(json_array_get(rows, i), "feasible")) ==
		      (i < feasible), "row %zu", i);
	json_decref(doc);
	free(out);

	/* 70B on one node does not fit: exit status 1. */
	rc = run(bin, "--model llama3-70b --nodes 1 --tp 8", &out);
	CHECK(rc == 1, "%d", rc);
	free(out);
	rc = run(bin, "--model llama3-70b --nodes 32 --tp 3", &out);
	CHECK(rc == 2, "%d", rc);
	free(out);
	rc = run(bin, "--model nope --nodes 1", &out);
	CHECK(rc == 2, "%d", rc);
	free(out);
	rc = run(bin, "--model-file /nonexistent/model.json --world 2", &out);
	CHECK(rc == 3, "%d", rc);
	free(out);
}

int main(int argc, char **argv)
{
	test_params();
	test_memory();
	test_layout_rules();
	test_ckptd_rules();
	test_interval();
	test_seed_case();
	test_parse_size();
	test_ckptd_config();
	if (argc > 1)
		test_cli(argv[1]);
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("ok\n");
	return 0;
}
