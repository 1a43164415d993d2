/* SPDX-License-Identifier: MIT */
/*
 * libckpt: hand a training rank's state to the node's ckptd and get it back.
 *
 * A save costs the caller one copy into shared memory; ckptd makes it durable,
 * and commits the step once every rank of the job has it durable.
 *
 * Conventions
 *  - Every function returning int returns 0 (or a count) on success and a
 *    negative value on failure: -errno for system errors, or -CKPT_E_* for
 *    service errors. ckpt_strerror() names both.
 *  - Nothing here logs, exits or keeps global state. A ckpt_ctx may be used
 *    from several threads. Calls on one context take a lock of the context
 *    only for what they do in memory and for non-blocking socket I/O: a
 *    call that waits for ckptd (ckpt_restore_open() of a large step,
 *    ckpt_list(), ckpt_latest(), ckpt_wait(), ckpt_save_finish() waiting
 *    for SAVE_OK, a connect or reconnect) waits with the lock released, so
 *    ckpt_poll(), ckpt_next_event() and ckpt_fd() on other threads keep
 *    answering at once. Replies reach the call that asked, whichever thread
 *    read them off the socket; outcomes (STATUS) read by any thread are
 *    recorded for all. A ckpt_save or ckpt_restore handle belongs to one
 *    thread at a time.
 *  - Sizes: byte counts of memory the caller holds or maps are size_t (the
 *    arena is mapped whole, so nothing in it exceeds SIZE_MAX); sizes of
 *    tensors and slots, and step numbers, are uint64_t. Counts returned as
 *    int are bounded far below INT_MAX (CKPT_MAX_TENSORS tensors of a
 *    rank, committed steps of a job).
 *  - Structs the caller passes in (ckpt_options, ckpt_tensor_desc) carry a
 *    struct_size, so that fields can be appended without an ABI break.
 *  - Free functions accept NULL.
 */
#ifndef CKPT_H
#define CKPT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CKPT_EXPORT __attribute__((visibility("default")))
#else
#define CKPT_EXPORT
#endif

#define CKPT_VERSION_MAJOR 0
#define CKPT_VERSION_MINOR 2

/* Service errors, returned negated. Values are pinned: never renumber. */
enum ckpt_error {
	CKPT_E_PROTOCOL = 1000,     /* peer broke the wire protocol */
	CKPT_E_DISCONNECTED = 1001, /* ckptd went away; reconnect and retry */
	CKPT_E_SKIPPED = 1002,      /* save skipped: no free slot (policy "skip") */
	CKPT_E_NO_CHECKPOINT = 1003,/* no committed step (that verifies) */
	CKPT_E_CORRUPT = 1004,      /* checksum or format check failed */
	CKPT_E_TOO_BIG = 1005,      /* save larger than the slot negotiated at connect */
	CKPT_E_BAD_NAME = 1006,     /* job or tensor name refused (see PROTOCOL.md) */
	CKPT_E_NOT_FOUND = 1007,    /* no such tensor in the restored step */
	CKPT_E_STEP_ORDER = 1008,   /* step not greater than the previous save */
	CKPT_E_EXISTS = 1009,       /* step already committed */
	CKPT_E_REFUSED = 1010,      /* ckptd refused the client (credentials, limits, world size) */
	CKPT_E_ABORTED = 1011,      /* step abandoned: another rank failed or left */
	CKPT_E_BUSY = 1012,         /* a slot or rank is in use */
	CKPT_E_VERSION = 1013,      /* protocol or format version not understood */
};

/*
 * Name of a negative return value: ckpt_strerror(-ENOSPC),
 * ckpt_strerror(-CKPT_E_SKIPPED). Returns a static string, never NULL.
 */
CKPT_EXPORT const char *ckpt_strerror(int err);

