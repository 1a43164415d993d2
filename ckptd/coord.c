/* SPDX-License-Identifier: MIT */
/*
 * The commit coordinator: jobs, their committed steps, open steps and the
 * votes of their ranks. A step commits when every rank 0..world_size-1 has
 * voted "durable": then a worker fsyncs the step directory, writes
 * MANIFEST.json durably (its existence is the commit) and moves LATEST.
 *
 * Votes come from coord_vote(); on one node the writer casts them. In a
 * multi-node group (peer.c) only the leader, node 0, commits: the other
 * daemons forward their ranks' votes to it and learn of commits and
 * failures from it; the leader reads each remote rank's index from the
 * shared root, checks it against the vote's digest and sizes, and only then
 * writes the manifest. Only the leader deletes step directories (failed
 * steps, retention, recovery): the others forget.
 * A job is recovered (its step directories without a manifest removed)
 * when this daemon takes it over: see "Jobs: ownership" below.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckptd.h"
#include "peer.h"
#include "peerwire.h"
#include "uploader.h"

#define FAILED_TOMBSTONES 64

bool coord_is_leader(const struct daemon *d)
{
	return d->cfg->nodes <= 1 || d->cfg->node_index == 0;
}

/* LATEST of one job is written by one worker at a time. */
static pthread_mutex_t latest_lock = PTHREAD_MUTEX_INITIALIZER;

static int committed_insert(struct job *job, uint64_t step)
{
	size_t i;

	if (job->n_committed == job->cap_committed) {
		size_t cap = job->cap_committed ? job->cap_committed * 2 : 16;
		uint64_t *s = realloc(job->committed, cap * sizeof(*s));
		if (!s)
			return -ENOMEM;
		job->committed = s;
		unsigned *p = realloc(job->restore_pins, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		job->restore_pins = p;
		job->cap_committed = cap;
	}
	for (i = job->n_committed; i > 0 && job->committed[i - 1] > step; i--) {
		job->committed[i] = job->committed[i - 1];
		job->restore_pins[i] = job->restore_pins[i - 1];
	}
	job->committed[i] = step;
	job->restore_pins[i] = 0;
	job->n_committed++;
	return 0;
}

static void committed_remove_at(struct job *job, size_t i)
{
	memmove(&job->committed[i], &job->committed[i + 1],
		(job->n_committed - i - 1) * sizeof(*job->committed));
	memmove(&job->restore_pins[i], &job->restore_pins[i + 1],
		(job->n_committed - i - 1) * sizeof(*job->restore_pins));
	job->n_committed--;
}

void coord_adopt(struct job *job, uint64_t step)
{
	if (job_is_committed(job, step))
		return;
	if (committed_insert(job, step) < 0) {
		log_error("coord", "out of memory recording a step restored from S3 job=%s", job->name);
		return;
	}
	log_info("coord", "committed again from S3 job=%s step=%llu", job->name,
		 (unsigned long long)step);
}

bool job_is_committed(const struct job *job, uint64_t step)
{
	for (size_t i = 0; i < job->n_committed; i++)
		if (job->committed[i] == step)
			return true;
	return false;
}

uint64_t job_latest(const struct job *job)
{
	return job->n_committed ? job->committed[job->n_committed - 1] : CKPT_NO_STEP;
}

void job_pin(struct job *job, uint64_t step, int delta)
{
	for (size_t i = 0; i < job->n_committed; i++)
		if (job->committed[i] == step)
			job->restore_pins[i] = (unsigned)((int)job->restore_pins[i] + delta);
}

/* ---- Removal of step directories ------------------------------------ */

struct removal {
	struct job *job;
	struct step *st;       /* failed step record, or NULL (retention) */
	uint64_t step;
	bool committed;
	bool kept;             /* a failed step's directory held a manifest: left alone */
	int result;
};

/*
 * Move job/name into <root>/.trash with one rename: it is gone from the job
 * at once (deleting big files takes a while), and whatever a crash leaves in
 * the trash is deleted at the next start. Falls back to deleting in place.
 */
static int trash_move(struct daemon *d, struct job *job, int jobfd, const char *name)
{
	char tname[CKPT_JOB_NAME_MAX + 96];

	if (d->trash_fd >= 0) {
		snprintf(tname, sizeof(tname), "%s.%s.%lld.%llu", job ? job->name : "job", name,
			 (long long)ckpt_mono_ns(), (unsigned long long)__atomic_add_fetch(&d->trash_seq, 1, __ATOMIC_RELAXED));
		if (renameat(jobfd, name, d->trash_fd, tname) == 0)
			return 0;
		if (errno == ENOENT)
			return 0;
	}
	return store_remove_tree(jobfd, name);
}

static void trash_run(void *arg)
{
	struct daemon *d = arg;
	char **names = NULL;
	size_t n = 0;
	/* A fresh open, not dup(): a dup shares trash_fd's directory offset,
	 * which the first listing leaves at the end, so every later listing
	 * found nothing and the trash only emptied at the next start. */
	int fd = openat(d->trash_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0) {
		log_warn("retention", "cannot list .trash: %s", strerror(errno));
		return;
	}
	DIR *dir = fdopendir(fd);
	if (!dir) {
		close(fd);
		return;
	}
	for (struct dirent *de; (de = readdir(dir));) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char **nn = realloc(names, (n + 1) * sizeof(*names));
		if (!nn)
			break;
		names = nn;
		names[n] = strdup(de->d_name);
		if (names[n])
			n++;
	}
	closedir(dir);
	for (size_t i = 0; i < n; i++) {
		int r = store_remove_tree(d->trash_fd, names[i]);
		if (r < 0)
			log_warn("retention", "cannot delete .trash/%s: %s", names[i], strerror(-r));
		free(names[i]);
	}
	free(names);
}

