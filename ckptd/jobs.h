/* SPDX-License-Identifier: MIT */
/*
 * jobs.c: the job records, their ownership (takeover, recovery, release)
 * and the start-up that takes jobs back. Event-loop thread; the blocking
 * parts run on workers.
 */
#ifndef CKPTD_JOBS_H
#define CKPTD_JOBS_H

#include <stdbool.h>

struct daemon;
struct job;

int coord_recover(struct daemon *d);
/* Take over again, on a worker, the jobs whose OWNER names this daemon as
 * their holder (it owned them before a crash or a stop), so that their
 * recovery and S3 uploads resume with no rank connected. Once the
 * uploader (uploader_init) and the peer link are up. */
void coord_resume_owned(struct daemon *d);
/* Something that kept job `name` loaded (the uploader's last task for it)
 * is over: release it if nothing else uses it. */
void coord_job_idle(struct daemon *d, const char *name);
/*
 * A job this daemon has taken over, or NULL. With `create`, a job not yet
 * known is taken over here, synchronously (blocking metadata I/O on the
 * loop: only the peer link's messages still do that); a job whose takeover
 * is running on a worker is not returned.
 */
struct job *job_get(struct daemon *d, const char *name, bool create);
/*
 * Take the job over on a worker (create its directory, take its OWNER lock,
 * recover it, load its committed steps, apply retention) unless that is done
 * or running already, and call ready(arg, job, 0, NULL) on the loop once the
 * job is usable, or ready(arg, NULL, error, reason) if it cannot be (another
 * daemon or group owns it: -CKPT_E_REFUSED, the reason names the holder).
 * ready may run before job_open returns. 0, or -ENOMEM (ready not called).
 */
typedef void (*job_ready_fn)(void *arg, struct job *job, int error, const char *reason);
int job_open(struct daemon *d, const char *name, job_ready_fn ready, void *arg);
/* Forget a job nobody uses (its fd, memory; its directory if empty) and
 * give up its ownership. */
void job_release(struct job *job);

#endif
