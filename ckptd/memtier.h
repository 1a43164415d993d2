/* SPDX-License-Identifier: MIT */
/*
 * Own memory, the first restore tier (memtier.c): the arena of a rank that
 * left without GOODBYE, kept while it holds the rank's newest durable shard.
 * Event-loop thread, except retain_copy on a pinned one.
 */
#ifndef CKPTD_MEMTIER_H
#define CKPTD_MEMTIER_H

#include <stdbool.h>
#include <stdint.h>

struct client;
struct daemon;

struct retained;
void retain_note_durable(struct client *c, uint32_t slot, uint64_t step, uint64_t shard_bytes,
			 const void *index, uint64_t index_bytes);
void retain_note_slot_used(struct client *c, uint32_t slot);
/* At the end of a connection: keep its arena if it holds a shard worth it. */
bool retain_take_arena(struct client *c);
/* A rank of the job saves again: what a departed one left is obsolete. */
void retain_drop(struct daemon *d, const char *job, uint32_t rank);
/* Give back departed ranks' memory until `need` more bytes fit staging. */
bool retain_evict(struct daemon *d, uint64_t need);
struct retained *retain_pin(struct daemon *d, const char *job, uint32_t rank);
void retain_unpin(struct daemon *d, struct retained *r);
/* From a pinned one, on any thread: the shard of `step` into dst. */
int retain_copy(const struct retained *r, uint64_t step, uint8_t *dst, uint64_t cap,
		const void **index, uint64_t *index_bytes, uint64_t *shard_bytes);
void retain_fini(struct daemon *d);

#endif
