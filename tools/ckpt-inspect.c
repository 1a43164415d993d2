/* SPDX-License-Identifier: MIT */
/*
 * ckpt-inspect: list and verify checkpoints in a checkpoint root, without
 * a daemon. Exit status: 0 ok, 1 verification failed, 2 usage error,
 * 3 not found or unreadable.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ckpt-build-config.h"
#include "store.h"
#include "toolutil.h"

enum {
	EXIT_VERIFY = 1,
	EXIT_USAGE = 2,
	EXIT_NOTFOUND = 3,
};

struct opts {
	bool json, verify, quiet, progress;
	bool have_rank;
	uint32_t rank;
};

static const char *prog = "ckpt-inspect";

/* Exit statuses only get worse: a not-found outranks a failed check. */
static int worse(int a, int b)
{
	static const int rank[] = { [0] = 0, [EXIT_VERIFY] = 1,
				    [EXIT_NOTFOUND] = 2, [EXIT_USAGE] = 3 };
	return rank[b] > rank[a] ? b : a;
}

static void errmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void errmsg(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void format_time(char *buf, size_t cap, int64_t unix_ns)
{
	time_t t = (time_t)(unix_ns / 1000000000);
	struct tm tm;

	if (unix_ns <= 0 || !gmtime_r(&t, &tm) ||
	    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(buf, cap, "-");
}

static const char *dtype_name(uint32_t dtype)
{
	const char *n = ckpt_proto_dtype_name(dtype);

	return n ? n : "?";
}

static void format_dims(char *buf, size_t cap, const uint64_t *dims, uint32_t ndim)
{
	size_t pos = 0;

	pos += (size_t)snprintf(buf + pos, cap - pos, "[");
	for (uint32_t d = 0; d < ndim && pos < cap; d++)
		pos += (size_t)snprintf(buf + pos, cap - pos, "%s%" PRIu64,
					d ? ", " : "", dims[d]);
	if (pos < cap)
		snprintf(buf + pos, cap - pos, "]");
}

/* The slice as start:end per dimension, e.g. [512:1024, 0:1024]. */
static void format_slice(char *buf, size_t cap, const struct ckpt_tensor *t)
{
	size_t pos = 0;

	pos += (size_t)snprintf(buf + pos, cap - pos, "[");
	for (uint32_t d = 0; d < t->ndim && pos < cap; d++)
		pos += (size_t)snprintf(buf + pos, cap - pos,
					"%s%" PRIu64 ":%" PRIu64, d ? ", " : "",
					t->offset[d], t->offset[d] + t->shape[d]);
	if (pos < cap)
		snprintf(buf + pos, cap - pos, "]");
}

static json_t *json_dims(const uint64_t *dims, uint32_t ndim)
{
	json_t *a = json_array();

	for (uint32_t d = 0; d < ndim; d++)
		json_array_append_new(a, json_integer((json_int_t)dims[d]));
	return a;
}

static json_t *json_u64(uint64_t v)
{
	return json_integer((json_int_t)v);
}

static json_t *json_time(int64_t unix_ns)
{
	char buf[64];

	format_time(buf, sizeof(buf), unix_ns);
	return json_string(buf);
}

/* ---- Opening --------------------------------------------------------------- */

static int open_dir(const char *path)
{
	return open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* Inside the root nothing is followed through a symlink. */
static int open_child_dir(int dirfd, const char *name)
{
	return openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

static bool has_file(int dirfd, const char *name)
{
	struct stat st;

	return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* A job directory holds LATEST or at least one step directory. */
static bool looks_like_job(int fd)
{
	uint64_t *steps = NULL;
	size_t n = 0;

	if (has_file(fd, CKPT_LATEST_NAME))
		return true;
	if (store_list_steps(fd, false, &steps, &n) < 0)
		return false;
	free(steps);
	return n > 0;
}

static uint64_t manifest_data_bytes(const struct ckpt_manifest *m, const struct opts *o)
{
	uint64_t sum = 0;

	for (uint32_t r = 0; r < m->world_size; r++) {
		const struct ckpt_manifest_rank *mr = &m->ranks[r];

		if (o->have_rank && o->rank != r)
			continue;
		for (uint32_t i = 0; i < mr->table.count; i++)
			sum += mr->table.tensors[i].nbytes;
		sum += mr->blob_bytes;
	}
	return sum;
}

/* ---- Verification ------------------------------------------------------------ */

/*
 * Verify one committed step (every rank, or --rank). Fills *out (JSON) when
 * asked; prints text otherwise. Returns an exit status.
 */
static int verify_step(int jobfd, const char *job, uint64_t step,
		       const struct opts *o, struct tool_progress *pg, json_t **out)
{
	struct ckpt_manifest m = { 0 };
	char err[512] = "", first[512] = "", label[48], hb[32];
	uint64_t bytes = 0, chunks = 0, bad = 0;
	json_t *jranks = o->json ? json_array() : NULL;
	int status = 0, r;
	uint32_t checked = 0;

	r = store_read_manifest(jobfd, step, &m, err, sizeof(err));
	if (r < 0) {
		snprintf(first, sizeof(first), "%s", err);
		status = r == -ENOENT || r == -EACCES ? EXIT_NOTFOUND : EXIT_VERIFY;
		goto report;
	}
	if (o->have_rank && o->rank >= m.world_size) {
		snprintf(first, sizeof(first), "%s step %" PRIu64
			 ": no rank %" PRIu32 " (world_size %" PRIu32 ")",
			 job, step, o->rank, m.world_size);
		status = EXIT_NOTFOUND;
		goto report;
	}
	snprintf(label, sizeof(label), "step %" PRIu64, step);
	tool_progress_begin(pg, label, manifest_data_bytes(&m, o));
	for (uint32_t rank = 0; rank < m.world_size; rank++) {
		struct store_verify_result res;

		if (o->have_rank && o->rank != rank)
			continue;
		r = store_verify_rank(jobfd, &m, rank, tool_progress_cb, pg, &res);
		pg->base += res.bytes;
		checked++;
		bytes += res.bytes;
		chunks += res.chunks;
		bad += res.bad_chunks;
		if (r < 0 && !res.first_error[0])
			snprintf(res.first_error, sizeof(res.first_error),
				 "rank %" PRIu32 " step %" PRIu64 ": %s", rank, step,
				 strerror(-r));
		if (r < 0) {
			status = worse(status, EXIT_VERIFY);
			if (!first[0])
				snprintf(first, sizeof(first), "%s", res.first_error);
		}
		if (jranks) {
			json_t *jr = json_pack("{s:I, s:b, s:I, s:I, s:I}", "rank",
					       (json_int_t)rank, "ok", r == 0,
					       "bytes", (json_int_t)res.bytes,
					       "chunks", (json_int_t)res.chunks,
					       "bad_chunks", (json_int_t)res.bad_chunks);
			json_object_set_new(jr, "error", r < 0 ? json_string(res.first_error)
							       : json_null());
			json_array_append_new(jranks, jr);
		} else if (!o->quiet && o->have_rank) {
			tool_progress_end(pg);
			tool_human_bytes(hb, sizeof(hb), res.bytes);
			if (r == 0)
				printf("  rank %" PRIu32 ": OK (%s, %" PRIu64 " chunks)\n",
				       rank, hb, res.chunks);
		}
	}
	tool_progress_draw(pg, pg->base, true);
	tool_progress_end(pg);

report:
	if (o->json) {
		json_t *js = json_pack("{s:s, s:I, s:b, s:I, s:I, s:I, s:I}",
				       "job", job, "step", (json_int_t)step,
				       "ok", status == 0,
				       "ranks_checked", (json_int_t)checked,
				       "bytes", (json_int_t)bytes,
				       "chunks", (json_int_t)chunks,
				       "bad_chunks", (json_int_t)bad);
		json_object_set_new(js, "error", status ? json_string(first) : json_null());
		json_object_set_new(js, "ranks", jranks);
		*out = js;
	} else if (status) {
		printf("step %" PRIu64 ": FAILED: %s\n", step, first);
		if (bad > 1)
			printf("step %" PRIu64 ": %" PRIu64 " bad chunks of %" PRIu64 "\n",
			       step, bad, chunks);
	} else if (!o->quiet) {
		tool_human_bytes(hb, sizeof(hb), bytes);
		printf("step %" PRIu64 ": OK (%" PRIu32 " rank%s, %s, %" PRIu64
		       " chunks)\n", step, checked, checked == 1 ? "" : "s", hb, chunks);
	}
	if (m.ranks)
		ckpt_manifest_free(&m);
	return status;
}

static int verify_job(int jobfd, const char *job, const struct opts *o,
		      struct tool_progress *pg, json_t **out)
{
	uint64_t *steps = NULL;
	size_t n = 0;
	int status = 0, r;
	unsigned failed = 0;
	json_t *jsteps = o->json ? json_array() : NULL;

	r = store_list_steps(jobfd, true, &steps, &n);
	if (r < 0) {
		errmsg("%s: cannot list steps: %s", job, strerror(-r));
		json_decref(jsteps);
		return EXIT_NOTFOUND;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *js = NULL;
		int s = verify_step(jobfd, job, steps[i], o, pg, o->json ? &js : NULL);

		if (s)
			failed++;
		status = worse(status, s);
		if (js)
			json_array_append_new(jsteps, js);
	}
	if (o->json) {
		*out = json_pack("{s:s, s:b, s:I, s:I, s:o}", "job", job, "ok",
				 status == 0, "committed_steps", (json_int_t)n,
				 "failed_steps", (json_int_t)failed, "steps", jsteps);
	} else if (!o->quiet || failed) {
		printf("job %s: %zu committed step%s, %u failed verification\n", job,
		       n, n == 1 ? "" : "s", failed);
	}
	free(steps);
	return status;
}

/* ---- Listing ------------------------------------------------------------------ */

static int list_root(int rootfd, const char *path, const struct opts *o,
		     struct tool_progress *pg, json_t **out)
{
	char **jobs = NULL;
	size_t njobs = 0;
	int status = 0, r;
	json_t *jjobs = o->json ? json_array() : NULL;

	r = store_list_jobs(rootfd, &jobs, &njobs);
	if (r < 0) {
		errmsg("%s: cannot list jobs: %s", path, strerror(-r));
		json_decref(jjobs);
		return EXIT_NOTFOUND;
	}
	if (!o->json && !o->verify && !o->quiet)
		printf("%-24s %7s %12s %12s\n", "JOB", "STEPS", "LATEST", "SIZE");
	for (size_t j = 0; j < njobs; j++) {
		int jobfd = open_child_dir(rootfd, jobs[j]);
		uint64_t *steps = NULL, latest = 0, total = 0;
		size_t n = 0;
		bool have_latest;
		char hb[32], lb[24];

		if (jobfd < 0) {
			errmsg("%s/%s: %s", path, jobs[j], strerror(errno));
			status = worse(status, EXIT_NOTFOUND);
			continue;
		}
		if (o->verify) {
			json_t *jj = NULL;

			status = worse(status, verify_job(jobfd, jobs[j], o, pg,
							  o->json ? &jj : NULL));
			if (jj)
				json_array_append_new(jjobs, jj);
			close(jobfd);
			continue;
		}
		r = store_list_steps(jobfd, true, &steps, &n);
		if (r < 0) {
			errmsg("%s/%s: cannot list steps: %s", path, jobs[j], strerror(-r));
			status = worse(status, EXIT_NOTFOUND);
		}
		for (size_t i = 0; i < n; i++) {
			struct ckpt_manifest m;

			if (store_read_manifest(jobfd, steps[i], &m, NULL, 0) == 0) {
				total += store_manifest_bytes(&m);
				ckpt_manifest_free(&m);
			}
		}
		have_latest = store_read_latest(jobfd, &latest) == 0;
		if (o->json) {
			json_t *jj = json_pack("{s:s, s:I, s:I}", "job", jobs[j],
					       "committed_steps", (json_int_t)n,
					       "total_bytes", (json_int_t)total);
			json_object_set_new(jj, "latest",
					    have_latest ? json_u64(latest) : json_null());
			json_array_append_new(jjobs, jj);
		} else if (!o->quiet) {
			tool_human_bytes(hb, sizeof(hb), total);
			if (have_latest)
				snprintf(lb, sizeof(lb), "%" PRIu64, latest);
			else
				snprintf(lb, sizeof(lb), "-");
			printf("%-24s %7zu %12s %12s\n", jobs[j], n, lb, hb);
		}
		free(steps);
		close(jobfd);
	}
	if (o->json)
		*out = json_pack("{s:s, s:b, s:o}", "root", path, "ok", status == 0,
				 "jobs", jjobs);
	store_strv_free(jobs, njobs);
	return status;
}

/* Shards and bytes of an uncommitted step directory, and its mtime. */
static void scan_incomplete(int jobfd, uint64_t step, uint32_t *shards,
			    uint64_t *bytes, int64_t *mtime_ns)
{
	char dname[32], name[32];
	struct stat st;
	int fd;

	*shards = 0;
	*bytes = 0;
	*mtime_ns = 0;
	if (ckpt_step_dirname(dname, sizeof(dname), step) < 0)
		return;
	fd = open_child_dir(jobfd, dname);
	if (fd < 0)
		return;
	if (fstat(fd, &st) == 0)
		*mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	/* Ranks are dense from 0; stop at the first one missing after a
	 * long gap to keep this cheap on huge jobs. */
	for (uint32_t r = 0, misses = 0; misses < 64; r++) {
		bool any = false;

		if (ckpt_shard_filename(name, sizeof(name), r) >= 0 &&
		    fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st.st_mode)) {
			(*shards)++;
			*bytes += (uint64_t)st.st_size;
			any = true;
		}
		if (ckpt_index_filename(name, sizeof(name), r) >= 0 &&
		    fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st.st_mode)) {
			*bytes += (uint64_t)st.st_size;
			any = true;
		}
		misses = any ? 0 : misses + 1;
	}
	close(fd);
}

static int list_job(int jobfd, const char *job, const struct opts *o, json_t **out)
{
	uint64_t *steps = NULL, latest = 0;
	size_t n = 0, committed = 0;
	bool have_latest;
	int status = 0, r;
	json_t *jsteps = o->json ? json_array() : NULL;

	r = store_list_steps(jobfd, false, &steps, &n);
	if (r < 0) {
		errmsg("%s: cannot list steps: %s", job, strerror(-r));
		json_decref(jsteps);
		return EXIT_NOTFOUND;
	}
	have_latest = store_read_latest(jobfd, &latest) == 0;
	if (!o->json && !o->quiet)
		printf("%12s  %-11s %6s %12s  %-20s\n", "STEP", "STATE", "RANKS",
		       "SIZE", "CREATED");
	for (size_t i = 0; i < n; i++) {
		struct ckpt_manifest m;
		char err[512] = "", dname[32];
		const char *state;
		uint32_t ranks;
		uint64_t bytes;
		int64_t created;
		bool is_latest = have_latest && latest == steps[i];
		int dfd;

		ckpt_step_dirname(dname, sizeof(dname), steps[i]);
		dfd = open_child_dir(jobfd, dname);
		bool has_manifest = dfd >= 0 && has_file(dfd, CKPT_MANIFEST_NAME);

		if (dfd >= 0)
			close(dfd);
		if (has_manifest &&
		    store_read_manifest(jobfd, steps[i], &m, err, sizeof(err)) == 0) {
			state = "committed";
			ranks = m.world_size;
			bytes = store_manifest_bytes(&m);
			created = m.created_unix_ns;
			ckpt_manifest_free(&m);
			committed++;
		} else if (has_manifest) {
			/* A commit marker that does not decode: say so, and let
			 * --verify fail on it. */
			state = "damaged";
			scan_incomplete(jobfd, steps[i], &ranks, &bytes, &created);
		} else {
			state = "incomplete";
			scan_incomplete(jobfd, steps[i], &ranks, &bytes, &created);
		}
		if (o->json) {
			json_t *js = json_pack("{s:I, s:s, s:I, s:I, s:I, s:o, s:b}",
					       "step", (json_int_t)steps[i],
					       "state", state, "ranks", (json_int_t)ranks,
					       "bytes", (json_int_t)bytes,
					       "created_unix_ns", (json_int_t)created,
					       "created", json_time(created),
					       "latest", is_latest);
			if (err[0])
				json_object_set_new(js, "error", json_string(err));
			json_array_append_new(jsteps, js);
		} else if (!o->quiet) {
			char hb[32], tb[64];

			tool_human_bytes(hb, sizeof(hb), bytes);
			format_time(tb, sizeof(tb), created);
			printf("%12" PRIu64 "  %-11s %6" PRIu32 " %12s  %-20s%s\n",
			       steps[i], state, ranks, hb, tb, is_latest ? "  LATEST" : "");
			if (err[0])
				printf("%12s  %s\n", "", err);
		}
	}
	if (o->json) {
		json_t *jj = json_pack("{s:s, s:I, s:o}", "job", job,
				       "committed_steps", (json_int_t)committed,
				       "steps", jsteps);
		json_object_set_new(jj, "latest", have_latest ? json_u64(latest) : json_null());
		*out = jj;
	} else if (!o->quiet) {
		char lb[24] = "-";

		if (have_latest)
			snprintf(lb, sizeof(lb), "%" PRIu64, latest);
		printf("job %s: %zu step%s, %zu committed, LATEST %s\n", job, n,
		       n == 1 ? "" : "s", committed, lb);
	}
	free(steps);
	return status;
}

static void print_manifest_text(const struct ckpt_manifest *m, bool is_latest,
				const struct opts *o)
{
	char hb[32], tb[64], hex[65];

	tool_human_bytes(hb, sizeof(hb), store_manifest_bytes(m));
	format_time(tb, sizeof(tb), m->created_unix_ns);
	printf("job              %s\n", m->job);
	printf("step             %" PRIu64 "%s\n", m->step, is_latest ? "  (LATEST)" : "");
	printf("world_size       %" PRIu32 "\n", m->world_size);
	printf("chunk_bytes      %" PRIu32 "\n", m->chunk_bytes);
	printf("created_unix_ns  %" PRId64 "  (%s)\n", m->created_unix_ns, tb);
	printf("total bytes      %" PRIu64 "  (%s)\n", store_manifest_bytes(m), hb);
	for (uint32_t r = 0; r < m->world_size; r++) {
		const struct ckpt_manifest_rank *mr = &m->ranks[r];
		size_t w = 4;

		if (o->have_rank && o->rank != r)
			continue;
		ckpt_hex(hex, mr->index_sha256, 32);
		tool_human_bytes(hb, sizeof(hb), mr->shard_bytes);
		printf("\nrank %" PRIu32 "\n", mr->rank);
		printf("  shard_bytes    %" PRIu64 "  (%s)\n", mr->shard_bytes, hb);
		printf("  index_bytes    %" PRIu64 "\n", mr->index_bytes);
		printf("  index_sha256   %s\n", hex);
		printf("  blob_bytes     %" PRIu64 "\n", mr->blob_bytes);
		printf("  blob_crc32c    %08" PRIx32 "\n", mr->blob_crc32c);
		printf("  tensors        %" PRIu32 "\n", mr->table.count);
		for (uint32_t i = 0; i < mr->table.count; i++) {
			size_t l = strlen(mr->table.tensors[i].name);

			if (l > w)
				w = l < 48 ? l : 48;
		}
		if (mr->table.count)
			printf("  %-*s  %-6s %-20s %-24s %12s  %-8s\n", (int)w, "NAME",
			       "DTYPE", "GLOBAL_SHAPE", "SLICE", "NBYTES", "CRC32C");
		for (uint32_t i = 0; i < mr->table.count; i++) {
			const struct ckpt_tensor *t = &mr->table.tensors[i];
			char gs[256], sl[512];

			format_dims(gs, sizeof(gs), t->global_shape, t->ndim);
			format_slice(sl, sizeof(sl), t);
			printf("  %-*s  %-6s %-20s %-24s %12" PRIu64 "  %08" PRIx32 "\n",
			       (int)w, t->name, dtype_name(t->dtype), gs, sl, t->nbytes,
			       t->crc32c);
		}
	}
}

static json_t *manifest_json(const struct ckpt_manifest *m, bool is_latest,
			     const struct opts *o)
{
	json_t *jm = json_pack("{s:s, s:I, s:I, s:I, s:I, s:o, s:I, s:b}",
			       "job", m->job, "step", (json_int_t)m->step,
			       "world_size", (json_int_t)m->world_size,
			       "chunk_bytes", (json_int_t)m->chunk_bytes,
			       "created_unix_ns", (json_int_t)m->created_unix_ns,
			       "created", json_time(m->created_unix_ns),
			       "total_bytes", (json_int_t)store_manifest_bytes(m),
			       "latest", is_latest);
	json_t *jranks = json_array();

	for (uint32_t r = 0; r < m->world_size; r++) {
		const struct ckpt_manifest_rank *mr = &m->ranks[r];
		json_t *jt = json_array();
		char hex[65];

		if (o->have_rank && o->rank != r) {
			json_decref(jt);
			continue;
		}
		ckpt_hex(hex, mr->index_sha256, 32);
		for (uint32_t i = 0; i < mr->table.count; i++) {
			const struct ckpt_tensor *t = &mr->table.tensors[i];
			char sl[512];

			format_slice(sl, sizeof(sl), t);
			json_array_append_new(jt, json_pack(
				"{s:s, s:s, s:o, s:o, s:o, s:s, s:I, s:I, s:I}",
				"name", t->name, "dtype", dtype_name(t->dtype),
				"global_shape", json_dims(t->global_shape, t->ndim),
				"offset", json_dims(t->offset, t->ndim),
				"shape", json_dims(t->shape, t->ndim),
				"slice", sl,
				"data_offset", (json_int_t)t->data_offset,
				"nbytes", (json_int_t)t->nbytes,
				"crc32c", (json_int_t)t->crc32c));
		}
		json_array_append_new(jranks, json_pack(
			"{s:I, s:I, s:I, s:s, s:I, s:I, s:o}",
			"rank", (json_int_t)mr->rank,
			"shard_bytes", (json_int_t)mr->shard_bytes,
			"index_bytes", (json_int_t)mr->index_bytes,
			"index_sha256", hex,
			"blob_bytes", (json_int_t)mr->blob_bytes,
			"blob_crc32c", (json_int_t)mr->blob_crc32c,
			"tensors", jt));
	}
	json_object_set_new(jm, "ranks", jranks);
	return jm;
}

static int show_step(int jobfd, const char *jobpath, uint64_t step,
		     const struct opts *o, json_t **out)
{
	struct ckpt_manifest m;
	char err[512] = "", dname[32];
	uint64_t latest;
	bool is_latest;
	int r, dfd;

	ckpt_step_dirname(dname, sizeof(dname), step);
	dfd = open_child_dir(jobfd, dname);
	if (dfd < 0) {
		errmsg("%s/%s: %s", jobpath, dname,
		       errno == ENOENT ? "no such step" : strerror(errno));
		return EXIT_NOTFOUND;
	}
	r = has_file(dfd, CKPT_MANIFEST_NAME);
	close(dfd);
	if (!r) {
		errmsg("%s/%s: step not committed (no %s)", jobpath, dname,
		       CKPT_MANIFEST_NAME);
		return EXIT_NOTFOUND;
	}
	r = store_read_manifest(jobfd, step, &m, err, sizeof(err));
	if (r < 0) {
		errmsg("%s/%s", jobpath, err);
		return r == -ENOENT || r == -EACCES || r == -EPERM ? EXIT_NOTFOUND
								     : EXIT_VERIFY;
	}
	if (o->have_rank && o->rank >= m.world_size) {
		errmsg("%s/%s: no rank %" PRIu32 " (world_size %" PRIu32 ")", jobpath,
		       dname, o->rank, m.world_size);
		ckpt_manifest_free(&m);
		return EXIT_NOTFOUND;
	}
	is_latest = store_read_latest(jobfd, &latest) == 0 && latest == step;
	if (o->json)
		*out = manifest_json(&m, is_latest, o);
	else if (!o->quiet)
		print_manifest_text(&m, is_latest, o);
	ckpt_manifest_free(&m);
	return 0;
}

/* ---- Command line --------------------------------------------------------------- */

static void usage_short(FILE *f)
{
	fprintf(f, "Usage: %s [--json] [--verify] [--rank R] [--quiet] [--no-progress] "
		   "ROOT[/JOB[/STEP]]\nTry '%s --help' for more.\n", prog, prog);
}

static void help(void)
{
	printf(
"NAME\n"
"    ckpt-inspect - list and verify checkpoints in a checkpoint root\n"
"\n"
"SYNOPSIS\n"
"    ckpt-inspect [OPTIONS] ROOT\n"
"    ckpt-inspect [OPTIONS] ROOT/JOB\n"
"    ckpt-inspect [OPTIONS] ROOT/JOB/STEP\n"
"\n"
"DESCRIPTION\n"
"    ckpt-inspect reads a checkpoint root directly, without ckptd. The\n"
"    layout is ROOT/JOB/LATEST and ROOT/JOB/step-NNNNNNNNNN/ holding\n"
"    rank-RRRRRR.shard, rank-RRRRRR.index and MANIFEST.json; a step is\n"
"    committed if and only if its MANIFEST.json exists.\n"
"\n"
"    What it shows depends on the path:\n"
"\n"
"    ROOT           every job: committed steps, the LATEST step, and the\n"
"                   bytes of its committed steps (shards and indexes).\n"
"    ROOT/JOB       every step directory: step, state (committed,\n"
"                   incomplete: uncommitted leftovers, damaged: a manifest\n"
"                   that does not decode), ranks, size, creation time;\n"
"                   the LATEST step is marked.\n"
"    ROOT/JOB/STEP  the step's manifest: job, step, world_size,\n"
"                   chunk_bytes, created_unix_ns; for each rank\n"
"                   shard_bytes, index_bytes, index_sha256, blob_bytes,\n"
"                   blob_crc32c and its tensors (name, dtype,\n"
"                   global_shape, slice, nbytes, crc32c). The slice is\n"
"                   start:end per dimension, from the tensor's offset to\n"
"                   offset + shape, e.g. [512:1024, 0:1024].\n"
"\n"
"    STEP is a step number (42) or a step directory name\n"
"    (step-0000000042). Symbolic links inside ROOT are never followed.\n"
"\n"
"OPTIONS\n"
"    --verify       Re-read every shard and check every chunk's CRC-32C\n"
"                   against its index, each index against the manifest's\n"
"                   SHA-256, and each tensor's crc32c. On JOB: every\n"
"                   committed step; on STEP: that step; on ROOT: every job.\n"
"                   Prints OK or the first error (file, rank, step, tensor,\n"
"                   byte offset) per step.\n"
"    --rank R       Only rank R (showing a step, and when verifying).\n"
"    --json         Write one JSON document to stdout instead of text.\n"
"    --quiet, -q    Print only failures.\n"
"    --no-progress  No progress bar. The bar (bytes done and total, MB/s,\n"
"                   ETA) is drawn on stderr only when it is a terminal.\n"
"    --help, -h     This text.\n"
"    --version, -V  The version.\n"
"\n"
"EXIT STATUS\n"
"    0  success (and, with --verify, everything verified)\n"
"    1  verification failed: a checksum, size or format check did not\n"
"       pass, or a committed step's files are missing\n"
"    2  usage error\n"
"    3  a path was not found or could not be read\n"
"\n"
"EXAMPLES\n"
"    ckpt-inspect /ckpt\n"
"        List the jobs under /ckpt.\n"
"    ckpt-inspect /ckpt/llama-7b\n"
"        List the steps of job llama-7b.\n"
"    ckpt-inspect /ckpt/llama-7b/1200 --rank 3\n"
"        Show step 1200's manifest for rank 3.\n"
"    ckpt-inspect --verify /ckpt/llama-7b\n"
"        Verify every committed step of llama-7b.\n"
"    ckpt-inspect --verify --json /ckpt/llama-7b/step-0000001200 > report.json\n"
"        Verify one step and write the result as JSON.\n");
}

static bool parse_u32(const char *s, uint32_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || !*s || *s < '0' || *s > '9')
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v > UINT32_MAX - 1)
		return false;
	*out = (uint32_t)v;
	return true;
}

static bool parse_step(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (ckpt_step_dirname_parse(s, out) == 0)
		return true;
	if (!*s || *s < '0' || *s > '9')
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v >= 10000000000ull)
		return false;
	*out = v;
	return true;
}

