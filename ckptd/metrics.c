/* SPDX-License-Identifier: MIT */
/*
 * The metrics registry and the Prometheus text exposition (format 0.0.4).
 *
 * Each metric has up to METRICS_MAX_SERIES series (label combinations),
 * allocated on first use and never freed while ckptd runs, so a reader can
 * walk them without a lock: a series is filled in completely, then
 * published by a release store of the metric's series count. Values are
 * doubles kept as bits in _Atomic uint64_t (relaxed: a scrape needs no
 * ordering between series). Histogram buckets are counted per bucket and
 * made cumulative when rendered; _count is the sum of the bucket counts
 * read, so it always equals the +Inf bucket of the same scrape.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt-build-config.h"
#include "metrics.h"

#define MAX_BUCKETS 20

/* 10 ms to 10 min: a save of a few MiB on NVMe to a slow parallel file
 * system or a rank that saves tens of GiB. */
static const double duration_buckets[] = {
	0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 600,
};
#define DURATION_BUCKETS (unsigned)(sizeof(duration_buckets) / sizeof(duration_buckets[0]))

/* 100 us to 60 s: a save stalls a rank for its copy into shared memory
 * (about 11 GB/s here: 100 us per MiB) plus any wait for a free slot. */
static const double stall_buckets[] = {
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
};
#define STALL_BUCKETS (unsigned)(sizeof(stall_buckets) / sizeof(stall_buckets[0]))
_Static_assert(DURATION_BUCKETS <= MAX_BUCKETS && STALL_BUCKETS <= MAX_BUCKETS,
	       "a histogram has more buckets than a series holds");

/* The label that names a training job. Not "job": Prometheus gives every
 * scraped series job="<scrape job>" and would rename ours exported_job. */
#define JOB "ckpt_job"

