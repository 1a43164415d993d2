/* SPDX-License-Identifier: MIT */
/*
 * Jobs: the daemon's record of each job it manages (lookup, lifetime), the
 * job's ownership (the OWNER lock, the takeover and the recovery that comes
 * with it, the release), and at start-up this daemon's identity in OWNER
 * files and the jobs it owned before it stopped.
 *
 * Not here: a job's steps, votes and commit (coord.c), and the removal of
 * step directories and root retention (retention.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckptd.h"
#include "coord.h"
#include "coord_internal.h"
#include "jobs.h"
#include "retention.h"
#include "uploader.h"

/* ---- Jobs: ownership, takeover, release ----------------------------- */

/*
 * A job is managed by one daemon at a time (FORMAT.md, "OWNER"; DESIGN.md,
 * "Ownership"). A single-node daemon, or the leader (node 0) of a group,
 * takes the job's OWNER lock when the job's first rank says HELLO, and only
 * then recovers the job (its uncommitted steps go to .trash, LATEST is
 * fixed, its committed steps are loaded, retention applies); it holds the
 * lock until job_release() forgets the job or ckptd exits. Another node of
 * a group never takes the lock: it refuses a job whose lock is held by
 * anyone but a leader of its own cluster id, and otherwise leaves ownership
 * to its leader. All of that is metadata I/O on the shared root and runs on
 * a worker; HELLOs for the job wait meanwhile and share the one takeover.
 */

struct job_waiter {
	struct job_waiter *next;
	job_ready_fn ready;
	void *arg;
};

struct takeover {
	struct daemon *d;
	struct job *job;       /* the loop's record; the worker reads only its name */
	int dirfd, lockfd;
	uint64_t *committed;   /* ascending */
	size_t n_committed;
	unsigned removed;      /* uncommitted steps moved to .trash */
	int result;
	char reason[CKPT_REASON_MAX + 1];
};

static void owner_me(const struct daemon *d, struct store_owner *me)
{
	struct timespec ts;
	struct tm tm;

	memset(me, 0, sizeof(*me));
	if (gethostname(me->host, sizeof(me->host) - 1) < 0)
		snprintf(me->host, sizeof(me->host), "unknown");
	me->pid = (long)getpid();
	snprintf(me->daemon, sizeof(me->daemon), "%s", d->daemon_id);
	snprintf(me->cluster, sizeof(me->cluster), "%s",
		 d->cfg->cluster_id ? d->cfg->cluster_id : "default");
	me->nodes = d->cfg->nodes > 1 ? d->cfg->nodes : 1;
	me->node = me->nodes > 1 ? d->cfg->node_index : 0;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(me->since, sizeof(me->since), "%Y-%m-%dT%H:%M:%SZ", &tm);
	snprintf(me->holder, sizeof(me->holder), "%s", d->holder_id);
}

/*
 * This daemon as OWNER's holder= names it across restarts (FORMAT.md): a
 * group's leader by its cluster id and node index, wherever it runs; a
 * single-node ckptd by its host and control socket (two on one host have
 * two sockets). Printable ASCII only, as OWNER's readers keep nothing else.
 */
