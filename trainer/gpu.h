/* SPDX-License-Identifier: MIT */
/*
 * The GPU backend of ckpt-train (--device cuda): the state of one rank on
 * its CUDA device and the operations of a training step on it. The
 * training loop, the data pipeline, the learning-rate schedule and the
 * checkpoint protocol stay in train.c; this is what changes when the
 * parameters, gradients and optimizer state live on the GPU.
 *
 * Every function returns 0 or a negative errno (-ENODEV: no usable
 * device, -ENOTSUP: built without GPU support, -EIO: a CUDA or NCCL call
 * failed, -ENOMEM); gpu_error() then says what failed, naming the call.
 * Nothing here prints or exits: train.c decides.
 *
 * Built from gpu.c + kernels.cu where the gpu feature is enabled, else
 * from gpu-none.c, whose gpu_open() fails with -ENOTSUP.
 */
#ifndef CKPT_TRAIN_GPU_H
#define CKPT_TRAIN_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"
#include "model.h"

struct gpu;

struct gpu_setup {
	const struct model_config *model;
	const struct model_layout *lay;
	size_t rows;             /* examples per rank per step (batch * seq) */
	int rank, world;         /* in MPI_COMM_WORLD */
	const float *params;     /* initial parameters (n_params), host; copied */
};

/*
 * Collective over MPI_COMM_WORLD: pick the device (local rank modulo the
 * devices of the node), create the NCCL communicator and upload the
 * initial state: params, master = this rank's slice of params (the same
 * slice [N*r/W, N*(r+1)/W) as the CPU variant), AdamW moments zero.
 * Every rank returns the same verdict: if one rank has no device, all
 * return -ENODEV. On failure *out is NULL and why says why (the message
 * of this rank; "no CUDA device: ..." for -ENODEV).
 */
int gpu_open(const struct gpu_setup *s, struct gpu **out, char *why, size_t whylen);

/* Release the device state and the NCCL communicator (collective).
 * Unregisters the arena first. Accepts NULL. */
void gpu_close(struct gpu *g);

/* What the last failing call of g did wrong (a static "" if none). */
const char *gpu_error(const struct gpu *g);

/* One line for the log: device name, index and count. */
const char *gpu_describe(const struct gpu *g);

/*
 * Forward and backward of this rank's rows (context/target as make_batch
 * builds them, on the host), then the gradient averaged over the ranks
 * into each owner's slice (NCCL reduce to the owner). *loss: this rank's
 * mean loss; *sumsq: the sum of squares of the averaged gradient over the
 * owned slice (double, fixed order). The same quantities as the CPU path.
 */
int gpu_step(struct gpu *g, const uint8_t *context, const uint8_t *target,
	     double *loss, double *sumsq);

/* AdamW on the owned slice with the scalars train.c computed (the same
 * formula as the CPU path), then every slice gathered into params. */
struct gpu_adamw {
	float scale;    /* gradient clip factor */
	float beta1, beta2, eps, bc1, bc2, lr, wd;
};
int gpu_update(struct gpu *g, const struct gpu_adamw *a);

/* Gather every rank's master slice into params (collective); after a
 * restore. */
int gpu_gather_params(struct gpu *g);

enum gpu_tensor { GPU_MASTER, GPU_ADAM_M, GPU_ADAM_V };

/* Copy one slice tensor (len floats) from the host into the device (a
 * restore, from the arena). */
int gpu_upload(struct gpu *g, enum gpu_tensor which, const void *src, size_t bytes);

/*
 * Synchronous copies to host memory, for --ckpt-mode sync and --dump:
 * params (n_params floats; may be NULL) and the owned slices.
 */
int gpu_download(struct gpu *g, float *params, float *master, float *m, float *v);

/*
 * Register ckpt's shared arena with CUDA (cudaHostRegister) so that the
 * save's device-to-host copies go straight into it by DMA. Call after
 * every connect and before every save: a reconnect inside libckpt maps a
 * new arena, possibly at the same address, which this notices and
 * re-registers. If registration fails (locked-memory limits), copies
 * still work from pageable memory, slower; *note is set to a message once.
 * ck may be NULL (not connected).
 */
int gpu_arena_attach(struct gpu *g, ckpt_ctx *ck, const char **note);

/* Unregister the arena; call before ckpt_close(). */
void gpu_arena_detach(struct gpu *g);

/*
 * The stall of an async save: copy master, adam_m and adam_v (len floats
 * each) into the slots reserved with ckpt_save_reserve() (cudaMemcpyAsync
 * on the training stream, then wait for it).
 */
int gpu_save_to(struct gpu *g, void *master, void *m, void *v);

#endif
