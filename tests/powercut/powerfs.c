/* SPDX-License-Identifier: MIT */
/*
 * ckpt-powerfs: a FUSE 3 file system that loses what a power cut loses.
 *
 * Usage
 *   ckpt-powerfs [options] STORE MOUNTPOINT      serve (stays in the foreground)
 *     --ctl SOCK                 control socket (default STORE/ctl.sock)
 *     --ignore-fsync-of GLOB     an fsync/fdatasync of a file whose name matches
 *                                GLOB (fnmatch, last path component) returns 0
 *                                and makes nothing durable (repeatable)
 *     --ignore-fsyncdir-of GLOB  the same for fsync of a directory
 *     --direct-read-einval       open(O_DIRECT) works, but every read through
 *                                a descriptor opened with O_DIRECT fails with
 *                                EINVAL (buffered reads work)
 *     --per-process-dirsync      each process is a client with its own
 *                                unsynced directory changes (a node of a
 *                                parallel file system): an fsync of a
 *                                directory makes durable only the changes
 *                                to its entries that the fsyncing process
 *                                made (create, mkdir, rename, unlink, ...),
 *                                in their order; the others' stay volatile
 *     --debug                    libfuse's request trace on stderr
 *   ckpt-powerfs ctl SOCK COMMAND [ARG]          talk to a running one
 *     cut        power fails now: from this instant every operation fails
 *                with EIO (nothing can be acknowledged after it)
 *     arm N      cut at the N-th mutating operation from now (write, truncate,
 *                create, mknod, mkdir, unlink, rmdir, rename, link, symlink,
 *                fsync, fsyncdir); that operation already fails
 *     disarm     forget an armed cut
 *     revert     after a cut (and after the caller killed every process using
 *                the mount): throw away everything not durable, serve again
 *     sync       make everything durable now, as syncfs(2) would (for a
 *                test's setup: with --per-process-dirsync the shell's
 *                mkdir and its sync(1) are different processes)
 *     status     one line: state, counters, cut_at (the operation a cut
 *                landed on; "after-OP" for a timed cut after OP started)
 *   The reply is one line starting with "ok" (exit 0) or "err" (exit 1).
 *   The control socket appears once the file system is mounted.
 *   Stop it with SIGTERM (it unmounts) or `umount MOUNTPOINT`.
 *
 * The model
 *   The namespace (directories, names, symlinks, link counts) lives in this
 *   process's memory; each regular file's bytes live in STORE/data/<ino>.
 *   STORE is private to the file system and emptied at start: the mounted
 *   tree starts empty. Two states are kept, the live one that every operation
 *   sees and the durable one that survives a cut:
 *   - A directory's durable entries are a snapshot of its live entries taken
 *     by its last fsync (fsyncdir). Creating, removing or renaming a name is
 *     durable only once every directory involved is fsync'ed: the snapshot is
 *     per directory, so a rename across directories with only the target
 *     fsync'ed leaves both names, with only the source fsync'ed neither.
 *   - A regular file's durable bytes (and size) are its live bytes as of its
 *     last fsync or fdatasync. The first change after that (write, truncate,
 *     O_TRUNC) saves an undo copy, STORE/undo/<ino>, of the durable bytes
 *     (a new file's durable content is empty: no copy); fsync drops the undo
 *     copy. So fsync costs O(1) and a GiB file that is written once and
 *     fsync'ed once is never copied; rewriting a durable file copies it once.
 *   - Strict POSIX: fsync of a file makes its bytes durable, not its name;
 *     only the parent directory's fsync makes the name durable. A durable
 *     name whose file was never fsync'ed comes back as an empty file.
 *   - Attributes (mode, owner, times) are not modelled: they keep their live
 *     values across a revert.
 *   A cut sets one flag: every request that starts after it, and every reply
 *   of success that would go out after it, gets EIO; fsync decides durable
 *   vs refused under the same lock that the revert takes. revert then
 *   rebuilds the live state from the durable one: every directory reachable
 *   from the root through durable entries gets its durable entries back,
 *   every file with an undo copy gets it back (a rename of the copy, O(1)),
 *   everything unreachable is dropped; the kernel's caches of every inode
 *   are invalidated. Descriptors opened before a revert keep failing (EIO).
 *   Byte-range and OFD locks are left to the kernel (no lock operations).
 */
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_PATTERNS 8

struct node;

struct dent {
	char *name;
	struct node *child;
};

struct dlist {
	struct dent *v;
	size_t n, cap;
};

/* --per-process-dirsync: a change to a directory's entries, not yet made
 * durable by an fsync of that directory by the process that made it. */
struct pend {
	struct pend *next;
	char *name;
	struct node *child; /* NULL: the name was removed */
	pid_t client;
};

struct node {
	uint64_t ino;
	mode_t mode;
	uid_t uid;
	gid_t gid;
	dev_t rdev;
	struct timespec atime, mtime, ctime; /* not regular files */
	char *target;        /* symlink */
	struct dlist live;   /* directories: live entries */
	struct dlist dur;    /* directories: durable entries */
	struct node *parent; /* live parent (last one for hard links) */
	char *name;          /* last live name, for the ignore patterns */
	uint32_t nlink;      /* live entries naming it */
	uint32_t dur_refs;   /* durable entries naming it */
	uint32_t pend_refs;  /* pending changes naming it */
	struct pend *pend, **pend_tail; /* directories, --per-process-dirsync */
	uint64_t nlookup;    /* the kernel's references */
	uint32_t opens;
	int fd;              /* regular files: live bytes */
	bool undo;           /* durable bytes are saved (or empty): see above */
	bool undo_empty;     /* ... and they are empty: no undo file */
	bool dead;           /* dropped by a revert; kept for the kernel */
	pthread_rwlock_t io; /* writes shared, fsync exclusive */
};

struct handle {
	uint64_t epoch;
	int flags;
	/* directories: the listing being read */
	struct dirsnap {
		char *name;
		uint64_t ino;
		mode_t mode;
	} *snap;
	size_t nsnap;
};

static struct {
	int datafd, undofd;
	char store[PATH_MAX];
	const char *ignore_fsync[MAX_PATTERNS];
	int nignore_fsync;
	const char *ignore_fsyncdir[MAX_PATTERNS];
	int nignore_fsyncdir;
	bool direct_read_einval;
	bool per_process;       /* --per-process-dirsync */
	struct fuse_session *se;

	pthread_rwlock_t state; /* ops shared, revert exclusive */
	pthread_mutex_t meta;   /* the namespace and the undo flags */
	struct node **tab;
	size_t tabcap;
	uint64_t next_ino;
	atomic_bool cut;
	atomic_long armed;      /* >0: cut when it reaches 0 */
	atomic_ulong epoch;
	/* The last mutating operation started, and the one at the cut. */
	_Atomic(const char *) last_op, cut_op;
	char cut_where[64];
	atomic_ulong n_ops, n_mut, n_fsync, n_fsyncdir, n_ignored, n_eio, n_cuts, n_reverts,
		n_undo_copies;
} g = { .state = PTHREAD_RWLOCK_INITIALIZER, .meta = PTHREAD_MUTEX_INITIALIZER };

/* ---- small helpers ------------------------------------------------------ */

static void die(const char *what)
{
	fprintf(stderr, "ckpt-powerfs: %s: %s\n", what, strerror(errno));
	exit(1);
}

static bool is_cut(void)
{
	return atomic_load(&g.cut);
}

