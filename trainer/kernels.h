/* SPDX-License-Identifier: MIT */
/*
 * CUDA kernels of ckpt-train's GPU backend (kernels.cu), behind C
 * launchers. Every kernel is deterministic: each output element is
 * written by one thread that sums its terms in a fixed order, and the
 * reductions are trees of a fixed shape, so that a run is bitwise
 * repeatable (and a resume bit-exact). No floating-point atomics.
 *
 * Each launcher queues its kernel on `stream` and returns
 * cudaGetLastError() (a launch error; execution errors show at the next
 * synchronisation).
 */
#ifndef CKPT_TRAIN_KERNELS_H
#define CKPT_TRAIN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Threads of the 1-D reduction kernels, and the most partial sums the
 * first stage of kgpu_scale_sumsq writes (size of its `partial`). */
#define KGPU_REDUCE_THREADS 256
#define KGPU_REDUCE_BLOCKS 1024

/* x0[(r*K+p)*E + e] = emb[ctx[r*K+p]*E + e] for rows*K positions. */
cudaError_t kgpu_embed_fwd(float *x0, const float *emb, const uint8_t *ctx,
			   size_t positions, size_t E, cudaStream_t stream);

/*
 * C[M][N] = op(A)[M][Kd] @ op(B)[Kd][N], each element summed over k from
 * 0 up, starting from bias[n] (or 0 with bias NULL); tanh applied after
 * if act_tanh. op(A)(m,k) = A[m*lda + k], or A[k*lda + m] if trans_a;
 * op(B)(k,n) = B[k*ldb + n], or B[n*ldb + k] if trans_b. C has N columns.
 */
cudaError_t kgpu_gemm(float *C, const float *A, const float *B, const float *bias,
		      size_t M, size_t N, size_t Kd, size_t lda, size_t ldb,
		      int trans_a, int trans_b, int act_tanh, cudaStream_t stream);

/*
 * Softmax cross-entropy of rows x 256 logits, in place: probs becomes
 * dloss/dlogits of the mean loss ((p - onehot) * inv_rows); row_loss[r]
 * = -log(p[target[r]] + 1e-30) in double.
 */
cudaError_t kgpu_softmax_xent(float *probs, double *row_loss, const uint8_t *target,
			      size_t rows, float inv_rows, cudaStream_t stream);

/* *out = sum of x[0..n) in double, one block, fixed order. */
cudaError_t kgpu_sum_f64(double *out, const double *x, size_t n, cudaStream_t stream);

/* db[j] = sum over r (from 0 up) of dy[r*out + j]. */
cudaError_t kgpu_bias_grad(float *db, const float *dy, size_t rows, size_t out,
			   cudaStream_t stream);

/* d[i] = dh[i] * (1 - h[i]*h[i]) (backward through tanh). */
cudaError_t kgpu_dtanh(float *d, const float *dh, const float *h, size_t n,
		       cudaStream_t stream);

/*
 * Embedding gradient: gemb[v*E + e] = sum over q in [off[v], off[v+1]) of
 * dx0[pos[q]*E + e], where pos lists, per byte value v, the positions
 * r*K+p whose context byte is v, in increasing order (the CPU's order).
 */
cudaError_t kgpu_embed_grad(float *gemb, const float *dx0, const uint32_t *off,
			    const uint32_t *pos, size_t E, cudaStream_t stream);

/*
 * g[i] *= inv_world for i < n, and *out = sum of g[i]^2 after it in
 * double (two stages through partial[KGPU_REDUCE_BLOCKS], fixed shape).
 */
cudaError_t kgpu_scale_sumsq(float *g, size_t n, float inv_world, double *partial,
			     double *out, cudaStream_t stream);

/* AdamW on n elements, the formula of train.c's CPU path. */
cudaError_t kgpu_adamw(float *master, float *m, float *v, const float *g,
		       const uint8_t *decay, size_t n, float scale, float beta1,
		       float beta2, float eps, float bc1, float bc2, float lr, float wd,
		       cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