/* Element types. Values are pinned (they are written to disk). */
enum ckpt_dtype {
	CKPT_DTYPE_U8 = 1,
	CKPT_DTYPE_I8 = 2,
	CKPT_DTYPE_U16 = 3,
	CKPT_DTYPE_I16 = 4,
	CKPT_DTYPE_U32 = 5,
	CKPT_DTYPE_I32 = 6,
	CKPT_DTYPE_U64 = 7,
	CKPT_DTYPE_I64 = 8,
	CKPT_DTYPE_F16 = 9,
	CKPT_DTYPE_BF16 = 10,
	CKPT_DTYPE_F32 = 11,
	CKPT_DTYPE_F64 = 12,
	CKPT_DTYPE_BOOL = 13,
	CKPT_DTYPE_F8E4M3 = 14,
	CKPT_DTYPE_F8E5M2 = 15,
};

/* Bytes per element, or 0 for an unknown dtype. */
CKPT_EXPORT size_t ckpt_dtype_size(int dtype);
/* "f32", "bf16", ...; NULL for an unknown dtype. */
CKPT_EXPORT const char *ckpt_dtype_name(int dtype);

#define CKPT_MAX_DIMS 8
#define CKPT_TENSOR_NAME_MAX 255 /* bytes, without the NUL */
#define CKPT_JOB_NAME_MAX 128
/*
 * Step numbers are 0..CKPT_STEP_MAX: a step's directory is "step-" and ten
 * decimal digits, so that listing order is step order (FORMAT.md, "Step
 * numbers"). Calls given a step above it (other than CKPT_STEP_LATEST
 * where that is allowed) return -ERANGE.
 */
#define CKPT_STEP_MAX 9999999999ull

/*
 * A tensor, or this rank's slice of one. The slice is the box
 * [offset[d], offset[d] + shape[d]) of a tensor of global_shape, stored
 * row-major (C order). A tensor that is not split has offset 0 and
 * shape == global_shape.
 *
 * Versioning: struct_size is 0 (what a designated or zero initialiser
 * gives: "the original layout", name .. shape) or sizeof(ckpt_tensor_desc)
 * of the ckpt.h the caller was built against. Zero the struct (or use an
 * initialiser) before filling it in.
 *  - Calls reading it (ckpt_tensor_bytes, ckpt_save_add,
 *    ckpt_save_reserve) read the original fields when struct_size is
 *    smaller than a layout holding it (0 included), else the fields it
 *    covers. A struct_size larger than this library's struct (a newer
 *    ckpt.h) is accepted when the bytes it does not know are zero, else
 *    -E2BIG; one above 1024 is -E2BIG without being read.
 *  - ckpt_restore_tensor_at() fills it and needs nothing set: with
 *    struct_size below a layout holding it, or above 1024, it writes the
 *    original fields only; else the fields both its struct and the
 *    caller's hold, leaving struct_size and fields it does not know as
 *    they were. Set struct_size = sizeof(ckpt_tensor_desc) to get fields
 *    appended after the original ones.
 * Binaries built against libckpt 0.1's ckpt.h, whose struct ends at shape,
 * bind to the LIBCKPT_0.1 versions of these calls, which read and write
 * only that layout.
 */
typedef struct ckpt_tensor_desc {
	/* 1..255 bytes of valid UTF-8; no '/', no control characters
	 * U+0000..U+001F or DEL; not "." or ".." (FORMAT.md, "Tensor
	 * names"). */
	const char *name;
	uint32_t dtype;    /* enum ckpt_dtype */
	uint32_t ndim;     /* 0..CKPT_MAX_DIMS; 0 is a scalar */
	uint64_t global_shape[CKPT_MAX_DIMS];
	uint64_t offset[CKPT_MAX_DIMS];
	uint64_t shape[CKPT_MAX_DIMS];
	/* 0 or sizeof(ckpt_tensor_desc); see above. New fields go after it. */
	uint32_t struct_size;
} ckpt_tensor_desc;

/* Bytes of the slice the descriptor describes, or 0 if it is invalid. */
CKPT_EXPORT uint64_t ckpt_tensor_bytes(const ckpt_tensor_desc *desc);

typedef struct ckpt_ctx ckpt_ctx;

