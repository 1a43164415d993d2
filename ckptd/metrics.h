/* SPDX-License-Identifier: MIT */
/*
 * ckptd metrics: one table of metric definitions (metrics.c), values kept
 * in C11 atomics that any thread updates without locks, and the Prometheus
 * text exposition (format 0.0.4) rendered from them by the HTTP thread
 * (metrics_http.c). docs/METRICS.md lists every metric and its meaning.
 *
 * Labels: every metric has a fixed list of label names (in the table); an
 * update passes one value per name, in that order:
 *
 *   metrics_inc(M_SAVES_TOTAL, job->name, "committed");
 *   metrics_add(M_WRITTEN_BYTES_TOTAL, (double)n, job->name);
 *   metrics_set(M_PEERS_UP, 2);
 *   metrics_observe(M_TIME_TO_COMMITTED_SECONDS, secs, job->name);
 *
 * Cardinality is bounded: label values must come from small sets (job
 * names, fixed words), never ranks, steps or paths. A metric holds at most
 * METRICS_MAX_SERIES label combinations; updates of further ones are
 * dropped and counted (ckpt_metrics_series_dropped_total).
 *
 * Threads: updates are lock-free once a label combination exists; the
 * first update of a new combination takes a short lock. Rendering never
 * blocks an updater. Label values are copied; callers keep theirs.
 */
#ifndef CKPTD_METRICS_H
#define CKPTD_METRICS_H

#include <stddef.h>
#include <stdint.h>

enum metric_id {
	M_SAVES_TOTAL = 0,            /* {ckpt_job, outcome=committed|skipped|failed} */
	M_STAGED_BYTES_TOTAL,         /* {ckpt_job} */
	M_WRITTEN_BYTES_TOTAL,        /* {ckpt_job} */
	M_S3_UPLOADED_BYTES_TOTAL,    /* {ckpt_job}: the S3 tier adds */
	M_SLOT_WAIT_SECONDS_TOTAL,    /* {ckpt_job} */
	M_TIME_TO_DURABLE_SECONDS,    /* histogram {ckpt_job} */
	M_TIME_TO_COMMITTED_SECONDS,  /* histogram {ckpt_job} */
	M_QUEUE_DEPTH,                /* {queue=write|commit|s3} */
	M_STAGING_USED_BYTES,
	M_STAGING_CAPACITY_BYTES,
	M_IO_URING_IN_FLIGHT,         /* {op=write|read} */
	M_S3_RETRIES_TOTAL,           /* the S3 tier increments */
	M_S3_ERRORS_TOTAL,            /* {kind}: the S3 tier increments */
	M_PEERS_UP,                   /* the peer link sets */
	M_NEWEST_COMMITTED_STEP,      /* {ckpt_job, tier=root|s3} */
	M_CLIENTS_CONNECTED,
	M_RESTORES_TOTAL,             /* {ckpt_job, outcome=ok|fell_back|failed} */
	M_BUILD_INFO,                 /* {version} */
	M_PROCESS_START_TIME_SECONDS,
	M_WEBHOOK_EVENTS_TOTAL,       /* {outcome=sent|failed|dropped|coalesced} */
	M_WEBHOOK_REQUESTS_TOTAL,     /* {result=ok|error} */
	M_METRICS_SERIES_DROPPED_TOTAL,
	M_SAVE_STALL_SECONDS,         /* histogram {ckpt_job}: reported by the ranks (STALL) */
	M_SAVE_STALL_SECONDS_TOTAL,   /* {ckpt_job}: the same, summed */
	M_PEER_UP,                    /* {node}: the peer link sets */
	M_PEER_REJECTED_TOTAL,        /* {reason} */
	M_RESTORE_BYTES_TOTAL,        /* {ckpt_job, tier=partner|root|s3} */
	M_PARTNER_BYTES,              /* partner copies held here */
	M_PARTNER_COPIES_TOTAL,       /* {outcome=sent|received|refused|failed} */
	M_RESTORE_BAD_STEPS_TOTAL,    /* {ckpt_job}: steps an agreed restore found damaged */
	M_RESTORE_BUFFERED_FALLBACK_TOTAL, /* {ckpt_job}: O_DIRECT reads refused, read buffered */
	M_ROOT_HELD_FOR_S3_STEPS,     /* {ckpt_job}: root retention kept them for S3 */
	M_S3_VERIFY_FAILURES_TOTAL,   /* {ckpt_job}: an upload read bytes that did not verify */
	M__COUNT
};

