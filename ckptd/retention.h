/* SPDX-License-Identifier: MIT */
/*
 * retention.c: removal of step directories and root retention. The first
 * two calls are for the rest of ckptd, the others for coord.c and jobs.c.
 */
#ifndef CKPTD_RETENTION_H
#define CKPTD_RETENTION_H

#include <stdbool.h>
#include <stdint.h>

struct daemon;
struct job;
struct step;

/* Apply root retention to job `name` again (S3 confirmed steps of it), if
 * this daemon has the job loaded; never takes a job over. */
void coord_retention_recheck(struct daemon *d, const char *name);
/* Delete what waits in the trash, in a worker. */
void coord_trash_empty(struct daemon *d);

/*
 * Take jobfd/name out of the job now: renamed into <root>/.trash (named
 * after `job`, "job" when NULL), to be deleted there later; deleted in
 * place when there is no trash. 0 (also when name is gone already), or
 * -errno. Blocking: on a worker.
 */
int trash_move(struct daemon *d, struct job *job, int jobfd, const char *name);
/*
 * Remove the directory of `step` on a worker: a failed step's (st its
 * record, marked removing meanwhile; a directory holding a manifest is kept
 * and recorded as committed), or with `committed` one that retention
 * dropped (st NULL). Leader only. Refuses a failed step whose number is
 * committed.
 */
void removal_start(struct job *job, struct step *st, uint64_t step, bool committed);
/* Drop the committed steps past keep_last that nothing holds, oldest
 * first, and report those that wait for S3. */
void retention_apply(struct job *job);

#endif
