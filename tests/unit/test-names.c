/* SPDX-License-Identifier: MIT */
/* Job and tensor names, layout names, the default socket path. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "proto.h"

#define JOB_OK(s) CHECK_EQ(ckpt_job_name_check(s, strlen(s)), 0)
#define JOB_BAD(s) CHECK_EQ(ckpt_job_name_check(s, strlen(s)), -CKPT_E_BAD_NAME)
#define TN_OK(s) CHECK_EQ(ckpt_tensor_name_check(s, strlen(s)), 0)
#define TN_BAD(s) CHECK_EQ(ckpt_tensor_name_check(s, strlen(s)), -CKPT_E_BAD_NAME)

int main(void)
{
	char big[300], buf[64];
	uint64_t step = 0;

	JOB_OK("llama-70b");
	JOB_OK("a");
	JOB_OK("A.b_c-9");
	JOB_BAD("");
	JOB_BAD(".hidden");
	JOB_BAD(".");
	JOB_BAD("..");
	JOB_BAD("a/b");
	JOB_BAD("a b");
	JOB_BAD("job\n");
	JOB_BAD("caf\xc3\xa9");
	CHECK_EQ(ckpt_job_name_check("ab\0cd", 5), -CKPT_E_BAD_NAME);
	CHECK_EQ(ckpt_job_name_check(NULL, 0), -CKPT_E_BAD_NAME);
	memset(big, 'j', sizeof(big));
	CHECK_EQ(ckpt_job_name_check(big, 128), 0);
	CHECK_EQ(ckpt_job_name_check(big, 129), -CKPT_E_BAD_NAME);

	TN_OK("model.layers.0.attn.wq");
	TN_OK("..x");
	TN_OK(".x");
	TN_OK("weights with spaces");
	TN_OK("caf\xc3\xa9");
	TN_BAD("");
	TN_BAD(".");
	TN_BAD("..");
	TN_BAD("/");
	TN_BAD("a/b");
	TN_BAD("../etc/passwd");
	TN_BAD("tab\there");
	TN_BAD("nl\n");
	TN_BAD("esc\x1b[31m");
	TN_BAD("del\x7f");
	CHECK_EQ(ckpt_tensor_name_check("ab\0cd", 5), -CKPT_E_BAD_NAME);
	CHECK_EQ(ckpt_tensor_name_check(big, 255), 0);
	CHECK_EQ(ckpt_tensor_name_check(big, 256), -CKPT_E_BAD_NAME);
	CHECK_EQ(ckpt_tensor_name_check(NULL, 0), -CKPT_E_BAD_NAME);

	/* Tensor names are valid UTF-8 (FORMAT.md, "Tensor names"): the
	 * manifest is JSON, and a name it cannot hold must be refused at
	 * the call, not when the commit encodes the manifest. */
	TN_OK("gr\xc3\xb6\xc3\x9f" "e");                 /* 2-byte */
	TN_OK("\xe2\x88\x87loss");                        /* 3-byte */
	TN_OK("emoji\xf0\x9f\x98\x80");                   /* 4-byte */
	TN_OK("\xc2\xa0nbsp");                             /* U+00A0 */
	TN_OK("\xef\xbf\xbf");                             /* U+FFFF */
	TN_OK("\xf4\x8f\xbf\xbf");                         /* U+10FFFF */
	TN_BAD("w\xff");                                   /* never in UTF-8 */
	TN_BAD("latin1 caf\xe9");                          /* ISO 8859-1, not UTF-8 */
	TN_BAD("cut\xc3");                                 /* truncated sequence */
	TN_BAD("cut\xe2\x88");
	TN_BAD("\x80lead");                                /* continuation first */
	TN_BAD("over\xc0\xaf");                            /* overlong '/' */
	TN_BAD("over\xe0\x80\xaf");
	TN_BAD("over\xf0\x80\x80\xaf");
	TN_BAD("sur\xed\xa0\x80");                         /* U+D800 */
	TN_BAD("big\xf4\x90\x80\x80");                     /* above U+10FFFF */
	TN_BAD("big\xf5\x80\x80\x80");
	/* C1 controls are valid UTF-8 and JSON: a committed step may hold
	 * them, so they stay names. */
	TN_OK("c1\xc2\x80");
	/* The length bounds the check: a sequence cut by it is refused. */
	CHECK_EQ(ckpt_tensor_name_check("a\xc3\xa9", 2), -CKPT_E_BAD_NAME);
	CHECK_EQ(ckpt_tensor_name_check("a\xc3\xa9", 3), 0);
	CHECK(ckpt_tensor_name_problem("w\xff", 2) && strstr(ckpt_tensor_name_problem("w\xff", 2), "UTF-8"));
	CHECK(ckpt_tensor_name_problem("ok", 2) == NULL);
	ckpt_name_quote(buf, sizeof(buf), "a\"\\\xff\n\xc3\xa9z", 8);
	CHECK(strcmp(buf, "a\\x22\\x5c\\xff\\x0a\\xc3\\xa9z") == 0);
	ckpt_name_quote(buf, 8, "abcdefghij", 10);
	CHECK(strcmp(buf, "abcd...") == 0);
	ckpt_name_quote(buf, 8, "abcdefg", 7);
	CHECK(strcmp(buf, "abcdefg") == 0);
	ckpt_name_quote(buf, 8, "ab\xff\xff", 4);
	CHECK(strcmp(buf, "ab...") == 0);

	CHECK_EQ(ckpt_step_dirname(buf, sizeof(buf), 42), 15);
	CHECK(strcmp(buf, "step-0000000042") == 0);
	CHECK_EQ(ckpt_step_dirname(buf, 15, 42), -ENAMETOOLONG);
	CHECK_EQ(ckpt_step_dirname(buf, 16, 42), 15);
	/* Step numbers end where ten digits do (FORMAT.md, "Step numbers");
	 * past that the name is never formatted, and the buffer is left
	 * empty rather than holding whatever it held. */
	CHECK_EQ(ckpt_step_dirname(buf, sizeof(buf), 9999999999ull), 15);
	CHECK(strcmp(buf, "step-9999999999") == 0);
	CHECK_EQ(ckpt_step_dirname(buf, sizeof(buf), 10000000000ull), -ERANGE);
	CHECK_EQ(buf[0], '\0');
	strcpy(buf, "step-0000000007");
	CHECK_EQ(ckpt_step_dirname(buf, sizeof(buf), UINT64_MAX), -ERANGE);
	CHECK_EQ(buf[0], '\0');
	strcpy(buf, "step-0000000007");
	CHECK_EQ(ckpt_step_dirname(buf, 15, 42), -ENAMETOOLONG);
	CHECK_EQ(buf[0], '\0');
	CHECK_EQ(ckpt_shard_filename(buf, sizeof(buf), 3), 17);
	CHECK(strcmp(buf, "rank-000003.shard") == 0);
	CHECK_EQ(ckpt_index_filename(buf, sizeof(buf), 999999), 17);
	CHECK(strcmp(buf, "rank-999999.index") == 0);
	CHECK_EQ(ckpt_index_filename(buf, 4, 1), -ENAMETOOLONG);

	CHECK_EQ(ckpt_step_dirname_parse("step-0000000042", &step), 0);
	CHECK_EQ(step, 42);
	CHECK_EQ(ckpt_step_dirname_parse("step-9999999999", &step), 0);
	CHECK_EQ(step, 9999999999ull);
	CHECK_EQ(ckpt_step_dirname_parse("step-42", &step), -EINVAL);
	CHECK_EQ(ckpt_step_dirname_parse("step-00000000042", &step), -EINVAL);
	CHECK_EQ(ckpt_step_dirname_parse("step-000000004x", &step), -EINVAL);
	CHECK_EQ(ckpt_step_dirname_parse("step-0000000042.tmp", &step), -EINVAL);
	CHECK_EQ(ckpt_step_dirname_parse("Step-0000000042", &step), -EINVAL);
	CHECK_EQ(ckpt_step_dirname_parse("", &step), -EINVAL);

	/* S3 keys (FORMAT.md, "On S3"). */
	{
		char key[1200], huge[1100];
		const char *rest = NULL;

		CHECK_EQ(ckpt_s3_job_key(key, sizeof(key), "", "j"), 1);
		CHECK(strcmp(key, "j") == 0);
		CHECK_EQ(ckpt_s3_job_key(key, sizeof(key), "a/b", "llama"), 9);
		CHECK(strcmp(key, "a/b/llama") == 0);
		CHECK_EQ(ckpt_s3_jobs_prefix(key, sizeof(key), ""), 0);
		CHECK(strcmp(key, "") == 0);
		CHECK_EQ(ckpt_s3_jobs_prefix(key, sizeof(key), "a/b"), 4);
		CHECK(strcmp(key, "a/b/") == 0);
		CHECK_EQ(ckpt_s3_job_prefix(key, sizeof(key), "a/j"), 4);
		CHECK(strcmp(key, "a/j/") == 0);
		CHECK_EQ(ckpt_s3_latest_key(key, sizeof(key), "a/j"), 10);
		CHECK(strcmp(key, "a/j/LATEST") == 0);
		CHECK_EQ(ckpt_s3_steps_prefix(key, sizeof(key), "a/j"), 9);
		CHECK(strcmp(key, "a/j/step-") == 0);
		CHECK_EQ(ckpt_s3_step_key(key, sizeof(key), "a/j", 42, CKPT_MANIFEST_NAME), 33);
		CHECK(strcmp(key, "a/j/step-0000000042/MANIFEST.json") == 0);
		CHECK_EQ(ckpt_s3_step_key(key, sizeof(key), "j", 7, NULL), 18);
		CHECK(strcmp(key, "j/step-0000000007/") == 0);

		/* Hostile job names and prefixes: nothing climbs out of the
		 * prefix or into another job's keys. */
		strcpy(key, "stale");
		CHECK_EQ(ckpt_s3_job_key(key, sizeof(key), "p", "../x"), -EINVAL);
		CHECK_EQ(key[0], '\0');
		CHECK_EQ(ckpt_s3_job_key(key, sizeof(key), "p", "a/b"), -EINVAL);
		CHECK_EQ(ckpt_s3_job_key(key, sizeof(key), "p", ""), -EINVAL);
		CHECK_EQ(ckpt_s3_job_key(key, sizeof(key), "p", "nl\n"), -EINVAL);
		CHECK_EQ(ckpt_s3_job_key(key, sizeof(key), "p", NULL), -EINVAL);
		CHECK_EQ(ckpt_s3_job_key(key, sizeof(key), "/p", "j"), -EINVAL);
		CHECK_EQ(ckpt_s3_job_key(key, sizeof(key), "p/", "j"), -EINVAL);
		CHECK_EQ(ckpt_s3_job_key(key, sizeof(key), NULL, "j"), -EINVAL);
		CHECK_EQ(ckpt_s3_jobs_prefix(key, sizeof(key), "p/"), -EINVAL);
		CHECK_EQ(ckpt_s3_job_prefix(key, sizeof(key), ""), -EINVAL);
		CHECK_EQ(ckpt_s3_latest_key(key, sizeof(key), NULL), -EINVAL);
		CHECK_EQ(ckpt_s3_steps_prefix(key, sizeof(key), "j/"), -EINVAL);
		CHECK_EQ(ckpt_s3_step_key(key, sizeof(key), "", 1, "x"), -EINVAL);
		strcpy(key, "stale");
		CHECK_EQ(ckpt_s3_step_key(key, sizeof(key), "j", 1, "a/b"), -EINVAL);
		CHECK_EQ(key[0], '\0');
		CHECK_EQ(ckpt_s3_step_key(key, sizeof(key), "j", 1, ".."), -EINVAL);

		/* Bad step numbers are never formatted. */
		strcpy(key, "stale");
		CHECK_EQ(ckpt_s3_step_key(key, sizeof(key), "j", 10000000000ull, "x"), -ERANGE);
		CHECK_EQ(key[0], '\0');
		CHECK_EQ(ckpt_s3_step_key(key, sizeof(key), "j", UINT64_MAX, NULL), -ERANGE);
		CHECK_EQ(ckpt_s3_step_key(key, sizeof(key), "j", 9999999999ull, "x"), 19);
		CHECK(strcmp(key, "j/step-9999999999/x") == 0);

		/* Too long for the buffer: refused whole, never cut. */
		memset(huge, 'p', sizeof(huge) - 1);
		huge[sizeof(huge) - 1] = '\0';
		strcpy(key, "stale");
		CHECK_EQ(ckpt_s3_job_key(key, 1100, huge, "j"), -ENAMETOOLONG);
		CHECK_EQ(key[0], '\0');
		CHECK_EQ(ckpt_s3_job_key(key, sizeof(key), huge, "j"), 1101);
		CHECK_EQ(ckpt_s3_step_key(key, sizeof(key), huge, 1, "x"), 1117);
		CHECK_EQ(ckpt_s3_step_key(key, 1117, huge, 1, "x"), -ENAMETOOLONG);
		CHECK_EQ(key[0], '\0');
		CHECK_EQ(ckpt_s3_step_key(key, 5, "a/j", 42, NULL), -ENAMETOOLONG);
		CHECK_EQ(ckpt_s3_latest_key(key, 10, "a/j"), -ENAMETOOLONG);
		CHECK_EQ(ckpt_s3_latest_key(key, 11, "a/j"), 10);
		CHECK_EQ(ckpt_s3_steps_prefix(key, 9, "a/j"), -ENAMETOOLONG);
		CHECK_EQ(ckpt_s3_job_prefix(key, 4, "a/j"), -ENAMETOOLONG);
		CHECK_EQ(ckpt_s3_jobs_prefix(key, 4, "a/b"), -ENAMETOOLONG);
		CHECK_EQ(ckpt_s3_job_key(key, 0, "a", "j"), -ENAMETOOLONG);

		/* The parser takes back what the writer makes... */
		step = 0;
		CHECK_EQ(ckpt_s3_key_parse("a/j", "a/j/step-0000000042/MANIFEST.json", &step, &rest), 0);
		CHECK_EQ(step, 42);
		CHECK(strcmp(rest, "MANIFEST.json") == 0);
		CHECK_EQ(ckpt_s3_key_parse("a/j", "a/j/step-0000000000/", &step, &rest), 0);
		CHECK_EQ(step, 0);
		CHECK(strcmp(rest, "") == 0);
		CHECK_EQ(ckpt_s3_key_parse("j", "j/step-9999999999/x/y", &step, &rest), 0);
		CHECK_EQ(step, 9999999999ull);
		CHECK(strcmp(rest, "x/y") == 0);
		CHECK_EQ(ckpt_s3_key_parse("j", "j/step-0000000003/x", NULL, NULL), 0);
		CHECK_EQ(ckpt_s3_step_path_parse("step-0000000005/rank-000000.shard", &step, &rest), 0);
		CHECK_EQ(step, 5);
		CHECK(strcmp(rest, "rank-000000.shard") == 0);
		/* ...and nothing else: foreign keys leave step and rest alone. */
		step = 77;
		rest = NULL;
		CHECK_EQ(ckpt_s3_key_parse("a/j", "a/jj/step-0000000042/x", &step, &rest), -EINVAL);
		CHECK_EQ(ckpt_s3_key_parse("a/j", "a/j", &step, &rest), -EINVAL);
		CHECK_EQ(ckpt_s3_key_parse("a/j", "a/j/", &step, &rest), -EINVAL);
		CHECK_EQ(ckpt_s3_key_parse("a/j", "a/j/LATEST", &step, &rest), -EINVAL);
		CHECK_EQ(ckpt_s3_key_parse("a/j", "b/j/step-0000000042/x", &step, &rest), -EINVAL);
		CHECK_EQ(ckpt_s3_key_parse("a/j", "x/a/j/step-0000000042/x", &step, &rest), -EINVAL);
		CHECK_EQ(ckpt_s3_key_parse("a/j", "a/j/step-0000000042", &step, &rest), -EINVAL);
		CHECK_EQ(ckpt_s3_key_parse("a/j", "a/j/step-42/x", &step, &rest), -EINVAL);
		CHECK_EQ(ckpt_s3_key_parse("a/j", "a/j/step-00000000042/x", &step, &rest), -EINVAL);
		CHECK_EQ(ckpt_s3_key_parse("a/j", "a/j/step-000000004x/x", &step, &rest), -EINVAL);
		CHECK_EQ(ckpt_s3_key_parse("a/j", "a/j/step--000000042/x", &step, &rest), -EINVAL);
		CHECK_EQ(ckpt_s3_key_parse("a/j", "a/j/Step-0000000042/x", &step, &rest), -EINVAL);
		CHECK_EQ(ckpt_s3_key_parse("a/j", "a/j/step-0000000042.tmp/x", &step, &rest), -EINVAL);
		CHECK_EQ(ckpt_s3_key_parse("a/j", "a/j//step-0000000042/x", &step, &rest), -EINVAL);
		CHECK_EQ(ckpt_s3_key_parse("a/j", "", &step, &rest), -EINVAL);
		CHECK_EQ(ckpt_s3_key_parse("a/j", NULL, &step, &rest), -EINVAL);
		CHECK_EQ(ckpt_s3_key_parse("", "/step-0000000042/x", &step, &rest), -EINVAL);
		CHECK_EQ(ckpt_s3_key_parse(NULL, "j/step-0000000042/x", &step, &rest), -EINVAL);
		CHECK_EQ(ckpt_s3_step_path_parse(NULL, &step, &rest), -EINVAL);
		CHECK_EQ(ckpt_s3_step_path_parse("step-0000000042", &step, &rest), -EINVAL);
		CHECK_EQ(ckpt_s3_step_path_parse("/step-0000000042/x", &step, &rest), -EINVAL);
		/* A directory name far past any step's length. */
		memset(huge, '9', sizeof(huge) - 1);
		memcpy(huge, "step-", 5);
		huge[sizeof(huge) - 3] = '/';
		huge[sizeof(huge) - 2] = 'x';
		CHECK_EQ(ckpt_s3_step_path_parse(huge, &step, &rest), -EINVAL);
		CHECK_EQ(step, 77);
		CHECK(rest == NULL);
	}

	setenv("CKPT_SOCKET", "/tmp/x/ckptd.sock", 1);
	CHECK(ckpt_default_socket_path(buf, sizeof(buf)) > 0);
	CHECK(strcmp(buf, "/tmp/x/ckptd.sock") == 0);
	CHECK_EQ(ckpt_default_socket_path(buf, 5), -ENAMETOOLONG);
	unsetenv("CKPT_SOCKET");
	setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
	CHECK(ckpt_default_socket_path(buf, sizeof(buf)) > 0);
	if (geteuid() == 0)
		CHECK(strcmp(buf, "/run/ckpt/ckptd.sock") == 0);
	else
		CHECK(strcmp(buf, "/run/user/1000/ckptd.sock") == 0);
	unsetenv("XDG_RUNTIME_DIR");
	CHECK(ckpt_default_socket_path(buf, sizeof(buf)) > 0);
	CHECK(strcmp(buf, "/run/ckpt/ckptd.sock") == 0);

	uint8_t bytes[3] = { 0x00, 0xab, 0x7f };
	ckpt_hex(buf, bytes, 3);
	CHECK(strcmp(buf, "00ab7f") == 0);

	CHECK_EQ(ckpt_proto_dtype_size(CKPT_DTYPE_BF16), 2);
	CHECK_EQ(ckpt_proto_dtype_size(CKPT_DTYPE_F64), 8);
	CHECK_EQ(ckpt_proto_dtype_size(0), 0);
	CHECK_EQ(ckpt_proto_dtype_size(16), 0);
	CHECK(strcmp(ckpt_proto_dtype_name(CKPT_DTYPE_F32), "f32") == 0);
	CHECK(ckpt_proto_dtype_name(99) == NULL);
	return check_result("test-names");
}
