/* SPDX-License-Identifier: MIT */
/*
 * A small pool of worker threads for CPU work and short blocking calls
 * (checksums, index and manifest files, directory removal, restores).
 * run() executes on a worker; done() runs later on the event-loop thread,
 * from workers_dispatch(), once the loop sees workers_fd() readable.
 */
#ifndef CKPTD_WORKERS_H
#define CKPTD_WORKERS_H

struct workers;

typedef void (*work_fn)(void *arg);

int workers_create(unsigned threads, struct workers **out);
/* Finishes queued tasks, joins the threads (done callbacks of tasks still
 * pending are run). */
void workers_destroy(struct workers *w);
/* 0 or -ENOMEM. */
int workers_submit(struct workers *w, work_fn run, work_fn done, void *arg);
int workers_fd(const struct workers *w);
/* Run done callbacks of finished tasks; returns how many. */
int workers_dispatch(struct workers *w);

#endif
