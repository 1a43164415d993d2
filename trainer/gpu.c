/* SPDX-License-Identifier: MIT */
/*
 * The GPU backend of ckpt-train (--device cuda; see gpu.h).
 *
 * Layout. One MPI rank per GPU (NCCL does not allow two ranks of a
 * communicator on one device): device = local rank on the node
 * (MPI_COMM_TYPE_SHARED), and more ranks on a node than devices is an
 * error. Parameters, gradients, the fp32 master weights, the AdamW
 * moments and all activations live on the device; the data pipeline
 * stays on the host (train.c's make_batch), and each step uploads the
 * context and target bytes and, for the embedding gradient, the
 * positions of each byte value (a counting sort, built on the host).
 *
 * Same model, same state. The flat parameter vector, its initialisation
 * (model_init on the host, then copied), the ZeRO-1 slices (rank r owns
 * [N*r/W, N*(r+1)/W)), the AdamW formula, the clipping and the learning
 * rate schedule are those of the CPU variant, so checkpoints ("master",
 * "adam_m", "adam_v" and the blob) are interchangeable between the
 * variants at the same world size. Gradients reach their owner with one
 * ncclReduce per slice (root = owner) in a group, and the updated slices
 * go back with one ncclBroadcast per slice: W calls per collective,
 * cheap at the world sizes this trainer runs at, and the slices need not
 * be equal as ncclReduceScatter / ncclAllGather would want.
 *
 * Deterministic. The kernels (kernels.cu) sum in a fixed order and use no
 * floating-point atomics, and NCCL's reductions are deterministic for a
 * fixed world size and topology, so a GPU run is bitwise repeatable and a
 * resume is bit-exact, as on the CPU. The GPU run is not bitwise equal
 * to the CPU run: fused multiply-adds, CUDA's expf/tanhf/log and the
 * different order of the softmax and norm sums change the last bits, and
 * training amplifies them; tests/trainer/gpu-loss-agrees.sh bounds the
 * difference of the loss curves.
 *
 * Checkpoints. libckpt's shared arena is registered with cudaHostRegister
 * after each connect, so a save reserves its tensors in the arena
 * (ckpt_save_reserve) and copies the device state straight into it with
 * cudaMemcpyAsync: the stall of a save is the device-to-host copy. A
 * reconnect inside libckpt maps a new arena, which may land at the old
 * address; the mapping is therefore identified by its inode in
 * /proc/self/maps, not only by its address, before each save. Where
 * cudaHostRegister fails (locked-memory limits) the copies go from
 * pageable memory, correct but slower, and the trainer says so once.
 *
 * One binary. ckpt-train is linked against libcudart and libnccl when
 * built with -Dgpu=enabled (rpath to the CUDA libraries), and --device
 * selects the backend at run time (default cpu): on a machine with the
 * CUDA libraries but no GPU the CPU variant runs as before and --device
 * cuda fails cleanly ("no CUDA device: ..."). Only the runtime and NCCL
 * are linked, never libcuda: the runtime loads the driver itself, and
 * finds none on a machine without a GPU.
 */
#include "gpu.h"

#include <errno.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "kernels.h"

struct gpu {
	int rank, world, device, ndev;
	struct model_config cfg;
	struct model_layout lay;
	size_t rows, positions, N, lo, len, max_len;
	size_t *slice_lo, *slice_len;   /* per rank */
	cudaStream_t stream;
	ncclComm_t comm;
	/* device memory */
	float *params, *grad;           /* full vector */
	float *master, *m, *v, *gsum;   /* owned slice (gsum: max_len) */
	uint8_t *decay, *ctx, *tgt;
	uint32_t *off, *pos;            /* embedding gradient: positions per byte */
	float *x0, *h[MODEL_MAX_LAYERS], *probs, *dh, *dtmp;
	double *row_loss, *partial, *out; /* out[0]: loss sum, out[1]: sum of squares */
	/* pinned host staging */
	uint8_t *h_ctx, *h_tgt;
	uint32_t *h_off, *h_pos;
	double *h_out;
	/* ckpt's arena, as registered */
	void *arena;
	size_t arena_bytes;
	uint64_t arena_id;
	int arena_pinned, arena_noted;
	char note[320];
	char desc[256];
	char err[512];
};

