/* SPDX-License-Identifier: MIT */
/*
 * Credentials, region and endpoint, resolved the way the AWS CLI resolves
 * them (environment, ~/.aws/credentials, ~/.aws/config), with ckptd's own
 * explicit settings on top. Secrets are copied, never printed, and wiped
 * on free.
 */
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "s3.h"

#define AWS_FILE_MAX (1u << 20)

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

static const char *env_nonempty(const char *name)
{
	const char *v = getenv(name);
	return v && *v ? v : NULL;
}

static void free_secret(char **p)
{
	if (*p) {
		OPENSSL_cleanse(*p, strlen(*p));
		free(*p);
		*p = NULL;
	}
}

void s3_config_free(struct s3_config *cfg)
{
	if (!cfg)
		return;
	free(cfg->profile);
	free(cfg->access_key_id);
	free_secret(&cfg->secret_access_key);
	free_secret(&cfg->session_token);
	free(cfg->region);
	free(cfg->endpoint_url);
	free(cfg->ca_bundle);
	memset(cfg, 0, sizeof(*cfg));
}

/*
 * A small reader for the AWS INI dialect: [section] lines, "key = value",
 * '#' and ';' comment lines, and one level of nesting where "s3 =" with an
 * empty value is followed by indented "key = value" lines.
 */
struct ini_entry {
	char *section;
	char *sub;       /* nested section ("s3") or NULL */
	char *key;
	char *value;
};
struct ini {
	struct ini_entry *e;
	size_t n, cap;
};

static void ini_free(struct ini *ini)
{
	for (size_t i = 0; i < ini->n; i++) {
		free(ini->e[i].section);
		free(ini->e[i].sub);
		free(ini->e[i].key);
		if (ini->e[i].value) {
			OPENSSL_cleanse(ini->e[i].value, strlen(ini->e[i].value));
			free(ini->e[i].value);
		}
	}
	free(ini->e);
	memset(ini, 0, sizeof(*ini));
}

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	size_t n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
		s[--n] = '\0';
	return s;
}

static int ini_add(struct ini *ini, const char *section, const char *sub,
		   const char *key, const char *value)
{
	if (ini->n == ini->cap) {
		size_t cap = ini->cap ? ini->cap * 2 : 16;
		struct ini_entry *e = realloc(ini->e, cap * sizeof(*e));
		if (!e)
			return -ENOMEM;
		ini->e = e;
		ini->cap = cap;
	}
	struct ini_entry *e = &ini->e[ini->n];
	e->section = strdup(section);
	e->sub = dup_or_null(sub);
	e->key = strdup(key);
	e->value = strdup(value);
	if (!e->section || (sub && !e->sub) || !e->key || !e->value) {
		free(e->section);
		free(e->sub);
		free(e->key);
		free(e->value);
		return -ENOMEM;
	}
	for (char *p = e->key; *p; p++)
		if (*p >= 'A' && *p <= 'Z')
			*p = (char)(*p - 'A' + 'a');
	ini->n++;
	return 0;
}

/* Returns 0, or -ENOENT when the file does not exist (not an error for
 * the caller), or another -errno with err set. */
