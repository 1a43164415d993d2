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
