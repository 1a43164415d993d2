/* SPDX-License-Identifier: MIT */
/*
 * proto: the libckpt <-> ckptd wire protocol and the on-disk formats,
 * as pure code (no I/O). Specs: proto/PROTOCOL.md and proto/FORMAT.md.
 *
 * All integers are little-endian on the wire and on disk. Decoders never
 * trust a length: every read is bounds-checked, every field validated, and
 * a decoder either fills its output completely (caller frees it with the
 * matching *_free) or returns a negative errno and leaves nothing to free.
 * Decoders return -EBADMSG for malformed input, -EPROTONOSUPPORT for an
 * unknown version, -E2BIG for input over the limits below.
 */
#ifndef CKPT_PROTO_H
#define CKPT_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ckpt.h"

/* ---- Limits ---------------------------------------------------------- */

#define CKPT_MSG_MAX_BYTES 4096u            /* one SEQPACKET message */
#define CKPT_MAX_TENSORS (1u << 20)         /* per rank and step */
#define CKPT_TABLE_MAX_BYTES (256u << 20)   /* encoded tensor table */
#define CKPT_ALIGN 4096u                    /* extent alignment in slots and shards */
#define CKPT_CHUNK_MIN (64u << 10)
#define CKPT_CHUNK_MAX (64u << 20)
#define CKPT_REASON_MAX 255u                /* status/error text, bytes */
#define CKPT_LIST_MAX 400u                  /* steps in one LIST_OK */
#define CKPT_NO_STEP UINT64_MAX
#define CKPT_NO_SLOT UINT32_MAX

/* ---- Names ----------------------------------------------------------- */

/* 0 if `job` is a valid job name (1..128 of [A-Za-z0-9._-], not starting
 * with '.'), else -CKPT_E_BAD_NAME. len is the byte length (no NUL needed). */
int ckpt_job_name_check(const char *job, size_t len);
/* 0 if `name` is a valid tensor name (FORMAT.md, "Tensor names": 1..255
 * bytes of valid UTF-8, no '/', no C0 control characters (U+0000..U+001F)
 * or DEL; not "." or ".."), else -CKPT_E_BAD_NAME. */
int ckpt_tensor_name_check(const char *name, size_t len);
/* Why `name` is not a valid tensor name ("is not valid UTF-8", ...), or
 * NULL if it is one. A static string. */
const char *ckpt_tensor_name_problem(const char *name, size_t len);
/* `name` (len bytes, any bytes) as printable ASCII for messages, logs and
 * JSON: bytes outside 0x20..0x7e, '"' and '\\' become \xHH; cut short
 * with "..." to fit cap. Always NUL-terminated (cap > 0). */
void ckpt_name_quote(char *out, size_t cap, const char *name, size_t len);

/* ---- Checksums -------------------------------------------------------- */

/* CRC-32C (Castagnoli), standard: crc32c("123456789") == 0xE3069283.
 * Chain calls by passing the previous result as crc (start with 0). */
uint32_t ckpt_crc32c(uint32_t crc, const void *buf, size_t len);
/* crc32c(A || B) from crc32c(A), crc32c(B) and len(B). */
uint32_t ckpt_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

/* ---- Layout ------------------------------------------------------------ */

/* Names inside <root>/<job>/ and step directories (see FORMAT.md).
 * Each writes a NUL-terminated name into buf and returns its length, or
 * -ENAMETOOLONG (buf too small). ckpt_step_dirname returns -ERANGE for a
 * step above CKPT_STEP_MAX; on any failure buf holds "" (cap > 0), never
 * a stale name: every caller checks the result. */
int ckpt_step_dirname(char *buf, size_t cap, uint64_t step);   /* step-0000000042 */
int ckpt_shard_filename(char *buf, size_t cap, uint32_t rank);  /* rank-000003.shard */
int ckpt_index_filename(char *buf, size_t cap, uint32_t rank);  /* rank-000003.index */
/* Parse "step-<10 digits>" (exactly); 0 and *step, or -EINVAL. */
int ckpt_step_dirname_parse(const char *name, uint64_t *step);
#define CKPT_MANIFEST_NAME "MANIFEST.json"
#define CKPT_LATEST_NAME "LATEST"

/*
 * S3 keys (FORMAT.md, "On S3"): the same names under a job key, which is
 * "<prefix>/<job>", or "<job>" under an empty prefix. A prefix is "" or
 * segments with no leading or trailing '/' (as s3_url_parse gives it); a
 * job key is never "". The writers work like the names above: the key's
 * length, or -ENAMETOOLONG (buf too small), -ERANGE (a step above
 * CKPT_STEP_MAX), -EINVAL (a bad prefix, job key, job name, or a file name
 * holding '/'), and on failure buf holds "" (cap > 0).
 */