static int ini_load(const char *path, struct ini *ini, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	if (!f) {
		int e = errno;
		if (e == ENOENT)
			return -ENOENT;
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(e));
		return -e;
	}
	char *line = NULL;
	size_t cap = 0, total = 0;
	ssize_t n;
	char section[256] = "";
	char sub[128] = "";
	bool in_section = false;
	int ret = 0;
	unsigned lineno = 0;
	while ((n = getline(&line, &cap, f)) >= 0) {
		lineno++;
		total += (size_t)n;
		if (total > AWS_FILE_MAX) {
			snprintf(err, errlen, "%s: larger than %u bytes", path, AWS_FILE_MAX);
			ret = -EFBIG;
			break;
		}
		if (n && line[n - 1] == '\n')
			line[--n] = '\0';
		bool indented = line[0] == ' ' || line[0] == '\t';
		char *s = trim(line);
		if (!*s || *s == '#' || *s == ';')
			continue;
		if (*s == '[') {
			char *end = strchr(s, ']');
			if (!end) {
				snprintf(err, errlen, "%s:%u: unterminated section header", path, lineno);
				ret = -EINVAL;
				break;
			}
			*end = '\0';
			snprintf(section, sizeof(section), "%s", trim(s + 1));
			sub[0] = '\0';
			in_section = true;
			continue;
		}
		char *eq = strchr(s, '=');
		if (!eq || !in_section) {
			snprintf(err, errlen, "%s:%u: expected [section] or key = value", path, lineno);
			ret = -EINVAL;
			break;
		}
		*eq = '\0';
		char *key = trim(s);
		char *value = trim(eq + 1);
		if (!indented)
			sub[0] = '\0';
		if (!indented && !*value) {
			/* "s3 =" opens a nested section for the indented lines below. */
			snprintf(sub, sizeof(sub), "%s", key);
			continue;
		}
		ret = ini_add(ini, section, indented && sub[0] ? sub : NULL, key, value);
		if (ret) {
			snprintf(err, errlen, "%s: out of memory", path);
			break;
		}
	}
	if (line) {
		OPENSSL_cleanse(line, cap);
		free(line);
	}
	fclose(f);
	return ret;
}

static bool ini_has_section(const struct ini *ini, const char *section)
{
	for (size_t i = 0; i < ini->n; i++)
		if (!strcmp(ini->e[i].section, section))
			return true;
	return false;
}

static const char *ini_get(const struct ini *ini, const char *section,
			   const char *sub, const char *key)
{
	const char *found = NULL;
	for (size_t i = 0; i < ini->n; i++) {
		const struct ini_entry *e = &ini->e[i];
		if (strcmp(e->section, section) || strcasecmp(e->key, key))
			continue;
		if ((sub == NULL) != (e->sub == NULL))
			continue;
		if (sub && strcasecmp(sub, e->sub))
			continue;
		found = e->value;   /* the last one wins, as in ConfigParser */
	}
	return found;
}

static int home_path(const char *rel, char *buf, size_t len)
{
	const char *home = env_nonempty("HOME");
	if (!home) {
		struct passwd *pw = getpwuid(getuid());
		home = pw ? pw->pw_dir : NULL;
	}
	if (!home)
		return -ENOENT;
	if ((size_t)snprintf(buf, len, "%s/%s", home, rel) >= len)
		return -ENAMETOOLONG;
	return 0;
}

/* "~/x" expands like the CLI does for the file variables. */
static int file_path(const char *env, const char *def, char *buf, size_t len)
{
	const char *v = env_nonempty(env);
	if (!v)
		return home_path(def, buf, len);
	if (v[0] == '~' && v[1] == '/')
		return home_path(v + 2, buf, len);
	if ((size_t)snprintf(buf, len, "%s", v) >= len)
		return -ENAMETOOLONG;
	return 0;
}

static bool env_true(const char *name)
{
	const char *v = getenv(name);
	return v && !strcasecmp(v, "true");
}