static int cu(struct gpu *g, cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	snprintf(g->err, sizeof(g->err), "%s: %s (CUDA error %d)", what, cudaGetErrorString(e),
		 (int)e);
	return -EIO;
}

static int nc(struct gpu *g, ncclResult_t e, const char *what)
{
	if (e == ncclSuccess)
		return 0;
	const char *last = g->comm ? ncclGetLastError(g->comm) : NULL;
	snprintf(g->err, sizeof(g->err), "%s: %s%s%s", what, ncclGetErrorString(e),
		 last && *last ? ": " : "", last ? last : "");
	return -EIO;
}

const char *gpu_error(const struct gpu *g)
{
	return g ? g->err : "";
}

const char *gpu_describe(const struct gpu *g)
{
	return g ? g->desc : "";
}

/* a * b * c bytes, or 0 on overflow. */
static size_t mul3(size_t a, size_t b, size_t c)
{
	if (a && b > SIZE_MAX / a)
		return 0;
	if (a * b != 0 && c > SIZE_MAX / (a * b))
		return 0;
	return a * b * c;
}

static int dev_alloc(struct gpu *g, void **p, size_t n, size_t elem)
{
	size_t bytes = mul3(n ? n : 1, elem, 1);
	if (!bytes) {
		snprintf(g->err, sizeof(g->err), "device buffer of %zu x %zu bytes overflows", n, elem);
		return -ENOMEM;
	}
	return cu(g, cudaMalloc(p, bytes), "cudaMalloc");
}

static int host_alloc(struct gpu *g, void **p, size_t n, size_t elem)
{
	size_t bytes = mul3(n ? n : 1, elem, 1);
	if (!bytes) {
		snprintf(g->err, sizeof(g->err), "host buffer of %zu x %zu bytes overflows", n, elem);
		return -ENOMEM;
	}
	return cu(g, cudaMallocHost(p, bytes), "cudaMallocHost");
}

/* The node-local rank and the number of ranks on this node. */
static void local_rank(int *lrank, int *lsize)
{
	MPI_Comm local;
	MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
	MPI_Comm_rank(local, lrank);
	MPI_Comm_size(local, lsize);
	MPI_Comm_free(&local);
}

/* Choose this rank's device; 0 or -ENODEV / -EINVAL with why set. */
static int pick_device(struct gpu *g, char *why, size_t whylen)
{
	int lrank, lsize, n = 0; /* left untouched when there is no driver */
	cudaError_t e = cudaGetDeviceCount(&n);

	local_rank(&lrank, &lsize);
	if (e != cudaSuccess) {
		snprintf(why, whylen, "no CUDA device: cudaGetDeviceCount: %s (CUDA error %d)",
			 cudaGetErrorString(e), (int)e);
		return -ENODEV;
	}
	if (n <= 0) {
		snprintf(why, whylen, "no CUDA device: cudaGetDeviceCount found none");
		return -ENODEV;
	}
	if (lsize > n) {
		snprintf(why, whylen,
			 "%d ranks on this node but %d CUDA device%s: NCCL needs a GPU per rank "
			 "(run at most %d ranks per node with --device cuda)",
			 lsize, n, n == 1 ? "" : "s", n);
		return -EINVAL;
	}
	g->device = lrank;
	g->ndev = n;
	return 0;
}

static int init_nccl(struct gpu *g)
{
	struct {
		int ok;
		ncclUniqueId id;
	} boot;
	int r = 0;

	memset(&boot, 0, sizeof(boot));
	if (g->rank == 0) {
		r = nc(g, ncclGetUniqueId(&boot.id), "ncclGetUniqueId");
		boot.ok = r == 0;
	}
	/* Sent even on failure, so that no rank waits for it forever. */
	MPI_Bcast(&boot, (int)sizeof(boot), MPI_BYTE, 0, MPI_COMM_WORLD);
	if (!boot.ok) {
		if (g->rank != 0)
			snprintf(g->err, sizeof(g->err), "ncclGetUniqueId failed on rank 0");
		return -EIO;
	}
	return nc(g, ncclCommInitRank(&g->comm, g->world, boot.id, g->rank), "ncclCommInitRank");
}