int ckpt_s3_jobs_prefix(char *buf, size_t cap, const char *prefix);       /* "<prefix>/", or "" */
int ckpt_s3_job_key(char *buf, size_t cap, const char *prefix, const char *job);
int ckpt_s3_job_prefix(char *buf, size_t cap, const char *job_key);       /* "<job_key>/" */
int ckpt_s3_latest_key(char *buf, size_t cap, const char *job_key);       /* "<job_key>/LATEST" */
int ckpt_s3_steps_prefix(char *buf, size_t cap, const char *job_key);     /* "<job_key>/step-" */
/* "<job_key>/step-<N>/<name>"; name NULL: "<job_key>/step-<N>/", the
 * prefix of every object of the step. */
int ckpt_s3_step_key(char *buf, size_t cap, const char *job_key, uint64_t step,
		     const char *name);
/* A key relative to a job key, "step-<10 digits>/<rest>": 0, *step and
 * *rest (pointing into rel; may be "" or hold further '/'), or -EINVAL. */
int ckpt_s3_step_path_parse(const char *rel, uint64_t *step, const char **rest);
/* The same for a whole key, which must start with "<job_key>/": a key of
 * another job, prefix or layout is -EINVAL. step and rest may be NULL. */
int ckpt_s3_key_parse(const char *job_key, const char *key, uint64_t *step,
		      const char **rest);

/* Default socket path: $CKPT_SOCKET, else $XDG_RUNTIME_DIR/ckptd.sock for a
 * non-root user that has it, else /run/ckpt/ckptd.sock. */
int ckpt_default_socket_path(char *buf, size_t cap);

/* ---- Tensor tables ----------------------------------------------------- */

/* One extent of a shard: a tensor slice. */
struct ckpt_tensor {
	char *name;        /* NUL-terminated; owned by the table's pool */
	uint32_t dtype;
	uint32_t ndim;
	uint64_t global_shape[CKPT_MAX_DIMS];
	uint64_t offset[CKPT_MAX_DIMS];
	uint64_t shape[CKPT_MAX_DIMS];
	uint64_t data_offset;  /* from the start of the slot / shard, CKPT_ALIGN-aligned */
	uint64_t nbytes;       /* == product(shape) * dtype size */
	uint32_t crc32c;       /* of the nbytes; 0 in a SAVE (ckptd fills it in) */
};

struct ckpt_table {
	uint32_t count;
	struct ckpt_tensor *tensors; /* count entries */
	char *pool;                  /* names */
};

/* Bytes ckpt_table_encode() needs. */
size_t ckpt_table_encoded_size(const struct ckpt_tensor *tensors, uint32_t count);
/* Encode; returns bytes written or -ENOBUFS / -EINVAL. */
ssize_t ckpt_table_encode(const struct ckpt_tensor *tensors, uint32_t count,
			  void *buf, size_t cap);
/* Decode and validate each entry (names, dtype, ndim, slice inside the
 * global shape, nbytes consistent, alignment). Does not check layout. */
int ckpt_table_decode(const void *buf, size_t len, struct ckpt_table *out);
/* The same, and on failure a reason in err (if given): for a refused name
 * it names the entry, quotes the name (ckpt_name_quote) and says what is
 * wrong with it, and the result is -CKPT_E_BAD_NAME instead of -EBADMSG. */
int ckpt_table_decode_why(const void *buf, size_t len, struct ckpt_table *out,
			  char *err, size_t errlen);
/* Check that extents lie inside [0, data_bytes), do not overlap each other
 * or the blob extent [blob_offset, blob_offset + blob_bytes), and that names
 * are unique. 0 or -EBADMSG (with a reason in err if given). */
int ckpt_table_check_layout(const struct ckpt_table *t, uint64_t data_bytes,
			    uint64_t blob_offset, uint64_t blob_bytes,
			    char *err, size_t errlen);
/* Index of the tensor called name, or -1. */
int ckpt_table_find(const struct ckpt_table *t, const char *name);
/* Deep copy; 0 or -ENOMEM. */
int ckpt_table_copy(struct ckpt_table *dst, const struct ckpt_table *src);
void ckpt_table_free(struct ckpt_table *t);

/* ---- Wire messages ------------------------------------------------------ */

#define CKPT_WIRE_MAGIC 0x54504b43u /* "CKPT" */
#define CKPT_WIRE_VERSION 1u
#define CKPT_WIRE_HDR_BYTES 16u

