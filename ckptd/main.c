/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "loop.h"
#include "notify.h"

int main(int argc, char **argv)
{
	struct ckptd_config cfg;
	int r;

	switch (config_load(&cfg, argc, argv, stdout, stderr)) {
	case CONFIG_EXIT_OK:
		config_free(&cfg);
		return EXIT_SUCCESS;
	case CONFIG_EXIT_ERROR:
		config_free(&cfg);
		return 2;
	case CONFIG_RUN:
		break;
	}
	ckptd_log_level = cfg.log_level;
	r = loop_run(&cfg);
	if (r < 0)
		notify_failed(r, "failed: %s (see the log)", strerror(-r));
	config_free(&cfg);
	return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
