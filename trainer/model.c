/* SPDX-License-Identifier: MIT */
/* Byte-level MLP language model: forward and backward (see model.h). */
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform in [-a, a): 24 random bits, exact in float. */
static float uniform_pm(uint64_t *s, float a)
{
	float u = (float)(splitmix64(s) >> 40) * (1.0f / 16777216.0f);
	return (2.0f * u - 1.0f) * a;
}

static size_t layer_in(const struct model_config *cfg, uint32_t l)
{
	return l == 0 ? (size_t)cfg->ctx * cfg->embd : cfg->hidden;
}

int model_layout(const struct model_config *cfg, struct model_layout *lay)
{
	/* Bounds keep every size well inside size_t and int ranges. */
	if (cfg->ctx < 1 || cfg->ctx > 4096 || cfg->embd < 1 || cfg->embd > 65536 ||
	    cfg->hidden < 1 || cfg->hidden > 65536 || cfg->layers < 1 ||
	    cfg->layers > MODEL_MAX_LAYERS || (uint64_t)cfg->ctx * cfg->embd > (1u << 24))
		return -EINVAL;
	size_t off = 0;
	memset(lay, 0, sizeof(*lay));
	lay->emb = off;
	off += (size_t)MODEL_VOCAB * cfg->embd;
	for (uint32_t l = 0; l < cfg->layers; l++) {
		lay->w[l] = off;
		off += layer_in(cfg, l) * cfg->hidden;
		lay->b[l] = off;
		off += cfg->hidden;
	}
	lay->wo = off;
	off += (size_t)cfg->hidden * MODEL_VOCAB;
	lay->bo = off;
	off += MODEL_VOCAB;
	lay->n_params = off;
	return 0;
}

void model_init(const struct model_config *cfg, const struct model_layout *lay,
		float *params, uint64_t seed)
{
	uint64_t s = seed ^ 0x6d6f64656c696e69ULL;
	memset(params, 0, lay->n_params * sizeof(float));
	for (size_t i = 0; i < (size_t)MODEL_VOCAB * cfg->embd; i++)
		params[lay->emb + i] = uniform_pm(&s, 1.0f);
	for (uint32_t l = 0; l < cfg->layers; l++) {
		size_t n = layer_in(cfg, l) * cfg->hidden;
		/* Uniform with variance 1/fan_in keeps tanh out of saturation. */
		float a = sqrtf(3.0f / (float)layer_in(cfg, l));
		for (size_t i = 0; i < n; i++)
			params[lay->w[l] + i] = uniform_pm(&s, a);
	}
	float ao = 0.5f * sqrtf(3.0f / (float)cfg->hidden);
	for (size_t i = 0; i < (size_t)cfg->hidden * MODEL_VOCAB; i++)
		params[lay->wo + i] = uniform_pm(&s, ao);
}

int model_decays(const struct model_layout *lay, size_t i)
{
	if (i >= lay->bo)
		return 0;
	if (i >= lay->wo)
		return 1;
	for (int l = MODEL_MAX_LAYERS - 1; l >= 0; l--) {
		if (lay->w[l] == 0 && l > 0)
			continue;
		if (i >= lay->b[l])
			return 0;
		if (i >= lay->w[l])
			return 1;
	}
	return 0; /* embedding: not decayed */
}

void model_work_free(struct model_work *w)
{
	if (!w)
		return;
	free(w->x0);
	for (int l = 0; l < MODEL_MAX_LAYERS; l++)
		free(w->h[l]);
	free(w->probs);
	free(w->dh);
	free(w->dtmp);
	memset(w, 0, sizeof(*w));
}

int model_work_alloc(const struct model_config *cfg, size_t max_rows,
		     struct model_work *w)
{
	size_t in0 = (size_t)cfg->ctx * cfg->embd;
	size_t wide = in0 > cfg->hidden ? in0 : cfg->hidden;
	memset(w, 0, sizeof(*w));
	w->max_rows = max_rows;
	w->x0 = malloc(max_rows * in0 * sizeof(float));
	w->probs = malloc(max_rows * MODEL_VOCAB * sizeof(float));
	w->dh = malloc(max_rows * wide * sizeof(float));
	w->dtmp = malloc(max_rows * wide * sizeof(float));
	int ok = w->x0 && w->probs && w->dh && w->dtmp;
	for (uint32_t l = 0; l < cfg->layers && ok; l++) {
		w->h[l] = malloc(max_rows * cfg->hidden * sizeof(float));
		ok = w->h[l] != NULL;
	}
	if (!ok) {
		model_work_free(w);
		return -ENOMEM;
	}
	return 0;
}

