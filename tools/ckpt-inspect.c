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
#include "inspect.h"
#include "s3.h"
#include "toolutil.h"

static const char *prog = "ckpt-inspect";

int inspect_worse(int a, int b)
{
	static const int rank[] = { [0] = 0, [EXIT_VERIFY] = 1,
				    [EXIT_NOTFOUND] = 2, [EXIT_USAGE] = 3 };
	return rank[b] > rank[a] ? b : a;
}

void inspect_err(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void inspect_format_time(char *buf, size_t cap, int64_t unix_ns)
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

json_t *inspect_json_time(int64_t unix_ns)
{
	char buf[64];

	inspect_format_time(buf, sizeof(buf), unix_ns);
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

static uint64_t manifest_data_bytes(const struct ckpt_manifest *m, const struct inspect_opts *o)
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

int inspect_verify_step(struct inspect_step_source *src, const char *job,
			uint64_t step, const struct inspect_opts *o,
			struct tool_progress *pg, json_t **out)
{
	struct ckpt_manifest m = { 0 };
	struct inspect_rank_check *checks = NULL;
	char err[512] = "", first[512] = "", label[48], hb[32];
	uint64_t bytes = 0, chunks = 0, bad = 0;
	json_t *jranks = o->json ? json_array() : NULL;
	int status = 0, r;
	uint32_t checked = 0;
	size_t n = 0;

	r = src->read_manifest(src, step, &m, err, sizeof(err));
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
	checks = calloc(m.world_size ? m.world_size : 1, sizeof(*checks));
	if (!checks) {
		snprintf(first, sizeof(first), "%s", strerror(ENOMEM));
		status = EXIT_VERIFY;
		goto report;
	}
	for (uint32_t rank = 0; rank < m.world_size; rank++)
		if (!o->have_rank || o->rank == rank)
			checks[n++].rank = rank;
	snprintf(label, sizeof(label), "step %" PRIu64, step);
	tool_progress_begin(pg, label, manifest_data_bytes(&m, o));
	src->verify_ranks(src, &m, checks, n, pg);
	tool_progress_draw(pg, pg->base, true);
	tool_progress_end(pg);
	for (size_t i = 0; i < n; i++) {
		struct inspect_rank_check *c = &checks[i];
		struct store_verify_result *res = &c->res;

		checked++;
		bytes += res->bytes;
		chunks += res->chunks;
		bad += res->bad_chunks;
		if (c->r < 0 && !res->first_error[0])
			snprintf(res->first_error, sizeof(res->first_error),
				 "rank %" PRIu32 " step %" PRIu64 ": %s", c->rank, step,
				 strerror(-c->r));
		if (c->r < 0) {
			status = inspect_worse(status, EXIT_VERIFY);
			if (!first[0])
				snprintf(first, sizeof(first), "%s", res->first_error);
		}
		if (jranks) {
			json_t *jr = json_pack("{s:I, s:b, s:I, s:I, s:I}", "rank",
					       (json_int_t)c->rank, "ok", c->r == 0,
					       "bytes", (json_int_t)res->bytes,
					       "chunks", (json_int_t)res->chunks,
					       "bad_chunks", (json_int_t)res->bad_chunks);
			json_object_set_new(jr, "error", c->r < 0 ? json_string(res->first_error)
								  : json_null());
			json_array_append_new(jranks, jr);
		} else if (!o->quiet && o->have_rank && c->r == 0) {
			tool_human_bytes(hb, sizeof(hb), res->bytes);
			printf("  rank %" PRIu32 ": OK (%s, %" PRIu64 " chunks)\n",
			       c->rank, hb, res->chunks);
		}
	}

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
	free(checks);
	if (m.ranks)
		ckpt_manifest_free(&m);
	return status;
}

void inspect_report_job(const char *job, size_t committed, unsigned failed,
			int status, json_t *jsteps, const struct inspect_opts *o,
			json_t **out)
{
	if (o->json) {
		*out = json_pack("{s:s, s:b, s:I, s:I, s:o}", "job", job, "ok",
				 status == 0, "committed_steps", (json_int_t)committed,
				 "failed_steps", (json_int_t)failed, "steps", jsteps);
	} else if (!o->quiet || failed) {
		printf("job %s: %zu committed step%s, %u failed verification\n", job,
		       committed, committed == 1 ? "" : "s", failed);
	}
}

/* A job directory of the root as a step source. */
struct root_source {
	struct inspect_step_source pub;
	int jobfd;
};

static int root_read_manifest(struct inspect_step_source *s, uint64_t step,
			      struct ckpt_manifest *m, char *err, size_t errlen)
{
	return store_read_manifest(((struct root_source *)s)->jobfd, step, m, err,
				   errlen);
}

static void root_verify_ranks(struct inspect_step_source *s,
			      const struct ckpt_manifest *m,
			      struct inspect_rank_check *checks, size_t n,
			      struct tool_progress *pg)
{
	int jobfd = ((struct root_source *)s)->jobfd;

	for (size_t i = 0; i < n; i++) {
		checks[i].r = store_verify_rank(jobfd, m, checks[i].rank,
						tool_progress_cb, pg, &checks[i].res);
		pg->base += checks[i].res.bytes;
	}
}

static int verify_step(int jobfd, const char *job, uint64_t step,
		       const struct inspect_opts *o, struct tool_progress *pg,
		       json_t **out)
{
	struct root_source src = {
		.pub = { .read_manifest = root_read_manifest,
			 .verify_ranks = root_verify_ranks },
		.jobfd = jobfd,
	};

	return inspect_verify_step(&src.pub, job, step, o, pg, out);
}

static int verify_job(int jobfd, const char *job, const struct inspect_opts *o,
		      struct tool_progress *pg, json_t **out)
{
	uint64_t *steps = NULL;
	size_t n = 0;
	int status = 0, r;
	unsigned failed = 0;
	json_t *jsteps = o->json ? json_array() : NULL;

	r = store_list_steps(jobfd, true, &steps, &n);
	if (r < 0) {
		inspect_err("%s: cannot list steps: %s", job, strerror(-r));
		json_decref(jsteps);
		return EXIT_NOTFOUND;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *js = NULL;
		int s = verify_step(jobfd, job, steps[i], o, pg, o->json ? &js : NULL);

		if (s)
			failed++;
		status = inspect_worse(status, s);
		if (js)
			json_array_append_new(jsteps, js);
	}
	inspect_report_job(job, n, failed, status, jsteps, o, out);
	free(steps);
	return status;
}

/* ---- Listing ------------------------------------------------------------------ */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int cmp_strp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Step numbers in either ascending list, once each, ascending. */
static uint64_t *merge_steps(const uint64_t *a, size_t na,
			     const struct inspect_s3_job *sj, size_t *n)
{
	size_t nb = sj ? sj->n : 0, i = 0, k = 0, m = 0;
	uint64_t *v = malloc((na + nb ? na + nb : 1) * sizeof(*v));

	if (!v)
		return NULL;
	while (i < na || k < nb) {
		uint64_t x = i < na ? a[i] : UINT64_MAX;
		uint64_t y = k < nb ? sj->steps[k].step : UINT64_MAX;

		v[m++] = x < y ? x : y;
		i += x <= y;
		k += y <= x;
	}
	*n = m;
	return v;
}

/* Names in either sorted list, once each, sorted; the strings are
 * borrowed from a and b. */
static char **merge_names(char **a, size_t na, char **b, size_t nb, size_t *n)
{
	size_t i = 0, k = 0, m = 0;
	char **v = malloc((na + nb ? na + nb : 1) * sizeof(*v));

	if (!v)
		return NULL;
	while (i < na || k < nb) {
		int c = i >= na ? 1 : k >= nb ? -1 : strcmp(a[i], b[k]);

		v[m++] = c <= 0 ? a[i] : b[k];
		i += c <= 0;
		k += c >= 0;
	}
	*n = m;
	return v;
}

/* Tiers of a job's steps: the committed steps of the root (ascending)
 * against what S3 holds. Counts go to the text column, steps to JSON. */
static void job_tiers(const uint64_t *committed, size_t n,
		      const struct inspect_s3_job *sj, char *text, size_t cap,
		      json_t *counts, json_t *jsteps)
{
	static const char *const names[] = { "root+s3", "root", "s3", "uploading" };
	size_t count[4] = { 0 }, nall = 0, pos = 0;
	uint64_t *all = merge_steps(committed, n, sj, &nall);

	for (size_t i = 0; all && i < nall; i++) {
		bool in_root = bsearch(&all[i], committed, n, sizeof(*committed),
				       cmp_u64) != NULL;
		const char *t = inspect_tiers(in_root, inspect_s3_find(sj, all[i]));

		for (size_t k = 0; k < 4; k++)
			if (!strcmp(t, names[k]))
				count[k]++;
		if (jsteps && strcmp(t, "-"))
			json_array_append_new(jsteps, json_pack("{s:I, s:s}", "step",
								(json_int_t)all[i],
								"tiers", t));
	}
	free(all);
	text[0] = '\0';
	for (size_t k = 0; k < 4; k++) {
		if (counts)
			json_object_set_new(counts, names[k], json_u64(count[k]));
		if (count[k] && pos < cap)
			pos += (size_t)snprintf(text + pos, cap - pos, "%s%zu %s",
						pos ? ", " : "", count[k], names[k]);
	}
	if (!text[0])
		snprintf(text, cap, "-");
}

static int list_root(int rootfd, const char *path, const struct inspect_opts *o,
		     inspect_s3 *tier, struct tool_progress *pg, json_t **out)
{
	char **rootjobs = NULL, **s3jobs = NULL, **jobs = NULL;
	size_t nroot = 0, ns3 = 0, njobs = 0;
	int status = 0, r;
	json_t *jjobs = o->json ? json_array() : NULL;

	r = store_list_jobs(rootfd, &rootjobs, &nroot);
	if (r < 0) {
		inspect_err("%s: cannot list jobs: %s", path, strerror(-r));
		json_decref(jjobs);
		return EXIT_NOTFOUND;
	}
	if (tier) {
		char why[700] = "";

		r = inspect_s3_list_jobs(tier, &s3jobs, &ns3, why, sizeof(why));
		if (r < 0) {
			inspect_err("%s: %s", inspect_s3_url(tier), why);
			json_decref(jjobs);
			store_strv_free(rootjobs, nroot);
			return EXIT_NOTFOUND;
		}
	}
	jobs = merge_names(rootjobs, nroot, s3jobs, ns3, &njobs);
	if (!jobs) {
		inspect_err("%s: %s", path, strerror(ENOMEM));
		json_decref(jjobs);
		store_strv_free(rootjobs, nroot);
		store_strv_free(s3jobs, ns3);
		return EXIT_NOTFOUND;
	}
	if (!o->json && !o->verify && !o->quiet)
		printf("%-24s %7s %12s %12s%s\n", "JOB", "STEPS", "LATEST", "SIZE",
		       tier ? "  TIERS" : "");
	for (size_t j = 0; j < njobs; j++) {
		bool in_root = bsearch(&jobs[j], rootjobs, nroot, sizeof(*rootjobs),
				       cmp_strp) != NULL;
		int jobfd = in_root ? open_child_dir(rootfd, jobs[j]) : -1;
		uint64_t *steps = NULL, latest = 0, total = 0;
		size_t n = 0;
		bool have_latest = false;
		char hb[32], lb[24], tt[128] = "";
		struct inspect_s3_job sj = { 0 };
		json_t *jcounts = NULL, *jtsteps = NULL;

		if (in_root && jobfd < 0) {
			inspect_err("%s/%s: %s", path, jobs[j], strerror(errno));
			status = inspect_worse(status, EXIT_NOTFOUND);
			continue;
		}
		if (o->verify) {
			json_t *jj = NULL;

			status = inspect_worse(status, verify_job(jobfd, jobs[j], o, pg,
								  o->json ? &jj : NULL));
			if (jj)
				json_array_append_new(jjobs, jj);
			close(jobfd);
			continue;
		}
		if (in_root) {
			r = store_list_steps(jobfd, true, &steps, &n);
			if (r < 0) {
				inspect_err("%s/%s: cannot list steps: %s", path, jobs[j],
					    strerror(-r));
				status = inspect_worse(status, EXIT_NOTFOUND);
			}
			for (size_t i = 0; i < n; i++) {
				struct ckpt_manifest m;

				if (store_read_manifest(jobfd, steps[i], &m, NULL, 0) == 0) {
					total += store_manifest_bytes(&m);
					ckpt_manifest_free(&m);
				}
			}
			have_latest = store_read_latest(jobfd, &latest) == 0;
		}
		if (tier) {
			char why[700] = "";

			r = inspect_s3_scan_job(tier, jobs[j], false, &sj, why, sizeof(why));
			if (r < 0) {
				inspect_err("%s: %s", inspect_s3_url(tier), why);
				status = inspect_worse(status, EXIT_NOTFOUND);
			}
			if (o->json) {
				jcounts = json_object();
				jtsteps = json_array();
			}
			job_tiers(steps, n, &sj, tt, sizeof(tt), jcounts, jtsteps);
		}
		if (o->json) {
			json_t *jj = json_pack("{s:s, s:I, s:I}", "job", jobs[j],
					       "committed_steps", (json_int_t)n,
					       "total_bytes", (json_int_t)total);
			json_object_set_new(jj, "latest",
					    have_latest ? json_u64(latest) : json_null());
			if (tier) {
				json_object_set_new(jj, "s3_committed_steps",
						    json_u64(sj.committed));
				json_object_set_new(jj, "tiers", jcounts);
				json_object_set_new(jj, "steps", jtsteps);
			}
			json_array_append_new(jjobs, jj);
		} else if (!o->quiet) {
			tool_human_bytes(hb, sizeof(hb), total);
			if (have_latest)
				snprintf(lb, sizeof(lb), "%" PRIu64, latest);
			else
				snprintf(lb, sizeof(lb), "-");
			printf("%-24s %7zu %12s %12s%s%s\n", jobs[j], n, lb, hb,
			       tier ? "  " : "", tt);
		}
		inspect_s3_job_free(&sj);
		free(steps);
		if (jobfd >= 0)
			close(jobfd);
	}
	if (o->json) {
		*out = json_pack("{s:s, s:b, s:o}", "root", path, "ok", status == 0,
				 "jobs", jjobs);
		if (tier)
			json_object_set_new(*out, "s3_url", json_string(inspect_s3_url(tier)));
	}
	free(jobs);
	store_strv_free(rootjobs, nroot);
	store_strv_free(s3jobs, ns3);
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

static int list_job(int jobfd, const char *job, const struct inspect_opts *o,
		    inspect_s3 *tier, json_t **out)
{
	struct inspect_s3_job sj = { 0 };
	uint64_t *dirs = NULL, *steps = NULL, latest = 0;
	size_t ndirs = 0, n = 0, committed = 0;
	bool have_latest;
	int status = 0, r;
	json_t *jsteps = o->json ? json_array() : NULL;

	r = store_list_steps(jobfd, false, &dirs, &ndirs);
	if (r < 0) {
		inspect_err("%s: cannot list steps: %s", job, strerror(-r));
		json_decref(jsteps);
		return EXIT_NOTFOUND;
	}
	if (tier) {
		char why[700] = "";

		/* Manifests too: a step only S3 holds is described from its. */
		r = inspect_s3_scan_job(tier, job, true, &sj, why, sizeof(why));
		if (r < 0) {
			inspect_err("%s: %s", inspect_s3_url(tier), why);
			json_decref(jsteps);
			free(dirs);
			return EXIT_NOTFOUND;
		}
	}
	steps = merge_steps(dirs, ndirs, tier ? &sj : NULL, &n);
	if (!steps) {
		inspect_err("%s: %s", job, strerror(ENOMEM));
		json_decref(jsteps);
		free(dirs);
		inspect_s3_job_free(&sj);
		return EXIT_NOTFOUND;
	}
	have_latest = store_read_latest(jobfd, &latest) == 0;
	if (!o->json && !o->quiet)
		printf("%12s  %-11s %6s %12s  %-20s%s\n", "STEP", "STATE", "RANKS",
		       "SIZE", "CREATED", tier ? "  TIERS" : "");
	for (size_t i = 0; i < n; i++) {
		const struct inspect_s3_step *s3 = inspect_s3_find(&sj, steps[i]);
		struct ckpt_manifest m;
		char err[512] = "", dname[32];
		const char *state, *tiers = NULL;
		uint32_t ranks = 0;
		uint64_t bytes = 0;
		int64_t created = 0;
		bool is_latest = have_latest && latest == steps[i];
		bool in_root = bsearch(&steps[i], dirs, ndirs, sizeof(*dirs), cmp_u64) != NULL;
		int dfd = -1;

		if (ckpt_step_dirname(dname, sizeof(dname), steps[i]) < 0)
			continue; /* listed by name: cannot happen */
		if (in_root)
			dfd = open_child_dir(jobfd, dname);
		bool has_manifest = dfd >= 0 && has_file(dfd, CKPT_MANIFEST_NAME);

		if (dfd >= 0)
			close(dfd);
		if (!in_root) {
			/* Only S3 holds it. */
			state = s3->committed ? (s3->damaged ? "damaged" : "committed")
					      : "uploading";
			ranks = s3->have_manifest ? s3->world_size : s3->shards;
			bytes = s3->have_manifest ? s3->manifest_bytes : s3->bytes;
			created = s3->have_manifest ? s3->created_unix_ns : 0;
			if (s3->damaged)
				snprintf(err, sizeof(err), "%s", s3->error);
		} else if (has_manifest &&
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
		if (tier)
			tiers = inspect_tiers(in_root && !strcmp(state, "committed"), s3);
		if (o->json) {
			json_t *js = json_pack("{s:I, s:s, s:I, s:I, s:I, s:o, s:b}",
					       "step", (json_int_t)steps[i],
					       "state", state, "ranks", (json_int_t)ranks,
					       "bytes", (json_int_t)bytes,
					       "created_unix_ns", (json_int_t)created,
					       "created", inspect_json_time(created),
					       "latest", is_latest);
			if (tiers)
				json_object_set_new(js, "tiers", json_string(tiers));
			if (err[0])
				json_object_set_new(js, "error", json_string(err));
			json_array_append_new(jsteps, js);
		} else if (!o->quiet) {
			char hb[32], tb[64], tc[16] = "";

			tool_human_bytes(hb, sizeof(hb), bytes);
			inspect_format_time(tb, sizeof(tb), created);
			if (tiers)
				snprintf(tc, sizeof(tc), "  %-9s", tiers);
			printf("%12" PRIu64 "  %-11s %6" PRIu32 " %12s  %-20s%s%s\n",
			       steps[i], state, ranks, hb, tb, tc, is_latest ? "  LATEST" : "");
			if (err[0])
				printf("%12s  %s\n", "", err);
		}
	}
	if (o->json) {
		json_t *jj = json_pack("{s:s, s:I, s:o}", "job", job,
				       "committed_steps", (json_int_t)committed,
				       "steps", jsteps);
		json_object_set_new(jj, "latest", have_latest ? json_u64(latest) : json_null());
		if (tier) {
			json_object_set_new(jj, "s3_url", json_string(inspect_s3_url(tier)));
			json_object_set_new(jj, "s3_committed_steps", json_u64(sj.committed));
			json_object_set_new(jj, "s3_latest",
					    sj.have_latest ? json_u64(sj.latest) : json_null());
		}
		*out = jj;
	} else if (!o->quiet) {
		char lb[24] = "-";

		if (have_latest)
			snprintf(lb, sizeof(lb), "%" PRIu64, latest);
		printf("job %s: %zu step%s, %zu committed, LATEST %s", job, n,
		       n == 1 ? "" : "s", committed, lb);
		if (tier)
			printf("; %zu committed on %s", sj.committed, inspect_s3_url(tier));
		printf("\n");
	}
	free(steps);
	free(dirs);
	inspect_s3_job_free(&sj);
	return status;
}

void inspect_print_manifest(const struct ckpt_manifest *m, bool is_latest,
				const struct inspect_opts *o)
{
	char hb[32], tb[64], hex[65];

	tool_human_bytes(hb, sizeof(hb), store_manifest_bytes(m));
	inspect_format_time(tb, sizeof(tb), m->created_unix_ns);
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

json_t *inspect_manifest_json(const struct ckpt_manifest *m, bool is_latest,
			     const struct inspect_opts *o)
{
	json_t *jm = json_pack("{s:s, s:I, s:I, s:I, s:I, s:o, s:I, s:b}",
			       "job", m->job, "step", (json_int_t)m->step,
			       "world_size", (json_int_t)m->world_size,
			       "chunk_bytes", (json_int_t)m->chunk_bytes,
			       "created_unix_ns", (json_int_t)m->created_unix_ns,
			       "created", inspect_json_time(m->created_unix_ns),
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
		     const struct inspect_opts *o, json_t **out)
{
	struct ckpt_manifest m;
	char err[512] = "", dname[32];
	uint64_t latest;
	bool is_latest;
	int r, dfd;

	if (ckpt_step_dirname(dname, sizeof(dname), step) < 0) {
		inspect_err("%s: %" PRIu64 " is not a step number (0..%llu)", jobpath, step,
			    CKPT_STEP_MAX);
		return EXIT_NOTFOUND;
	}
	dfd = open_child_dir(jobfd, dname);
	if (dfd < 0) {
		inspect_err("%s/%s: %s", jobpath, dname,
		       errno == ENOENT ? "no such step" : strerror(errno));
		return EXIT_NOTFOUND;
	}
	r = has_file(dfd, CKPT_MANIFEST_NAME);
	close(dfd);
	if (!r) {
		inspect_err("%s/%s: step not committed (no %s)", jobpath, dname,
		       CKPT_MANIFEST_NAME);
		return EXIT_NOTFOUND;
	}
	r = store_read_manifest(jobfd, step, &m, err, sizeof(err));
	if (r < 0) {
		inspect_err("%s/%s", jobpath, err);
		return r == -ENOENT || r == -EACCES || r == -EPERM ? EXIT_NOTFOUND
								     : EXIT_VERIFY;
	}
	if (o->have_rank && o->rank >= m.world_size) {
		inspect_err("%s/%s: no rank %" PRIu32 " (world_size %" PRIu32 ")", jobpath,
		       dname, o->rank, m.world_size);
		ckpt_manifest_free(&m);
		return EXIT_NOTFOUND;
	}
	is_latest = store_read_latest(jobfd, &latest) == 0 && latest == step;
	if (o->json)
		*out = inspect_manifest_json(&m, is_latest, o);
	else if (!o->quiet)
		inspect_print_manifest(&m, is_latest, o);
	ckpt_manifest_free(&m);
	return 0;
}

/* ---- Command line --------------------------------------------------------------- */

static void usage_short(FILE *f)
{
	fprintf(f, "Usage: %s [--json] [--verify] [--rank R] [--quiet] [--no-progress]\n"
		   "       [--s3 s3://BUCKET/PREFIX] [--endpoint-url URL] [--profile NAME]\n"
		   "       [--region R] ROOT[/JOB[/STEP]] | s3://BUCKET/PREFIX[/JOB[@STEP]]\n"
		   "Try '%s --help' for more.\n", prog, prog);
}

static void help(void)
{
	printf(
"NAME\n"
"    ckpt-inspect - list and verify checkpoints in a checkpoint root or on S3\n"
"\n"
"SYNOPSIS\n"
"    ckpt-inspect [OPTIONS] ROOT\n"
"    ckpt-inspect [OPTIONS] ROOT/JOB\n"
"    ckpt-inspect [OPTIONS] ROOT/JOB/STEP\n"
"    ckpt-inspect [OPTIONS] s3://BUCKET[/PREFIX][/JOB[@STEP]]\n"
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
"  On S3\n"
"    A job's steps are mirrored under s3://BUCKET/PREFIX/JOB/ with the\n"
"    same names; a step is committed on S3 if and only if its\n"
"    MANIFEST.json object exists. The same three levels work on a URL:\n"
"    s3://BUCKET/PREFIX lists the jobs with a committed step there;\n"
"    s3://BUCKET/PREFIX/JOB lists its steps (committed; uploading: objects\n"
"    without a manifest, or an open multipart upload; damaged), the step\n"
"    the LATEST object names marked; s3://BUCKET/PREFIX/JOB@STEP (or\n"
"    .../JOB/STEP where no job of that name exists) shows the manifest.\n"
"    --verify streams each rank's shard with parallel ranged GETs\n"
"    (bounded memory) and runs the root's checks on it. Credentials,\n"
"    region and endpoint are found as the AWS CLI finds them\n"
"    (AWS_* variables, ~/.aws/credentials and ~/.aws/config).\n"
"\n"
"  Tiers\n"
"    With --s3, a listing of ROOT/JOB gains a TIERS column per step:\n"
"    root+s3 (committed in both), root (only in the root), s3 (only on\n"
"    S3), uploading (objects or an open multipart upload on S3 without\n"
"    its manifest yet), - (committed nowhere). A listing of ROOT shows\n"
"    per job how many steps are in each tier.\n"
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
"    --s3 URL       Compare ROOT or ROOT/JOB with the S3 tier at\n"
"                   s3://BUCKET/PREFIX (the job is PREFIX/JOB there).\n"
"    --endpoint-url URL\n"
"                   The S3 endpoint (http://127.0.0.1:7480, https://...);\n"
"                   default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the\n"
"                   profile's endpoint_url, else AWS.\n"
"    --profile NAME The AWS profile for credentials and settings.\n"
"    --region R     The S3 region (default: AWS_REGION, the profile's,\n"
"                   else us-east-1).\n"
"    --help, -h     This text.\n"
"    --version, -V  The version.\n"
"\n"
"EXIT STATUS\n"
"    0  success (and, with --verify, everything verified)\n"
"    1  verification failed: a checksum, size or format check did not\n"
"       pass, or a committed step's files are missing\n"
"    2  usage error (also a malformed s3:// URL)\n"
"    3  a path or S3 object was not found or could not be read\n"
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
"        Verify one step and write the result as JSON.\n"
"    ckpt-inspect s3://ckpt-bucket/runs/llama-7b\n"
"        List the steps of job llama-7b on S3.\n"
"    ckpt-inspect --verify s3://ckpt-bucket/runs/llama-7b@1200\n"
"        Verify step 1200 as S3 holds it.\n"
"    ckpt-inspect /ckpt/llama-7b --s3 s3://ckpt-bucket/runs\n"
"        Which steps are in the root, on S3, or both.\n");
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
		inspect_err("invalid path '%s'", arg);
		return EXIT_USAGE;
	}
	memcpy(t->path, arg, len + 1);
	while (len > 1 && t->path[len - 1] == '/')
		t->path[--len] = '\0';
	split_path(t->path, t->parent, sizeof(t->parent), t->name, sizeof(t->name));

	if (stat(t->path, &st) == 0) {
		if (!S_ISDIR(st.st_mode)) {
			inspect_err("%s: not a directory", t->path);
			return EXIT_NOTFOUND;
		}
		if (ckpt_step_dirname_parse(t->name, &t->step) == 0) {
			t->level = LEVEL_STEP;
			job_name_of(t->parent, t->job, sizeof(t->job));
			return 0;
		}
		int fd = open_dir(t->path);

		if (fd < 0) {
			inspect_err("%s: %s", t->path, strerror(errno));
			return EXIT_NOTFOUND;
		}
		t->level = looks_like_job(fd) ? LEVEL_JOB : LEVEL_ROOT;
		close(fd);
		job_name_of(t->path, t->job, sizeof(t->job));
		return 0;
	}
	if (errno != ENOENT) {
		inspect_err("%s: %s", t->path, strerror(errno));
		return EXIT_NOTFOUND;
	}
	/* ROOT/JOB/42: a step by number, or a step directory that is gone. */
	if (tool_parse_step(t->name, &t->step) && stat(t->parent, &st) == 0 &&
	    S_ISDIR(st.st_mode)) {
		t->level = LEVEL_STEP;
		job_name_of(t->parent, t->job, sizeof(t->job));
		return 0;
	}
	inspect_err("%s: no such file or directory", t->path);
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
		{ "s3", required_argument, NULL, 'S' },
		{ "endpoint-url", required_argument, NULL, 'E' },
		{ "profile", required_argument, NULL, 'F' },
		{ "region", required_argument, NULL, 'R' },
		{ 0 }
	};
	struct inspect_opts o = { .progress = true };
	struct s3_settings s3set = { 0 };
	struct target t = { 0 };
	struct tool_progress pg = { 0 };
	inspect_s3 *tier = NULL;
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
				inspect_err("--rank: '%s' is not a rank number", optarg);
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
		case 'S':
			o.s3_url = optarg;
			break;
		case 'E':
		case 'F':
		case 'R':
			if (!*optarg) {
				inspect_err("--%s: empty value",
					    c == 'E' ? "endpoint-url" : c == 'F' ? "profile" : "region");
				return EXIT_USAGE;
			}
			if (c == 'E' && strncmp(optarg, "http://", 7) != 0 &&
			    strncmp(optarg, "https://", 8) != 0) {
				inspect_err("--endpoint-url: '%s' is not an http:// or https:// URL",
					    optarg);
				return EXIT_USAGE;
			}
			if (c == 'E')
				s3set.endpoint_url = optarg;
			else if (c == 'F')
				s3set.profile = optarg;
			else
				s3set.region = optarg;
			break;
		default:
			usage_short(stderr);
			return EXIT_USAGE;
		}
	}
	if (argc - optind != 1) {
		inspect_err(argc == optind ? "missing ROOT[/JOB[/STEP]]" : "too many arguments");
		usage_short(stderr);
		return EXIT_USAGE;
	}
	o.s3 = &s3set;
	pg.on = o.verify && o.progress && !o.quiet && isatty(STDERR_FILENO);
	if (!strncmp(argv[optind], "s3:", 3)) {
		if (o.s3_url) {
			inspect_err("--s3 compares a checkpoint root with S3; the path is "
				    "already an S3 URL");
			return EXIT_USAGE;
		}
		status = inspect_s3_main(argv[optind], &o, &pg, &doc);
		goto output;
	}
	if (o.s3_url && o.verify) {
		inspect_err("--s3 adds tiers to a listing; to verify what S3 holds, "
			    "give the s3:// URL as the path");
		return EXIT_USAGE;
	}
	status = resolve(argv[optind], &t);
	if (status)
		return status;
	if (o.s3_url) {
		char why[700] = "";
		int r;

		if (t.level == LEVEL_STEP) {
			inspect_err("--s3 applies to ROOT and ROOT/JOB, not to a step");
			return EXIT_USAGE;
		}
		r = inspect_s3_open(o.s3_url, o.s3, &tier, why, sizeof(why));
		if (r < 0) {
			inspect_err("--s3: %s", why);
			return r == -EINVAL ? EXIT_USAGE : EXIT_NOTFOUND;
		}
	}

	fd = open_dir(t.level == LEVEL_STEP ? t.parent : t.path);
	if (fd < 0) {
		inspect_err("%s: %s", t.level == LEVEL_STEP ? t.parent : t.path,
			    strerror(errno));
		inspect_s3_close(tier);
		return EXIT_NOTFOUND;
	}
	switch (t.level) {
	case LEVEL_ROOT:
		status = list_root(fd, t.path, &o, tier, &pg, &doc);
		break;
	case LEVEL_JOB:
		status = o.verify ? verify_job(fd, t.job, &o, &pg, &doc)
				  : list_job(fd, t.job, &o, tier, &doc);
		break;
	case LEVEL_STEP:
		if (o.verify) {
			char dname[32];
			int dfd;

			/* Name a missing or uncommitted step for what it is
			 * rather than as a failed check. */
			dfd = ckpt_step_dirname(dname, sizeof(dname), t.step) < 0
				      ? -1 : open_child_dir(fd, dname);
			if (dfd < 0 || !has_file(dfd, CKPT_MANIFEST_NAME)) {
				inspect_err("%s/%s: %s", t.parent, dname,
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
	inspect_s3_close(tier);
output:
	if (doc) {
		json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		fputc('\n', stdout);
		json_decref(doc);
	}
	if (fflush(stdout) != 0 || ferror(stdout)) {
		inspect_err("writing output: %s", strerror(errno));
		return inspect_worse(status, EXIT_NOTFOUND);
	}
	return status;
}
