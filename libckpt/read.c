/* SPDX-License-Identifier: MIT */
/*
 * Ranged reads of any rank's items (PROTOCOL.md, READ_RANGES): the reads
 * are cut into rounds whose bytes fit one slot and whose message fits one
 * packet; ckptd fills the slot, and we copy each piece out into the
 * caller's memory. The context lock is let go while ckptd works
 * (ctx_await) and while we copy, so that other threads' ckpt_poll() and
 * ckpt_next_event() go on.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* One piece of a round: bytes [at, at + len) of reads[read]. */
struct read_piece {
	size_t read;
	uint64_t at, len;
	uint64_t slot_off;
};

/* The reason ckpt_read_error() gives is that of the first failing read:
 * a reason for read i replaces the one kept for a later read. */
static void read_error_set(ckpt_ctx *ctx, size_t *why_read, size_t i, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void read_error_set(ckpt_ctx *ctx, size_t *why_read, size_t i, const char *fmt, ...)
{
	va_list ap;

	if (i >= *why_read)
		return;
	*why_read = i;
	va_start(ap, fmt);
	vsnprintf(ctx->read_error, sizeof(ctx->read_error), fmt, ap);
	va_end(ap);
}

/* Every read without a result yet from `from` on gets `code`. */
static void reads_fail_rest(ckpt_read *reads, size_t n, size_t from, int code)
{
	for (size_t i = from; i < n; i++)
		if (reads[i].result == 0)
			reads[i].result = code;
}

/* What can be refused here, before anything is sent. */
static int read_check(const ckpt_read *rd)
{
	if (rd->length && !rd->dst)
		return -EINVAL;
	if (rd->tensor && ckpt_tensor_name_check(rd->tensor, strnlen(rd->tensor,
						 CKPT_TENSOR_NAME_MAX + 1)) != 0)
		return -CKPT_E_BAD_NAME;
	if (rd->length > UINT64_MAX - rd->offset)
		return -ERANGE;
	return 0;
}

/* Take the answer of one round: results, totals, bytes. ctx->lock held;
 * released for the copies. 0, or a connection-level error. */
static void round_finish(ckpt_ctx *ctx, uint64_t step, ckpt_read *reads,
			 const struct read_piece *pieces, uint32_t count,
			 const struct ckpt_msg *reply, const uint8_t *slot_base, size_t *why_read)
{
	const struct ckpt_msg_read_ranges_ok *ok = &reply->u.read_ranges_ok;
	bool message_used = false;

	pthread_mutex_unlock(&ctx->lock);
	for (uint32_t k = 0; k < count; k++) {
		const struct read_piece *pc = &pieces[k];
		ckpt_read *rd = &reads[pc->read];

		if (ok->results[k].total)
			rd->total = ok->results[k].total;
		if (ok->results[k].result < 0) {
			if (rd->result == 0)
				rd->result = ok->results[k].result;
			/* ckptd's message is about the round's first failure. */
			if (!message_used) {
				pthread_mutex_lock(&ctx->lock);
				read_error_set(ctx, why_read, pc->read, "%s",
					       ok->message[0] ? ok->message
							      : ckpt_strerror(ok->results[k].result));
				pthread_mutex_unlock(&ctx->lock);
				message_used = true;
			}
			continue;
		}
		/* The item is smaller than the whole read: the rest need not
		 * be asked for. */
		if (rd->result == 0 &&
		    (rd->offset > rd->total || rd->length > rd->total - rd->offset)) {
			rd->result = -ERANGE;
			pthread_mutex_lock(&ctx->lock);
			read_error_set(ctx, why_read, pc->read,
				       "step %llu rank %u, %s%s%s: bytes %llu..%llu are beyond its %llu",
				       (unsigned long long)step, rd->rank,
				       rd->tensor ? "tensor \"" : "the blob",
				       rd->tensor ? rd->tensor : "", rd->tensor ? "\"" : "",
				       (unsigned long long)rd->offset,
				       (unsigned long long)(rd->offset + rd->length),
				       (unsigned long long)rd->total);
			pthread_mutex_unlock(&ctx->lock);
			continue;
		}
		if (pc->len && rd->result == 0)
			memcpy((uint8_t *)rd->dst + pc->at, slot_base + pc->slot_off, pc->len);
	}
	pthread_mutex_lock(&ctx->lock);
}

CKPT_EXPORT int ckpt_read_ranges(ckpt_ctx *ctx, uint64_t step, ckpt_read *reads, size_t n)
{
	struct read_piece pieces[CKPT_READ_MAX];
	struct ckpt_msg *m = NULL, *reply = NULL;
	struct ckpt_arena *arena = NULL;
	const uint8_t *slot_base = NULL;
	uint64_t generation = 0, slot_bytes = 0, at = 0;
	size_t next = 0, why_read = SIZE_MAX;
	int r = 0, slot = -1;

	if (!ctx || (!reads && n))
		return -EINVAL;
	if (ctx_forked(ctx))
		return -CKPT_E_DISCONNECTED;
	if (step > CKPT_STEP_MAX)
		return -ERANGE;
	for (size_t i = 0; i < n; i++) {
		reads[i].total = 0;
		reads[i].result = read_check(&reads[i]);
	}
	m = calloc(1, sizeof(*m));
	reply = calloc(1, sizeof(*reply));
	pthread_mutex_lock(&ctx->lock);
	ctx->read_error[0] = '\0';
	if (!m || !reply) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if (reads[i].result < 0) {
			read_error_set(ctx, &why_read, i, "step %llu, read %zu (rank %u): %s",
				       (unsigned long long)step, i, reads[i].rank,
				       reads[i].result == -EINVAL ? "no dst for a length above 0"
				       : reads[i].result == -ERANGE ? "offset + length overflows"
								    : "not a tensor name");
			break;
		}
	}
	r = ctx_ensure_connected(ctx, (int)ctx->connect_timeout_ms);
	if (r < 0)
		goto out;
	(void)ctx_drain(ctx);
	if (ctx->fd >= 0 && !(ctx->features & CKPT_FEATURE_READ))
		ctx_settle_features(ctx);
	if (ctx->fd < 0) {
		r = -CKPT_E_DISCONNECTED;
		goto out;
	}
	if (!(ctx->features & CKPT_FEATURE_READ)) {
		r = -EOPNOTSUPP;
		read_error_set(ctx, &why_read, 0, "ckptd too old: it does not serve ranged reads "
			       "(no \"read_ranges\" in its features)");
		goto out;
	}
	slot = ctx_find_free_slot(ctx);
	if (slot < 0)
		slot = ctx_wait_free_slot(ctx);
	if (slot < 0) {
		r = slot;
		slot = -1;
		goto out;
	}
	/* Ours until the last round is copied out; the arena stays mapped
	 * for the copies even if another thread reconnects meanwhile. */
	ctx->slots[slot] = SLOT_RESTORING;
	generation = ctx->generation;
	arena = ctx->arena;
	arena->refs++;
	slot_bytes = ctx->slot_bytes;
	slot_base = (const uint8_t *)arena->base + (size_t)slot * slot_bytes;

	while (next < n) {
		uint64_t room = slot_bytes, slot_off = 0;
		uint32_t count = 0;

		memset(m, 0, sizeof(*m));
		m->type = CKPT_MSG_READ_RANGES;
		m->u.read_ranges.step = step;
		m->u.read_ranges.slot = (uint32_t)slot;
		while (next < n && count < CKPT_READ_MAX) {
			ckpt_read *rd = &reads[next];
			uint64_t left = rd->length - at, take = left < room ? left : room;
			int a;

			if (rd->result < 0) {
				next++;
				at = 0;
				continue;
			}
			if (left > 0 && take == 0)
				break; /* the slot is full */
			a = ckpt_msg_read_add(m, rd->rank, rd->tensor, rd->offset + at, take);
			if (a == -ENOSPC)
				break; /* the packet is full */
			if (a < 0) {
				rd->result = -CKPT_E_BAD_NAME;
				next++;
				at = 0;
				continue;
			}
			pieces[count++] = (struct read_piece){ .read = next, .at = at, .len = take,
							       .slot_off = slot_off };
			slot_off += take;
			room -= take;
			at += take;
			if (at < rd->length)
				break; /* the rest of it in the next round */
			next++;
			at = 0;
		}
		if (count == 0)
			continue;
		r = ctx_send(ctx, m);
		if (r < 0) {
			reads_fail_rest(reads, n, pieces[0].read, r);
			goto out;
		}
		/* Right after the send, with the lock still held: the waiter
		 * is in place before anyone can read the reply. */
		r = ctx_await(ctx, m->seq, -1, reply);
		if (r == 0 && reply->type != CKPT_MSG_ERROR && ctx->generation != generation)
			r = -CKPT_E_DISCONNECTED;
		if (r < 0) {
			reads_fail_rest(reads, n, pieces[0].read, r);
			read_error_set(ctx, &why_read, pieces[0].read, "step %llu: %s while ckptd read",
				       (unsigned long long)step, ckpt_strerror(r));
			goto out;
		}
		if (reply->type == CKPT_MSG_ERROR) {
			/* Refused as a whole; ckptd never took the slot. */
			r = reply->u.error.code < 0 ? reply->u.error.code : -CKPT_E_PROTOCOL;
			reads_fail_rest(reads, n, pieces[0].read, r);
			read_error_set(ctx, &why_read, pieces[0].read, "%s", reply->u.error.message);
			goto out;
		}
		if (reply->type != CKPT_MSG_READ_RANGES_OK ||
		    reply->u.read_ranges_ok.slot != (uint32_t)slot ||
		    reply->u.read_ranges_ok.step != step || reply->u.read_ranges_ok.count != count) {
			ctx_drop(ctx, -CKPT_E_PROTOCOL, "bad reply to READ_RANGES");
			r = -CKPT_E_PROTOCOL;
			reads_fail_rest(reads, n, pieces[0].read, r);
			goto out;
		}
		round_finish(ctx, step, reads, pieces, count, reply, slot_base, &why_read);
		if (ctx->fd < 0 || ctx->generation != generation) {
			r = -CKPT_E_DISCONNECTED;
			reads_fail_rest(reads, n, next, r);
			goto out;
		}
	}
	r = 0;
out:
	if (slot >= 0 && ctx->slots && ctx->generation == generation)
		ctx->slots[slot] = SLOT_FREE;
	if (arena)
		ctx_arena_unref(arena);
	if (r == 0 || r == -CKPT_E_DISCONNECTED || r == -CKPT_E_PROTOCOL) {
		for (size_t i = 0; i < n; i++) {
			if (reads[i].result < 0) {
				r = reads[i].result;
				break;
			}
		}
	} else if (n) {
		reads_fail_rest(reads, n, 0, r);
	}
	if (r < 0 && !ctx->read_error[0])
		read_error_set(ctx, &why_read, 0, "step %llu: %s", (unsigned long long)step,
			       ckpt_strerror(r));
	pthread_mutex_unlock(&ctx->lock);
	free(m);
	free(reply);
	return r;
}

CKPT_EXPORT int ckpt_read_error(ckpt_ctx *ctx, char *buf, size_t cap)
{
	size_t len;

	if (!ctx || (!buf && cap))
		return -EINVAL;
	pthread_mutex_lock(&ctx->lock);
	len = strlen(ctx->read_error);
	if (cap)
		snprintf(buf, cap, "%s", ctx->read_error);
	pthread_mutex_unlock(&ctx->lock);
	return (int)len;
}