/* y[rows][out] = x[rows][in] @ W[in][out] + b */
static void linear_fwd(float *y, const float *x, const float *W, const float *b,
		       size_t rows, size_t in, size_t out)
{
	for (size_t r = 0; r < rows; r++) {
		float *yr = y + r * out;
		const float *xr = x + r * in;
		memcpy(yr, b, out * sizeof(float));
		for (size_t k = 0; k < in; k++) {
			float a = xr[k];
			const float *wk = W + k * out;
			for (size_t j = 0; j < out; j++)
				yr[j] += a * wk[j];
		}
	}
}

/*
 * Given dy[rows][out]: dW += x^T dy, db += colsum(dy), and, if dx is not
 * NULL, dx[rows][in] = dy @ W^T.
 */
static void linear_bwd(float *dx, float *dW, float *db, const float *dy,
		       const float *x, const float *W, size_t rows, size_t in, size_t out)
{
	for (size_t r = 0; r < rows; r++) {
		const float *dyr = dy + r * out;
		const float *xr = x + r * in;
		for (size_t j = 0; j < out; j++)
			db[j] += dyr[j];
		for (size_t k = 0; k < in; k++) {
			float a = xr[k];
			float *dwk = dW + k * out;
			for (size_t j = 0; j < out; j++)
				dwk[j] += a * dyr[j];
		}
		if (dx) {
			float *dxr = dx + r * in;
			for (size_t k = 0; k < in; k++) {
				const float *wk = W + k * out;
				float s = 0.0f;
				for (size_t j = 0; j < out; j++)
					s += dyr[j] * wk[j];
				dxr[k] = s;
			}
		}
	}
}

double model_step(const struct model_config *cfg, const struct model_layout *lay,
		  const float *params, float *grad, struct model_work *w,
		  const uint8_t *context, const uint8_t *target, size_t rows)
{
	const size_t E = cfg->embd, H = cfg->hidden, K = cfg->ctx, in0 = K * E;
	const uint32_t L = cfg->layers;

	/* Forward. */
	for (size_t r = 0; r < rows; r++)
		for (size_t p = 0; p < K; p++)
			memcpy(w->x0 + r * in0 + p * E,
			       params + lay->emb + (size_t)context[r * K + p] * E,
			       E * sizeof(float));
	const float *x = w->x0;
	for (uint32_t l = 0; l < L; l++) {
		size_t in = l == 0 ? in0 : H;
		float *h = w->h[l];
		linear_fwd(h, x, params + lay->w[l], params + lay->b[l], rows, in, H);
		for (size_t i = 0; i < rows * H; i++)
			h[i] = tanhf(h[i]);
		x = h;
	}
	linear_fwd(w->probs, x, params + lay->wo, params + lay->bo, rows, H, MODEL_VOCAB);

	double loss = 0.0;
	const float inv_rows = 1.0f / (float)rows;
	for (size_t r = 0; r < rows; r++) {
		float *pr = w->probs + r * MODEL_VOCAB;
		float mx = pr[0];
		for (int j = 1; j < MODEL_VOCAB; j++)
			mx = pr[j] > mx ? pr[j] : mx;
		float sum = 0.0f;
		for (int j = 0; j < MODEL_VOCAB; j++) {
			pr[j] = expf(pr[j] - mx);
			sum += pr[j];
		}
		float inv = 1.0f / sum;
		for (int j = 0; j < MODEL_VOCAB; j++)
			pr[j] *= inv;
		loss -= log((double)pr[target[r]] + 1e-30);
		/* From here on probs holds dloss/dlogits of the mean loss. */
		pr[target[r]] -= 1.0f;
		for (int j = 0; j < MODEL_VOCAB; j++)
			pr[j] *= inv_rows;
	}

	/* Backward. */
	memset(grad, 0, lay->n_params * sizeof(float));
	const float *hl = w->h[L - 1];
	linear_bwd(w->dh, grad + lay->wo, grad + lay->bo, w->probs, hl,
		   params + lay->wo, rows, H, MODEL_VOCAB);
	for (int l = (int)L - 1; l >= 0; l--) {
		const float *h = w->h[l];
		for (size_t i = 0; i < rows * H; i++)
			w->dtmp[i] = w->dh[i] * (1.0f - h[i] * h[i]);
		size_t in = l == 0 ? in0 : H;
		const float *xin = l == 0 ? w->x0 : w->h[l - 1];
		linear_bwd(w->dh, grad + lay->w[l], grad + lay->b[l], w->dtmp, xin,
			   params + lay->w[l], rows, in, H);
	}
	/* w->dh now holds dloss/dx0. */
	for (size_t r = 0; r < rows; r++)
		for (size_t p = 0; p < K; p++) {
			float *ge = grad + lay->emb + (size_t)context[r * K + p] * E;
			const float *d = w->dh + r * in0 + p * E;
			for (size_t j = 0; j < E; j++)
				ge[j] += d[j];
		}
	return loss / (double)rows;
}
