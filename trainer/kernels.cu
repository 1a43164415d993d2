/* SPDX-License-Identifier: MIT */
/*
 * CUDA kernels of ckpt-train's GPU backend (see kernels.h). Plain and
 * deterministic rather than fast: a 16 x 16 shared-memory tiled matmul
 * with one output per thread, summing k from 0 up like model.c, and
 * reductions whose tree shape depends only on the sizes. All indices are
 * size_t, and every kernel loops over its work (grid-stride), so any
 * size the model accepts fits the grid limits.
 */
#include "kernels.h"

#define TILE 16
#define THREADS 256
/* Enough blocks to fill any current GPU; loops cover the rest. */
#define MAX_BLOCKS (65535u * 16u)

static unsigned blocks_for(size_t n, size_t per_block)
{
	size_t b = (n + per_block - 1) / per_block;
	if (b < 1)
		b = 1;
	return b > MAX_BLOCKS ? MAX_BLOCKS : (unsigned)b;
}

/* ---- forward -------------------------------------------------------------- */

__global__ void embed_fwd_kernel(float *x0, const float *emb, const uint8_t *ctx,
				 size_t positions, size_t E)
{
	const size_t n = positions * E;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t rp = i / E, e = i % E;
		x0[i] = emb[(size_t)ctx[rp] * E + e];
	}
}

extern "C" cudaError_t kgpu_embed_fwd(float *x0, const float *emb, const uint8_t *ctx,
				      size_t positions, size_t E, cudaStream_t stream)
{
	if (positions * E == 0)
		return cudaSuccess;
	embed_fwd_kernel<<<blocks_for(positions * E, THREADS), THREADS, 0, stream>>>(
		x0, emb, ctx, positions, E);
	return cudaGetLastError();
}

/*
 * One 16 x 16 tile of C per block iteration, one element per thread. The
 * tiles of op(A) and op(B) are staged in shared memory; a transposed
 * operand is read with the thread roles swapped so that consecutive
 * threads still read consecutive addresses. Only the k < Kd terms are
 * added, in increasing k: the same order of operations as model.c.
 */
__global__ void gemm_kernel(float *C, const float *A, const float *B, const float *bias,
			    size_t M, size_t N, size_t Kd, size_t lda, size_t ldb,
			    int trans_a, int trans_b, int act_tanh)
{
	__shared__ float As[TILE][TILE + 1]; /* As[m - m0][k - k0] */
	__shared__ float Bs[TILE][TILE + 1]; /* Bs[k - k0][n - n0] */
	const unsigned tx = threadIdx.x, ty = threadIdx.y;
	const size_t tiles_m = (M + TILE - 1) / TILE, tiles_n = (N + TILE - 1) / TILE;

	/* The loop bound is the same for every thread of the block, so
	 * the __syncthreads() inside are reached by all of them. */
	for (size_t tile = blockIdx.x; tile < tiles_m * tiles_n; tile += gridDim.x) {
		const size_t m0 = tile / tiles_n * TILE, n0 = tile % tiles_n * TILE;
		const size_t m = m0 + ty, n = n0 + tx;
		float acc = bias && n < N ? bias[n] : 0.0f;

		for (size_t k0 = 0; k0 < Kd; k0 += TILE) {
			if (!trans_a) {
				size_t am = m0 + ty, ak = k0 + tx;
				As[ty][tx] = am < M && ak < Kd ? A[am * lda + ak] : 0.0f;
			} else {
				size_t am = m0 + tx, ak = k0 + ty;
				As[tx][ty] = am < M && ak < Kd ? A[ak * lda + am] : 0.0f;
			}
			if (!trans_b) {
				size_t bk = k0 + ty, bn = n0 + tx;
				Bs[ty][tx] = bk < Kd && bn < N ? B[bk * ldb + bn] : 0.0f;
			} else {
				size_t bk = k0 + tx, bn = n0 + ty;
				Bs[tx][ty] = bk < Kd && bn < N ? B[bn * ldb + bk] : 0.0f;
			}
			__syncthreads();
			const unsigned kn = Kd - k0 < TILE ? (unsigned)(Kd - k0) : TILE;
			for (unsigned kk = 0; kk < kn; kk++)
				acc += As[ty][kk] * Bs[kk][tx];
			__syncthreads();
		}
		if (m < M && n < N)
			C[m * N + n] = act_tanh ? tanhf(acc) : acc;
	}
}

