/* SPDX-License-Identifier: MIT */
/*
 * ckptd metrics: the Prometheus text exposition (HELP/TYPE lines, label
 * escaping, cumulative histogram buckets with _sum and _count, value
 * spelling), label-count checks, the series limit, lock-free updates from
 * several threads, metrics_listen parsing, webhook_events parsing, and the
 * real HTTP endpoint (libmicrohttpd) answering /metrics, /healthz and
 * refusing the rest.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ckpt-build-config.h"
#include "events.h"
#include "log.h"
#include "metrics.h"

static int failures;

#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, \
				#cond);                                              \
			failures++;                                                  \
		}                                                                    \
	} while (0)

static char *render(void)
{
	char *out = NULL;
	size_t len = 0;

	CHECK(metrics_render(&out, &len) == 0);
	CHECK(out && strlen(out) == len);
	return out;
}

/* The line of the exposition that starts with `prefix` followed by a blank,
 * or NULL. */
static const char *find_line(const char *text, const char *prefix)
{
	size_t n = strlen(prefix);

	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (!strncmp(p, prefix, n) && p[n] == ' ')
			return p;
	return NULL;
}

static double line_value(const char *text, const char *prefix)
{
	const char *l = find_line(text, prefix);

	return l ? strtod(l + strlen(prefix) + 1, NULL) : -1;
}

static void test_format(void)
{
	metrics_reset();
	metrics_init();
	metrics_inc(M_SAVES_TOTAL, "job-a", "committed");
	metrics_inc(M_SAVES_TOTAL, "job-a", "committed");
	metrics_inc(M_SAVES_TOTAL, "job-a", "failed");
	/* A hostile label value: quote, backslash, newline. */
	metrics_add(M_STAGED_BYTES_TOTAL, 4096, "we\"ird\\job\nname");
	metrics_add(M_WRITTEN_BYTES_TOTAL, 1.5, "x");
	metrics_add(M_WRITTEN_BYTES_TOTAL, -7, "x");   /* counters never go down */
	metrics_set(M_PEERS_UP, 3);
	metrics_set(M_NEWEST_COMMITTED_STEP, 1234567, "job-a", "root");
	metrics_observe(M_TIME_TO_COMMITTED_SECONDS, 0.005, "job-a");  /* first bucket */
	metrics_observe(M_TIME_TO_COMMITTED_SECONDS, 0.3, "job-a");    /* le=0.5 */
	metrics_observe(M_TIME_TO_COMMITTED_SECONDS, 0.5, "job-a");    /* le=0.5: bounds inclusive */
	metrics_observe(M_TIME_TO_COMMITTED_SECONDS, 1000, "job-a");   /* only +Inf */
	/* Wrong label counts are dropped, and counted. */
	metrics_inc(M_SAVES_TOTAL, "job-a");
	metrics_set(M_PEERS_UP, 1, "extra");

	char *t = render();
	if (!t)
		return;
	CHECK(strstr(t, "# HELP ckpt_saves_total "));
	CHECK(strstr(t, "# TYPE ckpt_saves_total counter\n"));
	CHECK(strstr(t, "# TYPE ckpt_peers_up gauge\n"));
	CHECK(strstr(t, "# TYPE ckpt_time_to_committed_seconds histogram\n"));
	CHECK(line_value(t, "ckpt_saves_total{ckpt_job=\"job-a\",outcome=\"committed\"}") == 2);
	CHECK(line_value(t, "ckpt_saves_total{ckpt_job=\"job-a\",outcome=\"failed\"}") == 1);
	CHECK(find_line(t, "ckpt_staged_bytes_total{ckpt_job=\"we\\\"ird\\\\job\\nname\"}"));
	CHECK(strstr(t, "\nckpt_written_bytes_total{ckpt_job=\"x\"} 1.5\n"));
	CHECK(line_value(t, "ckpt_peers_up") == 3);
	CHECK(find_line(t, "ckpt_newest_committed_step{ckpt_job=\"job-a\",tier=\"root\"}") &&
	      strstr(t, "tier=\"root\"} 1234567\n"));
	CHECK(line_value(t, "ckpt_build_info{version=\"" CKPT_VERSION "\"}") == 1);
	CHECK(line_value(t, "ckpt_metrics_series_dropped_total") == 2);

	/* Buckets are cumulative, end in +Inf, and _count equals it. */
	const char *h = "ckpt_time_to_committed_seconds_bucket{ckpt_job=\"job-a\",le=";
	char key[256];
	snprintf(key, sizeof(key), "%s\"0.01\"}", h);
	CHECK(line_value(t, key) == 1);
	snprintf(key, sizeof(key), "%s\"0.025\"}", h);
	CHECK(line_value(t, key) == 1);
	snprintf(key, sizeof(key), "%s\"0.25\"}", h);
	CHECK(line_value(t, key) == 1);
	snprintf(key, sizeof(key), "%s\"0.5\"}", h);
	CHECK(line_value(t, key) == 3);
	snprintf(key, sizeof(key), "%s\"600\"}", h);
	CHECK(line_value(t, key) == 3);
	snprintf(key, sizeof(key), "%s\"+Inf\"}", h);
	CHECK(line_value(t, key) == 4);
	CHECK(line_value(t, "ckpt_time_to_committed_seconds_count{ckpt_job=\"job-a\"}") == 4);
	CHECK(line_value(t, "ckpt_time_to_committed_seconds_sum{ckpt_job=\"job-a\"}") > 1000.8 &&
	      line_value(t, "ckpt_time_to_committed_seconds_sum{ckpt_job=\"job-a\"}") < 1000.81);

	/* Every bucket line's count never decreases along the series. */
	double prev = -1;
	unsigned buckets = 0;
	for (const char *p = strstr(t, h); p; p = strstr(p + 1, h)) {
		const char *sp = strchr(p, ' ');
		double v = strtod(sp + 1, NULL);
		CHECK(v >= prev);
		prev = v;
		buckets++;
	}
	CHECK(buckets == 16); /* 15 bounds and +Inf */

	/* Each sample line is NAME[{...}] VALUE; HELP text has no raw
	 * newline (every line starts with '#' or "ckpt_"). */
	for (const char *p = t; *p; p = strchr(p, '\n') + 1) {
		CHECK(*p == '#' || !strncmp(p, "ckpt_", 5));
		if (!strchr(p, '\n'))
			break;
	}
	CHECK(t[strlen(t) - 1] == '\n');
	free(t);
}

