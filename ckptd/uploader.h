/* SPDX-License-Identifier: MIT */
/*
 * uploader: the S3 tier of ckptd. Committed steps are mirrored under
 * s3://BUCKET/PREFIX/JOB/ (proto/FORMAT.md, "On S3"): shards and indexes
 * (multipart, several parts in flight, each with Content-MD5 and a signed
 * payload hash), then MANIFEST.json (the S3 commit), then LATEST. Runs on
 * ckptd's event loop (the S3 client's sockets and timers sit in an epoll
 * set of their own, which the loop watches as one fd); file reads and
 * digests run on the worker threads.
 *
 * A failed upload is retried later with a growing delay (an auth error
 * waits longest and is logged once per failure, naming the bucket); the
 * root tier never waits for S3. After a restart, a step's objects already
 * in S3 are kept, parts of an unfinished multipart upload whose MD5 matches
 * are reused, and multipart uploads under the job's prefix that belong to
 * no step still to upload are aborted.
 *
 * Verification: an upload checks each rank's index against the manifest
 * (size, SHA-256) and every chunk of the shard against the index (CRC-32C)
 * as the worker threads read it; a mismatch fails the step's upload. Shard
 * and index objects record the index digest (S3_META_INDEX_SHA256); an
 * object already in S3 counts only if it matches.
 *
 * Retention: S3 keeps the newest s3_keep_last *confirmed* steps of each
 * job (uploaded and verified by this ckptd) and every multiple of
 * s3_keep_every; the root's retention keeps every step S3 has not
 * confirmed (uploader_pinned), reporting the backlog
 * (uploader_retention_held). Confirmation is rebuilt after each start by
 * uploading again what S3 lists but this ckptd has not confirmed.
 */
#ifndef CKPTD_UPLOADER_H
#define CKPTD_UPLOADER_H

#include <stdbool.h>
#include <stdint.h>

struct daemon;

/* Start the tier if s3_url is set (else 0 and nothing runs): resolve the
 * configuration and credentials (an error names what is missing). No job
 * is looked at until this daemon owns it (uploader_job_owned). */
int uploader_init(struct daemon *d);
/*
 * This daemon took job over (its OWNER lock; on a group's other nodes, the
 * job is loaded): queue its scan, which rebuilds what S3 has confirmed,
 * resumes unfinished multipart uploads and queues the missing uploads.
 * The tier works on no other job.
 */
void uploader_job_owned(struct daemon *d, const char *job);
/*
 * Whether the tier has work for job (a scan, upload or deletion queued,
 * running or waiting for a retry): the job stays owned meanwhile. When its
 * last task ends, the tier calls coord_job_idle().
 */
bool uploader_has_work(const struct daemon *d, const char *job);
/* The job is released: forget what S3 holds of it (another daemon may
 * change that before this one owns the job again; the next takeover
 * scans anew). */
void uploader_job_released(struct daemon *d, const char *job);
/* The fd the event loop watches (-1 when the tier is off). */
int uploader_fd(const struct daemon *d);
/* Handle what is ready on uploader_fd(). */
void uploader_dispatch(struct daemon *d);
/* A step of job committed in the root. */
void uploader_committed(struct daemon *d, const char *job, uint64_t step);
/*
 * Whether root retention must keep the step: with S3 configured, every
 * step that S3 has not confirmed (uploaded and verified by this ckptd, or
 * found there with matching digests), unless S3 would not keep it anyway
 * (s3_keep_last verified newer steps). Before the job's first scan
 * succeeds, or while the tier is not running, every step is kept.
 */
bool uploader_pinned(const struct daemon *d, const char *job, uint64_t step);
/* Root retention kept `held` steps past keep_last for S3, the oldest
 * `oldest`: metric, and a warning and event once per episode (until
 * held is 0 again). */
void uploader_retention_held(struct daemon *d, const char *job, size_t held, uint64_t oldest);
/*
 * Where a restore worker finds the job on S3: the tier's configuration
 * (valid while ckptd runs), bucket, the job's key prefix and the steps
 * committed there as last seen (a copy; empty before the job's first
 * scan). -ENOENT when the tier is off. Free with uploader_origin_free().
 */
struct s3_config;
struct s3_origin {
	const struct s3_config *cfg;
	char *bucket;
	char *job_key;     /* "PREFIX/JOB" or "JOB" */
	uint64_t *steps;   /* ascending */
	bool current;      /* the tier has scanned the job and keeps steps up to date */
	size_t n_steps;
};
int uploader_origin(const struct daemon *d, const char *job, struct s3_origin *out);
void uploader_origin_free(struct s3_origin *o);
/* Keep S3 retention off these steps while a restore may read them (+1),
 * and let it go again (-1). Loop thread. */
void uploader_pin(struct daemon *d, const char *job, const uint64_t *steps, size_t n, int delta);

/* Cancel what is in flight (unfinished multipart uploads stay, for the next
 * start to resume) and free. Call after the worker threads are gone. */
void uploader_fini(struct daemon *d);

#endif
