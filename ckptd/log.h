/* SPDX-License-Identifier: MIT */
/*
 * ckptd logging: one line per event to stderr,
 *   <time> <level> <subsystem>: <message> key=value ...
 * Level-checked before the arguments are formatted. Never log secrets.
 */
#ifndef CKPTD_LOG_H
#define CKPTD_LOG_H

#include "config.h"

extern enum log_level ckptd_log_level;

void ckptd_log_write(enum log_level level, const char *subsys, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define LOG(level, subsys, ...)                                             \
	do {                                                                 \
		if ((level) <= ckptd_log_level)                                  \
			ckptd_log_write((level), (subsys), __VA_ARGS__);         \
	} while (0)
#define log_error(subsys, ...) LOG(LOG_LEVEL_ERROR, subsys, __VA_ARGS__)
#define log_warn(subsys, ...) LOG(LOG_LEVEL_WARN, subsys, __VA_ARGS__)
#define log_info(subsys, ...) LOG(LOG_LEVEL_INFO, subsys, __VA_ARGS__)
#define log_debug(subsys, ...) LOG(LOG_LEVEL_DEBUG, subsys, __VA_ARGS__)

#endif
