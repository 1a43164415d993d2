/* SPDX-License-Identifier: MIT */
/*
 * Restoring: ckptd reads and verifies this rank's shard into a slot; we
 * check what it says about the slot (it is trusted, but not with our
 * memory safety), copy the table out of shared memory and decode it.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static bool restore_is_live(const ckpt_restore *r)
{
	const ckpt_ctx *ctx = r->ctx;

	return ctx->fd >= 0 && ctx->slots && r->generation == ctx->generation;
}

/* Hand a restore slot back to ckptd; ctx->lock held. */
static void restore_release_slot(ckpt_ctx *ctx, uint64_t generation, uint32_t slot)
{
	struct ckpt_msg m = { .type = CKPT_MSG_RELEASE };

	if (ctx->fd < 0 || !ctx->slots || generation != ctx->generation)
		return;
	m.u.release.slot = slot;
	if (ctx_send(ctx, &m) == 0)
		ctx->slots[slot] = SLOT_FREE;
}

/* RESTORE_OK's geometry must lie inside the slot before we read anything. */
static bool restore_geometry_ok(const struct ckpt_msg_restore_ok *ok, uint64_t slot_bytes)
{
	if (ok->data_bytes > slot_bytes || ok->table_offset % CKPT_ALIGN != 0 ||
	    ok->table_offset < ok->data_bytes || ok->table_offset > slot_bytes ||
	    ok->table_bytes > slot_bytes - ok->table_offset ||
	    ok->table_bytes > CKPT_TABLE_MAX_BYTES)
		return false;
	if (ok->blob_bytes > ok->data_bytes || ok->blob_offset > ok->data_bytes - ok->blob_bytes)
		return false;
	return true;
}

