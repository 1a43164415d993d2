/* SPDX-License-Identifier: MIT */
/*
 * ckpt-restore: fetch one committed checkpoint step from a checkpoint root
 * (or, through a source back end, from S3) into a destination root, verify
 * every chunk, and commit it there the way ckptd does (shards and indexes
 * durable, then MANIFEST.json, then LATEST). No daemon needed.
 *
 * The fetch is source-agnostic: a source lists committed steps, hands out
 * a step's manifest bytes and copies one file of a step into an open file
 * descriptor. Verification always runs on the destination copy, so it
 * covers the source and the transfer alike.
 *
 * Exit status: 0 restored (or already present and verified), 1 nothing
 * could be restored that verifies, 2 usage, 3 source not found or
 * unreadable, 4 the destination could not be written (or a running ckptd
 * owns the job there: its OWNER lock is held).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt-build-config.h"
#include "restore-source.h"
#include "s3.h"
#include "store.h"
#include "toolutil.h"

enum {
	EXIT_VERIFY = 1,
	EXIT_USAGE = 2,
	EXIT_SOURCE = 3,
	EXIT_DEST = 4,
};

static const char *prog = "ckpt-restore";

struct opts {
	bool have_step, exact, force, quiet, progress;
	uint64_t step;
	unsigned jobs;
};

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

/* ---- Parallel fetch and verify ------------------------------------------------ */

struct task {
	uint32_t rank;
	bool index;        /* the rank's index, else its shard */
	uint64_t bytes;
};

struct pool {
	struct restore_source *src;
	const struct ckpt_manifest *m;
	int jobfd, stepfd;
	struct task *tasks;
	size_t ntasks;
	bool verify;       /* verify ranks instead of fetching files */
	_Atomic size_t next;
	_Atomic uint64_t done_bytes;
	_Atomic size_t finished;
	pthread_mutex_t lock;
	int first_err;     /* -errno of the first failure */
	char why[600];     /* its reason */
};

