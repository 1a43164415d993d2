/* SPDX-License-Identifier: MIT */
/*
 * ckpt-plan's formulas (ckpt-plan.h; docs/PLANNING.md derives them).
 *
 * Two rules are ckptd's, repeated here because the tools never include the
 * daemon: a staging slot is the largest save plus 1/32 (at least 8 MiB),
 * rounded up to 2 MiB (ckptd/arena.c), and a partner copy is rounded up
 * to 2 MiB from 2 MiB on (ckptd/partner.c). The trainer test compares
 * these with what a real ckptd hands out, so a change there fails it.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ckpt-plan.h"

#define ALIGN 4096u
#define MIB (1ull << 20)

static uint64_t align_up(uint64_t n, uint64_t a)
{
	return (n + a - 1) / a * a;
}

static uint64_t div_ceil(uint64_t n, uint64_t d)
{
	return d ? (n + d - 1) / d : 0;
}

/* ---- the model ----------------------------------------------------------- */

uint64_t plan_vocab_padded(const struct plan_model *m, uint32_t tp)
{
	return align_up(m->vocab, 128ull * (tp ? tp : 1));
}

uint64_t plan_params_layer(const struct plan_model *m)
{
	uint64_t h = m->hidden, head_dim = m->hidden / m->heads;
	uint64_t q = (uint64_t)m->heads * head_dim, kv = (uint64_t)m->kv_heads * head_dim;
	uint64_t attention = h * q + 2 * h * kv + q * h;
	uint64_t mlp = 3 * h * m->ffn; /* SwiGLU: gate, up, down */
	return attention + mlp + 2 * h; /* two RMSNorm weights */
}

/* Transformer layers and the final norm; the embeddings apart. */
static uint64_t params_transformer(const struct plan_model *m)
{
	return (uint64_t)m->layers * plan_params_layer(m) + m->hidden;
}

uint64_t plan_params_total(const struct plan_model *m, uint32_t tp)
{
	uint64_t emb = plan_vocab_padded(m, tp) * m->hidden;
	return params_transformer(m) + (m->tied ? 1 : 2) * emb;
}

int plan_layout_check(const struct plan_model *m, const struct plan_train *t,
		      const struct plan_machine *mc, const struct plan_layout *l, const char **why)
{
	*why = NULL;
	if (!l->tp || !l->pp || !l->dp || !l->cp)
		*why = "every degree must be at least 1";
	else if (m->heads % l->tp || m->kv_heads % l->tp)
		*why = "tp must divide the attention heads and the kv heads";
	else if (l->tp > mc->gpus_per_node || mc->gpus_per_node % l->tp)
		*why = "tp must divide the GPUs of a node (tensor parallelism stays inside a node)";
	else if (m->layers % l->pp)
		*why = "pp must divide the layers";
	else if (t->vpp > 1 && (m->layers / l->pp) % t->vpp)
		*why = "vpp must divide the layers of a pipeline stage";
	else if (t->vpp > 1 && l->pp < 2)
		*why = "vpp needs pp of at least 2";
	else if (l->cp > 1 && m->seq % (2 * l->cp))
		*why = "2 x cp must divide the sequence length";
	else if (t->global_batch % ((uint64_t)t->micro_batch * l->dp))
		*why = "micro-batch x dp must divide the global batch";
	else if (t->vpp > 1 && (t->global_batch / ((uint64_t)t->micro_batch * l->dp)) % l->pp)
		*why = "with vpp the micro-batches per step must be a multiple of pp";
	return *why ? -EINVAL : 0;
}

/* Bytes of activations one transformer layer keeps for one micro-batch,
 * on one GPU before the division by tp (sequence parallelism assumed, as
 * Megatron's formula does). */
static double layer_activations(const struct plan_model *m, const struct plan_train *t,
				double s)
{
	double b = t->micro_batch, h = m->hidden;
	/* Korthikanti et al., Table 2, with the MLP term for any ffn width:
	 * sbh(34) for ffn = 4h; selective recompute (or flash attention)
	 * drops the 5as/h score term. */
	double selective = s * b * h * (18.0 + 4.0 * m->ffn / h);
	switch (t->recompute) {
	case PLAN_RECOMPUTE_NONE:
		return selective + 5.0 * m->heads * s * s * b;
	case PLAN_RECOMPUTE_FULL:
		return 2.0 * s * b * h; /* the layer's input only */
	default:
		return selective;
	}
}

