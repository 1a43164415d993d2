/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ckptd.h"
#include "arena.h"
#include "memtier.h"
#include "writer.h"

#define ARENA_ROUND (2u << 20)

/* Room for extent padding (4 KiB per tensor at worst) and the encoded
 * tensor table on top of the caller's bytes. */
uint64_t arena_slot_bytes(uint64_t max_save_bytes)
{
	uint64_t slack = max_save_bytes / 32;

	if (slack < (8u << 20))
		slack = 8u << 20;
	/* Anything near 2^64 is refused by the caller; do not wrap. */
	if (max_save_bytes > (UINT64_MAX >> 2))
		return 0;
	uint64_t b = max_save_bytes + slack;
	return (b + ARENA_ROUND - 1) / ARENA_ROUND * ARENA_ROUND;
}

int arena_create(struct client *c, uint64_t max_save_bytes, uint32_t slots,
		 char *err, size_t errlen)
{
	struct daemon *d = c->d;
	uint64_t slot_bytes = arena_slot_bytes(max_save_bytes);
	uint64_t bytes = slot_bytes && slots && slot_bytes <= UINT64_MAX / slots ? slot_bytes * slots : 0;
	char name[64];
	int fd, r;

	if (max_save_bytes == 0 || slot_bytes == 0 || slots == 0 ||
	    slot_bytes > UINT64_MAX / slots) {
		snprintf(err, errlen, "max_save_bytes %llu out of range",
			 (unsigned long long)max_save_bytes);
		return -EINVAL;
	}
	if (d->staging_used + bytes > d->cfg->staging_bytes && !retain_evict(d, bytes)) {
		snprintf(err, errlen,
			 "staging budget exhausted: rank %u of job %s needs %llu bytes "
			 "(%u slots of %llu), %llu of %llu in use (staging_bytes)",
			 c->rank, c->job->name, (unsigned long long)bytes, slots,
			 (unsigned long long)slot_bytes,
			 (unsigned long long)d->staging_used,
			 (unsigned long long)d->cfg->staging_bytes);
		return -ENOMEM;
	}
	snprintf(name, sizeof(name), "ckpt-arena-%.20s-%u", c->job->name, c->rank);
	fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "memfd_create: %s", strerror(-r));
		return r;
	}
	if (ftruncate(fd, (off_t)bytes) < 0) {
		r = -errno;
		snprintf(err, errlen, "arena of %llu bytes: %s",
			 (unsigned long long)bytes, strerror(-r));
		goto fail;
	}
	/* The client may neither shrink the arena under our I/O nor grow it. */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		r = -errno;
		snprintf(err, errlen, "sealing the arena: %s", strerror(-r));
		goto fail;
	}
	/* Mapped here, populated by arena_populate() on a worker: faulting
	 * in GiBs takes seconds, and the event loop serves everyone else. */
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		r = -errno;
		snprintf(err, errlen, "mapping the arena (%llu bytes): %s",
			 (unsigned long long)bytes, strerror(-r));
		goto fail;
	}
	c->slot_state = calloc(slots, 1);
	c->slot_step = calloc(slots, sizeof(*c->slot_step));
	if (!c->slot_state || !c->slot_step) {
		free(c->slot_state);
		free(c->slot_step);
		c->slot_state = NULL;
		c->slot_step = NULL;
		munmap(p, bytes);
		r = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	c->arena_fd = fd;
	c->arena = p;
	c->arena_bytes = bytes;
	c->slot_bytes = slot_bytes;
	c->slots = slots;
	d->staging_used += bytes;
	metrics_set(M_STAGING_USED_BYTES, (double)d->staging_used);
	return 0;
fail:
	close(fd);
	return r;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

int arena_populate(struct client *c, char *err, size_t errlen)
{
	struct daemon *d = c->d;

	/* Fault every page in now: untouched pages make the first save of
	 * each rank many times slower than a memcpy. */
	if (madvise(c->arena, c->arena_bytes, MADV_POPULATE_WRITE) < 0) {
		if (errno != EINVAL) {
			int r = -errno;
			snprintf(err, errlen, "populating the arena (%llu bytes): %s",
				 (unsigned long long)c->arena_bytes, strerror(-r));
			return r;
		}
		/* Kernels before 5.14: touch every page. */
		long page = sysconf(_SC_PAGESIZE);
		for (uint64_t off = 0; off < c->arena_bytes; off += (uint64_t)page)
			((volatile uint8_t *)c->arena)[off] = 0;
	}
	if (d->cfg->lock_memory != LOCK_MEMORY_OFF && d->can_mlock &&
	    mlock(c->arena, c->arena_bytes) < 0) {
		int r = -errno;
		if (d->cfg->lock_memory == LOCK_MEMORY_ON) {
			snprintf(err, errlen, "mlock of the arena: %s", strerror(-r));
			return r;
		}
		log_debug("arena", "mlock refused, arena stays pageable job=%s rank=%u error=\"%s\"",
			  c->job->name, c->rank, strerror(-r));
	}
	return 0;
}

void arena_destroy(struct client *c)
{
	writer_unregister_arena(c);
	if (c->arena) {
		munmap(c->arena, c->arena_bytes);
		c->d->staging_used -= c->arena_bytes;
		metrics_set(M_STAGING_USED_BYTES, (double)c->d->staging_used);
		c->arena = NULL;
	}
	if (c->arena_fd >= 0) {
		close(c->arena_fd);
		c->arena_fd = -1;
	}
	free(c->slot_state);
	free(c->slot_step);
	c->slot_state = NULL;
	c->slot_step = NULL;
}
