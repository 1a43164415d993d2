/* SPDX-License-Identifier: MIT */
/*
 * jobs.c: the job records, their ownership (takeover, recovery, release)
 * and the start-up that takes jobs back. Its calls (job_open, job_get,
 * job_release, coord_job_idle, coord_recover, coord_resume_owned) are
 * declared in ckptd.h for now, beside the structs they work on; they move
 * here when ckptd.h is split into one header per unit.
 */
#ifndef CKPTD_JOBS_H
#define CKPTD_JOBS_H

#include "ckptd.h"

#endif