enum ckpt_msg_type {
	CKPT_MSG_HELLO = 1,       /* c->d */
	CKPT_MSG_HELLO_OK = 2,    /* d->c, carries the arena memfd */
	CKPT_MSG_SAVE = 3,        /* c->d */
	CKPT_MSG_SAVE_OK = 4,     /* d->c */
	CKPT_MSG_STATUS = 5,      /* d->c, unsolicited or answering QUERY */
	CKPT_MSG_SKIP = 6,        /* c->d: a save was skipped (backpressure) */
	CKPT_MSG_QUERY = 7,       /* c->d */
	CKPT_MSG_LIST = 8,        /* c->d */
	CKPT_MSG_LIST_OK = 9,     /* d->c */
	CKPT_MSG_RESTORE = 10,    /* c->d */
	CKPT_MSG_RESTORE_OK = 11, /* d->c */
	CKPT_MSG_RELEASE = 12,    /* c->d: restore slot no longer needed */
	CKPT_MSG_ERROR = 13,      /* d->c */
	CKPT_MSG_BYE = 14,        /* c->d */
	CKPT_MSG_STALL = 15,      /* c->d: a save's stall; only if the features notice says "stall" */
	CKPT_MSG_RESTORE_AGREED = 16, /* c->d: RESTORE's body, one step for the whole job; only if
				       * the features notice says "agree" */
	CKPT_MSG_READ_RANGES = 17,    /* c->d: byte ranges of any rank's items of a committed step,
				       * into a slot; only if the features notice says "read_ranges" */
	CKPT_MSG_READ_RANGES_OK = 18, /* d->c: each read's result, the bytes in the slot */
};

#define CKPT_HELLO_F_SKIP_POLICY 1u   /* HELLO_OK.flags: backpressure is "skip" */
#define CKPT_RESTORE_F_EXACT 1u        /* RESTORE.flags */
#define CKPT_RESTORE_OK_F_FELL_BACK 1u /* RESTORE_OK.flags */

struct ckpt_msg_hello {
	char job[CKPT_JOB_NAME_MAX + 1];
	uint32_t rank, world_size, local_rank, flags;
	uint64_t max_save_bytes;
	uint32_t pid;
};

struct ckpt_msg_hello_ok {
	uint32_t slots;
	uint32_t flags;
	uint64_t slot_bytes;   /* multiple of CKPT_ALIGN */
	uint64_t arena_bytes;  /* slots * slot_bytes */
	uint32_t chunk_bytes;
	uint32_t reserved;
	uint64_t latest_step;  /* CKPT_NO_STEP if none */
};

/* The slot holds: extents (tensors, blob) from offset 0, then the encoded
 * tensor table at table_offset. */
struct ckpt_msg_save {
	uint64_t step;
	uint32_t slot;
	uint32_t flags;
	uint64_t data_bytes;   /* end of the last extent, rounded up to CKPT_ALIGN */
	uint64_t table_offset; /* CKPT_ALIGN-aligned, >= data_bytes */
	uint64_t table_bytes;
	uint64_t blob_offset;
	uint64_t blob_bytes;
};

struct ckpt_msg_save_ok {
	uint64_t step;
	uint32_t slot;
};

struct ckpt_msg_status {
	uint64_t step;
	uint32_t state;      /* enum ckpt_state */
	int32_t error;       /* 0 or -errno / -CKPT_E_* */
	uint32_t slot_freed; /* slot now free again, or CKPT_NO_SLOT */
	char reason[CKPT_REASON_MAX + 1];
};

struct ckpt_msg_step {  /* SKIP, QUERY */
	uint64_t step;
};

struct ckpt_msg_list_ok {
	uint32_t total;  /* committed steps in all */
	uint32_t count;  /* in this message (the newest ones), <= CKPT_LIST_MAX */
	uint64_t steps[CKPT_LIST_MAX]; /* ascending */
};

struct ckpt_msg_restore {
	uint64_t step;   /* or CKPT_NO_STEP for the newest */
	uint32_t slot;
	uint32_t flags;
};

struct ckpt_msg_restore_ok {
	uint64_t step;
	uint32_t slot;
	uint32_t flags;
	uint64_t data_bytes;
	uint64_t table_offset;
	uint64_t table_bytes;
	uint64_t blob_offset;
	uint64_t blob_bytes;
	char warning[CKPT_REASON_MAX + 1];
};

struct ckpt_msg_release {
	uint32_t slot;
};

struct ckpt_msg_error {
	int32_t code;   /* -errno or -CKPT_E_* */
	char message[CKPT_REASON_MAX + 1];
};

