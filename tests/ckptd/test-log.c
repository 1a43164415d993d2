/* SPDX-License-Identifier: MIT */
/*
 * ckptd logging: the line format, level filtering, escaping of control
 * characters, truncation, errno preserved, and whole lines from threads.
 * stderr is redirected to a file for the test.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

static int failures;

#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(report, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, \
				#cond);                                              \
			failures++;                                                  \
		}                                                                    \
	} while (0)

static FILE *report; /* the real stderr, for failures */
static char path[] = "/tmp/test-log-XXXXXX";
static int log_fd;

/* Everything logged since the last call, NUL-terminated (caller frees). */
static char *take_log(size_t *len_out)
{
	off_t len = lseek(log_fd, 0, SEEK_END);
	char *buf = malloc((size_t)len + 1);

	if (!buf || pread(log_fd, buf, (size_t)len, 0) != len)
		abort();
	buf[len] = '\0';
	if (ftruncate(log_fd, 0) != 0)
		abort();
	if (len_out)
		*len_out = (size_t)len;
	return buf;
}

static bool matches(const char *pattern, const char *text)
{
	regex_t re;
	bool ok;

	if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0)
		abort();
	ok = regexec(&re, text, 0, NULL, 0) == 0;
	regfree(&re);
	return ok;
}

#define LINE_RE "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z "

#define THREADS 4
#define LINES_PER_THREAD 500

static void *log_many(void *arg)
{
	long id = (long)arg;

	for (int i = 0; i < LINES_PER_THREAD; i++)
		log_info("thread", "id=%ld line=%d padding=%0200d", id, i, 0);
	return NULL;
}

int main(void)
{
	char *out;
	size_t len;
	int fd;

	fd = dup(STDERR_FILENO);
	report = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!report)
		return 1;
	setvbuf(report, NULL, _IONBF, 0);
	/* O_APPEND: the test truncates the file between checks. */
	log_fd = mkstemp(path);
	if (log_fd < 0 || fcntl(log_fd, F_SETFL, O_APPEND) != 0 ||
	    dup2(log_fd, STDERR_FILENO) < 0) {
		fprintf(report, "cannot redirect stderr: %s\n", strerror(errno));
		return 1;
	}
	unlink(path);

	/* Default level is info. */
	CHECK(ckptd_log_level == LOG_LEVEL_INFO);

	log_warn("writer", "disk %s is %d%% full", "sda", 93);
	out = take_log(&len);
	CHECK(matches("^" LINE_RE "warn writer: disk sda is 93% full\n$", out));
	if (!matches("^" LINE_RE, out))
		fprintf(report, "got: %s", out);
	free(out);

	log_error("coord", "e");
	log_info("server", "i");
	log_debug("server", "hidden");
	out = take_log(NULL);
	CHECK(matches("^" LINE_RE "error coord: e\n" LINE_RE "info server: i\n$", out));
	free(out);

	/* Arguments are not evaluated below the level. */
	int evaluated = 0;
	log_debug("server", "%d", ++evaluated);
	CHECK(evaluated == 0);
	ckptd_log_level = LOG_LEVEL_DEBUG;
	log_debug("server", "%d", ++evaluated);
	CHECK(evaluated == 1);
	ckptd_log_level = LOG_LEVEL_ERROR;
	log_warn("server", "hidden");
	log_info("server", "hidden");
	log_error("server", "shown");
	out = take_log(NULL);
	CHECK(matches("^" LINE_RE "debug server: 1\n" LINE_RE "error server: shown\n$", out));
	free(out);
	ckptd_log_level = LOG_LEVEL_INFO;

	/* A name with a newline cannot forge a second line. */
	log_warn("server", "bad tensor name '%s'", "x\n2026-01-01T00:00:00.000Z error fake\x7f");
	out = take_log(NULL);
	CHECK(matches("^" LINE_RE "warn server: bad tensor name "
			      "'x\\\\x0a2026-01-01T00:00:00\\.000Z error fake\\\\x7f'\n$",
		      out));
	free(out);

	/* Long messages are cut, still one line ending in "...". */
	char *big = malloc(3 * PIPE_BUF);
	memset(big, 'a', 3 * PIPE_BUF - 1);
	big[3 * PIPE_BUF - 1] = '\0';
	log_info("server", "%s", big);
	out = take_log(&len);
	CHECK(len <= PIPE_BUF);
	CHECK(len > 5 && !memcmp(out + len - 4, "...\n", 4));
	CHECK(strchr(out, '\n') == out + len - 1);
	free(out);
	free(big);

	/* errno survives logging: callers log, then return -errno. */
	errno = ENOSPC;
	log_error("writer", "x");
	CHECK(errno == ENOSPC);
	free(take_log(NULL));

	/* Threads: every line whole, none lost. */
	pthread_t threads[THREADS];
	for (long i = 0; i < THREADS; i++)
		if (pthread_create(&threads[i], NULL, log_many, (void *)i) != 0)
			abort();
	for (int i = 0; i < THREADS; i++)
		pthread_join(threads[i], NULL);
	out = take_log(&len);
	int lines = 0, bad = 0;
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		lines++;
		if (!matches("^" LINE_RE "info thread: id=[0-9] line=[0-9]+ padding=0{200}$", line))
			bad++;
	}
	CHECK(lines == THREADS * LINES_PER_THREAD);
	CHECK(bad == 0);
	free(out);

	if (failures)
		fprintf(report, "%d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
