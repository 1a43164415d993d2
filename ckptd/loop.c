/* SPDX-License-Identifier: MIT */
/*
 * The daemon's life: start-up (checkpoint root, workers, io_uring, the
 * listening socket, the S3 tier, the peer link), the event loop, the
 * signals that end it, and the shut-down after it. One epoll set drives
 * every descriptor, each registered as a source (a handler plus its data,
 * loop.h), so the loop dispatches without knowing who is behind one.
 *
 * Not here: what a client says and is answered (server.c), what the
 * sources' handlers do beyond calling their owner's dispatch function
 * (writer.c, workers.c, uploader.c, peer.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "agree.h"
#include "ckptd.h"
#include "coord.h"
#include "jobs.h"
#include "memtier.h"
#include "retention.h"
#include "writer.h"
#include "loop.h"
#include "notify.h"
#include "peer.h"
#include "server.h"
#include "uploader.h"

/* The daemon's own sources: they live as long as the loop. */
struct loop_sources {
	struct loop_source listen, signal, ring, workers, uploader;
	struct loop_source peer, peer_timer, peer_wake;
};

int loop_add(struct daemon *d, struct loop_source *src, int fd, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = src };

	if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		return -errno;
	src->fd = fd;
	return 0;
}

int loop_mod(struct daemon *d, struct loop_source *src, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = src };

	return epoll_ctl(d->epfd, EPOLL_CTL_MOD, src->fd, &ev) < 0 ? -errno : 0;
}

void loop_del(struct daemon *d, struct loop_source *src)
{
	if (src->fd < 0)
		return;
	epoll_ctl(d->epfd, EPOLL_CTL_DEL, src->fd, NULL);
	src->fd = -1;
}

/* ---- Listening socket ------------------------------------------------ */