enum level { LEVEL_ROOT, LEVEL_JOB, LEVEL_STEP };

struct target {
	enum level level;
	char path[PATH_MAX];
	char parent[PATH_MAX]; /* the job directory of a step */
	char name[NAME_MAX + 1];
	char job[NAME_MAX + 1];
	uint64_t step;
};

static void split_path(const char *path, char *dir, size_t dircap, char *base,
		       size_t basecap)
{
	const char *slash = strrchr(path, '/');

	if (!slash) {
		snprintf(dir, dircap, ".");
		snprintf(base, basecap, "%s", path);
	} else {
		snprintf(base, basecap, "%s", slash + 1);
		if (slash == path)
			snprintf(dir, dircap, "/");
		else
			snprintf(dir, dircap, "%.*s", (int)(slash - path), path);
	}
}

/* The job's name from its directory path, resolving "." and "..". */
static void job_name_of(const char *jobdir, char *job, size_t cap)
{
	char dir[PATH_MAX], *real = realpath(jobdir, NULL);

	split_path(real ? real : jobdir, dir, sizeof(dir), job, cap);
	free(real);
}

/* Work out from the path whether it names a root, a job or a step. */
static int resolve(const char *arg, struct target *t)
{
	struct stat st;
	size_t len = strlen(arg);

	if (len == 0 || len >= sizeof(t->path)) {
		errmsg("invalid path '%s'", arg);
		return EXIT_USAGE;
	}
	memcpy(t->path, arg, len + 1);
	while (len > 1 && t->path[len - 1] == '/')
		t->path[--len] = '\0';
	split_path(t->path, t->parent, sizeof(t->parent), t->name, sizeof(t->name));

	if (stat(t->path, &st) == 0) {
		if (!S_ISDIR(st.st_mode)) {
			errmsg("%s: not a directory", t->path);
			return EXIT_NOTFOUND;
		}
		if (ckpt_step_dirname_parse(t->name, &t->step) == 0) {
			t->level = LEVEL_STEP;
			job_name_of(t->parent, t->job, sizeof(t->job));
			return 0;
		}
		int fd = open_dir(t->path);

		if (fd < 0) {
			errmsg("%s: %s", t->path, strerror(errno));
			return EXIT_NOTFOUND;
		}
		t->level = looks_like_job(fd) ? LEVEL_JOB : LEVEL_ROOT;
		close(fd);
		job_name_of(t->path, t->job, sizeof(t->job));
		return 0;
	}
	if (errno != ENOENT) {
		errmsg("%s: %s", t->path, strerror(errno));
		return EXIT_NOTFOUND;
	}
	/* ROOT/JOB/42: a step by number, or a step directory that is gone. */
	if (parse_step(t->name, &t->step) && stat(t->parent, &st) == 0 &&
	    S_ISDIR(st.st_mode)) {
		t->level = LEVEL_STEP;
		job_name_of(t->parent, t->job, sizeof(t->job));
		return 0;
	}
	errmsg("%s: no such file or directory", t->path);
	return EXIT_NOTFOUND;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "verify", no_argument, NULL, 'v' },
		{ "rank", required_argument, NULL, 'r' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "no-progress", no_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 }
	};
	struct opts o = { .progress = true };
	struct target t = { 0 };
	struct tool_progress pg = { 0 };
	json_t *doc = NULL;
	int c, status, fd;

	while ((c = getopt_long(argc, argv, "qhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			o.json = true;
			break;
		case 'v':
			o.verify = true;
			break;
		case 'r':
			if (!parse_u32(optarg, &o.rank)) {
				errmsg("--rank: '%s' is not a rank number", optarg);
				return EXIT_USAGE;
			}
			o.have_rank = true;
			break;
		case 'q':
			o.quiet = true;
			break;
		case 'P':
			o.progress = false;
			break;
		case 'h':
			help();
			return 0;
		case 'V':
			printf("ckpt-inspect %s\n", CKPT_VERSION);
			return 0;
		default:
			usage_short(stderr);
			return EXIT_USAGE;
		}
	}
	if (argc - optind != 1) {
		errmsg(argc == optind ? "missing ROOT[/JOB[/STEP]]" : "too many arguments");
		usage_short(stderr);
		return EXIT_USAGE;
	}
	status = resolve(argv[optind], &t);
	if (status)
		return status;

	pg.on = o.verify && o.progress && !o.quiet && isatty(STDERR_FILENO);

	fd = open_dir(t.level == LEVEL_STEP ? t.parent : t.path);
	if (fd < 0) {
		errmsg("%s: %s", t.level == LEVEL_STEP ? t.parent : t.path,
		       strerror(errno));
		return EXIT_NOTFOUND;
	}
	switch (t.level) {
	case LEVEL_ROOT:
		status = list_root(fd, t.path, &o, &pg, &doc);
		break;
	case LEVEL_JOB:
		status = o.verify ? verify_job(fd, t.job, &o, &pg, &doc)
				  : list_job(fd, t.job, &o, &doc);
		break;
	case LEVEL_STEP:
		if (o.verify) {
			char dname[32];
			int dfd;

			/* Name a missing or uncommitted step for what it is
			 * rather than as a failed check. */
			ckpt_step_dirname(dname, sizeof(dname), t.step);
			dfd = open_child_dir(fd, dname);
			if (dfd < 0 || !has_file(dfd, CKPT_MANIFEST_NAME)) {
				errmsg("%s/%s: %s", t.parent, dname,
				       dfd < 0 ? "no such step"
					       : "step not committed (no " CKPT_MANIFEST_NAME ")");
				status = EXIT_NOTFOUND;
			} else {
				status = verify_step(fd, t.job, t.step, &o, &pg, &doc);
			}
			if (dfd >= 0)
				close(dfd);
		} else {
			status = show_step(fd, t.parent, t.step, &o, &doc);
		}
		break;
	}
	close(fd);
	if (doc) {
		json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		fputc('\n', stdout);
		json_decref(doc);
	}
	if (fflush(stdout) != 0 || ferror(stdout)) {
		errmsg("writing output: %s", strerror(errno));
		return worse(status, EXIT_NOTFOUND);
	}
	return status;
}