void plan_memory_of(const struct plan_model *m, const struct plan_train *t,
		    const struct plan_layout *l, struct plan_memory *out)
{
	memset(out, 0, sizeof(*out));
	uint64_t emb = plan_vocab_padded(m, l->tp) * m->hidden;
	uint64_t layers = params_transformer(m) / l->pp;
	/* Megatron: the most loaded shard holds its layers and an embedding;
	 * without pipelining the one stage holds both embeddings. */
	uint64_t stage = layers + emb;
	if (!m->tied && l->pp == 1)
		stage += emb;
	out->params_total = plan_params_total(m, l->tp);
	out->params_stage = div_ceil(stage, l->tp);

	double p = (double)out->params_stage;
	uint32_t shards = t->distributed_optimizer ? l->dp * l->cp : 1;
	out->weights = p * t->weight_bytes;
	out->grads = p * t->grad_bytes;
	out->optim = p * t->optim_bytes / shards;

	uint64_t mb = (uint64_t)t->micro_batch * l->dp;
	out->microbatches = mb ? (uint32_t)(t->global_batch / mb) : 0;
	double s = (double)m->seq / l->cp, b = t->micro_batch, h = m->hidden;
	/* The first stage holds L/pp layers for each micro-batch in flight:
	 * pp of them under 1F1B, fewer when a step has fewer; interleaving
	 * adds (pp-1)/(pp*vpp) of a stage's worth. */
	double per_layer = layer_activations(m, t, s);
	double layer_share = (double)m->layers / l->pp;
	double in_flight;
	if (t->vpp > 1) {
		double penalty = 1.0 + (double)(l->pp - 1) / ((double)l->pp * t->vpp);
		in_flight = penalty * l->pp;
		out->in_flight = (uint32_t)ceil(in_flight);
	} else {
		in_flight = out->microbatches < l->pp ? out->microbatches : l->pp;
		out->in_flight = (uint32_t)in_flight;
	}
	double act = per_layer * layer_share * in_flight;
	if (t->recompute == PLAN_RECOMPUTE_FULL)
		act += layer_activations(m, &(struct plan_train){ .micro_batch = t->micro_batch,
				.recompute = PLAN_RECOMPUTE_SELECTIVE }, s);
	/* Embedding input (token ids, 8 bytes) and its dropout mask, per
	 * micro-batch in flight. */
	act += (8.0 * s * b + s * b * h) * in_flight;
	/* Without pipelining the one stage also keeps the output layer's
	 * input and the logits for the loss. */
	if (l->pp == 1)
		act += 4.0 * s * b * h * (1.0 + (double)plan_vocab_padded(m, l->tp) / h);
	out->activations = act / l->tp;
	out->total = out->weights + out->grads + out->optim + out->activations;
	uint32_t m_eff = out->microbatches * (t->vpp > 1 ? t->vpp : 1);
	out->bubble = l->pp > 1 ? (double)(l->pp - 1) / (double)(m_eff + l->pp - 1) : 0.0;
}

/* ---- ckptd's side ----------------------------------------------------- */

uint64_t plan_slot_bytes(uint64_t max_save_bytes)
{
	uint64_t slack = max_save_bytes / 32;
	if (slack < 8 * MIB)
		slack = 8 * MIB;
	return align_up(max_save_bytes + slack, 2 * MIB);
}

uint64_t plan_partner_copy_bytes(uint64_t need)
{
	return need >= 2 * MIB ? align_up(need, 2 * MIB) : need;
}

