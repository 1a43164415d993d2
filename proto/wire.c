/* SPDX-License-Identifier: MIT */
/*
 * libckpt <-> ckptd messages (PROTOCOL.md, "Encoding"). The encoder checks
 * its output with the decoder, so whatever one side can send the other
 * side accepts.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "internal.h"

/* Longest string each message may carry, in bytes (no NUL on the wire). */
#define REASON_MAX CKPT_REASON_MAX

static void wr_str(struct wr *w, const char *s, size_t max)
{
	size_t n = strnlen(s, max + 1);

	if (n > max) {
		w->ok = false;
		return;
	}
	wr_u16(w, (uint16_t)n);
	wr_bytes(w, s, n);
}

/* Read a u16-prefixed string into dst (cap >= max + 1), NUL-terminated.
 * Refuses over-long strings and embedded NULs. */
static void rd_str(struct rd *r, char *dst, size_t max)
{
	size_t n = rd_u16(r);
	const uint8_t *s;

	if (n > max) {
		r->ok = false;
		return;
	}
	s = rd_take(r, n);
	if (!s || memchr(s, '\0', n)) {
		r->ok = false;
		return;
	}
	memcpy(dst, s, n);
	dst[n] = '\0';
}

static void wr_extents(struct wr *w, uint64_t data_bytes, uint64_t table_offset,
		       uint64_t table_bytes, uint64_t blob_offset, uint64_t blob_bytes)
{
	wr_u64(w, data_bytes);
	wr_u64(w, table_offset);
	wr_u64(w, table_bytes);
	wr_u64(w, blob_offset);
	wr_u64(w, blob_bytes);
}

/* What a SAVE or RESTORE_OK says about the slot layout, checked without
 * knowing the slot size (ckptd checks that against the slot). */
static bool extents_valid(uint64_t data_bytes, uint64_t table_offset,
			  uint64_t table_bytes, uint64_t blob_offset, uint64_t blob_bytes)
{
	if (data_bytes % CKPT_ALIGN || table_offset % CKPT_ALIGN)
		return false;
	if (table_offset < data_bytes)
		return false;
	if (table_bytes < 24 || table_bytes > CKPT_TABLE_MAX_BYTES)
		return false;
	if (table_bytes > UINT64_MAX - table_offset)
		return false;
	if (blob_bytes > 0) {
		if (blob_offset % CKPT_ALIGN)
			return false;
		if (blob_offset > data_bytes || blob_bytes > data_bytes - blob_offset)
			return false;
	}
	return true;
}

/* f64 on the wire: the IEEE 754 bits as a u64. */
static void wr_f64(struct wr *w, double v)
{
	uint64_t bits;

	memcpy(&bits, &v, sizeof(bits));
	wr_u64(w, bits);
}

static double rd_f64(struct rd *r)
{
	uint64_t bits = rd_u64(r);
	double v;

	memcpy(&v, &bits, sizeof(v));
	return v;
}

/* NaN fails both comparisons; infinities fail the bound; -0.0 is refused
 * so that every accepted value has one encoding. */
static bool stall_seconds_valid(double v)
{
	return v >= 0.0 && v < CKPT_STALL_MAX_SECONDS && !signbit(v);
}

