/* SPDX-License-Identifier: MIT */
/*
 * Where ckpt-restore fetches a step from: a job directory in a checkpoint
 * root, or a job under an S3 prefix. Every function returns 0 or -errno
 * and leaves a one-line reason naming the file in `why`. fetch() may be
 * called from several threads at once.
 */
#ifndef CKPT_RESTORE_SOURCE_H
#define CKPT_RESTORE_SOURCE_H

#include <stddef.h>
#include <stdint.h>

struct restore_source {
	char desc[1024];   /* for messages: ROOT/JOB or s3://BUCKET/PREFIX/JOB */
	char job[129];
	/* Committed steps, ascending; *steps: free(). */
	int (*list_steps)(struct restore_source *s, uint64_t **steps, size_t *n,
			  char *why, size_t whylen);
	/* The step's MANIFEST.json bytes (*buf: free(), NUL-terminated);
	 * -ENOENT when the step is not committed there. */
	int (*read_manifest)(struct restore_source *s, uint64_t step, char **buf,
			     size_t *len, char *why, size_t whylen);
	/* Copy file `name` of the step (`bytes` long, per the manifest) into
	 * dstfd from offset 0, reporting bytes as they land. */
	int (*fetch)(struct restore_source *s, uint64_t step, const char *name,
		     uint64_t bytes, int dstfd,
		     void (*progress)(void *opaque, uint64_t delta), void *opaque,
		     char *why, size_t whylen);
	void (*close)(struct restore_source *s);
};

struct s3_settings;

/*
 * Open the source a command-line argument names. A step given in it
 * (ROOT/JOB/STEP, JOB@STEP) goes to *step (0: none). s3: settings from
 * the command line for an S3 source (NULL: none; borrowed during the
 * call). -EINVAL: the argument is malformed (usage error); other errors:
 * not found/unreadable.
 */
int restore_source_open(const char *spec, const struct s3_settings *s3,
			struct restore_source **out, uint64_t *step, char *why,
			size_t whylen);

#endif
