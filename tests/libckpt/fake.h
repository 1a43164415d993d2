/* SPDX-License-Identifier: MIT */
/*
 * A scripted stand-in for ckptd, run in a forked child, for testing
 * libckpt against a daemon that behaves well or badly on purpose.
 */
#ifndef CKPT_TEST_FAKE_H
#define CKPT_TEST_FAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ckpt.h"
#include "proto.h"

struct fake {
	char dir[64];
	char path[108];
	pid_t pid;
};

/* Child side: serve() gets the listening socket and returns the child's
 * exit status (0: every check on its side passed). */
typedef int (*fake_serve_fn)(int lfd, void *arg);

/* Bind a socket in a fresh temporary directory and fork serve(). */
int fake_start(struct fake *f, fake_serve_fn serve, void *arg);
/* Wait for the child (killing it after timeout_ms); its exit status, or
 * -1 if it was killed or crashed. Removes the socket and directory. */
int fake_stop(struct fake *f, int timeout_ms);

/* Child helpers; all block. Return 0 or -1. */
int fake_accept(int lfd, int timeout_ms);
int fake_recv(int cfd, struct ckpt_msg *m, int timeout_ms);
int fake_send(int cfd, const struct ckpt_msg *m, const int *fds, int nfds);
int fake_send_raw(int cfd, const void *buf, size_t len, const int *fds, int nfds);
/* A sealed memfd of `bytes` (or `file_bytes` if nonzero) mapped at *base. */
int fake_memfd(uint64_t bytes, uint64_t file_bytes, bool seal, void **base);
/* Read HELLO and answer HELLO_OK with a fresh arena. 0 or -1. */
int fake_hello(int cfd, uint32_t slots, uint64_t slot_bytes, uint32_t flags, void **base);
/* Fill in a HELLO_OK body. */
void fake_hello_ok(struct ckpt_msg *m, uint32_t slots, uint64_t slot_bytes, uint32_t flags);

/* Parent side: open fds and memfd mappings of this process. */
int count_fds(void);
int count_memfd_maps(void);
int64_t test_now_ms(void);

#define CHECK(cond)                                                           \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, \
				__LINE__, #cond);                             \
			return 1;                                             \
		}                                                             \
	} while (0)

#define CHECK_EQ(a, b)                                                        \
	do {                                                                  \
		long long a_ = (long long)(a), b_ = (long long)(b);           \
		if (a_ != b_) {                                               \
			fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", \
				__FILE__, __LINE__, #a, a_, #b, b_);          \
			return 1;                                             \
		}                                                             \
	} while (0)

#endif