static void pool_fail(struct pool *p, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void pool_fail(struct pool *p, int err, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&p->lock);
	if (!p->first_err) {
		p->first_err = err < 0 ? err : -EIO;
		va_start(ap, fmt);
		vsnprintf(p->why, sizeof(p->why), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&p->lock);
}

static void add_done(void *opaque, uint64_t delta)
{
	struct pool *p = opaque;

	atomic_fetch_add_explicit(&p->done_bytes, delta, memory_order_relaxed);
}

struct verify_progress {
	struct pool *p;
	uint64_t last;
};

static void verify_cb(void *opaque, uint64_t done, uint64_t total)
{
	struct verify_progress *vp = opaque;

	(void)total;
	if (done > vp->last) {
		add_done(vp->p, done - vp->last);
		vp->last = done;
	}
}

static void run_task(struct pool *p, const struct task *t)
{
	char name[32];
	int r;

	if (p->verify) {
		struct store_verify_result res;
		struct verify_progress vp = { .p = p };

		r = store_verify_rank(p->jobfd, p->m, t->rank, verify_cb, &vp, &res);
		if (r < 0)
			pool_fail(p, r, "%s", res.first_error[0] ? res.first_error : strerror(-r));
		return;
	}
	r = t->index ? ckpt_index_filename(name, sizeof(name), t->rank)
		     : ckpt_shard_filename(name, sizeof(name), t->rank);
	if (r < 0) {
		pool_fail(p, r, "rank %" PRIu32 ": bad rank", t->rank);
		return;
	}
	_cleanup_close_ int fd = openat(p->stepfd, name,
					O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		pool_fail(p, -errno, "destination %s: %s", name, strerror(errno));
		return;
	}
	char why[400] = "";
	r = p->src->fetch(p->src, p->m->step, name, t->bytes, fd, add_done, p, why, sizeof(why));
	if (r < 0) {
		pool_fail(p, r, "%s", why[0] ? why : strerror(-r));
		return;
	}
	if (fdatasync(fd) < 0)
		pool_fail(p, -errno, "destination %s: fdatasync: %s", name, strerror(errno));
}

static void *pool_worker(void *arg)
{
	struct pool *p = arg;

	for (;;) {
		size_t i = atomic_fetch_add(&p->next, 1);

		if (i >= p->ntasks)
			break;
		pthread_mutex_lock(&p->lock);
		bool failed = p->first_err != 0;
		pthread_mutex_unlock(&p->lock);
		if (!failed)
			run_task(p, &p->tasks[i]);
		atomic_fetch_add(&p->finished, 1);
	}
	return NULL;
}

/* Run the pool's tasks on `jobs` threads, drawing the bar meanwhile. */
static int pool_run(struct pool *p, unsigned jobs, struct tool_progress *pg)
{
	pthread_t th[64];
	unsigned n = jobs < 64 ? jobs : 64, started = 0;

	if (n > p->ntasks)
		n = (unsigned)p->ntasks;
	if (n == 0)
		n = 1;
	for (; started < n; started++)
		if (pthread_create(&th[started], NULL, pool_worker, p) != 0)
			break;
	if (started == 0)
		pool_worker(p);
	while (atomic_load(&p->finished) < p->ntasks) {
		tool_progress_draw(pg, atomic_load_explicit(&p->done_bytes, memory_order_relaxed), false);
		usleep(50000);
	}
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	tool_progress_draw(pg, atomic_load(&p->done_bytes), true);
	tool_progress_end(pg);
	return p->first_err;
}

/* ---- One step --------------------------------------------------------------- */

static int open_or_make_dir(int dirfd, const char *name)
{
	if (mkdirat(dirfd, name, 0755) < 0 && errno != EEXIST)
		return -errno;
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* mkdir -p of a destination root given by path. */
static int make_root(const char *path)
{
	char buf[PATH_MAX];
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, len + 1);
	for (char *s = buf + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	if (mkdir(buf, 0755) < 0 && errno != EEXIST)
		return -errno;
	int fd = open(buf, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* Verify every rank of a step already in the destination job. */
static int verify_all(int jobfd, const struct ckpt_manifest *m, const struct opts *o,
		      const char *label, char *why, size_t whylen)
{
	struct tool_progress pg = { .on = o->progress && !o->quiet && isatty(STDERR_FILENO) };
	struct pool p = { .m = m, .jobfd = jobfd, .stepfd = -1, .verify = true };
	_cleanup_free_ struct task *tasks = calloc(m->world_size, sizeof(*tasks));
	int r;

	if (!tasks)
		return -ENOMEM;
	uint64_t total = 0;
	for (uint32_t i = 0; i < m->world_size; i++) {
		tasks[i].rank = i;
		total += m->ranks[i].shard_bytes;
	}
	p.tasks = tasks;
	p.ntasks = m->world_size;
	pthread_mutex_init(&p.lock, NULL);
	tool_progress_begin(&pg, label, total);
	r = pool_run(&p, o->jobs, &pg);
	pthread_mutex_destroy(&p.lock);
	if (r < 0)
		snprintf(why, whylen, "%s", p.why);
	return r;
}

/*
 * Fetch `step` of the source into destjobfd, verify it and commit it.
 * Returns 0, or an exit status with the reason printed.
 */
static int restore_step(struct restore_source *src, uint64_t step, int destjobfd,
			const char *destdesc, const struct opts *o)
{
	char dname[32], why[700] = "", label[64];
	_cleanup_free_ char *mbuf = NULL;
	size_t mlen = 0;
	struct ckpt_manifest m = { 0 };
	_cleanup_close_ int stepfd = -1;
	_cleanup_free_ struct task *tasks = NULL;
	int r, status = 0;

	if (ckpt_step_dirname(dname, sizeof(dname), step) < 0) {
		errmsg("%s: %" PRIu64 " is not a step number", src->desc, step);
		return EXIT_USAGE;
	}
	r = src->read_manifest(src, step, &mbuf, &mlen, why, sizeof(why));
	if (r < 0) {
		errmsg("%s step %" PRIu64 ": %s", src->desc, step, why[0] ? why : strerror(-r));
		return r == -ENOENT ? EXIT_SOURCE : EXIT_VERIFY;
	}
	r = ckpt_manifest_decode(mbuf, mlen, &m, why, sizeof(why));
	if (r < 0) {
		errmsg("%s/%s/%s: %s", src->desc, dname, CKPT_MANIFEST_NAME, why[0] ? why : strerror(-r));
		return EXIT_VERIFY;
	}
	if (m.step != step || strcmp(m.job, src->job) != 0) {
		errmsg("%s/%s/%s: the manifest is for job %s step %" PRIu64, src->desc, dname,
		       CKPT_MANIFEST_NAME, m.job, m.step);
		status = EXIT_VERIFY;
		goto out;
	}

	/* Already there and committed: verify it instead of fetching again. */
	struct stat st;
	char mpath[64];
	snprintf(mpath, sizeof(mpath), "%s/%s", dname, CKPT_MANIFEST_NAME);
	if (fstatat(destjobfd, mpath, &st, AT_SYMLINK_NOFOLLOW) == 0 && !o->force) {
		snprintf(label, sizeof(label), "verify %s", dname);
		r = verify_all(destjobfd, &m, o, label, why, sizeof(why));
		if (r == 0) {
			if (!o->quiet)
				printf("%s/%s/%s: already present and verified\n", destdesc, m.job, dname);
			goto latest;
		}
		errmsg("%s/%s/%s is committed but does not verify (%s); use --force to replace it",
		       destdesc, m.job, dname, why);
		status = EXIT_DEST;
		goto out;
	}
	/* Leftovers of an interrupted restore, or --force: start over. A
	 * committed step is uncommitted first, as ckptd's retention does. */
	if (fstatat(destjobfd, dname, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		int old = openat(destjobfd, dname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (old >= 0) {
			if (unlinkat(old, CKPT_MANIFEST_NAME, 0) == 0)
				store_fsync_dir(old);
			close(old);
		}
		r = store_remove_tree(destjobfd, dname);
		if (r < 0) {
			errmsg("%s/%s/%s: cannot remove the old copy: %s", destdesc, m.job, dname, strerror(-r));
			status = EXIT_DEST;
			goto out;
		}
	}
	stepfd = open_or_make_dir(destjobfd, dname);
	if (stepfd < 0) {
		errmsg("%s/%s/%s: %s", destdesc, m.job, dname, strerror(-stepfd));
		status = EXIT_DEST;
		goto out;
	}

	tasks = calloc(2 * (size_t)m.world_size, sizeof(*tasks));
	if (!tasks) {
		errmsg("out of memory");
		status = EXIT_DEST;
		goto out;
	}
	uint64_t total = 0;
	for (uint32_t i = 0; i < m.world_size; i++) {
		/* Shards first: the long transfers start early. */
		tasks[i] = (struct task){ .rank = i, .bytes = m.ranks[i].shard_bytes };
		tasks[m.world_size + i] = (struct task){ .rank = i, .index = true,
							.bytes = m.ranks[i].index_bytes };
		total += m.ranks[i].shard_bytes + m.ranks[i].index_bytes;
	}
	struct tool_progress pg = { .on = o->progress && !o->quiet && isatty(STDERR_FILENO) };
	struct pool p = { .src = src, .m = &m, .jobfd = destjobfd, .stepfd = stepfd,
			  .tasks = tasks, .ntasks = 2 * (size_t)m.world_size };
	pthread_mutex_init(&p.lock, NULL);
	snprintf(label, sizeof(label), "fetch  %s", dname);
	tool_progress_begin(&pg, label, total);
	r = pool_run(&p, o->jobs, &pg);
	pthread_mutex_destroy(&p.lock);
	if (r < 0) {
		errmsg("%s step %" PRIu64 ": %s", src->desc, step, p.why);
		status = r == -ENOSPC || r == -EROFS || r == -EDQUOT ? EXIT_DEST : EXIT_VERIFY;
		goto out;
	}

	snprintf(label, sizeof(label), "verify %s", dname);
	r = verify_all(destjobfd, &m, o, label, why, sizeof(why));
	if (r < 0) {
		errmsg("%s step %" PRIu64 " does not verify: %s", src->desc, step, why);
		status = EXIT_VERIFY;
		goto out;
	}

	/* Commit: every file's entry durable, then the manifest, then the job
	 * directory (the step directory's entry). The manifest is the source's
	 * bytes, unchanged, so its own checksum still holds. */
	if ((r = store_fsync_dir(stepfd)) < 0 ||
	    (r = store_write_file_durable(stepfd, CKPT_MANIFEST_NAME, mbuf, mlen)) < 0 ||
	    (r = store_fsync_dir(destjobfd)) < 0) {
		errmsg("%s/%s/%s: commit: %s", destdesc, m.job, dname, strerror(-r));
		status = EXIT_DEST;
		goto out;
	}
	if (!o->quiet) {
		char hb[32];
		tool_human_bytes(hb, sizeof(hb), total);
		printf("%s/%s/%s: restored from %s (%s, %" PRIu32 " ranks) and verified\n",
		       destdesc, m.job, dname, src->desc, hb, m.world_size);
	}
latest:
	{
		uint64_t cur = 0;
		if (store_read_latest(destjobfd, &cur) < 0 || cur < step) {
			r = store_write_latest(destjobfd, step);
			if (r < 0) {
				errmsg("%s/%s/%s: %s", destdesc, m.job, CKPT_LATEST_NAME, strerror(-r));
				status = EXIT_DEST;
			}
		}
	}
out:
	/* A step that did not commit leaves nothing behind (readers would
	 * ignore it, but it holds space). */
	if (status && stepfd >= 0)
		store_remove_tree(destjobfd, dname);
	ckpt_manifest_free(&m);
	return status;
}

/* ---- Command line --------------------------------------------------------------- */

static void usage_short(FILE *f)
{
	fprintf(f, "Usage: %s [--step N] [--exact] [--jobs N] [--force] [--quiet] "
		   "[--no-progress]\n       [--endpoint-url URL] [--profile NAME] [--region R] "
		   "SOURCE DEST\nTry '%s --help' for more.\n", prog, prog);
}

static void help(void)
{
	printf(
"NAME\n"
"    ckpt-restore - fetch, verify and commit a checkpoint step into a root\n"
"\n"
"SYNOPSIS\n"
"    ckpt-restore [OPTIONS] ROOT/JOB[/STEP] DEST\n"
"    ckpt-restore [OPTIONS] ROOT/JOB[@STEP] DEST\n"
"    ckpt-restore [OPTIONS] s3://BUCKET[/PREFIX]/JOB[@STEP] DEST\n"
"\n"
"DESCRIPTION\n"
"    ckpt-restore copies one committed step of a job from SOURCE into the\n"
"    checkpoint root DEST (created if missing), without ckptd. Shards and\n"
"    indexes are fetched in parallel, then every chunk is checked against\n"
"    its CRC-32C and every index against the manifest's SHA-256 on the\n"
"    copy in DEST; only then is MANIFEST.json written (the commit) and\n"
"    DEST/JOB/LATEST moved if the step is newer. A step that does not\n"
"    verify is never committed in DEST. The result is a step ckptd and\n"
"    ckpt-inspect read like any other: DEST/JOB/step-NNNNNNNNNN/.\n"
"\n"
"    Without a step, the newest committed step of SOURCE is restored; if\n"
"    it does not verify, the next older one is tried, with a warning\n"
"    (unless --exact). A step already committed in DEST is verified, not\n"
"    fetched again.\n"
"\n"
"    SOURCE is a job directory in a checkpoint root (ROOT/JOB), optionally\n"
"    with a step as a path component (ROOT/JOB/42, ROOT/JOB/step-0000000042)\n"
"    or after '@' (ROOT/JOB@42), or an S3 location of a job uploaded by\n"
"    ckptd or copied with 'aws s3 sync' (s3://BUCKET/PREFIX/JOB[@STEP]);\n"
"    S3 credentials, region and endpoint come from the usual AWS\n"
"    environment variables and shared config files, unless the options\n"
"    below say otherwise.\n"
"\n"
"OPTIONS\n"
"    --step N       Restore step N (same as @N).\n"
"    --exact        Fail rather than fall back to an older step.\n"
"    --jobs N       Parallel transfers (default 8).\n"
"    --force        Replace a committed step in DEST that does not verify.\n"
"    --quiet, -q    Print only errors and warnings.\n"
"    --no-progress  No progress bar. The bar (bytes done and total, MB/s,\n"
"                   ETA) is drawn on stderr only when it is a terminal.\n"
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
"    0  restored and verified (or already present and verified)\n"
"    1  no step could be restored that verifies\n"
"    2  usage error\n"
"    3  the source or the step was not found or could not be read\n"
"    4  the destination could not be written (or a running ckptd owns its job)\n"
"\n"
"EXAMPLES\n"
"    ckpt-restore /lustre/ckpt/llama-7b /local/ckpt\n"
"        Copy the newest verified step of llama-7b to a node-local root.\n"
"    ckpt-restore --exact /lustre/ckpt/llama-7b@1200 /local/ckpt\n"
"        Step 1200 exactly.\n"
"    ckpt-restore s3://my-bucket/ckpt/llama-7b /lustre/ckpt\n"
"        Bring the newest step back from S3.\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "step", required_argument, NULL, 's' },
		{ "exact", no_argument, NULL, 'e' },
		{ "jobs", required_argument, NULL, 'j' },
		{ "force", no_argument, NULL, 'f' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "no-progress", no_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ "endpoint-url", required_argument, NULL, 'E' },
		{ "profile", required_argument, NULL, 'F' },
		{ "region", required_argument, NULL, 'R' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { .progress = true, .jobs = 8 };
	struct s3_settings s3set = { 0 };
	int c;

	while ((c = getopt_long(argc, argv, "qhV", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (!tool_parse_step(optarg, &o.step)) {
				errmsg("--step: '%s' is not a step number", optarg);
				return EXIT_USAGE;
			}
			o.have_step = true;
			break;
		case 'e': o.exact = true; break;
		case 'f': o.force = true; break;
		case 'q': o.quiet = true; break;
		case 'P': o.progress = false; break;
		case 'j': {
			char *end;
			errno = 0;
			unsigned long v = strtoul(optarg, &end, 10);
			if (errno || *end || optarg[0] < '1' || optarg[0] > '9' || v > 64) {
				errmsg("--jobs: '%s' is not a number in [1, 64]", optarg);
				return EXIT_USAGE;
			}
			o.jobs = (unsigned)v;
			break;
		}
		case 'E':
			if (strncmp(optarg, "http://", 7) != 0 && strncmp(optarg, "https://", 8) != 0) {
				errmsg("--endpoint-url: '%s' is not an http:// or https:// URL", optarg);
				return EXIT_USAGE;
			}
			s3set.endpoint_url = optarg;
			break;
		case 'F':
		case 'R':
			if (!*optarg) {
				errmsg("--%s: empty value", c == 'F' ? "profile" : "region");
				return EXIT_USAGE;
			}
			if (c == 'F')
				s3set.profile = optarg;
			else
				s3set.region = optarg;
			break;
		case 'h': help(); return 0;
		case 'V': printf("%s %s\n", prog, CKPT_VERSION); return 0;
		default: usage_short(stderr); return EXIT_USAGE;
		}
	}
	if (argc - optind != 2) {
		usage_short(stderr);
		return EXIT_USAGE;
	}
	const char *source = argv[optind], *dest = argv[optind + 1];

	struct restore_source *src = NULL;
	uint64_t at_step = 0;
	char why[600] = "";
	int r = restore_source_open(source, &s3set, &src, &at_step, why, sizeof(why));
	if (r < 0) {
		errmsg("%s: %s", source, why[0] ? why : strerror(-r));
		return r == -EINVAL ? EXIT_USAGE : EXIT_SOURCE;
	}
	if (at_step) {
		if (o.have_step && o.step != at_step) {
			errmsg("%s: names step %" PRIu64 " but --step says %" PRIu64, source,
			       at_step, o.step);
			src->close(src);
			return EXIT_USAGE;
		}
		o.step = at_step;
		o.have_step = true;
	}

	_cleanup_close_ int rootfd = make_root(dest);
	if (rootfd < 0) {
		errmsg("%s: %s", dest, strerror(-rootfd));
		src->close(src);
		return EXIT_DEST;
	}
	_cleanup_close_ int jobfd = open_or_make_dir(rootfd, src->job);
	if (jobfd < 0) {
		errmsg("%s/%s: %s", dest, src->job, strerror(-jobfd));
		src->close(src);
		return EXIT_DEST;
	}
	/* A job a ckptd manages right now is that daemon's to write
	 * (FORMAT.md, "Job ownership"). */
	struct store_owner holder;
	r = store_owner_probe(jobfd, &holder);
	if (r != 0) {
		char who[512];
		store_owner_describe(&holder, who, sizeof(who));
		if (r > 0)
			errmsg("%s/%s: job %s is owned by a running ckptd, %s: restore into it once "
			       "that daemon has released it (its ranks gone, or the daemon stopped)",
			       dest, src->job, src->job, who);
		else
			errmsg("%s/%s/%s: %s", dest, src->job, CKPT_OWNER_NAME, strerror(-r));
		src->close(src);
		return EXIT_DEST;
	}

	int status;
	if (o.have_step) {
		status = restore_step(src, o.step, jobfd, dest, &o);
	} else {
		_cleanup_free_ uint64_t *steps = NULL;
		size_t n = 0;
		r = src->list_steps(src, &steps, &n, why, sizeof(why));
		if (r < 0) {
			errmsg("%s: %s", src->desc, why[0] ? why : strerror(-r));
			src->close(src);
			return EXIT_SOURCE;
		}
		if (n == 0) {
			errmsg("%s: no committed step", src->desc);
			src->close(src);
			return EXIT_SOURCE;
		}
		status = EXIT_VERIFY;
		for (size_t i = n; i-- > 0;) {
			status = restore_step(src, steps[i], jobfd, dest, &o);
			if (status != EXIT_VERIFY || o.exact)
				break;
			if (i > 0)
				fprintf(stderr, "%s: warning: step %" PRIu64 " of %s does not verify; "
					"trying step %" PRIu64 "\n", prog, steps[i], src->desc, steps[i - 1]);
		}
	}
	src->close(src);
	return status;
}
