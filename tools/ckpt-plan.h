/* SPDX-License-Identifier: MIT */
/*
 * ckpt-plan's arithmetic: how much GPU memory a layout of a transformer
 * needs (Megatron-LM's theoretical memory formulas; activations after
 * Korthikanti et al. 2022), what each rank hands ckptd per checkpoint, the
 * staging memory ckptd needs for it on each node, how long a save stalls
 * and takes to reach the file system and S3, and the checkpoint interval
 * that loses the least time to failures (Young/Daly). Pure functions, no
 * I/O except the two loaders at the end (a ckpt-train model description,
 * a ckptd configuration file), which report errors in a caller's buffer.
 *
 * Sizes are bytes, bandwidths bytes per second, times seconds.
 */
#ifndef CKPT_PLAN_H
#define CKPT_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A Llama-style decoder: GQA attention, SwiGLU MLP, RMSNorm, untied
 * embeddings unless `tied`. */
struct plan_model {
	char name[32];
	uint32_t layers, hidden, heads, kv_heads, ffn;
	uint64_t vocab;
	uint32_t seq;
	bool tied;
};

/* A model described by its trainer (ckpt-train --describe-model): every
 * tensor is a 1-D vector of n_params elements, cut into contiguous slices,
 * rank r of W holding [n_params*r/W, n_params*(r+1)/W). */
#define PLAN_DESC_MAX_TENSORS 16
struct plan_desc {
	char model[32];
	uint64_t n_params;
	uint32_t n_tensors;
	char tensor_name[PLAN_DESC_MAX_TENSORS][64];
	uint32_t tensor_elem_bytes[PLAN_DESC_MAX_TENSORS];
	uint64_t blob_bytes, save_reserve_bytes;
};

enum plan_recompute { PLAN_RECOMPUTE_SELECTIVE, PLAN_RECOMPUTE_FULL, PLAN_RECOMPUTE_NONE };

struct plan_train {
	uint32_t weight_bytes;    /* per parameter: 2 (bf16, fp16) or 4 (fp32) */
	uint32_t grad_bytes;      /* fp32 main gradients: 4 */
	uint32_t optim_bytes;     /* fp32 master (if weights are not fp32) + moments */
	bool distributed_optimizer; /* optimizer state sharded over dp x cp */
	uint32_t micro_batch, global_batch;
	uint32_t vpp;             /* virtual pipeline stages per rank; 1 = none */
	enum plan_recompute recompute;
};

struct plan_machine {
	char name[32];
	uint32_t gpus_per_node;
	uint64_t hbm_bytes;       /* per GPU */
	uint64_t host_bytes;      /* per node */
	double d2h_bw;            /* per GPU, device to pinned host memory */
	double host_copy_bw;      /* per node, all ranks' copies together */
	double fs_write_bw, fs_read_bw; /* per node, to and from the root */
	double s3_bw;             /* per node */
	double net_bw;            /* per node, to partner nodes */
	double mtbf_node_s;       /* mean time between failures of one node */
	double restart_s;         /* relaunch, not counting reading the state */
};

/* The ckptd settings the plan depends on (defaults: ckptd's). */
struct plan_ckptd {
	uint64_t staging_bytes;   /* 0: half of the host memory (as ckptd) */
	uint32_t slots_per_rank;
	uint64_t partner_memory;  /* 0: no partner copies */
	uint32_t partners;
	uint64_t chunk_bytes;
};

struct plan_layout {
	uint32_t tp, pp, dp, cp;
};

struct plan_memory {
	uint64_t params_total;       /* whole model, vocabulary padded */
	uint64_t params_stage;       /* the most loaded rank's (tp, pp) shard */
	double weights, grads, optim, activations, total; /* per GPU, bytes */
	uint32_t microbatches;       /* per pipeline, per step */
	uint32_t in_flight;          /* micro-batches whose activations the first stage holds */
	double bubble;               /* pipeline bubble fraction (p-1)/(m+p-1), interleaving applied */
};