typedef struct ckpt_options {
	/* Set to sizeof(ckpt_options): lets the library grow this struct. */
	uint32_t struct_size;
	/* ckptd's socket; NULL: $CKPT_SOCKET, else the default
	 * ($XDG_RUNTIME_DIR/ckptd.sock for non-root users that have it,
	 * else /run/ckpt/ckptd.sock). Borrowed for the call only. */
	const char *socket_path;
	/* The job's name: 1..128 of [A-Za-z0-9._-], not starting with '.'. */
	const char *job;
	uint32_t rank;        /* 0..world_size-1 */
	uint32_t world_size;  /* ranks in the job, on all nodes */
	uint32_t local_rank;  /* rank on this node (informational) */
	/* The largest save this rank will make: tensor bytes plus the user
	 * blob. ckptd sizes the shared-memory slots from it. */
	uint64_t max_save_bytes;
	/* Milliseconds to wait for ckptd's socket to accept the connection
	 * (ckptd may be starting); 0: 10000. */
	uint32_t connect_timeout_ms;
	/* Milliseconds a connected ckptd may take to answer: it faults in
	 * the shared memory first (about a second per GiB on slow machines);
	 * 0: 120000. Callers built against an older ckpt.h, whose
	 * struct_size ends before this field, get the default. */
	uint32_t handshake_timeout_ms;
	/* Optional (NULL: none): where ckpt_connect() writes why it failed,
	 * NUL-terminated, cut to error_bytes. When ckptd refused the
	 * connection this is ckptd's own reason, e.g. "job j: rank 1 says
	 * world size 4, connected ranks say 2"; else what is wrong with the
	 * options, or ckpt_strerror() of the result. "" on success. Borrowed
	 * for the call only. */
	char *error;
	size_t error_bytes;
} ckpt_options;

/*
 * Connect to the node's ckptd and map the shared-memory arena it hands out.
 * On success *out owns the connection; release it with ckpt_close().
 * On failure *out is untouched, and opts->error (if given) says why.
 */
CKPT_EXPORT int ckpt_connect(const ckpt_options *opts, ckpt_ctx **out);

/*
 * Close the connection and unmap the arena. Open save and restore handles
 * of this context must be finished or closed first, and no other thread
 * may be in a call on the context.
 *
 * After fork(): the child's copy of a context shares the parent's socket.
 * A context knows the process that connected it; in any other process
 * (a forked child) ckpt_close() only drops the child's copy (closes the
 * child's descriptors, unmaps the child's mapping, frees its memory)
 * without sending anything or taking the context's lock (which another
 * thread of the parent may have held at the fork), and the parent's
 * connection goes on unaffected. Every other call on the context in the
 * child that would read or write the socket returns -CKPT_E_DISCONNECTED
 * (ckpt_arena() returns NULL); ckpt_save_finish(), ckpt_save_abort() and
 * ckpt_restore_close() of a handle only free it there. A child that needs
 * ckptd connects anew.
 */
CKPT_EXPORT void ckpt_close(ckpt_ctx *ctx);

/*
 * Reconnect after ckptd went away (-CKPT_E_DISCONNECTED). Outcomes of saves
 * not yet reported are reported as failed with -CKPT_E_DISCONNECTED.
 * ckpt_save_begin() reconnects by itself; this is for callers that want to
 * know sooner. ckpt_fd() stays the same descriptor across a reconnect.
 */
CKPT_EXPORT int ckpt_reconnect(ckpt_ctx *ctx);

/* Slot geometry negotiated at connect. */
CKPT_EXPORT uint64_t ckpt_slot_bytes(const ckpt_ctx *ctx);
CKPT_EXPORT uint32_t ckpt_slot_count(const ckpt_ctx *ctx);

/*
 * The shared arena (all slots), e.g. for cudaHostRegister(). Valid until
 * ckpt_close() or a reconnect (which maps a new arena; compare the pointer).
 */
CKPT_EXPORT void *ckpt_arena(const ckpt_ctx *ctx, size_t *bytes);

/* ---- Saving ----------------------------------------------------------- */

typedef struct ckpt_save ckpt_save;

