/* SPDX-License-Identifier: MIT */
/*
 * ckpt-bench: measure ckpt against its own floors, side by side in one run.
 *
 * For R ranks (processes) each holding S bytes, and for each size asked for:
 *   memcpy       copy S bytes into pre-faulted memory: the floor for a stall
 *   write+fsync  write() S bytes to a file of its own, fsync(): the naive
 *                synchronous save, stall == time to durable
 *   ckpt         ckpt_save_begin .. ckpt_save_finish (stall), and until
 *                ckpt_wait() reports COMMITTED (time to committed)
 *   restore      ckpt_restore_open(latest): read + verify the rank's shard
 *   fio          O_DIRECT sequential read of the same shard files
 * Every measurement is repeated (--reps) and the median reported; a phase's
 * time is its slowest rank's, as a training step waits for the slowest rank.
 * See docs/BENCHMARKS.md for the method and the targets.
 */
#include <ckpt.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/sysinfo.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 64
#define MAX_SIZES 8
#define MAX_REPS 32
#define MIB ((uint64_t)1 << 20)
#define GIB ((uint64_t)1 << 30)
#define ALIGN ((uint64_t)4096)
#define MAX_FIO_DEPTHS 4

struct options {
	const char *dir;        /* target directory (file system under test) */
	const char *socket;     /* use this running ckptd instead of starting one */
	const char *root;       /* its root (for the fio comparison) */
	const char *ckptd;      /* ckptd binary to start */
	const char *fio;        /* fio binary, or "" to skip */
	const char *fio_bs;     /* fio block size */
	unsigned fio_depths[MAX_FIO_DEPTHS];
	unsigned nfio_depths;
	uint32_t ranks;
	uint64_t sizes[MAX_SIZES];
	unsigned nsizes;
	unsigned reps;
	unsigned tensors;
	uint32_t slots;
	uint64_t staging;       /* 0: computed */
	const char *direct_io;
	bool drop_caches;
	bool keep;
	bool verbose;
};

/* ---- small helpers (a tool: errors end the process) -------------------- */

static void __attribute__((format(printf, 1, 2), noreturn)) die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("ckpt-bench: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

/* snprintf for paths: a path that does not fit is an error, not a surprise. */
static void __attribute__((format(printf, 3, 4))) pathf(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= len)
		die("path too long: %s...", buf);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	double v;
	uint64_t mult = 1;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || v < 0)
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': mult = 1024; end++; break;
	case 'm': case 'M': mult = MIB; end++; break;
	case 'g': case 'G': mult = GIB; end++; break;
	case 't': case 'T': mult = 1024 * GIB; end++; break;
	default: break;
	}
	if (mult > 1 && *end == 'i')
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end)
		return -EINVAL;
	if (v * (double)mult >= 18e18)
		return -ERANGE;
	*out = (uint64_t)(v * (double)mult);
	return 0;
}

static const char *fmt_size(uint64_t b, char *buf, size_t len)
{
	if (b >= GIB && b % GIB == 0)
		snprintf(buf, len, "%" PRIu64 " GiB", b / GIB);
	else if (b >= MIB && b % MIB == 0)
		snprintf(buf, len, "%" PRIu64 " MiB", b / MIB);
	else
		snprintf(buf, len, "%" PRIu64 " B", b);
	return buf;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(const double *v, unsigned n)
{
	double tmp[MAX_REPS];

	if (n == 0)
		return -1;
	memcpy(tmp, v, n * sizeof(*v));
	qsort(tmp, n, sizeof(*tmp), cmp_double);
	return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int read_all(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Anonymous memory, every page touched now so no fault is timed later. */
static void *alloc_faulted(uint64_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	/* MAP_POPULATE may map the shared zero page for reads only: write. */
	for (uint64_t off = 0; off < bytes; off += ALIGN)
		((volatile char *)p)[off] = 1;
	return p;
}

/*
 * Bytes read so far from the block device holding `dir` (from
 * /sys/dev/block/MAJ:MIN/stat), or -1 where that is unknown (tmpfs,
 * overlay, network file systems). A sanity check that a restore really
 * read from the device and not from some cache.
 */
static double device_read_bytes(const char *dir)
{
	char path[PATH_MAX];
	unsigned long long ios, merges, sectors;
	struct stat st;
	FILE *f;
	int n;

	if (stat(dir, &st) < 0)
		return -1;
	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/stat", major(st.st_dev),
		 minor(st.st_dev));
	f = fopen(path, "re");
	if (!f)
		return -1;
	n = fscanf(f, "%llu %llu %llu", &ios, &merges, &sectors);
	fclose(f);
	return n == 3 ? (double)sectors * 512.0 : -1;
}

static bool caches_dropped_ok = true;

static void drop_caches(const struct options *o)
{
	int fd;

	if (!o->drop_caches)
		return;
	sync();
	fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "3\n", 2) != 2)
		caches_dropped_ok = false;
	if (fd >= 0)
		close(fd);
}

/* ---- parent <-> rank protocol over pipes -------------------------------- */