extern "C" cudaError_t kgpu_gemm(float *C, const float *A, const float *B, const float *bias,
				 size_t M, size_t N, size_t Kd, size_t lda, size_t ldb,
				 int trans_a, int trans_b, int act_tanh, cudaStream_t stream)
{
	if (M == 0 || N == 0)
		return cudaSuccess;
	size_t tiles = ((M + TILE - 1) / TILE) * ((N + TILE - 1) / TILE);
	gemm_kernel<<<blocks_for(tiles, 1), dim3(TILE, TILE), 0, stream>>>(
		C, A, B, bias, M, N, Kd, lda, ldb, trans_a, trans_b, act_tanh);
	return cudaGetLastError();
}

/* One block of 256 threads per row (the vocabulary is 256 bytes). */
__global__ void softmax_xent_kernel(float *probs, double *row_loss, const uint8_t *target,
				    size_t rows, float inv_rows)
{
	__shared__ float red[256];
	const unsigned j = threadIdx.x;

	for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
		float *pr = probs + r * 256;
		const float x = pr[j];

		red[j] = x;
		__syncthreads();
		for (unsigned s = 128; s > 0; s >>= 1) {
			if (j < s)
				red[j] = fmaxf(red[j], red[j + s]);
			__syncthreads();
		}
		const float mx = red[0];
		__syncthreads();
		const float e = expf(x - mx);
		red[j] = e;
		__syncthreads();
		for (unsigned s = 128; s > 0; s >>= 1) {
			if (j < s)
				red[j] += red[j + s];
			__syncthreads();
		}
		const float inv = 1.0f / red[0];
		__syncthreads(); /* red is rewritten for the next row */
		const float p = e * inv;
		const unsigned t = target[r];
		if (j == t)
			row_loss[r] = -log((double)p + 1e-30);
		pr[j] = (j == t ? p - 1.0f : p) * inv_rows;
	}
}

extern "C" cudaError_t kgpu_softmax_xent(float *probs, double *row_loss, const uint8_t *target,
					 size_t rows, float inv_rows, cudaStream_t stream)
{
	if (rows == 0)
		return cudaSuccess;
	softmax_xent_kernel<<<blocks_for(rows, 1), 256, 0, stream>>>(probs, row_loss, target,
								     rows, inv_rows);
	return cudaGetLastError();
}

/* Tree sum of red[0..THREADS) into red[0]; every thread must call it. */
__device__ static void block_sum_f64(double *red)
{
	const unsigned t = threadIdx.x;
	__syncthreads();
	for (unsigned s = THREADS / 2; s > 0; s >>= 1) {
		if (t < s)
			red[t] += red[t + s];
		__syncthreads();
	}
}

__global__ void sum_f64_kernel(double *out, const double *x, size_t n)
{
	__shared__ double red[THREADS];
	double acc = 0.0;
	for (size_t i = threadIdx.x; i < n; i += THREADS)
		acc += x[i];
	red[threadIdx.x] = acc;
	block_sum_f64(red);
	if (threadIdx.x == 0)
		*out = red[0];
}

extern "C" cudaError_t kgpu_sum_f64(double *out, const double *x, size_t n, cudaStream_t stream)
{
	sum_f64_kernel<<<1, THREADS, 0, stream>>>(out, x, n);
	return cudaGetLastError();
}

/* ---- backward ------------------------------------------------------------- */

__global__ void bias_grad_kernel(float *db, const float *dy, size_t rows, size_t out)
{
	for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < out;
	     j += (size_t)gridDim.x * blockDim.x) {
		float acc = 0.0f;
		for (size_t r = 0; r < rows; r++)
			acc += dy[r * out + j];
		db[j] = acc;
	}
}

