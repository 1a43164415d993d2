/* SPDX-License-Identifier: MIT */
/*
 * Saving: take a slot, lay the extents out in it (each at a CKPT_ALIGN
 * offset, padding zeroed), put the tensor table after them and hand the
 * slot to ckptd with SAVE. Where ckptd accepts it, tell it afterwards how
 * long the save stalled the rank (STALL).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "internal.h"

/* Whether a handle still refers to the live connection's arena. */
static bool save_is_live(const ckpt_save *save)
{
	const ckpt_ctx *ctx = save->ctx;

	return ctx->fd >= 0 && ctx->slots && save->generation == ctx->generation;
}

static void save_free(ckpt_save *save)
{
	for (uint32_t i = 0; i < save->count; i++)
		free(save->tensors[i].name);
	free(save->tensors);
	ctx_arena_unref(save->arena);
	free(save);
}

/* Give the slot back (if it is still of this connection) and free the
 * handle; ctx->lock held. */
static void save_release(ckpt_save *save)
{
	if (save_is_live(save) && save->ctx->slots[save->slot] == SLOT_SAVING)
		save->ctx->slots[save->slot] = SLOT_FREE;
	save_free(save);
}

/* Report the skip to ckptd and record it; ctx->lock held. */
static int save_skip(ckpt_ctx *ctx, uint64_t step)
{
	struct ckpt_msg m = { .type = CKPT_MSG_SKIP };
	char reason[256];
	int r;

	m.u.step.step = step;
	r = ctx_send(ctx, &m);
	if (r < 0)
		return r;
	ctx->have_last_step = true;
	ctx->last_step = step;
	snprintf(reason, sizeof(reason), "rank %u step %llu: no free slot (policy skip)",
		 ctx->hello.rank, (unsigned long long)step);
	ctx_record(ctx, step, CKPT_STATE_SKIPPED, -CKPT_E_SKIPPED, reason);
	return -CKPT_E_SKIPPED;
}

CKPT_EXPORT int ckpt_save_begin(ckpt_ctx *ctx, uint64_t step, ckpt_save **out)
{
	/* The stall starts here: taking the lock and waiting for a slot are
	 * part of it. */
	int64_t begin_ns = ckpt_mono_ns();
	bool reconnected = false;
	ckpt_save *save = NULL;
	int r, slot;

	if (!ctx || !out)
		return -EINVAL;
	/* Refused here, before a slot is taken or anything reaches ckptd
	 * (which would refuse it too, and drop the connection). */
	if (step > CKPT_STEP_MAX)
		return -ERANGE;
	if (ctx_forked(ctx))
		return -CKPT_E_DISCONNECTED;
	pthread_mutex_lock(&ctx->lock);
	if (ctx->have_last_step && step <= ctx->last_step) {
		r = -CKPT_E_STEP_ORDER;
		goto out;
	}
	for (;;) {
		if (ctx->fd < 0) {
			/* One short attempt: a trainer whose ckptd is gone keeps
			 * training and tries again at the next save. */
			if (reconnected || ctx_ensure_connected(ctx, ctx_auto_reconnect_ms(ctx)) < 0) {
				r = -CKPT_E_DISCONNECTED;
				goto out;
			}
			reconnected = true;
		}
		/* Take in the news first: STATUS messages free slots. */
		r = ctx_drain(ctx);
		if (r == 0)
			break;
		if (ctx->fd >= 0)
			goto out; /* an error that left the connection up */
	}

	slot = ctx_find_free_slot(ctx);
	if (slot < 0) {
		if (ctx->skip_policy) {
			r = save_skip(ctx, step);
			goto out;
		}
		slot = ctx_wait_free_slot(ctx);
		if (slot < 0) {
			r = slot;
			goto out;
		}
	}

	save = calloc(1, sizeof(*save));
	if (!save) {
		r = -ENOMEM;
		goto out;
	}
	save->ctx = ctx;
	save->begin_ns = begin_ns;
	save->arena = ctx->arena;
	save->arena->refs++;
	save->generation = ctx->generation;
	save->step = step;
	save->slot = (uint32_t)slot;
	save->slot_bytes = ctx->slot_bytes;
	save->base = (uint8_t *)ctx->arena->base + (size_t)slot * ctx->slot_bytes;
	ctx->slots[slot] = SLOT_SAVING;
	*out = save;
	r = 0;
out:
	pthread_mutex_unlock(&ctx->lock);
	return r;
}

