/* SPDX-License-Identifier: MIT */
/*
 * ckptd logging. Each line is built in a local buffer and written with one
 * write(2): lines from different threads never interleave (a pipe takes
 * writes up to PIPE_BUF atomically, an O_APPEND file any size), and no lock
 * is needed. Control characters in messages are escaped so that a hostile
 * name cannot forge log lines.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

/* Set once at start-up from the configuration, read by every thread. */
enum log_level ckptd_log_level = LOG_LEVEL_INFO;

static const char *const level_names[] = {
	[LOG_LEVEL_ERROR] = "error",
	[LOG_LEVEL_WARN] = "warn",
	[LOG_LEVEL_INFO] = "info",
	[LOG_LEVEL_DEBUG] = "debug",
};

/* One line at most; longer messages are cut and marked with "...". */
#define LOG_LINE_MAX PIPE_BUF

/* Copy src into dst (room for cap bytes, no NUL), escaping control
 * characters and DEL as \xNN. Returns the bytes written. */
static size_t escape_into(char *dst, size_t cap, const char *src, bool *cut)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = 0;

	for (const unsigned char *p = (const unsigned char *)src; *p; p++) {
		if (*p < 0x20 || *p == 0x7f) {
			if (n + 4 > cap) {
				*cut = true;
				break;
			}
			dst[n++] = '\\';
			dst[n++] = 'x';
			dst[n++] = hex[*p >> 4];
			dst[n++] = hex[*p & 15];
		} else {
			if (n + 1 > cap) {
				*cut = true;
				break;
			}
			dst[n++] = (char)*p;
		}
	}
	return n;
}

void ckptd_log_write(enum log_level level, const char *subsys, const char *fmt, ...)
{
	int saved_errno = errno; /* callers log and then return -errno */
	char msg[LOG_LINE_MAX];
	char line[LOG_LINE_MAX];
	struct timespec ts;
	struct tm tm;
	size_t n = 0;
	bool cut = false;
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (r < 0)
		snprintf(msg, sizeof(msg), "(unformattable message: %s)", fmt);
	else if ((size_t)r >= sizeof(msg))
		cut = true;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
	r = snprintf(line + n, sizeof(line) - n, ".%03ldZ %s %s: ", ts.tv_nsec / 1000000L,
		     (unsigned)level < sizeof(level_names) / sizeof(level_names[0])
			     ? level_names[level] : "?",
		     subsys ? subsys : "-");
	if (r > 0)
		n += (size_t)r;
	if (n > sizeof(line) - 5)
		n = sizeof(line) - 5;
	/* Keep 4 bytes for "...\n". */
	n += escape_into(line + n, sizeof(line) - 4 - n, msg, &cut);
	if (cut) {
		memcpy(line + n, "...", 3);
		n += 3;
	}
	line[n++] = '\n';

	while (write(STDERR_FILENO, line, n) < 0 && errno == EINTR)
		;
	errno = saved_errno;
}
