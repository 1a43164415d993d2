/* SPDX-License-Identifier: MIT */
/*
 * libckpt internals shared by client.c, save.c and restore.c.
 * Every field of struct ckpt_ctx is guarded by ctx->lock unless noted.
 */
#ifndef CKPT_LIBCKPT_INTERNAL_H
#define CKPT_LIBCKPT_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"
#include "proto.h"

/*
 * One mapping of a daemon arena. Save and restore handles hold a reference
 * so that a reconnect (which maps a new arena) never pulls memory from
 * under a caller that is still copying into or out of the old one.
 */
struct ckpt_arena {
	void *base;
	size_t bytes;
	unsigned refs;
};

enum slot_owner {
	SLOT_FREE = 0,     /* ours, unused */
	SLOT_SAVING,       /* ours, a ckpt_save handle is filling it */
	SLOT_DAEMON,       /* handed over in SAVE; back with STATUS.slot_freed */
	SLOT_RESTORING,    /* RESTORE sent or restore handle open; back with RELEASE */
};

/* Recent steps whose outcome we know; older ones are forgotten. */
#define CKPT_STEP_RECORDS 128
/* Unread events beyond this drop the oldest. */
#define CKPT_EVENT_QUEUE 256
/* Auto-reconnect from ckpt_save_begin() must not stall training. */
#define CKPT_AUTO_RECONNECT_MS 1000

struct step_record {
	bool used;
	uint64_t seen;      /* insertion order, for eviction */
	ckpt_status st;
};

/* A caller waiting for the reply to seq with ctx->lock released (read.c):
 * whoever reads that reply off the socket parks it here. */
struct ctx_waiter {
	struct ctx_waiter *next;
	uint32_t seq;
	bool done;
	struct ckpt_msg reply;
};

struct ckpt_ctx {
	pthread_mutex_t lock;

	/* From the options, kept for reconnects. */
	char socket_path[108];
	struct ckpt_msg_hello hello;
	uint32_t connect_timeout_ms;
	uint32_t handshake_timeout_ms;

	/* The connection; fd is -1 while disconnected. */
	int fd;
	uint64_t generation;  /* bumped by every (re)connect */
	uint32_t next_seq;
	struct ckpt_arena *arena;
	uint64_t slot_bytes;
	uint32_t slot_count;
	uint32_t chunk_bytes;
	bool skip_policy;
	uint64_t hello_latest; /* HELLO_OK.latest_step */
	uint32_t features;     /* CKPT_FEATURE_* of ckptd's notice on this connection */
	uint8_t *slots;        /* enum slot_owner per slot */

	/* Steps must increase across the context's life. */
	bool have_last_step;
	uint64_t last_step;

	struct step_record records[CKPT_STEP_RECORDS];
	uint64_t record_clock;

	ckpt_status events[CKPT_EVENT_QUEUE];
	unsigned ev_head, ev_count;

	struct ctx_waiter *waiters;  /* replies awaited without the lock (read.c) */
	char read_error[CKPT_REASON_MAX + 1]; /* ckpt_read_error() */
};

struct ckpt_save {
	ckpt_ctx *ctx;
	int64_t begin_ns;     /* CLOCK_MONOTONIC on entering ckpt_save_begin */
	struct ckpt_arena *arena;
	uint64_t generation;
	uint64_t step;
	uint32_t slot;
	uint8_t *base;        /* start of the slot */
	uint64_t slot_bytes;
	uint64_t cursor;      /* next free aligned offset */
	struct ckpt_tensor *tensors; /* names malloc'd */
	uint32_t count, cap;
	bool have_blob;
	uint64_t blob_offset, blob_bytes;
	char why[CKPT_REASON_MAX + 1]; /* ckpt_save_error() */
};

struct ckpt_restore {
	ckpt_ctx *ctx;
	struct ckpt_arena *arena;
	uint64_t generation;
	uint32_t slot;
	const uint8_t *base;
	uint64_t step;
	uint64_t data_bytes;
	uint64_t blob_offset, blob_bytes;
	bool have_warning;
	char warning[CKPT_REASON_MAX + 1];
	struct ckpt_table table;
};

/* An automatic reconnect waits no longer than an explicit one would. */
static inline int ctx_auto_reconnect_ms(const ckpt_ctx *ctx)
{
	return ctx->connect_timeout_ms < CKPT_AUTO_RECONNECT_MS ? (int)ctx->connect_timeout_ms
								: CKPT_AUTO_RECONNECT_MS;
}

static inline uint64_t ckpt_align_up(uint64_t v)
{
	return (v + (CKPT_ALIGN - 1)) & ~(uint64_t)(CKPT_ALIGN - 1);
}

/* client.c: to be called with ctx->lock held. */
void ctx_arena_unref(struct ckpt_arena *arena);
int ctx_ensure_connected(ckpt_ctx *ctx, int timeout_ms);
int ctx_send(ckpt_ctx *ctx, struct ckpt_msg *m);
/* Wait for the reply to seq (STATUS on the way are processed).
 * timeout_ms < 0: no limit. Returns 0, -ETIMEDOUT or a connection error. */
int ctx_await(ckpt_ctx *ctx, uint32_t seq, int timeout_ms, struct ckpt_msg *reply);
/* Process whatever is readable without blocking. 0 or a connection error. */
/* Make sure ckptd's features notice of this connection has been read. */
void ctx_settle_features(ckpt_ctx *ctx);
int ctx_drain(ckpt_ctx *ctx);
/* Wait until a slot is SLOT_FREE, processing STATUS. Index or -errno. */
int ctx_wait_free_slot(ckpt_ctx *ctx);
int ctx_find_free_slot(const ckpt_ctx *ctx);
void ctx_record(ckpt_ctx *ctx, uint64_t step, int state, int error, const char *reason);
void ctx_drop(ckpt_ctx *ctx, int error, const char *why);

/* util.c: validate a descriptor (name too if check_name) and compute its
 * byte size. 0, -CKPT_E_BAD_NAME, -EINVAL or -EOVERFLOW. */
int tensor_desc_check(const ckpt_tensor_desc *desc, bool check_name, uint64_t *bytes);

#endif