void plan_ckpt_of(const struct plan_model *m, const struct plan_train *t,
		  const struct plan_machine *mc, const struct plan_ckptd *cd,
		  const struct plan_layout *l, const struct plan_memory *mem, struct plan_ckpt *out)
{
	memset(out, 0, sizeof(*out));
	uint32_t per_param = t->weight_bytes + t->optim_bytes;
	uint32_t ranks = mc->gpus_per_node;
	/* Each (tp, pp) shard's weights and optimizer state are saved once,
	 * spread over its dp x cp replicas (a fully parallel save). */
	out->state_total = (double)mem->params_total * per_param;
	out->shard_rank = align_up(div_ceil(mem->params_stage * per_param,
					    (uint64_t)l->dp * l->cp), ALIGN);
	out->shard_node = out->shard_rank * ranks;
	out->state_node_mean = out->state_total * ranks /
			       ((double)l->tp * l->pp * l->cp * l->dp);
	/* A save is its tensors, each padded to 4 KiB: a page per tensor
	 * at most, a few hundred tensors per rank. */
	out->slot_bytes = plan_slot_bytes(out->shard_rank + 1024 * ALIGN);
	out->staging_node = (uint64_t)ranks * cd->slots_per_rank * out->slot_bytes;
	/* Partner copies: this node keeps `partners` nodes' ranks, room for
	 * two steps while a new one arrives. */
	out->partner_node = (uint64_t)cd->partners * ranks * 2 *
			    plan_partner_copy_bytes(out->shard_rank);

	double rank_b = (double)out->shard_rank, node_b = (double)out->shard_node;
	double d2h = rank_b / mc->d2h_bw, host = node_b / mc->host_copy_bw;
	out->stall_s = d2h > host ? d2h : host;
	out->durable_s = out->stall_s + node_b / mc->fs_write_bw;
	out->s3_s = node_b / mc->s3_bw;
	out->partner_s = cd->partners ? node_b * cd->partners / mc->net_bw : 0.0;
	out->restore_s = node_b / mc->fs_read_bw;
	/* Synchronous: the rank copies to host memory and writes and syncs
	 * before it trains on. */
	out->sync_save_s = out->stall_s + node_b / mc->fs_write_bw;
}

void plan_interval_of(double cost_s, double lag_s, double min_interval_s, double restore_s,
		      const struct plan_machine *mc, uint32_t nodes, struct plan_interval *out)
{
	double M = mc->mtbf_node_s / (nodes ? nodes : 1);
	double C = cost_s, T;
	/* Daly 2006, the higher-order estimate; Young's sqrt(2CM) is its
	 * first term. */
	if (C < 2 * M) {
		double r = C / (2 * M);
		T = sqrt(2 * C * M) * (1 + sqrt(r) / 3 + r / 9) - C;
	} else {
		T = M;
	}
	if (T < min_interval_s)
		T = min_interval_s;
	if (T <= 0)
		T = min_interval_s > 0 ? min_interval_s : 1e-3;
	out->mtbf_s = M;
	out->interval_s = T;
	/* Lost per failure: half an interval of work on average, plus the
	 * work done while the newest save was not yet safe, plus the
	 * relaunch and reading the state back. */
	out->loss_per_failure_s = T / 2 + lag_s + mc->restart_s + restore_s;
	out->overhead = C / (T + C) + out->loss_per_failure_s / M;
}

/* ---- a described model (ckpt-train) ------------------------------------ */

uint32_t plan_dtype_bytes(const char *name)
{
	static const struct { const char *name; uint32_t bytes; } types[] = {
		{ "u8", 1 }, { "i8", 1 }, { "u16", 2 }, { "i16", 2 }, { "u32", 4 }, { "i32", 4 },
		{ "u64", 8 }, { "i64", 8 }, { "f16", 2 }, { "bf16", 2 }, { "f32", 4 }, { "f64", 8 },
		{ "bool", 1 }, { "f8e4m3", 1 }, { "f8e5m2", 1 },
	};
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (!strcmp(name, types[i].name))
			return types[i].bytes;
	return 0;
}

void plan_desc_rank(const struct plan_desc *d, uint32_t rank, uint32_t world, size_t job_len,
		    uint64_t chunk_bytes, struct plan_rank_files *out)
{
	memset(out, 0, sizeof(*out));
	uint64_t N = d->n_params;
	out->lo = N * rank / world;
	out->len = N * (rank + 1) / world - out->lo;
	/* FORMAT.md: the extents in order, each at a 4 KiB boundary; the
	 * tensor table (24-byte header; 24 + 24 x ndim + the name padded to 8
	 * per entry); the index around it. */
	uint64_t shard = 0, table = 24, chunks = 0, data = 0;
	for (uint32_t i = 0; i < d->n_tensors; i++) {
		uint64_t n = out->len * d->tensor_elem_bytes[i];
		shard += align_up(n, ALIGN);
		data += n;
		table += 24 + 24 * 1 + align_up(strlen(d->tensor_name[i]), 8);
		chunks += div_ceil(n, chunk_bytes);
	}
	shard += align_up(d->blob_bytes, ALIGN);
	chunks += div_ceil(d->blob_bytes, chunk_bytes);
	out->shard_bytes = shard;
	out->index_bytes = 80 + align_up(2 + job_len, 8) + table + 4 * chunks + 4;
	out->max_save_bytes = data + d->blob_bytes + d->save_reserve_bytes;
	out->slot_bytes = plan_slot_bytes(out->max_save_bytes);
}

