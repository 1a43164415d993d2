/* SPDX-License-Identifier: MIT */
/*
 * ckptd configuration: defaults, file, environment and flags in their
 * order of precedence, every kind of bad value with the source named,
 * --help / --check-config, and the reference file against the table.
 *
 *   test-config                     the unit tests
 *   test-config --reference FILE    FILE equals config_print_reference()
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"

extern char **environ;

static int failures;

#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, \
				#cond);                                              \
			failures++;                                                  \
		}                                                                    \
	} while (0)

#define CHECK_CONTAINS(hay, needle)                                                  \
	do {                                                                         \
		if (!strstr((hay), (needle))) {                                      \
			fprintf(stderr, "%s:%d: expected \"%s\" in:\n%s\n", __FILE__,  \
				__LINE__, (needle), (hay));                          \
			failures++;                                                  \
		}                                                                    \
	} while (0)

static char tmpdir[] = "/tmp/test-config-XXXXXX";

/* Every test starts from an environment without ckptd settings and without
 * a config file, whatever the machine running it has. */
static void clean_env(void)
{
	for (;;) {
		char *victim = NULL;

		for (char **e = environ; *e; e++) {
			if (!strncmp(*e, "CKPTD_", 6)) {
				victim = *e;
				break;
			}
		}
		if (!victim)
			break;
		char name[256];
		size_t len = strcspn(victim, "=");
		snprintf(name, sizeof(name), "%.*s", (int)len, victim);
		unsetenv(name);
	}
	setenv("CKPTD_CONFIG", "", 1);
	setenv("CKPT_SOCKET", "/tmp/test-config.sock", 1);
}

static char *write_file(const char *name, const char *text)
{
	char *path;
	FILE *f;

	if (asprintf(&path, "%s/%s", tmpdir, name) < 0)
		abort();
	f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
		perror(path);
		abort();
	}
	return path;
}

struct result {
	enum config_action action;
	char *out, *err;
	size_t out_len, err_len;
};

static void result_free(struct result *r)
{
	free(r->out);
	free(r->err);
}

/* config_load("ckptd", args..., NULL) with stdout and stderr captured. */
static struct result load(struct ckptd_config *cfg, ...)
{
	char *argv[32] = { "ckptd" };
	int argc = 1;
	struct result r = { 0 };
	FILE *out = open_memstream(&r.out, &r.out_len);
	FILE *err = open_memstream(&r.err, &r.err_len);
	va_list ap;

	va_start(ap, cfg);
	while ((argv[argc] = va_arg(ap, char *)))
		argc++;
	va_end(ap);
	if (!out || !err)
		abort();
	r.action = config_load(cfg, argc, argv, out, err);
	fclose(out);
	fclose(err);
	return r;
}

/* Load and expect exactly one failure whose text contains `msg`. */
static void expect_error(const char *msg, ...)
{
	struct ckptd_config cfg;
	char *argv[32] = { "ckptd" };
	int argc = 1;
	char *out = NULL, *err = NULL;
	size_t out_len, err_len;
	FILE *fo = open_memstream(&out, &out_len);
	FILE *fe = open_memstream(&err, &err_len);
	va_list ap;

	va_start(ap, msg);
	while ((argv[argc] = va_arg(ap, char *)))
		argc++;
	va_end(ap);
	enum config_action a = config_load(&cfg, argc, argv, fo, fe);
	fclose(fo);
	fclose(fe);
	if (a != CONFIG_EXIT_ERROR) {
		fprintf(stderr, "expected an error containing \"%s\", got action %d\n", msg, a);
		failures++;
	}
	CHECK_CONTAINS(err, msg);
	config_free(&cfg);
	free(out);
	free(err);
}