static int encode_body(const struct ckpt_msg *m, struct wr *w)
{
	switch (m->type) {
	case CKPT_MSG_HELLO: {
		const struct ckpt_msg_hello *b = &m->u.hello;

		wr_str(w, b->job, CKPT_JOB_NAME_MAX);
		wr_u32(w, b->rank);
		wr_u32(w, b->world_size);
		wr_u32(w, b->local_rank);
		wr_u32(w, b->flags);
		wr_u64(w, b->max_save_bytes);
		wr_u32(w, b->pid);
		break;
	}
	case CKPT_MSG_HELLO_OK: {
		const struct ckpt_msg_hello_ok *b = &m->u.hello_ok;

		wr_u32(w, b->slots);
		wr_u32(w, b->flags);
		wr_u64(w, b->slot_bytes);
		wr_u64(w, b->arena_bytes);
		wr_u32(w, b->chunk_bytes);
		wr_u32(w, b->reserved);
		wr_u64(w, b->latest_step);
		break;
	}
	case CKPT_MSG_SAVE: {
		const struct ckpt_msg_save *b = &m->u.save;

		wr_u64(w, b->step);
		wr_u32(w, b->slot);
		wr_u32(w, b->flags);
		wr_extents(w, b->data_bytes, b->table_offset, b->table_bytes,
			   b->blob_offset, b->blob_bytes);
		break;
	}
	case CKPT_MSG_SAVE_OK:
		wr_u64(w, m->u.save_ok.step);
		wr_u32(w, m->u.save_ok.slot);
		break;
	case CKPT_MSG_STATUS: {
		const struct ckpt_msg_status *b = &m->u.status;

		wr_u64(w, b->step);
		wr_u32(w, b->state);
		wr_u32(w, (uint32_t)b->error);
		wr_u32(w, b->slot_freed);
		wr_str(w, b->reason, REASON_MAX);
		break;
	}
	case CKPT_MSG_SKIP:
	case CKPT_MSG_QUERY:
		wr_u64(w, m->u.step.step);
		break;
	case CKPT_MSG_LIST:
	case CKPT_MSG_BYE:
		break;
	case CKPT_MSG_LIST_OK: {
		const struct ckpt_msg_list_ok *b = &m->u.list_ok;

		if (b->count > CKPT_LIST_MAX)
			return -EINVAL;
		wr_u32(w, b->total);
		wr_u32(w, b->count);
		for (uint32_t i = 0; i < b->count; i++)
			wr_u64(w, b->steps[i]);
		break;
	}
	case CKPT_MSG_RESTORE:
	case CKPT_MSG_RESTORE_AGREED:
		wr_u64(w, m->u.restore.step);
		wr_u32(w, m->u.restore.slot);
		wr_u32(w, m->u.restore.flags);
		break;
	case CKPT_MSG_RESTORE_OK: {
		const struct ckpt_msg_restore_ok *b = &m->u.restore_ok;

		wr_u64(w, b->step);
		wr_u32(w, b->slot);
		wr_u32(w, b->flags);
		wr_extents(w, b->data_bytes, b->table_offset, b->table_bytes,
			   b->blob_offset, b->blob_bytes);
		wr_str(w, b->warning, REASON_MAX);
		break;
	}
	case CKPT_MSG_RELEASE:
		wr_u32(w, m->u.release.slot);
		break;
	case CKPT_MSG_ERROR:
		wr_u32(w, (uint32_t)m->u.error.code);
		wr_str(w, m->u.error.message, REASON_MAX);
		break;
	case CKPT_MSG_STALL:
		wr_u64(w, m->u.stall.step);
		wr_f64(w, m->u.stall.seconds);
		break;
	case CKPT_MSG_READ_RANGES: {
		const struct ckpt_msg_read_ranges *b = &m->u.read_ranges;

		if (b->count > CKPT_READ_MAX)
			return -EINVAL;
		wr_u64(w, b->step);
		wr_u32(w, b->slot);
		wr_u32(w, b->count);
		for (uint32_t i = 0; i < b->count; i++) {
			const struct ckpt_msg_read_item *it = &b->items[i];

			if (it->name_len > CKPT_TENSOR_NAME_MAX ||
			    (size_t)it->name_off + it->name_len >= sizeof(b->names))
				return -EINVAL;
			wr_u32(w, it->rank);
			wr_u64(w, it->offset);
			wr_u64(w, it->length);
			wr_u16(w, it->name_len);
			wr_bytes(w, b->names + it->name_off, it->name_len);
		}
		break;
	}
	case CKPT_MSG_READ_RANGES_OK: {
		const struct ckpt_msg_read_ranges_ok *b = &m->u.read_ranges_ok;

		if (b->count > CKPT_READ_MAX)
			return -EINVAL;
		wr_u64(w, b->step);
		wr_u32(w, b->slot);
		wr_u32(w, b->count);
		for (uint32_t i = 0; i < b->count; i++) {
			wr_u32(w, (uint32_t)b->results[i].result);
			wr_u64(w, b->results[i].total);
		}
		wr_str(w, b->message, REASON_MAX);
		break;
	}
	default:
		return -EINVAL;
	}
	return 0;
}

/* Wire bytes of one read of a READ_RANGES: rank, offset, length, name. */
#define READ_ITEM_BYTES(name_len) (4u + 8u + 8u + 2u + (name_len))
#define READ_RANGES_FIXED_BYTES (CKPT_WIRE_HDR_BYTES + 8u + 4u + 4u)

