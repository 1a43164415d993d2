/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the command-line tools (ckpt-inspect, ckpt-restore):
 * byte counts for people and the progress bar. Not a library: the tools
 * print, and these print to stderr.
 */
#ifndef CKPT_TOOLUTIL_H
#define CKPT_TOOLUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* A step as people type it: 42, or a step directory name (step-0000000042).
 * Steps are 1..9999999999. */
bool tool_parse_step(const char *s, uint64_t *out);

/* "1.5 GiB", "512 B". */
void tool_human_bytes(char *buf, size_t cap, uint64_t n);

/*
 * A one-line progress bar on stderr: label, bar, bytes done and total,
 * MB/s, ETA; redrawn at most ten times a second. Off (every call a no-op)
 * unless `on` is set, which callers do only when stderr is a terminal.
 * `base` lets one bar cover several phases that report their own counts.
 */
struct tool_progress {
	bool on;
	char label[48];
	uint64_t base, total;
	struct timespec start, last;
	bool drawn;
};

void tool_progress_begin(struct tool_progress *p, const char *label, uint64_t total);
void tool_progress_draw(struct tool_progress *p, uint64_t done, bool force);
/* store_progress_fn adapter: draws base + done. */
void tool_progress_cb(void *opaque, uint64_t done, uint64_t total);
/* Clear the line if anything was drawn. */
void tool_progress_end(struct tool_progress *p);

#endif