CKPT_EXPORT int ckpt_restore_open(ckpt_ctx *ctx, uint64_t step, unsigned flags,
				  ckpt_restore **out)
{
	struct ckpt_msg m = { .type = CKPT_MSG_RESTORE };
	struct ckpt_msg reply;
	ckpt_restore *res = NULL;
	const uint8_t *slot_base;
	uint64_t generation;
	void *table_copy = NULL;
	int r, slot;

	if (!ctx || !out || (flags & ~(unsigned)(CKPT_RESTORE_EXACT | CKPT_RESTORE_AGREE)))
		return -EINVAL;
	if (step != CKPT_STEP_LATEST && step > CKPT_STEP_MAX)
		return -ERANGE;
	if (ctx_forked(ctx))
		return -CKPT_E_DISCONNECTED;
	pthread_mutex_lock(&ctx->lock);
	r = ctx_ensure_connected(ctx, (int)ctx->connect_timeout_ms);
	if (r < 0)
		goto out;
	(void)ctx_drain(ctx);
	if (ctx->fd >= 0 && (flags & CKPT_RESTORE_AGREE) && !(ctx->features & CKPT_FEATURE_AGREE))
		ctx_settle_features(ctx);
	if (ctx->fd < 0) {
		r = -CKPT_E_DISCONNECTED;
		goto out;
	}
	if ((flags & CKPT_RESTORE_AGREE) && !(ctx->features & CKPT_FEATURE_AGREE)) {
		/* An older ckptd: its per-rank restore would not be the
		 * agreement the caller asked for. */
		r = -EOPNOTSUPP;
		goto out;
	}
	if (flags & CKPT_RESTORE_AGREE)
		m.type = CKPT_MSG_RESTORE_AGREED;
	slot = ctx_find_free_slot(ctx);
	if (slot < 0)
		slot = ctx_wait_free_slot(ctx);
	if (slot < 0) {
		r = slot;
		goto out;
	}
	generation = ctx->generation;
	ctx->slots[slot] = SLOT_RESTORING;

	m.u.restore.step = step == CKPT_STEP_LATEST ? CKPT_NO_STEP : step;
	m.u.restore.slot = (uint32_t)slot;
	m.u.restore.flags = (flags & CKPT_RESTORE_EXACT) ? CKPT_RESTORE_F_EXACT : 0;
	r = ctx_send(ctx, &m);
	if (r < 0) {
		if (ctx->slots && ctx->generation == generation)
			ctx->slots[slot] = SLOT_FREE;
		goto out;
	}
	/* Reading and verifying a shard may take seconds (and an agreed
	 * restore waits for every rank of the job; ckptd bounds that wait):
	 * no timeout here, but a disconnect ends the wait. */
	r = ctx_await(ctx, m.seq, -1, &reply);
	if (r < 0)
		goto out;
	if (reply.type == CKPT_MSG_ERROR) {
		r = reply.u.error.code < 0 ? reply.u.error.code : -CKPT_E_PROTOCOL;
		if (ctx->slots && ctx->generation == generation)
			ctx->slots[slot] = SLOT_FREE; /* refused: ckptd never took it */
		goto out;
	}
	if (ctx->fd < 0) {
		/* Dropped right after the reply: the arena is gone. */
		r = -CKPT_E_DISCONNECTED;
		goto out;
	}
	if (reply.type != CKPT_MSG_RESTORE_OK || reply.u.restore_ok.slot != (uint32_t)slot ||
	    !restore_geometry_ok(&reply.u.restore_ok, ctx->slot_bytes) ||
	    (step != CKPT_STEP_LATEST && reply.u.restore_ok.step > step)) {
		ctx_drop(ctx, -CKPT_E_PROTOCOL, "bad reply to RESTORE");
		r = -CKPT_E_PROTOCOL;
		goto out;
	}

	res = calloc(1, sizeof(*res));
	slot_base = (const uint8_t *)ctx->arena->base + (size_t)slot * ctx->slot_bytes;
	/* Decode a private copy: the table sits in memory ckptd can write. */
	table_copy = malloc(reply.u.restore_ok.table_bytes ? reply.u.restore_ok.table_bytes : 1);
	if (!res || !table_copy) {
		r = -ENOMEM;
		restore_release_slot(ctx, generation, (uint32_t)slot);
		goto out;
	}
	memcpy(table_copy, slot_base + reply.u.restore_ok.table_offset,
	       reply.u.restore_ok.table_bytes);
	r = ckpt_table_decode(table_copy, reply.u.restore_ok.table_bytes, &res->table);
	if (r == 0) {
		r = ckpt_table_check_layout(&res->table, reply.u.restore_ok.data_bytes,
					    reply.u.restore_ok.blob_offset,
					    reply.u.restore_ok.blob_bytes, NULL, 0);
		if (r < 0)
			ckpt_table_free(&res->table);
	}
	if (r < 0) {
		r = r == -ENOMEM ? r : -CKPT_E_CORRUPT;
		restore_release_slot(ctx, generation, (uint32_t)slot);
		goto out;
	}

	res->ctx = ctx;
	res->arena = ctx->arena;
	res->arena->refs++;
	res->generation = generation;
	res->slot = (uint32_t)slot;
	res->base = slot_base;
	res->step = reply.u.restore_ok.step;
	res->data_bytes = reply.u.restore_ok.data_bytes;
	res->blob_offset = reply.u.restore_ok.blob_offset;
	res->blob_bytes = reply.u.restore_ok.blob_bytes;
	if ((reply.u.restore_ok.flags & CKPT_RESTORE_OK_F_FELL_BACK) ||
	    reply.u.restore_ok.warning[0]) {
		res->have_warning = true;
		memcpy(res->warning, reply.u.restore_ok.warning, sizeof(res->warning));
		res->warning[sizeof(res->warning) - 1] = '\0';
		if (!res->warning[0])
			strcpy(res->warning, "ckptd restored an older step than requested");
	}
	*out = res;
	res = NULL;
	r = 0;
out:
	free(table_copy);
	free(res);
	pthread_mutex_unlock(&ctx->lock);
	return r;
}

CKPT_EXPORT uint64_t ckpt_restore_step(const ckpt_restore *r)
{
	return r ? r->step : CKPT_NO_STEP;
}

CKPT_EXPORT const char *ckpt_restore_warning(const ckpt_restore *r)
{
	return r && r->have_warning ? r->warning : NULL;
}

CKPT_EXPORT int ckpt_restore_tensor_count(const ckpt_restore *r)
{
	if (!r)
		return -EINVAL;
	return r->table.count > INT_MAX ? INT_MAX : (int)r->table.count;
}

/* Fill a descriptor of this library's layout. */
static void restore_desc_fill(const struct ckpt_tensor *t, ckpt_tensor_desc *desc)
{
	memset(desc, 0, sizeof(*desc));
	desc->name = t->name;
	desc->dtype = t->dtype;
	desc->ndim = t->ndim;
	for (uint32_t d = 0; d < t->ndim && d < CKPT_MAX_DIMS; d++) {
		desc->global_shape[d] = t->global_shape[d];
		desc->offset[d] = t->offset[d];
		desc->shape[d] = t->shape[d];
	}
}

CKPT_SYMVER(restore_tensor_at_impl, ckpt_restore_tensor_at);