int ckpt_msg_read_add(struct ckpt_msg *m, uint32_t rank, const char *name, uint64_t offset,
		      uint64_t length)
{
	struct ckpt_msg_read_ranges *b;
	size_t bytes = READ_RANGES_FIXED_BYTES, pool = 0, n = name ? strlen(name) : 0;

	if (!m || m->type != CKPT_MSG_READ_RANGES || length > UINT64_MAX - offset)
		return -EINVAL;
	if (name && ckpt_tensor_name_check(name, n) != 0)
		return -EINVAL;
	b = &m->u.read_ranges;
	if (b->count >= CKPT_READ_MAX)
		return -ENOSPC;
	for (uint32_t i = 0; i < b->count; i++) {
		bytes += READ_ITEM_BYTES(b->items[i].name_len);
		pool = (size_t)b->items[i].name_off + b->items[i].name_len + 1;
	}
	if (bytes + READ_ITEM_BYTES(n) > CKPT_MSG_MAX_BYTES || pool + n + 1 > sizeof(b->names))
		return -ENOSPC;
	b->items[b->count] = (struct ckpt_msg_read_item){
		.rank = rank, .name_len = (uint16_t)n, .name_off = (uint16_t)pool,
		.offset = offset, .length = length,
	};
	if (n)
		memcpy(b->names + pool, name, n);
	b->names[pool + n] = '\0';
	b->count++;
	return 0;
}

ssize_t ckpt_msg_encode(const struct ckpt_msg *m, void *buf, size_t cap)
{
	uint8_t tmp[CKPT_MSG_MAX_BYTES];
	struct ckpt_msg check;
	struct wr w;
	int ret;

	if (!m || !buf)
		return -EINVAL;
	/* Encode into a private buffer first: a string too long for its field
	 * must be -EINVAL, not -ENOBUFS, whatever the caller's cap. */
	wr_init(&w, tmp, sizeof(tmp));
	wr_zeros(&w, CKPT_WIRE_HDR_BYTES);
	ret = encode_body(m, &w);
	if (ret < 0 || !w.ok)
		return -EINVAL;
	put_le32(tmp, CKPT_WIRE_MAGIC);
	put_le16(tmp + 4, CKPT_WIRE_VERSION);
	put_le16(tmp + 6, (uint16_t)m->type);
	put_le32(tmp + 8, (uint32_t)w.pos);
	put_le32(tmp + 12, m->seq);
	if (ckpt_msg_decode(tmp, w.pos, &check) < 0)
		return -EINVAL;
	if (cap < w.pos)
		return -ENOBUFS;
	memcpy(buf, tmp, w.pos);
	return (ssize_t)w.pos;
}

/* A step field that must be a step number (FORMAT.md, "Step numbers"),
 * or also CKPT_NO_STEP where the field allows it. */
static bool step_ok(uint64_t step, bool no_step_allowed)
{
	return step <= CKPT_STEP_MAX || (no_step_allowed && step == CKPT_NO_STEP);
}

