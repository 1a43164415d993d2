/* SPDX-License-Identifier: MIT */
/*
 * libckpt internals shared by client.c, save.c and restore.c.
 * Every field of struct ckpt_ctx is guarded by ctx->lock unless noted.
 *
 * Locking: ctx->lock is held only for work in memory and non-blocking
 * socket I/O; nobody blocks while holding it. A call that must wait for
 * ckptd registers a waiter for its request's seq (ctx_await) and waits
 * with the lock released: one thread at a time polls the socket (the
 * poller, ctx->polling), the others sleep on ctx->cond. Whoever reads a
 * message (the poller, or any call draining the socket) routes it: a
 * reply to its waiter, STATUS to the records. ctx_notify() wakes everyone
 * after each change.
 */
#ifndef CKPT_LIBCKPT_INTERNAL_H
#define CKPT_LIBCKPT_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

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

/* A call waiting for the reply to one request (on its own stack). */
struct ckpt_waiter {
	struct ckpt_waiter *next;
	uint32_t seq;
	uint64_t generation;   /* the connection the request went out on */
	bool done;
	struct ckpt_msg *reply;
	/* The request, where its reply changes state the moment it is read
	 * (SAVE_OK), or NULL. */
	const struct ckpt_msg *request;
};

struct step_record {
	bool used;
	uint64_t seen;      /* insertion order, for eviction */
	ckpt_status st;
};

struct ckpt_ctx {
	pthread_mutex_t lock;
	pthread_cond_t cond;  /* CLOCK_MONOTONIC; broadcast by ctx_notify() */
	/* The process that connected (immutable): in a forked child the
	 * context is a copy that must not touch the parent's connection. */
	pid_t owner_pid;

	/* Descriptors that live from connect to close (immutable). */
	int epoll_fd;  /* ckpt_fd(): the socket and news_fd */
	int news_fd;   /* eventfd: news taken off the socket, or a drop */
	int wake_fd;   /* eventfd: wakes the poller */

	bool polling;     /* a thread waits in poll() on the socket */
	bool connecting;  /* a thread is (re)connecting, lock released */
	struct ckpt_waiter *waiters;
	int drop_error;   /* why the last connection was dropped */

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

static inline bool ctx_forked(const ckpt_ctx *ctx)
{
	return getpid() != ctx->owner_pid;
}

/* The original (libckpt 0.1) ckpt_tensor_desc, which binaries built
 * against 0.1's ckpt.h pass to the LIBCKPT_0.1 versions of the calls. */
struct ckpt_tensor_desc_v0_1 {
	const char *name;
	uint32_t dtype;
	uint32_t ndim;
	uint64_t global_shape[CKPT_MAX_DIMS];
	uint64_t offset[CKPT_MAX_DIMS];
	uint64_t shape[CKPT_MAX_DIMS];
};
_Static_assert(offsetof(ckpt_tensor_desc, struct_size) == sizeof(struct ckpt_tensor_desc_v0_1),
	       "ckpt_tensor_desc must start with the 0.1 layout");

/* Bind `impl` as `name@@LIBCKPT_0.2` (what new builds link) and
 * `impl_v0_1` as `name@LIBCKPT_0.1` (what 0.1 binaries were linked to). */
#define CKPT_SYMVER(impl, name)                                   \
	__asm__(".symver " #impl "," #name "@@LIBCKPT_0.2");        \
	__asm__(".symver " #impl "_v0_1," #name "@LIBCKPT_0.1")

/* client.c: to be called with ctx->lock held. */
void ctx_arena_unref(struct ckpt_arena *arena);
int ctx_ensure_connected(ckpt_ctx *ctx, int timeout_ms);
int ctx_send(ckpt_ctx *ctx, struct ckpt_msg *m);
/* Wait for the reply to seq, sent on this connection with the lock held
 * since (STATUS on the way are processed). The lock is released while it
 * waits. timeout_ms < 0: no limit. Returns 0, -ETIMEDOUT or a connection
 * error; on 0 the connection is still the one seq went out on, unless
 * the reply is an ERROR. */
int ctx_await(ckpt_ctx *ctx, uint32_t seq, int timeout_ms, struct ckpt_msg *reply);
/* ctx_await for a request whose reply is applied by the reader (SAVE). */
int ctx_await_request(ckpt_ctx *ctx, uint32_t seq, const struct ckpt_msg *request,
		      int timeout_ms, struct ckpt_msg *reply);
/* Wait with the lock released until something may have changed (a
 * message on the socket or handled by another thread, a drop, a connect)
 * or timeout_ms passes; the caller re-checks what it waits for. */
void ctx_wait_io(ckpt_ctx *ctx, int timeout_ms);
/* Something changed: wake waiters and the poller. */
void ctx_notify(ckpt_ctx *ctx);
/* ckpt_fd()'s news has been taken in. */
void ctx_news_clear(ckpt_ctx *ctx);
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
/* The largest struct_size of a ckpt_tensor_desc taken as a size (a newer
 * ckpt.h's); a larger one is refused without reading past our struct. */
#define CKPT_TENSOR_DESC_MAX_BYTES 1024u
/* Copy what the caller's descriptor holds (by its struct_size) into a
 * full one of this library's layout. 0 or -E2BIG. */
int tensor_desc_load(const ckpt_tensor_desc *in, ckpt_tensor_desc *out);
/* The 0.1 layout, as a descriptor of this library's. */
void tensor_desc_from_v0_1(const struct ckpt_tensor_desc_v0_1 *in, ckpt_tensor_desc *out);

#endif