/*
 * Begin a save of `step` (0..CKPT_STEP_MAX, else -ERANGE; strictly greater
 * than this context's previous save, else -CKPT_E_STEP_ORDER). Takes a
 * free slot. With no free slot ckptd's backpressure policy
 * decides: "block" waits for one, "skip" returns -CKPT_E_SKIPPED (the
 * skip is reported to ckptd and counted). On success *out is the handle,
 * to be passed to ckpt_save_finish() or ckpt_save_abort().
 */
CKPT_EXPORT int ckpt_save_begin(ckpt_ctx *ctx, uint64_t step, ckpt_save **out);

/* Copy a tensor (ckpt_tensor_bytes(desc) bytes at data) into the slot.
 * The name is copied. A name outside the tensor name rules (see
 * ckpt_tensor_desc) is -CKPT_E_BAD_NAME here, at the call, and
 * ckpt_save_error() says which and why; the save stays usable. */
CKPT_EXPORT int ckpt_save_add(ckpt_save *save, const ckpt_tensor_desc *desc,
			      const void *data);

/*
 * Reserve room for a tensor and return where its bytes go (*dst, in the
 * arena, 4096-byte aligned), for callers that fill it themselves (e.g.
 * cudaMemcpyAsync). The bytes must be in place before ckpt_save_finish().
 */
CKPT_EXPORT int ckpt_save_reserve(ckpt_save *save, const ckpt_tensor_desc *desc,
				  void **dst);

/*
 * Why the last ckpt_save_add() or ckpt_save_reserve() on this handle was
 * refused, naming the step and the tensor (e.g. "step 7: tensor name
 * "w\xff" is not valid UTF-8"), or "" if it was not. Valid until the next
 * call on the handle; never NULL.
 */
CKPT_EXPORT const char *ckpt_save_error(const ckpt_save *save);

/* Attach an opaque per-rank blob (RNG state, data-loader position);
 * copied. At most one per save; a second call replaces the first. */
CKPT_EXPORT int ckpt_save_set_blob(ckpt_save *save, const void *blob, size_t len);

/*
 * Hand the save to ckptd. Returns once ckptd has accepted it (the data is
 * already in shared memory): the outcome comes later, see ckpt_poll().
 * The handle is consumed whatever the result. An accepted save's stall
 * (ckpt_save_begin() .. this call) is reported to ckptd for its metrics
 * when ckptd takes such reports (PROTOCOL.md, STALL).
 *
 * From this call on the slot is ckptd's until the save's outcome frees it:
 * every byte must be in place before the call (synchronise device copies
 * into memory from ckpt_save_reserve(), e.g. cudaStreamSynchronize()). A
 * committed step holds exactly the bytes ckptd checksummed: ckptd checks
 * each chunk again after writing it, and a rank that wrote into its slot
 * after this call gets FAILED with -CKPT_E_CORRUPT and a reason naming the
 * step, tensor and byte range (docs/OPERATIONS.md). A write that lands
 * before ckptd first reads a chunk cannot be detected.
 */
CKPT_EXPORT int ckpt_save_finish(ckpt_save *save);

/* Drop a save that was begun; its slot is free again. */
CKPT_EXPORT void ckpt_save_abort(ckpt_save *save);

/* ---- Outcomes --------------------------------------------------------- */

enum ckpt_state {
	CKPT_STATE_UNKNOWN = 0,   /* not a step this context saved or heard of */
	CKPT_STATE_PENDING = 1,   /* accepted, being written */
	CKPT_STATE_DURABLE = 2,   /* this rank's shard is durable */
	CKPT_STATE_COMMITTED = 3, /* every rank durable, manifest written */
	CKPT_STATE_SKIPPED = 4,   /* not saved (backpressure) */
	CKPT_STATE_FAILED = 5,    /* not saved; see error and reason */
};

CKPT_EXPORT const char *ckpt_state_name(int state);

typedef struct ckpt_status {
	uint64_t step;
	int state;       /* enum ckpt_state */
	int error;       /* 0, or -errno / -CKPT_E_* when FAILED or SKIPPED */
	char reason[256];/* human-readable detail naming file, rank and step */
} ckpt_status;