static void holder_id(const struct daemon *d, char *out, size_t cap)
{
	char host[256] = "";

	if (d->cfg->nodes > 1) {
		snprintf(out, cap, "group:%s:%u", d->cfg->cluster_id ? d->cfg->cluster_id : "default",
			 d->cfg->node_index);
	} else {
		if (gethostname(host, sizeof(host) - 1) < 0 || !host[0])
			snprintf(host, sizeof(host), "unknown");
		snprintf(out, cap, "single:%s:%s", host, d->cfg->socket_path);
	}
	for (char *p = out; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
			*p = '?';
}

/* Whether dirfd still is <root>/name (a releasing owner may remove an
 * empty job directory while another opens it). */
static bool job_dir_current(int rootfd, const char *name, int dirfd)
{
	struct stat a, b;

	return fstat(dirfd, &a) == 0 && fstatat(rootfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
	       a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static int job_dir_open(struct daemon *d, const char *name, int *dirfd)
{
	if (mkdirat(d->root_fd, name, 0750) == 0)
		store_fsync_dir(d->root_fd);
	else if (errno != EEXIST)
		return -errno;
	*dirfd = openat(d->root_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	return *dirfd < 0 ? -errno : 0;
}

static void fd_close(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* The lock of a single daemon or a group's leader. */
static int takeover_lock(struct takeover *tk)
{
	struct daemon *d = tk->d;
	const char *name = tk->job->name;
	struct store_owner me, holder;
	char who[400];
	int r = -ESTALE;

	owner_me(d, &me);
	/* -ESTALE: the file or directory changed under us, look again.
	 * Held by this very daemon: its release of the job is finishing on
	 * another worker; wait for it a little (at most about 5 s). */
	for (int attempt = 0; attempt < 250; attempt++) {
		fd_close(&tk->lockfd);
		fd_close(&tk->dirfd);
		if (attempt)
			usleep(20000);
		r = job_dir_open(d, name, &tk->dirfd);
		if (r < 0)
			break;
		r = store_owner_lock(tk->dirfd, &me, &tk->lockfd, &holder);
		if (r == 0 && !job_dir_current(d->root_fd, name, tk->dirfd))
			r = -ESTALE;
		if (r == 0 || (r != -ESTALE && r != -EAGAIN))
			break;
		if (r == -EAGAIN && strcmp(holder.daemon, d->daemon_id) != 0)
			break;
	}
	if (r == -EAGAIN) {
		store_owner_describe(&holder, who, sizeof(who));
		snprintf(tk->reason, sizeof(tk->reason), "job %s is owned by another ckptd, %s; "
			 "refused here until that one releases it (%s/%s/%s)", name, who,
			 d->cfg->root, name, CKPT_OWNER_NAME);
		return -CKPT_E_REFUSED;
	}
	if (r < 0)
		snprintf(tk->reason, sizeof(tk->reason), "cannot take job %s over: %s/%s/%s: %s",
			 name, d->cfg->root, name, CKPT_OWNER_NAME, strerror(-r));
	return r;
}

/* A node of a group that is not its leader: only refuse what another owns. */
static int takeover_check_leader(struct takeover *tk)
{
	struct daemon *d = tk->d;
	const char *name = tk->job->name;
	struct store_owner holder;
	char who[400];
	int r = job_dir_open(d, name, &tk->dirfd);

	if (r < 0) {
		snprintf(tk->reason, sizeof(tk->reason), "cannot open job directory %s/%s: %s",
			 d->cfg->root, name, strerror(-r));
		return r;
	}
	r = store_owner_probe(tk->dirfd, &holder);
	if (r < 0) {
		snprintf(tk->reason, sizeof(tk->reason), "cannot check the owner of job %s "
			 "(%s/%s/%s): %s", name, d->cfg->root, name, CKPT_OWNER_NAME, strerror(-r));
		return r;
	}
	if (r > 0 && (holder.nodes <= 1 || strcmp(holder.cluster, d->cfg->cluster_id) != 0)) {
		store_owner_describe(&holder, who, sizeof(who));
		snprintf(tk->reason, sizeof(tk->reason), "job %s is owned by %s, not by the leader "
			 "of this group (cluster %s); this node refuses it", name, who,
			 d->cfg->cluster_id);
		return -CKPT_E_REFUSED;
	}
	return 0;
}

static bool steps_contain(const uint64_t *v, size_t n, uint64_t step)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (v[mid] == step)
			return true;
		if (v[mid] < step)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

/*
 * Recovery of one job, by its new owner: what no reader may see goes, LATEST
 * names the newest committed step. Alone, every uncommitted step is debris
 * of a crash (the lock says nobody else writes here). A group's leader
 * spares those newer than the newest committed step: the other nodes may be
 * writing them right now, before this node's first rank came.
 */
static int takeover_recover(struct takeover *tk)
{
	struct daemon *d = tk->d;
	const char *name = tk->job->name;
	uint64_t *all = NULL, newest;
	size_t n_all = 0;
	int r = store_list_steps(tk->dirfd, false, &all, &n_all);

	if (r < 0)
		goto fail;
	r = store_list_steps(tk->dirfd, true, &tk->committed, &tk->n_committed);
	if (r < 0)
		goto fail;
	newest = tk->n_committed ? tk->committed[tk->n_committed - 1] : CKPT_NO_STEP;
	for (size_t i = 0; i < n_all; i++) {
		char dn[32];

		if (steps_contain(tk->committed, tk->n_committed, all[i]))
			continue;
		if (d->cfg->nodes > 1 && (newest == CKPT_NO_STEP || all[i] > newest))
			continue;
		if (ckpt_step_dirname(dn, sizeof(dn), all[i]) < 0)
			continue;
		log_warn("recovery", "removing uncommitted step job=%s step=%llu", name,
			 (unsigned long long)all[i]);
		int tr = trash_move(d, tk->job, tk->dirfd, dn);
		if (tr < 0)
			log_error("recovery", "cannot remove %s/%s: %s", name, dn, strerror(-tr));
		else
			tk->removed++;
	}
	free(all);
	all = NULL;
	if (unlinkat(tk->dirfd, CKPT_LATEST_NAME ".tmp", 0) == 0)
		log_info("recovery", "removed %s/LATEST.tmp", name);
	store_fsync_dir(tk->dirfd);
	uint64_t latest = 0;
	if (newest != CKPT_NO_STEP &&
	    (store_read_latest(tk->dirfd, &latest) < 0 || latest != newest)) {
		log_info("recovery", "LATEST set job=%s step=%llu", name, (unsigned long long)newest);
		pthread_mutex_lock(&latest_lock);
		r = store_write_latest(tk->dirfd, newest);
		pthread_mutex_unlock(&latest_lock);
		if (r < 0)
			log_warn("recovery", "LATEST not updated job=%s step=%llu error=\"%s\"", name,
				 (unsigned long long)newest, strerror(-r));
	}
	return 0;
fail:
	free(all);
	snprintf(tk->reason, sizeof(tk->reason), "cannot list the steps of job %s (%s/%s): %s",
		 name, d->cfg->root, name, strerror(-r));
	return r;
}

static void takeover_run(void *arg)
{
	struct takeover *tk = arg;
	int r;

	if (coord_is_leader(tk->d)) {
		r = takeover_lock(tk);
		if (r == 0)
			r = takeover_recover(tk);
	} else {
		r = takeover_check_leader(tk);
		if (r == 0) {
			r = store_list_steps(tk->dirfd, true, &tk->committed, &tk->n_committed);
			if (r < 0)
				snprintf(tk->reason, sizeof(tk->reason), "cannot list the steps of "
					 "job %s: %s", tk->job->name, strerror(-r));
		}
	}
	tk->result = r;
}

static struct job *job_find(struct daemon *d, const char *name)
{
	for (struct job *job = d->jobs; job; job = job->next)
		if (strcmp(job->name, name) == 0)
			return job;
	return NULL;
}

static void job_unlink(struct job *job)
{
	for (struct job **p = &job->d->jobs; *p; p = &(*p)->next) {
		if (*p == job) {
			*p = job->next;
			return;
		}
	}
}

static void job_free(struct job *job)
{
	if (job->dirfd >= 0)
		close(job->dirfd);
	if (job->lock_fd >= 0)
		close(job->lock_fd);
	free(job->committed);
	free(job->restore_pins);
	free(job->left);
	free(job);
}

/* A record for a job being taken over, with its takeover. */
static struct job *job_new(struct daemon *d, const char *name, struct takeover **tkp)
{
	struct job *job = calloc(1, sizeof(*job));
	struct takeover *tk = calloc(1, sizeof(*tk));

	if (!job || !tk) {
		free(job);
		free(tk);
		return NULL;
	}
	job->d = d;
	job->dirfd = job->lock_fd = -1;
	snprintf(job->name, sizeof(job->name), "%s", name);
	tk->d = d;
	tk->job = job;
	tk->dirfd = tk->lockfd = -1;
	job->next = d->jobs;
	d->jobs = job;
	*tkp = tk;
	return job;
}

/* On the loop: the job is usable now, or it is forgotten. */
static struct job *takeover_finish(struct takeover *tk)
{
	struct job *job = tk->job;
	struct daemon *d = tk->d;

	for (size_t i = 0; tk->result == 0 && i < tk->n_committed; i++) {
		if (committed_insert(job, tk->committed[i]) < 0) {
			tk->result = -ENOMEM;
			snprintf(tk->reason, sizeof(tk->reason), "out of memory loading job %s",
				 job->name);
		}
	}
	free(tk->committed);
	tk->committed = NULL;
	if (tk->result < 0) {
		log_warn("owner", "job not taken over job=%s error=\"%s\"", job->name, tk->reason);
		fd_close(&tk->dirfd);
		fd_close(&tk->lockfd);
		job_unlink(job);
		job_free(job);
		return NULL;
	}
	job->dirfd = TAKE_FD(tk->dirfd);
	job->lock_fd = TAKE_FD(tk->lockfd);
	job->ready = true;
	/* The S3 tier works on the jobs this daemon holds, from now on: it
	 * scans the job (what S3 confirmed, unfinished multipart uploads,
	 * what is missing), and the job stays loaded (and owned) while it
	 * has work for it. */
	if (!d->stopping)
		uploader_job_owned(d, job->name);
	uint64_t newest = job_latest(job);
	log_info("recovery", "job=%s committed=%zu latest=%lld removed=%u owner=%s", job->name,
		 job->n_committed, newest == CKPT_NO_STEP ? -1LL : (long long)newest, tk->removed,
		 job->lock_fd >= 0 ? "self" : "leader");
	if (job->n_committed)
		metrics_set(M_NEWEST_COMMITTED_STEP, (double)newest, job->name, "root");
	if (!d->stopping)
		retention_apply(job);
	return job;
}

static void takeover_done(void *arg)
{
	struct takeover *tk = arg;
	struct daemon *d = tk->d;
	struct job *job = tk->job;
	struct job_waiter *w = job->waiters;

	d->busy--;
	job->waiters = NULL;
	job = takeover_finish(tk);
	/* A waiter may give up on the job (and release it): it stays until
	 * every waiter has been told. */
	if (job)
		job->waking = true;
	while (w) {
		struct job_waiter *next = w->next;
		w->ready(w->arg, job, job ? 0 : tk->result, job ? NULL : tk->reason);
		free(w);
		w = next;
	}
	free(tk);
	if (job) {
		job->waking = false;
		job_release(job);
	}
}

int job_open(struct daemon *d, const char *name, job_ready_fn ready, void *arg)
{
	struct job *job = job_find(d, name);
	struct takeover *tk = NULL;
	struct job_waiter *w;

	if (job && job->ready) {
		ready(arg, job, 0, NULL);
		return 0;
	}
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->ready = ready;
	w->arg = arg;
	if (!job) {
		job = job_new(d, name, &tk);
		if (!job) {
			free(w);
			return -ENOMEM;
		}
		d->busy++;
		if (workers_submit(d->workers, takeover_run, takeover_done, tk) < 0) {
			d->busy--;
			job_unlink(job);
			job_free(job);
			free(tk);
			free(w);
			return -ENOMEM;
		}
	}
	struct job_waiter **p = &job->waiters;
	while (*p)
		p = &(*p)->next;
	*p = w;
	return 0;
}

struct job *job_get(struct daemon *d, const char *name, bool create)
{
	struct job *job = job_find(d, name);
	struct takeover *tk;

	if (job)
		return job->ready ? job : NULL;
	if (!create)
		return NULL;
	/* The peer link's path (a vote for a job no local rank has opened
	 * yet): the takeover happens here, on the loop. */
	job = job_new(d, name, &tk);
	if (!job)
		return NULL;
	takeover_run(tk);
	job = takeover_finish(tk);
	free(tk);
	return job;
}

static bool job_in_use(const struct job *job)
{
	if (!job->ready || job->waking || job->clients || job->retention_running ||
	    job->restores)
		return true;
	/* Uploads (queued, running or waiting for a retry), scans and S3
	 * deletions: the last steps of a job whose ranks are gone still go
	 * up before its lock is let go. */
	if (uploader_has_work(job->d, job->name))
		return true;
	for (size_t i = 0; i < job->n_committed; i++)
		if (job->restore_pins[i])
			return true;
	for (const struct step *st = job->steps; st; st = st->next)
		if (st->state != STEP_FAILED || st->inflight || st->removing)
			return true;
	return false;
}

/* Giving a job up: on a worker, as closing a lock is a request to the lock
 * manager on a shared file system. */
struct release {
	struct daemon *d;
	char name[CKPT_JOB_NAME_MAX + 1];
	int dirfd, lockfd;
	bool remove_dir;
};

static void release_run(void *arg)
{
	struct release *rl = arg;

	/* A job that never committed anything leaves no empty directory. The
	 * lock is still held: nobody takes the job meanwhile, and a daemon
	 * that opened OWNER just before sees it unlinked and looks again. */
	if (rl->remove_dir && rl->lockfd >= 0 &&
	    unlinkat(rl->dirfd, CKPT_OWNER_NAME, 0) == 0 &&
	    unlinkat(rl->d->root_fd, rl->name, AT_REMOVEDIR) == 0)
		store_fsync_dir(rl->d->root_fd);
	fd_close(&rl->lockfd);
	fd_close(&rl->dirfd);
}

static void release_done(void *arg)
{
	struct release *rl = arg;

	rl->d->busy--;
	free(rl);
}

void job_release(struct job *job)
{
	struct daemon *d = job->d;

	if (job_in_use(job) || d->stopping)
		return;
	/* No rank left: failed steps need no tombstones (the next ranks are
	 * a new run), and the job's memory and fd go until a rank returns. */
	while (job->steps) {
		struct step *st = job->steps;
		job->steps = st->next;
		step_free(st);
	}
	job_unlink(job);
	uploader_job_released(d, job->name);
	if (job->lock_fd >= 0)
		log_info("owner", "job released job=%s committed=%zu", job->name, job->n_committed);
	struct release *rl = calloc(1, sizeof(*rl));
	if (rl) {
		rl->d = d;
		snprintf(rl->name, sizeof(rl->name), "%s", job->name);
		rl->dirfd = TAKE_FD(job->dirfd);
		rl->lockfd = TAKE_FD(job->lock_fd);
		/* Alone only: in a group another node may be about to use it. */
		rl->remove_dir = job->n_committed == 0 && d->cfg->nodes <= 1;
		d->busy++;
		if (workers_submit(d->workers, release_run, release_done, rl) < 0) {
			d->busy--;
			release_run(rl);
			free(rl);
		}
	}
	job_free(job);
}

void coord_job_idle(struct daemon *d, const char *name)
{
	struct job *job = job_get(d, name, false);

	if (job)
		job_release(job);
}

/* ---- Start-up ----------------------------------------------------------- */

/*
 * Nothing under the root is scanned at start-up: other daemons may own
 * other jobs there, with their own settings. Each job is recovered when
 * this daemon takes it over (job_open). Only .trash is this daemon's
 * business at start, and this run's identity in OWNER files.
 */
int coord_recover(struct daemon *d)
{
	uint64_t rnd = 0;

	if (mkdirat(d->root_fd, ".trash", 0700) < 0 && errno != EEXIST)
		log_warn("recovery", "cannot create %s/.trash, deleting in place: %s", d->cfg->root,
			 strerror(errno));
	d->trash_fd = openat(d->root_fd, ".trash", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd))
		rnd = (uint64_t)ckpt_mono_ns() ^ ((uint64_t)getpid() << 32);
	snprintf(d->daemon_id, sizeof(d->daemon_id), "%016llx", (unsigned long long)rnd);
	holder_id(d, d->holder_id, sizeof(d->holder_id));
	log_info("owner", "daemon id=%s holder=\"%s\": jobs are taken over (and recovered) at "
		 "their first HELLO, and those this holder owned before at start", d->daemon_id,
		 d->holder_id);
	return 0;
}

/*
 * The jobs this daemon owned before it stopped or crashed: their OWNER file
 * names this holder (the lock itself went with the old process). Read
 * without locking, on a worker (a listing of a shared root and one small
 * read per job); those are taken over again like at a HELLO, which
 * recovers them and lets the uploader resume them, and released once idle.
 * Jobs whose OWNER names another holder, or none, are not touched.
 */
struct resume {
	struct daemon *d;
	char **names;
	size_t n_names, n_jobs;
	int result;
};

static void resume_run(void *arg)
{
	struct resume *rs = arg;
	struct daemon *d = rs->d;
	char **jobs = NULL;
	size_t n = 0;

	rs->result = store_list_jobs(d->root_fd, &jobs, &n);
	if (rs->result < 0)
		return;
	rs->n_jobs = n;
	rs->names = calloc(n ? n : 1, sizeof(*rs->names));
	if (!rs->names) {
		rs->result = -ENOMEM;
		store_strv_free(jobs, n);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct store_owner o;
		int fd = openat(d->root_fd, jobs[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

		if (fd < 0)
			continue;
		if (store_owner_read(fd, &o) == 0 && o.holder[0] && strcmp(o.holder, d->holder_id) == 0)
			rs->names[rs->n_names++] = TAKE_PTR(jobs[i]);
		close(fd);
	}
	store_strv_free(jobs, n);
}

static void resume_ready(void *arg, struct job *job, int error, const char *reason)
{
	(void)arg;
	(void)error;
	(void)reason; /* a refusal is logged by the takeover, naming the job and why */
	if (job)
		log_info("owner", "resumed job=%s committed=%zu: owned by this holder before this start",
			 job->name, job->n_committed);
}

static void resume_done(void *arg)
{
	struct resume *rs = arg;
	struct daemon *d = rs->d;

	d->busy--;
	if (rs->result < 0)
		log_warn("owner", "cannot list %s to resume the jobs this daemon owned: %s", d->cfg->root,
			 strerror(-rs->result));
	else
		log_info("owner", "resuming jobs=%zu (of %zu under the root) owned by holder=\"%s\"",
			 rs->n_names, rs->n_jobs, d->holder_id);
	for (size_t i = 0; i < rs->n_names; i++) {
		if (!d->stopping && job_open(d, rs->names[i], resume_ready, NULL) < 0)
			log_warn("owner", "cannot resume job=%s: out of memory", rs->names[i]);
	}
	store_strv_free(rs->names, rs->n_names);
	free(rs);
}

void coord_resume_owned(struct daemon *d)
{
	struct resume *rs;

	/* The other nodes of a group own nothing. */
	if (!coord_is_leader(d))
		return;
	rs = calloc(1, sizeof(*rs));
	if (!rs) {
		log_warn("owner", "cannot resume the jobs this daemon owned: out of memory");
		return;
	}
	rs->d = d;
	d->busy++;
	if (workers_submit(d->workers, resume_run, resume_done, rs) < 0) {
		d->busy--;
		free(rs);
		log_warn("owner", "cannot resume the jobs this daemon owned: out of memory");
	}
}