static void do_cut(void)
{
	if (!atomic_exchange(&g.cut, true))
		atomic_fetch_add(&g.n_cuts, 1);
}

/* Every request starts here: EIO after a cut. A mutating one counts
 * towards an armed cut (and the one that fires it fails too). */
static bool enter(fuse_req_t req, const char *mutating)
{
	atomic_fetch_add(&g.n_ops, 1);
	if (mutating && !is_cut()) {
		atomic_fetch_add(&g.n_mut, 1);
		atomic_store(&g.last_op, mutating);
		if (atomic_load(&g.armed) > 0 && atomic_fetch_sub(&g.armed, 1) == 1) {
			/* The operation that fires it names the cut point. */
			atomic_store(&g.cut_op, mutating);
			do_cut();
		}
	}
	if (is_cut()) {
		atomic_fetch_add(&g.n_eio, 1);
		fuse_reply_err(req, EIO);
		return false;
	}
	pthread_rwlock_rdlock(&g.state);
	return true;
}

static void leave(void)
{
	pthread_rwlock_unlock(&g.state);
}

/* A reply of success only before the cut. */
static bool cut_now(fuse_req_t req)
{
	if (!is_cut())
		return false;
	atomic_fetch_add(&g.n_eio, 1);
	fuse_reply_err(req, EIO);
	return true;
}

static void reply_err(fuse_req_t req, int err)
{
	if (err == 0 && cut_now(req))
		return;
	fuse_reply_err(req, err);
}

static struct node *get_node(fuse_ino_t ino)
{
	if (ino >= g.tabcap || !g.tab[ino] || g.tab[ino]->dead)
		return NULL;
	return g.tab[ino];
}

static void dl_free(struct dlist *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].name);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static int dl_add(struct dlist *l, const char *name, struct node *child)
{
	char *s = strdup(name);

	if (!s)
		return -ENOMEM;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 8;
		struct dent *v = realloc(l->v, cap * sizeof(*v));

		if (!v) {
			free(s);
			return -ENOMEM;
		}
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n].name = s;
	l->v[l->n].child = child;
	l->n++;
	return 0;
}

static ssize_t dl_find(const struct dlist *l, const char *name)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->v[i].name, name) == 0)
			return (ssize_t)i;
	return -1;
}

static void dl_del(struct dlist *l, size_t i)
{
	free(l->v[i].name);
	l->v[i] = l->v[--l->n];
}

static int dl_copy(struct dlist *dst, const struct dlist *src)
{
	struct dlist t = { 0 };

	for (size_t i = 0; i < src->n; i++)
		if (dl_add(&t, src->v[i].name, src->v[i].child) < 0) {
			dl_free(&t);
			return -ENOMEM;
		}
	dl_free(dst);
	*dst = t;
	return 0;
}

static void ino_name(char *buf, size_t len, uint64_t ino)
{
	snprintf(buf, len, "%" PRIu64, ino);
}

static bool matches(const char *const *pats, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (name && fnmatch(pats[i], name, 0) == 0)
			return true;
	return false;
}

/* ---- nodes -------------------------------------------------------------- */

static struct node *node_new(mode_t mode, const struct fuse_ctx *ctx)
{
	struct node *n = calloc(1, sizeof(*n));
	struct timespec now;

	if (!n)
		return NULL;
	if (g.next_ino >= g.tabcap) {
		size_t cap = g.tabcap ? g.tabcap * 2 : 1024;
		struct node **t = realloc(g.tab, cap * sizeof(*t));

		if (!t) {
			free(n);
			return NULL;
		}
		memset(t + g.tabcap, 0, (cap - g.tabcap) * sizeof(*t));
		g.tab = t;
		g.tabcap = cap;
	}
	n->ino = g.next_ino;
	n->mode = mode;
	n->uid = ctx ? ctx->uid : 0;
	n->gid = ctx ? ctx->gid : 0;
	n->fd = -1;
	n->pend_tail = &n->pend;
	clock_gettime(CLOCK_REALTIME, &now);
	n->atime = n->mtime = n->ctime = now;
	pthread_rwlock_init(&n->io, NULL);
	if (S_ISREG(mode)) {
		char nm[32];

		ino_name(nm, sizeof(nm), n->ino);
		n->fd = openat(g.datafd, nm, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (n->fd < 0) {
			pthread_rwlock_destroy(&n->io);
			free(n);
			return NULL;
		}
		/* Its durable content is empty until its first fsync. */
		n->undo = true;
		n->undo_empty = true;
	}
	g.tab[g.next_ino++] = n;
	return n;
}

static void drop_undo_file(struct node *n)
{
	char nm[32];

	if (n->undo && !n->undo_empty) {
		ino_name(nm, sizeof(nm), n->ino);
		unlinkat(g.undofd, nm, 0);
	}
	n->undo = false;
	n->undo_empty = false;
}

/* Give back a node's data and its durable references. */
static void node_release_data(struct node *n)
{
	char nm[32];

	if (n->fd >= 0) {
		close(n->fd);
		n->fd = -1;
		ino_name(nm, sizeof(nm), n->ino);
		unlinkat(g.datafd, nm, 0);
	}
	drop_undo_file(n);
	dl_free(&n->live);
	free(n->target);
	n->target = NULL;
	free(n->name);
	n->name = NULL;
}

static void maybe_free(struct node *n);

static void dur_unref_all(struct node *n)
{
	struct dlist l = n->dur;

	memset(&n->dur, 0, sizeof(n->dur));
	for (size_t i = 0; i < l.n; i++) {
		l.v[i].child->dur_refs--;
		maybe_free(l.v[i].child);
	}
	dl_free(&l);
}

static void pend_free_all(struct node *d, bool unref)
{
	struct pend *p = d->pend, *next;

	d->pend = NULL;
	d->pend_tail = &d->pend;
	for (; p; p = next) {
		next = p->next;
		if (p->child) {
			p->child->pend_refs--;
			if (unref)
				maybe_free(p->child);
		}
		free(p->name);
		free(p);
	}
}

static void node_destroy(struct node *n)
{
	g.tab[n->ino] = NULL;
	pend_free_all(n, true);
	node_release_data(n);
	dl_free(&n->dur);
	pthread_rwlock_destroy(&n->io);
	free(n);
}

/* Free a node that nothing (live, durable, kernel, open file) refers to. */
static void maybe_free(struct node *n)
{
	if (n->ino == FUSE_ROOT_ID || n->nlookup || n->opens)
		return;
	if (!n->dead && (n->nlink || n->dur_refs || n->pend_refs))
		return;
	dur_unref_all(n);
	node_destroy(n);
}

static void fill_stat(const struct node *n, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	if (n->fd >= 0)
		fstat(n->fd, st);
	st->st_ino = n->ino;
	st->st_mode = n->mode;
	st->st_uid = n->uid;
	st->st_gid = n->gid;
	st->st_rdev = n->rdev;
	st->st_blksize = 4096;
	if (S_ISDIR(n->mode)) {
		nlink_t k = 2;

		for (size_t i = 0; i < n->live.n; i++)
			if (S_ISDIR(n->live.v[i].child->mode))
				k++;
		st->st_nlink = k;
		st->st_size = 4096;
	} else {
		st->st_nlink = n->nlink;
	}
	if (S_ISLNK(n->mode))
		st->st_size = (off_t)strlen(n->target);
	if (n->fd < 0) {
		st->st_atim = n->atime;
		st->st_mtim = n->mtime;
		st->st_ctim = n->ctime;
	}
}

static void fill_entry(struct node *n, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = n->ino;
	e->generation = 1;
	fill_stat(n, &e->attr);
	e->attr_timeout = 0;
	e->entry_timeout = 0;
	n->nlookup++;
}

static void touch_dir(struct node *d)
{
	clock_gettime(CLOCK_REALTIME, &d->mtime);
	d->ctime = d->mtime;
}

static void set_name(struct node *n, struct node *parent, const char *name)
{
	char *s = strdup(name);

	if (s) {
		free(n->name);
		n->name = s;
	}
	n->parent = parent;
}

/* Save the durable bytes before the first change since the last fsync.
 * Called with g.meta held and n->io held shared. */
static int ensure_undo(struct node *n)
{
	char nm[32];
	int ufd, r = 0;
	off_t off = 0;
	struct stat st;

	if (n->undo)
		return 0;
	ino_name(nm, sizeof(nm), n->ino);
	ufd = openat(g.undofd, nm, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (ufd < 0)
		return -errno;
	if (fstat(n->fd, &st) < 0)
		r = -errno;
	while (r == 0 && off < st.st_size) {
		loff_t in = off;
		ssize_t k = copy_file_range(n->fd, &in, ufd, NULL, (size_t)(st.st_size - off), 0);

		if (k < 0) {
			r = -errno;
		} else if (k == 0) {
			break;
		}
		off += k > 0 ? k : 0;
	}
	if (r == 0 && ftruncate(ufd, st.st_size) < 0)
		r = -errno;
	close(ufd);
	if (r < 0) {
		unlinkat(g.undofd, nm, 0);
		return r;
	}
	atomic_fetch_add(&g.n_undo_copies, 1);
	n->undo = true;
	n->undo_empty = false;
	return 0;
}

/* The process (thread group) behind a request: one "client" with its own
 * unsynced directory changes under --per-process-dirsync. */
static pid_t client_of(fuse_req_t req)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	char path[64], line[128];
	pid_t tgid = ctx ? ctx->pid : 0;
	FILE *f;

	if (tgid <= 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)tgid);
	f = fopen(path, "re");
	if (!f)
		return tgid;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "Tgid:", 5) == 0) {
			tgid = (pid_t)atoi(line + 5);
			break;
		}
	fclose(f);
	return tgid;
}