static void test_defaults(void)
{
	struct ckptd_config cfg;
	struct result r = load(&cfg, NULL);

	CHECK(r.action == CONFIG_RUN);
	CHECK(r.err_len == 0);
	CHECK(cfg.config_file == NULL);
	CHECK(!strcmp(cfg.socket_path, "/tmp/test-config.sock"));
	CHECK(cfg.socket_mode == 0660);
	CHECK(!strcmp(cfg.allowed_group, ""));
	CHECK(cfg.allowed_gid == (gid_t)-1);
	CHECK(!strcmp(cfg.root, "/var/lib/ckpt"));
	CHECK(cfg.staging_bytes > 0 && cfg.staging_bytes % 4096 == 0);
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	CHECK(cfg.staging_bytes <= (uint64_t)pages * (uint64_t)page / 2);
	CHECK(cfg.slots_per_rank == 2);
	CHECK(cfg.queue_depth == 16);
	CHECK(cfg.request_bytes == 4 << 20);
	CHECK(cfg.chunk_bytes == 4 << 20);
	CHECK(cfg.direct_io == DIRECT_IO_AUTO);
	CHECK(cfg.keep_last == 3);
	CHECK(cfg.backpressure == BACKPRESSURE_BLOCK);
	CHECK(cfg.log_level == LOG_LEVEL_INFO);
	CHECK(cfg.lock_memory == LOCK_MEMORY_AUTO);
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	CHECK(cfg.workers == (uint32_t)(cpus < 1 ? 1 : cpus > 4 ? 4 : cpus));
	CHECK(cfg.max_clients == 1024);
	CHECK(cfg.fixed_buffers == true);
	config_free(&cfg);
	config_free(&cfg); /* idempotent */
	config_free(NULL);
	result_free(&r);

	/* Without CKPT_SOCKET, root uses /run; others their runtime dir. */
	unsetenv("CKPT_SOCKET");
	setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1);
	r = load(&cfg, NULL);
	CHECK(r.action == CONFIG_RUN);
	CHECK(!strcmp(cfg.socket_path,
		      geteuid() == 0 ? "/run/ckpt/ckptd.sock" : "/run/user/4242/ckptd.sock"));
	config_free(&cfg);
	result_free(&r);
}

static void test_file(void)
{
	struct ckptd_config cfg;
	char *path = write_file("good.conf",
				"# a comment\n"
				"; another comment\n"
				"queue_depth = 8\n"
				"socket_mode=0600\n"
				"\n"
				"[ckptd]\n"
				"root = /srv/ckpt   ; inline comment\n"
				"staging_bytes = 1.5G\n"
				"request_size = 256KiB\n"
				"chunk_size = 64K\n"
				"direct_io = off\n"
				"keep_last = 0\n"
				"backpressure = skip\n"
				"log_level = debug\n"
				"lock_memory = on\n"
				"workers = 3\n"
				"max_clients = 7\n"
				"fixed_buffers = no\n"
				"slots_per_rank = 64\n"
				"allowed_group = 0\n"
				"socket = /tmp/other.sock\n");
	struct result r = load(&cfg, "--config", path, NULL);

	CHECK(r.action == CONFIG_RUN);
	CHECK(r.err_len == 0);
	CHECK(cfg.config_file && !strcmp(cfg.config_file, path));
	CHECK(cfg.queue_depth == 8);
	CHECK(cfg.socket_mode == 0600);
	CHECK(!strcmp(cfg.root, "/srv/ckpt"));
	CHECK(cfg.staging_bytes == 3ull << 29);
	CHECK(cfg.request_bytes == 256 << 10);
	CHECK(cfg.chunk_bytes == 64 << 10);
	CHECK(cfg.direct_io == DIRECT_IO_OFF);
	CHECK(cfg.keep_last == 0);
	CHECK(cfg.backpressure == BACKPRESSURE_SKIP);
	CHECK(cfg.log_level == LOG_LEVEL_DEBUG);
	CHECK(cfg.lock_memory == LOCK_MEMORY_ON);
	CHECK(cfg.workers == 3);
	CHECK(cfg.max_clients == 7);
	CHECK(cfg.fixed_buffers == false);
	CHECK(cfg.slots_per_rank == 64);
	CHECK(cfg.allowed_gid == 0);
	CHECK(!strcmp(cfg.socket_path, "/tmp/other.sock"));
	config_free(&cfg);
	result_free(&r);

	/* $CKPTD_CONFIG names the file when --config does not. */
	setenv("CKPTD_CONFIG", path, 1);
	r = load(&cfg, NULL);
	CHECK(r.action == CONFIG_RUN && cfg.queue_depth == 8);
	config_free(&cfg);
	result_free(&r);
	/* --config wins over $CKPTD_CONFIG; an empty one reads nothing. */
	r = load(&cfg, "--config", "", NULL);
	CHECK(r.action == CONFIG_RUN && cfg.queue_depth == 16 && !cfg.config_file);
	config_free(&cfg);
	result_free(&r);
	setenv("CKPTD_CONFIG", "", 1);
	free(path);
}