/*
 * Read what ckptd has reported so far, without blocking, and fill *st with
 * what is known of `step`. Returns 0 (-ERANGE past CKPT_STEP_MAX;
 * -CKPT_E_DISCONNECTED in a forked child, see ckpt_close()). Never waits
 * behind another thread's call that waits for ckptd.
 */
CKPT_EXPORT int ckpt_poll(ckpt_ctx *ctx, uint64_t step, ckpt_status *st);

/*
 * Wait until `step` is committed, skipped or failed, or timeout_ms passes
 * (-1: no limit). Returns 0 with *st filled, or -ETIMEDOUT.
 */
CKPT_EXPORT int ckpt_wait(ckpt_ctx *ctx, uint64_t step, int timeout_ms,
			  ckpt_status *st);

/*
 * Pop the next change of state (in arrival order) without blocking.
 * Returns 1 with *st filled, 0 if there is none. For logging outcomes
 * from a training loop.
 */
CKPT_EXPORT int ckpt_next_event(ckpt_ctx *ctx, ckpt_status *st);

/*
 * A descriptor for poll(), epoll or an event loop (asyncio's add_reader):
 * readable while ckptd's socket holds a message not read yet, and from
 * the moment any thread of the process records news (an event queued for
 * ckpt_next_event(), or a lost connection, whose pending steps become
 * FAILED) until ckpt_next_event() returns 0. A loop on it calls
 * ckpt_next_event() until it returns 0; ckpt_poll() and ckpt_wait() read
 * the socket but leave the news for the event consumer. Only wait on it
 * for readability; never read, write or close it.
 *
 * The descriptor is the same from ckpt_connect() to ckpt_close(): it
 * survives reconnects (by ckpt_reconnect() or the automatic one in
 * ckpt_save_begin()) and is valid while disconnected, so a loop may
 * register it once. (Before libckpt 0.2 it was the socket itself, which a
 * reconnect replaced, and -CKPT_E_DISCONNECTED while disconnected.)
 * Returns the descriptor, or -EINVAL for a NULL context.
 */
CKPT_EXPORT int ckpt_fd(const ckpt_ctx *ctx);

/* ---- Listing ---------------------------------------------------------- */

/*
 * Newest committed step of the job: 0 with *step set, or -CKPT_E_NO_CHECKPOINT.
 * ckptd answers from the checkpoint root's manifests (read when asked, not
 * from its memory, which may lag on a node that missed a commit), plus the
 * steps on S3 when its S3 tier is on: the same steps an agreed restore
 * chooses from. That a step is listed does not mean every rank's shard of
 * it verifies; only a restore reads the bytes.
 */
CKPT_EXPORT int ckpt_latest(ckpt_ctx *ctx, uint64_t *step);

/*
 * Committed steps, oldest first (the same source as ckpt_latest()). Writes
 * at most `cap` to steps and returns how many there are in all (which may
 * exceed cap). ckptd reports at most 2^32 - 1 steps in all; a count above
 * INT_MAX is returned as INT_MAX. ckptd sends the newest steps it can
 * fit in one reply (400): with more, the first ones written are not the
 * oldest committed.
 */
CKPT_EXPORT int ckpt_list(ckpt_ctx *ctx, uint64_t *steps, size_t cap);

/* ---- Restoring -------------------------------------------------------- */

#define CKPT_STEP_LATEST UINT64_MAX

enum ckpt_restore_flags {
	/* Fail rather than fall back to an older step when `step` does not
	 * verify. */
	CKPT_RESTORE_EXACT = 1u << 0,
	/* One step for the whole job: see "Agreed restore" below. The way
	 * every rank of a job should restore. */
	CKPT_RESTORE_AGREE = 1u << 1,
};

typedef struct ckpt_restore ckpt_restore;