enum op {
	OP_MEMCPY_PREP = 1, /* fault the destination */
	OP_MEMCPY,
	OP_MEMCPY_DONE,     /* free the destination */
	OP_WRITE_PREP,      /* remove the previous file */
	OP_WRITE,
	OP_WRITE_DONE,
	OP_CONNECT,
	OP_SAVE,            /* arg: step */
	OP_RESTORE,         /* arg: step expected */
	OP_EXIT,
};

struct cmd {
	int op;
	uint64_t arg;
};

struct reply {
	int err;            /* 0 or negative */
	double t1, t2;      /* seconds */
	char msg[240];
};

/* The reply's message; truncated if long, which is fine for a message. */
static void __attribute__((format(printf, 2, 3))) setmsg(struct reply *r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->msg, sizeof(r->msg), fmt, ap);
	va_end(ap);
}

struct rank_proc {
	pid_t pid;
	int cmd_fd;  /* parent writes */
	int rsp_fd;  /* parent reads */
};

struct rank_env {
	const struct options *o;
	uint32_t rank;
	uint64_t bytes;
	const char *socket;
	const char *job;
	const char *write_dir;
	char *src;
	char *dst;
	ckpt_ctx *ctx;
};

static uint64_t tensor_bytes(uint64_t total, unsigned ntensors, unsigned i)
{
	uint64_t each = total / ntensors / ALIGN * ALIGN;

	return i + 1 < ntensors ? each : total - each * (ntensors - 1);
}

static void fill_desc(ckpt_tensor_desc *d, char *name, size_t namelen,
		      unsigned i, uint64_t bytes)
{
	memset(d, 0, sizeof(*d));
	snprintf(name, namelen, "layer%u.weight", i);
	d->name = name;
	d->dtype = CKPT_DTYPE_F32;
	d->ndim = 2;
	d->global_shape[0] = 1;
	d->global_shape[1] = bytes / 4;
	d->shape[0] = 1;
	d->shape[1] = bytes / 4;
}

static void rank_op(struct rank_env *e, const struct cmd *c, struct reply *r)
{
	const struct options *o = e->o;
	char path[PATH_MAX];
	double t0;
	int fd, ret;

	switch (c->op) {
	case OP_MEMCPY_PREP:
		if (!e->dst && !(e->dst = alloc_faulted(e->bytes)))
			r->err = -ENOMEM;
		break;
	case OP_MEMCPY:
		t0 = now();
		memcpy(e->dst, e->src, e->bytes);
		r->t1 = now() - t0;
		/* Keep the copy from being optimised away or deferred. */
		if (e->dst[e->bytes - 1] != e->src[e->bytes - 1])
			r->err = -EIO;
		break;
	case OP_MEMCPY_DONE:
		if (e->dst)
			munmap(e->dst, e->bytes);
		e->dst = NULL;
		break;
	case OP_WRITE_PREP:
	case OP_WRITE_DONE:
		pathf(path, sizeof(path), "%s/rank-%06u-rep-%03u.dat", e->write_dir, e->rank,
		      (unsigned)c->arg);
		if (unlink(path) < 0 && errno != ENOENT)
			r->err = -errno;
		break;
	case OP_WRITE:
		pathf(path, sizeof(path), "%s/rank-%06u-rep-%03u.dat", e->write_dir, e->rank,
		      (unsigned)c->arg);
		t0 = now();
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0) {
			r->err = -errno;
			setmsg(r, "open %s: %s", path, strerror(errno));
			break;
		}
		/* Linux writes at most ~2 GiB per call. */
		for (uint64_t off = 0; off < e->bytes && !r->err;) {
			uint64_t n = e->bytes - off > GIB ? GIB : e->bytes - off;

			r->err = write_all(fd, e->src + off, n);
			off += n;
		}
		if (!r->err && fsync(fd) < 0)
			r->err = -errno;
		close(fd);
		r->t1 = now() - t0;
		if (r->err)
			setmsg(r, "write %s: %s", path, strerror(-r->err));
		break;
	case OP_CONNECT: {
		ckpt_options co = {
			.struct_size = sizeof(co),
			.socket_path = e->socket,
			.job = e->job,
			.rank = e->rank,
			.world_size = o->ranks,
			.local_rank = e->rank,
			.max_save_bytes = e->bytes + (uint64_t)o->tensors * ALIGN,
			.connect_timeout_ms = 30000,
		};

		ret = ckpt_connect(&co, &e->ctx);
		if (ret < 0) {
			r->err = ret;
			setmsg(r, "ckpt_connect(%s): %s",
				 e->socket, ckpt_strerror(ret));
		}
		break;
	}
	case OP_SAVE: {
		ckpt_save *save = NULL;
		ckpt_status st;
		uint64_t off = 0;

		t0 = now();
		ret = ckpt_save_begin(e->ctx, c->arg, &save);
		for (unsigned i = 0; ret >= 0 && i < o->tensors; i++) {
			ckpt_tensor_desc d;
			char name[32];
			uint64_t n = tensor_bytes(e->bytes, o->tensors, i);

			fill_desc(&d, name, sizeof(name), i, n);
			ret = ckpt_save_add(save, &d, e->src + off);
			off += n;
			if (ret < 0)
				ckpt_save_abort(save);
		}
		if (ret >= 0)
			ret = ckpt_save_finish(save);
		r->t1 = now() - t0;
		if (ret < 0) {
			r->err = ret;
			setmsg(r, "save step %" PRIu64 ": %s",
				 c->arg, ckpt_strerror(ret));
			break;
		}
		ret = ckpt_wait(e->ctx, c->arg, 600000, &st);
		r->t2 = now() - t0;
		if (ret < 0 || st.state != CKPT_STATE_COMMITTED) {
			r->err = ret < 0 ? ret : (st.error ? st.error : -EIO);
			setmsg(r, "step %" PRIu64 " %s: %s",
				 c->arg, ret < 0 ? "wait" : ckpt_state_name(st.state),
				 ret < 0 ? ckpt_strerror(ret) : st.reason);
		}
		break;
	}
	case OP_RESTORE: {
		ckpt_restore *res = NULL;
		const void *data;
		size_t len;

		t0 = now();
		ret = ckpt_restore_open(e->ctx, CKPT_STEP_LATEST, 0, &res);
		r->t1 = now() - t0;
		if (ret < 0) {
			r->err = ret;
			setmsg(r, "restore latest: %s", ckpt_strerror(ret));
			break;
		}
		/* Not timed: check it is the data we saved. */
		if (ckpt_restore_step(res) != c->arg) {
			r->err = -EIO;
			setmsg(r, "restored step %" PRIu64 ", expected %" PRIu64,
				 ckpt_restore_step(res), c->arg);
		} else {
			uint64_t off = 0;

			for (unsigned i = 0; i < o->tensors && !r->err; i++) {
				char name[32];
				uint64_t n = tensor_bytes(e->bytes, o->tensors, i);

				snprintf(name, sizeof(name), "layer%u.weight", i);
				ret = ckpt_restore_tensor_ptr(res, name, &data, &len);
				if (ret < 0 || len != n || memcmp(data, e->src + off, n) != 0) {
					r->err = ret < 0 ? ret : -EIO;
					setmsg(r, "tensor %s differs after restore", name);
				}
				off += n;
			}
		}
		ckpt_restore_close(res);
		break;
	}
	default:
		r->err = -EINVAL;
		break;
	}
	if (r->err && !r->msg[0])
		setmsg(r, "op %d: %s", c->op, ckpt_strerror(r->err));
}

