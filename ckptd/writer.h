/* SPDX-License-Identifier: MIT */
/*
 * Shard writes (writer.c): a slot of a rank's arena to step-N/rank-R.shard
 * with io_uring, checksummed beside the writes by a worker, then the rank
 * index and the fsyncs; the rank's vote goes to coord.c. Event-loop thread.
 */
#ifndef CKPTD_WRITER_H
#define CKPTD_WRITER_H

#include <stddef.h>
#include <stdint.h>

struct ckpt_msg_save;
struct ckpt_table;
struct client;
struct daemon;
struct io_uring_cqe;
struct step;

int writer_init(struct daemon *d);
void writer_fini(struct daemon *d);
/* Start writing the slot; on success the job owns a client reference. */
int writer_start(struct client *c, struct step *st, uint32_t slot,
		 const struct ckpt_msg_save *msg, struct ckpt_table *table,
		 char *err, size_t errlen);
/* Register c's arena as io_uring fixed buffers where allowed (best effort)
 * and drop the registration (only once no I/O uses it). */
void writer_register_arena(struct client *c);
void writer_unregister_arena(struct client *c);
void writer_on_cqe(struct daemon *d, struct io_uring_cqe *cqe);
void writer_pump(struct daemon *d);
/* A slot of c changed state: account the time every slot was busy
 * saving (metrics, stall events). */
void slots_watch(struct client *c);

#endif
