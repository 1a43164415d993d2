/* SPDX-License-Identifier: MIT */
/*
 * The webhook sender (see events.h). One mutex guards the queue and the
 * token bucket; callers hold it for a few hundred nanoseconds, never
 * while a request is in flight: the sender copies an event out, unlocks,
 * and only then talks to the network.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "ckpt-build-config.h"
#include "clock.h"
#include "config.h"
#include "events.h"
#include "log.h"
#include "metrics.h"

#define ATTEMPTS 3                 /* one request and two retries */
#define REQUEST_TIMEOUT_MS 10000
#define CONNECT_TIMEOUT_MS 5000
#define FLUSH_SECONDS 5.0          /* at exit, for what is still queued */

struct event {
	enum event_kind kind;
	char job[130];
	char peer[128];
	char reason[256];
	uint64_t step;
	int64_t rank;
	double seconds;
	int64_t bytes;
	uint32_t ranks;
	unsigned attempts;
	unsigned repeated;     /* identical events merged into this one */
	double time;           /* unix seconds of the newest */
};

static const char *const kind_names[EVENT__COUNT] = {
	[EVENT_COMMITTED] = "committed",
	[EVENT_FAILED] = "failed",
	[EVENT_SKIPPED] = "skipped",
	[EVENT_S3_FAILED] = "s3_failed",
	[EVENT_STALL] = "stall",
	[EVENT_PEER_LOST] = "peer_lost",
	[EVENT_S3_BACKLOG] = "s3_backlog",
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t thread;
	bool running;
	bool stop;
	double flush_deadline;     /* monotonic seconds, once stopping */
	struct event *queue;       /* ring of cap entries */
	unsigned cap, head, n;
	double tokens, rate_per_s, burst, refilled_at;
	char *url;
	char where[256];           /* scheme://host[:port], for logs */
	char host[128];            /* this machine, in messages */
	atomic_uint mask;          /* kinds sent; 0 when not started */
} ev = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

const char *event_kind_name(enum event_kind kind)
{
	return (unsigned)kind < EVENT__COUNT ? kind_names[kind] : "?";
}

int events_parse_list(const char *text, unsigned *mask, char *err, size_t errlen)
{
	const char *p = text ? text : "";
	unsigned m = 0;

	while (*p) {
		size_t len;
		unsigned k;

		p += strspn(p, ", \t");
		len = strcspn(p, ", \t");
		if (!len)
			break;
		if (len == 3 && !strncmp(p, "all", 3)) {
			m |= (1u << EVENT__COUNT) - 1;
		} else {
			for (k = 0; k < EVENT__COUNT; k++)
				if (strlen(kind_names[k]) == len && !strncmp(p, kind_names[k], len))
					break;
			if (k == EVENT__COUNT) {
				snprintf(err, errlen,
					 "unknown event '%.*s' (expected all, committed, failed, "
					 "skipped, s3_failed, s3_backlog, stall or peer_lost)", (int)len, p);
				return -EINVAL;
			}
			m |= 1u << k;
		}
		p += len;
	}
	*mask = m;
	return 0;
}

int events_list_check(struct ckptd_config *cfg, const char *value, char *msg, size_t msglen)
{
	unsigned mask;

	(void)cfg;
	return events_parse_list(value, &mask, msg, msglen);
}

int events_url_check(struct ckptd_config *cfg, const char *value, char *msg, size_t msglen)
{
	(void)cfg;
	if (!*value || !strncmp(value, "http://", 7) || !strncmp(value, "https://", 8))
		return 0;
	snprintf(msg, msglen, "not an http:// or https:// URL (value not shown)");
	return -EINVAL;
}

bool events_wanted(enum event_kind kind)
{
	return (unsigned)kind < EVENT__COUNT &&
	       (atomic_load_explicit(&ev.mask, memory_order_relaxed) & (1u << kind));
}

static double unix_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Printable ASCII only: reasons quote paths and names that may hold any
 * byte, and a JSON string must be valid UTF-8. */