/*
 * Ask ckptd to read this rank's shard of `step` (or CKPT_STEP_LATEST) into
 * a slot and verify every chunk. On success *out holds a slot until
 * ckpt_restore_close(); on failure *out is untouched.
 *
 * Agreed restore (flags & CKPT_RESTORE_AGREE; every rank of the job calls
 * it with the same step and flags): every rank gets the same step, the
 * newest committed one (at or below `step`) that every rank of the world
 * can read and verify. Each rank's request joins the job's restore round
 * in ckptd; each rank's shard of the candidate step is read and verified
 * into its slot (no extra read for the agreement), and the outcomes are
 * gathered by the job's coordinator (the node's ckptd, or node 0's in a
 * multi-node group). The call returns once every rank has an outcome:
 *  - every rank verified: 0, the same ckpt_restore_step() on every rank;
 *  - a rank's shard is damaged (checksum, format, a missing file): that
 *    step is marked bad for the job (logged, counted, and named in
 *    ckpt_restore_warning() on every rank) and every rank moves to the
 *    next older committed step; with CKPT_RESTORE_EXACT the call fails
 *    instead (-CKPT_E_CORRUPT);
 *  - a read error (EIO, EINTR, ENOMEM, a failed S3 fetch, ...) that
 *    persists after ckptd's bounded retries: every rank fails with that
 *    error (never a silent fallback to an older step);
 *  - no committed step verifies: -CKPT_E_NO_CHECKPOINT (nothing
 *    committed) or -CKPT_E_CORRUPT;
 *  - a rank that does not ask within ckptd's restore_agree_timeout_ms of
 *    the first: every rank that asked fails with -ETIMEDOUT, and the
 *    error message (ckptd's log) names the missing ranks;
 *  - a rank whose request disagrees with the round's (another step or
 *    flags, another world size) or that asks twice: -EINVAL / -CKPT_E_BUSY
 *    for it, and the round fails for the others.
 * -EOPNOTSUPP: ckptd is too old to agree (nothing was restored).
 * The candidates are the steps ckpt_list() reports, read from the root's
 * manifests when the round starts. A round ends with its outcome; ranks
 * asking after that start a new round.
 *
 * Without CKPT_RESTORE_AGREE (kept for compatibility; a single process
 * that is the whole job may use it): this rank alone; if its shard of
 * the step is damaged ckptd falls back to the next older committed step
 * unless CKPT_RESTORE_EXACT is given, and ckpt_restore_warning() says
 * why. Ranks of a job restoring this way may end up at different steps.
 * A read error is retried, then returned; it never causes a fallback.
 */
CKPT_EXPORT int ckpt_restore_open(ckpt_ctx *ctx, uint64_t step, unsigned flags,
				  ckpt_restore **out);

/* The step actually restored. */
CKPT_EXPORT uint64_t ckpt_restore_step(const ckpt_restore *r);
/* NULL, or why the requested step was not the one restored. */
CKPT_EXPORT const char *ckpt_restore_warning(const ckpt_restore *r);

/* Tensors in the shard, and their descriptors (names valid until close). */
CKPT_EXPORT int ckpt_restore_tensor_count(const ckpt_restore *r);
CKPT_EXPORT int ckpt_restore_tensor_at(const ckpt_restore *r, int i,
				       ckpt_tensor_desc *desc);

/*
 * Copy tensor `name` into buf (len must equal its byte size), or, with
 * buf NULL, only check that it exists and return -EMSGSIZE if len differs.
 * -CKPT_E_NOT_FOUND if the step has no such tensor.
 */
CKPT_EXPORT int ckpt_restore_tensor(ckpt_restore *r, const char *name,
				    void *buf, size_t len);

/* Where tensor `name`'s bytes are in the arena (read-only, valid until close). */
CKPT_EXPORT int ckpt_restore_tensor_ptr(ckpt_restore *r, const char *name,
					const void **data, size_t *len);

/* Copy the user blob into buf; returns its length (which may exceed cap, in
 * which case nothing is copied: call again with a larger buffer). A blob
 * longer than INT_MAX bytes cannot be returned this way (-EOVERFLOW): use
 * ckpt_restore_blob_ptr(), which has no such limit. */
CKPT_EXPORT int ckpt_restore_blob(ckpt_restore *r, void *buf, size_t cap);