struct plan_ckpt {
	double state_total;          /* bytes per checkpoint, all ranks */
	uint64_t shard_rank;         /* the most loaded rank's shard */
	uint64_t shard_node;         /* the most loaded node's shards */
	double state_node_mean;      /* state_total over the nodes */
	uint64_t slot_bytes;         /* one staging slot of that rank (ckptd's rounding) */
	uint64_t staging_node;       /* ranks per node x slots x slot */
	uint64_t partner_node;       /* memory for partner copies on a node */
	double stall_s;              /* async: copy into shared memory */
	double durable_s;            /* async: from the save to its shards durable */
	double s3_s;                 /* upload of a node's shards */
	double partner_s;            /* copying a node's shards to its partners */
	double restore_s;            /* reading a node's shards back from the root */
	double sync_save_s;          /* synchronous save: stall = durable */
};

/* Young/Daly: interval T, the fraction of time lost (checkpoint cost plus
 * rework after failures), the work lost per failure. */
struct plan_interval {
	double mtbf_s;               /* of the whole job */
	double interval_s;
	double overhead;             /* fraction of wall time lost */
	double loss_per_failure_s;
};

/* Parameters of the whole model with the vocabulary padded to a multiple of
 * 128 x tp (Megatron's make-vocab-size-divisible-by); per layer and in the
 * embeddings. */
uint64_t plan_vocab_padded(const struct plan_model *m, uint32_t tp);
uint64_t plan_params_layer(const struct plan_model *m);
uint64_t plan_params_total(const struct plan_model *m, uint32_t tp);

/* 0, or -EINVAL with *why naming the rule a layout breaks. */
int plan_layout_check(const struct plan_model *m, const struct plan_train *t,
		      const struct plan_machine *mc, const struct plan_layout *l, const char **why);

void plan_memory_of(const struct plan_model *m, const struct plan_train *t,
		    const struct plan_layout *l, struct plan_memory *out);

/* ckptd's staging slot for a save of max_save_bytes (its arena rule). */
uint64_t plan_slot_bytes(uint64_t max_save_bytes);
/* Memory ckptd spends on one partner copy of need bytes. */
uint64_t plan_partner_copy_bytes(uint64_t need);

void plan_ckpt_of(const struct plan_model *m, const struct plan_train *t,
		  const struct plan_machine *mc, const struct plan_ckptd *cd,
		  const struct plan_layout *l, const struct plan_memory *mem, struct plan_ckpt *out);

/* The interval for checkpoint cost cost_s whose work becomes safe lag_s
 * after the save starts (async: time to durable; sync: 0, already in cost),
 * no shorter than min_interval_s; restore_s is reading the state back. */
void plan_interval_of(double cost_s, double lag_s, double min_interval_s, double restore_s,
		      const struct plan_machine *mc, uint32_t nodes, struct plan_interval *out);

/* A described model's rank r of world: shard bytes, index bytes (job name
 * of job_len bytes, chunk_bytes chunks) and ckptd's slot for it. */
struct plan_rank_files {
	uint64_t lo, len;            /* elements of each tensor */
	uint64_t shard_bytes, index_bytes, max_save_bytes, slot_bytes;
};
void plan_desc_rank(const struct plan_desc *d, uint32_t rank, uint32_t world, size_t job_len,
		    uint64_t chunk_bytes, struct plan_rank_files *out);

/* Element size of a dtype name of FORMAT.md ("f32"), or 0. */
uint32_t plan_dtype_bytes(const char *name);

/* Sizes as ckptd takes them: digits with an optional fraction and a binary
 * unit K, M, G, T (optionally followed by "i" and "B"). 0 or -EINVAL. */
int plan_parse_size(const char *s, uint64_t *out);

/* Load a ckpt-train model description (JSON); 0 or -errno, why filled. */
int plan_desc_load(const char *path, struct plan_desc *d, char *why, size_t whylen);

/* Read the keys of a ckptd configuration file the plan depends on
 * (staging_bytes, slots_per_rank, partner_memory, partners, chunk_size)
 * over *cd; other keys are ignored. 0 or -errno, why naming file and line. */
int plan_ckptd_load(const char *path, struct plan_ckptd *cd, char *why, size_t whylen);

#endif
