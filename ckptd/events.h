/* SPDX-License-Identifier: MIT */
/*
 * ckptd events: a webhook (Slack-compatible JSON POST: {"text": "...",
 * plus structured fields event, host, job, step, rank, seconds, bytes,
 * reason, repeated, time}) for what an operator should hear about: a step
 * committed, a save failed or skipped, an S3 upload given up, a rank
 * stalled for want of a free staging slot, a peer lost.
 *
 * Every entry point may be called from any thread and never blocks for
 * long: the event goes into a bounded queue (dropped and counted when
 * full) that a dedicated thread sends with libcurl, at most webhook_rate
 * per minute (token bucket). An event identical to one still queued
 * (same kind, job, rank, peer and reason, numbers in the reason aside)
 * is merged into it ("repeated": N). Requests time out and are retried a
 * couple of times. The webhook URL may hold a secret token: it is never
 * logged, only its scheme and host. Metrics: ckpt_webhook_*.
 */
#ifndef CKPTD_EVENTS_H
#define CKPTD_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum event_kind {
	EVENT_COMMITTED = 0,
	EVENT_FAILED,
	EVENT_SKIPPED,
	EVENT_S3_FAILED,
	EVENT_STALL,
	EVENT_PEER_LOST,
	EVENT_S3_BACKLOG,
	EVENT__COUNT
};

#define EVENT_NO_STEP UINT64_MAX

struct ckptd_config;

/* "committed", "failed", ... (the names webhook_events takes). */
const char *event_kind_name(enum event_kind kind);
/* Parse a webhook_events value: names separated by commas and/or blanks,
 * or "all". 0 with *mask set (bit per kind), or -EINVAL with a message. */
int events_parse_list(const char *text, unsigned *mask, char *err, size_t errlen);
/* config.c's check hooks for webhook_events (events_parse_list) and
 * webhook_url (http:// or https://, or empty): 0, or -EINVAL with the reason
 * in msg. The URL is never put into msg: it may hold a token. */
int events_list_check(struct ckptd_config *cfg, const char *value, char *msg, size_t msglen);
int events_url_check(struct ckptd_config *cfg, const char *value, char *msg, size_t msglen);

/* Start the sender thread when webhook_url is set (else do nothing).
 * Call from the main thread before other threads use libcurl. 0 or -errno
 * (bad URL, out of memory), logged. */
int events_start(const struct ckptd_config *cfg);
/* Send what is still queued (for a few seconds at most, ignoring the
 * rate limit), then stop the thread. Safe when not started. */
void events_stop(void);
/* Whether events of this kind are sent at all (cheap). */
bool events_wanted(enum event_kind kind);

/* ---- entry points ------------------------------------------------------
 * Strings are copied (cut to fit); NULL is "". step EVENT_NO_STEP, rank < 0,
 * seconds < 0 or bytes < 0 leave that field out. */

void events_committed(const char *job, uint64_t step, uint32_t ranks, double seconds,
		      int64_t bytes);
void events_save_failed(const char *job, uint64_t step, const char *reason);
void events_save_skipped(const char *job, uint64_t step, int64_t rank);
/* A rank had no free staging slot for `seconds` (above stall_warn_ms). */
void events_stall(const char *job, int64_t rank, double seconds);
/* A rank reported (STALL) that its save of `step` stalled it for `seconds`
 * (above stall_warn_ms). Same kind ("stall"), another reason. */
void events_save_stall(const char *job, uint64_t step, int64_t rank, double seconds);
/* The S3 tier: an upload of the step failed and will not be retried. */
void events_s3_upload_failed(const char *job, uint64_t step, unsigned attempts,
			     const char *reason);
/* Root retention keeps steps of the job beyond keep_last (the oldest is
 * `step`) because S3 has not confirmed them; reason says how many. */
void events_s3_backlog(const char *job, uint64_t step, const char *reason);
/* The peer link: a peer ckptd stopped answering. */
void events_peer_lost(const char *peer, const char *reason);

#endif