/* Record a change of d's entries by `client` (g.meta held). */
static void pend_add(struct node *d, pid_t client, const char *name, struct node *child)
{
	struct pend *p;

	if (!g.per_process)
		return;
	p = calloc(1, sizeof(*p));
	if (!p || !(p->name = strdup(name))) {
		free(p);
		return; /* out of memory: the change stays volatile */
	}
	p->child = child;
	p->client = client;
	if (child)
		child->pend_refs++;
	*d->pend_tail = p;
	d->pend_tail = &p->next;
}

/* name -> child (NULL: none) in d's durable entries (g.meta held). */
static void dur_set(struct node *d, const char *name, struct node *child)
{
	ssize_t i = dl_find(&d->dur, name);
	struct node *old = i >= 0 ? d->dur.v[i].child : NULL;

	if (old == child)
		return;
	if (child) {
		if (i >= 0)
			d->dur.v[i].child = child;
		else if (dl_add(&d->dur, name, child) < 0)
			return;
		child->dur_refs++;
	} else {
		dl_del(&d->dur, (size_t)i);
	}
	if (old) {
		old->dur_refs--;
		maybe_free(old);
	}
}

/* fsync of d by `client` under --per-process-dirsync: that client's changes,
 * in order, become durable; the others' stay pending (g.meta held). */
static void pend_apply(struct node *d, pid_t client)
{
	struct pend **pp = &d->pend, *p;

	while ((p = *pp)) {
		if (p->client != client) {
			pp = &p->next;
			continue;
		}
		*pp = p->next;
		if (p->child)
			p->child->pend_refs--;
		dur_set(d, p->name, p->child);
		if (p->child)
			maybe_free(p->child);
		free(p->name);
		free(p);
	}
	d->pend_tail = pp;
	while (*d->pend_tail)
		d->pend_tail = &(*d->pend_tail)->next;
}

/* Everything durable now, as syncfs(2) would (ctl "sync"). */
static int sync_all(char *msg, size_t msglen)
{
	size_t dirs = 0, files = 0;

	pthread_rwlock_wrlock(&g.state);
	pthread_mutex_lock(&g.meta);
	if (is_cut()) {
		pthread_mutex_unlock(&g.meta);
		pthread_rwlock_unlock(&g.state);
		snprintf(msg, msglen, "err the power is out");
		return -EIO;
	}
	for (size_t i = 1; i < g.next_ino; i++) {
		struct node *n = g.tab[i];

		if (!n || n->dead)
			continue;
		if (S_ISDIR(n->mode)) {
			pend_free_all(n, false);
			for (size_t k = 0; k < n->dur.n; k++)
				n->dur.v[k].child->dur_refs--;
			dl_copy(&n->dur, &n->live);
			for (size_t k = 0; k < n->dur.n; k++)
				n->dur.v[k].child->dur_refs++;
			dirs++;
		} else if (S_ISREG(n->mode) && n->undo) {
			drop_undo_file(n);
			files++;
		}
	}
	/* Nodes that only a pending change or an old durable entry held. */
	for (size_t i = 1; i < g.next_ino; i++)
		if (g.tab[i])
			maybe_free(g.tab[i]);
	pthread_mutex_unlock(&g.meta);
	pthread_rwlock_unlock(&g.state);
	snprintf(msg, msglen, "ok synced dirs=%zu files=%zu", dirs, files);
	return 0;
}

/* ---- revert -------------------------------------------------------------- */

static void mark_reach(struct node *d, bool *reached)
{
	reached[d->ino] = true;
	if (!S_ISDIR(d->mode))
		return;
	for (size_t i = 0; i < d->dur.n; i++) {
		struct node *c = d->dur.v[i].child;

		if (!reached[c->ino]) {
			set_name(c, d, d->dur.v[i].name);
			mark_reach(c, reached);
		}
	}
}