static void __attribute__((noreturn)) rank_main(struct rank_env *e, int cmd_fd, int rsp_fd)
{
	struct cmd c;
	uint64_t x = 0x9e3779b97f4a7c15ull * (e->rank + 1);

	/* Source data: touched (so faulted) and not all zeroes. */
	e->src = mmap(NULL, e->bytes, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (e->src == MAP_FAILED)
		_exit(2);
	for (uint64_t i = 0; i < e->bytes / 8; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		((uint64_t *)e->src)[i] = x;
	}

	for (;;) {
		struct reply r;

		if (read_all(cmd_fd, &c, sizeof(c)) < 0)
			break;
		if (c.op == OP_EXIT)
			break;
		memset(&r, 0, sizeof(r));
		rank_op(e, &c, &r);
		if (write_all(rsp_fd, &r, sizeof(r)) < 0)
			break;
	}
	ckpt_close(e->ctx);
	_exit(0);
}

/* ---- parent ------------------------------------------------------------- */

static struct rank_proc procs[MAX_RANKS];
static uint32_t nprocs;
static pid_t ckptd_pid = -1;

static void stop_ranks(void)
{
	struct cmd c = { .op = OP_EXIT };

	for (uint32_t i = 0; i < nprocs; i++) {
		if (write_all(procs[i].cmd_fd, &c, sizeof(c)) < 0)
			kill(procs[i].pid, SIGKILL);
		close(procs[i].cmd_fd);
		close(procs[i].rsp_fd);
	}
	for (uint32_t i = 0; i < nprocs; i++)
		waitpid(procs[i].pid, NULL, 0);
	nprocs = 0;
}

static void report_ckptd_exit(int status)
{
	if (WIFSIGNALED(status) && WTERMSIG(status) != SIGTERM)
		fprintf(stderr, "ckpt-bench: ckptd died of signal %d\n", WTERMSIG(status));
	else if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
		fprintf(stderr, "ckpt-bench: ckptd exited with status %d\n", WEXITSTATUS(status));
}

static void stop_ckptd(void)
{
	int status;

	if (ckptd_pid <= 0)
		return;
	if (waitpid(ckptd_pid, &status, WNOHANG) == ckptd_pid) {
		report_ckptd_exit(status);
		ckptd_pid = -1;
		return;
	}
	kill(ckptd_pid, SIGTERM);
	for (int i = 0; i < 200; i++) {
		if (waitpid(ckptd_pid, &status, WNOHANG) == ckptd_pid) {
			report_ckptd_exit(status);
			ckptd_pid = -1;
			return;
		}
		usleep(50000);
	}
	fprintf(stderr, "ckpt-bench: ckptd ignored SIGTERM for 10 s; killing it\n");
	kill(ckptd_pid, SIGKILL);
	waitpid(ckptd_pid, NULL, 0);
	ckptd_pid = -1;
}

static void cleanup_all(void)
{
	for (uint32_t i = 0; i < nprocs; i++)
		kill(procs[i].pid, SIGKILL);
	stop_ranks();
	stop_ckptd();
}

static void start_ranks(const struct options *o, uint64_t bytes, const char *sock,
			const char *job, const char *write_dir)
{
	for (uint32_t i = 0; i < o->ranks; i++) {
		int cp[2], rp[2];
		pid_t pid;

		if (pipe2(cp, O_CLOEXEC) < 0 || pipe2(rp, O_CLOEXEC) < 0)
			die("pipe: %s", strerror(errno));
		fflush(NULL);
		pid = fork();
		if (pid < 0)
			die("fork: %s", strerror(errno));
		if (pid == 0) {
			struct rank_env e = {
				.o = o, .rank = i, .bytes = bytes, .socket = sock,
				.job = job, .write_dir = write_dir,
			};

			close(cp[1]);
			close(rp[0]);
			for (uint32_t j = 0; j < nprocs; j++) {
				close(procs[j].cmd_fd);
				close(procs[j].rsp_fd);
			}
			rank_main(&e, cp[0], rp[1]);
		}
		close(cp[0]);
		close(rp[1]);
		procs[nprocs++] = (struct rank_proc){ .pid = pid, .cmd_fd = cp[1], .rsp_fd = rp[0] };
	}
}

/*
 * Send op to every rank (back to back, so they start together) and collect
 * the replies. Returns the slowest rank's t1 and t2.
 */
static void all_ranks(int op, uint64_t arg, double *t1, double *t2)
{
	struct cmd c = { .op = op, .arg = arg };
	double m1 = 0, m2 = 0;
	bool failed = false;

	for (uint32_t i = 0; i < nprocs; i++)
		if (write_all(procs[i].cmd_fd, &c, sizeof(c)) < 0) {
			cleanup_all();
			die("rank %u is gone", i);
		}
	for (uint32_t i = 0; i < nprocs; i++) {
		struct reply r;

		if (read_all(procs[i].rsp_fd, &r, sizeof(r)) < 0) {
			cleanup_all();
			die("rank %u died during op %d", i, op);
		}
		if (r.err) {
			fprintf(stderr, "ckpt-bench: rank %u: %s\n", i, r.msg);
			failed = true;
		}
		if (r.t1 > m1)
			m1 = r.t1;
		if (r.t2 > m2)
			m2 = r.t2;
	}
	if (failed) {
		cleanup_all();
		die("a rank failed; stopping");
	}
	if (t1)
		*t1 = m1;
	if (t2)
		*t2 = m2;
}

static void start_ckptd(const struct options *o, const char *root, const char *sock,
			const char *logpath, uint64_t staging)
{
	char staging_s[32], slots_s[16];
	struct stat st;
	pid_t pid;

	snprintf(staging_s, sizeof(staging_s), "%" PRIu64, staging);
	snprintf(slots_s, sizeof(slots_s), "%u", o->slots);
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		int fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

		if (fd >= 0) {
			dup2(fd, STDOUT_FILENO);
			dup2(fd, STDERR_FILENO);
		}
		execl(o->ckptd, o->ckptd, "--root", root, "--socket", sock,
		      "--staging-bytes", staging_s, "--slots-per-rank", slots_s,
		      "--keep-last", "0", "--direct-io", o->direct_io,
		      "--log-level", "warn", (char *)NULL);
		fprintf(stderr, "exec %s: %s\n", o->ckptd, strerror(errno));
		_exit(127);
	}
	ckptd_pid = pid;
	/* Ready once the socket exists; ckpt_connect retries until it listens. */
	for (int i = 0; i < 200; i++) {
		int status;

		if (waitpid(pid, &status, WNOHANG) == pid) {
			ckptd_pid = -1;
			die("ckptd exited (status %d) at start; see %s", status, logpath);
		}
		if (stat(sock, &st) == 0 && S_ISSOCK(st.st_mode))
			return;
		usleep(50000);
	}
	stop_ckptd();
	die("ckptd did not create %s within 10 s; see %s", sock, logpath);
}