static bool decode_body(uint32_t type, struct rd *r, struct ckpt_msg *out)
{
	switch (type) {
	case CKPT_MSG_HELLO: {
		struct ckpt_msg_hello *b = &out->u.hello;

		rd_str(r, b->job, CKPT_JOB_NAME_MAX);
		b->rank = rd_u32(r);
		b->world_size = rd_u32(r);
		b->local_rank = rd_u32(r);
		b->flags = rd_u32(r);
		b->max_save_bytes = rd_u64(r);
		b->pid = rd_u32(r);
		return r->ok && ckpt_job_name_check(b->job, strlen(b->job)) == 0 &&
		       b->world_size >= 1 && b->rank < b->world_size && b->flags == 0;
	}
	case CKPT_MSG_HELLO_OK: {
		struct ckpt_msg_hello_ok *b = &out->u.hello_ok;

		b->slots = rd_u32(r);
		b->flags = rd_u32(r);
		b->slot_bytes = rd_u64(r);
		b->arena_bytes = rd_u64(r);
		b->chunk_bytes = rd_u32(r);
		b->reserved = rd_u32(r);
		b->latest_step = rd_u64(r);
		return r->ok && b->slots >= 1 && b->slot_bytes >= CKPT_ALIGN &&
		       b->slot_bytes % CKPT_ALIGN == 0 &&
		       b->slot_bytes <= UINT64_MAX / b->slots &&
		       b->arena_bytes == b->slots * b->slot_bytes &&
		       b->chunk_bytes >= CKPT_CHUNK_MIN && b->chunk_bytes <= CKPT_CHUNK_MAX &&
		       b->reserved == 0 && (b->flags & ~CKPT_HELLO_F_SKIP_POLICY) == 0 &&
		       step_ok(b->latest_step, true);
	}
	case CKPT_MSG_SAVE: {
		struct ckpt_msg_save *b = &out->u.save;

		b->step = rd_u64(r);
		b->slot = rd_u32(r);
		b->flags = rd_u32(r);
		b->data_bytes = rd_u64(r);
		b->table_offset = rd_u64(r);
		b->table_bytes = rd_u64(r);
		b->blob_offset = rd_u64(r);
		b->blob_bytes = rd_u64(r);
		return r->ok && b->step != CKPT_NO_STEP && b->slot != CKPT_NO_SLOT &&
		       b->flags == 0 &&
		       extents_valid(b->data_bytes, b->table_offset, b->table_bytes,
				     b->blob_offset, b->blob_bytes);
	}
	case CKPT_MSG_SAVE_OK:
		out->u.save_ok.step = rd_u64(r);
		out->u.save_ok.slot = rd_u32(r);
		return r->ok && out->u.save_ok.step != CKPT_NO_STEP &&
		       out->u.save_ok.slot != CKPT_NO_SLOT;
	case CKPT_MSG_STATUS: {
		struct ckpt_msg_status *b = &out->u.status;

		b->step = rd_u64(r);
		b->state = rd_u32(r);
		b->error = (int32_t)rd_u32(r);
		b->slot_freed = rd_u32(r);
		rd_str(r, b->reason, REASON_MAX);
		return r->ok && b->state <= CKPT_STATE_FAILED && b->error <= 0;
	}
	case CKPT_MSG_SKIP:
	case CKPT_MSG_QUERY:
		out->u.step.step = rd_u64(r);
		return r->ok && out->u.step.step != CKPT_NO_STEP;
	case CKPT_MSG_LIST:
	case CKPT_MSG_BYE:
		return true;
	case CKPT_MSG_LIST_OK: {
		struct ckpt_msg_list_ok *b = &out->u.list_ok;

		b->total = rd_u32(r);
		b->count = rd_u32(r);
		if (!r->ok || b->count > CKPT_LIST_MAX || b->count > b->total)
			return false;
		for (uint32_t i = 0; i < b->count; i++) {
			b->steps[i] = rd_u64(r);
			if (!step_ok(b->steps[i], false) ||
			    (i > 0 && b->steps[i] <= b->steps[i - 1]))
				return false;
		}
		/* A partial list is the newest steps: it is full or complete. */
		return r->ok && (b->count == b->total || b->count == CKPT_LIST_MAX);
	}
	case CKPT_MSG_RESTORE:
	case CKPT_MSG_RESTORE_AGREED:
		out->u.restore.step = rd_u64(r);
		out->u.restore.slot = rd_u32(r);
		out->u.restore.flags = rd_u32(r);
		return r->ok && out->u.restore.slot != CKPT_NO_SLOT &&
		       (out->u.restore.flags & ~CKPT_RESTORE_F_EXACT) == 0;
	case CKPT_MSG_RESTORE_OK: {
		struct ckpt_msg_restore_ok *b = &out->u.restore_ok;

		b->step = rd_u64(r);
		b->slot = rd_u32(r);
		b->flags = rd_u32(r);
		b->data_bytes = rd_u64(r);
		b->table_offset = rd_u64(r);
		b->table_bytes = rd_u64(r);
		b->blob_offset = rd_u64(r);
		b->blob_bytes = rd_u64(r);
		rd_str(r, b->warning, REASON_MAX);
		return r->ok && b->step != CKPT_NO_STEP && b->slot != CKPT_NO_SLOT &&
		       (b->flags & ~CKPT_RESTORE_OK_F_FELL_BACK) == 0 &&
		       extents_valid(b->data_bytes, b->table_offset, b->table_bytes,
				     b->blob_offset, b->blob_bytes);
	}
	case CKPT_MSG_RELEASE:
		out->u.release.slot = rd_u32(r);
		return r->ok && out->u.release.slot != CKPT_NO_SLOT;
	case CKPT_MSG_ERROR:
		out->u.error.code = (int32_t)rd_u32(r);
		rd_str(r, out->u.error.message, REASON_MAX);
		return r->ok && out->u.error.code < 0;
	case CKPT_MSG_STALL:
		out->u.stall.step = rd_u64(r);
		out->u.stall.seconds = rd_f64(r);
		return r->ok && out->u.stall.step != CKPT_NO_STEP &&
		       stall_seconds_valid(out->u.stall.seconds);
	case CKPT_MSG_READ_RANGES: {
		struct ckpt_msg_read_ranges *b = &out->u.read_ranges;
		uint64_t sum = 0;
		size_t pool = 0;

		b->step = rd_u64(r);
		b->slot = rd_u32(r);
		b->count = rd_u32(r);
		if (!r->ok || b->count < 1 || b->count > CKPT_READ_MAX)
			return false;
		for (uint32_t i = 0; i < b->count; i++) {
			struct ckpt_msg_read_item *it = &b->items[i];
			const uint8_t *name;
			size_t n;

			it->rank = rd_u32(r);
			it->offset = rd_u64(r);
			it->length = rd_u64(r);
			n = rd_u16(r);
			if (!r->ok || n > CKPT_TENSOR_NAME_MAX || pool + n + 1 > sizeof(b->names))
				return false;
			name = rd_take(r, n);
			if (!name || (n && ckpt_tensor_name_check((const char *)name, n) != 0))
				return false;
			/* Every read, and the slot they fill together, stay
			 * within 64 bits. */
			if (it->length > UINT64_MAX - it->offset || it->length > UINT64_MAX - sum)
				return false;
			sum += it->length;
			memcpy(b->names + pool, name, n);
			b->names[pool + n] = '\0';
			it->name_len = (uint16_t)n;
			it->name_off = (uint16_t)pool;
			pool += n + 1;
		}
		return r->ok && b->step != CKPT_NO_STEP && b->slot != CKPT_NO_SLOT;
	}
	case CKPT_MSG_READ_RANGES_OK: {
		struct ckpt_msg_read_ranges_ok *b = &out->u.read_ranges_ok;

		b->step = rd_u64(r);
		b->slot = rd_u32(r);
		b->count = rd_u32(r);
		if (!r->ok || b->count < 1 || b->count > CKPT_READ_MAX)
			return false;
		for (uint32_t i = 0; i < b->count; i++) {
			b->results[i].result = (int32_t)rd_u32(r);
			b->results[i].total = rd_u64(r);
			if (b->results[i].result > 0)
				return false;
		}
		rd_str(r, b->message, REASON_MAX);
		return r->ok && b->step != CKPT_NO_STEP && b->slot != CKPT_NO_SLOT;
	}
	default:
		return false;
	}
}