static void test_file_errors(void)
{
	char *path, *missing;

	path = write_file("unknown-key.conf", "queue_depth = 8\n"
					      "\n"
					      "bogus_key = 1\n");
	expect_error(":3: unknown key 'bogus_key'", "--config", path, NULL);
	free(path);

	path = write_file("unknown-section.conf", "[ckptd]\n"
						  "queue_depth = 8\n"
						  "[writer]\n"
						  "queue_depth = 9\n");
	expect_error(":4: unknown section [writer]", "--config", path, NULL);
	free(path);

	/* The example of the brief, with the key named after file:line. */
	path = write_file("ckptd.conf", "# 1\n# 2\n# 3\n# 4\n# 5\n# 6\n# 7\n# 8\n# 9\n# 10\n"
					"# 11\nqueue_depth = 0\n");
	expect_error("ckptd.conf:12: queue_depth: 0 is below the minimum 1", "--config", path,
		     NULL);
	free(path);

	path = write_file("syntax.conf", "queue_depth = 8\n"
					 "this line has no equals sign\n");
	expect_error(":2: syntax error", "--config", path, NULL);
	free(path);

	char long_line[400];
	memset(long_line, 'x', sizeof(long_line));
	memcpy(long_line, "root = /", 8);
	long_line[sizeof(long_line) - 2] = '\n';
	long_line[sizeof(long_line) - 1] = '\0';
	char *text;
	if (asprintf(&text, "queue_depth = 8\n%s", long_line) < 0)
		abort();
	path = write_file("long.conf", text);
	expect_error(":2: line longer than", "--config", path, NULL);
	free(text);
	free(path);

	/* Every bad line is reported, not just the first. */
	path = write_file("two.conf", "queue_depth = x\nslots_per_rank = 99\n");
	expect_error(":1: queue_depth: 'x' is not a non-negative integer", "--config", path, NULL);
	expect_error(":2: slots_per_rank: 99 is above the maximum 64", "--config", path, NULL);
	free(path);

	if (asprintf(&missing, "%s/does-not-exist.conf", tmpdir) < 0)
		abort();
	expect_error("does-not-exist.conf: cannot open", "--config", missing, NULL);
	setenv("CKPTD_CONFIG", missing, 1);
	expect_error("does-not-exist.conf: cannot open", NULL);
	setenv("CKPTD_CONFIG", "", 1);
	free(missing);
}

