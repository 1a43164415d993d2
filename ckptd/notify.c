/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "clock.h"
#include "ckpt-build-config.h"
#include "notify.h"

#if CKPT_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>

/* Watchdog interval in ns (0: none) and when the last ping went out. */
static uint64_t watchdog_ns;
static uint64_t watchdog_last_ns;

/* One datagram: the fixed fields, then STATUS=<text>. */
__attribute__((format(printf, 2, 0)))
static void send_with_status(const char *fields, const char *fmt, va_list ap)
{
	char status[256];

	vsnprintf(status, sizeof(status), fmt, ap);
	sd_notifyf(0, "%sSTATUS=%s", fields, status);
}

bool notify_supported(void)
{
	return true;
}

void notify_status(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	send_with_status("", fmt, ap);
	va_end(ap);
}

void notify_ready(const char *fmt, ...)
{
	uint64_t usec = 0;
	va_list ap;

	va_start(ap, fmt);
	send_with_status("READY=1\n", fmt, ap);
	va_end(ap);
	/* 0 = keep $WATCHDOG_USEC: ckptd execs nothing that could inherit it. */
	if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
		watchdog_ns = usec * 1000u;
		watchdog_last_ns = (uint64_t)ckpt_mono_ns();
		sd_notify(0, "WATCHDOG=1");
	}
}

void notify_stopping(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	send_with_status("STOPPING=1\n", fmt, ap);
	va_end(ap);
}

void notify_failed(int err, const char *fmt, ...)
{
	char fields[32];
	va_list ap;

	snprintf(fields, sizeof(fields), "ERRNO=%d\n", err < 0 ? -err : err);
	va_start(ap, fmt);
	send_with_status(fields, fmt, ap);
	va_end(ap);
}

int notify_watchdog_timeout(int timeout_ms)
{
	if (!watchdog_ns)
		return timeout_ms;
	uint64_t due = watchdog_last_ns + watchdog_ns / 2, now = (uint64_t)ckpt_mono_ns();
	/* Round up so the loop does not spin on a sub-millisecond remainder. */
	int64_t left_ms = now >= due ? 0 : (int64_t)((due - now + 999999) / 1000000);

	if (timeout_ms < 0 || left_ms < timeout_ms)
		return (int)left_ms;
	return timeout_ms;
}

void notify_watchdog_tick(void)
{
	if (!watchdog_ns)
		return;
	uint64_t now = (uint64_t)ckpt_mono_ns();

	if (now - watchdog_last_ns >= watchdog_ns / 2) {
		watchdog_last_ns = now;
		sd_notify(0, "WATCHDOG=1");
	}
}

#else /* !CKPT_HAVE_SYSTEMD */

bool notify_supported(void)
{
	return false;
}

void notify_status(const char *fmt, ...)
{
}

void notify_ready(const char *fmt, ...)
{
}

void notify_stopping(const char *fmt, ...)
{
}

void notify_failed(int err, const char *fmt, ...)
{
}

int notify_watchdog_timeout(int timeout_ms)
{
	return timeout_ms;
}

void notify_watchdog_tick(void)
{
}

#endif
