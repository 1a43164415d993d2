/* SPDX-License-Identifier: MIT */
/*
 * ckpt-inspect (path of the binary in argv[1]): exit statuses, the text
 * and --json output of each level, and --verify catching corruption.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "fixture.h"
#include "test-common.h"

static const char *inspect;

/* Run ckpt-inspect with args (a shell fragment; our paths have no spaces);
 * stdout into out (malloc'd), exit status returned. */
static int run(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run(char **out, const char *fmt, ...)
{
	char args[8192], cmd[9000];
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	va_list ap;
	FILE *f;
	int st;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "'%s' %s 2>/dev/null", inspect, args);
	f = popen(cmd, "r");
	if (!f || !buf) {
		free(buf);
		return -1;
	}
	for (;;) {
		size_t n;

		if (cap - len < 4096) {
			cap *= 2;
			buf = realloc(buf, cap);
		}
		n = fread(buf + len, 1, cap - len - 1, f);
		if (n == 0)
			break;
		len += n;
	}
	buf[len] = '\0';
	st = pclose(f);
	if (out)
		*out = buf;
	else
		free(buf);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static json_t *parse(const char *text)
{
	json_error_t e;
	json_t *j = json_loads(text, 0, &e);

	if (!j)
		fprintf(stderr, "not JSON (%s, line %d): %s\n", e.text, e.line, text);
	return j;
}

static json_int_t jint(json_t *o, const char *key)
{
	return json_integer_value(json_object_get(o, key));
}

static const char *jstr(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "";
}

int main(int argc, char **argv)
{
	char tmp[4096], root[4200], shard[4400];
	char *out = NULL;
	json_t *j = NULL;
	int ret = 1;

	if (argc != 2) {
		fprintf(stderr, "usage: %s PATH-TO-ckpt-inspect\n", argv[0]);
		return 1;
	}
	inspect = argv[1];
	if (fixture_tmpdir(tmp, sizeof(tmp)) < 0)
		return 1;
	snprintf(root, sizeof(root), "%s/root", tmp);
	CHECK_EQ(fixture_make_step(root, "jobA", 1, 2, true), 0);
	CHECK_EQ(fixture_make_step(root, "jobA", 2, 2, true), 0);
	CHECK_EQ(fixture_make_step(root, "jobA", 3, 2, false), 0);
	CHECK_EQ(fixture_make_step(root, "jobB", 7, 1, true), 0);

#define RUN(out, ...) run(out, __VA_ARGS__)
#define DROP() do { free(out); out = NULL; json_decref(j); j = NULL; } while (0)

	/* Usage. */
	CHECK_EQ(RUN(&out, "--help"), 0);
	CHECK_CONTAINS(out, "EXIT STATUS");
	CHECK_CONTAINS(out, "SYNOPSIS");
	DROP();
	CHECK_EQ(RUN(&out, "--version"), 0);
	CHECK_CONTAINS(out, "ckpt-inspect ");
	DROP();
	CHECK_EQ(RUN(NULL, "%s", ""), 2);
	CHECK_EQ(RUN(NULL, "--bogus %s", root), 2);
	CHECK_EQ(RUN(NULL, "--rank x %s", root), 2);
	CHECK_EQ(RUN(NULL, "%s %s", root, root), 2);

	/* Not found. */
	CHECK_EQ(RUN(NULL, "%s/nope", tmp), 3);
	CHECK_EQ(RUN(NULL, "%s/jobA/99", root), 3);
	CHECK_EQ(RUN(NULL, "%s/jobA/step-0000000099", root), 3);
	CHECK_EQ(RUN(NULL, "%s/jobA/3", root), 3);  /* not committed */
	CHECK_EQ(RUN(NULL, "--rank 5 %s/jobA/2", root), 3);

	/* ROOT. */
	CHECK_EQ(RUN(&out, "%s", root), 0);
	CHECK_CONTAINS(out, "jobA");
	CHECK_CONTAINS(out, "jobB");
	DROP();
	CHECK_EQ(RUN(&out, "--json %s", root), 0);
	CHECK((j = parse(out)) != NULL);
	{
		json_t *jobs = json_object_get(j, "jobs");

		CHECK_EQ(json_array_size(jobs), 2);
		json_t *a = json_array_get(jobs, 0);

		CHECK(!strcmp(jstr(a, "job"), "jobA"));
		CHECK_EQ(jint(a, "committed_steps"), 2);
		CHECK_EQ(jint(a, "latest"), 2);
		CHECK(jint(a, "total_bytes") > 2 * 2 * 400000);
		CHECK_EQ(jint(json_array_get(jobs, 1), "latest"), 7);
	}
	DROP();

	/* ROOT/JOB. */
	CHECK_EQ(RUN(&out, "%s/jobA/", root), 0);
	CHECK_CONTAINS(out, "incomplete");
	CHECK_CONTAINS(out, "LATEST");
	DROP();
	CHECK_EQ(RUN(&out, "--json %s/jobA", root), 0);
	CHECK((j = parse(out)) != NULL);
	{
		json_t *steps = json_object_get(j, "steps");

		CHECK_EQ(json_array_size(steps), 3);
		CHECK_EQ(jint(j, "latest"), 2);
		CHECK_EQ(jint(json_array_get(steps, 0), "step"), 1);
		CHECK(!strcmp(jstr(json_array_get(steps, 0), "state"), "committed"));
		CHECK(json_is_true(json_object_get(json_array_get(steps, 1), "latest")));
		CHECK(!strcmp(jstr(json_array_get(steps, 2), "state"), "incomplete"));
		CHECK_EQ(jint(json_array_get(steps, 2), "ranks"), 2);
		CHECK_EQ(jint(json_array_get(steps, 1), "ranks"), 2);
	}
	DROP();

	/* ROOT/JOB/STEP, by number and by directory name. */
	CHECK_EQ(RUN(&out, "%s/jobA/2", root), 0);
	CHECK_CONTAINS(out, "world_size");
	CHECK_CONTAINS(out, "layer0.weight");
	CHECK_CONTAINS(out, "[100:200, 0:1000]");
	CHECK_CONTAINS(out, "index_sha256");
	DROP();
	CHECK_EQ(RUN(&out, "--json %s/jobA/step-0000000002", root), 0);
	CHECK((j = parse(out)) != NULL);
	{
		json_t *ranks = json_object_get(j, "ranks");
		json_t *t;

		CHECK(!strcmp(jstr(j, "job"), "jobA"));
		CHECK_EQ(jint(j, "step"), 2);
		CHECK_EQ(jint(j, "world_size"), 2);
		CHECK_EQ(jint(j, "chunk_bytes"), FIXTURE_CHUNK_BYTES);
		CHECK_EQ(json_array_size(ranks), 2);
		CHECK_EQ(strlen(jstr(json_array_get(ranks, 1), "index_sha256")), 64);
		t = json_array_get(json_object_get(json_array_get(ranks, 1), "tensors"), 0);
		CHECK(!strcmp(jstr(t, "name"), "layer0.weight"));
		CHECK(!strcmp(jstr(t, "dtype"), "f32"));
		CHECK(!strcmp(jstr(t, "slice"), "[100:200, 0:1000]"));
		CHECK_EQ(json_integer_value(json_array_get(json_object_get(t, "offset"), 0)), 100);
		CHECK_EQ(jint(t, "nbytes"), 400000);
	}
	DROP();
	CHECK_EQ(RUN(&out, "--json --rank 1 %s/jobA/2", root), 0);
	CHECK((j = parse(out)) != NULL);
	CHECK_EQ(json_array_size(json_object_get(j, "ranks")), 1);
	CHECK_EQ(jint(json_array_get(json_object_get(j, "ranks"), 0), "rank"), 1);
	DROP();

	/* --verify, good. */
	CHECK_EQ(RUN(&out, "--verify %s/jobA", root), 0);
	CHECK_CONTAINS(out, "step 1: OK");
	CHECK_CONTAINS(out, "step 2: OK");
	DROP();
	CHECK_EQ(RUN(&out, "--verify --quiet %s/jobA", root), 0);
	CHECK_EQ(strlen(out), 0);
	DROP();
	CHECK_EQ(RUN(&out, "--verify --json %s/jobA/2", root), 0);
	CHECK((j = parse(out)) != NULL);
	CHECK(json_is_true(json_object_get(j, "ok")));
	CHECK_EQ(jint(j, "chunks"), 20);
	CHECK_EQ(jint(j, "bad_chunks"), 0);
	DROP();
	CHECK_EQ(RUN(NULL, "--verify %s", root), 0);

	/* --verify, a flipped byte in rank 1's shard of step 2. */
	snprintf(shard, sizeof(shard), "%s/jobA/step-0000000002/rank-000001.shard", root);
	CHECK_EQ(fixture_flip_byte(shard, 300000), 0);
	CHECK_EQ(RUN(&out, "--verify %s/jobA", root), 1);
	CHECK_CONTAINS(out, "step 1: OK");
	CHECK_CONTAINS(out, "step 2: FAILED");
	CHECK_CONTAINS(out, "layer0.weight");
	DROP();
	CHECK_EQ(RUN(&out, "--verify --json %s/jobA", root), 1);
	CHECK((j = parse(out)) != NULL);
	{
		json_t *s2 = json_array_get(json_object_get(j, "steps"), 1);

		CHECK(json_is_false(json_object_get(j, "ok")));
		CHECK_EQ(jint(j, "failed_steps"), 1);
		CHECK(json_is_true(json_object_get(json_array_get(json_object_get(j, "steps"), 0), "ok")));
		CHECK_EQ(jint(s2, "bad_chunks"), 1);
		CHECK_CONTAINS(jstr(s2, "error"), "layer0.weight");
		CHECK_CONTAINS(jstr(s2, "error"), "rank 1");
		CHECK_CONTAINS(jstr(s2, "error"), "byte offset 262144");
	}
	DROP();
	CHECK_EQ(RUN(NULL, "--verify --rank 0 %s/jobA/2", root), 0);
	CHECK_EQ(RUN(NULL, "--verify --rank 1 %s/jobA/2", root), 1);
	CHECK_EQ(RUN(NULL, "--verify %s", root), 1);
	/* Showing (not verifying) is still fine. */
	CHECK_EQ(RUN(NULL, "%s/jobA/2", root), 0);
	CHECK_EQ(fixture_flip_byte(shard, 300000), 0);
	CHECK_EQ(RUN(NULL, "--verify %s/jobA/2", root), 0);

	/* A truncated shard. */
	CHECK_EQ(truncate(shard, 4096), 0);
	CHECK_EQ(RUN(&out, "--verify %s/jobA/2", root), 1);
	CHECK_CONTAINS(out, "truncated");
	DROP();

	/* A manifest that fails its checksum. */
	{
		char mpath[4400];
		FILE *f;

		snprintf(mpath, sizeof(mpath), "%s/jobB/step-0000000007/MANIFEST.json", root);
		f = fopen(mpath, "r+");
		CHECK(f != NULL);
		char buf[65536];
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);

		buf[n] = '\0';
		char *q = strstr(buf, "\"nbytes\": 400000");

		CHECK(q != NULL);
		q[strlen("\"nbytes\": ")] = '5';
		rewind(f);
		fwrite(buf, 1, n, f);
		fclose(f);
		CHECK_EQ(RUN(&out, "--verify %s/jobB/7", root), 1);
		CHECK_CONTAINS(out, "MANIFEST.json");
		DROP();
		CHECK_EQ(RUN(&out, "--verify --json %s/jobB", root), 1);
		CHECK((j = parse(out)) != NULL);
		CHECK(json_is_false(json_object_get(j, "ok")));
		DROP();
		CHECK_EQ(RUN(&out, "--json %s/jobB", root), 0);
		CHECK((j = parse(out)) != NULL);
		CHECK(!strcmp(jstr(json_array_get(json_object_get(j, "steps"), 0), "state"),
			      "damaged"));
		DROP();
	}
	ret = 0;
fail:
	if (ret && out)
		fprintf(stderr, "last output:\n%s\n", out);
	free(out);
	json_decref(j);
	fixture_rmtree(tmp);
	return ret;
}