static void test_precedence(void)
{
	struct ckptd_config cfg;
	char *path = write_file("prec.conf", "queue_depth = 8\nkeep_last = 5\nroot = /file\n");
	struct result r;

	r = load(&cfg, "--config", path, NULL);
	CHECK(r.action == CONFIG_RUN && cfg.queue_depth == 8 && cfg.keep_last == 5);
	config_free(&cfg);
	result_free(&r);

	setenv("CKPTD_QUEUE_DEPTH", "16", 1);
	setenv("CKPTD_ROOT", "/env", 1);
	r = load(&cfg, "--config", path, NULL);
	CHECK(r.action == CONFIG_RUN);
	CHECK(cfg.queue_depth == 16); /* env over file */
	CHECK(cfg.keep_last == 5);    /* file over default */
	CHECK(!strcmp(cfg.root, "/env"));
	config_free(&cfg);
	result_free(&r);

	/* Flags over env; both spellings and both forms; the last flag wins. */
	r = load(&cfg, "--config", path, "--queue-depth", "64", "--root=/flag", NULL);
	CHECK(r.action == CONFIG_RUN && cfg.queue_depth == 64 && !strcmp(cfg.root, "/flag"));
	config_free(&cfg);
	result_free(&r);
	r = load(&cfg, "--queue_depth=65", "--keep_last", "9", "--keep-last", "10", NULL);
	CHECK(r.action == CONFIG_RUN && cfg.queue_depth == 65 && cfg.keep_last == 10);
	config_free(&cfg);
	result_free(&r);

	/* A bad value below a good one is still an error: every source is checked. */
	setenv("CKPTD_SLOTS_PER_RANK", "0", 1);
	expect_error("CKPTD_SLOTS_PER_RANK: 0 is below the minimum 1", "--slots-per-rank", "2",
		     NULL);
	unsetenv("CKPTD_SLOTS_PER_RANK");
	unsetenv("CKPTD_QUEUE_DEPTH");
	unsetenv("CKPTD_ROOT");

	setenv("CKPTD_DIRECT_IO", "on", 1);
	setenv("CKPTD_FIXED_BUFFERS", "false", 1);
	setenv("CKPTD_STAGING_BYTES", "2G", 1);
	r = load(&cfg, NULL);
	CHECK(r.action == CONFIG_RUN && cfg.direct_io == DIRECT_IO_ON && !cfg.fixed_buffers &&
	      cfg.staging_bytes == 2ull << 30);
	config_free(&cfg);
	result_free(&r);
	unsetenv("CKPTD_DIRECT_IO");
	unsetenv("CKPTD_FIXED_BUFFERS");
	unsetenv("CKPTD_STAGING_BYTES");
	free(path);
}

static void test_sizes(void)
{
	static const struct {
		const char *text;
		uint64_t value;
	} good[] = {
		{ "0", 0 },
		{ "1", 1 },
		{ "1048576", 1048576 },
		{ "4096B", 4096 },
		{ "4K", 4096 },
		{ "4k", 4096 },
		{ "4KB", 4096 },
		{ "4KiB", 4096 },
		{ "512M", 512ull << 20 },
		{ "4GiB", 4ull << 30 },
		{ "1.5G", 3ull << 29 },
		{ "0.5K", 512 },
		{ "1.25M", 1310720 },
		{ "2T", 2ull << 40 },
		{ "16777215T", 16777215ull << 40 },
		{ "18446744073709551615", UINT64_MAX },
		{ "1.0", 1 },
		{ "16777215.5T", (16777215ull << 40) + (1ull << 39) },
	};
	static const struct {
		const char *text;
		int err;
	} bad[] = {
		{ "", -EINVAL },
		{ "-1", -EINVAL },
		{ "+1", -EINVAL },
		{ " 1", -EINVAL },
		{ "1 ", -EINVAL },
		{ "abc", -EINVAL },
		{ "4X", -EINVAL },
		{ "4KiBB", -EINVAL },
		{ "4Ki B", -EINVAL },
		{ "1.", -EINVAL },
		{ ".5G", -EINVAL },
		{ "1.5", -EINVAL },  /* not a whole number of bytes */
		{ "0.1K", -EINVAL },
		{ "1e9", -EINVAL },
		{ "0x10", -EINVAL },
		{ "4G4", -EINVAL },
		{ "18446744073709551616", -ERANGE },
		{ "16777216T", -ERANGE },
		{ "99999999999999999999999", -ERANGE },
		{ "16777216.5T", -ERANGE },
	};

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		uint64_t v = 12345;
		int r = config_parse_size(good[i].text, &v);
		if (r != 0 || v != good[i].value) {
			fprintf(stderr, "config_parse_size(\"%s\") = %d, %llu; expected %llu\n",
				good[i].text, r, (unsigned long long)v,
				(unsigned long long)good[i].value);
			failures++;
		}
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t v = 12345;
		int r = config_parse_size(bad[i].text, &v);
		if (r != bad[i].err || v != 12345) {
			fprintf(stderr, "config_parse_size(\"%s\") = %d; expected %d\n", bad[i].text,
				r, bad[i].err);
			failures++;
		}
	}
	CHECK(config_parse_size(NULL, &(uint64_t){ 0 }) == -EINVAL);
}