static int alloc_all(struct gpu *g)
{
	const size_t R = g->rows, K = g->cfg.ctx, E = g->cfg.embd, H = g->cfg.hidden;
	const size_t in0 = K * E, wide = in0 > H ? in0 : H;
	int r = 0;

	r = r ? r : dev_alloc(g, (void **)&g->params, g->N, sizeof(float));
	r = r ? r : dev_alloc(g, (void **)&g->grad, g->N, sizeof(float));
	r = r ? r : dev_alloc(g, (void **)&g->master, g->len, sizeof(float));
	r = r ? r : dev_alloc(g, (void **)&g->m, g->len, sizeof(float));
	r = r ? r : dev_alloc(g, (void **)&g->v, g->len, sizeof(float));
	r = r ? r : dev_alloc(g, (void **)&g->gsum, g->max_len, sizeof(float));
	r = r ? r : dev_alloc(g, (void **)&g->decay, g->len, 1);
	r = r ? r : dev_alloc(g, (void **)&g->ctx, g->positions, 1);
	r = r ? r : dev_alloc(g, (void **)&g->tgt, R, 1);
	r = r ? r : dev_alloc(g, (void **)&g->off, MODEL_VOCAB + 1, sizeof(uint32_t));
	r = r ? r : dev_alloc(g, (void **)&g->pos, g->positions, sizeof(uint32_t));
	r = r ? r : dev_alloc(g, (void **)&g->x0, mul3(R, in0, 1), sizeof(float));
	for (uint32_t l = 0; l < g->cfg.layers && !r; l++)
		r = dev_alloc(g, (void **)&g->h[l], mul3(R, H, 1), sizeof(float));
	r = r ? r : dev_alloc(g, (void **)&g->probs, mul3(R, MODEL_VOCAB, 1), sizeof(float));
	r = r ? r : dev_alloc(g, (void **)&g->dh, mul3(R, wide, 1), sizeof(float));
	r = r ? r : dev_alloc(g, (void **)&g->dtmp, mul3(R, wide, 1), sizeof(float));
	r = r ? r : dev_alloc(g, (void **)&g->row_loss, R, sizeof(double));
	r = r ? r : dev_alloc(g, (void **)&g->partial, KGPU_REDUCE_BLOCKS, sizeof(double));
	r = r ? r : dev_alloc(g, (void **)&g->out, 2, sizeof(double));
	r = r ? r : host_alloc(g, (void **)&g->h_ctx, g->positions, 1);
	r = r ? r : host_alloc(g, (void **)&g->h_tgt, R, 1);
	r = r ? r : host_alloc(g, (void **)&g->h_off, MODEL_VOCAB + 1, sizeof(uint32_t));
	r = r ? r : host_alloc(g, (void **)&g->h_pos, g->positions, sizeof(uint32_t));
	r = r ? r : host_alloc(g, (void **)&g->h_out, 2, sizeof(double));
	return r;
}

