/* SPDX-License-Identifier: MIT */
/*
 * What coord.c shares with jobs.c and retention.c, the files split from it:
 * a job's list of committed steps and a step record's end. Only those three
 * include this; everything else goes through ckptd.h.
 */
#ifndef CKPTD_COORD_INTERNAL_H
#define CKPTD_COORD_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct job;
struct step;

/* LATEST of one job is written by one worker at a time: the commit's and
 * the takeover's recovery. */
extern pthread_mutex_t latest_lock;

/* Record `step` in the job's ascending committed list (unpinned).
 * 0, or -ENOMEM (nothing recorded). */
int committed_insert(struct job *job, uint64_t step);
/* Forget the job's i-th committed step, and its restore pin count. */
void committed_remove_at(struct job *job, size_t i);
/* Free a step record (already unlinked from its job, or with the job). */
void step_free(struct step *st);

#endif