/* ---- fio ---------------------------------------------------------------- */

/*
 * O_DIRECT sequential read of the given files, all at once (one fio job
 * per file). Returns the aggregate bandwidth in bytes/s, or -1.
 */
static double fio_read(const struct options *o, unsigned depth, char files[][PATH_MAX],
		       uint32_t n, const char *outpath)
{
	char *cmd = NULL;
	size_t cmdlen = 0;
	FILE *f = open_memstream(&cmd, &cmdlen);
	json_error_t jerr;
	json_t *root, *jobs;
	double bytes = 0, runtime_ms = 0;
	size_t i;
	int ret;

	if (!f)
		return -1;
	fprintf(f, "'%s' --output-format=json --output='%s' --readonly --rw=read"
		" --direct=1 --bs=%s --iodepth=%u --ioengine=io_uring --group_reporting",
		o->fio, outpath, o->fio_bs, depth);
	for (uint32_t k = 0; k < n; k++)
		fprintf(f, " --name=rank%u --filename='%s'", k, files[k]);
	fprintf(f, " >/dev/null 2>&1");
	fclose(f);
	ret = system(cmd);
	if (ret != 0) {
		fprintf(stderr, "ckpt-bench: fio failed (%d): %s\n", ret, cmd);
		free(cmd);
		return -1;
	}
	free(cmd);

	root = json_load_file(outpath, 0, &jerr);
	if (!root) {
		fprintf(stderr, "ckpt-bench: %s: %s\n", outpath, jerr.text);
		return -1;
	}
	jobs = json_object_get(root, "jobs");
	for (i = 0; i < json_array_size(jobs); i++) {
		json_t *rd = json_object_get(json_array_get(jobs, i), "read");
		double rt = json_number_value(json_object_get(rd, "runtime"));

		bytes += json_number_value(json_object_get(rd, "io_bytes"));
		if (rt > runtime_ms)
			runtime_ms = rt;
	}
	json_decref(root);
	return runtime_ms > 0 ? bytes / (runtime_ms / 1000.0) : -1;
}

