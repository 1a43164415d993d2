/* SPDX-License-Identifier: MIT */
/*
 * The GPU backend of a ckpt-train built without the gpu feature: every
 * entry point fails with -ENOTSUP, so that --device cuda says how to get
 * one rather than being an unknown flag.
 */
#include "gpu.h"

#include <errno.h>
#include <stdio.h>

int gpu_open(const struct gpu_setup *s, struct gpu **out, char *why, size_t whylen)
{
	*out = NULL;
	snprintf(why, whylen, "this ckpt-train was built without GPU support "
		 "(configure with meson -Dgpu=enabled; needs CUDA and NCCL)");
	return -ENOTSUP;
}

void gpu_close(struct gpu *g)
{
}

const char *gpu_error(const struct gpu *g)
{
	return "built without GPU support";
}

const char *gpu_describe(const struct gpu *g)
{
	return "";
}

int gpu_step(struct gpu *g, const uint8_t *context, const uint8_t *target, double *loss,
	     double *sumsq)
{
	return -ENOTSUP;
}

int gpu_update(struct gpu *g, const struct gpu_adamw *a)
{
	return -ENOTSUP;
}

int gpu_gather_params(struct gpu *g)
{
	return -ENOTSUP;
}

int gpu_upload(struct gpu *g, enum gpu_tensor which, const void *src, size_t bytes)
{
	return -ENOTSUP;
}

int gpu_download(struct gpu *g, float *params, float *master, float *m, float *v)
{
	return -ENOTSUP;
}

int gpu_arena_attach(struct gpu *g, ckpt_ctx *ck, const char **note)
{
	*note = NULL;
	return -ENOTSUP;
}

void gpu_arena_detach(struct gpu *g)
{
}

int gpu_save_to(struct gpu *g, void *master, void *m, void *v)
{
	return -ENOTSUP;
}