static int revert(char *msg, size_t msglen)
{
	bool *reached;
	size_t restored = 0, dropped = 0, kept = 0;
	uint64_t *inval = NULL;
	size_t ninval = 0;
	int r = 0;

	pthread_rwlock_wrlock(&g.state);
	pthread_mutex_lock(&g.meta);
	if (!is_cut()) {
		pthread_mutex_unlock(&g.meta);
		pthread_rwlock_unlock(&g.state);
		snprintf(msg, msglen, "err not cut");
		return -EINVAL;
	}
	reached = calloc(g.tabcap, sizeof(*reached));
	inval = calloc(g.tabcap, sizeof(*inval));
	if (!reached || !inval) {
		free(reached);
		free(inval);
		pthread_mutex_unlock(&g.meta);
		pthread_rwlock_unlock(&g.state);
		snprintf(msg, msglen, "err out of memory");
		return -ENOMEM;
	}
	/* Every pending change is lost. Each one gives back the reference it
	 * holds on its child, so all counts end at zero. Zeroing a count while
	 * a later directory's list still names that node would make it wrap
	 * and free the node under a pending change made after the revert. */
	for (size_t i = 1; i < g.next_ino; i++)
		if (g.tab[i])
			pend_free_all(g.tab[i], false);
	for (size_t i = 1; i < g.next_ino; i++)
		if (g.tab[i] && g.tab[i]->pend_refs) {
			fprintf(stderr, "ckpt-powerfs: inode %zu still has %u pending references after the revert\n",
				i, g.tab[i]->pend_refs);
			abort();
		}
	mark_reach(g.tab[FUSE_ROOT_ID], reached);
	/* Unreachable nodes first: they give up their data and entries. */
	for (size_t i = 1; i < g.next_ino; i++) {
		struct node *n = g.tab[i];

		if (!n || reached[i])
			continue;
		if (!n->dead) {
			dropped++;
			node_release_data(n);
			dl_free(&n->dur);
			n->dead = true;
		}
		if (n->nlookup)
			inval[ninval++] = n->ino;
		if (!n->nlookup && !n->opens)
			node_destroy(n);
	}
	for (size_t i = 1; i < g.next_ino; i++) {
		struct node *n = g.tab[i];

		if (!n || !reached[i])
			continue;
		kept++;
		n->nlink = 0;
		n->dur_refs = 0;
		if (S_ISDIR(n->mode) && dl_copy(&n->live, &n->dur) < 0)
			r = -ENOMEM;
		if (S_ISREG(n->mode) && n->undo) {
			char nm[32];

			ino_name(nm, sizeof(nm), n->ino);
			if (n->undo_empty) {
				if (ftruncate(n->fd, 0) < 0)
					r = -errno;
			} else {
				int fd;

				if (renameat(g.undofd, nm, g.datafd, nm) < 0)
					r = -errno;
				fd = openat(g.datafd, nm, O_RDWR | O_CLOEXEC);
				if (fd < 0) {
					r = -errno;
				} else {
					close(n->fd);
					n->fd = fd;
				}
			}
			n->undo = false;
			n->undo_empty = false;
			restored++;
		}
		if (n->nlookup)
			inval[ninval++] = n->ino;
	}
	for (size_t i = 1; i < g.next_ino; i++) {
		struct node *n = g.tab[i];

		if (!n || !reached[i] || !S_ISDIR(n->mode))
			continue;
		for (size_t k = 0; k < n->live.n; k++) {
			n->live.v[k].child->nlink++;
			n->dur.v[k].child->dur_refs++;
		}
	}
	g.tab[FUSE_ROOT_ID]->nlink = 1;
	atomic_fetch_add(&g.epoch, 1);
	atomic_store(&g.armed, 0);
	atomic_fetch_add(&g.n_reverts, 1);
	atomic_store(&g.cut, false);
	pthread_mutex_unlock(&g.meta);
	pthread_rwlock_unlock(&g.state);
	/* Outside the locks: the kernel may call back into us. */
	for (size_t i = 0; i < ninval; i++)
		fuse_lowlevel_notify_inval_inode(g.se, inval[i], 0, 0);
	free(reached);
	free(inval);
	if (r < 0)
		snprintf(msg, msglen, "err revert: %s", strerror(-r));
	else
		snprintf(msg, msglen, "ok reverted kept=%zu dropped=%zu files_restored=%zu",
			 kept, dropped, restored);
	return r;
}

/* ---- operations ------------------------------------------------------------ */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	/* Every byte goes through us: no kernel write-back caching. */
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
}

/* Take back the reference of an entry reply that did not go out. */
static void unref_one(fuse_ino_t ino)
{
	struct node *n;

	pthread_mutex_lock(&g.meta);
	n = ino < g.tabcap ? g.tab[ino] : NULL;
	if (n && n->nlookup) {
		n->nlookup--;
		maybe_free(n);
	}
	pthread_mutex_unlock(&g.meta);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	struct node *d;
	ssize_t i;

	if (!enter(req, NULL))
		return;
	pthread_mutex_lock(&g.meta);
	d = get_node(parent);
	if (!d || !S_ISDIR(d->mode)) {
		pthread_mutex_unlock(&g.meta);
		leave();
		fuse_reply_err(req, d ? ENOTDIR : ESTALE);
		return;
	}
	i = dl_find(&d->live, name);
	if (i < 0) {
		pthread_mutex_unlock(&g.meta);
		leave();
		fuse_reply_err(req, ENOENT);
		return;
	}
	fill_entry(d->live.v[i].child, &e);
	pthread_mutex_unlock(&g.meta);
	leave();
	if (cut_now(req) || fuse_reply_entry(req, &e) != 0)
		unref_one(e.ino);
}

static void forget_one(fuse_ino_t ino, uint64_t nlookup)
{
	struct node *n = ino < g.tabcap ? g.tab[ino] : NULL;

	if (!n)
		return;
	n->nlookup = n->nlookup > nlookup ? n->nlookup - nlookup : 0;
	maybe_free(n);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	pthread_rwlock_rdlock(&g.state);
	pthread_mutex_lock(&g.meta);
	forget_one(ino, nlookup);
	pthread_mutex_unlock(&g.meta);
	leave();
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	pthread_rwlock_rdlock(&g.state);
	pthread_mutex_lock(&g.meta);
	for (size_t i = 0; i < count; i++)
		forget_one(forgets[i].ino, forgets[i].nlookup);
	pthread_mutex_unlock(&g.meta);
	leave();
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	struct node *n;

	if (!enter(req, NULL))
		return;
	pthread_mutex_lock(&g.meta);
	n = get_node(ino);
	if (n)
		fill_stat(n, &st);
	pthread_mutex_unlock(&g.meta);
	leave();
	if (!n)
		fuse_reply_err(req, ESTALE);
	else if (!cut_now(req))
		fuse_reply_attr(req, &st, 0);
}

static int truncate_node(struct node *n, off_t size)
{
	int r;

	if (!S_ISREG(n->mode))
		return S_ISDIR(n->mode) ? -EISDIR : -EINVAL;
	pthread_rwlock_rdlock(&n->io);
	pthread_mutex_lock(&g.meta);
	r = ensure_undo(n);
	pthread_mutex_unlock(&g.meta);
	if (r == 0 && ftruncate(n->fd, size) < 0)
		r = -errno;
	pthread_rwlock_unlock(&n->io);
	return r;
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct node *n;
	struct stat st;
	int r = 0;

	if (!enter(req, (to_set & FUSE_SET_ATTR_SIZE) ? "truncate" : NULL))
		return;
	pthread_mutex_lock(&g.meta);
	n = get_node(ino);
	pthread_mutex_unlock(&g.meta);
	if (!n) {
		leave();
		fuse_reply_err(req, ESTALE);
		return;
	}
	if (to_set & FUSE_SET_ATTR_SIZE)
		r = truncate_node(n, attr->st_size);
	pthread_mutex_lock(&g.meta);
	if (r == 0) {
		struct timespec now;

		clock_gettime(CLOCK_REALTIME, &now);
		if (to_set & FUSE_SET_ATTR_MODE)
			n->mode = (n->mode & S_IFMT) | (attr->st_mode & 07777);
		if (to_set & FUSE_SET_ATTR_UID)
			n->uid = attr->st_uid;
		if (to_set & FUSE_SET_ATTR_GID)
			n->gid = attr->st_gid;
		if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME)) {
			struct timespec ts[2] = { { 0, UTIME_OMIT }, { 0, UTIME_OMIT } };

			if (to_set & FUSE_SET_ATTR_ATIME)
				ts[0] = (to_set & FUSE_SET_ATTR_ATIME_NOW) ? now : attr->st_atim;
			if (to_set & FUSE_SET_ATTR_MTIME)
				ts[1] = (to_set & FUSE_SET_ATTR_MTIME_NOW) ? now : attr->st_mtim;
			if (n->fd >= 0) {
				futimens(n->fd, ts);
			} else {
				if (ts[0].tv_nsec != UTIME_OMIT)
					n->atime = ts[0];
				if (ts[1].tv_nsec != UTIME_OMIT)
					n->mtime = ts[1];
			}
		}
		n->ctime = now;
		fill_stat(n, &st);
	}
	pthread_mutex_unlock(&g.meta);
	leave();
	if (r < 0)
		fuse_reply_err(req, -r);
	else if (!cut_now(req))
		fuse_reply_attr(req, &st, 0);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct node *n;
	char *t = NULL;

	if (!enter(req, NULL))
		return;
	pthread_mutex_lock(&g.meta);
	n = get_node(ino);
	if (n && n->target)
		t = strdup(n->target);
	pthread_mutex_unlock(&g.meta);
	leave();
	if (!t)
		fuse_reply_err(req, n ? EINVAL : ESTALE);
	else if (!cut_now(req))
		fuse_reply_readlink(req, t);
	free(t);
}