/* ---- parsing ----------------------------------------------------------- */

int plan_parse_size(const char *s, uint64_t *out)
{
	static const char letters[] = "KMGT";
	const char *p = s;
	unsigned shift = 0;

	if (!s || !isdigit((unsigned char)*p))
		return -EINVAL;
	uint64_t ip = 0, fp = 0, fdiv = 1;
	for (; isdigit((unsigned char)*p); p++) {
		if (ip > (UINT64_MAX - 9) / 10)
			return -ERANGE;
		ip = ip * 10 + (uint64_t)(*p - '0');
	}
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		for (; isdigit((unsigned char)*p); p++) {
			if (fdiv >= 1000000000000000ull)
				return -EINVAL;
			fp = fp * 10 + (uint64_t)(*p - '0');
			fdiv *= 10;
		}
	}
	if (*p) {
		const char *u = strchr(letters, toupper((unsigned char)*p));
		if (u && *u) {
			shift = 10 * (unsigned)(u - letters + 1);
			p++;
			if (*p == 'i')
				p++;
		}
		if (*p == 'B' || *p == 'b')
			p++;
		if (*p)
			return -EINVAL;
	}
	if (shift && ip > (UINT64_MAX >> shift))
		return -ERANGE;
	/* The fraction must come out in whole bytes: 1.5K, not 0.1K. */
	unsigned __int128 f = (unsigned __int128)fp << shift;
	if (f % fdiv)
		return -EINVAL;
	unsigned __int128 v = ((unsigned __int128)ip << shift) + f / fdiv;
	if (v > UINT64_MAX)
		return -ERANGE;
	*out = (uint64_t)v;
	return 0;
}

static int json_u64(json_t *o, const char *key, uint64_t *out, bool required)
{
	json_t *v = json_object_get(o, key);
	if (!v)
		return required ? -ENOENT : 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -EINVAL;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

int plan_desc_load(const char *path, struct plan_desc *d, char *why, size_t whylen)
{
	json_error_t jerr;
	int r = -EINVAL;

	memset(d, 0, sizeof(*d));
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		snprintf(why, whylen, "%s: line %d: %s", path, jerr.line, jerr.text);
		return jerr.line <= 0 && strstr(jerr.text, "open") ? -ENOENT : -EINVAL;
	}
	json_t *fmt = json_object_get(root, "format"), *ver = json_object_get(root, "version");
	json_t *sh = json_object_get(root, "sharding"), *mod = json_object_get(root, "model");
	json_t *ts = json_object_get(root, "tensors");
	if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "ckpt-train-model")) {
		snprintf(why, whylen, "%s: \"format\" is not \"ckpt-train-model\" (not written by "
			 "ckpt-train --describe-model?)", path);
		goto out;
	}
	if (!json_is_integer(ver) || json_integer_value(ver) != 1) {
		snprintf(why, whylen, "%s: \"version\" is not 1", path);
		goto out;
	}
	if (!json_is_string(sh) || strcmp(json_string_value(sh), "contiguous")) {
		snprintf(why, whylen, "%s: \"sharding\": only \"contiguous\" is known", path);
		goto out;
	}
	snprintf(d->model, sizeof(d->model), "%s", json_is_string(mod) ? json_string_value(mod) : "?");
	if (json_u64(root, "n_params", &d->n_params, true) < 0 || d->n_params == 0 ||
	    json_u64(root, "blob_bytes", &d->blob_bytes, true) < 0 ||
	    json_u64(root, "save_reserve_bytes", &d->save_reserve_bytes, false) < 0) {
		snprintf(why, whylen, "%s: \"n_params\" (above 0), \"blob_bytes\" and "
			 "\"save_reserve_bytes\" must be whole numbers", path);
		goto out;
	}
	if (!json_is_array(ts) || json_array_size(ts) == 0 ||
	    json_array_size(ts) > PLAN_DESC_MAX_TENSORS) {
		snprintf(why, whylen, "%s: \"tensors\" must be an array of 1 to %d tensors", path,
			 PLAN_DESC_MAX_TENSORS);
		goto out;
	}
	for (size_t i = 0; i < json_array_size(ts); i++) {
		json_t *t = json_array_get(ts, i);
		json_t *n = json_object_get(t, "name"), *dt = json_object_get(t, "dtype");
		uint32_t eb = json_is_string(dt) ? plan_dtype_bytes(json_string_value(dt)) : 0;
		if (!json_is_string(n) || !json_string_length(n) || json_string_length(n) >= 64 ||
		    !eb) {
			snprintf(why, whylen, "%s: tensors[%zu]: needs a \"name\" (1..63 bytes) and a "
				 "\"dtype\" of FORMAT.md (f32, bf16, ...)", path, i);
			goto out;
		}
		snprintf(d->tensor_name[i], sizeof(d->tensor_name[i]), "%s", json_string_value(n));
		d->tensor_elem_bytes[i] = eb;
		d->n_tensors++;
	}
	r = 0;
