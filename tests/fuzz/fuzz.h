/* SPDX-License-Identifier: MIT */
#ifndef CKPT_FUZZ_H
#define CKPT_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A property that must hold for every input: crash loudly, in the fuzzer
 * and in the replay test alike. */
#define FUZZ_ASSERT(cond)                                                    \
	do {                                                                 \
		if (!(cond))                                                 \
			__builtin_trap();                                    \
	} while (0)

#endif