CKPT_EXPORT int restore_tensor_at_impl(const ckpt_restore *r, int i, ckpt_tensor_desc *desc);
CKPT_EXPORT int restore_tensor_at_impl(const ckpt_restore *r, int i, ckpt_tensor_desc *desc)
{
	const size_t v0_1 = offsetof(ckpt_tensor_desc, struct_size);
	uint32_t size;
	ckpt_tensor_desc full;

	if (!r || !desc || i < 0 || (uint32_t)i >= r->table.count)
		return -EINVAL;
	/* An out-parameter: callers of the original API never had to set
	 * struct_size, so it may be anything. Below a layout with it, or
	 * past any plausible one, only the original fields are written
	 * (every caller has those); else no more than both structs hold.
	 * Fields of a newer caller that this library does not know are
	 * left as they are. */
	size = desc->struct_size;
	restore_desc_fill(&r->table.tensors[i], &full);
	if (size < v0_1 + sizeof(desc->struct_size) || size > CKPT_TENSOR_DESC_MAX_BYTES) {
		memcpy(desc, &full, v0_1);
		return 0;
	}
	full.struct_size = size;
	memcpy(desc, &full, size < sizeof(full) ? size : sizeof(full));
	return 0;
}

CKPT_EXPORT int restore_tensor_at_impl_v0_1(const ckpt_restore *r, int i,
					    struct ckpt_tensor_desc_v0_1 *desc);
CKPT_EXPORT int restore_tensor_at_impl_v0_1(const ckpt_restore *r, int i,
					    struct ckpt_tensor_desc_v0_1 *desc)
{
	ckpt_tensor_desc full;

	if (!r || !desc || i < 0 || (uint32_t)i >= r->table.count)
		return -EINVAL;
	restore_desc_fill(&r->table.tensors[i], &full);
	memcpy(desc, &full, sizeof(*desc));
	return 0;
}

static int restore_lookup(const ckpt_restore *r, const char *name, const struct ckpt_tensor **t)
{
	int i;

	if (!r || !name)
		return -EINVAL;
	i = ckpt_table_find(&r->table, name);
	if (i < 0)
		return -CKPT_E_NOT_FOUND;
	*t = &r->table.tensors[i];
	return 0;
}

CKPT_EXPORT int ckpt_restore_tensor(ckpt_restore *r, const char *name, void *buf, size_t len)
{
	const struct ckpt_tensor *t;
	int ret;

	ret = restore_lookup(r, name, &t);
	if (ret < 0)
		return ret;
	if (t->nbytes != len)
		return -EMSGSIZE;
	if (buf && len)
		memcpy(buf, r->base + t->data_offset, len);
	return 0;
}

CKPT_EXPORT int ckpt_restore_tensor_ptr(ckpt_restore *r, const char *name, const void **data,
					size_t *len)
{
	const struct ckpt_tensor *t;
	int ret;

	if (!data || !len)
		return -EINVAL;
	ret = restore_lookup(r, name, &t);
	if (ret < 0)
		return ret;
	*data = r->base + t->data_offset;
	*len = (size_t)t->nbytes;
	return 0;
}

CKPT_EXPORT int ckpt_restore_blob(ckpt_restore *r, void *buf, size_t cap)
{
	if (!r || (!buf && cap > 0))
		return -EINVAL;
	if (r->blob_bytes > INT_MAX)
		return -EOVERFLOW;
	if (r->blob_bytes <= cap && r->blob_bytes > 0)
		memcpy(buf, r->base + r->blob_offset, (size_t)r->blob_bytes);
	return (int)r->blob_bytes;
}

CKPT_EXPORT int ckpt_restore_blob_ptr(ckpt_restore *r, const void **data, size_t *len)
{
	if (!r || !data || !len)
		return -EINVAL;
	*data = r->blob_bytes ? r->base + r->blob_offset : NULL;
	*len = (size_t)r->blob_bytes;
	return 0;
}

CKPT_EXPORT void ckpt_restore_close(ckpt_restore *r)
{
	ckpt_ctx *ctx;

	if (!r)
		return;
	ctx = r->ctx;
	if (ctx_forked(ctx)) {
		/* The slot is the parent's to release. */
		ctx_arena_unref(r->arena);
		ckpt_table_free(&r->table);
		free(r);
		return;
	}
	pthread_mutex_lock(&ctx->lock);
	if (restore_is_live(r) && ctx->slots[r->slot] == SLOT_RESTORING)
		restore_release_slot(ctx, r->generation, r->slot);
	ctx_arena_unref(r->arena);
	ckpt_table_free(&r->table);
	free(r);
	pthread_mutex_unlock(&ctx->lock);
}