/* Make a new name in `parent`: the common part of mknod, mkdir, symlink,
 * create. Called with g.meta held. */
static int new_entry(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		     const char *target, dev_t rdev, struct node **out)
{
	struct node *d = get_node(parent), *n;

	if (!d)
		return -ESTALE;
	if (!S_ISDIR(d->mode))
		return -ENOTDIR;
	if (d->nlink == 0)
		return -ENOENT;
	if (strlen(name) > NAME_MAX)
		return -ENAMETOOLONG;
	if (dl_find(&d->live, name) >= 0)
		return -EEXIST;
	n = node_new(mode, fuse_req_ctx(req));
	if (!n)
		return -ENOMEM;
	n->rdev = rdev;
	if (target && !(n->target = strdup(target))) {
		maybe_free(n);
		return -ENOMEM;
	}
	if (dl_add(&d->live, name, n) < 0) {
		maybe_free(n);
		return -ENOMEM;
	}
	pend_add(d, client_of(req), name, n);
	n->nlink = 1;
	set_name(n, d, name);
	touch_dir(d);
	*out = n;
	return 0;
}

static void make_node(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      const char *target, dev_t rdev)
{
	struct fuse_entry_param e;
	struct node *n = NULL;
	int r;

	if (!enter(req, S_ISDIR(mode) ? "mkdir" : S_ISLNK(mode) ? "symlink" : "mknod"))
		return;
	pthread_mutex_lock(&g.meta);
	r = new_entry(req, parent, name, mode, target, rdev, &n);
	if (r == 0)
		fill_entry(n, &e);
	pthread_mutex_unlock(&g.meta);
	leave();
	if (r < 0)
		fuse_reply_err(req, -r);
	else if (cut_now(req) || fuse_reply_entry(req, &e) != 0)
		unref_one(e.ino);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		     dev_t rdev)
{
	make_node(req, parent, name, mode, NULL, rdev);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	make_node(req, parent, name, S_IFDIR | (mode & 07777), NULL, 0);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	make_node(req, parent, name, S_IFLNK | 0777, link, 0);
}

/* Remove entry i of d (g.meta held), a change by `client`. */
static void unlink_at(struct node *d, size_t i, pid_t client)
{
	struct node *c = d->live.v[i].child;

	pend_add(d, client, d->live.v[i].name, NULL);
	dl_del(&d->live, i);
	c->nlink--;
	touch_dir(d);
	maybe_free(c);
}

static void remove_name(fuse_req_t req, fuse_ino_t parent, const char *name, bool dir)
{
	struct node *d, *c;
	ssize_t i;
	int r = 0;

	if (!enter(req, dir ? "rmdir" : "unlink"))
		return;
	pthread_mutex_lock(&g.meta);
	d = get_node(parent);
	if (!d) {
		r = -ESTALE;
		goto out;
	}
	i = dl_find(&d->live, name);
	if (i < 0) {
		r = -ENOENT;
		goto out;
	}
	c = d->live.v[i].child;
	if (dir && !S_ISDIR(c->mode))
		r = -ENOTDIR;
	else if (!dir && S_ISDIR(c->mode))
		r = -EISDIR;
	else if (dir && c->live.n)
		r = -ENOTEMPTY;
	else
		unlink_at(d, (size_t)i, client_of(req));
out:
	pthread_mutex_unlock(&g.meta);
	leave();
	reply_err(req, -r);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_name(req, parent, name, false);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_name(req, parent, name, true);
}

static bool is_ancestor(const struct node *a, const struct node *d)
{
	for (; d; d = d->ino == FUSE_ROOT_ID ? NULL : d->parent)
		if (d == a)
			return true;
	return false;
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		      fuse_ino_t newparent, const char *newname, unsigned int flags)
{
	struct node *d, *nd, *c, *old = NULL;
	pid_t client;
	ssize_t i, j;
	int r = 0;

	if (!enter(req, "rename"))
		return;
	pthread_mutex_lock(&g.meta);
	d = get_node(parent);
	nd = get_node(newparent);
	if (!d || !nd) {
		r = -ESTALE;
		goto out;
	}
	if (flags & ~RENAME_NOREPLACE) {
		r = -EINVAL;
		goto out;
	}
	if (strlen(newname) > NAME_MAX) {
		r = -ENAMETOOLONG;
		goto out;
	}
	i = dl_find(&d->live, name);
	if (i < 0) {
		r = -ENOENT;
		goto out;
	}
	c = d->live.v[i].child;
	j = dl_find(&nd->live, newname);
	if (j >= 0) {
		old = nd->live.v[j].child;
		if (old == c)
			goto out; /* the same file: nothing to do */
		if (flags & RENAME_NOREPLACE) {
			r = -EEXIST;
			goto out;
		}
		if (S_ISDIR(c->mode) && !S_ISDIR(old->mode)) {
			r = -ENOTDIR;
			goto out;
		}
		if (!S_ISDIR(c->mode) && S_ISDIR(old->mode)) {
			r = -EISDIR;
			goto out;
		}
		if (S_ISDIR(old->mode) && old->live.n) {
			r = -ENOTEMPTY;
			goto out;
		}
	}
	if (S_ISDIR(c->mode) && is_ancestor(c, nd)) {
		r = -EINVAL;
		goto out;
	}
	/* Add the new name first (may fail), then drop the replaced and the
	 * old one: indexes move on deletion, so look them up again. */
	client = client_of(req);
	if (j >= 0) {
		nd->live.v[j].child = c;
		old->nlink--;
		c->nlink++;
		pend_add(nd, client, newname, c);
	} else {
		if (dl_add(&nd->live, newname, c) < 0) {
			r = -ENOMEM;
			goto out;
		}
		c->nlink++;
		pend_add(nd, client, newname, c);
	}
	i = -1;
	for (size_t k = 0; k < d->live.n; k++)
		if (d->live.v[k].child == c && strcmp(d->live.v[k].name, name) == 0 &&
		    !(d == nd && strcmp(name, newname) == 0))
			i = (ssize_t)k;
	if (i >= 0)
		unlink_at(d, (size_t)i, client);
	set_name(c, nd, newname);
	touch_dir(nd);
	if (old)
		maybe_free(old);
out:
	pthread_mutex_unlock(&g.meta);
	leave();
	reply_err(req, -r);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	struct fuse_entry_param e;
	struct node *n, *d;
	int r = 0;

	if (!enter(req, "link"))
		return;
	pthread_mutex_lock(&g.meta);
	n = get_node(ino);
	d = get_node(newparent);
	if (!n || !d)
		r = -ESTALE;
	else if (S_ISDIR(n->mode))
		r = -EPERM;
	else if (!S_ISDIR(d->mode))
		r = -ENOTDIR;
	else if (dl_find(&d->live, newname) >= 0)
		r = -EEXIST;
	else if (dl_add(&d->live, newname, n) < 0)
		r = -ENOMEM;
	if (r == 0) {
		n->nlink++;
		pend_add(d, client_of(req), newname, n);
		touch_dir(d);
		fill_entry(n, &e);
	}
	pthread_mutex_unlock(&g.meta);
	leave();
	if (r < 0)
		fuse_reply_err(req, -r);
	else if (cut_now(req) || fuse_reply_entry(req, &e) != 0)
		unref_one(e.ino);
}