const struct metric_def metric_defs[M__COUNT] = {
	[M_SAVES_TOTAL] = {
		"ckpt_saves_total", METRIC_COUNTER,
		"Checkpoint steps finished on this node, by outcome: committed (manifest written), "
		"skipped (a rank had no free slot under backpressure=skip) or failed.",
		{ JOB, "outcome" } },
	[M_STAGED_BYTES_TOTAL] = {
		"ckpt_staged_bytes_total", METRIC_COUNTER,
		"Bytes of saves handed over by ranks in shared-memory staging slots (accepted SAVEs).",
		{ JOB } },
	[M_WRITTEN_BYTES_TOTAL] = {
		"ckpt_written_bytes_total", METRIC_COUNTER,
		"Bytes written to the checkpoint root (shards and rank indexes).",
		{ JOB } },
	[M_S3_UPLOADED_BYTES_TOTAL] = {
		"ckpt_s3_uploaded_bytes_total", METRIC_COUNTER,
		"Bytes uploaded to S3 (object bodies, retries included).",
		{ JOB } },
	[M_SLOT_WAIT_SECONDS_TOTAL] = {
		"ckpt_slot_wait_seconds_total", METRIC_COUNTER,
		"Seconds, summed over ranks, during which a rank had every staging slot busy with "
		"saves being written: a save begun then waits (backpressure=block) or is skipped. "
		"An upper bound of the stall ckptd causes; ranks report their whole stall in "
		"ckpt_save_stall_seconds.",
		{ JOB } },
	[M_TIME_TO_DURABLE_SECONDS] = {
		"ckpt_time_to_durable_seconds", METRIC_HISTOGRAM,
		"Seconds from a rank's SAVE to its shard and index being durable on the root.",
		{ JOB }, duration_buckets, DURATION_BUCKETS },
	[M_TIME_TO_COMMITTED_SECONDS] = {
		"ckpt_time_to_committed_seconds", METRIC_HISTOGRAM,
		"Seconds from the first SAVE of a step to its manifest being durable (committed).",
		{ JOB }, duration_buckets, DURATION_BUCKETS },
	[M_QUEUE_DEPTH] = {
		"ckpt_queue_depth", METRIC_GAUGE,
		"Work waiting or in progress: write = saves accepted and not yet durable, "
		"commit = steps whose manifest is being written, s3 = steps waiting for upload.",
		{ "queue" } },
	[M_STAGING_USED_BYTES] = {
		"ckpt_staging_used_bytes", METRIC_GAUGE,
		"Shared-memory staging handed to connected ranks (their arenas), in bytes.", { NULL } },
	[M_STAGING_CAPACITY_BYTES] = {
		"ckpt_staging_capacity_bytes", METRIC_GAUGE,
		"The staging budget (staging_bytes), in bytes.", { NULL } },
	[M_IO_URING_IN_FLIGHT] = {
		"ckpt_io_uring_in_flight", METRIC_GAUGE,
		"io_uring requests submitted and not yet completed: write = shard writes and syncs, "
		"read = restore reads.",
		{ "op" } },
	[M_S3_RETRIES_TOTAL] = {
		"ckpt_s3_retries_total", METRIC_COUNTER,
		"S3 requests sent again after a retryable failure.", { NULL } },
	[M_S3_ERRORS_TOTAL] = {
		"ckpt_s3_errors_total", METRIC_COUNTER,
		"Failed S3 requests, by kind of failure.", { "kind" } },
	[M_PEERS_UP] = {
		"ckpt_peers_up", METRIC_GAUGE,
		"Peer ckptd daemons of this node's jobs with a working link.", { NULL } },
	[M_NEWEST_COMMITTED_STEP] = {
		"ckpt_newest_committed_step", METRIC_GAUGE,
		"Newest committed step of a job, per tier (root: the checkpoint root; s3).",
		{ JOB, "tier" } },
	[M_PEER_UP] = {
		"ckpt_peer_up", METRIC_GAUGE,
		"1 while the link to the peer daemon of node <node> works, 0 once it is lost.",
		{ "node" } },
	[M_PEER_REJECTED_TOTAL] = {
		"ckpt_peer_rejected_total", METRIC_COUNTER,
		"Peer messages rejected, by reason: malformed, auth (bad tag), cluster (another "
		"group), epoch (from an old incarnation of the sender), stale (to an old "
		"incarnation of this daemon), conflict (contradicts what this daemon knows).",
		{ "reason" } },
	[M_RESTORE_BYTES_TOTAL] = {
		"ckpt_restore_bytes_total", METRIC_COUNTER,
		"Shard bytes restored into ranks, by the tier they were read from: memory "
		"(the arena a crashed rank left on this node), partner (a partner node's "
		"memory), root (the checkpoint root) or s3 (fetched from S3 into the root, "
		"then read).",
		{ JOB, "tier" } },
	[M_PARTNER_BYTES] = {
		"ckpt_partner_bytes", METRIC_GAUGE,
		"Memory holding partner nodes' shards (bounded by partner_memory).", { NULL } },
	[M_PARTNER_COPIES_TOTAL] = {
		"ckpt_partner_copies_total", METRIC_COUNTER,
		"Partner copies of one rank's shard, by outcome: sent (this node's, to its "
		"partner), received (a partner's, kept here), refused (no room, either side) "
		"or failed.",
		{ "outcome" } },
	[M_ROOT_HELD_FOR_S3_STEPS] = {
		"ckpt_root_steps_held_for_s3", METRIC_GAUGE,
		"Committed steps the checkpoint root keeps beyond keep_last because S3 has not "
		"confirmed them (not uploaded, not verified, or S3 not scanned yet).",
		{ JOB } },
	[M_S3_VERIFY_FAILURES_TOTAL] = {
		"ckpt_s3_verify_failures_total", METRIC_COUNTER,
		"Uploads to S3 stopped because bytes read from the root did not match their "
		"chunk CRC-32C or the index its manifest names.",
		{ JOB } },
	[M_CLIENTS_CONNECTED] = {
		"ckpt_clients_connected", METRIC_GAUGE,
		"Ranks connected (HELLO done).", { NULL } },
	[M_RESTORES_TOTAL] = {
		"ckpt_restores_total", METRIC_COUNTER,
		"Restores answered, by outcome: ok, fell_back (an older step was used because "
		"newer ones did not verify) or failed.",
		{ JOB, "outcome" } },
	[M_RESTORE_BAD_STEPS_TOTAL] = {
		"ckpt_restore_bad_steps_total", METRIC_COUNTER,
		"Committed steps an agreed restore found damaged for the job (a rank's shard "
		"did not verify); every rank then moved to an older step.",
		{ JOB } },
	[M_RESTORE_BUFFERED_FALLBACK_TOTAL] = {
		"ckpt_restore_buffered_fallback_total", METRIC_COUNTER,
		"Shard reads of a restore that the file system refused with O_DIRECT (EINVAL) "
		"and that were done again through the page cache.",
		{ JOB } },
	[M_BUILD_INFO] = {
		"ckpt_build_info", METRIC_GAUGE,
		"Always 1; the version of ckptd in a label.", { "version" } },
	[M_PROCESS_START_TIME_SECONDS] = {
		"ckpt_process_start_time_seconds", METRIC_GAUGE,
		"When ckptd started, in seconds since the Unix epoch.", { NULL } },
	[M_WEBHOOK_EVENTS_TOTAL] = {
		"ckpt_webhook_events_total", METRIC_COUNTER,
		"Webhook events by outcome: sent, failed (gave up after retries), dropped (queue "
		"full or unsent at exit) or coalesced (merged into an identical queued event).",
		{ "outcome" } },
	[M_WEBHOOK_REQUESTS_TOTAL] = {
		"ckpt_webhook_requests_total", METRIC_COUNTER,
		"Webhook HTTP requests, by result (ok: a 2xx answer).", { "result" } },
	[M_METRICS_SERIES_DROPPED_TOTAL] = {
		"ckpt_metrics_series_dropped_total", METRIC_COUNTER,
		"Metric updates dropped: too many label combinations, or a bad label count.",
		{ NULL } },
	[M_SAVE_STALL_SECONDS] = {
		"ckpt_save_stall_seconds", METRIC_HISTOGRAM,
		"Seconds a save stalled its rank, as the rank reports it (STALL): "
		"ckpt_save_begin .. ckpt_save_finish, the copy into shared memory plus any wait "
		"for a free slot. One observation per accepted save of a rank whose libckpt reports.",
		{ JOB }, stall_buckets, STALL_BUCKETS },
	[M_SAVE_STALL_SECONDS_TOTAL] = {
		"ckpt_save_stall_seconds_total", METRIC_COUNTER,
		"Seconds, summed over ranks and saves, that saves stalled their ranks, as the "
		"ranks report them (the sum of ckpt_save_stall_seconds).",
		{ JOB } },
};