/* The save stall histogram (STALL reports): 100 us .. 60 s, 18 bounds. */
static void test_stall_histogram(void)
{
	const char *h = "ckpt_save_stall_seconds_bucket{ckpt_job=\"j\",le=";
	char key[256];
	unsigned buckets = 0;

	metrics_reset();
	metrics_observe(M_SAVE_STALL_SECONDS, 0.00005, "j"); /* first bucket */
	metrics_observe(M_SAVE_STALL_SECONDS, 0.0001, "j");  /* bounds inclusive */
	metrics_observe(M_SAVE_STALL_SECONDS, 0.04, "j");    /* le=0.05 */
	metrics_observe(M_SAVE_STALL_SECONDS, 59, "j");      /* le=60 */
	metrics_observe(M_SAVE_STALL_SECONDS, 61, "j");      /* only +Inf */
	metrics_add(M_SAVE_STALL_SECONDS_TOTAL, 0.5, "j");

	char *t = render();
	if (!t)
		return;
	CHECK(strstr(t, "# TYPE ckpt_save_stall_seconds histogram\n"));
	CHECK(strstr(t, "# TYPE ckpt_save_stall_seconds_total counter\n"));
	snprintf(key, sizeof(key), "%s\"0.0001\"}", h);
	CHECK(line_value(t, key) == 2);
	snprintf(key, sizeof(key), "%s\"0.025\"}", h);
	CHECK(line_value(t, key) == 2);
	snprintf(key, sizeof(key), "%s\"0.05\"}", h);
	CHECK(line_value(t, key) == 3);
	snprintf(key, sizeof(key), "%s\"30\"}", h);
	CHECK(line_value(t, key) == 3);
	snprintf(key, sizeof(key), "%s\"60\"}", h);
	CHECK(line_value(t, key) == 4);
	snprintf(key, sizeof(key), "%s\"+Inf\"}", h);
	CHECK(line_value(t, key) == 5);
	CHECK(line_value(t, "ckpt_save_stall_seconds_count{ckpt_job=\"j\"}") == 5);
	CHECK(line_value(t, "ckpt_save_stall_seconds_total{ckpt_job=\"j\"}") == 0.5);
	for (const char *p = strstr(t, h); p; p = strstr(p + 1, h))
		buckets++;
	CHECK(buckets == 19); /* 18 bounds and +Inf */
	free(t);
}

