/* SPDX-License-Identifier: MIT */
/* Internals shared by the s3*.c files of libckpts3 (not for callers). */
#ifndef CKPT_S3_INTERNAL_H
#define CKPT_S3_INTERNAL_H

#include <stdbool.h>

struct s3_endpoint {
	char host[256];       /* lower case; "[::1]" for IPv6 */
	unsigned port;
	bool https;
	bool explicit_port;
};

/* "http[s]://host[:port][/]"; -EINVAL for anything else (a path, a query,
 * user info). */
int s3_endpoint_parse(const char *url, struct s3_endpoint *ep);

#endif