static int make_parent_dir(const char *path)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char *slash;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = 0;
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static int listen_open(struct daemon *d)
{
	const char *path = d->cfg->socket_path;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		log_error("server", "socket path too long (%zu bytes, at most %zu): %s", strlen(path),
			  sizeof(sa.sun_path) - 1, path);
		return -ENAMETOOLONG;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	r = make_parent_dir(path);
	if (r < 0) {
		log_error("server", "cannot create the directory of %s: %s", path, strerror(-r));
		return r;
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* A socket file left by a dead ckptd is removed; a live one is not. */
	struct stat sb;
	if (lstat(path, &sb) == 0) {
		if (!S_ISSOCK(sb.st_mode)) {
			log_error("server", "%s exists and is not a socket", path);
			close(fd);
			return -EEXIST;
		}
		int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(probe);
			close(fd);
			log_error("server", "another ckptd is listening on %s", path);
			return -EADDRINUSE;
		}
		if (probe >= 0)
			close(probe);
		unlink(path);
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		log_error("server", "bind %s: %s", path, strerror(-r));
		close(fd);
		return r;
	}
	if (chmod(path, d->cfg->socket_mode) < 0)
		log_warn("server", "chmod %s: %s", path, strerror(errno));
	if (d->cfg->allowed_gid != (gid_t)-1 && chown(path, (uid_t)-1, d->cfg->allowed_gid) < 0)
		log_warn("server", "chown %s to gid %u: %s", path, (unsigned)d->cfg->allowed_gid,
			 strerror(errno));
	if (listen(fd, 128) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	d->listen_fd = fd;
	return 0;
}

/* ---- The loop ------------------------------------------------------- */

static void reap_ring(struct daemon *d, struct loop_source *src, uint32_t events)
{
	eventfd_t v;
	struct io_uring_cqe *cqe;

	/* EAGAIN: the counter was read already; the CQ is checked anyway. */
	(void)eventfd_read(d->ring_efd, &v);
	while (io_uring_peek_cqe(&d->ring, &cqe) == 0) {
		struct io_uring_cqe copy = *cqe;
		io_uring_cqe_seen(&d->ring, cqe);
		writer_on_cqe(d, &copy);
	}
	writer_pump(d);
}

/* src->data: the listening socket's source, closed at the first TERM or INT. */
static void on_signal(struct daemon *d, struct loop_source *src, uint32_t events)
{
	struct loop_source *listen_src = src->data;
	struct signalfd_siginfo si;

	while (read(d->signal_fd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
			if (!d->stopping) {
				log_info("server", "signal %s: finishing in-flight saves, then exiting",
					 si.ssi_signo == SIGTERM ? "TERM" : "INT");
				notify_stopping("stopping: finishing %u operations in flight",
						d->busy);
			}
			d->stopping = true;
			peer_stop(d);
			metrics_http_stopping(d->metrics);
			if (d->listen_fd >= 0) {
				loop_del(d, listen_src);
				close(d->listen_fd);
				d->listen_fd = -1;
				unlink(d->cfg->socket_path);
			}
		} else if (si.ssi_signo == SIGHUP) {
			log_info("server", "SIGHUP ignored (configuration is read at start-up)");
		}
	}
}

static void on_workers(struct daemon *d, struct loop_source *src, uint32_t events)
{
	workers_dispatch(d->workers);
}

static void on_uploader(struct daemon *d, struct loop_source *src, uint32_t events)
{
	uploader_dispatch(d);
}

/* Each of the peer link's descriptors: peer_dispatch() looks at them all. */
static void on_peer(struct daemon *d, struct loop_source *src, uint32_t events)
{
	peer_dispatch(d);
}

static void probe_mlock(struct daemon *d)
{
	struct rlimit rl;

	/* Root (CAP_IPC_LOCK) can lock any amount; others only up to
	 * RLIMIT_MEMLOCK, usually far below an arena. */
	d->can_mlock = geteuid() == 0 ||
		       (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur == RLIM_INFINITY);
}

int loop_run(struct ckptd_config *cfg)
{
	struct daemon dd, *d = &dd;
	struct loop_sources srcs = {
		.listen = { .fd = -1, .handler = server_accept },
		.signal = { .fd = -1, .handler = on_signal, .data = &srcs.listen },
		.ring = { .fd = -1, .handler = reap_ring },
		.workers = { .fd = -1, .handler = on_workers },
		.uploader = { .fd = -1, .handler = on_uploader },
		.peer = { .fd = -1, .handler = on_peer },
		.peer_timer = { .fd = -1, .handler = on_peer },
		.peer_wake = { .fd = -1, .handler = on_peer },
	};
	sigset_t mask;
	int r;

	memset(d, 0, sizeof(*d));
	d->cfg = cfg;
	d->epfd = d->listen_fd = d->signal_fd = d->ring_efd = d->root_fd = d->trash_fd = -1;
	d->direct_io = -1;
	probe_mlock(d);
	/* Blocked before any thread starts, so that every thread inherits the
	 * mask and the signals reach the loop through the signalfd only. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);

	if (mkdir(cfg->root, 0750) < 0 && errno != EEXIST) {
		r = -errno;
		log_error("server", "cannot create checkpoint root %s: %s", cfg->root, strerror(-r));
		return r;
	}
	d->root_fd = open(cfg->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (d->root_fd < 0) {
		r = -errno;
		log_error("server", "cannot open checkpoint root %s: %s", cfg->root, strerror(-r));
		return r;
	}
	/* Observability never stops checkpointing: an endpoint that cannot
	 * start is logged and ckptd serves without it. */
	metrics_init();
	metrics_set(M_STAGING_CAPACITY_BYTES, (double)cfg->staging_bytes);
	if (metrics_http_start(cfg->metrics_listen, cfg->metrics_port_file, &d->metrics) < 0)
		log_warn("server", "serving without a metrics endpoint");
	if (events_start(cfg) < 0)
		log_warn("server", "serving without webhook events");
	unsigned nworkers = cfg->workers;
	if (nworkers == 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		nworkers = n < 1 ? 1 : n > 4 ? 4 : (unsigned)n;
	}
	r = workers_create(nworkers, &d->workers);
	if (r < 0) {
		log_error("server", "worker threads: %s", strerror(-r));
		goto out;
	}
	d->ring_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->ring_efd < 0) {
		r = -errno;
		goto out;
	}
	r = writer_init(d);
	if (r < 0) {
		log_error("server", "io_uring setup failed: %s", strerror(-r));
		goto out;
	}
	notify_status("recovering checkpoint root %s", cfg->root);
	r = coord_recover(d);
	if (r < 0) {
		log_error("server", "scanning checkpoint root %s: %s", cfg->root, strerror(-r));
		goto out;
	}
	d->signal_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	d->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (d->signal_fd < 0 || d->epfd < 0) {
		r = -errno;
		goto out;
	}
	r = listen_open(d);
	if (r < 0)
		goto out;
	if ((r = loop_add(d, &srcs.listen, d->listen_fd, EPOLLIN)) < 0 ||
	    (r = loop_add(d, &srcs.signal, d->signal_fd, EPOLLIN)) < 0 ||
	    (r = loop_add(d, &srcs.ring, d->ring_efd, EPOLLIN)) < 0 ||
	    (r = loop_add(d, &srcs.workers, workers_fd(d->workers), EPOLLIN)) < 0)
		goto out;
	r = uploader_init(d);
	if (r < 0)
		goto out;
	if (uploader_fd(d) >= 0 && (r = loop_add(d, &srcs.uploader, uploader_fd(d), EPOLLIN)) < 0)
		goto out;
	r = peer_init(d);
	if (r < 0) {
		log_error("server", "the peer link of node %u of %u did not start: %s",
			  cfg->node_index, cfg->nodes, strerror(-r));
		goto out;
	}
	if ((peer_fd(d) >= 0 && (r = loop_add(d, &srcs.peer, peer_fd(d), EPOLLIN)) < 0) ||
	    (peer_timer_fd(d) >= 0 &&
	     (r = loop_add(d, &srcs.peer_timer, peer_timer_fd(d), EPOLLIN)) < 0) ||
	    (peer_wake_fd(d) >= 0 &&
	     (r = loop_add(d, &srcs.peer_wake, peer_wake_fd(d), EPOLLIN)) < 0))
		goto out;

	coord_trash_empty(d);
	/* Jobs this daemon owned before a crash or a stop: their recovery and
	 * uploads resume without waiting for a rank. */
	coord_resume_owned(d);
	log_info("server", "ready socket=%s root=%s staging_bytes=%llu slots_per_rank=%u "
		 "queue_depth=%u request_size=%llu chunk_size=%llu workers=%u",
		 cfg->socket_path, cfg->root, (unsigned long long)cfg->staging_bytes,
		 cfg->slots_per_rank, cfg->queue_depth, (unsigned long long)cfg->request_bytes,
		 (unsigned long long)cfg->chunk_bytes, nworkers);
	notify_ready("serving on %s, root %s", cfg->socket_path, cfg->root);

	while (!(d->stopping && d->busy == 0)) {
		struct epoll_event evs[64];
		int wait_ms = notify_watchdog_timeout(d->stopping ? 100 : -1);
		int peer_ms = peer_poll_ms(d);
		if (peer_ms >= 0 && (wait_ms < 0 || peer_ms < wait_ms))
			wait_ms = peer_ms;
		int agree_ms = agree_poll_ms(d);
		if (agree_ms >= 0 && (wait_ms < 0 || agree_ms < wait_ms))
			wait_ms = agree_ms;
		int coord_ms = coord_poll_ms(d);
		if (coord_ms >= 0 && (wait_ms < 0 || coord_ms < wait_ms))
			wait_ms = coord_ms;
		int n = epoll_wait(d->epfd, evs, 64, wait_ms);
		notify_watchdog_tick();
		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			log_error("server", "epoll_wait: %s", strerror(-r));
			goto out;
		}
		/* Any handler may disconnect any client: every source of this
		 * batch that can go away is held until the batch is done. (A
		 * source is removed from the epoll set when what is behind it
		 * goes, so all of them are alive here.) */
		for (int i = 0; i < n; i++) {
			struct loop_source *src = evs[i].data.ptr;
			if (src->hold)
				src->hold(src);
		}
		for (int i = 0; i < n; i++) {
			struct loop_source *src = evs[i].data.ptr;
			src->handler(d, src, evs[i].events);
		}
		for (int i = 0; i < n; i++) {
			struct loop_source *src = evs[i].data.ptr;
			if (src->release)
				src->release(src);
		}
		agree_tick(d);
		coord_tick(d, ckpt_mono_ns());
	}
	log_info("server", "stopped cleanly");
	r = 0;
