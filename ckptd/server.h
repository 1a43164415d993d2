/* SPDX-License-Identifier: MIT */
/*
 * The client side of the protocol (server.c): what the loop (loop.c) and
 * the rest of the daemon call.
 */
#ifndef CKPTD_SERVER_H
#define CKPTD_SERVER_H

#include <stdint.h>

#include "proto.h"

struct client;
struct job;
struct daemon;
struct loop_source;

/* The listening socket's handler: accept every waiting connection as a
 * client, or refuse it with an ERROR. */
void server_accept(struct daemon *d, struct loop_source *src, uint32_t events);
/* Close the connection now; the arena lives on until in-flight I/O on it
 * is finished. */
void client_kill(struct client *c, const char *why);
/* Free a client whatever its references (shut-down only, once nothing
 * uses it any more). */
void client_free(struct client *c);

/* What the rest of the daemon calls. */
void client_send(struct client *c, const struct ckpt_msg *m);
void client_send_status(struct client *c, uint64_t step, enum ckpt_state state,
			int error, uint32_t slot_freed, const char *reason);
struct client *job_client_for_rank(struct job *job, uint32_t rank);
void client_unref(struct client *c);
/* An ERROR answering request seq (0: none) with code and a reason. */
void client_send_error(struct client *c, uint32_t seq, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
