/* SPDX-License-Identifier: MIT */
/*
 * store: the checkpoint root on a POSIX file system, shared by ckptd and the
 * tools (libckptstore, internal). Layout and formats: proto/FORMAT.md.
 *
 * Functions return 0 (or a count) or -errno. Where an `err` buffer is
 * taken, a failure leaves a one-line reason there naming the file.
 */
#ifndef CKPT_STORE_H
#define CKPT_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

/* Cleanup helpers (defined once, for ckptd and the tools). */
void store_freep(void *p);
void store_closep(int *fd);
#define _cleanup_free_ __attribute__((cleanup(store_freep)))
#define _cleanup_close_ __attribute__((cleanup(store_closep)))
/* Hand a cleanup-managed value to someone else. */
#define TAKE_PTR(p) ({ __typeof__(p) _p = (p); (p) = NULL; _p; })
#define TAKE_FD(fd) ({ int _fd = (fd); (fd) = -1; _fd; })

/* Write buf to dirfd/name durably: name.tmp, write, fsync, rename, fsync
 * the directory. */
int store_write_file_durable(int dirfd, const char *name, const void *buf,
			     size_t len);
/* Read a whole file (at most max bytes) into a new buffer (*out, free()),
 * NUL-terminated for convenience; *len excludes the NUL. */
int store_read_file(int dirfd, const char *name, size_t max, void **out,
		    size_t *len);
/* Remove dirfd/name and everything under it (no symlinks followed). */
int store_remove_tree(int dirfd, const char *name);
int store_fsync_dir(int dirfd);

/* Job directories under root (names valid per ckpt_job_name_check), sorted.
 * *jobs is an array of strings; free with store_strv_free. */
int store_list_jobs(int rootfd, char ***jobs, size_t *count);
void store_strv_free(char **v, size_t count);

/* Step directories of a job, ascending. With committed_only, only those
 * holding MANIFEST.json. *steps: free(). */
int store_list_steps(int jobfd, bool committed_only, uint64_t **steps,
		     size_t *count);

/* Read and decode a step's MANIFEST.json. */
int store_read_manifest(int jobfd, uint64_t step, struct ckpt_manifest *m,
			char *err, size_t errlen);
/* Read and decode rank's index; if sha256 is non-NULL, the file's digest
 * must match it (else -EBADMSG, "index digest mismatch"). */
int store_read_index(int stepfd, uint32_t rank, const uint8_t *sha256,
		     struct ckpt_index *idx, char *err, size_t errlen);
/* SHA-256 of a buffer (OpenSSL). */
void store_sha256(const void *buf, size_t len, uint8_t out[32]);

/* LATEST: the step number as decimal text and a newline. */
int store_read_latest(int jobfd, uint64_t *step);
int store_write_latest(int jobfd, uint64_t step);

/*
 * Job ownership (proto/FORMAT.md, "OWNER"): <root>/<job>/OWNER names the
 * daemon that manages the job, and that daemon holds an OFD write lock on
 * the whole file for as long as it does. The kernel (or the NFS/Lustre lock
 * manager) drops the lock when its holder dies, so a stale OWNER file
 * never blocks anyone: only a held lock counts.
 */
#define CKPT_OWNER_NAME "OWNER"
#define STORE_OWNER_FORMAT "ckpt-owner 1"

struct store_owner {
	char host[256];
	long pid;
	char daemon[40];        /* this run of that ckptd: random hex */
	char cluster[65];       /* cluster id of its group */
	uint32_t node, nodes;   /* node index and group size (nodes 1: alone) */
	char since[32];         /* when it took the lock, UTC, ISO 8601 */
	/* Who it is across restarts (FORMAT.md, "holder"): "single:HOST:SOCKET"
	 * or "group:CLUSTER:NODE"; empty when the file predates the key. */
	char holder[512];
};

/* OWNER's text for o (NUL-terminated); the length, or -ENOSPC. */
int store_owner_format(const struct store_owner *o, char *buf, size_t len);
/* Parse OWNER's text; -EBADMSG if it is not one. Unknown keys are skipped. */
int store_owner_parse(const char *buf, size_t len, struct store_owner *o);
/* "host H pid P (cluster C node N of M) since S", for messages. */
void store_owner_describe(const struct store_owner *o, char *buf, size_t len);

/*
 * Take jobfd's ownership lock without waiting: open (or create) OWNER,
 * lock it (F_OFD_SETLK; F_SETLK where OFD locks are not supported), check
 * that the locked file is still the one named OWNER (a releasing owner may
 * have unlinked it meanwhile: then -ESTALE, try again), and write `me` into
 * it durably (truncate, write, fsync). On success *lockfd holds the lock:
 * closing it releases the job. -EAGAIN when another holds it: *holder then
 * says who, as far as its OWNER file can be read (holder->pid 0: unknown).
 */
int store_owner_lock(int jobfd, const struct store_owner *me, int *lockfd,
		     struct store_owner *holder);
/*
 * Without taking it: 1 when someone holds jobfd's ownership lock (*holder
 * filled as above), 0 when nobody does or there is no OWNER file, -errno.
 */
int store_owner_probe(int jobfd, struct store_owner *holder);
/*
 * Read jobfd's OWNER without locking or waiting: who holds the job now, or
 * held it last (the file stays after its holder is gone). 0 with *o filled,
 * -ENOENT when there is no OWNER file, -EBADMSG when it is not one (or is
 * being rewritten right now), -errno.
 */
int store_owner_read(int jobfd, struct store_owner *o);

/* Progress of a verification: called after each chunk. */
typedef void (*store_progress_fn)(void *opaque, uint64_t done_bytes,
				  uint64_t total_bytes);

struct store_verify_result {
	uint64_t bytes;        /* bytes checked */
	uint64_t chunks;       /* chunks checked */
	uint64_t bad_chunks;   /* mismatches */
	char first_error[512]; /* names file, rank, step, tensor, offset */
};

/*
 * Re-read one rank's shard of a committed step and check every chunk
 * against its index (and the index against the manifest digest). Returns 0
 * when everything matches, -EBADMSG on any mismatch (details in *res), or
 * another -errno if files cannot be read.
 */
int store_verify_rank(int jobfd, const struct ckpt_manifest *m, uint32_t rank,
		      store_progress_fn progress, void *opaque,
		      struct store_verify_result *res);

/* Read exactly len bytes of a shard at offset into buf (0 or -errno). */
typedef int (*store_read_fn)(void *opaque, uint64_t offset, void *buf,
			     size_t len);

/*
 * store_verify_rank's checks on a rank whose files come from elsewhere (an
 * S3 step): index_buf/index_len are the index file's bytes (borrowed),
 * checked against the manifest's size and SHA-256; shard_bytes is the shard's
 * size as its source reports it; read() is asked for the shard's bytes
 * front to back, at most `window` bytes at a time (0: the default, 8 MiB;
 * rounded up to 4 KiB), each window at a 4 KiB-aligned offset. Messages name
 * the files as in a root (step-N/rank-R.shard). Same returns as
 * store_verify_rank; a read() error comes back as is.
 */
int store_verify_rank_bytes(const struct ckpt_manifest *m, uint32_t rank,
			    const void *index_buf, size_t index_len,
			    uint64_t shard_bytes, store_read_fn read,
			    void *read_opaque, size_t window,
			    store_progress_fn progress, void *opaque,
			    struct store_verify_result *res);

/* Sum of shard and index bytes of a committed step (from the manifest). */
uint64_t store_manifest_bytes(const struct ckpt_manifest *m);

#endif
