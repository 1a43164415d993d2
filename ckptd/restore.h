/* SPDX-License-Identifier: MIT */
/*
 * Restores (restore.c): a step's shard of one rank into a slot, through the
 * tiers (own memory, partner memory, the root, S3), checked the same way
 * whatever the tier.
 */
#ifndef CKPTD_RESTORE_H
#define CKPTD_RESTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct client;

/* Append to a NUL-terminated string in buf[cap], cut where it is full. */
void reason_append(char *buf, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int restore_start(struct client *c, uint32_t slot, uint64_t step,
		  uint32_t flags, uint32_t seq);
/* One attempt of an agreed restore: exactly `step`, read and verified into
 * the slot; the outcome goes to agree_attempt_done(), not to the client. */
struct agree_rank;
int restore_attempt_start(struct client *c, uint32_t slot, uint64_t step,
			  struct agree_rank *agree);
/* Whether a restore error means the step's copy is damaged (and an older
 * step may be used) rather than that reading it failed. */
bool restore_error_is_damage(int r);

#endif