out:
	json_decref(root);
	return r;
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	size_t n = strlen(s);
	while (n && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	return s;
}

int plan_ckptd_load(const char *path, struct plan_ckptd *cd, char *why, size_t whylen)
{
	char line[4096];
	unsigned lineno = 0;
	bool in_ckptd = true; /* keys at top level count as ckptd's */
	int r = 0;

	FILE *f = fopen(path, "re");
	if (!f) {
		r = -errno;
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		return r;
	}
	while (r == 0 && fgets(line, sizeof(line), f)) {
		lineno++;
		char *s = trim(line);
		if (!*s || *s == '#' || *s == ';')
			continue;
		if (*s == '[') {
			char *end = strchr(s, ']');
			if (!end) {
				snprintf(why, whylen, "%s:%u: a section without ']'", path, lineno);
				r = -EINVAL;
				break;
			}
			*end = '\0';
			in_ckptd = !strcmp(trim(s + 1), "ckptd");
			continue;
		}
		char *eq = strchr(s, '=');
		if (!eq) {
			snprintf(why, whylen, "%s:%u: not \"key = value\"", path, lineno);
			r = -EINVAL;
			break;
		}
		*eq = '\0';
		char *key = trim(s), *val = trim(eq + 1);
		if (!in_ckptd)
			continue;
		uint64_t v;
		bool size = !strcmp(key, "staging_bytes") || !strcmp(key, "partner_memory") ||
			    !strcmp(key, "chunk_size");
		bool count = !strcmp(key, "slots_per_rank") || !strcmp(key, "partners");
		if (!size && !count)
			continue;
		int pr = size ? plan_parse_size(val, &v) : -EINVAL;
		if (count) {
			char *end;
			errno = 0;
			unsigned long long n = strtoull(val, &end, 10);
			pr = errno || end == val || *end || val[0] == '-' || n < 1 || n > 64 ? -EINVAL : 0;
			v = n;
		}
		if (pr < 0) {
			snprintf(why, whylen, "%s:%u: %s: '%s' is not %s", path, lineno, key, val,
				 size ? "a size (65536, 4MiB, 1.5G)" : "a whole number from 1 to 64");
			r = -EINVAL;
			break;
		}
		if (!strcmp(key, "staging_bytes"))
			cd->staging_bytes = v;
		else if (!strcmp(key, "partner_memory"))
			cd->partner_memory = v;
		else if (!strcmp(key, "chunk_size"))
			cd->chunk_bytes = v;
		else if (!strcmp(key, "slots_per_rank"))
			cd->slots_per_rank = (uint32_t)v;
		else
			cd->partners = (uint32_t)v;
	}
	if (r == 0 && ferror(f)) {
		r = -EIO;
		snprintf(why, whylen, "%s: read error", path);
	}
	fclose(f);
	return r;
}