struct series {
	char labels[METRICS_MAX_LABELS][METRICS_LABEL_VALUE_MAX];
	_Atomic uint64_t value;                    /* double bits */
	_Atomic uint64_t sum;                      /* histograms: double bits */
	_Atomic uint64_t counts[MAX_BUCKETS + 1];  /* histograms: per bucket, +Inf last */
};

struct metric {
	_Atomic unsigned nseries;                  /* published series */
	struct series *series[METRICS_MAX_SERIES];
};

static struct metric metrics[M__COUNT];
static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned label_count(const struct metric_def *def)
{
	unsigned n = 0;

	while (n < METRICS_MAX_LABELS && def->labels[n])
		n++;
	return n;
}

static double bits_to_double(uint64_t b)
{
	double d;

	memcpy(&d, &b, sizeof(d));
	return d;
}

static uint64_t double_to_bits(double d)
{
	uint64_t b;

	memcpy(&b, &d, sizeof(b));
	return b;
}

static void atomic_add_double(_Atomic uint64_t *a, double v)
{
	uint64_t old = atomic_load_explicit(a, memory_order_relaxed);

	while (!atomic_compare_exchange_weak_explicit(a, &old,
						      double_to_bits(bits_to_double(old) + v),
						      memory_order_relaxed, memory_order_relaxed))
		;
}

static bool labels_match(const struct series *s, unsigned n, const char *const *labels)
{
	for (unsigned i = 0; i < n; i++)
		if (strncmp(s->labels[i], labels[i] ? labels[i] : "", METRICS_LABEL_VALUE_MAX - 1))
			return false;
	return true;
}

static void count_dropped(void);

static struct series *series_get(enum metric_id id, size_t n, const char *const *labels,
				 bool create)
{
	struct metric *m;
	struct series *s = NULL;
	unsigned count, i;

	if ((unsigned)id >= M__COUNT)
		return NULL;
	if (n != label_count(&metric_defs[id])) {
		if (id != M_METRICS_SERIES_DROPPED_TOTAL)
			count_dropped();
		return NULL;
	}
	m = &metrics[id];
	count = atomic_load_explicit(&m->nseries, memory_order_acquire);
	for (i = 0; i < count; i++)
		if (labels_match(m->series[i], (unsigned)n, labels))
			return m->series[i];
	if (!create)
		return NULL;

	pthread_mutex_lock(&create_lock);
	count = atomic_load_explicit(&m->nseries, memory_order_acquire);
	for (; i < count; i++) {
		if (labels_match(m->series[i], (unsigned)n, labels)) {
			s = m->series[i];
			goto out;
		}
	}
	if (count < METRICS_MAX_SERIES && (s = calloc(1, sizeof(*s)))) {
		for (i = 0; i < n; i++)
			snprintf(s->labels[i], sizeof(s->labels[i]), "%s", labels[i] ? labels[i] : "");
		m->series[count] = s;
		atomic_store_explicit(&m->nseries, count + 1, memory_order_release);
	}
out:
	pthread_mutex_unlock(&create_lock);
	if (!s && id != M_METRICS_SERIES_DROPPED_TOTAL)
		count_dropped();
	return s;
}

