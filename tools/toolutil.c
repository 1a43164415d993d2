/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "proto.h"
#include "toolutil.h"

void tool_human_bytes(char *buf, size_t cap, uint64_t n)
{
	static const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)n;
	unsigned u = 0;

	while (v >= 1024.0 && u < 6) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, cap, "%" PRIu64 " B", n);
	else
		snprintf(buf, cap, "%.1f %s", v, unit[u]);
}

static double seconds_between(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

void tool_progress_begin(struct tool_progress *p, const char *label, uint64_t total)
{
	snprintf(p->label, sizeof(p->label), "%s", label);
	p->base = 0;
	p->total = total;
	p->drawn = false;
	clock_gettime(CLOCK_MONOTONIC, &p->start);
	p->last = p->start;
}

void tool_progress_draw(struct tool_progress *p, uint64_t done, bool force)
{
	struct timespec now;
	char d[32], t[32], bar[31];
	double el, rate;

	if (!p->on)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (!force && seconds_between(&p->last, &now) < 0.1)
		return;
	p->last = now;
	el = seconds_between(&p->start, &now);
	rate = el > 0 ? (double)done / el : 0;
	unsigned fill = p->total ? (unsigned)((double)done / (double)p->total * 30.0) : 30;
	if (fill > 30)
		fill = 30;
	memset(bar, '#', fill);
	memset(bar + fill, '.', 30 - fill);
	bar[30] = '\0';
	tool_human_bytes(d, sizeof(d), done);
	tool_human_bytes(t, sizeof(t), p->total);
	fprintf(stderr, "\r\033[K%s [%s] %s / %s  %.0f MB/s", p->label, bar, d, t,
		rate / 1e6);
	if (rate > 0 && p->total > done)
		fprintf(stderr, "  ETA %.0fs", (double)(p->total - done) / rate);
	p->drawn = true;
}

void tool_progress_cb(void *opaque, uint64_t done, uint64_t total)
{
	struct tool_progress *p = opaque;

	(void)total;
	tool_progress_draw(p, p->base + done, false);
}

void tool_progress_end(struct tool_progress *p)
{
	if (p->on && p->drawn)
		fputs("\r\033[K", stderr);
}

bool tool_parse_step(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (ckpt_step_dirname_parse(s, out) == 0)
		return true;
	if (!*s || *s < '0' || *s > '9')
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v == 0 || v > CKPT_STEP_MAX)
		return false;
	*out = v;
	return true;
}