static struct handle *handle_new(int flags)
{
	struct handle *h = calloc(1, sizeof(*h));

	if (h) {
		h->epoch = atomic_load(&g.epoch);
		h->flags = flags;
	}
	return h;
}

static void setup_fi(struct fuse_file_info *fi, struct handle *h)
{
	fi->fh = (uintptr_t)h;
	/* O_DIRECT stays direct: no page cache in between. */
	if (fi->flags & O_DIRECT)
		fi->direct_io = 1;
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	struct fuse_entry_param e;
	struct handle *h = handle_new(fi->flags);
	struct node *n = NULL;
	int r = h ? 0 : -ENOMEM;

	if (!enter(req, "create")) {
		free(h);
		return;
	}
	pthread_mutex_lock(&g.meta);
	if (r == 0)
		r = new_entry(req, parent, name, S_IFREG | (mode & 07777), NULL, 0, &n);
	if (r == 0) {
		fill_entry(n, &e);
		n->opens++;
	}
	pthread_mutex_unlock(&g.meta);
	leave();
	if (r < 0) {
		free(h);
		fuse_reply_err(req, -r);
		return;
	}
	setup_fi(fi, h);
	if (cut_now(req) || fuse_reply_create(req, &e, fi) != 0) {
		pthread_mutex_lock(&g.meta);
		n->opens--;
		pthread_mutex_unlock(&g.meta);
		free(h);
		unref_one(e.ino);
	}
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct handle *h;
	struct node *n;
	int r = 0;

	if (!enter(req, (fi->flags & O_TRUNC) ? "open-trunc" : NULL))
		return;
	pthread_mutex_lock(&g.meta);
	n = get_node(ino);
	if (n)
		n->opens++;
	pthread_mutex_unlock(&g.meta);
	if (!n) {
		leave();
		fuse_reply_err(req, ESTALE);
		return;
	}
	if ((fi->flags & O_TRUNC) && (fi->flags & O_ACCMODE) != O_RDONLY)
		r = truncate_node(n, 0);
	h = r == 0 ? handle_new(fi->flags) : NULL;
	if (r == 0 && !h)
		r = -ENOMEM;
	leave();
	if (r == 0) {
		setup_fi(fi, h);
		if (!cut_now(req) && fuse_reply_open(req, fi) == 0)
			return;
	} else {
		fuse_reply_err(req, -r);
	}
	free(h);
	pthread_mutex_lock(&g.meta);
	n->opens--;
	maybe_free(n);
	pthread_mutex_unlock(&g.meta);
}

static struct handle *fh_of(struct fuse_file_info *fi)
{
	struct handle *h = (struct handle *)(uintptr_t)fi->fh;

	/* A descriptor from before a revert belongs to the dead machine. */
	return h && h->epoch == atomic_load(&g.epoch) ? h : NULL;
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct handle *h;
	struct node *n;
	char *buf;
	ssize_t k;

	if (!enter(req, NULL))
		return;
	h = fh_of(fi);
	pthread_mutex_lock(&g.meta);
	n = get_node(ino);
	pthread_mutex_unlock(&g.meta);
	if (!h || !n || n->fd < 0) {
		leave();
		fuse_reply_err(req, EIO);
		return;
	}
	if (g.direct_read_einval && (h->flags & O_DIRECT)) {
		leave();
		fuse_reply_err(req, EINVAL);
		return;
	}
	buf = malloc(size ? size : 1);
	if (!buf) {
		leave();
		fuse_reply_err(req, ENOMEM);
		return;
	}
	k = pread(n->fd, buf, size, off);
	if (k < 0)
		k = -errno;
	leave();
	if (k < 0)
		fuse_reply_err(req, (int)-k);
	else if (!cut_now(req))
		fuse_reply_buf(req, buf, (size_t)k);
	free(buf);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct node *n;
	ssize_t k;
	int r;

	if (!enter(req, "write"))
		return;
	pthread_mutex_lock(&g.meta);
	n = get_node(ino);
	pthread_mutex_unlock(&g.meta);
	if (!fh_of(fi) || !n || n->fd < 0) {
		leave();
		fuse_reply_err(req, EIO);
		return;
	}
	pthread_rwlock_rdlock(&n->io);
	pthread_mutex_lock(&g.meta);
	r = ensure_undo(n);
	pthread_mutex_unlock(&g.meta);
	k = r < 0 ? r : pwrite(n->fd, buf, size, off);
	if (k < 0 && r == 0)
		k = -errno;
	pthread_rwlock_unlock(&n->io);
	leave();
	if (k < 0)
		fuse_reply_err(req, (int)-k);
	else if (!cut_now(req))
		fuse_reply_write(req, (size_t)k);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (!enter(req, NULL))
		return;
	leave();
	reply_err(req, fh_of(fi) ? 0 : EIO);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct handle *h = (struct handle *)(uintptr_t)fi->fh;

	pthread_rwlock_rdlock(&g.state);
	pthread_mutex_lock(&g.meta);
	if (ino < g.tabcap && g.tab[ino]) {
		g.tab[ino]->opens--;
		maybe_free(g.tab[ino]);
	}
	pthread_mutex_unlock(&g.meta);
	leave();
	free(h);
	fuse_reply_err(req, 0);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct node *n;
	int r = 0;

	if (!enter(req, "fsync"))
		return;
	atomic_fetch_add(&g.n_fsync, 1);
	pthread_mutex_lock(&g.meta);
	n = get_node(ino);
	pthread_mutex_unlock(&g.meta);
	if (!fh_of(fi) || !n) {
		leave();
		fuse_reply_err(req, EIO);
		return;
	}
	if (S_ISREG(n->mode)) {
		pthread_rwlock_wrlock(&n->io);
		pthread_mutex_lock(&g.meta);
		if (matches(g.ignore_fsync, g.nignore_fsync, n->name))
			atomic_fetch_add(&g.n_ignored, 1);
		else if (is_cut())
			r = -EIO;
		else
			drop_undo_file(n);
		pthread_mutex_unlock(&g.meta);
		pthread_rwlock_unlock(&n->io);
	}
	leave();
	reply_err(req, -r);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct handle *h;
	struct node *n;