static void count_dropped(void)
{
	struct series *s = series_get(M_METRICS_SERIES_DROPPED_TOTAL, 0, NULL, true);

	if (s)
		atomic_add_double(&s->value, 1);
}

void metrics_add_v(enum metric_id id, double v, size_t n, const char *const *labels)
{
	struct series *s;

	if ((unsigned)id >= M__COUNT || metric_defs[id].type == METRIC_HISTOGRAM)
		return;
	if (metric_defs[id].type == METRIC_COUNTER && !(v >= 0))
		return;
	s = series_get(id, n, labels, true);
	if (s)
		atomic_add_double(&s->value, v);
}

void metrics_set_v(enum metric_id id, double v, size_t n, const char *const *labels)
{
	struct series *s;

	if ((unsigned)id >= M__COUNT || metric_defs[id].type != METRIC_GAUGE)
		return;
	s = series_get(id, n, labels, true);
	if (s)
		atomic_store_explicit(&s->value, double_to_bits(v), memory_order_relaxed);
}

void metrics_observe_v(enum metric_id id, double v, size_t n, const char *const *labels)
{
	const struct metric_def *def;
	struct series *s;
	unsigned b;

	if ((unsigned)id >= M__COUNT || metric_defs[id].type != METRIC_HISTOGRAM || isnan(v))
		return;
	def = &metric_defs[id];
	s = series_get(id, n, labels, true);
	if (!s)
		return;
	for (b = 0; b < def->nbuckets && v > def->buckets[b]; b++)
		;
	atomic_fetch_add_explicit(&s->counts[b], 1, memory_order_relaxed);
	atomic_add_double(&s->sum, v);
}

double metrics_get_v(enum metric_id id, size_t n, const char *const *labels)
{
	struct series *s;

	if ((unsigned)id >= M__COUNT)
		return 0;
	s = series_get(id, n, labels, false);
	return s ? bits_to_double(atomic_load_explicit(&s->value, memory_order_relaxed)) : 0;
}

