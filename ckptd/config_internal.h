/* SPDX-License-Identifier: MIT */
/*
 * What the option table (options.c) and the loader (config.c) share.
 */
#ifndef CKPTD_CONFIG_INTERNAL_H
#define CKPTD_CONFIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* The socket when neither $CKPT_SOCKET nor $XDG_RUNTIME_DIR names one. */
#define SOCKET_FALLBACK "/run/ckpt/ckptd.sock"

enum opt_type { OPT_STRING, OPT_PATH, OPT_SIZE, OPT_UINT, OPT_BOOL, OPT_ENUM, OPT_MODE };

struct config_option {
	const char *key;
	enum opt_type type;
	const char *def;           /* default as text, parsed like any source */
	uint64_t min, max;         /* OPT_SIZE, OPT_UINT, OPT_MODE */
	uint64_t multiple;         /* OPT_SIZE: value must be a multiple (0 = any) */
	const char *const *values; /* OPT_ENUM: names in enum order, NULL-terminated */
	const char *arg;           /* value name in --help */
	const char *help;          /* one line */
	const char *description;   /* '\n'-separated lines: reference file, --help */
	size_t offset, size;       /* where the parsed value goes */
	bool computed_default;     /* def is the fallback of a rule in description */
	bool secret;               /* may hold a token: --check-config hides it */
	/* What the type cannot check, run on each value of the option as soon
	 * as it is set (value: its text). 0, or < 0 with the reason (without
	 * the origin) in msg. It may also set what derives from this one value
	 * (allowed_group: allowed_gid). The unit the option belongs to owns it. */
	int (*check)(struct ckptd_config *cfg, const char *value, char *msg, size_t msglen);
};

#define FIELD(m) offsetof(struct ckptd_config, m), sizeof(((struct ckptd_config *)0)->m)

/* The number of options: a constant, since the loader sizes arrays by it;
 * options.c fails to build when it differs from the table. */
#define CONFIG_N_OPTIONS 51
extern const struct config_option config_options[];

/* A whole number in `base` (0: C rules): 0, or -EINVAL / -ERANGE. */
int config_parse_uint(const char *s, int base, uint64_t *out);

#endif
