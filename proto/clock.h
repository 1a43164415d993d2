/* SPDX-License-Identifier: MIT */
/*
 * The one monotonic clock of libckpt, ckptd and the tools: nanoseconds of
 * CLOCK_MONOTONIC, for timeouts, deadlines, rates and durations. Wall-clock
 * times (manifests, events, logs) use CLOCK_REALTIME where they are made.
 */
#ifndef CKPT_CLOCK_H
#define CKPT_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t ckpt_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Milliseconds of the same clock. */
static inline int64_t ckpt_mono_ms(void)
{
	return ckpt_mono_ns() / 1000000;
}

#endif