	if (!enter(req, NULL))
		return;
	pthread_mutex_lock(&g.meta);
	n = get_node(ino);
	if (n)
		n->opens++;
	pthread_mutex_unlock(&g.meta);
	leave();
	if (!n) {
		fuse_reply_err(req, ESTALE);
		return;
	}
	h = handle_new(fi->flags);
	if (h) {
		fi->fh = (uintptr_t)h;
		if (!cut_now(req) && fuse_reply_open(req, fi) == 0)
			return;
	} else {
		fuse_reply_err(req, ENOMEM);
	}
	free(h);
	pthread_mutex_lock(&g.meta);
	n->opens--;
	maybe_free(n);
	pthread_mutex_unlock(&g.meta);
}

static void snap_free(struct handle *h)
{
	for (size_t i = 0; i < h->nsnap; i++)
		free(h->snap[i].name);
	free(h->snap);
	h->snap = NULL;
	h->nsnap = 0;
}

/* The listing as of the first readdir (offset 0). g.meta held. */
static int snap_take(struct handle *h, struct node *d)
{
	size_t n = d->live.n + 2;

	snap_free(h);
	h->snap = calloc(n, sizeof(*h->snap));
	if (!h->snap)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const char *name = i == 0 ? "." : i == 1 ? ".." : d->live.v[i - 2].name;
		struct node *c = i == 0 ? d : i == 1 ? (d->parent ? d->parent : d) : d->live.v[i - 2].child;

		h->snap[i].name = strdup(name);
		if (!h->snap[i].name) {
			h->nsnap = i;
			snap_free(h);
			return -ENOMEM;
		}
		h->snap[i].ino = c->ino;
		h->snap[i].mode = c->mode;
	}
	h->nsnap = n;
	return 0;
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	struct handle *h;
	struct node *d;
	char *buf;
	size_t used = 0;
	int r = 0;

	if (!enter(req, NULL))
		return;
	h = fh_of(fi);
	pthread_mutex_lock(&g.meta);
	d = get_node(ino);
	if (!h || !d)
		r = -EIO;
	else if (off == 0 || !h->snap)
		r = snap_take(h, d);
	pthread_mutex_unlock(&g.meta);
	leave();
	buf = r == 0 ? malloc(size) : NULL;
	if (r == 0 && !buf)
		r = -ENOMEM;
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	for (size_t i = (size_t)off; i < h->nsnap; i++) {
		struct stat st = { .st_ino = h->snap[i].ino, .st_mode = h->snap[i].mode };
		size_t k = fuse_add_direntry(req, buf + used, size - used, h->snap[i].name, &st,
					     (off_t)(i + 1));

		if (k > size - used)
			break;
		used += k;
	}
	if (!cut_now(req))
		fuse_reply_buf(req, buf, used);
	free(buf);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct handle *h = (struct handle *)(uintptr_t)fi->fh;

	if (h)
		snap_free(h);
	op_release(req, ino, fi);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct node *d;
	int r = 0;

	if (!enter(req, "fsyncdir"))
		return;
	atomic_fetch_add(&g.n_fsyncdir, 1);
	pthread_mutex_lock(&g.meta);
	d = get_node(ino);
	if (!fh_of(fi) || !d || !S_ISDIR(d->mode)) {
		r = -EIO;
	} else if (matches(g.ignore_fsyncdir, g.nignore_fsyncdir, d->name)) {
		atomic_fetch_add(&g.n_ignored, 1);
	} else if (is_cut()) {
		r = -EIO;
	} else if (g.per_process) {
		pend_apply(d, client_of(req));
	} else {
		struct dlist old = d->dur;

		memset(&d->dur, 0, sizeof(d->dur));
		if (dl_copy(&d->dur, &d->live) < 0) {
			d->dur = old;
			r = -ENOMEM;
		} else {
			for (size_t i = 0; i < d->dur.n; i++)
				d->dur.v[i].child->dur_refs++;
			for (size_t i = 0; i < old.n; i++) {
				old.v[i].child->dur_refs--;
				maybe_free(old.v[i].child);
			}
			dl_free(&old);
		}
	}
	pthread_mutex_unlock(&g.meta);
	leave();
	reply_err(req, -r);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;

	if (!enter(req, NULL))
		return;
	if (fstatvfs(g.datafd, &sv) < 0) {
		leave();
		fuse_reply_err(req, errno);
		return;
	}
	leave();
	sv.f_namemax = NAME_MAX;
	if (!cut_now(req))
		fuse_reply_statfs(req, &sv);
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.readlink = op_readlink,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.symlink = op_symlink,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.rename = op_rename,
	.link = op_link,
	.create = op_create,
	.open = op_open,
	.read = op_read,
	.write = op_write,
	.flush = op_flush,
	.release = op_release,
	.fsync = op_fsync,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.releasedir = op_releasedir,
	.fsyncdir = op_fsyncdir,
	.statfs = op_statfs,
};

/* ---- control socket --------------------------------------------------------- */

static void status_line(char *msg, size_t len)
{
	snprintf(msg, len,
		 "ok state=%s armed=%ld ops=%lu mutating=%lu fsyncs=%lu fsyncdirs=%lu "
		 "ignored=%lu eio=%lu cuts=%lu reverts=%lu undo_copies=%lu cut_at=%s",
		 is_cut() ? "cut" : "running", atomic_load(&g.armed), atomic_load(&g.n_ops),
		 atomic_load(&g.n_mut), atomic_load(&g.n_fsync), atomic_load(&g.n_fsyncdir),
		 atomic_load(&g.n_ignored), atomic_load(&g.n_eio), atomic_load(&g.n_cuts),
		 atomic_load(&g.n_reverts), atomic_load(&g.n_undo_copies),
		 atomic_load(&g.cut_op) ? atomic_load(&g.cut_op) : "-");
}

static void ctl_command(char *line, char *msg, size_t len)
{
	char *arg = strchr(line, ' ');

	if (arg)
		*arg++ = '\0';
	if (strcmp(line, "cut") == 0) {
		if (!is_cut()) {
			const char *op = atomic_load(&g.last_op);

			/* A timed cut: after the last mutating operation started. */
			snprintf(g.cut_where, sizeof(g.cut_where), "after-%s", op ? op : "none");
			atomic_store(&g.cut_op, g.cut_where);
		}
		do_cut();
		snprintf(msg, len, "ok cut");
	} else if (strcmp(line, "arm") == 0 && arg) {
		char *end;
		long v = strtol(arg, &end, 10);

		if (*end || v <= 0) {
			snprintf(msg, len, "err arm wants a count > 0");
			return;
		}
		if (is_cut()) {
			snprintf(msg, len, "err already cut");
			return;
		}
		atomic_store(&g.armed, v);
		snprintf(msg, len, "ok armed %ld", v);
	} else if (strcmp(line, "disarm") == 0) {
		atomic_store(&g.armed, 0);
		snprintf(msg, len, "ok disarmed");
	} else if (strcmp(line, "revert") == 0) {
		revert(msg, len);
	} else if (strcmp(line, "sync") == 0) {
		sync_all(msg, len);
	} else if (strcmp(line, "status") == 0) {
		status_line(msg, len);
	} else {
		snprintf(msg, len, "err unknown command '%s' (cut, arm N, disarm, revert, sync, status)",
			 line);
	}
}

