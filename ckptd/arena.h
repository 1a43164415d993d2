/* SPDX-License-Identifier: MIT */
/*
 * A rank's arena (arena.c): the sealed memfd ckptd maps into the rank at
 * HELLO, cut into slots of the rank's largest save; what it costs is counted
 * in staging_bytes.
 */
#ifndef CKPTD_ARENA_H
#define CKPTD_ARENA_H

#include <stddef.h>
#include <stdint.h>

struct client;

/* Size, create, seal, populate (and mlock where allowed) c's arena. */
int arena_create(struct client *c, uint64_t max_save_bytes, uint32_t slots,
		 char *err, size_t errlen);
/* Fault in (and mlock where allowed) c's arena: on a worker thread. */
int arena_populate(struct client *c, char *err, size_t errlen);
void arena_destroy(struct client *c);
uint64_t arena_slot_bytes(uint64_t max_save_bytes);

#endif
