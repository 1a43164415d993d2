/* SPDX-License-Identifier: MIT */
/*
 * ckpt-inspect's parts: the checkpoint root (ckpt-inspect.c) and the S3
 * tier (inspect-s3.c) share options, exit statuses, the way a manifest is
 * printed and the way a step's verification is reported. Tool code: it
 * prints (stdout, or stderr for errors) and never exits.
 */
#ifndef CKPT_INSPECT_H
#define CKPT_INSPECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "store.h"
#include "toolutil.h"

struct s3_settings;

enum {
	EXIT_VERIFY = 1,
	EXIT_USAGE = 2,
	EXIT_NOTFOUND = 3,
};

struct inspect_opts {
	bool json, verify, quiet, progress;
	bool have_rank;
	uint32_t rank;
	const char *s3_url;             /* --s3: the tier a root is compared with */
	const struct s3_settings *s3;   /* --endpoint-url, --profile, --region */
};

/* Exit statuses only get worse: a not-found outranks a failed check. */
int inspect_worse(int a, int b);
void inspect_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void inspect_format_time(char *buf, size_t cap, int64_t unix_ns);
json_t *inspect_json_time(int64_t unix_ns);
void inspect_print_manifest(const struct ckpt_manifest *m, bool is_latest,
			    const struct inspect_opts *o);
json_t *inspect_manifest_json(const struct ckpt_manifest *m, bool is_latest,
			      const struct inspect_opts *o);

/* One rank's verification; `rank` is set by the caller. */
struct inspect_rank_check {
	uint32_t rank;
	int r;                          /* 0 or -errno */
	struct store_verify_result res;
};

/* Where a committed step's files are read from (a job directory, or a job
 * on S3). */
struct inspect_step_source {
	/* Read and decode the step's manifest (-ENOENT: not committed there);
	 * err gets a reason naming the file. */
	int (*read_manifest)(struct inspect_step_source *s, uint64_t step,
			     struct ckpt_manifest *m, char *err, size_t errlen);
	/* Verify checks[0..n) against m, filling each one's r and res. pg's
	 * bar was begun for the step; on return pg->base is the bytes checked. */
	void (*verify_ranks)(struct inspect_step_source *s,
			     const struct ckpt_manifest *m,
			     struct inspect_rank_check *checks, size_t n,
			     struct tool_progress *pg);
};

/* Verify one committed step (every rank, or --rank) and report it: text,
 * or a JSON object in *out with --json. Returns an exit status. */
int inspect_verify_step(struct inspect_step_source *src, const char *job,
			uint64_t step, const struct inspect_opts *o,
			struct tool_progress *pg, json_t **out);
/* Report for a job whose steps were verified (the text summary line, or
 * the JSON object owning jsteps). */
void inspect_report_job(const char *job, size_t committed, unsigned failed,
			int status, json_t *jsteps, const struct inspect_opts *o,
			json_t **out);

/* ---- S3 (inspect-s3.c) ---------------------------------------------------- */

/* Inspect an s3:// URL (s3://BUCKET[/PREFIX], .../JOB, .../JOB@STEP or
 * .../JOB/STEP) as ckpt-inspect does a path. Returns an exit status. */
int inspect_s3_main(const char *url, const struct inspect_opts *o,
		    struct tool_progress *pg, json_t **out);

/* A tier to compare a root with (--s3 s3://BUCKET/PREFIX). */
typedef struct inspect_s3 inspect_s3;

/* What S3 holds of one step of a job. */
struct inspect_s3_step {
	uint64_t step;
	bool committed;          /* its MANIFEST.json object exists */
	uint64_t manifest_object_bytes;
	bool open_upload;        /* a multipart upload is open under it */
	uint32_t shards;         /* shard objects */
	uint64_t bytes;          /* shard and index objects */
	/* From the manifest, when it was read: */
	bool have_manifest;
	bool damaged;            /* the manifest object does not decode */
	char error[256];
	uint32_t world_size;
	uint64_t manifest_bytes; /* store_manifest_bytes */
	int64_t created_unix_ns;
};

struct inspect_s3_job {
	struct inspect_s3_step *steps; /* ascending */
	size_t n;
	size_t committed;
	bool have_latest;
	uint64_t latest;
};

/* Open a tier. -EINVAL: the URL is malformed (a usage error); why says
 * what is wrong. */
int inspect_s3_open(const char *url, const struct s3_settings *settings,
		    inspect_s3 **out, char *why, size_t whylen);
void inspect_s3_close(inspect_s3 *s);
const char *inspect_s3_url(const inspect_s3 *s);
/* What the tier holds of job (empty when nothing); with read_manifests
 * the committed steps' manifests are read too. */
int inspect_s3_scan_job(inspect_s3 *s, const char *job, bool read_manifests,
			struct inspect_s3_job *out, char *why, size_t whylen);
void inspect_s3_job_free(struct inspect_s3_job *j);
/* Jobs under the tier's prefix with at least one committed step, sorted;
 * free with store_strv_free. */
int inspect_s3_list_jobs(inspect_s3 *s, char ***jobs, size_t *n, char *why,
			 size_t whylen);
/* The step in j, or NULL. */
const struct inspect_s3_step *inspect_s3_find(const struct inspect_s3_job *j,
					      uint64_t step);

/* Tiers of a step: "root+s3", "root", "s3", "uploading" or "-". */
const char *inspect_tiers(bool root_committed, const struct inspect_s3_step *s3);

#endif
