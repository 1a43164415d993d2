/* SPDX-License-Identifier: MIT */
/*
 * What the files of the S3 tier share (see uploader.h for the tier itself,
 * which the rest of ckptd calls): its state, the queue's tasks, the objects
 * of an upload, and the functions the files call across. uploader.c
 * schedules (jobs and policy, the queue, the event loop, the entry points);
 * s3scan.c lists and scans; s3retention.c removes steps past S3 retention;
 * upload.c and upload_verify.c send a step. Nothing outside these files
 * includes this header.
 */
#ifndef CKPTD_UPLOADER_INTERNAL_H
#define CKPTD_UPLOADER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckptd.h"
#include "s3.h"

#define KEY_MAX 1100
#define MANIFEST_MAX ((size_t)1 << 30)

enum task_kind { TASK_SCAN, TASK_UPLOAD, TASK_DELETE };

enum obj_state { OBJ_TODO, OBJ_BUSY, OBJ_PARTS, OBJ_DONE };

/* An upload's phases (task->phase): task_step lets UP_OBJECTS go on while
 * operations are in flight. */
enum { UP_OPEN = 0, UP_INDEX, UP_LIST, UP_LIST_UPLOADS, UP_OBJECTS, UP_MANIFEST, UP_LATEST, UP_CLEANUP_LIST,
       UP_CLEANUP_ABORT, UP_DONE };

struct s3job {
	struct s3job *next;
	char name[CKPT_JOB_NAME_MAX + 1];
	bool scanned;          /* s3_steps is known */
	uint64_t *pins;        /* steps a restore may read from S3 (a step once per pin) */
	size_t n_pins, cap_pins;
	uint64_t *s3_steps;    /* committed on S3, ascending */
	size_t n_s3, cap_s3;
	/* Confirmed on S3 by this ckptd: uploaded (or found there with the
	 * digests the root's manifest names) from bytes that verified.
	 * Ascending; a subset of s3_steps. Only these count as good copies
	 * for either tier's retention. */
	uint64_t *verified;
	size_t n_verified, cap_verified;
	size_t held;           /* root steps past keep_last kept for S3 */
};

/* A chunk of a shard as its rank's index records it. */
struct vchunk {
	uint64_t off;
	uint32_t len, crc;
};

/* A compression unit's output, once compressed (kept until its turn). */
struct cres {
	uint8_t *buf;
	size_t len;
	uint8_t md5[16], sha256[32];
};

struct obj {
	char name[32];         /* the file in the root: rank-000001.shard */
	uint32_t rank;
	bool is_index;
	/* The rank's index SHA-256 as the manifest records it: what the index
	 * file must hash to, and (hex) the metadata of both objects. */
	uint8_t index_sha256[32];
	char index_hex[65];
	struct vchunk *chunks; /* shard: sorted by offset, from the index */
	size_t nchunks;
	char key_name[40];     /* the object: the same, or + ".zst" compressed */
	uint64_t size;
	uint64_t s3_size;      /* size of the object already there, UINT64_MAX: none */
	enum obj_state state;
	/* multipart */
	char *upload_id;
	uint64_t part_size;
	uint32_t nparts, next_part, parts_done;
	char **etags;          /* [nparts] as UploadPart returned them */
	char **old_etags;      /* [nparts] of an unfinished upload found in S3 */
	uint64_t *old_sizes;
	/* compressed (zshard.h): nparts is then the capacity of the arrays
	 * and parts_emitted the parts made so far */
	bool compress;
	struct zpiece *pieces;
	size_t npieces;
	size_t *cunit_first;   /* [ncunits + 1]: first piece of each compression unit */
	size_t ncunits, next_cunit, next_emit;
	struct cres *ready;    /* [ncunits] */
	uint8_t *pending;      /* compressed bytes not yet in a part */
	size_t pending_len;
	bool pending_digested; /* pending is one unit's output: its digests hold */
	uint8_t pending_md5[16], pending_sha256[32];
	uint64_t z_total;
	uint32_t parts_emitted;
	bool final_emitted;
};

struct upload_id_entry {
	char *key, *upload_id;
};