static void copy_text(char *dst, size_t cap, const char *src)
{
	size_t i = 0;

	for (; src && *src && i + 1 < cap; src++)
		dst[i++] = (*src >= 0x20 && *src < 0x7f) ? *src : '?';
	dst[i] = 0;
}

/* Reasons equal but for their numbers ("step 11" vs "step 12"). */
static bool same_modulo_digits(const char *a, const char *b)
{
	for (;;) {
		if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
			while (isdigit((unsigned char)*a))
				a++;
			while (isdigit((unsigned char)*b))
				b++;
			continue;
		}
		if (*a != *b)
			return false;
		if (!*a)
			return true;
		a++;
		b++;
	}
}

static bool same_event(const struct event *a, const struct event *b)
{
	return a->kind == b->kind && a->rank == b->rank && !strcmp(a->job, b->job) &&
	       !strcmp(a->peer, b->peer) && same_modulo_digits(a->reason, b->reason);
}

static void emit(const struct event *e)
{
	if (!events_wanted(e->kind))
		return;
	pthread_mutex_lock(&ev.lock);
	if (!ev.running || ev.stop) {
		pthread_mutex_unlock(&ev.lock);
		return;
	}
	for (unsigned i = 0; i < ev.n; i++) {
		struct event *q = &ev.queue[(ev.head + i) % ev.cap];

		if (same_event(q, e)) {
			/* The newest numbers win; the count says how many
			 * this message stands for. */
			unsigned repeated = q->repeated + 1 + e->repeated;
			*q = *e;
			q->repeated = repeated;
			pthread_mutex_unlock(&ev.lock);
			metrics_inc(M_WEBHOOK_EVENTS_TOTAL, "coalesced");
			return;
		}
	}
	if (ev.n == ev.cap) {
		pthread_mutex_unlock(&ev.lock);
		metrics_inc(M_WEBHOOK_EVENTS_TOTAL, "dropped");
		return;
	}
	ev.queue[(ev.head + ev.n) % ev.cap] = *e;
	ev.n++;
	pthread_cond_signal(&ev.cond);
	pthread_mutex_unlock(&ev.lock);
}

static void event_init(struct event *e, enum event_kind kind, const char *job)
{
	memset(e, 0, sizeof(*e));
	e->kind = kind;
	e->step = EVENT_NO_STEP;
	e->rank = -1;
	e->seconds = -1;
	e->bytes = -1;
	e->time = unix_now();
	copy_text(e->job, sizeof(e->job), job);
}

void events_committed(const char *job, uint64_t step, uint32_t ranks, double seconds,
		      int64_t bytes)
{
	struct event e;

	if (!events_wanted(EVENT_COMMITTED))
		return;
	event_init(&e, EVENT_COMMITTED, job);
	e.step = step;
	e.ranks = ranks;
	e.seconds = seconds;
	e.bytes = bytes;
	emit(&e);
}

void events_save_failed(const char *job, uint64_t step, const char *reason)
{
	struct event e;

	if (!events_wanted(EVENT_FAILED))
		return;
	event_init(&e, EVENT_FAILED, job);
	e.step = step;
	copy_text(e.reason, sizeof(e.reason), reason);
	emit(&e);
}

void events_save_skipped(const char *job, uint64_t step, int64_t rank)
{
	struct event e;

	if (!events_wanted(EVENT_SKIPPED))
		return;
	event_init(&e, EVENT_SKIPPED, job);
	e.step = step;
	e.rank = rank;
	copy_text(e.reason, sizeof(e.reason), "no free staging slot (backpressure=skip)");
	emit(&e);
}

void events_stall(const char *job, int64_t rank, double seconds)
{
	struct event e;

	if (!events_wanted(EVENT_STALL))
		return;
	event_init(&e, EVENT_STALL, job);
	e.rank = rank;
	e.seconds = seconds;
	copy_text(e.reason, sizeof(e.reason), "every staging slot busy with saves being written");
	emit(&e);
}