out:
	for (struct client *c = d->clients, *next; c; c = next) {
		next = c->next;
		client_kill(c, "ckptd stopping");
	}
	/* Restore workers waiting on a partner fetch are answered first. */
	peer_stop(d);
	/* Runs the done callbacks of tasks still queued (error exits only),
	 * which drop their client references. */
	if (d->workers)
		workers_destroy(d->workers);
	/* After the workers: no restore attempt is still reading a slot. */
	agree_fini(d);
	peer_fini(d);
	retain_fini(d);
	/* After the workers: their last callbacks may still hand it parts. */
	uploader_fini(d);
	/* After the last done callback: events they raised are sent too. */
	events_stop();
	while (d->clients)
		client_free(d->clients);
	writer_fini(d);
	while (d->jobs) {
		struct job *job = d->jobs;
		d->jobs = job->next;
		while (job->steps) {
			struct step *st = job->steps;
			job->steps = st->next;
			if (st->votes)
				for (uint32_t i = 0; i < st->world_size; i++)
					ckpt_table_free(&st->votes[i].table);
			free(st->votes);
			free(st->saving);
			free(st);
		}
		if (job->dirfd >= 0)
			close(job->dirfd);
		if (job->lock_fd >= 0)
			close(job->lock_fd); /* gives the job up */
		free(job->committed);
		free(job->restore_pins);
		free(job->left);
		free(job);
	}
	if (d->listen_fd >= 0) {
		close(d->listen_fd);
		unlink(cfg->socket_path);
	}
	if (d->signal_fd >= 0)
		close(d->signal_fd);
	if (d->ring_efd >= 0)
		close(d->ring_efd);
	if (d->epfd >= 0)
		close(d->epfd);
	if (d->root_fd >= 0)
		close(d->root_fd);
	if (d->trash_fd >= 0)
		close(d->trash_fd);
	metrics_http_stop(d->metrics);
	return r;
}