int s3_config_resolve(const struct s3_settings *ex, struct s3_config *out,
		      char *err, size_t errlen)
{
	static const struct s3_settings none;
	struct ini creds = { 0 }, conf = { 0 };
	char creds_path[4096], conf_path[4096], conf_section[300];
	int ret;

	memset(out, 0, sizeof(*out));
	if (err && errlen)
		err[0] = '\0';
	if (!ex)
		ex = &none;

	bool profile_explicit = ex->profile && *ex->profile;
	const char *profile = profile_explicit ? ex->profile : env_nonempty("AWS_PROFILE");
	if (!profile)
		profile = env_nonempty("AWS_DEFAULT_PROFILE");
	bool profile_named = profile != NULL;
	if (!profile)
		profile = "default";

	ret = file_path("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials",
			creds_path, sizeof(creds_path));
	if (!ret)
		ret = ini_load(creds_path, &creds, err, errlen);
	if (ret && ret != -ENOENT)
		goto fail;
	ret = file_path("AWS_CONFIG_FILE", ".aws/config", conf_path, sizeof(conf_path));
	if (!ret)
		ret = ini_load(conf_path, &conf, err, errlen);
	if (ret && ret != -ENOENT)
		goto fail;

	/* The config file names profiles "[profile NAME]", except default,
	 * which may be "[default]" or "[profile default]". */
	snprintf(conf_section, sizeof(conf_section), "profile %s", profile);
	if (!strcmp(profile, "default") && !ini_has_section(&conf, conf_section))
		snprintf(conf_section, sizeof(conf_section), "default");
	if (profile_named && strcmp(profile, "default") &&
	    !ini_has_section(&creds, profile) && !ini_has_section(&conf, conf_section)) {
		snprintf(err, errlen, "AWS profile '%s' not found in %s or %s",
			 profile, creds_path, conf_path);
		ret = -ENOENT;
		goto fail;
	}

	ret = -ENOMEM;
	out->profile = strdup(profile);
	if (!out->profile)
		goto fail;

	/* Credentials: the first source that has a key id or a secret decides,
	 * and must have both. */
	const char *id = NULL, *secret = NULL, *token = NULL, *src = NULL;
	if ((ex->access_key_id && *ex->access_key_id) ||
	    (ex->secret_access_key && *ex->secret_access_key)) {
		id = ex->access_key_id;
		secret = ex->secret_access_key;
		token = ex->session_token;
		src = "explicit settings";
	} else if (!profile_explicit && (env_nonempty("AWS_ACCESS_KEY_ID") ||
					 env_nonempty("AWS_SECRET_ACCESS_KEY"))) {
		id = env_nonempty("AWS_ACCESS_KEY_ID");
		secret = env_nonempty("AWS_SECRET_ACCESS_KEY");
		token = env_nonempty("AWS_SESSION_TOKEN");
		if (!token)
			token = env_nonempty("AWS_SECURITY_TOKEN");
		src = "environment";
	} else if (ini_get(&creds, profile, NULL, "aws_access_key_id") ||
		   ini_get(&creds, profile, NULL, "aws_secret_access_key")) {
		id = ini_get(&creds, profile, NULL, "aws_access_key_id");
		secret = ini_get(&creds, profile, NULL, "aws_secret_access_key");
		token = ini_get(&creds, profile, NULL, "aws_session_token");
		src = "shared credentials file";
	} else if (ini_get(&conf, conf_section, NULL, "aws_access_key_id") ||
		   ini_get(&conf, conf_section, NULL, "aws_secret_access_key")) {
		id = ini_get(&conf, conf_section, NULL, "aws_access_key_id");
		secret = ini_get(&conf, conf_section, NULL, "aws_secret_access_key");
		token = ini_get(&conf, conf_section, NULL, "aws_session_token");
		src = "config file";
	}
	if (src && (!id || !*id || !secret || !*secret)) {
		snprintf(err, errlen, "partial AWS credentials from %s (profile '%s'): "
			 "need both an access key id and a secret access key", src, profile);
		ret = -EINVAL;
		goto fail;
	}
	if (src) {
		out->access_key_id = strdup(id);
		out->secret_access_key = strdup(secret);
		out->session_token = token && *token ? strdup(token) : NULL;
		if (!out->access_key_id || !out->secret_access_key ||
		    (token && *token && !out->session_token))
			goto fail;
		out->credentials_source = src;
	} else {
		out->credentials_source = "none";
	}

	/* Region. */
	const char *region = NULL;
	if (ex->region && *ex->region) {
		region = ex->region;
		out->region_source = "explicit settings";
	} else if ((region = env_nonempty("AWS_REGION"))) {
		out->region_source = "env AWS_REGION";
	} else if ((region = env_nonempty("AWS_DEFAULT_REGION"))) {
		out->region_source = "env AWS_DEFAULT_REGION";
	} else if ((region = ini_get(&conf, conf_section, NULL, "region"))) {
		out->region_source = "config file";
	} else {
		region = "us-east-1";
		out->region_source = "default";
	}
	out->region = strdup(region);
	if (!out->region)
		goto fail;

	/* Endpoint. */
	const char *ep = NULL;
	bool ignore = env_true("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS");
	if (!ignore) {
		const char *v = ini_get(&conf, conf_section, NULL, "ignore_configure_endpoint_urls");
		ignore = v && !strcasecmp(v, "true");
	}
	if (ex->endpoint_url && *ex->endpoint_url) {
		ep = ex->endpoint_url;
		out->endpoint_source = "explicit settings";
	} else if (!ignore && (ep = env_nonempty("AWS_ENDPOINT_URL_S3"))) {
		out->endpoint_source = "env AWS_ENDPOINT_URL_S3";
	} else if (!ignore && (ep = env_nonempty("AWS_ENDPOINT_URL"))) {
		out->endpoint_source = "env AWS_ENDPOINT_URL";
	} else if (!ignore && (ep = ini_get(&conf, conf_section, "s3", "endpoint_url"))) {
		out->endpoint_source = "config file (s3 endpoint_url)";
	} else if (!ignore && (ep = ini_get(&conf, conf_section, NULL, "endpoint_url"))) {
		out->endpoint_source = "config file (endpoint_url)";
	} else {
		out->endpoint_source = "AWS default";
	}
	if (ep) {
		out->endpoint_url = strdup(ep);
		if (!out->endpoint_url)
			goto fail;
	}

	/* Addressing style. */
	out->addressing = ex->addressing;
	if (out->addressing == S3_ADDRESSING_AUTO) {
		const char *st = ini_get(&conf, conf_section, "s3", "addressing_style");
		if (!st || !strcasecmp(st, "auto")) {
			out->addressing = S3_ADDRESSING_AUTO;
		} else if (!strcasecmp(st, "path")) {
			out->addressing = S3_ADDRESSING_PATH;
		} else if (!strcasecmp(st, "virtual")) {
			out->addressing = S3_ADDRESSING_VIRTUAL;
		} else {
			snprintf(err, errlen, "%s [%s]: s3 addressing_style '%s' is not "
				 "auto, path or virtual", conf_path, conf_section, st);
			ret = -EINVAL;
			goto fail;
		}
	}

	/* TLS. */
	const char *ca = ex->ca_bundle && *ex->ca_bundle ? ex->ca_bundle : env_nonempty("AWS_CA_BUNDLE");
	if (!ca)
		ca = ini_get(&conf, conf_section, NULL, "ca_bundle");
	if (ca) {
		out->ca_bundle = strdup(ca);
		if (!out->ca_bundle)
			goto fail;
	}
	out->verify_tls = !ex->no_verify_tls;

	ini_free(&creds);
	ini_free(&conf);
	return 0;
fail:
	if (ret == -ENOMEM && err && errlen && !err[0])
		snprintf(err, errlen, "out of memory");
	ini_free(&creds);
	ini_free(&conf);
	s3_config_free(out);
	return ret;
}

