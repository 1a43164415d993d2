/* SPDX-License-Identifier: MIT */
/*
 * The language model of ckpt-train: a byte-level MLP language model
 * (Bengio et al. 2003 style). It predicts byte t from the previous
 * `ctx` bytes: each context byte is embedded (one shared 256 x embd
 * table), the ctx embeddings are concatenated, passed through `layers`
 * fully connected tanh layers of width `hidden`, and a final layer gives
 * 256 logits; the loss is softmax cross-entropy.
 *
 * Why an MLP and not a transformer: it is small enough to write forward
 * and backward by hand in plain C and verify quickly, its state still
 * scales from KiB to GiB with the flags (hidden x hidden layers), and the
 * checkpoint path it exercises (sharded fp32 master weights and Adam
 * moments) is the same as a transformer's.
 *
 * All parameters live in one flat float vector (the layout is fixed by
 * model_layout()), so that data parallelism and ZeRO-1 sharding work on
 * contiguous slices of it. Every loop runs in a fixed order: the same
 * inputs give bitwise the same loss and gradient.
 */
#ifndef CKPT_TRAIN_MODEL_H
#define CKPT_TRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#define MODEL_VOCAB 256
#define MODEL_MAX_LAYERS 16

struct model_config {
	uint32_t ctx;    /* context bytes */
	uint32_t embd;   /* embedding width */
	uint32_t hidden; /* width of the hidden layers */
	uint32_t layers; /* hidden layers, 1..MODEL_MAX_LAYERS */
};

/* Offsets (in floats) of each tensor in the flat parameter vector. */
struct model_layout {
	size_t emb;                       /* [256][embd] */
	size_t w[MODEL_MAX_LAYERS];       /* [in][hidden], in = ctx*embd or hidden */
	size_t b[MODEL_MAX_LAYERS];       /* [hidden] */
	size_t wo;                        /* [hidden][256] */
	size_t bo;                        /* [256] */
	size_t n_params;
};

/* Scratch memory for one batch of examples. */
struct model_work {
	size_t max_rows;
	float *x0;                        /* [rows][ctx*embd] */
	float *h[MODEL_MAX_LAYERS];       /* [rows][hidden] after tanh */
	float *probs;                     /* [rows][256] */
	float *dh;                        /* [rows][max(hidden, ctx*embd)] */
	float *dtmp;                      /* [rows][max(hidden, ctx*embd)] */
};

/* Fill *lay; returns 0 or -EINVAL for sizes out of range or overflowing. */
int model_layout(const struct model_config *cfg, struct model_layout *lay);

/* Initialise params from a seed (same seed, same bits). */
void model_init(const struct model_config *cfg, const struct model_layout *lay,
		float *params, uint64_t seed);

/* Flag per parameter: 1 if AdamW weight decay applies (matrices), else 0. */
int model_decays(const struct model_layout *lay, size_t i);

int model_work_alloc(const struct model_config *cfg, size_t max_rows,
		     struct model_work *w);
void model_work_free(struct model_work *w);

/*
 * Forward and backward over `rows` examples: context[r*ctx .. r*ctx+ctx-1]
 * predicts target[r]. grad (n_params floats) is overwritten with the
 * gradient of the mean loss; returns the mean loss.
 */
double model_step(const struct model_config *cfg, const struct model_layout *lay,
		  const float *params, float *grad, struct model_work *w,
		  const uint8_t *context, const uint8_t *target, size_t rows);

#endif