/* ---- the run ------------------------------------------------------------ */

struct result {
	uint64_t bytes;
	double memcpy_s, write_s, stall_s, commit_s, restore_s;
	double restore_bw;                  /* bytes/s */
	double fio_bw[MAX_FIO_DEPTHS];      /* bytes/s per depth, -1 if not measured */
};

/*
 * The compared measurements are interleaved, repetition by repetition, so
 * that a slow spell of the disk or the host hits both sides alike.
 */
static void run_size(const struct options *o, unsigned idx, const char *sock,
		     const char *root, const char *write_dir, struct result *res)
{
	double mc[MAX_REPS], wr[MAX_REPS], stall[MAX_REPS], commit[MAX_REPS];
	double rs[MAX_REPS], fio[MAX_FIO_DEPTHS][MAX_REPS];
	char job[64], sz[32], out[PATH_MAX];
	char shards[MAX_RANKS][PATH_MAX];
	uint64_t step = 0, shard_total = 0;
	uint64_t bytes = o->sizes[idx];
	bool fio_ok = root && o->fio[0];

	snprintf(job, sizeof(job), "bench-%d-%u", (int)getpid(), idx);
	memset(res, 0, sizeof(*res));
	res->bytes = bytes;
	res->restore_bw = -1;
	for (unsigned d = 0; d < MAX_FIO_DEPTHS; d++)
		res->fio_bw[d] = -1;
	fprintf(stderr, "ckpt-bench: %u ranks x %s\n", o->ranks, fmt_size(bytes, sz, sizeof(sz)));
	start_ranks(o, bytes, sock, job, write_dir);
	all_ranks(OP_CONNECT, 0, NULL, NULL);

	for (unsigned r = 0; r < o->reps; r++) {
		/* The copy target is faulted afresh (untimed) and freed again
		 * to keep the footprint at source + staging. */
		all_ranks(OP_MEMCPY_PREP, 0, NULL, NULL);
		all_ranks(OP_MEMCPY, 0, &mc[r], NULL);
		all_ranks(OP_MEMCPY_DONE, 0, NULL, NULL);

		/* Every repetition writes new files and nothing is deleted until
		 * the end, on either side (ckptd keeps every step): deleting
		 * GiBs on a file system mounted with discard sends the device
		 * work that would land on whichever measurement runs next. */
		all_ranks(OP_WRITE_PREP, r, NULL, NULL);
		drop_caches(o);
		all_ranks(OP_WRITE, r, &wr[r], NULL);

		step = 100 * (r + 1);
		drop_caches(o);
		all_ranks(OP_SAVE, step, &stall[r], &commit[r]);
		if (o->verbose)
			fprintf(stderr, "  rep %u: memcpy %.3f s, write+fsync %.3f s, "
				"ckpt stall %.3f s, committed %.3f s\n",
				r, mc[r], wr[r], stall[r], commit[r]);
	}
	for (unsigned r = 0; r < o->reps; r++)
		all_ranks(OP_WRITE_DONE, r, NULL, NULL);
	res->memcpy_s = median(mc, o->reps);
	res->write_s = median(wr, o->reps);
	res->stall_s = median(stall, o->reps);
	res->commit_s = median(commit, o->reps);

	for (uint32_t k = 0; k < o->ranks && root; k++) {
		struct stat st;

		pathf(shards[k], sizeof(shards[k]), "%s/%s/step-%010" PRIu64 "/rank-%06u.shard",
		      root, job, step, k);
		if (stat(shards[k], &st) < 0) {
			fprintf(stderr, "ckpt-bench: %s: %s: no fio comparison\n", shards[k],
				strerror(errno));
			fio_ok = false;
			shard_total = 0;
			break;
		}
		shard_total += (uint64_t)st.st_size;
	}
	if (!shard_total)
		shard_total = bytes * o->ranks;
	pathf(out, sizeof(out), "%s/fio.json", write_dir);

	for (unsigned r = 0; r < o->reps; r++) {
		double dev0;

		drop_caches(o);
		dev0 = device_read_bytes(write_dir);
		all_ranks(OP_RESTORE, step, &rs[r], NULL);
		if (dev0 >= 0)
			dev0 = device_read_bytes(write_dir) - dev0;
		if (o->drop_caches && dev0 >= 0 && dev0 < 0.9 * (double)shard_total)
			fprintf(stderr, "ckpt-bench: warning: the restore read only %.0f MiB of %.0f "
				"from the device\n", dev0 / (double)MIB, (double)shard_total / (double)MIB);
		if (o->verbose)
			fprintf(stderr, "  rep %u: restore %.3f s (%.2f GB/s, %.0f MiB from the device)",
				r, rs[r], (double)shard_total / rs[r] / 1e9, dev0 / (double)MIB);
		for (unsigned d = 0; fio_ok && d < o->nfio_depths; d++) {
			drop_caches(o);
			fio[d][r] = fio_read(o, o->fio_depths[d], shards, o->ranks, out);
			fio_ok = fio[d][r] > 0;
			if (o->verbose && fio_ok)
				fprintf(stderr, ", fio iodepth %u %.2f GB/s", o->fio_depths[d],
					fio[d][r] / 1e9);
		}
		if (o->verbose)
			fputc('\n', stderr);
	}
	unlink(out);
	res->restore_s = median(rs, o->reps);
	res->restore_bw = res->restore_s > 0 ? (double)shard_total / res->restore_s : -1;
	for (unsigned d = 0; fio_ok && d < o->nfio_depths; d++)
		res->fio_bw[d] = median(fio[d], o->reps);
	stop_ranks();
}