static void test_bounds_and_enums(void)
{
	expect_error("--request-size: 2K is below the minimum 4KiB", "--request-size", "2K", NULL);
	expect_error("--request-size: 128M is above the maximum 64MiB", "--request-size", "128M",
		     NULL);
	expect_error("--request-size: 5000 is not a multiple of 4KiB", "--request-size", "5000",
		     NULL);
	expect_error("--request-size: 'lots' is not a size", "--request-size", "lots", NULL);
	expect_error("--staging-bytes: '99999999T' is too large", "--staging-bytes", "99999999T",
		     NULL);
	expect_error("--chunk-size: 32KiB is below the minimum 64KiB", "--chunk-size", "32KiB",
		     NULL);
	expect_error("--queue-depth: 4097 is above the maximum 4096", "--queue-depth", "4097",
		     NULL);
	expect_error("--queue-depth: '-1' is not a non-negative integer", "--queue-depth", "-1",
		     NULL);
	expect_error("--queue-depth: ' 8' is not", "--queue-depth", " 8", NULL);
	expect_error("--queue-depth: '99999999999999999999' is too large", "--queue-depth",
		     "99999999999999999999", NULL);
	expect_error("--keep-last: 1000001 is above the maximum 1000000", "--keep-last",
		     "1000001", NULL);
	expect_error("--max-clients: 0 is below the minimum 1", "--max-clients", "0", NULL);
	expect_error("--socket-mode: '0800' is not an octal mode", "--socket-mode", "0800", NULL);
	expect_error("--socket-mode: 1000 is above the maximum 0777", "--socket-mode", "1000",
		     NULL);
	expect_error("--direct-io: 'maybe' is not one of auto, on or off", "--direct-io", "maybe",
		     NULL);
	expect_error("--backpressure: 'drop' is not one of block or skip", "--backpressure",
		     "drop", NULL);
	expect_error("--log-level: 'INFO' is not one of error, warn, info or debug",
		     "--log-level", "INFO", NULL);
	expect_error("--lock-memory: '' is not one of", "--lock-memory", "", NULL);
	expect_error("--fixed-buffers: 'maybe' is not a boolean", "--fixed-buffers", "maybe",
		     NULL);
	expect_error("--root: a path is required", "--root", "", NULL);
	expect_error("--allowed-group: no such group 'no-such-group-ckpt'", "--allowed-group",
		     "no-such-group-ckpt", NULL);
	setenv("CKPTD_ALLOWED_GROUP", "no-such-group-ckpt", 1);
	expect_error("CKPTD_ALLOWED_GROUP: no such group", NULL);
	unsetenv("CKPTD_ALLOWED_GROUP");

	char longsock[200];
	memset(longsock, 'a', sizeof(longsock));
	longsock[0] = '/';
	longsock[sizeof(longsock) - 1] = '\0';
	expect_error("--socket: socket path is longer than", "--socket", longsock, NULL);

	/* Command-line mistakes. */
	expect_error("--no-such-flag: unknown option", "--no-such-flag", "1", NULL);
	expect_error("--queue-depth: missing value", "--queue-depth", NULL);
	expect_error("extra: unexpected argument", "extra", NULL);
	expect_error("--help=x: takes no value", "--help=x", NULL);

	/* Group by name: root's group is 0 on every system ckptd runs on. */
	struct ckptd_config cfg;
	struct result r = load(&cfg, "--allowed-group", "root", NULL);
	CHECK(r.action == CONFIG_RUN && cfg.allowed_gid == 0);
	config_free(&cfg);
	result_free(&r);
}