void events_save_stall(const char *job, uint64_t step, int64_t rank, double seconds)
{
	struct event e;

	if (!events_wanted(EVENT_STALL))
		return;
	event_init(&e, EVENT_STALL, job);
	e.step = step;
	e.rank = rank;
	e.seconds = seconds;
	copy_text(e.reason, sizeof(e.reason),
		  "the rank reported its save stalled it (ckpt_save_begin .. ckpt_save_finish)");
	emit(&e);
}

void events_s3_upload_failed(const char *job, uint64_t step, unsigned attempts,
			     const char *reason)
{
	struct event e;

	if (!events_wanted(EVENT_S3_FAILED))
		return;
	event_init(&e, EVENT_S3_FAILED, job);
	e.step = step;
	e.attempts = attempts;
	copy_text(e.reason, sizeof(e.reason), reason);
	emit(&e);
}

void events_s3_backlog(const char *job, uint64_t step, const char *reason)
{
	struct event e;

	if (!events_wanted(EVENT_S3_BACKLOG))
		return;
	event_init(&e, EVENT_S3_BACKLOG, job);
	e.step = step;
	copy_text(e.reason, sizeof(e.reason), reason);
	emit(&e);
}

void events_peer_lost(const char *peer, const char *reason)
{
	struct event e;

	if (!events_wanted(EVENT_PEER_LOST))
		return;
	event_init(&e, EVENT_PEER_LOST, NULL);
	copy_text(e.peer, sizeof(e.peer), peer);
	copy_text(e.reason, sizeof(e.reason), reason);
	emit(&e);
}

/* ---- the sender ---------------------------------------------------------- */

static void human_bytes(char *buf, size_t cap, double b)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	unsigned u = 0;

	while (b >= 1024 && u < 4) {
		b /= 1024;
		u++;
	}
	snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", b, units[u]);
}

static void message_text(const struct event *e, char *buf, size_t cap)
{
	char size[32], more[64] = "";
	int n = snprintf(buf, cap, "ckptd@%s: ", ev.host);

	if (n < 0 || (size_t)n >= cap)
		return;
	buf += n;
	cap -= (size_t)n;
	if (e->repeated)
		snprintf(more, sizeof(more), " (and %u more like it)", e->repeated);
	switch (e->kind) {
	case EVENT_COMMITTED:
		human_bytes(size, sizeof(size), e->bytes > 0 ? (double)e->bytes : 0);
		snprintf(buf, cap, "job %s step %llu committed: %u rank%s, %s in %.2f s%s", e->job,
			 (unsigned long long)e->step, e->ranks, e->ranks == 1 ? "" : "s", size,
			 e->seconds, e->repeated ? " (newest of several)" : "");
		break;
	case EVENT_FAILED:
		snprintf(buf, cap, "job %s step %llu FAILED: %s%s", e->job,
			 (unsigned long long)e->step, e->reason, more);
		break;
	case EVENT_SKIPPED:
		snprintf(buf, cap, "job %s step %llu skipped by rank %lld: %s%s", e->job,
			 (unsigned long long)e->step, (long long)e->rank, e->reason, more);
		break;
	case EVENT_S3_FAILED:
		snprintf(buf, cap, "job %s step %llu: S3 upload failed after %u attempt%s: %s%s",
			 e->job, (unsigned long long)e->step, e->attempts,
			 e->attempts == 1 ? "" : "s", e->reason, more);
		break;
	case EVENT_STALL:
		/* A rank's own report names its step; ckptd's slot watch has none. */
		if (e->step != EVENT_NO_STEP)
			snprintf(buf, cap, "job %s rank %lld: saving step %llu stalled the rank "
				 "for %.3f s%s",
				 e->job, (long long)e->rank, (unsigned long long)e->step,
				 e->seconds, more);
		else
			snprintf(buf, cap, "job %s rank %lld had no free staging slot for %.1f s "
				 "(saves are written slower than they come)%s",
				 e->job, (long long)e->rank, e->seconds, more);
		break;
	case EVENT_PEER_LOST:
		snprintf(buf, cap, "peer %s lost: %s%s", e->peer, e->reason, more);
		break;
	case EVENT_S3_BACKLOG:
		snprintf(buf, cap, "job %s: the checkpoint root keeps steps from %llu on beyond "
			 "keep_last until S3 confirms them: %s%s", e->job,
			 (unsigned long long)e->step, e->reason, more);
		break;
	case EVENT__COUNT:
		break;
	}
}