static const char *fs_name(const char *dir)
{
	struct statfs sf;

	if (statfs(dir, &sf) < 0)
		return "?";
	switch ((unsigned long)sf.f_type) {
	case 0xEF53: return "ext4";
	case 0x58465342: return "xfs";
	case 0x9123683E: return "btrfs";
	case 0x01021994: return "tmpfs";
	case 0x794c7630: return "overlayfs";
	case 0x2FC12FC1: return "zfs";
	case 0x6969: return "nfs";
	case 0x0BD00BD0: return "lustre";
	default: return "other";
	}
}

static void print_report(const struct options *o, const struct result *res,
			 const char *dir, int argc, char **argv)
{
	struct utsname u;
	struct sysinfo si;
	char sz[32];

	uname(&u);
	sysinfo(&si);
	printf("## ckpt-bench: %u ranks, median of %u\n\n", o->ranks, o->reps);
	printf("Command: `");
	for (int i = 0; i < argc; i++)
		printf("%s%s", i ? " " : "", argv[i]);
	printf("`\n\n");
	printf("Machine: %s %s, %ld CPUs, %.1f GiB RAM; target %s (%s); caches %s\n\n",
	       u.sysname, u.release, sysconf(_SC_NPROCESSORS_ONLN),
	       (double)si.totalram * si.mem_unit / (double)GIB, dir, fs_name(dir),
	       !o->drop_caches ? "not dropped" :
	       caches_dropped_ok ? "dropped before each write, save, restore and read" :
	       "NOT dropped (no permission)");
	printf("Times in seconds (slowest rank). Targets: stall <= 1.2x memcpy, "
	       "committed <= 1.1x write+fsync, restore >= 0.9x fio (the best of its "
	       "queue depths).\n\n");
	printf("| bytes per rank | memcpy | write+fsync | ckpt stall | ckpt committed "
	       "| stall / memcpy | committed / write+fsync | restore | restore GB/s "
	       "| fio O_DIRECT GB/s (bs %s, iodepth", o->fio_bs);
	for (unsigned d = 0; d < o->nfio_depths; d++)
		printf("%s%u", d ? " / " : " ", o->fio_depths[d]);
	printf(") | restore / fio |\n");
	printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
	for (unsigned i = 0; i < o->nsizes; i++) {
		const struct result *r = &res[i];
		double s_ratio = r->stall_s / r->memcpy_s;
		double c_ratio = r->commit_s / r->write_s;
		char fio_s[64] = "n/a", rf_s[48] = "n/a";
		double best = -1;
		size_t used = 0;

		for (unsigned d = 0; d < o->nfio_depths && r->fio_bw[d] > 0; d++) {
			used += (size_t)snprintf(fio_s + used, sizeof(fio_s) - used, "%s%.2f",
						 d ? " / " : "", r->fio_bw[d] / 1e9);
			if (used >= sizeof(fio_s))
				used = sizeof(fio_s) - 1;
			if (r->fio_bw[d] > best)
				best = r->fio_bw[d];
		}
		if (best > 0) {
			double rf = r->restore_bw / best;

			snprintf(rf_s, sizeof(rf_s), "%.2f %s", rf, rf >= 0.9 ? "ok" : "MISS");
		}
		printf("| %s | %.3f | %.3f | %.3f | %.3f | %.2f %s | %.2f %s | %.3f | %.2f | %s | %s |\n",
		       fmt_size(r->bytes, sz, sizeof(sz)), r->memcpy_s, r->write_s,
		       r->stall_s, r->commit_s,
		       s_ratio, s_ratio <= 1.2 ? "ok" : "MISS",
		       c_ratio, c_ratio <= 1.1 ? "ok" : "MISS",
		       r->restore_s, r->restore_bw / 1e9, fio_s, rf_s);
	}
	fflush(stdout);
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: ckpt-bench [options]\n"
"  -d, --dir DIR           target directory (the file system under test; default .)\n"
"  -r, --ranks N           rank processes (default 2)\n"
"  -s, --bytes S[,S...]    bytes per rank, e.g. 512MiB,2GiB (default 512MiB)\n"
"  -n, --reps N            repetitions, the median is reported (default 3)\n"
"  -t, --tensors N         tensors per save (default 4)\n"
"      --slots N           slots per rank for the ckptd started (default 1)\n"
"      --staging-bytes S   staging for the ckptd started (default: enough)\n"
"      --direct-io MODE    auto|on|off for the ckptd started (default auto)\n"
"      --ckptd PATH        ckptd binary (default: next to this build, else PATH)\n"
"      --socket PATH       use a running ckptd instead of starting one\n"
"      --root DIR          that ckptd's root (for the fio comparison)\n"
"      --fio PATH          fio binary (default fio; \"\" skips the comparison)\n"
"      --fio-iodepth N[,N] fio queue depths; restore is compared with the best\n"
"                          (default 8,32)\n"
"      --fio-bs SIZE       fio block size (default 4M, ckptd's default request\n"
"                          size: fio is given the same request size ckptd uses)\n"
"      --no-drop-caches    do not drop the page cache between phases\n"
"      --keep              keep the files written\n"
"  -v, --verbose           print every repetition\n"
"  -h, --help\n");
}