enum metric_type { METRIC_COUNTER = 0, METRIC_GAUGE, METRIC_HISTOGRAM };

#define METRICS_MAX_LABELS 3
#define METRICS_MAX_SERIES 128
#define METRICS_LABEL_VALUE_MAX 128

struct metric_def {
	const char *name;             /* exposition name; counters end in _total */
	enum metric_type type;
	const char *help;
	const char *labels[METRICS_MAX_LABELS]; /* label names, NULL-terminated */
	const double *buckets;        /* histograms: upper bounds, ascending */
	unsigned nbuckets;            /* without +Inf */
};

/* The table, indexed by enum metric_id. */
extern const struct metric_def metric_defs[M__COUNT];

/* Set the values that do not change while ckptd runs (build info, start
 * time). Safe to call more than once. */
void metrics_init(void);

/*
 * Updates. `labels` holds n values (n must equal the metric's label count;
 * otherwise the update is dropped). Counters ignore negative additions.
 * Values are doubles; byte counts are exact up to 2^53.
 */
void metrics_add_v(enum metric_id id, double v, size_t n, const char *const *labels);
void metrics_set_v(enum metric_id id, double v, size_t n, const char *const *labels);
void metrics_observe_v(enum metric_id id, double v, size_t n, const char *const *labels);
/* The current value of a counter or gauge series (0 if it does not exist):
 * for tests and for code that reports a total. */
double metrics_get_v(enum metric_id id, size_t n, const char *const *labels);

#define METRICS_LABELS_(...) ((const char *const[]){ NULL, ##__VA_ARGS__ } + 1)
#define METRICS_NLABELS_(...) (sizeof((const char *const[]){ NULL, ##__VA_ARGS__ }) / sizeof(const char *) - 1)
#define metrics_add(id, v, ...) \
	metrics_add_v((id), (v), METRICS_NLABELS_(__VA_ARGS__), METRICS_LABELS_(__VA_ARGS__))
#define metrics_inc(id, ...) metrics_add((id), 1.0, ##__VA_ARGS__)
#define metrics_set(id, v, ...) \
	metrics_set_v((id), (v), METRICS_NLABELS_(__VA_ARGS__), METRICS_LABELS_(__VA_ARGS__))
#define metrics_observe(id, v, ...) \
	metrics_observe_v((id), (v), METRICS_NLABELS_(__VA_ARGS__), METRICS_LABELS_(__VA_ARGS__))
#define metrics_get(id, ...) \
	metrics_get_v((id), METRICS_NLABELS_(__VA_ARGS__), METRICS_LABELS_(__VA_ARGS__))

/*
 * Render every metric in the Prometheus text format 0.0.4 into a new
 * buffer (*out, NUL-terminated, *len bytes without the NUL; caller frees).
 * 0 or -ENOMEM.
 */
int metrics_render(char **out, size_t *len);

/* Forget every series (unit tests only: not safe while other threads
 * update). */
void metrics_reset(void);

/* ---- the HTTP endpoint (metrics_http.c) ----------------------------- */

struct metrics_http;

/*
 * Parse a metrics_listen value: "HOST:PORT" with a numeric IPv4 address,
 * "[IPV6]:PORT", or "" / "off" (disabled: returns 1). Port 0 picks a free
 * one. 0 on success, -EINVAL when malformed. `ss` may be NULL.
 */
struct sockaddr_storage;
int metrics_listen_parse(const char *text, struct sockaddr_storage *ss, unsigned *sslen);

/*
 * Serve GET /metrics and GET /healthz on `listen` from a libmicrohttpd
 * thread. Logs the bound address ("metrics listening address=...") and,
 * when port_file is non-empty, writes the bound port to it (for tests and
 * scripts that asked for port 0). *out is NULL when disabled. 0 or -errno.
 */
int metrics_http_start(const char *listen, const char *port_file, struct metrics_http **out);
/* /healthz answers 503 from now on (ckptd is shutting down). */
void metrics_http_stopping(struct metrics_http *h);
/* Stop the thread and free; accepts NULL. */
void metrics_http_stop(struct metrics_http *h);

#endif