static char *event_json(const struct event *e)
{
	char text[768];
	json_t *o = json_object();
	char *s;

	if (!o)
		return NULL;
	message_text(e, text, sizeof(text));
	json_object_set_new(o, "text", json_string(text));
	json_object_set_new(o, "event", json_string(kind_names[e->kind]));
	json_object_set_new(o, "host", json_string(ev.host));
	if (e->job[0])
		json_object_set_new(o, "job", json_string(e->job));
	if (e->step != EVENT_NO_STEP)
		json_object_set_new(o, "step", json_integer((json_int_t)e->step));
	if (e->rank >= 0)
		json_object_set_new(o, "rank", json_integer(e->rank));
	if (e->kind == EVENT_COMMITTED)
		json_object_set_new(o, "ranks", json_integer(e->ranks));
	if (e->seconds >= 0)
		json_object_set_new(o, "seconds", json_real(e->seconds));
	if (e->bytes >= 0)
		json_object_set_new(o, "bytes", json_integer(e->bytes));
	if (e->attempts)
		json_object_set_new(o, "attempts", json_integer(e->attempts));
	if (e->peer[0])
		json_object_set_new(o, "peer", json_string(e->peer));
	if (e->reason[0])
		json_object_set_new(o, "reason", json_string(e->reason));
	json_object_set_new(o, "repeated", json_integer(e->repeated));
	json_object_set_new(o, "time", json_real(e->time));
	s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return s;
}

static size_t discard_body(char *ptr, size_t size, size_t nmemb, void *user)
{
	(void)ptr;
	(void)user;
	return size * nmemb;
}

/* One POST; 0 on a 2xx answer, 1 when worth retrying, -1 when not. */
static int post(CURL *curl, const char *body, long timeout_ms, long *status, CURLcode *code)
{
	*status = 0;
	curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
			 timeout_ms < CONNECT_TIMEOUT_MS ? timeout_ms : (long)CONNECT_TIMEOUT_MS);
	*code = curl_easy_perform(curl);
	if (*code != CURLE_OK) {
		metrics_inc(M_WEBHOOK_REQUESTS_TOTAL, "error");
		return *code == CURLE_URL_MALFORMAT || *code == CURLE_UNSUPPORTED_PROTOCOL ? -1 : 1;
	}
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, status);
	if (*status >= 200 && *status < 300) {
		metrics_inc(M_WEBHOOK_REQUESTS_TOTAL, "ok");
		return 0;
	}
	metrics_inc(M_WEBHOOK_REQUESTS_TOTAL, "error");
	return *status == 429 || *status >= 500 || *status == 408 ? 1 : -1;
}