void metrics_init(void)
{
	struct timespec ts;

	metrics_set(M_BUILD_INFO, 1, CKPT_VERSION);
	clock_gettime(CLOCK_REALTIME, &ts);
	metrics_set(M_PROCESS_START_TIME_SECONDS, (double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
	/* Series that exist from the start, so that a dashboard shows 0
	 * rather than "no data". */
	metrics_add(M_S3_RETRIES_TOTAL, 0);
	metrics_set(M_PEERS_UP, 0);
	metrics_set(M_CLIENTS_CONNECTED, 0);
	metrics_set(M_QUEUE_DEPTH, 0, "write");
	metrics_set(M_QUEUE_DEPTH, 0, "commit");
	metrics_set(M_IO_URING_IN_FLIGHT, 0, "write");
	metrics_set(M_IO_URING_IN_FLIGHT, 0, "read");
	metrics_set(M_STAGING_USED_BYTES, 0);
	metrics_add(M_METRICS_SERIES_DROPPED_TOTAL, 0);
}

void metrics_reset(void)
{
	pthread_mutex_lock(&create_lock);
	for (unsigned id = 0; id < M__COUNT; id++) {
		unsigned n = atomic_load_explicit(&metrics[id].nseries, memory_order_acquire);

		atomic_store_explicit(&metrics[id].nseries, 0, memory_order_release);
		for (unsigned i = 0; i < n; i++) {
			free(metrics[id].series[i]);
			metrics[id].series[i] = NULL;
		}
	}
	pthread_mutex_unlock(&create_lock);
}

/* ---- exposition ------------------------------------------------------ */

struct buf {
	char *p;
	size_t len, cap;
	bool oom;
};

static void buf_reserve(struct buf *b, size_t more)
{
	if (b->oom || b->len + more + 1 <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < b->len + more + 1)
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (!p) {
		b->oom = true;
		return;
	}
	b->p = p;
	b->cap = cap;
}

static void buf_put(struct buf *b, const char *s, size_t n)
{
	buf_reserve(b, n);
	if (b->oom)
		return;
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
}

static void buf_puts(struct buf *b, const char *s)
{
	buf_put(b, s, strlen(s));
}

static void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	buf_reserve(b, (size_t)n);
	if (b->oom)
		return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/* HELP text escapes backslash and newline; label values also '"'. */
static void buf_escaped(struct buf *b, const char *s, bool quote)
{
	for (; *s; s++) {
		if (*s == '\\')
			buf_puts(b, "\\\\");
		else if (*s == '\n')
			buf_puts(b, "\\n");
		else if (quote && *s == '"')
			buf_puts(b, "\\\"");
		else
			buf_put(b, s, 1);
	}
}

/* Shortest text that reads back as the same double; Prometheus spells
 * the special values NaN, +Inf and -Inf. */
static void format_value(char *out, size_t cap, double v)
{
	if (isnan(v)) {
		snprintf(out, cap, "NaN");
	} else if (isinf(v)) {
		snprintf(out, cap, v > 0 ? "+Inf" : "-Inf");
	} else if (v > -1e15 && v < 1e15 && v == (double)(long long)v) {
		snprintf(out, cap, "%.0f", v);
	} else {
		snprintf(out, cap, "%.15g", v);
		if (strtod(out, NULL) != v)
			snprintf(out, cap, "%.17g", v);
	}
}

/* name{a="x",b="y"[,le="..."]} */
static void put_series_name(struct buf *b, const char *name, const char *suffix,
			    const struct metric_def *def, const struct series *s, const char *le)
{
	unsigned n = label_count(def);

	buf_puts(b, name);
	buf_puts(b, suffix);
	if (n == 0 && !le)
		return;
	buf_puts(b, "{");
	for (unsigned i = 0; i < n; i++) {
		buf_printf(b, "%s%s=\"", i ? "," : "", def->labels[i]);
		buf_escaped(b, s->labels[i], true);
		buf_puts(b, "\"");
	}
	if (le)
		buf_printf(b, "%sle=\"%s\"", n ? "," : "", le);
	buf_puts(b, "}");
}

static void render_metric(struct buf *b, enum metric_id id)
{
	static const char *const type_names[] = { "counter", "gauge", "histogram" };
	const struct metric_def *def = &metric_defs[id];
	unsigned count = atomic_load_explicit(&metrics[id].nseries, memory_order_acquire);
	char num[64];

	buf_printf(b, "# HELP %s ", def->name);
	buf_escaped(b, def->help, false);
	buf_printf(b, "\n# TYPE %s %s\n", def->name, type_names[def->type]);
	for (unsigned i = 0; i < count; i++) {
		const struct series *s = metrics[id].series[i];

		if (def->type != METRIC_HISTOGRAM) {
			put_series_name(b, def->name, "", def, s, NULL);
			format_value(num, sizeof(num),
				     bits_to_double(atomic_load_explicit(&s->value,
									 memory_order_relaxed)));
			buf_printf(b, " %s\n", num);
			continue;
		}
		uint64_t cum = 0;
		for (unsigned k = 0; k <= def->nbuckets; k++) {
			char le[64];

			cum += atomic_load_explicit(&s->counts[k], memory_order_relaxed);
			if (k < def->nbuckets)
				format_value(le, sizeof(le), def->buckets[k]);
			else
				snprintf(le, sizeof(le), "+Inf");
			put_series_name(b, def->name, "_bucket", def, s, le);
			buf_printf(b, " %llu\n", (unsigned long long)cum);
		}
		put_series_name(b, def->name, "_sum", def, s, NULL);
		format_value(num, sizeof(num),
			     bits_to_double(atomic_load_explicit(&s->sum, memory_order_relaxed)));
		buf_printf(b, " %s\n", num);
		put_series_name(b, def->name, "_count", def, s, NULL);
		buf_printf(b, " %llu\n", (unsigned long long)cum);
	}
}

int metrics_render(char **out, size_t *len)
{
	struct buf b = { 0 };

	for (unsigned id = 0; id < M__COUNT; id++)
		render_metric(&b, (enum metric_id)id);
	if (b.oom || !b.p) {
		free(b.p);
		return -ENOMEM;
	}
	*out = b.p;
	*len = b.len;
	return 0;
}