static void test_actions(void)
{
	struct ckptd_config cfg;
	struct result r;
	char *good = write_file("check-good.conf", "[ckptd]\nqueue_depth = 12\nchunk_size = 8M\n");
	char *bad = write_file("check-bad.conf", "[ckptd]\nqueue_depth = 12\ndirect_io = maybe\n");

	r = load(&cfg, "--check-config", "--config", good, NULL);
	CHECK(r.action == CONFIG_EXIT_OK);
	CHECK(r.err_len == 0);
	CHECK_CONTAINS(r.out, "queue_depth = 12\n");
	CHECK_CONTAINS(r.out, "chunk_size = 8MiB\n");
	CHECK_CONTAINS(r.out, "backpressure = block\n");
	CHECK_CONTAINS(r.out, "socket_mode = 0660\n");
	config_free(&cfg);
	result_free(&r);

	r = load(&cfg, "--check-config", "--config", bad, NULL);
	CHECK(r.action == CONFIG_EXIT_ERROR);
	CHECK_CONTAINS(r.err, "check-bad.conf:3: direct_io: 'maybe' is not one of auto, on or off");
	config_free(&cfg);
	result_free(&r);

	/* The printed configuration reads back as the same configuration. */
	struct ckptd_config a, b;
	r = load(&a, "--config", good, "--allowed-group", "0", "--fixed-buffers", "off",
		 "--staging-bytes", "12345678", NULL);
	CHECK(r.action == CONFIG_RUN);
	result_free(&r);
	char *printed = NULL;
	size_t printed_len;
	FILE *f = open_memstream(&printed, &printed_len);
	config_print(&a, f);
	fclose(f);
	char *copy = write_file("printed.conf", printed);
	r = load(&b, "--config", copy, NULL);
	CHECK(r.action == CONFIG_RUN);
	CHECK(!strcmp(a.socket_path, b.socket_path) && !strcmp(a.root, b.root));
	CHECK(!strcmp(a.allowed_group, b.allowed_group) && a.allowed_gid == b.allowed_gid);
	CHECK(a.socket_mode == b.socket_mode && a.staging_bytes == b.staging_bytes);
	CHECK(a.staging_bytes == 12345678);
	CHECK(a.slots_per_rank == b.slots_per_rank && a.queue_depth == b.queue_depth);
	CHECK(a.request_bytes == b.request_bytes && a.chunk_bytes == b.chunk_bytes);
	CHECK(a.direct_io == b.direct_io && a.keep_last == b.keep_last);
	CHECK(a.backpressure == b.backpressure && a.log_level == b.log_level);
	CHECK(a.lock_memory == b.lock_memory && a.workers == b.workers);
	CHECK(a.max_clients == b.max_clients && a.fixed_buffers == b.fixed_buffers);
	config_free(&a);
	config_free(&b);
	result_free(&r);
	free(printed);
	free(copy);

	r = load(&cfg, "--help", NULL);
	CHECK(r.action == CONFIG_EXIT_OK);
	static const char *const sections[] = { "NAME\n", "SYNOPSIS\n", "DESCRIPTION\n",
						"OPTIONS\n", "FILES\n", "ENVIRONMENT\n",
						"SIGNALS\n", "EXIT STATUS\n", "SIGTERM", "SIGHUP",
						"--check-config", "--print-reference-config",
						"--config PATH", "ckpt/ckptd.conf" };
	for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++)
		CHECK_CONTAINS(r.out, sections[i]);
	static const char *const every_option[] = {
		"--socket PATH", "CKPTD_SOCKET", "--socket-mode MODE", "CKPTD_SOCKET_MODE",
		"Default: 0660.", "--allowed-group GROUP", "CKPTD_ALLOWED_GROUP",
		"--root DIR", "CKPTD_ROOT", "Default: /var/lib/ckpt.", "--staging-bytes SIZE",
		"CKPTD_STAGING_BYTES", "--slots-per-rank N", "CKPTD_SLOTS_PER_RANK",
		"--queue-depth N", "CKPTD_QUEUE_DEPTH", "Default: 16", "--request-size SIZE",
		"CKPTD_REQUEST_SIZE", "Default: 4MiB", "--chunk-size SIZE", "CKPTD_CHUNK_SIZE",
		"Default: 4MiB", "--direct-io auto|on|off", "CKPTD_DIRECT_IO", "--keep-last N",
		"CKPTD_KEEP_LAST", "--backpressure block|skip", "CKPTD_BACKPRESSURE",
		"--log-level error|warn|info|debug", "CKPTD_LOG_LEVEL", "--lock-memory",
		"CKPTD_LOCK_MEMORY", "--workers N", "CKPTD_WORKERS", "--max-clients N",
		"CKPTD_MAX_CLIENTS", "Default: 1024", "--fixed-buffers true|false",
		"CKPTD_FIXED_BUFFERS", "Default: true", "CKPTD_CONFIG",
	};
	for (size_t i = 0; i < sizeof(every_option) / sizeof(every_option[0]); i++)
		CHECK_CONTAINS(r.out, every_option[i]);
	config_free(&cfg);
	result_free(&r);

	/* --help wins over bad settings: it is how users find the good ones. */
	r = load(&cfg, "--queue-depth", "0", "-h", NULL);
	CHECK(r.action == CONFIG_EXIT_OK);
	config_free(&cfg);
	result_free(&r);

	r = load(&cfg, "--version", NULL);
	CHECK(r.action == CONFIG_EXIT_OK);
	CHECK(!strncmp(r.out, "ckptd ", 6));
	config_free(&cfg);
	result_free(&r);

	r = load(&cfg, "--print-reference-config", NULL);
	CHECK(r.action == CONFIG_EXIT_OK);
	CHECK_CONTAINS(r.out, "#queue_depth = 16\n");
	config_free(&cfg);
	result_free(&r);

	free(good);
	free(bad);
}