/* Sleep up to `secs`, less when stopping and the flush time runs out. */
static void backoff(double secs)
{
	pthread_mutex_lock(&ev.lock);
	double until = ((double)ckpt_mono_ns() / 1e9) + secs;
	if (ev.stop && ev.flush_deadline < until)
		until = ev.flush_deadline;
	pthread_mutex_unlock(&ev.lock);
	double left = until - ((double)ckpt_mono_ns() / 1e9);
	if (left > 0) {
		struct timespec ts = { (time_t)left, (long)((left - (double)(time_t)left) * 1e9) };
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
}

static void send_event(CURL *curl, const struct event *e)
{
	char *body = event_json(e);
	long status = 0;
	CURLcode code = CURLE_OK;
	int r = -1;

	if (!body) {
		metrics_inc(M_WEBHOOK_EVENTS_TOTAL, "failed");
		return;
	}
	for (unsigned attempt = 1; attempt <= ATTEMPTS; attempt++) {
		long timeout_ms = REQUEST_TIMEOUT_MS;

		pthread_mutex_lock(&ev.lock);
		if (ev.stop) {
			double left = ev.flush_deadline - ((double)ckpt_mono_ns() / 1e9);
			timeout_ms = left < 0.5 ? 500 : left * 1000 < REQUEST_TIMEOUT_MS ? (long)(left * 1000)
											 : REQUEST_TIMEOUT_MS;
		}
		pthread_mutex_unlock(&ev.lock);
		r = post(curl, body, timeout_ms, &status, &code);
		if (r <= 0)
			break;
		if (attempt < ATTEMPTS) {
			/* No URL in the message: it may carry a token. */
			log_warn("events", "webhook request failed, retrying event=%s webhook=%s "
				 "attempt=%u status=%ld error=\"%s\"", kind_names[e->kind], ev.where,
				 attempt, status, code != CURLE_OK ? curl_easy_strerror(code) : "HTTP status");
			backoff(attempt);
		}
	}
	free(body);
	if (r == 0) {
		metrics_inc(M_WEBHOOK_EVENTS_TOTAL, "sent");
		log_debug("events", "webhook sent event=%s job=%s repeated=%u", kind_names[e->kind],
			  e->job[0] ? e->job : "-", e->repeated);
		return;
	}
	metrics_inc(M_WEBHOOK_EVENTS_TOTAL, "failed");
	log_warn("events", "webhook event not delivered event=%s job=%s webhook=%s status=%ld "
		 "error=\"%s\"", kind_names[e->kind], e->job[0] ? e->job : "-", ev.where, status,
		 code != CURLE_OK ? curl_easy_strerror(code) : "HTTP status");
}

static void refill(double now)
{
	ev.tokens += (now - ev.refilled_at) * ev.rate_per_s;
	if (ev.tokens > ev.burst)
		ev.tokens = ev.burst;
	ev.refilled_at = now;
}

static void *sender_main(void *arg)
{
	CURL *curl = arg;

	pthread_mutex_lock(&ev.lock);
	for (;;) {
		double now = ((double)ckpt_mono_ns() / 1e9);

		if (ev.stop && (ev.n == 0 || now >= ev.flush_deadline))
			break;
		if (ev.n == 0) {
			pthread_cond_wait(&ev.cond, &ev.lock);
			continue;
		}
		refill(now);
		if (!ev.stop && ev.tokens < 1) {
			double wait = (1 - ev.tokens) / ev.rate_per_s;
			struct timespec ts;

			clock_gettime(CLOCK_MONOTONIC, &ts);
			double t = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 + wait;
			ts.tv_sec = (time_t)t;
			ts.tv_nsec = (long)((t - (double)(time_t)t) * 1e9);
			pthread_cond_timedwait(&ev.cond, &ev.lock, &ts);
			continue;
		}
		if (!ev.stop)
			ev.tokens -= 1;
		struct event e = ev.queue[ev.head];
		ev.head = (ev.head + 1) % ev.cap;
		ev.n--;
		pthread_mutex_unlock(&ev.lock);
		send_event(curl, &e);
		pthread_mutex_lock(&ev.lock);
	}
	/* Out of time at exit: what is left is dropped, and counted. */
	unsigned left = ev.n;
	ev.n = 0;
	pthread_mutex_unlock(&ev.lock);
	if (left) {
		metrics_add(M_WEBHOOK_EVENTS_TOTAL, left, "dropped");
		log_warn("events", "webhook events dropped at exit count=%u", left);
	}
	return curl;
}

/* scheme://host[:port] of the URL, for logs; -EINVAL if it is no http(s) URL. */
static int url_where(const char *url, char *out, size_t cap)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL, *port = NULL;
	int r = -EINVAL;

	if (!u)
		return -ENOMEM;
	if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
	    (!strcmp(scheme, "http") || !strcmp(scheme, "https"))) {
		curl_url_get(u, CURLUPART_PORT, &port, 0);
		snprintf(out, cap, "%s://%s%s%s", scheme, host, port ? ":" : "", port ? port : "");
		r = 0;
	}
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(u);
	return r;
}