extern "C" cudaError_t kgpu_bias_grad(float *db, const float *dy, size_t rows, size_t out,
				      cudaStream_t stream)
{
	if (out == 0)
		return cudaSuccess;
	bias_grad_kernel<<<blocks_for(out, THREADS), THREADS, 0, stream>>>(db, dy, rows, out);
	return cudaGetLastError();
}

__global__ void dtanh_kernel(float *d, const float *dh, const float *h, size_t n)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		d[i] = dh[i] * (1.0f - h[i] * h[i]);
}

extern "C" cudaError_t kgpu_dtanh(float *d, const float *dh, const float *h, size_t n,
				  cudaStream_t stream)
{
	if (n == 0)
		return cudaSuccess;
	dtanh_kernel<<<blocks_for(n, THREADS), THREADS, 0, stream>>>(d, dh, h, n);
	return cudaGetLastError();
}

/* One thread per (byte value, column): no two threads write one element. */
__global__ void embed_grad_kernel(float *gemb, const float *dx0, const uint32_t *off,
				  const uint32_t *pos, size_t E)
{
	const size_t n = 256 * E;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t v = i / E, e = i % E;
		float acc = 0.0f;
		for (uint32_t q = off[v]; q < off[v + 1]; q++)
			acc += dx0[(size_t)pos[q] * E + e];
		gemb[i] = acc;
	}
}

extern "C" cudaError_t kgpu_embed_grad(float *gemb, const float *dx0, const uint32_t *off,
				       const uint32_t *pos, size_t E, cudaStream_t stream)
{
	embed_grad_kernel<<<blocks_for(256 * E, THREADS), THREADS, 0, stream>>>(gemb, dx0, off,
										 pos, E);
	return cudaGetLastError();
}

/* ---- optimizer ------------------------------------------------------------ */

__global__ void scale_sumsq_kernel(float *g, size_t n, float inv_world, double *partial)
{
	__shared__ double red[THREADS];
	double acc = 0.0;
	for (size_t i = (size_t)blockIdx.x * THREADS + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * THREADS) {
		float x = g[i] * inv_world;
		g[i] = x;
		acc += (double)x * x;
	}
	red[threadIdx.x] = acc;
	block_sum_f64(red);
	if (threadIdx.x == 0)
		partial[blockIdx.x] = red[0];
}

extern "C" cudaError_t kgpu_scale_sumsq(float *g, size_t n, float inv_world, double *partial,
					double *out, cudaStream_t stream)
{
	/* The number of blocks depends on n only: a fixed tree. */
	size_t blocks = (n + THREADS - 1) / THREADS;
	if (blocks < 1)
		blocks = 1;
	if (blocks > KGPU_REDUCE_BLOCKS)
		blocks = KGPU_REDUCE_BLOCKS;
	scale_sumsq_kernel<<<(unsigned)blocks, THREADS, 0, stream>>>(g, n, inv_world, partial);
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess)
		return e;
	return kgpu_sum_f64(out, partial, blocks, stream);
}

__global__ void adamw_kernel(float *master, float *m, float *v, const float *g,
			     const uint8_t *decay, size_t n, float scale, float beta1,
			     float beta2, float eps, float bc1, float bc2, float lr, float wd)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float gi = g[i] * scale;
		float mi = beta1 * m[i] + (1.0f - beta1) * gi;
		float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
		m[i] = mi;
		v[i] = vi;
		float upd = (mi / bc1) / (sqrtf(vi / bc2) + eps);
		if (decay[i])
			upd += wd * master[i];
		master[i] -= lr * upd;
	}
}

extern "C" cudaError_t kgpu_adamw(float *master, float *m, float *v, const float *g,
				  const uint8_t *decay, size_t n, float scale, float beta1,
				  float beta2, float eps, float bc1, float bc2, float lr, float wd,
				  cudaStream_t stream)
{
	if (n == 0)
		return cudaSuccess;
	adamw_kernel<<<blocks_for(n, THREADS), THREADS, 0, stream>>>(
		master, m, v, g, decay, n, scale, beta1, beta2, eps, bc1, bc2, lr, wd);
	return cudaGetLastError();
}