/* Room for len bytes at the cursor: the offset, or -CKPT_E_TOO_BIG. */
static int save_room(const ckpt_save *save, uint64_t len, uint64_t at, uint64_t *off)
{
	if (at > save->slot_bytes || len > save->slot_bytes - at)
		return -CKPT_E_TOO_BIG;
	*off = at;
	return 0;
}

/* Zero from the end of an extent to the next alignment boundary, so that
 * no stale bytes of an earlier save reach the shard. */
static void save_zero_pad(ckpt_save *save, uint64_t end)
{
	uint64_t aligned = ckpt_align_up(end);

	if (aligned > save->slot_bytes)
		aligned = save->slot_bytes;
	if (aligned > end)
		memset(save->base + end, 0, (size_t)(aligned - end));
}

/*
 * Check a descriptor given to add or reserve, and say why it is refused in
 * the handle (ckpt_save_error), naming the tensor: a name that is refused
 * here can never reach the manifest, which is written after every shard.
 */
static int save_desc_check(ckpt_save *save, const ckpt_tensor_desc *desc, uint64_t *bytes)
{
	char q[3 * 64 + 8];
	int r;

	save->why[0] = '\0';
	r = tensor_desc_check(desc, true, bytes);
	if (r == -CKPT_E_BAD_NAME) {
		size_t len = desc->name ? strnlen(desc->name, CKPT_TENSOR_NAME_MAX + 1) : 0;

		ckpt_name_quote(q, sizeof(q), desc->name, len > 64 ? 64 : len);
		snprintf(save->why, sizeof(save->why), "step %llu: tensor name \"%s%s\" %s",
			 (unsigned long long)save->step, desc->name ? q : "(null)",
			 len > 64 ? "..." : "",
			 desc->name ? ckpt_tensor_name_problem(desc->name, len) : "is NULL");
	} else if (r < 0) {
		ckpt_name_quote(q, sizeof(q), desc->name, strnlen(desc->name, 64));
		snprintf(save->why, sizeof(save->why), "step %llu: tensor \"%s\": %s",
			 (unsigned long long)save->step, q,
			 r == -EOVERFLOW ? "its byte size overflows"
					 : "bad dtype, ndim, or slice outside the global shape");
	}
	return r;
}

CKPT_EXPORT const char *ckpt_save_error(const ckpt_save *save)
{
	return save ? save->why : "";
}