static void trash_done(void *arg)
{
	struct daemon *d = arg;

	d->busy--;
	d->trash_running = false;
	if (d->trash_again)
		coord_trash_empty(d);
}

void coord_trash_empty(struct daemon *d)
{
	if (d->trash_fd < 0)
		return;
	if (d->trash_running) {
		d->trash_again = true;
		return;
	}
	d->trash_again = false;
	d->trash_running = true;
	d->busy++;
	if (workers_submit(d->workers, trash_run, trash_done, d) < 0) {
		d->trash_running = false;
		d->busy--;
	}
}

static void removal_run(void *arg)
{
	struct removal *rm = arg;
	char name[32];
	struct stat sb;
	int fd;

	rm->result = ckpt_step_dirname(name, sizeof(name), rm->step);
	if (rm->result < 0)
		return;
	/* Only retention removes a committed step. A failed attempt that
	 * shares its number with a committed one (or whose own commit got as
	 * far as the manifest) never takes the committed directory with it. */
	fd = openat(rm->job->dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (!rm->committed && fd >= 0 &&
	    fstatat(fd, CKPT_MANIFEST_NAME, &sb, AT_SYMLINK_NOFOLLOW) == 0) {
		close(fd);
		rm->kept = true;
		rm->result = 0;
		return;
	}
	if (fd >= 0)
		close(fd);
	if (rm->committed) {
		/* Uncommit first, durably, so no reader ever sees a committed
		 * step with files missing. */
		fd = openat(rm->job->dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		if (fd >= 0) {
			if (unlinkat(fd, CKPT_MANIFEST_NAME, 0) == 0)
				store_fsync_dir(fd);
			close(fd);
		}
	}
	rm->result = trash_move(rm->job->d, rm->job, rm->job->dirfd, name);
	if (rm->result == -ENOENT)
		rm->result = 0;
	store_fsync_dir(rm->job->dirfd);
}

static void step_free(struct step *st);

static void removal_done(void *arg)
{
	struct removal *rm = arg;
	struct daemon *d = rm->job->d;

	if (rm->kept) {
		/* A manifest makes it committed, whatever this daemon believed:
		 * so it is recorded, and no later attempt writes into it. */
		log_error("retention", "not removing failed step job=%s step=%llu: its directory "
			  "holds %s (a committed step); kept as committed", rm->job->name,
			  (unsigned long long)rm->step, CKPT_MANIFEST_NAME);
		if (!job_is_committed(rm->job, rm->step) && committed_insert(rm->job, rm->step) < 0)
			log_error("coord", "out of memory recording a commit job=%s", rm->job->name);
	} else if (rm->result < 0)
		log_warn("retention", "removing step failed job=%s step=%llu error=\"%s\"",
			 rm->job->name, (unsigned long long)rm->step, strerror(-rm->result));
	else
		log_info("retention", "removed job=%s step=%llu reason=%s", rm->job->name,
			 (unsigned long long)rm->step, rm->committed ? "retention" : "failed");
	if (rm->st)
		rm->st->removing = false;
	if (rm->committed)
		rm->job->retention_running--;
	d->busy--;
	struct job *job = rm->job;
	free(rm);
	coord_trash_empty(d);
	job_release(job);
}

static void removal_start(struct job *job, struct step *st, uint64_t step, bool committed)
{
	struct removal *rm;

	/* The same guard on the loop's own record: a failed step of a
	 * committed number is a bug elsewhere, never a reason to delete. */
	if (!committed && job_is_committed(job, step)) {
		log_error("retention", "not removing failed step job=%s step=%llu: that step "
			  "is committed", job->name, (unsigned long long)step);
		return;
	}
	rm = calloc(1, sizeof(*rm));
	if (!rm)
		return;
	rm->job = job;
	rm->st = st;
	rm->step = step;
	rm->committed = committed;
	if (st)
		st->removing = true;
	if (committed)
		job->retention_running++;
	job->d->busy++;
	if (workers_submit(job->d->workers, removal_run, removal_done, rm) < 0) {
		if (st)
			st->removing = false;
		if (committed)
			job->retention_running--;
		job->d->busy--;
		free(rm);
	}
}

static void retention_apply(struct job *job)
{
	uint32_t keep = job->d->cfg->keep_last;
	uint64_t oldest_held = 0;
	size_t held = 0;

	if (keep == 0)
		return;
	/* Oldest first; never the newest, never one being restored, never
	 * one that S3 has not confirmed (uploader_pinned: unknown keeps). */
	for (size_t i = 0; job->n_committed > keep && i + 1 < job->n_committed;) {
		if (job->restore_pins[i]) {
			i++;
			continue;
		}
		if (uploader_pinned(job->d, job->name, job->committed[i])) {
			if (held++ == 0)
				oldest_held = job->committed[i];
			i++;
			continue;
		}
		uint64_t step = job->committed[i];
		committed_remove_at(job, i);
		/* In a group the leader deletes; the others only forget. */
		if (coord_is_leader(job->d))
			removal_start(job, NULL, step, true);
	}
	/* Steps past keep_last that wait for S3: reported, never dropped. */
	size_t excess = job->n_committed > keep ? job->n_committed - keep : 0;
	if (held > excess)
		held = excess;
	uploader_retention_held(job->d, job->name, held, oldest_held);
}

void coord_retention_recheck(struct daemon *d, const char *name)
{
	/* Only a job this daemon holds: the uploader works only on those, and
	 * keeps them loaded while it has work (job_in_use). Anything else is
	 * another daemon's, or nobody's until a rank comes. */
	struct job *job = job_get(d, name, false);

	if (!job)
		return;
	retention_apply(job);
	job_release(job);
}

void coord_job_idle(struct daemon *d, const char *name)
{
	struct job *job = job_get(d, name, false);

	if (job)
		job_release(job);
}

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

static void step_free(struct step *st);

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

/* ---- Steps ---------------------------------------------------------- */

struct step *step_find(struct job *job, uint64_t step)
{
	for (struct step *st = job->steps; st; st = st->next)
		if (st->step == step)
			return st;
	return NULL;
}

static void step_reset(struct step *st)
{
	if (st->votes)
		for (uint32_t i = 0; i < st->world_size; i++)
			ckpt_table_free(&st->votes[i].table);
	free(st->votes);
	free(st->saving);
	st->votes = NULL;
	st->saving = NULL;
}

static void step_free(struct step *st)
{
	step_reset(st);
	free(st);
}

static void step_unlink(struct step *st)
{
	for (struct step **p = &st->job->steps; *p; p = &(*p)->next) {
		if (*p == st) {
			*p = st->next;
			return;
		}
	}
}

static int step_init(struct step *st, uint32_t world_size)
{
	st->world_size = world_size;
	st->state = STEP_OPEN;
	st->votes_in = 0;
	st->inflight = 0;
	st->error = 0;
	st->reason[0] = 0;
	st->skipped = false;
	st->opened_ns = ckpt_mono_ns();
	st->votes = calloc(world_size, sizeof(*st->votes));
	st->saving = calloc(world_size, 1);
	return st->votes && st->saving ? 0 : -ENOMEM;
}

struct step *step_get(struct job *job, uint64_t step, uint32_t world_size)
{
	struct step *st = step_find(job, step);

	if (st)
		return st;
	st = calloc(1, sizeof(*st));
	if (!st)
		return NULL;
	st->job = job;
	st->step = step;
	if (step_init(st, world_size) < 0) {
		step_free(st);
		return NULL;
	}
	st->next = job->steps;
	job->steps = st;
	return st;
}

int step_reopen(struct step *st, uint32_t world_size)
{
	step_reset(st);
	return step_init(st, world_size);
}

static void prune_tombstones(struct job *job)
{
	unsigned n = 0;
	struct step *oldest = NULL;

	for (struct step *st = job->steps; st; st = st->next) {
		if (st->state == STEP_FAILED && st->inflight == 0 && !st->removing) {
			n++;
			if (!oldest || st->step < oldest->step)
				oldest = st;
		}
	}
	if (n > FAILED_TOMBSTONES && oldest) {
		step_unlink(oldest);
		step_free(oldest);
	}
}

static void notify_participants(struct step *st, enum ckpt_state state, int error,
				const char *reason)
{
	for (uint32_t r = 0; r < st->world_size; r++) {
		if (!st->votes[r].durable && !st->saving[r])
			continue;
		struct client *c = job_client_for_rank(st->job, r);
		if (c)
			client_send_status(c, st->step, state, error, CKPT_NO_SLOT, reason);
	}
}

void coord_fail(struct step *st, int error, const char *fmt, ...)
{
	va_list ap;

	if (st->state != STEP_OPEN)
		return;
	st->state = STEP_FAILED;
	st->error = error;
	st->failed_generation = ++st->job->d->generation;
	va_start(ap, fmt);
	vsnprintf(st->reason, sizeof(st->reason), fmt, ap);
	va_end(ap);
	log_warn("coord", "step abandoned job=%s step=%llu votes=%u/%u reason=\"%s\"",
		 st->job->name, (unsigned long long)st->step, st->votes_in,
		 st->world_size, st->reason);
	/* Each step counts once, by why it ended (the skip event itself is
	 * sent where the rank's SKIP arrives, with the rank). */
	metrics_inc(M_SAVES_TOTAL, st->job->name, st->skipped ? "skipped" : "failed");
	if (!st->skipped)
		events_save_failed(st->job->name, st->step, st->reason);
	notify_participants(st, CKPT_STATE_FAILED, error, st->reason);
	if (st->job->d->peer) {
		/* The leader tells every node; another node tells the leader,
		 * unless the leader is who failed it. */
		if (coord_is_leader(st->job->d) || !st->abort_from_peer)
			peer_send_abort(st->job->d, st->job->name, st->step, error, st->reason);
		peer_step_failed(st->job->d, st->job->name, st->step);
	}
	if (st->inflight == 0 && coord_is_leader(st->job->d))
		removal_start(st->job, st, st->step, false);
	prune_tombstones(st->job);
}

void coord_save_done(struct step *st, uint32_t rank)
{
	if (rank < st->world_size)
		st->saving[rank] = 0;
	st->inflight--;
	if (st->state == STEP_FAILED && st->inflight == 0 && !st->removing &&
	    coord_is_leader(st->job->d))
		removal_start(st->job, st, st->step, false);
}

void coord_rank_back(struct job *job, uint32_t rank)
{
	for (size_t i = 0; i < job->n_left; i++) {
		if (job->left[i] == rank) {
			job->left[i] = job->left[--job->n_left];
			return;
		}
	}
}

int64_t coord_missing_rank(struct job *job, const struct step *st)
{
	for (size_t i = 0; i < job->n_left; i++) {
		uint32_t r = job->left[i];
		if (r < st->world_size && !st->votes[r].durable && !st->saving[r])
			return r;
	}
	return -1;
}

void coord_rank_gone(struct job *job, uint32_t rank, const char *why)
{
	if (job->clients == 0) {
		/* Everyone left: the next ranks to come are a new run. */
		job->n_left = 0;
	} else {
		coord_rank_back(job, rank);
		if (job->n_left == job->cap_left) {
			size_t cap = job->cap_left ? job->cap_left * 2 : 8;
			uint32_t *l = realloc(job->left, cap * sizeof(*l));
			if (l) {
				job->left = l;
				job->cap_left = cap;
			}
		}
		if (job->n_left < job->cap_left)
			job->left[job->n_left++] = rank;
	}
	for (struct step *st = job->steps; st; st = st->next) {
		if (st->state != STEP_OPEN || rank >= st->world_size)
			continue;
		/* A save already handed over is complete in shared memory: it
		 * is finished and still counts. Only a rank that never handed
		 * its shard over leaves the step unable to commit. */
		if (st->votes[rank].durable || st->saving[rank])
			continue;
		coord_fail(st, -CKPT_E_ABORTED, "rank %u %s without saving step %llu",
			   rank, why, (unsigned long long)st->step);
	}
}

void coord_state_of(struct job *job, uint64_t step, struct ckpt_msg_status *out)
{
	memset(out, 0, sizeof(*out));
	out->step = step;
	out->slot_freed = CKPT_NO_SLOT;
	if (job_is_committed(job, step)) {
		out->state = CKPT_STATE_COMMITTED;
		return;
	}
	struct step *st = step_find(job, step);
	if (!st) {
		out->state = CKPT_STATE_UNKNOWN;
		return;
	}
	if (st->state == STEP_FAILED) {
		out->state = CKPT_STATE_FAILED;
		out->error = st->error;
		snprintf(out->reason, sizeof(out->reason), "%s", st->reason);
	} else {
		out->state = CKPT_STATE_PENDING;
	}
}

/* ---- Commit --------------------------------------------------------- */

struct commit {
	struct step *st;
	int result;
	char err[CKPT_REASON_MAX + 1];
	uint64_t bytes;
	int64_t started_ns;
};

/*
 * A vote cast over the peer link is believed only as far as the root bears
 * it out: the rank's index must have the voted digest and agree with the
 * vote's sizes, and the shard file must be as long as both say. Its table
 * becomes the vote's (for the manifest).
 */
static int remote_vote_check(int stepfd, struct job *job, struct step *st, uint32_t rank,
			     char *err, size_t errlen)
{
	struct rank_vote *v = &st->votes[rank];
	struct ckpt_index idx;
	char e[CKPT_REASON_MAX + 1], name[32];
	struct stat sb;
	int r;

	memset(&idx, 0, sizeof(idx));
	r = store_read_index(stepfd, rank, v->index_sha256, &idx, e, sizeof(e));
	if (r < 0) {
		snprintf(err, errlen, "rank %u (voted by node %u): %s", rank, v->node, e);
		return r == -ENOMEM || r == -EIO ? r : -CKPT_E_CORRUPT;
	}
	ckpt_shard_filename(name, sizeof(name), rank);
	if (idx.step != st->step || idx.rank != rank || idx.world_size != st->world_size ||
	    idx.shard_bytes != v->shard_bytes || idx.blob_bytes != v->blob_bytes ||
	    idx.blob_crc32c != v->blob_crc32c ||
	    fstatat(stepfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0 ||
	    (uint64_t)sb.st_size != v->shard_bytes) {
		snprintf(err, errlen, "rank %u's files in %s do not match the vote of node %u "
			 "(shard %llu bytes voted, index says %llu)", rank, job->name, v->node,
			 (unsigned long long)v->shard_bytes, (unsigned long long)idx.shard_bytes);
		ckpt_index_free(&idx);
		return -CKPT_E_CORRUPT;
	}
	ckpt_table_free(&v->table);
	v->table = idx.table;
	memset(&idx.table, 0, sizeof(idx.table));
	ckpt_index_free(&idx);
	return 0;
}

/*
 * The manifest may exist although the commit failed (the rename went
 * through, a later fsync did not): take it back, so that a step its ranks
 * are told FAILED never becomes visible as committed, at this start or
 * the next (the failed step's removal would otherwise find a manifest and
 * keep the step).
 */
static void commit_undo(int stepfd)
{
	if (unlinkat(stepfd, CKPT_MANIFEST_NAME, 0) == 0 || errno != ENOENT)
		store_fsync_dir(stepfd);
	unlinkat(stepfd, CKPT_MANIFEST_NAME ".tmp", 0);
}

static void commit_run(void *arg)
{
	struct commit *cm = arg;
	struct step *st = cm->st;
	struct job *job = st->job;
	struct ckpt_manifest m;
	char name[32];
	char *json = NULL;
	size_t len = 0;
	int stepfd = -1, r;

	r = ckpt_step_dirname(name, sizeof(name), st->step);
	if (r < 0) {
		snprintf(cm->err, sizeof(cm->err), "job %s: step %llu is not a step number",
			 job->name, (unsigned long long)st->step);
		goto out;
	}
	stepfd = openat(job->dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (stepfd < 0) {
		r = -errno;
		snprintf(cm->err, sizeof(cm->err), "opening %s/%s: %s", job->name, name,
			 strerror(-r));
		goto out;
	}
	/* Every shard's and index's directory entry is durable before the
	 * manifest can be. */
	r = store_fsync_dir(stepfd);
	if (r < 0) {
		snprintf(cm->err, sizeof(cm->err), "fsync %s/%s: %s", job->name, name,
			 strerror(-r));
		goto out;
	}
	memset(&m, 0, sizeof(m));
	snprintf(m.job, sizeof(m.job), "%s", job->name);
	m.step = st->step;
	m.world_size = st->world_size;
	m.chunk_bytes = (uint32_t)job->d->cfg->chunk_bytes;
	{
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		m.created_unix_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	}
	m.ranks = calloc(st->world_size, sizeof(*m.ranks));
	if (!m.ranks) {
		r = -ENOMEM;
		snprintf(cm->err, sizeof(cm->err), "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < st->world_size; i++) {
		struct rank_vote *v = &st->votes[i];
		if (v->remote && (r = remote_vote_check(stepfd, job, st, i, cm->err,
							 sizeof(cm->err))) < 0) {
			free(m.ranks);
			goto out;
		}
		m.ranks[i].rank = i;
		m.ranks[i].shard_bytes = v->shard_bytes;
		m.ranks[i].blob_bytes = v->blob_bytes;
		m.ranks[i].blob_crc32c = v->blob_crc32c;
		m.ranks[i].index_bytes = v->index_bytes;
		memcpy(m.ranks[i].index_sha256, v->index_sha256, 32);
		m.ranks[i].table = v->table;  /* borrowed */
		cm->bytes += v->shard_bytes + v->index_bytes;
	}
	r = ckpt_manifest_encode(&m, &json, &len);
	free(m.ranks);
	if (r < 0) {
		snprintf(cm->err, sizeof(cm->err), "encoding the manifest of %s/%s: %s",
			 job->name, name, strerror(-r));
		goto out;
	}
	r = store_write_file_durable(stepfd, CKPT_MANIFEST_NAME, json, len);
	free(json);
	if (r < 0) {
		snprintf(cm->err, sizeof(cm->err), "writing %s/%s/%s: %s", job->name, name,
			 CKPT_MANIFEST_NAME, strerror(-r));
		commit_undo(stepfd);
		goto out;
	}
	/* The step directory's own entry, then LATEST. */
	r = store_fsync_dir(job->dirfd);
	if (r < 0) {
		snprintf(cm->err, sizeof(cm->err), "fsync %s: %s", job->name, strerror(-r));
		commit_undo(stepfd);
		goto out;
	}
	pthread_mutex_lock(&latest_lock);
	uint64_t cur = 0;
	if (store_read_latest(job->dirfd, &cur) < 0 || cur < st->step) {
		int lr = store_write_latest(job->dirfd, st->step);
		if (lr < 0)
			log_warn("coord", "LATEST not updated job=%s step=%llu error=\"%s\"",
				 job->name, (unsigned long long)st->step, strerror(-lr));
	}
	pthread_mutex_unlock(&latest_lock);
	r = 0;
out:
	if (stepfd >= 0)
		close(stepfd);
	cm->result = r;
}

static void commit_done(void *arg)
{
	struct commit *cm = arg;
	struct step *st = cm->st;
	struct job *job = st->job;
	struct daemon *d = job->d;

	d->busy--;
	metrics_add(M_QUEUE_DEPTH, -1, "commit");
	if (cm->result < 0) {
		st->state = STEP_OPEN; /* so coord_fail applies */
		coord_fail(st, cm->result, "commit failed: %s", cm->err);
		free(cm);
		return;
	}
	st->state = STEP_COMMITTED;
	if (committed_insert(job, st->step) < 0)
		log_error("coord", "out of memory recording a commit job=%s", job->name);
	int64_t now = ckpt_mono_ns();
	double secs = (double)(now - st->opened_ns) / 1e9;
	log_info("coord", "committed job=%s step=%llu ranks=%u bytes=%llu seconds=%.3f "
		 "last_vote_seconds=%.6f", job->name, (unsigned long long)st->step, st->world_size,
		 (unsigned long long)cm->bytes, secs, (double)(now - st->last_vote_ns) / 1e9);
	if (d->peer)
		peer_send_committed(d, job->name, st->step, st->world_size);
	metrics_inc(M_SAVES_TOTAL, job->name, "committed");
	metrics_observe(M_TIME_TO_COMMITTED_SECONDS, secs, job->name);
	metrics_set(M_NEWEST_COMMITTED_STEP, (double)job_latest(job), job->name, "root");
	events_committed(job->name, st->step, st->world_size, secs, (int64_t)cm->bytes);
	notify_participants(st, CKPT_STATE_COMMITTED, 0, NULL);
	uploader_committed(d, job->name, st->step);
	step_unlink(st);
	step_free(st);
	free(cm);
	retention_apply(job);
	job_release(job);
}

void coord_vote(struct step *st, uint32_t rank, struct rank_vote *vote)
{
	struct daemon *d = st->job->d;

	if (st->state != STEP_OPEN || rank >= st->world_size || st->votes[rank].durable) {
		log_warn("coord", "vote ignored job=%s step=%llu rank=%u state=%d",
			 st->job->name, (unsigned long long)st->step, rank, st->state);
		ckpt_table_free(&vote->table);
		return;
	}
	st->votes[rank] = *vote;
	memset(vote, 0, sizeof(*vote));
	st->votes[rank].durable = true;
	st->votes_in++;
	st->last_vote_ns = ckpt_mono_ns();
	if (d->peer && !coord_is_leader(d)) {
		/* The leader counts; this node forwards its own ranks' votes. */
		if (!st->votes[rank].remote &&
		    peer_send_vote(d, st, rank, &st->votes[rank], false) < 0)
			coord_fail(st, -CKPT_E_ABORTED, "the leader (node 0) is not reachable: "
				   "step %llu cannot commit", (unsigned long long)st->step);
		return;
	}
	if (st->votes_in < st->world_size)
		return;

	struct commit *cm = calloc(1, sizeof(*cm));
	if (!cm) {
		coord_fail(st, -ENOMEM, "out of memory committing step %llu",
			   (unsigned long long)st->step);
		return;
	}
	cm->st = st;
	cm->started_ns = ckpt_mono_ns();
	st->state = STEP_COMMITTING;
	d->busy++;
	metrics_add(M_QUEUE_DEPTH, 1, "commit");
	if (workers_submit(d->workers, commit_run, commit_done, cm) < 0) {
		metrics_add(M_QUEUE_DEPTH, -1, "commit");
		d->busy--;
		st->state = STEP_OPEN;
		free(cm);
		coord_fail(st, -ENOMEM, "out of memory committing step %llu",
			   (unsigned long long)st->step);
	}
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

/* ---- The peer link's messages (multi-node groups) -------------------- */

/* A vote for a job this leader has not taken over yet waits for the
 * takeover (on a worker, as a HELLO does); a refused takeover is answered
 * with an ABORT that says why, so the voting node's step ends. */
struct vote_wait {
	struct daemon *d;
	uint32_t node;
	struct peer_msg m;
};

static void vote_job_ready(void *arg, struct job *job, int error, const char *reason)
{
	struct vote_wait *vw = arg;

	if (job) {
		coord_peer_vote(vw->d, vw->node, &vw->m);
	} else {
		log_warn("coord", "vote refused job=%s step=%llu node=%u error=\"%s\"", vw->m.job,
			 (unsigned long long)vw->m.step, vw->node,
			 reason ? reason : strerror(-error));
		peer_send_abort_to(vw->d, vw->node, vw->m.job, vw->m.step,
				   error < 0 ? error : -CKPT_E_REFUSED,
				   reason ? reason : "the leader cannot take the job over");
	}
	free(vw);
}

void coord_peer_vote(struct daemon *d, uint32_t node, const struct peer_msg *m)
{
	struct job *job = job_get(d, m->job, false);
	struct step *st;

	if (!job) {
		struct vote_wait *vw = malloc(sizeof(*vw));
		if (vw) {
			vw->d = d;
			vw->node = node;
			vw->m = *m;
			if (job_open(d, m->job, vote_job_ready, vw) == 0)
				return;
			free(vw);
		}
		log_error("coord", "out of memory opening job=%s for a vote of node %u", m->job,
			  node);
		return;
	}
	if (job_is_committed(job, m->step) || peer_recently_committed(d, job->name, m->step)) {
		/* A vote that crossed the commit, or a resend. */
		peer_send_committed_to(d, node, job->name, m->step, m->world_size);
		return;
	}
	st = step_find(job, m->step);
	if (st && st->state == STEP_FAILED) {
		peer_send_abort_to(d, node, job->name, m->step, st->error, st->reason);
		return;
	}
	if (!st && m->status == PEER_VOTE_AGAIN) {
		/* Asked for an outcome it missed: the step is neither committed
		 * nor open here, so it ended without a commit (its record is
		 * gone); a resend never opens a step. */
		peer_send_abort_to(d, node, job->name, m->step, -CKPT_E_ABORTED,
				   "the leader (node 0) has no open step of this number: it "
				   "failed, or its votes never arrived");
		return;
	}
	if (!st) {
		st = step_get(job, m->step, m->world_size);
		if (!st) {
			log_error("coord", "out of memory for a vote job=%s step=%llu", job->name,
				  (unsigned long long)m->step);
			return;
		}
	}
	if (st->state != STEP_OPEN)
		return; /* committing: every vote is in already */
	if (st->world_size != m->world_size) {
		metrics_inc(M_PEER_REJECTED_TOTAL, "conflict");
		log_warn("peer", "message rejected reason=conflict detail=\"VOTE of node %u for a "
			 "world of %u ranks, step %llu of job %s has %u\"", node, m->world_size,
			 (unsigned long long)m->step, job->name, st->world_size);
		coord_fail(st, -CKPT_E_ABORTED, "node %u voted for a world of %u ranks, step %llu "
			   "has %u", node, m->world_size, (unsigned long long)m->step,
			   st->world_size);
		return;
	}
	struct rank_vote *have = &st->votes[m->rank];
	if (have->durable) {
		if (have->node == node && memcmp(have->index_sha256, m->index_sha256, 32) == 0)
			return; /* the same vote again */
		metrics_inc(M_PEER_REJECTED_TOTAL, "conflict");
		log_warn("peer", "message rejected reason=conflict detail=\"VOTE of node %u for rank "
			 "%u of step %llu of job %s, which node %u voted with another shard\"", node,
			 m->rank, (unsigned long long)m->step, job->name, have->node);
		coord_fail(st, -CKPT_E_ABORTED, "rank %u of step %llu voted twice, by node %u and "
			   "by node %u, with different shards", m->rank, (unsigned long long)m->step,
			   have->node, node);
		return;
	}
	struct rank_vote v;
	memset(&v, 0, sizeof(v));
	v.shard_bytes = m->shard_bytes;
	v.index_bytes = m->index_bytes;
	memcpy(v.index_sha256, m->index_sha256, 32);
	v.blob_bytes = m->blob_bytes;
	v.blob_crc32c = m->blob_crc32c;
	v.node = node;
	v.remote = true;
	coord_vote(st, m->rank, &v);
}

/* Step `step` of a job is committed (the leader said so, or its manifest is
 * on the root): tell the ranks that wait for it. */
static void committed_elsewhere(struct job *job, uint64_t step, const char *how)
{
	struct step *st;

	if (job_is_committed(job, step))
		return;
	if (committed_insert(job, step) < 0) {
		log_error("coord", "out of memory recording a commit job=%s", job->name);
		return;
	}
	metrics_set(M_NEWEST_COMMITTED_STEP, (double)job_latest(job), job->name, "root");
	st = step_find(job, step);
	if (st) {
		double secs = (double)(ckpt_mono_ns() - st->opened_ns) / 1e9;
		log_info("coord", "committed %s job=%s step=%llu ranks=%u seconds=%.3f", how,
			 job->name, (unsigned long long)step, st->world_size, secs);
		metrics_inc(M_SAVES_TOTAL, job->name, "committed");
		metrics_observe(M_TIME_TO_COMMITTED_SECONDS, secs, job->name);
		notify_participants(st, CKPT_STATE_COMMITTED, 0, NULL);
		if (st->inflight == 0) {
			step_unlink(st);
			step_free(st);
		} else {
			st->state = STEP_COMMITTED;
		}
	}
	retention_apply(job);
	job_release(job);
}

void coord_peer_committed(struct daemon *d, const struct peer_msg *m)
{
	struct job *job = job_get(d, m->job, false);

	if (job)
		committed_elsewhere(job, m->step, "by the leader");
}

/*
 * An ABORT only ever concerns a step still open, of a job this daemon
 * manages: it never creates a job, never touches a committed (or
 * committing) step, and is ignored for a step this daemon has no record of,
 * with one exception: the leader records a failed step for an ABORT from
 * a node whose rank failed before any vote of the step reached the leader,
 * so that the other nodes' votes get an answer. Such a step is newer than
 * every committed one (an ABORT for an older step is stale).
 */
void coord_peer_abort(struct daemon *d, uint32_t node, const struct peer_msg *m)
{
	bool leader = coord_is_leader(d);
	struct job *job = job_get(d, m->job, false);
	struct step *st;

	if (!job || job_is_committed(job, m->step) ||
	    (leader && peer_recently_committed(d, job->name, m->step)))
		return;
	st = step_find(job, m->step);
	if (!st) {
		uint64_t latest = job_latest(job);
		if (!leader)
			return;
		if (latest != CKPT_NO_STEP && m->step <= latest) {
			log_info("coord", "ABORT ignored job=%s step=%llu node=%u: no such open step, "
				 "and step %llu is committed", job->name, (unsigned long long)m->step,
				 node, (unsigned long long)latest);
			return;
		}
		/* Recorded as failed, so later votes for it are answered. */
		st = step_get(job, m->step, m->world_size ? m->world_size : 1);
		if (!st)
			return;
	}
	if (st->state != STEP_OPEN || st->resolving)
		return;
	st->abort_from_peer = !leader;
	coord_fail(st, m->status < 0 ? m->status : -CKPT_E_ABORTED, "%s (node %u)",
		   m->reason[0] ? m->reason : "aborted", node);
}

static void resolve_start(struct step *st, const char *why);

size_t job_open_steps(struct job *job, struct step ***out)
{
	size_t n = 0, i = 0;

	*out = NULL;
	for (struct step *st = job->steps; st; st = st->next)
		n += st->state == STEP_OPEN;
	if (n == 0)
		return 0;
	*out = calloc(n, sizeof(**out));
	if (!*out) {
		log_error("coord", "out of memory failing the steps of job=%s", job->name);
		return 0;
	}
	for (struct step *st = job->steps; st && i < n; st = st->next)
		if (st->state == STEP_OPEN)
			(*out)[i++] = st;
	return n;
}

void coord_peer_lost(struct daemon *d, uint32_t node, const char *why)
{
	bool leader = coord_is_leader(d);

	/* The leader: no step open now can get the lost node's votes.
	 * Another node: only the leader's loss matters to it. */
	if (!leader && node != 0)
		return;
	for (struct job *job = d->jobs; job; job = job->next) {
		struct step **open = NULL;
		size_t n = job_open_steps(job, &open);
		for (size_t i = 0; i < n; i++) {
			if (!leader && open[i]->inflight == 0 && open[i]->votes_in > 0) {
				/* Every vote of this node went out: the leader may
				 * have committed before it was lost. */
				resolve_start(open[i], why);
				continue;
			}
			open[i]->abort_from_peer = !leader;
			coord_fail(open[i], -CKPT_E_ABORTED, "node %u lost (%s): step %llu cannot "
				   "commit", node, why, (unsigned long long)open[i]->step);
		}
		free(open);
	}
}

/*
 * Non-leader: the leader was lost while a step had all of this node's
 * votes. Whether it committed is on the shared root: its MANIFEST.json
 * exists (the leader writes it durably before it tells anyone). Looked up
 * on a worker; the step stays open meanwhile.
 */
struct resolve {
	struct daemon *d;
	char job[CKPT_JOB_NAME_MAX + 1];
	uint64_t step;
	int dirfd;                 /* the job directory's, duplicated */
	bool committed;
	char why[96];
};

static void resolve_run(void *arg)
{
	struct resolve *rv = arg;
	char name[32], path[64];
	struct stat sb;

	if (ckpt_step_dirname(name, sizeof(name), rv->step) < 0)
		return;
	snprintf(path, sizeof(path), "%s/%s", name, CKPT_MANIFEST_NAME);
	rv->committed = fstatat(rv->dirfd, path, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
			S_ISREG(sb.st_mode);
}

static void resolve_done(void *arg)
{
	struct resolve *rv = arg;
	struct daemon *d = rv->d;
	struct job *job = job_get(d, rv->job, false);
	struct step *st = job ? step_find(job, rv->step) : NULL;

	d->busy--;
	close(rv->dirfd);
	if (st)
		st->resolving = false;
	if (st && st->state == STEP_OPEN) {
		if (rv->committed) {
			log_warn("coord", "leader lost after it committed job=%s step=%llu: its "
				 "manifest is on the root", job->name, (unsigned long long)rv->step);
			committed_elsewhere(job, rv->step, "(manifest found on the root)");
		} else {
			st->abort_from_peer = true;
			coord_fail(st, -CKPT_E_ABORTED, "node 0 lost (%s): step %llu cannot commit "
				   "(no manifest on the root)", rv->why, (unsigned long long)rv->step);
		}
	}
	free(rv);
}

static void resolve_start(struct step *st, const char *why)
{
	struct daemon *d = st->job->d;
	struct resolve *rv;

	if (st->resolving)
		return;
	rv = calloc(1, sizeof(*rv));
	if (rv) {
		rv->d = d;
		snprintf(rv->job, sizeof(rv->job), "%s", st->job->name);
		rv->step = st->step;
		snprintf(rv->why, sizeof(rv->why), "%s", why);
		rv->dirfd = fcntl(st->job->dirfd, F_DUPFD_CLOEXEC, 0);
	}
	if (!rv || rv->dirfd < 0 || workers_submit(d->workers, resolve_run, resolve_done, rv) < 0) {
		if (rv && rv->dirfd >= 0)
			close(rv->dirfd);
		free(rv);
		st->abort_from_peer = true;
		coord_fail(st, -CKPT_E_ABORTED, "node 0 lost (%s): step %llu cannot commit",
			   why, (unsigned long long)st->step);
		return;
	}
	st->resolving = true;
	d->busy++;
}

/* Leader: a step that has had no vote for step_timeout_ms fails. */
static void leader_tick(struct daemon *d, int64_t now)
{
	int64_t limit = (int64_t)d->cfg->step_timeout_ms * 1000000;

	if (limit == 0)
		return;
	for (struct job *job = d->jobs; job; job = job->next) {
		struct step *stale = NULL;
		for (struct step *st = job->steps; st && !stale; st = st->next) {
			int64_t since = st->last_vote_ns > st->opened_ns ? st->last_vote_ns
									 : st->opened_ns;
			if (st->state == STEP_OPEN && st->inflight == 0 && now - since >= limit)
				stale = st;
		}
		if (!stale)
			continue;
		/* One per job and tick: failing may prune the list. */
		char missing[96] = "";
		size_t len = 0;
		unsigned n = 0;
		for (uint32_t r = 0; r < stale->world_size; r++) {
			if (stale->votes[r].durable)
				continue;
			if (n++ < 8 && len < sizeof(missing))
				len += (size_t)snprintf(missing + len, sizeof(missing) - len, "%s%u",
							len ? ", " : "", r);
		}
		coord_fail(stale, -CKPT_E_ABORTED, "no vote for step %llu within step_timeout_ms=%u: "
			   "%u rank(s) never saved it (%s%s)", (unsigned long long)stale->step,
			   d->cfg->step_timeout_ms, n, missing, n > 8 ? ", ..." : "");
	}
}

/* A daemon without a group: the same bound on a step that waits for a
 * rank that never saves it (a rank that hangs, or a launch that never
 * started it), so that every wait ends. */
int coord_poll_ms(const struct daemon *d)
{
	if (d->peer || d->cfg->step_timeout_ms == 0)
		return -1;
	for (const struct job *job = d->jobs; job; job = job->next)
		for (const struct step *st = job->steps; st; st = st->next)
			if (st->state == STEP_OPEN)
				return 1000;
	return -1;
}

void coord_tick(struct daemon *d, int64_t now)
{
	if (!d->peer)
		leader_tick(d, now);
}

/*
 * Non-leader: an outcome the peer link dropped (a full queue, a failed
 * send) must not leave a step open forever. A step with every vote of this
 * node out and no outcome for `after_ns` sends its votes again, marked as a
 * resend: the leader answers a committed or ended step with its outcome
 * and ignores a duplicate of an open one. A step this node failed itself
 * sends its ABORT again, a few times, in case the first was dropped.
 */
void coord_peer_tick(struct daemon *d, int64_t now, int64_t after_ns)
{
	if (coord_is_leader(d)) {
		leader_tick(d, now);
		return;
	}
	for (struct job *job = d->jobs; job; job = job->next) {
		for (struct step *st = job->steps; st; st = st->next) {
			int64_t since = st->asked_ns > st->last_vote_ns ? st->asked_ns
									 : st->last_vote_ns;
			if (now - since < after_ns)
				continue;
			if (st->state == STEP_OPEN && !st->resolving && st->inflight == 0 &&
			    st->votes_in > 0) {
				st->asked_ns = now;
				log_info("coord", "no outcome yet, votes sent again job=%s step=%llu "
					 "waited_seconds=%.3f", job->name, (unsigned long long)st->step,
					 (double)(now - since) / 1e9);
				for (uint32_t r = 0; r < st->world_size; r++)
					if (st->votes[r].durable && !st->votes[r].remote)
						peer_send_vote(d, st, r, &st->votes[r], true);
			} else if (st->state == STEP_FAILED && !st->abort_from_peer &&
				   st->abort_resends < 3) {
				st->asked_ns = now;
				st->abort_resends++;
				peer_send_abort_to(d, 0, job->name, st->step, st->error, st->reason);
			}
		}
	}
}