int s3_config_describe(const struct s3_config *cfg, char *buf, size_t len)
{
	char idbuf[16];
	const char *id = "(none)";
	if (cfg->access_key_id) {
		/* The key id is not a secret, but showing four characters is
		 * enough to tell keys apart. */
		snprintf(idbuf, sizeof(idbuf), "%.4s...", cfg->access_key_id);
		id = idbuf;
	}
	static const char *const styles[] = { "auto", "path", "virtual" };
	return snprintf(buf, len,
			"profile=%s credentials=%s access_key_id=%s secret=%s "
			"session_token=%s region=%s (%s) endpoint=%s (%s) "
			"addressing=%s verify_tls=%s ca_bundle=%s",
			cfg->profile ? cfg->profile : "(none)",
			cfg->credentials_source ? cfg->credentials_source : "none",
			id, cfg->secret_access_key ? "(set)" : "(none)",
			cfg->session_token ? "(set)" : "(none)",
			cfg->region ? cfg->region : "(none)",
			cfg->region_source ? cfg->region_source : "",
			cfg->endpoint_url ? cfg->endpoint_url : "(AWS)",
			cfg->endpoint_source ? cfg->endpoint_source : "",
			styles[cfg->addressing <= S3_ADDRESSING_VIRTUAL ? cfg->addressing : 0],
			cfg->verify_tls ? "yes" : "no",
			cfg->ca_bundle ? cfg->ca_bundle : "(system)");
}
