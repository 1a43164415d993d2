/* SPDX-License-Identifier: MIT */
#ifndef CKPTD_SERVER_H
#define CKPTD_SERVER_H

#include "config.h"

/* Serve until SIGTERM/SIGINT and in-flight work is done: 0, or -errno
 * after logging why. */
int server_run(struct ckptd_config *cfg);

#endif