/* The step a decoded message names that is out of range, if any. Only
 * bodies that start with their step are reported as -ERANGE; a LIST_OK
 * with such a step is simply malformed. */
static bool step_out_of_range(const struct ckpt_msg *m, uint64_t *step)
{
	switch (m->type) {
	case CKPT_MSG_SAVE:
	case CKPT_MSG_SAVE_OK:
	case CKPT_MSG_SKIP:
	case CKPT_MSG_QUERY:
	case CKPT_MSG_STALL:
	case CKPT_MSG_RESTORE_OK:
	case CKPT_MSG_READ_RANGES:
	case CKPT_MSG_READ_RANGES_OK:
		*step = m->u.step.step;
		return !step_ok(*step, false);
	case CKPT_MSG_RESTORE:
	case CKPT_MSG_RESTORE_AGREED:
	case CKPT_MSG_STATUS:
		*step = m->u.step.step;
		return !step_ok(*step, true);
	default:
		return false;
	}
}

int ckpt_msg_decode(const void *buf, size_t len, struct ckpt_msg *out)
{
	const uint8_t *p = buf;
	uint32_t type, length;
	struct rd r;

	if (!buf || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	if (len < CKPT_WIRE_HDR_BYTES)
		return -EBADMSG;
	if (get_le32(p) != CKPT_WIRE_MAGIC)
		return -EBADMSG;
	if (get_le16(p + 4) != CKPT_WIRE_VERSION)
		return -EPROTONOSUPPORT;
	type = get_le16(p + 6);
	length = get_le32(p + 8);
	if (length != len)
		return -EBADMSG;
	if (len > CKPT_MSG_MAX_BYTES)
		return -E2BIG;
	out->type = type;
	out->seq = get_le32(p + 12);
	rd_init(&r, p + CKPT_WIRE_HDR_BYTES, len - CKPT_WIRE_HDR_BYTES);
	if (!decode_body(type, &r, out) || !r.ok || r.pos != r.len) {
		memset(out, 0, sizeof(*out));
		return -EBADMSG;
	}
	uint64_t step;
	if (step_out_of_range(out, &step)) {
		uint32_t seq = out->seq;

		memset(out, 0, sizeof(*out));
		out->type = type;
		out->seq = seq;
		out->u.step.step = step;
		return -ERANGE;
	}
	return 0;
}

unsigned ckpt_msg_fd_count(uint32_t type)
{
	return type == CKPT_MSG_HELLO_OK ? 1 : 0;
}

const char *ckpt_msg_type_name(uint32_t type)
{
	static const char *const names[] = {
		[CKPT_MSG_HELLO] = "HELLO",
		[CKPT_MSG_HELLO_OK] = "HELLO_OK",
		[CKPT_MSG_SAVE] = "SAVE",
		[CKPT_MSG_SAVE_OK] = "SAVE_OK",
		[CKPT_MSG_STATUS] = "STATUS",
		[CKPT_MSG_SKIP] = "SKIP",
		[CKPT_MSG_QUERY] = "QUERY",
		[CKPT_MSG_LIST] = "LIST",
		[CKPT_MSG_LIST_OK] = "LIST_OK",
		[CKPT_MSG_RESTORE] = "RESTORE",
		[CKPT_MSG_RESTORE_OK] = "RESTORE_OK",
		[CKPT_MSG_RELEASE] = "RELEASE",
		[CKPT_MSG_ERROR] = "ERROR",
		[CKPT_MSG_BYE] = "BYE",
		[CKPT_MSG_STALL] = "STALL",
		[CKPT_MSG_RESTORE_AGREED] = "RESTORE_AGREED",
		[CKPT_MSG_READ_RANGES] = "READ_RANGES",
		[CKPT_MSG_READ_RANGES_OK] = "READ_RANGES_OK",
	};

	if (type < sizeof(names) / sizeof(names[0]) && names[type])
		return names[type];
	return "UNKNOWN";
}

/* ---- Features notice (PROTOCOL.md, "Extensions within version 1") ---- */

static const struct {
	uint32_t bit;
	const char *token;
} feature_tokens[] = {
	{ CKPT_FEATURE_STALL, "stall" },
	{ CKPT_FEATURE_AGREE, "agree" },
	{ CKPT_FEATURE_READ, "read_ranges" },
};
#define FEATURE_TOKEN_MAX 32

void ckpt_msg_features_notice(struct ckpt_msg *m, uint32_t features)
{
	size_t len = 0;

	memset(m, 0, sizeof(*m));
	m->type = CKPT_MSG_STATUS;
	m->seq = 0;
	m->u.status.step = CKPT_NO_STEP;
	m->u.status.state = CKPT_STATE_UNKNOWN;
	m->u.status.error = 0;
	m->u.status.slot_freed = CKPT_NO_SLOT;
	for (size_t i = 0; i < sizeof(feature_tokens) / sizeof(feature_tokens[0]); i++) {
		size_t n = strlen(feature_tokens[i].token);

		if (!(features & feature_tokens[i].bit))
			continue;
		if (len + (len ? 1 : 0) + n > CKPT_REASON_MAX)
			break;
		if (len)
			m->u.status.reason[len++] = ' ';
		memcpy(m->u.status.reason + len, feature_tokens[i].token, n);
		len += n;
	}
	m->u.status.reason[len] = '\0';
}

bool ckpt_msg_is_features_notice(const struct ckpt_msg *m)
{
	return m && m->type == CKPT_MSG_STATUS && m->seq == 0 &&
	       m->u.status.step == CKPT_NO_STEP && m->u.status.state == CKPT_STATE_UNKNOWN &&
	       m->u.status.error == 0 && m->u.status.slot_freed == CKPT_NO_SLOT;
}

static bool token_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

uint32_t ckpt_features_parse(const char *tokens)
{
	uint32_t features = 0;
	const char *p = tokens;

	if (!p)
		return 0;
	while (*p) {
		size_t n = 0;
		bool ok = true;

		while (p[n] && p[n] != ' ') {
			ok &= token_char(p[n]);
			n++;
		}
		if (ok && n >= 1 && n <= FEATURE_TOKEN_MAX)
			for (size_t i = 0; i < sizeof(feature_tokens) / sizeof(feature_tokens[0]); i++)
				if (strlen(feature_tokens[i].token) == n &&
				    !memcmp(feature_tokens[i].token, p, n))
					features |= feature_tokens[i].bit;
		p += n;
		while (*p == ' ')
			p++;
	}
	return features;
}