/* The reference file, with every line uncommented, is a valid config
 * equal to the defaults. */
static void test_reference_parses(void)
{
	char *ref = NULL, *uncommented = NULL;
	size_t ref_len, un_len;
	FILE *f = open_memstream(&ref, &ref_len);
	config_print_reference(f);
	fclose(f);
	f = open_memstream(&uncommented, &un_len);
	for (char *line = strtok(ref, "\n"); line; line = strtok(NULL, "\n"))
		if (line[0] == '#' && line[1] != ' ' && line[1] != '\0')
			fprintf(f, "%s\n", line + 1);
	fclose(f);
	char *path = write_file("reference-uncommented.conf", uncommented);
	struct ckptd_config cfg;
	struct result r = load(&cfg, "--config", path, NULL);
	CHECK(r.action == CONFIG_RUN);
	if (r.err_len)
		fprintf(stderr, "%s", r.err);
	CHECK(cfg.queue_depth == 16 && cfg.request_bytes == 4 << 20);
	config_free(&cfg);
	result_free(&r);
	free(path);
	free(ref);
	free(uncommented);
}

static int check_reference_file(const char *path)
{
	char *expected = NULL, *actual = NULL;
	size_t expected_len, actual_len = 0, cap = 0;
	FILE *f = open_memstream(&expected, &expected_len);
	FILE *in = fopen(path, "r");
	int ok;

	config_print_reference(f);
	fclose(f);
	if (!in) {
		perror(path);
		free(expected);
		return 1;
	}
	for (;;) {
		if (actual_len + 4096 > cap) {
			cap = cap ? cap * 2 : 65536;
			actual = realloc(actual, cap);
			if (!actual)
				abort();
		}
		size_t n = fread(actual + actual_len, 1, cap - actual_len - 1, in);
		actual_len += n;
		if (n == 0)
			break;
	}
	fclose(in);
	actual[actual_len] = '\0';
	ok = actual_len == expected_len && !memcmp(actual, expected, actual_len);
	if (!ok) {
		size_t i = 0;
		while (i < actual_len && i < expected_len && actual[i] == expected[i])
			i++;
		fprintf(stderr,
			"%s differs from config_print_reference() at byte %zu:\n"
			"file:     \"%.60s\"\nexpected: \"%.60s\"\n"
			"Regenerate it with: ckptd --print-reference-config > ckptd/ckptd.conf\n",
			path, i, actual + i, expected + i);
	}
	free(expected);
	free(actual);
	return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--reference"))
		return check_reference_file(argv[2]);
	if (argc != 1) {
		fprintf(stderr, "usage: %s [--reference FILE]\n", argv[0]);
		return 1;
	}
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	clean_env();
	test_defaults();
	clean_env();
	test_file();
	test_file_errors();
	test_precedence();
	test_sizes();
	test_bounds_and_enums();
	test_actions();
	test_reference_parses();

	char *cmd;
	if (asprintf(&cmd, "rm -rf '%s'", tmpdir) >= 0) {
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", tmpdir);
		free(cmd);
	}
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
