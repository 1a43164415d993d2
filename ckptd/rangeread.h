/* SPDX-License-Identifier: MIT */
/*
 * Ranged reads (rangeread.c): byte ranges of any rank's tensors and blobs
 * of a committed step of the client's job, read from the root on a worker,
 * every byte checked against its rank index's chunk CRCs, into a slot
 * (PROTOCOL.md, READ_RANGES). Event-loop thread.
 */
#ifndef CKPTD_RANGEREAD_H
#define CKPTD_RANGEREAD_H

struct client;
struct ckpt_msg;

/* Serve a decoded READ_RANGES of c, whose slot the caller has checked is
 * the client's. Answers READ_RANGES_OK (or ERROR) later, with m's seq. */
void rangeread_start(struct client *c, const struct ckpt_msg *m);

#endif
