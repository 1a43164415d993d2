/* SPDX-License-Identifier: MIT */
/*
 * Service-manager notifications (sd_notify(3)): readiness, status lines,
 * stopping and the watchdog. Every call is a no-op when ckptd is built
 * without libsystemd (-Dsystemd=disabled) or when $NOTIFY_SOCKET is unset,
 * so the daemon behaves the same outside systemd. Called from the event-loop
 * thread only. Failures to notify are ignored: the service manager going
 * away must not stop checkpoints.
 */
#ifndef CKPTD_NOTIFY_H
#define CKPTD_NOTIFY_H

#include <stdbool.h>

/* Whether ckptd was built with service-manager support. */
bool notify_supported(void);

/* "STATUS=<text>": one line shown by `systemctl status`. */
void notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "READY=1" with a status line: the control socket is listening and the
 * checkpoint root has been recovered. Also arms the watchdog (see below). */
void notify_ready(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "STOPPING=1" with a status line: shutdown (draining) has begun. */
void notify_stopping(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "ERRNO=<e>" and a status line, before exiting on a fatal error;
 * `err` is a negative errno. */
void notify_failed(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Watchdog (WatchdogSec= in the unit, $WATCHDOG_USEC): the event loop calls
 * notify_watchdog_timeout() to bound its wait so that it wakes in time, and
 * notify_watchdog_tick() after every wake-up; a ping ("WATCHDOG=1") is sent
 * at half the interval. A loop stuck for the whole interval is killed and
 * restarted by systemd. Without a watchdog both are pass-through no-ops.
 */
int notify_watchdog_timeout(int timeout_ms);
void notify_watchdog_tick(void);

#endif