static void *ctl_thread(void *arg)
{
	int lfd = (int)(intptr_t)arg;

	for (;;) {
		char line[256], msg[512];
		size_t used = 0;
		int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			break;
		}
		while (used < sizeof(line) - 1) {
			ssize_t k = read(c, line + used, sizeof(line) - 1 - used);

			if (k <= 0)
				break;
			used += (size_t)k;
			if (memchr(line, '\n', used))
				break;
		}
		line[used] = '\0';
		line[strcspn(line, "\r\n")] = '\0';
		ctl_command(line, msg, sizeof(msg));
		strcat(msg, "\n");
		/* A client that went away has nothing to be told. */
		(void)send(c, msg, strlen(msg), MSG_NOSIGNAL);
		close(c);
	}
	return NULL;
}

static int ctl_listen(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(sa.sun_path, path);
	unlink(path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 16) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int ctl_client(int argc, char **argv)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char buf[1024];
	size_t used = 0;
	int fd;

	if (argc < 4 || argc > 5) {
		fprintf(stderr, "usage: ckpt-powerfs ctl SOCK cut|arm N|disarm|revert|sync|status\n");
		return 2;
	}
	if (strlen(argv[2]) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "ckpt-powerfs ctl: socket path too long\n");
		return 2;
	}
	strcpy(sa.sun_path, argv[2]);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		fprintf(stderr, "ckpt-powerfs ctl: %s: %s\n", argv[2], strerror(errno));
		return 1;
	}
	snprintf(buf, sizeof(buf), "%s%s%s\n", argv[3], argc == 5 ? " " : "", argc == 5 ? argv[4] : "");
	if (write(fd, buf, strlen(buf)) < 0) {
		fprintf(stderr, "ckpt-powerfs ctl: write: %s\n", strerror(errno));
		return 1;
	}
	for (;;) {
		ssize_t k = read(fd, buf + used, sizeof(buf) - 1 - used);

		if (k <= 0)
			break;
		used += (size_t)k;
	}
	buf[used] = '\0';
	close(fd);
	fputs(buf, stdout);
	return strncmp(buf, "ok", 2) == 0 ? 0 : 1;
}

/* ---- main ---------------------------------------------------------------------- */

static void usage(void)
{
	fprintf(stderr,
		"usage: ckpt-powerfs [--ctl SOCK] [--ignore-fsync-of GLOB] [--ignore-fsyncdir-of GLOB]\n"
		"                    [--direct-read-einval] [--per-process-dirsync] [--debug]\n"
		"                    STORE MOUNTPOINT\n"
		"       ckpt-powerfs ctl SOCK cut|arm N|disarm|revert|sync|status\n");
	exit(2);
}

/* STORE/NAME, emptied. */
static int fresh_dir(const char *store, const char *name)
{
	char path[PATH_MAX];
	int fd;
	DIR *d;
	struct dirent *de;

	snprintf(path, sizeof(path), "%s/%s", store, name);
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return -1;
	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	d = fdopendir(dup(fd));
	if (!d) {
		close(fd);
		return -1;
	}
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			unlinkat(fd, de->d_name, 0);
	closedir(d);
	return fd;
}

int main(int argc, char **argv)
{
	const char *ctl = NULL, *store = NULL, *mnt = NULL;
	char ctlbuf[PATH_MAX];
	bool debug = false;
	struct fuse_loop_config *lc;
	pthread_t th;
	int lfd, rc;
	struct node *root;

	if (argc >= 2 && strcmp(argv[1], "ctl") == 0)
		return ctl_client(argc, argv);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "--ctl") == 0 && i + 1 < argc) {
			ctl = argv[++i];
		} else if (strcmp(a, "--ignore-fsync-of") == 0 && i + 1 < argc) {
			if (g.nignore_fsync == MAX_PATTERNS)
				usage();
			g.ignore_fsync[g.nignore_fsync++] = argv[++i];
		} else if (strcmp(a, "--ignore-fsyncdir-of") == 0 && i + 1 < argc) {
			if (g.nignore_fsyncdir == MAX_PATTERNS)
				usage();
			g.ignore_fsyncdir[g.nignore_fsyncdir++] = argv[++i];
		} else if (strcmp(a, "--direct-read-einval") == 0) {
			g.direct_read_einval = true;
		} else if (strcmp(a, "--per-process-dirsync") == 0) {
			g.per_process = true;
		} else if (strcmp(a, "--debug") == 0) {
			debug = true;
		} else if (a[0] == '-') {
			usage();
		} else if (!store) {
			store = a;
		} else if (!mnt) {
			mnt = a;
		} else {
			usage();
		}
	}
	if (!store || !mnt)
		usage();
	if (mkdir(store, 0700) < 0 && errno != EEXIST)
		die(store);
	snprintf(g.store, sizeof(g.store), "%s", store);
	g.datafd = fresh_dir(store, "data");
	g.undofd = fresh_dir(store, "undo");
	if (g.datafd < 0 || g.undofd < 0)
		die("store");
	if (!ctl) {
		snprintf(ctlbuf, sizeof(ctlbuf), "%s/ctl.sock", store);
		ctl = ctlbuf;
	}

	/* Inode 0 is never used, 1 is the root. */
	g.next_ino = FUSE_ROOT_ID;
	root = node_new(S_IFDIR | 0755, NULL);
	if (!root)
		die("root");
	root->nlink = 1;
	root->nlookup = 1;
	root->parent = root;
	root->name = strdup("/");

	char *fargv[] = { argv[0], "-o", "fsname=ckpt-powerfs,subtype=powerfs,allow_other",
			  debug ? "-d" : NULL, NULL };
	struct fuse_args args = FUSE_ARGS_INIT(debug ? 4 : 3, fargv);

	g.se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
	if (!g.se)
		return 1;
	if (fuse_set_signal_handlers(g.se) != 0)
		return 1;
	if (fuse_session_mount(g.se, mnt) != 0)
		return 1;
	lfd = ctl_listen(ctl);
	if (lfd < 0) {
		fprintf(stderr, "ckpt-powerfs: control socket %s: %s\n", ctl, strerror(errno));
		fuse_session_unmount(g.se);
		return 1;
	}
	if (pthread_create(&th, NULL, ctl_thread, (void *)(intptr_t)lfd) != 0)
		die("control thread");
	pthread_detach(th);
	fprintf(stderr, "ckpt-powerfs: serving %s (store %s, control %s)\n", mnt, store, ctl);

	lc = fuse_loop_cfg_create();
	fuse_loop_cfg_set_clone_fd(lc, 0);
	fuse_loop_cfg_set_max_threads(lc, 16);
	fuse_loop_cfg_set_idle_threads(lc, 8);
	rc = fuse_session_loop_mt(g.se, lc);
	fuse_loop_cfg_destroy(lc);
	/* Stop answering the control socket before tearing the tree down. */
	shutdown(lfd, SHUT_RDWR);
	unlink(ctl);
	fuse_session_unmount(g.se);
	fuse_remove_signal_handlers(g.se);
	fuse_session_destroy(g.se);
	fuse_opt_free_args(&args);
	pthread_mutex_lock(&g.meta);
	/* Pending changes name other nodes: drop them all first. */
	for (size_t i = 0; i < g.tabcap; i++)
		if (g.tab[i])
			pend_free_all(g.tab[i], false);
	for (size_t i = 0; i < g.tabcap; i++)
		if (g.tab[i])
			node_destroy(g.tab[i]);
	free(g.tab);
	pthread_mutex_unlock(&g.meta);
	return rc ? 1 : 0;
}