static const char *default_ckptd(void)
{
	static char path[PATH_MAX];
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	if (n > 0) {
		self[n] = '\0';
		slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			/* build/bench/ckpt-bench -> build/ckptd/ckptd */
			pathf(path, sizeof(path), "%s/../ckptd/ckptd", self);
			if (access(path, X_OK) == 0)
				return path;
		}
	}
	return "ckptd";
}

static int rm_rf(const char *path)
{
	char *cmd;
	int ret;

	if (asprintf(&cmd, "rm -rf -- '%s'", path) < 0)
		return -ENOMEM;
	ret = system(cmd);
	free(cmd);
	return ret == 0 ? 0 : -EIO;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "ranks", required_argument, NULL, 'r' },
		{ "bytes", required_argument, NULL, 's' },
		{ "reps", required_argument, NULL, 'n' },
		{ "tensors", required_argument, NULL, 't' },
		{ "slots", required_argument, NULL, 1 },
		{ "staging-bytes", required_argument, NULL, 2 },
		{ "direct-io", required_argument, NULL, 3 },
		{ "ckptd", required_argument, NULL, 4 },
		{ "socket", required_argument, NULL, 5 },
		{ "root", required_argument, NULL, 6 },
		{ "fio", required_argument, NULL, 7 },
		{ "fio-iodepth", required_argument, NULL, 10 },
		{ "fio-bs", required_argument, NULL, 11 },
		{ "no-drop-caches", no_argument, NULL, 8 },
		{ "keep", no_argument, NULL, 9 },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct options o = {
		.dir = ".", .fio = "fio", .fio_bs = "4M", .ranks = 2, .reps = 3, .tensors = 4,
		.slots = 1, .direct_io = "auto", .drop_caches = true,
		/* 8: the usual fio reference; 32: ckptd's default queue depth. */
		.fio_depths = { 8, 32 }, .nfio_depths = 2,
	};
	struct result res[MAX_SIZES];
	char work[PATH_MAX], root[PATH_MAX], sock[PATH_MAX], wdir[PATH_MAX], logp[PATH_MAX];
	char rdir[PATH_MAX];
	uint64_t maxbytes = 0;
	int c;

	o.sizes[0] = 512 * MIB;
	o.nsizes = 1;
	while ((c = getopt_long(argc, argv, "d:r:s:n:t:vh", longopts, NULL)) != -1) {
		char *end, *list, *tok, *save;
		unsigned long v;

		switch (c) {
		case 'd': o.dir = optarg; break;
		case 'r': case 'n': case 't': case 1:
			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (errno || *end || v == 0 ||
			    v > (c == 'r' ? MAX_RANKS : c == 'n' ? MAX_REPS : 4096))
				die("bad value for -%c: %s", c > 32 ? c : 'x', optarg);
			if (c == 'r') o.ranks = (uint32_t)v;
			else if (c == 'n') o.reps = (unsigned)v;
			else if (c == 't') o.tensors = (unsigned)v;
			else o.slots = (uint32_t)v;
			break;
		case 's':
			o.nsizes = 0;
			list = strdup(optarg);
			for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
				uint64_t b;

				if (o.nsizes == MAX_SIZES || parse_size(tok, &b) < 0 ||
				    b == 0 || b % ALIGN)
					die("bad size %s (a multiple of 4 KiB, at most %d sizes)",
					    tok, MAX_SIZES);
				o.sizes[o.nsizes++] = b;
			}
			free(list);
			if (!o.nsizes)
				die("--bytes needs a size");
			break;
		case 2:
			if (parse_size(optarg, &o.staging) < 0)
				die("bad --staging-bytes %s", optarg);
			break;
		case 3: o.direct_io = optarg; break;
		case 4: o.ckptd = optarg; break;
		case 5: o.socket = optarg; break;
		case 6: o.root = optarg; break;
		case 7: o.fio = optarg; break;
		case 11:
			if (!*optarg || strspn(optarg, "0123456789kKmMgG") != strlen(optarg))
				die("bad --fio-bs %s (e.g. 1M, 4M)", optarg);
			o.fio_bs = optarg;
			break;
		case 10:
			o.nfio_depths = 0;
			list = strdup(optarg);
			for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
				errno = 0;
				v = strtoul(tok, &end, 10);
				if (errno || *end || v == 0 || v > 4096 ||
				    o.nfio_depths == MAX_FIO_DEPTHS)
					die("bad --fio-iodepth %s (1..4096, at most %d values)",
					    optarg, MAX_FIO_DEPTHS);
				o.fio_depths[o.nfio_depths++] = (unsigned)v;
			}
			free(list);
			if (!o.nfio_depths)
				die("--fio-iodepth needs a value");
			break;
		case 8: o.drop_caches = false; break;
		case 9: o.keep = true; break;
		case 'v': o.verbose = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	for (unsigned i = 0; i < o.nsizes; i++) {
		if (o.sizes[i] < (uint64_t)o.tensors * ALIGN)
			die("each rank needs at least %u KiB for %u tensors", o.tensors * 4, o.tensors);
		if (o.sizes[i] > maxbytes)
			maxbytes = o.sizes[i];
	}
	if (!o.ckptd)
		o.ckptd = default_ckptd();
	if (o.drop_caches && geteuid() != 0) {
		fprintf(stderr, "ckpt-bench: not root: the page cache will not be dropped\n");
		o.drop_caches = false;
	}
	if (o.fio[0]) {
		char *cmd;

		if (asprintf(&cmd, "'%s' --version >/dev/null 2>&1", o.fio) < 0)
			die("out of memory");
		if (system(cmd) != 0) {
			fprintf(stderr, "ckpt-bench: %s not found: no fio comparison\n", o.fio);
			o.fio = "";
		}
		free(cmd);
	}
	signal(SIGPIPE, SIG_IGN);

	/* Nothing is deleted before the end (see run_size): every repetition
	 * of both the write+fsync files and ckpt's steps stays on disk. */
	struct statvfs vfs;
	uint64_t need = 0;
	for (unsigned i = 0; i < o.nsizes; i++)
		need += 2 * (uint64_t)o.ranks * o.reps * (o.sizes[i] + 8 * MIB);
	if (statvfs(o.dir, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < need + need / 10)
		die("%s has %llu MiB free; this run writes about %llu MiB (ranks x bytes x reps, "
		    "twice): use fewer --reps, smaller --bytes or another --dir", o.dir,
		    (unsigned long long)((uint64_t)vfs.f_bavail * vfs.f_frsize / MIB),
		    (unsigned long long)(need / MIB));

	pathf(work, sizeof(work), "%s/ckpt-bench-%d", o.dir, (int)getpid());
	pathf(wdir, sizeof(wdir), "%s/write", work);
	if (mkdir(work, 0755) < 0 || mkdir(wdir, 0755) < 0)
		die("mkdir %s: %s", wdir, strerror(errno));
	if (o.socket) {
		pathf(sock, sizeof(sock), "%s", o.socket);
		if (o.root && !realpath(o.root, rdir))
			die("--root %s: %s", o.root, strerror(errno));
	} else {
		uint64_t staging = o.staging;

		/*
		 * A budget, not an allocation: ckptd maps only the slots asked for.
		 * Twice the need leaves room for ckptd's own slot rounding and for
		 * the previous size's ranks, whose arenas may not be released yet.
		 */
		if (!staging)
			staging = 2 * (uint64_t)o.ranks * o.slots * (maxbytes + 64 * MIB);
		pathf(root, sizeof(root), "%s/root", work);
		pathf(sock, sizeof(sock), "%s/ckptd.sock", work);
		pathf(logp, sizeof(logp), "%s/ckptd.log", work);
		if (strlen(sock) >= sizeof(((struct sockaddr_un *)0)->sun_path))
			die("socket path %s too long: use a shorter --dir", sock);
		if (mkdir(root, 0755) < 0 || !realpath(root, rdir))
			die("mkdir %s: %s", root, strerror(errno));
		start_ckptd(&o, rdir, sock, logp, staging);
	}

	for (unsigned i = 0; i < o.nsizes; i++)
		run_size(&o, i, sock, (o.socket && !o.root) ? NULL : rdir, wdir, &res[i]);

	stop_ckptd();
	print_report(&o, res, o.dir, argc, argv);
	if (!o.keep)
		rm_rf(work);
	else
		fprintf(stderr, "ckpt-bench: files kept in %s\n", work);
	return 0;
}