static struct curl_slist *headers;

int events_start(const struct ckptd_config *cfg)
{
	char err[256];
	unsigned mask = 0;
	CURL *curl = NULL;
	int r;

	if (!cfg->webhook_url || !*cfg->webhook_url) {
		log_debug("events", "no webhook_url: events are not sent");
		return 0;
	}
	r = events_parse_list(cfg->webhook_events, &mask, err, sizeof(err));
	if (r < 0) {
		log_error("events", "bad webhook_events error=\"%s\"", err);
		return r;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		log_error("events", "libcurl initialisation failed");
		return -ENOMEM;
	}
	if (url_where(cfg->webhook_url, ev.where, sizeof(ev.where)) < 0) {
		log_error("events", "webhook_url is not an http:// or https:// URL");
		r = -EINVAL;
		goto fail;
	}
	if (gethostname(ev.host, sizeof(ev.host) - 1) < 0)
		snprintf(ev.host, sizeof(ev.host), "?");
	ev.url = strdup(cfg->webhook_url);
	ev.cap = cfg->webhook_queue ? cfg->webhook_queue : 1;
	ev.queue = calloc(ev.cap, sizeof(*ev.queue));
	curl = curl_easy_init();
	headers = curl_slist_append(NULL, "Content-Type: application/json");
	if (!ev.url || !ev.queue || !curl || !headers) {
		r = -ENOMEM;
		goto fail;
	}
	curl_easy_setopt(curl, CURLOPT_URL, ev.url);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(curl, CURLOPT_USERAGENT, "ckptd/" CKPT_VERSION);
	/* No signals from a thread (name resolution timeouts); no
	 * redirects, no other protocols. */
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard_body);
	ev.rate_per_s = cfg->webhook_rate / 60.0;
	ev.burst = cfg->webhook_rate < 1 ? 1 : cfg->webhook_rate;
	ev.tokens = ev.burst;
	ev.refilled_at = ((double)ckpt_mono_ns() / 1e9);
	ev.head = ev.n = 0;
	ev.stop = false;
	ev.running = true;
	r = -pthread_create(&ev.thread, NULL, sender_main, curl);
	if (r < 0) {
		ev.running = false;
		goto fail;
	}
	atomic_store(&ev.mask, mask);
	log_info("events", "sending events webhook=%s events=%s rate_per_minute=%u queue=%u", ev.where,
		 cfg->webhook_events, cfg->webhook_rate, ev.cap);
	return 0;
fail:
	if (r == -ENOMEM)
		log_error("events", "out of memory starting the webhook sender");
	curl_easy_cleanup(curl);
	curl_slist_free_all(headers);
	headers = NULL;
	free(ev.queue);
	ev.queue = NULL;
	free(ev.url);
	ev.url = NULL;
	curl_global_cleanup();
	return r;
}

void events_stop(void)
{
	pthread_mutex_lock(&ev.lock);
	if (!ev.running) {
		pthread_mutex_unlock(&ev.lock);
		return;
	}
	atomic_store(&ev.mask, 0u);
	ev.stop = true;
	ev.flush_deadline = ((double)ckpt_mono_ns() / 1e9) + FLUSH_SECONDS;
	pthread_cond_broadcast(&ev.cond);
	pthread_mutex_unlock(&ev.lock);
	/* The sender owns the curl handle until it returns it. */
	void *curl = NULL;
	pthread_join(ev.thread, &curl);
	pthread_mutex_lock(&ev.lock);
	ev.running = false;
	pthread_mutex_unlock(&ev.lock);
	curl_easy_cleanup(curl);
	curl_slist_free_all(headers);
	headers = NULL;
	free(ev.queue);
	ev.queue = NULL;
	free(ev.url);
	ev.url = NULL;
	curl_global_cleanup();
}