/* Where the user blob's bytes are in the arena (read-only, valid until
 * close), and its length; *data NULL and *len 0 if the save had none.
 * Returns 0. Since libckpt 0.2 (LIBCKPT_0.2). */
CKPT_EXPORT int ckpt_restore_blob_ptr(ckpt_restore *r, const void **data, size_t *len);

/* Release the slot. */
CKPT_EXPORT void ckpt_restore_close(ckpt_restore *r);

/* ---- Reading any rank's items --------------------------------------------
 *
 * For loading a checkpoint at another world size (resharding): byte ranges
 * of any rank's tensors and blobs of a committed step, not only this
 * rank's own shard.
 */

/* One ranged read of a committed step (ckpt_read_ranges). */
typedef struct ckpt_read {
	uint32_t rank;       /* whose shard, 0..world_size-1 of the step */
	const char *tensor;  /* tensor name in that rank's table; NULL: that rank's blob */
	uint64_t offset;     /* byte offset into the item (a tensor's stored slice, row-major) */
	uint64_t length;     /* bytes to read into dst; 0: only report total */
	void *dst;           /* length bytes, caller's memory */
	int result;          /* out: 0, or -errno / -CKPT_E_* for this read (e.g. -ENOENT no such
	                      * tensor/rank, -ERANGE offset+length beyond the item, -CKPT_E_CORRUPT) */
	uint64_t total;      /* out: the item's full size in bytes (set whenever the item exists) */
} ckpt_read;

/*
 * Read byte ranges of any rank's items of committed `step` of this
 * context's job. Every read's bytes are verified against the rank index's
 * chunk CRCs (and the index against the manifest's digest) before they are
 * handed over. 0 when every read succeeded, else the first failing read's
 * error (each read's result says its own). Blocks until done; must not hold
 * the context lock that ckpt_poll/ckpt_next_event on another thread need
 * for the whole time.
 *
 * Ownership: `reads` and every tensor name and dst are the caller's,
 * borrowed for the call; only result, total and the dst bytes are written.
 * On failure a read's dst may hold part of its bytes.
 *
 * ckptd reads the step's files in the checkpoint root (a step only S3
 * holds must be restored into the root first) and puts the bytes into one
 * of this context's slots, from which they are copied into dst: the call
 * needs a free slot (it waits for one, as ckpt_save_begin() under the
 * "block" policy; -CKPT_E_BUSY when every slot is held by open handles of
 * this context), and reads longer than a slot are done in several rounds.
 * A rank's blob is an item like a tensor (total 0 when it saved none).
 *
 * Results per read: -ENOENT (no such rank in the step, no such tensor in
 * that rank's table), -ERANGE (offset + length beyond the item's total),
 * -CKPT_E_CORRUPT (a chunk, the index or the manifest does not verify),
 * -CKPT_E_NO_CHECKPOINT (`step` is not committed in the root), -EINVAL (a
 * NULL dst with a length), -CKPT_E_BAD_NAME (not a tensor name), another
 * -errno for a read error. The whole call: -EINVAL (ctx NULL, reads NULL
 * with n > 0), -ERANGE (step above CKPT_STEP_MAX), -EOPNOTSUPP (ckptd is
 * too old to serve ranged reads; nothing was read),
 * -CKPT_E_DISCONNECTED. ckpt_read_error() says why, naming the file, rank
 * and step.
 */
CKPT_EXPORT int ckpt_read_ranges(ckpt_ctx *ctx, uint64_t step, ckpt_read *reads, size_t n);

/*
 * Why the newest ckpt_read_ranges() on this context that failed failed
 * (ckptd's reason for the first failing read, e.g. "llama/step-0000000010/
 * rank-000002.shard: chunk 3 (...) fails its CRC-32C ..."), or "" when the
 * newest call succeeded. Copied into buf (cap bytes, NUL-terminated, cut
 * to fit); returns the reason's full length, or -EINVAL.
 */
CKPT_EXPORT int ckpt_read_error(ckpt_ctx *ctx, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
