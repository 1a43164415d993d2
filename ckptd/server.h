/* SPDX-License-Identifier: MIT */
/*
 * The client side of the protocol (server.c) as the loop (loop.c) sees it;
 * what the rest of the daemon calls (client_send & co.) is in ckptd.h.
 */
#ifndef CKPTD_SERVER_H
#define CKPTD_SERVER_H

#include <stdint.h>

struct client;
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

#endif