/* A STALL's seconds must be below this (one day): a longer "stall" is a
 * broken clock or a hostile peer, not a save. */
#define CKPT_STALL_MAX_SECONDS 86400.0

struct ckpt_msg_stall {
	uint64_t step;   /* the SAVE this stall belongs to */
	double seconds;  /* ckpt_save_begin .. ckpt_save_finish on the rank; finite, >= +0, < max */
};

/* Reads in one READ_RANGES (and results in its READ_RANGES_OK). */
#define CKPT_READ_MAX 64u

/* One read of a READ_RANGES: bytes [offset, offset + length) of an item. */
struct ckpt_msg_read_item {
	uint32_t rank;
	uint16_t name_len;  /* 0: the rank's blob; else a tensor name's bytes */
	uint16_t name_off;  /* the name in ckpt_msg_read_ranges.names, NUL-terminated there */
	uint64_t offset;
	uint64_t length;    /* 0: only the item's size is asked for */
};

/* The slot gets the reads' bytes one after the other, in request order:
 * read i's at the sum of the lengths of the reads before it. */
struct ckpt_msg_read_ranges {
	uint64_t step;
	uint32_t slot;
	uint32_t count;     /* 1..CKPT_READ_MAX */
	struct ckpt_msg_read_item items[CKPT_READ_MAX];
	char names[CKPT_MSG_MAX_BYTES]; /* pool of the names */
};

struct ckpt_msg_read_result {
	int32_t result;     /* 0, or -errno / -CKPT_E_* for this read */
	uint64_t total;     /* the item's size in bytes (0 when it does not exist) */
};

struct ckpt_msg_read_ranges_ok {
	uint64_t step;
	uint32_t slot;
	uint32_t count;     /* that of the request */
	struct ckpt_msg_read_result results[CKPT_READ_MAX];
	char message[CKPT_REASON_MAX + 1]; /* why the first failed read failed, or "" */
};

struct ckpt_msg {
	uint32_t type;  /* enum ckpt_msg_type */
	uint32_t seq;   /* echoed in the reply */
	union {
		struct ckpt_msg_hello hello;
		struct ckpt_msg_hello_ok hello_ok;
		struct ckpt_msg_save save;
		struct ckpt_msg_save_ok save_ok;
		struct ckpt_msg_status status;
		struct ckpt_msg_step step;      /* SKIP, QUERY */
		struct ckpt_msg_list_ok list_ok;
		struct ckpt_msg_restore restore; /* RESTORE, RESTORE_AGREED */
		struct ckpt_msg_restore_ok restore_ok;
		struct ckpt_msg_release release;
		struct ckpt_msg_error error;
		struct ckpt_msg_stall stall;
		struct ckpt_msg_read_ranges read_ranges;
		struct ckpt_msg_read_ranges_ok read_ranges_ok;
	} u;                 /* LIST and BYE have no body */
};

/* Encode into buf (CKPT_MSG_MAX_BYTES is always enough); bytes or -errno. */
ssize_t ckpt_msg_encode(const struct ckpt_msg *m, void *buf, size_t cap);
/* Decode and validate one whole message (header and body; trailing bytes
 * are an error). Strings are NUL-terminated in *out. A message that is
 * well formed but names a step above CKPT_STEP_MAX (other than
 * CKPT_NO_STEP where the field allows it) is -ERANGE; then only out->type,
 * out->seq and out->u.step.step (the step it named: every step-carrying
 * body starts with it) are set, for the refusal to quote. */
int ckpt_msg_decode(const void *buf, size_t len, struct ckpt_msg *out);
/* Append a read to a READ_RANGES being built in *m (type, step and slot
 * set by the caller; count 0 to start). name NULL: the blob. 0, -ENOSPC
 * (no room in the message: send it and start another), -EINVAL (a name
 * that is not a tensor name, offset + length overflowing). */
int ckpt_msg_read_add(struct ckpt_msg *m, uint32_t rank, const char *name,
		      uint64_t offset, uint64_t length);

/* How many fds a message of this type must carry (1 for HELLO_OK, else 0). */
unsigned ckpt_msg_fd_count(uint32_t type);
const char *ckpt_msg_type_name(uint32_t type);

/*
 * Optional messages within version 1 (PROTOCOL.md, "Extensions within
 * version 1"): right after HELLO_OK ckptd sends a features notice, an
 * unsolicited STATUS about CKPT_NO_STEP whose reason lists tokens. Older
 * clients ignore it; a client sends an optional message only on a
 * connection whose notice named it.
 */