static void test_series_limit(void)
{
	char name[32];

	metrics_reset();
	for (int i = 0; i < METRICS_MAX_SERIES + 10; i++) {
		snprintf(name, sizeof(name), "job%d", i);
		metrics_inc(M_STAGED_BYTES_TOTAL, name);
	}
	CHECK(metrics_get(M_STAGED_BYTES_TOTAL, "job0") == 1);
	CHECK(metrics_get(M_STAGED_BYTES_TOTAL, "job130") == 0);
	CHECK(metrics_get(M_METRICS_SERIES_DROPPED_TOTAL) == 10);
}

#define THREADS 4
#define PER_THREAD 100000

static void *hammer(void *arg)
{
	const char *job = arg;

	for (int i = 0; i < PER_THREAD; i++) {
		metrics_inc(M_SAVES_TOTAL, job, "committed");
		metrics_add(M_WRITTEN_BYTES_TOTAL, 4096, "shared");
		metrics_observe(M_TIME_TO_DURABLE_SECONDS, 0.1, "shared");
		if (i % 1000 == 0) {
			char *t = NULL;
			size_t len;
			if (metrics_render(&t, &len) == 0)
				free(t);
		}
	}
	return NULL;
}

static void test_threads(void)
{
	static const char *const jobs[THREADS] = { "a", "b", "a", "b" };
	pthread_t th[THREADS];

	metrics_reset();
	for (int i = 0; i < THREADS; i++)
		CHECK(pthread_create(&th[i], NULL, hammer, (void *)jobs[i]) == 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	CHECK(metrics_get(M_SAVES_TOTAL, "a", "committed") == 2.0 * PER_THREAD);
	CHECK(metrics_get(M_SAVES_TOTAL, "b", "committed") == 2.0 * PER_THREAD);
	CHECK(metrics_get(M_WRITTEN_BYTES_TOTAL, "shared") == 4096.0 * THREADS * PER_THREAD);
	char *t = render();
	char want[128];
	snprintf(want, sizeof(want), "ckpt_time_to_durable_seconds_count{ckpt_job=\"shared\"} %d\n",
		 THREADS * PER_THREAD);
	CHECK(t && strstr(t, want));
	free(t);
}

static void test_listen_parse(void)
{
	struct sockaddr_storage ss;
	unsigned len = 0;

	CHECK(metrics_listen_parse("127.0.0.1:9464", &ss, &len) == 0);
	CHECK(ss.ss_family == AF_INET && len == sizeof(struct sockaddr_in));
	CHECK(ntohs(((struct sockaddr_in *)&ss)->sin_port) == 9464);
	CHECK(metrics_listen_parse("[::1]:0", &ss, &len) == 0 && ss.ss_family == AF_INET6);
	CHECK(metrics_listen_parse("0.0.0.0:65535", NULL, NULL) == 0);
	CHECK(metrics_listen_parse("", NULL, NULL) == 1);
	CHECK(metrics_listen_parse("off", NULL, NULL) == 1);
	CHECK(metrics_listen_parse("127.0.0.1", NULL, NULL) == -EINVAL);
	CHECK(metrics_listen_parse("127.0.0.1:65536", NULL, NULL) == -EINVAL);
	CHECK(metrics_listen_parse("127.0.0.1:-1", NULL, NULL) == -EINVAL);
	CHECK(metrics_listen_parse("127.0.0.1: 80", NULL, NULL) == -EINVAL);
	CHECK(metrics_listen_parse("localhost:80", NULL, NULL) == -EINVAL);
	CHECK(metrics_listen_parse("::1:80", NULL, NULL) == -EINVAL);
	CHECK(metrics_listen_parse("[::1:80", NULL, NULL) == -EINVAL);
}

static void test_events_list(void)
{
	char err[256];
	unsigned mask = 0;

	CHECK(events_parse_list("all", &mask, err, sizeof(err)) == 0 &&
	      mask == (1u << EVENT__COUNT) - 1);
	CHECK(events_parse_list("failed, stall", &mask, err, sizeof(err)) == 0 &&
	      mask == ((1u << EVENT_FAILED) | (1u << EVENT_STALL)));
	CHECK(events_parse_list("", &mask, err, sizeof(err)) == 0 && mask == 0);
	CHECK(events_parse_list("committed,bogus", &mask, err, sizeof(err)) == -EINVAL &&
	      strstr(err, "bogus"));
	/* Not started: entry points are no-ops. */
	CHECK(!events_wanted(EVENT_FAILED));
	events_save_failed("j", 1, "r");
	events_s3_upload_failed("j", 1, 3, "r");
	events_peer_lost("p", "r");
}

/* One HTTP/1.0 request over a plain socket; the whole answer. */
static char *http(unsigned port, const char *method, const char *path)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	char req[256], *buf = NULL;
	size_t len = 0, cap = 0;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	int n = snprintf(req, sizeof(req), "%s %s HTTP/1.0\r\nHost: localhost\r\n\r\n", method, path);
	if (write(fd, req, (size_t)n) != n) {
		close(fd);
		return NULL;
	}
	for (;;) {
		if (len + 4097 > cap) {
			char *nb = realloc(buf, cap = cap ? cap * 2 : 8192);
			if (!nb)
				break;
			buf = nb;
		}
		ssize_t r = read(fd, buf + len, cap - len - 1);
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	if (buf)
		buf[len] = 0;
	return buf;
}

static void test_http(void)
{
	char dir[] = "/tmp/test-metrics-XXXXXX", path[64];
	struct metrics_http *h = NULL;
	unsigned port = 0;
	char *r;

	CHECK(metrics_http_start("off", NULL, &h) == 0 && h == NULL);
	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/port", dir);
	metrics_reset();
	metrics_init();
	metrics_inc(M_SAVES_TOTAL, "j", "skipped");
	CHECK(metrics_http_start("127.0.0.1:0", path, &h) == 0 && h);
	FILE *f = fopen(path, "r");
	CHECK(f && fscanf(f, "%u", &port) == 1 && port > 0);
	if (f)
		fclose(f);
	if (!h || !port)
		goto out;

	r = http(port, "GET", "/metrics");
	CHECK(r && !strncmp(r, "HTTP/1.", 7) && !strncmp(r + 8, " 200 ", 5) &&
	      strstr(r, "text/plain; version=0.0.4"));
	CHECK(r && strstr(r, "\r\n\r\n# HELP ckpt_saves_total ") &&
	      strstr(r, "ckpt_saves_total{ckpt_job=\"j\",outcome=\"skipped\"} 1\n"));
	free(r);
	r = http(port, "GET", "/healthz");
	CHECK(r && strstr(r, " 200 ") && strstr(r, "\r\n\r\nok\n"));
	free(r);
	r = http(port, "GET", "/nope");
	CHECK(r && strstr(r, " 404 "));
	free(r);
	r = http(port, "POST", "/metrics");
	CHECK(r && strstr(r, " 405 "));
	free(r);
	metrics_http_stopping(h);
	r = http(port, "GET", "/healthz");
	CHECK(r && strstr(r, " 503 "));
	free(r);

	/* A second endpoint on the same port is refused, not fatal. */
	char taken[32];
	struct metrics_http *h2 = NULL;
	snprintf(taken, sizeof(taken), "127.0.0.1:%u", port);
	CHECK(metrics_http_start(taken, NULL, &h2) < 0 && h2 == NULL);
out:
	metrics_http_stop(h);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	/* Only errors: the endpoint logs its address at info. */
	ckptd_log_level = LOG_LEVEL_ERROR;
	test_format();
	test_stall_histogram();
	test_series_limit();
	test_threads();
	test_listen_parse();
	test_events_list();
	test_http();
	metrics_reset();
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("test-metrics: all checks passed\n");
	return 0;
}
