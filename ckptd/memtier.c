/* SPDX-License-Identifier: MIT */
/*
 * Own memory, the first restore tier: this node's memory of a rank that
 * left (partner memory, the next tier, is peer.c's). When a rank's
 * connection ends without GOODBYE (the rank crashed, or its job was
 * killed), its arena is not unmapped at once if one of its slots still
 * holds the rank's newest durable shard: a rank of the same job that
 * connects again and restores that step gets it from there, checked like a
 * file (restore.c: the index against the manifest's digest, every chunk
 * against the index). A slot the rank had begun to fill again fails that
 * check and the next tier is read.
 *
 * The memory stays counted in staging_bytes. It goes when a HELLO needs the
 * room, when a rank of the job saves again, after RETAIN_MAX_AGE_S, or when
 * ckptd stops. Everything here runs on the event-loop thread; a restore
 * worker reads a retained arena only while it holds a pin.
 *
 * The retain_* calls keep a departed rank's memory only; which committed
 * steps the root keeps is root retention (retention.c), and reading the
 * tiers in order is restore.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ckptd.h"
#include "memtier.h"
#include "writer.h"

#define RETAIN_MAX_AGE_S 1800

struct retained {
	struct retained *next;
	char job[CKPT_JOB_NAME_MAX + 1];
	uint32_t rank;
	uint64_t step, shard_bytes, index_bytes, slot_off;
	void *index;
	uint8_t *arena;
	uint64_t arena_bytes;
	unsigned pins;
	bool dropped;
	int64_t since_ns;
};

void retain_note_durable(struct client *c, uint32_t slot, uint64_t step, uint64_t shard_bytes,
			 const void *index, uint64_t index_bytes)
{
	void *copy = index && index_bytes ? malloc(index_bytes) : NULL;

	free(c->own_index);
	c->own_index = NULL;
	if (!copy)
		return;
	memcpy(copy, index, index_bytes);
	c->own_index = copy;
	c->own_index_bytes = index_bytes;
	c->own_slot = slot;
	c->own_step = step;
	snprintf(c->own_job, sizeof(c->own_job), "%s", c->job->name);
	c->own_shard_bytes = shard_bytes;
}

void retain_note_slot_used(struct client *c, uint32_t slot)
{
	if (c->own_index && c->own_slot == slot) {
		free(c->own_index);
		c->own_index = NULL;
	}
}

static void retained_free(struct daemon *d, struct retained *r)
{
	munmap(r->arena, r->arena_bytes);
	d->staging_used -= r->arena_bytes;
	metrics_set(M_STAGING_USED_BYTES, (double)d->staging_used);
	free(r->index);
	free(r);
}

/* Unlink and free r, or mark it to go once its last pin is dropped. */
static void retained_drop(struct daemon *d, struct retained *r)
{
	r->dropped = true;
	if (r->pins)
		return;
	for (struct retained **p = &d->retained; *p; p = &(*p)->next) {
		if (*p == r) {
			*p = r->next;
			break;
		}
	}
	retained_free(d, r);
}

static void retain_expire(struct daemon *d)
{
	int64_t now = ckpt_mono_ns();

	for (struct retained *r = d->retained, *next; r; r = next) {
		next = r->next;
		if (!r->dropped && now - r->since_ns > (int64_t)RETAIN_MAX_AGE_S * 1000000000)
			retained_drop(d, r);
	}
}

bool retain_take_arena(struct client *c)
{
	struct daemon *d = c->d;
	struct retained *r;

	retain_expire(d);
	if (c->goodbye || d->stopping || !c->own_index || !c->arena || !c->own_job[0] ||
	    c->own_slot >= c->slots || c->own_shard_bytes > c->slot_bytes)
		return false;
	r = calloc(1, sizeof(*r));
	if (!r)
		return false;
	/* One per rank: an older one of the same rank is of no more use. */
	for (struct retained *o = d->retained, *next; o; o = next) {
		next = o->next;
		if (!o->dropped && o->rank == c->rank && strcmp(o->job, c->own_job) == 0)
			retained_drop(d, o);
	}
	writer_unregister_arena(c);
	snprintf(r->job, sizeof(r->job), "%s", c->own_job);
	r->rank = c->rank;
	r->step = c->own_step;
	r->shard_bytes = c->own_shard_bytes;
	r->index = c->own_index;
	r->index_bytes = c->own_index_bytes;
	r->slot_off = (uint64_t)c->own_slot * c->slot_bytes;
	r->arena = c->arena;
	r->arena_bytes = c->arena_bytes;
	r->since_ns = ckpt_mono_ns();
	c->own_index = NULL;
	c->arena = NULL;
	/* The mapping is what holds the memory; the memfd can go. */
	close(c->arena_fd);
	c->arena_fd = -1;
	r->next = d->retained;
	d->retained = r;
	log_info("restore", "keeping a departed rank's shard in memory job=%s rank=%u step=%llu "
		 "bytes=%llu", r->job, r->rank, (unsigned long long)r->step,
		 (unsigned long long)r->shard_bytes);
	return true;
}

void retain_drop(struct daemon *d, const char *job, uint32_t rank)
{
	for (struct retained *r = d->retained, *next; r; r = next) {
		next = r->next;
		if (!r->dropped && r->rank == rank && strcmp(r->job, job) == 0)
			retained_drop(d, r);
	}
}

bool retain_evict(struct daemon *d, uint64_t need)
{
	retain_expire(d);
	while (d->staging_used + need > d->cfg->staging_bytes) {
		struct retained *oldest = NULL;
		for (struct retained *r = d->retained; r; r = r->next)
			if (!r->dropped && !r->pins && (!oldest || r->since_ns < oldest->since_ns))
				oldest = r;
		if (!oldest)
			return false;
		log_info("restore", "memory of a departed rank given back for a new one job=%s "
			 "rank=%u step=%llu", oldest->job, oldest->rank,
			 (unsigned long long)oldest->step);
		retained_drop(d, oldest);
	}
	return true;
}

struct retained *retain_pin(struct daemon *d, const char *job, uint32_t rank)
{
	for (struct retained *r = d->retained; r; r = r->next) {
		if (!r->dropped && r->rank == rank && strcmp(r->job, job) == 0) {
			r->pins++;
			return r;
		}
	}
	return NULL;
}

void retain_unpin(struct daemon *d, struct retained *r)
{
	if (r && --r->pins == 0 && r->dropped)
		retained_drop(d, r);
}

int retain_copy(const struct retained *r, uint64_t step, uint8_t *dst, uint64_t cap,
		const void **index, uint64_t *index_bytes, uint64_t *shard_bytes)
{
	if (!r || r->step != step)
		return -ENOENT;
	if (r->shard_bytes > cap)
		return -CKPT_E_TOO_BIG;
	memcpy(dst, r->arena + r->slot_off, r->shard_bytes);
	*index = r->index;
	*index_bytes = r->index_bytes;
	*shard_bytes = r->shard_bytes;
	return 0;
}

void retain_fini(struct daemon *d)
{
	while (d->retained) {
		struct retained *r = d->retained;
		d->retained = r->next;
		retained_free(d, r);
	}
}