struct task {
	struct task *next;
	struct uploader *u;
	enum task_kind kind;
	struct s3job *job;
	uint64_t step;
	uint64_t not_before_ns;
	unsigned failures;
	bool running;
	int phase;
	unsigned ops;          /* S3 operations and worker reads in flight */
	int err;
	char why[600];
	char *marker;          /* listing continuation */
	/* upload */
	int stepfd;
	char *manifest;
	size_t manifest_len;
	struct obj *objs;
	size_t n_objs;
	uint64_t bytes_total, bytes_sent;
	unsigned parts_reused;     /* found in S3 after a restart, not sent again */
	uint64_t started_ns;
	/* scan and upload: multipart uploads found */
	struct upload_id_entry *uploads;
	size_t n_uploads, cap_uploads, next_abort;
	/* delete: keys listed */
	char **keys;
	size_t n_keys, next_key;
};

struct unit {
	struct task *t;
	struct obj *o;         /* NULL: the manifest or LATEST */
	uint32_t part;         /* 1-based; 0: a whole object */
	uint64_t off, len;
	uint8_t *buf;
	uint8_t md5[16], sha256[32];
	int err;
	/* a compression unit: pieces [first, last) of o, compressed into buf */
	bool compress;
	size_t cunit, first, last;
	int level;
	bool digest_only;      /* buf is given: only compute its digests */
	char why[256];         /* a verification failure, when err is -EBADMSG */
};

/*
 * An event source of the tier's epoll set (as Valkey's file events or
 * PipeWire's spa_source): epoll's data.ptr points at it, and dispatch calls
 * its handler with what epoll reported, knowing nothing of what is behind
 * the fd.
 */
struct uploader_source {
	int fd;
	void (*handler)(struct uploader_source *src, uint32_t events);
	void *data;
	struct uploader_source *next;  /* in u->socks or u->dead */
};

struct uploader {
	struct daemon *d;
	s3_client *c;
	struct s3_config cfg;
	struct s3_url url;
	int epfd;              /* the sources below */
	struct uploader_source client_timer, retry_timer;
	/* One per socket the S3 client watches. One it stops watching waits
	 * in dead until the dispatch ends: that batch's events may still
	 * point at it. */
	struct uploader_source *socks, *dead;
	struct s3job *jobs;
	struct task *head, *tail;
	unsigned units;        /* parts or small objects in flight */
	bool closing;
	uint64_t backoff_ns;
};

/* keys (uploader.c): the layout is proto's (ckpt_s3_*); these name the
 * keys of a job under the tier's prefix. */
void job_key(const struct uploader *u, const char *job, char *out, size_t cap);
void step_key(const struct uploader *u, const char *job, uint64_t step,
	      const char *name, char *out, size_t cap);
void latest_key(const struct uploader *u, const char *job, char *out, size_t cap);
uint64_t key_step(const struct uploader *u, const char *job, const char *key,
		  const char **rest);

/* jobs and policy (uploader.c) */
bool steps_has(const uint64_t *v, size_t n, uint64_t step);
int steps_insert(uint64_t **v, size_t *n, size_t *cap, uint64_t step);
int s3_steps_insert(struct s3job *j, uint64_t step);
void s3_steps_remove(struct s3job *j, uint64_t step);
bool superseded(const struct uploader *u, const struct s3job *j, uint64_t step);
bool policy_keeps(const struct uploader *u, const uint64_t *all, size_t n, uint64_t step);

/* queue (uploader.c) */
struct task *task_new(struct uploader *u, enum task_kind kind, struct s3job *j,
		      uint64_t step);
struct task *task_find(const struct uploader *u, enum task_kind kind, const char *job,
		       uint64_t step);
void queue_metrics(struct uploader *u);
void task_finish(struct task *t);
void task_fail(struct task *t, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void task_failed(struct task *t);
void task_op_done(struct task *t);
void count_attempts(const struct s3_result *res);

/* listing helpers and the scan (s3scan.c) */
bool page_next(struct task *t, const struct s3_list *l);
int list_objects(struct task *t, const char *prefix, s3_done_fn done);
bool uploads_page(struct task *t, const struct s3_result *res);
void abort_done(const struct s3_result *res, void *arg);
void scan_step(struct task *t);

/* retention on S3 (s3retention.c) */
void queue_deletions(struct uploader *u, struct s3job *j);
void delete_step(struct task *t);

/* upload (upload.c) */
void upload_step(struct task *t);

/* verification of what an upload sends (upload_verify.c): worker threads */
int read_exact(int fd, void *buf, uint64_t len, uint64_t off);
int verify_range(const struct obj *o, int fd, const uint8_t *buf, uint64_t off,
		 uint64_t len, char *why, size_t cap);
/* writer.c has an index_run of its own: this one is the upload's. */
void upload_index_run(void *arg);

#endif
