/* SPDX-License-Identifier: MIT */
/*
 * The daemon's event loop (loop.c): one epoll set, whose every descriptor
 * is a source, a handler plus its data, so that the loop dispatches
 * without knowing who is behind a descriptor. Everything here runs on the
 * event-loop thread.
 */
#ifndef CKPTD_LOOP_H
#define CKPTD_LOOP_H

#include <stdint.h>

struct ckptd_config;
struct daemon;
struct loop_source;

/* Called with the epoll events that are ready on src->fd. */
typedef void (*loop_handler_fn)(struct daemon *d, struct loop_source *src, uint32_t events);

/*
 * Owned by whoever registers it (a client embeds its own); it must stay
 * allocated while registered. hold and release (both optional) keep what
 * is behind the source allocated across one batch of events, since any
 * handler of the batch may end it (a client killed by another's handler):
 * hold runs for every source of the batch before the first handler,
 * release after the last; the source may be freed by release.
 */
struct loop_source {
	int fd;                   /* -1 while not registered */
	loop_handler_fn handler;
	void (*hold)(struct loop_source *src);
	void (*release)(struct loop_source *src);
	void *data;
};

/* Watch fd for `events` (EPOLLIN, EPOLLOUT): 0, or -errno (src unchanged).
 * src->handler, hold, release and data are set by the caller. */
int loop_add(struct daemon *d, struct loop_source *src, int fd, uint32_t events);
/* Watch src->fd for `events` instead: 0, or -errno. */
int loop_mod(struct daemon *d, struct loop_source *src, uint32_t events);
/* Stop watching src->fd (not closed here); nothing if not registered. */
void loop_del(struct daemon *d, struct loop_source *src);

/* Start the daemon, serve until SIGTERM/SIGINT and in-flight work is done,
 * shut it down: 0, or -errno after logging why. */
int loop_run(struct ckptd_config *cfg);

#endif
