/* SPDX-License-Identifier: MIT */
/*
 * Credential, region, endpoint and addressing resolution (s3_config_resolve)
 * with a temporary HOME holding ~/.aws/credentials and ~/.aws/config, and
 * the redacted description.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "s3.h"

static char home[256];

static void write_file(const char *rel, const char *text)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", home, rel);
	FILE *f = fopen(path, "w");
	if (!f) {
		perror(path);
		exit(1);
	}
	fputs(text, f);
	fclose(f);
}

static void clear_env(void)
{
	static const char *const vars[] = {
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
		"AWS_SECURITY_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE",
		"AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
		"AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_CA_BUNDLE",
		"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", NULL,
	};
	for (const char *const *v = vars; *v; v++)
		unsetenv(*v);
}

static const char *S(const char *s)
{
	return s ? s : "(null)";
}

#define CHECK_STR(a, b)                                                       \
	do {                                                                  \
		if (strcmp(S(a), S(b))) {                                     \
			fprintf(stderr, "%s:%d: %s == '%s', expected '%s'\n", \
				__FILE__, __LINE__, #a, S(a), S(b));          \
			check_failures++;                                     \
		}                                                             \
	} while (0)

static const char creds_file[] =
	"# comment\n"
	"[default]\n"
	"aws_access_key_id = AKIDFILEDEFAULT\n"
	"aws_secret_access_key = filedefaultsecret\n"
	"\n"
	"[prod]\n"
	"aws_access_key_id=AKIDPROD\n"
	"aws_secret_access_key=prodsecret\n"
	"aws_session_token = prodtoken\n"
	"[half]\n"
	"aws_access_key_id = AKIDHALF\n";

static const char config_file[] =
	"[default]\n"
	"region = eu-west-1\n"
	"[profile prod]\n"
	"region = ap-south-1\n"
	"endpoint_url = http://general.example:9000\n"
	"s3 =\n"
	"  addressing_style = path\n"
	"  endpoint_url = http://s3only.example:9000\n"
	"[profile cfgonly]\n"
	"aws_access_key_id = AKIDCFGONLY\n"
	"aws_secret_access_key = cfgonlysecret\n"
	"region = us-west-2\n"
	"s3 =\n"
	"    addressing_style = virtual\n"
	"endpoint_url = http://top.example\n"
	"[profile bad]\n"
	"s3 =\n"
	"  addressing_style = sideways\n";

int main(void)
{
	struct s3_config cfg;
	char err[512], desc[1024];

	snprintf(home, sizeof(home), "/tmp/test-s3-creds.XXXXXX");
	if (!mkdtemp(home)) {
		perror("mkdtemp");
		return 1;
	}
	char aws[300];
	snprintf(aws, sizeof(aws), "%s/.aws", home);
	mkdir(aws, 0700);
	clear_env();
	setenv("HOME", home, 1);

	/* Nothing anywhere: no credentials, default region, AWS endpoint. */
	CHECK_EQ(s3_config_resolve(NULL, &cfg, err, sizeof(err)), 0);
	CHECK(!cfg.access_key_id && !cfg.secret_access_key);
	CHECK_STR(cfg.region, "us-east-1");
	CHECK(!cfg.endpoint_url);
	CHECK(cfg.verify_tls);
	s3_config_free(&cfg);

	write_file(".aws/credentials", creds_file);
	write_file(".aws/config", config_file);

	/* Files, default profile. */
	CHECK_EQ(s3_config_resolve(NULL, &cfg, err, sizeof(err)), 0);
	CHECK_STR(cfg.access_key_id, "AKIDFILEDEFAULT");
	CHECK_STR(cfg.secret_access_key, "filedefaultsecret");
	CHECK(!cfg.session_token);
	CHECK_STR(cfg.region, "eu-west-1");
	CHECK_EQ(cfg.addressing, S3_ADDRESSING_AUTO);
	s3_config_free(&cfg);

	/* Environment keys beat the files; AWS_REGION beats AWS_DEFAULT_REGION
	 * beats the config file. */
	setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	setenv("AWS_SESSION_TOKEN", "envtoken", 1);
	setenv("AWS_DEFAULT_REGION", "sa-east-1", 1);
	CHECK_EQ(s3_config_resolve(NULL, &cfg, err, sizeof(err)), 0);
	CHECK_STR(cfg.access_key_id, "AKIDENV");
	CHECK_STR(cfg.session_token, "envtoken");
	CHECK_STR(cfg.region, "sa-east-1");
	s3_config_free(&cfg);
	setenv("AWS_REGION", "ca-central-1", 1);
	CHECK_EQ(s3_config_resolve(NULL, &cfg, err, sizeof(err)), 0);
	CHECK_STR(cfg.region, "ca-central-1");
	s3_config_free(&cfg);

	/* AWS_PROFILE selects the profile but env keys still win (as in
	 * botocore); the profile's config still gives endpoint/addressing. */
	setenv("AWS_PROFILE", "prod", 1);
	unsetenv("AWS_REGION");
	unsetenv("AWS_DEFAULT_REGION");
	CHECK_EQ(s3_config_resolve(NULL, &cfg, err, sizeof(err)), 0);
	CHECK_STR(cfg.profile, "prod");
	CHECK_STR(cfg.access_key_id, "AKIDENV");
	CHECK_STR(cfg.region, "ap-south-1");
	CHECK_STR(cfg.endpoint_url, "http://s3only.example:9000");   /* s3 = wins */
	CHECK_EQ(cfg.addressing, S3_ADDRESSING_PATH);
	s3_config_free(&cfg);

	/* An explicit profile drops the environment keys. */
	struct s3_settings ex = { .profile = "prod" };
	CHECK_EQ(s3_config_resolve(&ex, &cfg, err, sizeof(err)), 0);
	CHECK_STR(cfg.access_key_id, "AKIDPROD");
	CHECK_STR(cfg.secret_access_key, "prodsecret");
	CHECK_STR(cfg.session_token, "prodtoken");
	s3_config_free(&cfg);

	/* Explicit keys and values beat everything. */
	ex = (struct s3_settings){ .access_key_id = "AKIDEXPLICIT",
				   .secret_access_key = "explicitsecret",
				   .region = "eu-north-1",
				   .endpoint_url = "http://127.0.0.1:7480",
				   .addressing = S3_ADDRESSING_VIRTUAL };
	setenv("AWS_ENDPOINT_URL_S3", "http://envs3.example", 1);
	CHECK_EQ(s3_config_resolve(&ex, &cfg, err, sizeof(err)), 0);
	CHECK_STR(cfg.access_key_id, "AKIDEXPLICIT");
	CHECK(!cfg.session_token);   /* the env token goes with the env keys */
	CHECK_STR(cfg.region, "eu-north-1");
	CHECK_STR(cfg.endpoint_url, "http://127.0.0.1:7480");
	CHECK_EQ(cfg.addressing, S3_ADDRESSING_VIRTUAL);
	s3_config_free(&cfg);

	/* Endpoint: AWS_ENDPOINT_URL_S3 > AWS_ENDPOINT_URL > config; and
	 * AWS_IGNORE_CONFIGURED_ENDPOINT_URLS turns them all off. */
	setenv("AWS_ENDPOINT_URL", "http://envall.example", 1);
	CHECK_EQ(s3_config_resolve(NULL, &cfg, err, sizeof(err)), 0);
	CHECK_STR(cfg.endpoint_url, "http://envs3.example");
	s3_config_free(&cfg);
	unsetenv("AWS_ENDPOINT_URL_S3");
	CHECK_EQ(s3_config_resolve(NULL, &cfg, err, sizeof(err)), 0);
	CHECK_STR(cfg.endpoint_url, "http://envall.example");
	s3_config_free(&cfg);
	setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true", 1);
	CHECK_EQ(s3_config_resolve(NULL, &cfg, err, sizeof(err)), 0);
	CHECK(!cfg.endpoint_url);
	s3_config_free(&cfg);
	unsetenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS");
	unsetenv("AWS_ENDPOINT_URL");

	/* Credentials only in the config file; top-level endpoint_url after
	 * the nested block; virtual addressing from "s3 =". */
	clear_env();
	setenv("HOME", home, 1);
	setenv("AWS_PROFILE", "cfgonly", 1);
	CHECK_EQ(s3_config_resolve(NULL, &cfg, err, sizeof(err)), 0);
	CHECK_STR(cfg.access_key_id, "AKIDCFGONLY");
	CHECK_STR(cfg.region, "us-west-2");
	CHECK_STR(cfg.endpoint_url, "http://top.example");
	CHECK_EQ(cfg.addressing, S3_ADDRESSING_VIRTUAL);
	s3_config_free(&cfg);

	/* Errors: unknown profile, half a key pair, bad addressing style. */
	setenv("AWS_PROFILE", "nosuch", 1);
	CHECK_EQ(s3_config_resolve(NULL, &cfg, err, sizeof(err)), -ENOENT);
	CHECK(strstr(err, "nosuch"));
	setenv("AWS_PROFILE", "half", 1);
	CHECK_EQ(s3_config_resolve(NULL, &cfg, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "partial"));
	CHECK(!strstr(err, "AKIDHALF"));
	setenv("AWS_PROFILE", "bad", 1);
	CHECK_EQ(s3_config_resolve(NULL, &cfg, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "sideways"));
	clear_env();
	setenv("HOME", home, 1);
	setenv("AWS_ACCESS_KEY_ID", "AKIDONLY", 1);
	CHECK_EQ(s3_config_resolve(NULL, &cfg, err, sizeof(err)), -EINVAL);
	unsetenv("AWS_ACCESS_KEY_ID");

	/* The file variables move the files ("~/" expanded). */
	write_file("alt-creds", "[default]\naws_access_key_id=AKIDALT\naws_secret_access_key=altsecret\n");
	setenv("AWS_SHARED_CREDENTIALS_FILE", "~/alt-creds", 1);
	setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
	setenv("AWS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt", 1);
	CHECK_EQ(s3_config_resolve(NULL, &cfg, err, sizeof(err)), 0);
	CHECK_STR(cfg.access_key_id, "AKIDALT");
	CHECK_STR(cfg.region, "us-east-1");
	CHECK_STR(cfg.ca_bundle, "/etc/ssl/certs/ca-certificates.crt");

	/* The description never shows a secret. */
	s3_config_describe(&cfg, desc, sizeof(desc));
	printf("%s\n", desc);
	CHECK(!strstr(desc, "altsecret"));
	CHECK(!strstr(desc, "AKIDALT"));
	CHECK(strstr(desc, "AKID..."));
	s3_config_free(&cfg);
	ex = (struct s3_settings){ .access_key_id = "AKIDX", .secret_access_key = "sekrit",
				   .session_token = "tokentoken" };
	CHECK_EQ(s3_config_resolve(&ex, &cfg, err, sizeof(err)), 0);
	s3_config_describe(&cfg, desc, sizeof(desc));
	CHECK(!strstr(desc, "sekrit") && !strstr(desc, "tokentoken"));
	CHECK(strstr(desc, "session_token=(set)"));
	s3_config_free(&cfg);
	s3_config_free(NULL);

	char cmd[400];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", home);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", home);
	return check_result("test-s3-creds");
}