#define CKPT_FEATURE_STALL 1u   /* token "stall": the client may send STALL */
#define CKPT_FEATURE_AGREE 2u   /* token "agree": the client may send RESTORE_AGREED */
#define CKPT_FEATURE_READ 4u    /* token "read_ranges": the client may send READ_RANGES */
#define CKPT_FEATURES_KNOWN (CKPT_FEATURE_STALL | CKPT_FEATURE_AGREE | CKPT_FEATURE_READ)

/* Fill *m with the notice for `features` (bits not known are left out). */
void ckpt_msg_features_notice(struct ckpt_msg *m, uint32_t features);
/* Whether m is a features notice (a STATUS with seq 0, CKPT_NO_STEP,
 * UNKNOWN, error 0, CKPT_NO_SLOT). */
bool ckpt_msg_is_features_notice(const struct ckpt_msg *m);
/* The known features a notice's token list names; unknown or malformed
 * tokens are skipped. */
uint32_t ckpt_features_parse(const char *tokens);

/* ---- Rank index (rank-R.index) ----------------------------------------- */

/*
 * Chunks: every extent (each tensor in table order, then the blob if any)
 * is split into chunk_bytes pieces (the last one shorter); chunk_crc holds
 * their CRC-32C in that order.
 */
struct ckpt_index {
	char job[CKPT_JOB_NAME_MAX + 1];
	uint64_t step;
	uint32_t rank, world_size;
	uint32_t chunk_bytes;
	uint64_t shard_bytes;   /* file size of the shard (a CKPT_ALIGN multiple) */
	uint64_t blob_offset, blob_bytes;
	uint32_t blob_crc32c;
	int64_t created_unix_ns;
	struct ckpt_table table;
	uint32_t chunk_count;
	uint32_t *chunk_crc;
};

/* Number of chunks for a table plus blob at chunk_bytes. */
uint64_t ckpt_chunk_count(const struct ckpt_table *t, uint64_t blob_bytes,
			  uint32_t chunk_bytes);
/* Encode into a new buffer (*out, free() it); returns bytes or -errno. */
ssize_t ckpt_index_encode(const struct ckpt_index *idx, void **out);
/* Decode and validate (trailer CRC, table, layout, chunk count). */
int ckpt_index_decode(const void *buf, size_t len, struct ckpt_index *out);
void ckpt_index_free(struct ckpt_index *idx);

/* ---- Manifest (MANIFEST.json) ------------------------------------------ */

struct ckpt_manifest_rank {
	uint32_t rank;
	uint64_t shard_bytes;
	uint64_t blob_bytes;
	uint32_t blob_crc32c;
	uint8_t index_sha256[32];
	uint64_t index_bytes;
	struct ckpt_table table; /* data_offset, nbytes and crc32c filled in */
};

struct ckpt_manifest {
	char job[CKPT_JOB_NAME_MAX + 1];
	uint64_t step;
	uint32_t world_size;
	uint32_t chunk_bytes;
	int64_t created_unix_ns;
	struct ckpt_manifest_rank *ranks; /* world_size entries, ranks[i].rank == i */
	/* "" (shards stored as they are), or how the S3 copy stores them
	 * ("zstd": FORMAT.md, "Compressed shard objects"). Only the manifest
	 * object on S3 carries it; 1..15 of [a-z0-9-]. */
	char s3_encoding[16];
};

/* Serialise to JSON (*out, NUL-terminated, free() it; *len without NUL),
 * including the "checksum" field. 0 or -errno. */
int ckpt_manifest_encode(const struct ckpt_manifest *m, char **out, size_t *len);
/* Parse and validate (format name, version, checksum, every rank present
 * once, tables). On failure err says what and where. */
int ckpt_manifest_decode(const char *json, size_t len, struct ckpt_manifest *out,
			 char *err, size_t errlen);
void ckpt_manifest_free(struct ckpt_manifest *m);

/* Lower-case hex of n bytes into out (2n+1 bytes). */
void ckpt_hex(char *out, const uint8_t *bytes, size_t n);

/* ---- Element types --------------------------------------------------------
 * Element sizes and names as proto uses them for validation and in
 * MANIFEST.json; libckpt's ckpt_dtype_size()/ckpt_dtype_name() must agree
 * (they may simply call these).
 */
/* Bytes per element, or 0 for an unknown dtype. */
size_t ckpt_proto_dtype_size(uint32_t dtype);
/* "f32", "bf16", ... as written in MANIFEST.json; NULL if unknown. */
const char *ckpt_proto_dtype_name(uint32_t dtype);

#endif