static int upload_initial(struct gpu *g, const float *params)
{
	uint8_t *decay = malloc(g->len ? g->len : 1);
	int r;

	if (!decay) {
		snprintf(g->err, sizeof(g->err), "out of host memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < g->len; i++)
		decay[i] = (uint8_t)model_decays(&g->lay, g->lo + i);
	r = cu(g, cudaMemcpy(g->params, params, g->N * sizeof(float), cudaMemcpyHostToDevice),
	       "cudaMemcpy(params)");
	r = r ? r : cu(g, cudaMemcpy(g->master, g->params + g->lo, g->len * sizeof(float),
				     cudaMemcpyDeviceToDevice), "cudaMemcpy(master)");
	r = r ? r : cu(g, cudaMemset(g->m, 0, g->len * sizeof(float)), "cudaMemset(adam_m)");
	r = r ? r : cu(g, cudaMemset(g->v, 0, g->len * sizeof(float)), "cudaMemset(adam_v)");
	r = r ? r : cu(g, cudaMemcpy(g->decay, decay, g->len, cudaMemcpyHostToDevice),
		       "cudaMemcpy(decay)");
	free(decay);
	return r;
}

int gpu_open(const struct gpu_setup *s, struct gpu **out, char *why, size_t whylen)
{
	struct gpu *g = calloc(1, sizeof(*g));
	int r, worst;

	*out = NULL;
	if (!g) {
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	g->rank = s->rank;
	g->world = s->world;
	g->cfg = *s->model;
	g->lay = *s->lay;
	g->rows = s->rows;
	g->N = s->lay->n_params;
	g->positions = mul3(s->rows, s->model->ctx, 1);

	r = pick_device(g, why, whylen);
	if (r == 0 && (g->positions == 0 || g->positions > UINT32_MAX)) {
		snprintf(why, whylen, "%zu context positions per step: the GPU path indexes them "
			 "with 32 bits", g->positions);
		r = -EINVAL;
	}
	/* Every rank fails with the same code, so that all exit alike. */
	MPI_Allreduce(&r, &worst, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	if (worst < 0) {
		if (r == 0)
			snprintf(why, whylen, "another rank cannot use a CUDA device");
		free(g);
		return worst;
	}

	g->slice_lo = calloc(2 * (size_t)g->world, sizeof(size_t));
	if (!g->slice_lo) {
		snprintf(why, whylen, "out of memory");
		free(g);
		return -ENOMEM;
	}
	g->slice_len = g->slice_lo + g->world;
	for (int i = 0; i < g->world; i++) {
		size_t lo = g->N * (size_t)i / (size_t)g->world;
		size_t hi = g->N * (size_t)(i + 1) / (size_t)g->world;
		g->slice_lo[i] = lo;
		g->slice_len[i] = hi - lo;
		if (hi - lo > g->max_len)
			g->max_len = hi - lo;
	}
	g->lo = g->slice_lo[g->rank];
	g->len = g->slice_len[g->rank];

	struct cudaDeviceProp prop;
	r = cu(g, cudaSetDevice(g->device), "cudaSetDevice");
	r = r ? r : cu(g, cudaGetDeviceProperties(&prop, g->device), "cudaGetDeviceProperties");
	if (r == 0)
		snprintf(g->desc, sizeof(g->desc), "%s (device %d of %d)", prop.name, g->device,
			 g->ndev);
	r = r ? r : cu(g, cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking),
		       "cudaStreamCreate");
	r = r ? r : alloc_all(g);
	r = r ? r : upload_initial(g, s->params);
	r = r ? r : init_nccl(g);
	if (r < 0) {
		snprintf(why, whylen, "%s", g->err);
		gpu_close(g);
		return r;
	}
	*out = g;
	return 0;
}

void gpu_close(struct gpu *g)
{
	if (!g)
		return;
	gpu_arena_detach(g);
	if (g->stream)
		cudaStreamSynchronize(g->stream);
	if (g->comm)
		ncclCommDestroy(g->comm);
	cudaFree(g->params);
	cudaFree(g->grad);
	cudaFree(g->master);
	cudaFree(g->m);
	cudaFree(g->v);
	cudaFree(g->gsum);
	cudaFree(g->decay);
	cudaFree(g->ctx);
	cudaFree(g->tgt);
	cudaFree(g->off);
	cudaFree(g->pos);
	cudaFree(g->x0);
	for (int l = 0; l < MODEL_MAX_LAYERS; l++)
		cudaFree(g->h[l]);
	cudaFree(g->probs);
	cudaFree(g->dh);
	cudaFree(g->dtmp);
	cudaFree(g->row_loss);
	cudaFree(g->partial);
	cudaFree(g->out);
	cudaFreeHost(g->h_ctx);
	cudaFreeHost(g->h_tgt);
	cudaFreeHost(g->h_off);
	cudaFreeHost(g->h_pos);
	cudaFreeHost(g->h_out);
	if (g->stream)
		cudaStreamDestroy(g->stream);
	free(g->slice_lo);
	free(g);
}

/*
 * Backward of y = x @ W + b given dy [rows][out]: dW = x^T dy, db =
 * colsum(dy), dx = dy @ W^T (model.c's linear_bwd; every element is
 * written, so grad needs no clearing).
 */
static int linear_bwd(struct gpu *g, float *dx, float *dW, float *db, const float *dy,
		      const float *x, const float *W, size_t in, size_t out)
{
	const size_t R = g->rows;
	int r = cu(g, kgpu_gemm(dW, x, dy, NULL, in, out, R, in, out, 1, 0, 0, g->stream),
		   "gemm dW");
	r = r ? r : cu(g, kgpu_bias_grad(db, dy, R, out, g->stream), "bias_grad");
	r = r ? r : cu(g, kgpu_gemm(dx, dy, W, NULL, R, in, out, out, out, 0, 1, 0, g->stream),
		       "gemm dx");
	return r;
}

/* Stage the step's bytes and the per-byte position lists (counting sort:
 * positions in increasing order within each byte value). */
static void stage_batch(struct gpu *g, const uint8_t *context, const uint8_t *target)
{
	uint32_t cursor[MODEL_VOCAB];

	memcpy(g->h_ctx, context, g->positions);
	memcpy(g->h_tgt, target, g->rows);
	memset(g->h_off, 0, (MODEL_VOCAB + 1) * sizeof(uint32_t));
	for (size_t q = 0; q < g->positions; q++)
		g->h_off[context[q] + 1]++;
	for (int v = 0; v < MODEL_VOCAB; v++) {
		g->h_off[v + 1] += g->h_off[v];
		cursor[v] = g->h_off[v];
	}
	for (size_t q = 0; q < g->positions; q++)
		g->h_pos[cursor[context[q]]++] = (uint32_t)q;
}

int gpu_step(struct gpu *g, const uint8_t *context, const uint8_t *target, double *loss,
	     double *sumsq)
{
	const size_t R = g->rows, E = g->cfg.embd, H = g->cfg.hidden;
	const size_t in0 = (size_t)g->cfg.ctx * E;
	const uint32_t L = g->cfg.layers;
	const struct model_layout *lay = &g->lay;
	float *P = g->params, *G = g->grad;
	cudaStream_t st = g->stream;
	int r;

	/* The previous step ended with a stream synchronisation: the
	 * pinned staging buffers are free to overwrite. */
	stage_batch(g, context, target);
	r = cu(g, cudaMemcpyAsync(g->ctx, g->h_ctx, g->positions, cudaMemcpyHostToDevice, st),
	       "cudaMemcpyAsync(context)");
	r = r ? r : cu(g, cudaMemcpyAsync(g->tgt, g->h_tgt, R, cudaMemcpyHostToDevice, st),
		       "cudaMemcpyAsync(target)");
	r = r ? r : cu(g, cudaMemcpyAsync(g->off, g->h_off, (MODEL_VOCAB + 1) * sizeof(uint32_t),
					  cudaMemcpyHostToDevice, st), "cudaMemcpyAsync(offsets)");
	r = r ? r : cu(g, cudaMemcpyAsync(g->pos, g->h_pos, g->positions * sizeof(uint32_t),
					  cudaMemcpyHostToDevice, st), "cudaMemcpyAsync(positions)");

	/* Forward. */
	r = r ? r : cu(g, kgpu_embed_fwd(g->x0, P + lay->emb, g->ctx, g->positions, E, st),
		       "embed_fwd");
	const float *x = g->x0;
	for (uint32_t l = 0; l < L && !r; l++) {
		size_t in = l == 0 ? in0 : H;
		r = cu(g, kgpu_gemm(g->h[l], x, P + lay->w[l], P + lay->b[l], R, H, in, in, H,
				    0, 0, 1, st), "gemm forward");
		x = g->h[l];
	}
	r = r ? r : cu(g, kgpu_gemm(g->probs, x, P + lay->wo, P + lay->bo, R, MODEL_VOCAB, H, H,
				    MODEL_VOCAB, 0, 0, 0, st), "gemm logits");
	r = r ? r : cu(g, kgpu_softmax_xent(g->probs, g->row_loss, g->tgt, R, 1.0f / (float)R, st),
		       "softmax_xent");
	r = r ? r : cu(g, kgpu_sum_f64(&g->out[0], g->row_loss, R, st), "sum loss");

	/* Backward. */
	r = r ? r : linear_bwd(g, g->dh, G + lay->wo, G + lay->bo, g->probs, g->h[L - 1],
			       P + lay->wo, H, MODEL_VOCAB);
	for (int l = (int)L - 1; l >= 0 && !r; l--) {
		size_t in = l == 0 ? in0 : H;
		const float *xin = l == 0 ? g->x0 : g->h[l - 1];
		r = cu(g, kgpu_dtanh(g->dtmp, g->dh, g->h[l], R * H, st), "dtanh");
		r = r ? r : linear_bwd(g, g->dh, G + lay->w[l], G + lay->b[l], g->dtmp, xin,
				       P + lay->w[l], in, H);
	}
	/* g->dh now holds dloss/dx0. */
	r = r ? r : cu(g, kgpu_embed_grad(G + lay->emb, g->dh, g->off, g->pos, E, st),
		       "embed_grad");
	if (r)
		return r;

	/* Each slice's gradients summed on its owner. */
	r = nc(g, ncclGroupStart(), "ncclGroupStart");
	for (int i = 0; i < g->world && !r; i++)
		r = nc(g, ncclReduce(G + g->slice_lo[i], g->gsum, g->slice_len[i], ncclFloat,
				     ncclSum, i, g->comm, st), "ncclReduce");
	int r2 = nc(g, ncclGroupEnd(), "ncclGroupEnd");
	r = r ? r : r2;
	r = r ? r : cu(g, kgpu_scale_sumsq(g->gsum, g->len, 1.0f / (float)g->world, g->partial,
					   &g->out[1], st), "scale_sumsq");
	r = r ? r : cu(g, cudaMemcpyAsync(g->h_out, g->out, 2 * sizeof(double),
					  cudaMemcpyDeviceToHost, st), "cudaMemcpyAsync(loss)");
	r = r ? r : cu(g, cudaStreamSynchronize(st), "training step");
	if (r)
		return r;
	*loss = g->h_out[0] / (double)R;
	*sumsq = g->h_out[1];
	return 0;
}

static int gather(struct gpu *g)
{
	int r = nc(g, ncclGroupStart(), "ncclGroupStart");
	for (int i = 0; i < g->world && !r; i++) {
		float *dst = g->params + g->slice_lo[i];
		r = nc(g, ncclBroadcast(i == g->rank ? g->master : dst, dst, g->slice_len[i],
					ncclFloat, i, g->comm, g->stream), "ncclBroadcast");
	}
	int r2 = nc(g, ncclGroupEnd(), "ncclGroupEnd");
	return r ? r : r2;
}

int gpu_update(struct gpu *g, const struct gpu_adamw *a)
{
	int r = cu(g, kgpu_adamw(g->master, g->m, g->v, g->gsum, g->decay, g->len, a->scale,
				 a->beta1, a->beta2, a->eps, a->bc1, a->bc2, a->lr, a->wd, g->stream),
		   "adamw");
	/* No wait: the next step, save or download queues behind it. */
	return r ? r : gather(g);
}

int gpu_gather_params(struct gpu *g)
{
	int r = gather(g);
	return r ? r : cu(g, cudaStreamSynchronize(g->stream), "gather parameters");
}

static float *tensor_ptr(struct gpu *g, enum gpu_tensor which)
{
	return which == GPU_MASTER ? g->master : which == GPU_ADAM_M ? g->m : g->v;
}

int gpu_upload(struct gpu *g, enum gpu_tensor which, const void *src, size_t bytes)
{
	if (bytes != g->len * sizeof(float)) {
		snprintf(g->err, sizeof(g->err), "tensor of %zu bytes, expected %zu", bytes,
			 g->len * sizeof(float));
		return -EINVAL;
	}
	int r = cu(g, cudaMemcpyAsync(tensor_ptr(g, which), src, bytes, cudaMemcpyHostToDevice,
				      g->stream), "cudaMemcpyAsync(restore)");
	return r ? r : cu(g, cudaStreamSynchronize(g->stream), "restore copy");
}

int gpu_download(struct gpu *g, float *params, float *master, float *m, float *v)
{
	const size_t n = g->len * sizeof(float);
	int r = 0;
	if (params)
		r = cu(g, cudaMemcpyAsync(params, g->params, g->N * sizeof(float),
					  cudaMemcpyDeviceToHost, g->stream), "cudaMemcpyAsync(params)");
	r = r ? r : cu(g, cudaMemcpyAsync(master, g->master, n, cudaMemcpyDeviceToHost, g->stream),
		       "cudaMemcpyAsync(master)");
	r = r ? r : cu(g, cudaMemcpyAsync(m, g->m, n, cudaMemcpyDeviceToHost, g->stream),
		       "cudaMemcpyAsync(adam_m)");
	r = r ? r : cu(g, cudaMemcpyAsync(v, g->v, n, cudaMemcpyDeviceToHost, g->stream),
		       "cudaMemcpyAsync(adam_v)");
	return r ? r : cu(g, cudaStreamSynchronize(g->stream), "download");
}

int gpu_save_to(struct gpu *g, void *master, void *m, void *v)
{
	/* Behind the step's AdamW and gather on the same stream: the copy
	 * sees the state of this step. */
	return gpu_download(g, NULL, master, m, v);
}

/*
 * Which mapping holds addr: its inode (the arena is a memfd, a new one on
 * every connect), or 0 if /proc/self/maps cannot tell. Read before each
 * save; a few hundred lines even in an MPI + CUDA process.
 */
static uint64_t mapping_id(const void *addr)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	uint64_t id = 0;
	uintptr_t a = (uintptr_t)addr;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		uintptr_t lo, hi;
		unsigned long long ino;
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %*s %*s %*s %llu", &lo, &hi, &ino) == 3 &&
		    a >= lo && a < hi) {
			id = ino;
			break;
		}
		/* Skip the rest of an overlong line. */
		while (!strchr(line, '\n') && fgets(line, sizeof(line), f))
			;
	}
	fclose(f);
	return id;
}