/* ckpt_save_reserve with a descriptor of this library's layout. */
static int save_reserve(ckpt_save *save, const ckpt_tensor_desc *desc, void **dst)
{
	struct ckpt_tensor *t;
	uint64_t bytes, off;
	char *name;
	int r;

	r = save_desc_check(save, desc, &bytes);
	if (r < 0)
		return r;
	if (save->count >= CKPT_MAX_TENSORS)
		return -CKPT_E_TOO_BIG;
	r = save_room(save, bytes, save->cursor, &off);
	if (r < 0)
		return r;
	if (save->count == save->cap) {
		uint32_t cap = save->cap ? save->cap * 2 : 16;
		struct ckpt_tensor *grown;

		if (cap > CKPT_MAX_TENSORS)
			cap = CKPT_MAX_TENSORS;
		grown = realloc(save->tensors, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		save->tensors = grown;
		save->cap = cap;
	}
	name = strdup(desc->name);
	if (!name)
		return -ENOMEM;

	t = &save->tensors[save->count++];
	memset(t, 0, sizeof(*t));
	t->name = name;
	t->dtype = desc->dtype;
	t->ndim = desc->ndim;
	for (uint32_t d = 0; d < desc->ndim; d++) {
		t->global_shape[d] = desc->global_shape[d];
		t->offset[d] = desc->offset[d];
		t->shape[d] = desc->shape[d];
	}
	t->data_offset = off;
	t->nbytes = bytes;
	save_zero_pad(save, off + bytes);
	save->cursor = ckpt_align_up(off + bytes);
	*dst = save->base + off;
	return 0;
}

static int save_add(ckpt_save *save, const ckpt_tensor_desc *desc, const void *data)
{
	uint64_t bytes;
	void *dst;
	int r;

	r = save_desc_check(save, desc, &bytes);
	if (r < 0)
		return r;
	if (!data && bytes > 0)
		return -EINVAL;
	r = save_reserve(save, desc, &dst);
	if (r < 0)
		return r;
	if (bytes)
		memcpy(dst, data, (size_t)bytes);
	return 0;
}

/* The caller's descriptor, by its struct_size, in this library's layout;
 * a refusal is said in the handle like any other. */
static int save_desc_load(ckpt_save *save, const ckpt_tensor_desc *desc, ckpt_tensor_desc *out)
{
	int r = tensor_desc_load(desc, out);

	if (r < 0)
		snprintf(save->why, sizeof(save->why),
			 "step %llu: tensor descriptor with struct_size %u: %s",
			 (unsigned long long)save->step, desc->struct_size,
			 desc->struct_size > CKPT_TENSOR_DESC_MAX_BYTES
				 ? "not a size of any layout (set it to 0 or sizeof)"
				 : "sets fields this libckpt does not know");
	return r;
}

CKPT_SYMVER(save_reserve_impl, ckpt_save_reserve);
CKPT_SYMVER(save_add_impl, ckpt_save_add);

CKPT_EXPORT int save_reserve_impl(ckpt_save *save, const ckpt_tensor_desc *desc, void **dst);
CKPT_EXPORT int save_reserve_impl(ckpt_save *save, const ckpt_tensor_desc *desc, void **dst)
{
	ckpt_tensor_desc d;
	int r;

	if (!save || !desc || !dst)
		return -EINVAL;
	r = save_desc_load(save, desc, &d);
	return r < 0 ? r : save_reserve(save, &d, dst);
}

CKPT_EXPORT int save_add_impl(ckpt_save *save, const ckpt_tensor_desc *desc, const void *data);
CKPT_EXPORT int save_add_impl(ckpt_save *save, const ckpt_tensor_desc *desc, const void *data)
{
	ckpt_tensor_desc d;
	int r;

	if (!save || !desc)
		return -EINVAL;
	r = save_desc_load(save, desc, &d);
	return r < 0 ? r : save_add(save, &d, data);
}

CKPT_EXPORT int save_reserve_impl_v0_1(ckpt_save *save, const struct ckpt_tensor_desc_v0_1 *desc,
				       void **dst);
CKPT_EXPORT int save_reserve_impl_v0_1(ckpt_save *save, const struct ckpt_tensor_desc_v0_1 *desc,
				       void **dst)
{
	ckpt_tensor_desc d;

	if (!save || !desc || !dst)
		return -EINVAL;
	tensor_desc_from_v0_1(desc, &d);
	return save_reserve(save, &d, dst);
}

CKPT_EXPORT int save_add_impl_v0_1(ckpt_save *save, const struct ckpt_tensor_desc_v0_1 *desc,
				   const void *data);
CKPT_EXPORT int save_add_impl_v0_1(ckpt_save *save, const struct ckpt_tensor_desc_v0_1 *desc,
				   const void *data)
{
	ckpt_tensor_desc d;

	if (!save || !desc)
		return -EINVAL;
	tensor_desc_from_v0_1(desc, &d);
	return save_add(save, &d, data);
}

CKPT_EXPORT int ckpt_save_set_blob(ckpt_save *save, const void *blob, size_t len)
{
	uint64_t at, off;
	int r;

	if (!save || (!blob && len > 0))
		return -EINVAL;
	at = save->cursor;
	/* A blob replaced before anything came after it reuses its room. */
	if (save->have_blob && ckpt_align_up(save->blob_offset + save->blob_bytes) == save->cursor)
		at = save->blob_offset;
	if (len == 0) {
		save->cursor = at;
		save->have_blob = false;
		save->blob_offset = save->blob_bytes = 0;
		return 0;
	}
	r = save_room(save, len, at, &off);
	if (r < 0)
		return r;
	memcpy(save->base + off, blob, len);
	save_zero_pad(save, off + len);
	save->cursor = ckpt_align_up(off + len);
	save->have_blob = true;
	save->blob_offset = off;
	save->blob_bytes = len;
	return 0;
}

/*
 * Tell ckptd how long the accepted save of `step` stalled the rank, if this
 * connection's ckptd said it takes STALL (an older one would drop us for an
 * unknown message). Fire and forget: no reply comes, and a failure to send
 * does not undo the save. ctx->lock held.
 */
static void save_report_stall(ckpt_ctx *ctx, const ckpt_save *save)
{
	struct ckpt_msg m = { .type = CKPT_MSG_STALL };
	int64_t ns = ckpt_mono_ns() - save->begin_ns;

	if (!(ctx->features & CKPT_FEATURE_STALL) || ctx->fd < 0)
		return;
	m.u.stall.step = save->step;
	m.u.stall.seconds = ns > 0 ? (double)ns / 1e9 : 0.0;
	/* A handle held open for a day is no save stall worth a metric (and
	 * the message could not carry it). */
	if (m.u.stall.seconds >= CKPT_STALL_MAX_SECONDS)
		return;
	(void)ctx_send(ctx, &m);
}

CKPT_EXPORT int ckpt_save_finish(ckpt_save *save)
{
	struct ckpt_table view;
	struct ckpt_msg m = { .type = CKPT_MSG_SAVE };
	struct ckpt_msg reply;
	char err[256];
	uint64_t table_offset;
	size_t table_bytes;
	ckpt_ctx *ctx;
	ssize_t n;
	int r;

	if (!save)
		return -EINVAL;
	ctx = save->ctx;
	if (ctx_forked(ctx)) {
		save_free(save);
		return -CKPT_E_DISCONNECTED;
	}
	pthread_mutex_lock(&ctx->lock);
	if (!save_is_live(save)) {
		r = -CKPT_E_DISCONNECTED;
		goto release;
	}
	/* Two saves filled at once must be finished in step order, or ckptd
	 * sees a step going backwards. */
	if (ctx->have_last_step && save->step <= ctx->last_step) {
		r = -CKPT_E_STEP_ORDER;
		goto release;
	}

	table_offset = save->cursor; /* aligned: every extent end is padded */
	table_bytes = ckpt_table_encoded_size(save->tensors, save->count);
	if (table_bytes > CKPT_TABLE_MAX_BYTES || table_offset > save->slot_bytes ||
	    table_bytes > save->slot_bytes - table_offset) {
		r = -CKPT_E_TOO_BIG;
		goto release;
	}
	view.count = save->count;
	view.tensors = save->tensors;
	view.pool = NULL;
	/* Catches duplicate names here, with a clear error, rather than as a
	 * protocol error that costs the connection. */
	r = ckpt_table_check_layout(&view, table_offset, save->blob_offset, save->blob_bytes,
				    err, sizeof(err));
	if (r < 0) {
		r = r == -EBADMSG ? -EINVAL : r;
		goto release;
	}
	n = ckpt_table_encode(save->tensors, save->count, save->base + table_offset,
			      (size_t)(save->slot_bytes - table_offset));
	if (n < 0) {
		r = n == -ENOBUFS ? -CKPT_E_TOO_BIG : (int)n;
		goto release;
	}

	m.u.save.step = save->step;
	m.u.save.slot = save->slot;
	m.u.save.data_bytes = table_offset;
	m.u.save.table_offset = table_offset;
	m.u.save.table_bytes = (uint64_t)n;
	m.u.save.blob_offset = save->have_blob ? save->blob_offset : 0;
	m.u.save.blob_bytes = save->have_blob ? save->blob_bytes : 0;
	r = ctx_send(ctx, &m);
	if (r < 0)
		goto release;
	/* From here the slot may be ckptd's: it is read while we wait. */
	r = ctx_await_request(ctx, m.seq, &m, -1, &reply);
	if (r < 0)
		goto release;
	if (reply.type == CKPT_MSG_ERROR) {
		r = reply.u.error.code < 0 ? reply.u.error.code : -CKPT_E_PROTOCOL;
		goto release; /* refused: the slot is still ours */
	}
	if (reply.type != CKPT_MSG_SAVE_OK || reply.u.save_ok.step != save->step ||
	    reply.u.save_ok.slot != save->slot) {
		ctx_drop(ctx, -CKPT_E_PROTOCOL, "bad reply to SAVE");
		r = -CKPT_E_PROTOCOL;
		goto release;
	}
	/* The reader made the slot ckptd's and the step pending as it read
	 * SAVE_OK (ctx_apply_save_ok), before any STATUS behind it. */
	save_report_stall(ctx, save);
	r = 0;
release:
	save_release(save);
	pthread_mutex_unlock(&ctx->lock);
	return r;
}

CKPT_EXPORT void ckpt_save_abort(ckpt_save *save)
{
	ckpt_ctx *ctx;

	if (!save)
		return;
	ctx = save->ctx;
	if (ctx_forked(ctx)) {
		save_free(save);
		return;
	}
	pthread_mutex_lock(&ctx->lock);
	save_release(save);
	pthread_mutex_unlock(&ctx->lock);
}