void gpu_arena_detach(struct gpu *g)
{
	if (!g)
		return;
	if (g->arena_pinned) {
		/* The mapping may already be gone (libckpt drops the arena
		 * when ckptd goes away); the driver still holds the pages
		 * and releases them here. Errors are not sticky: cleared. */
		if (cudaHostUnregister(g->arena) != cudaSuccess)
			(void)cudaGetLastError();
	}
	g->arena = NULL;
	g->arena_bytes = 0;
	g->arena_id = 0;
	g->arena_pinned = 0;
}

int gpu_arena_attach(struct gpu *g, ckpt_ctx *ck, const char **note)
{
	size_t bytes = 0;
	void *base = ck ? ckpt_arena(ck, &bytes) : NULL;
	uint64_t id = base ? mapping_id(base) : 0;

	*note = NULL;
	if (base && base == g->arena && bytes == g->arena_bytes && id == g->arena_id && id)
		return 0;
	gpu_arena_detach(g);
	if (!base)
		return 0;
	g->arena = base;
	g->arena_bytes = bytes;
	g->arena_id = id;
	cudaError_t e = cudaHostRegister(base, bytes, cudaHostRegisterDefault);
	if (e == cudaSuccess) {
		g->arena_pinned = 1;
		return 0;
	}
	(void)cudaGetLastError();
	if (!g->arena_noted) {
		g->arena_noted = 1;
		snprintf(g->note, sizeof(g->note),
			 "cudaHostRegister of ckpt's %zu-byte arena failed (%s): saves copy from "
			 "pageable memory, slower (locked-memory limit? see ulimit -l)",
			 bytes, cudaGetErrorString(e));
		*note = g->note;
	}
	return 0;
}
