/* SPDX-License-Identifier: MIT */
/*
 * Bucket and key names, s3:// URLs, path-style and virtual-hosted-style
 * addressing, and multipart part sizing.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "s3.h"
#include "s3internal.h"

static bool is_lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && !strcmp(s + n - m, suffix);
}

int s3_bucket_check(const char *b)
{
	if (!b)
		return -EINVAL;
	size_t n = strlen(b);
	if (n < S3_BUCKET_MIN || n > S3_BUCKET_MAX)
		return -EINVAL;
	if (!is_lower_alnum(b[0]) || !is_lower_alnum(b[n - 1]))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (!is_lower_alnum(b[i]) && b[i] != '-' && b[i] != '.')
			return -EINVAL;
		if (b[i] == '.' && b[i + 1] == '.')
			return -EINVAL;
	}
	struct in_addr a;
	if (inet_pton(AF_INET, b, &a) == 1)
		return -EINVAL;
	if (!strncmp(b, "xn--", 4) || !strncmp(b, "sthree-", 7) ||
	    ends_with(b, "-s3alias") || ends_with(b, "--ol-s3"))
		return -EINVAL;
	return 0;
}

/* Length of the UTF-8 sequence at s (shortest form, no surrogates, at
 * most U+10FFFF), or 0 if invalid. */
static size_t utf8_len(const unsigned char *s)
{
	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		return (s[1] & 0xc0) == 0x80 ? 2 : 0;
	if (s[0] >= 0xe0 && s[0] <= 0xef) {
		if ((s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80)
			return 0;
		if (s[0] == 0xe0 && s[1] < 0xa0)
			return 0;
		if (s[0] == 0xed && s[1] >= 0xa0)
			return 0;
		return 3;
	}
	if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		if ((s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 || (s[3] & 0xc0) != 0x80)
			return 0;
		if (s[0] == 0xf0 && s[1] < 0x90)
			return 0;
		if (s[0] == 0xf4 && s[1] >= 0x90)
			return 0;
		return 4;
	}
	return 0;
}

/* Shared by keys and prefixes: allow_empty for the prefix. */
static int path_check(const char *key, bool allow_empty)
{
	if (!key)
		return -EINVAL;
	size_t n = strlen(key);
	if (n == 0)
		return allow_empty ? 0 : -EINVAL;
	if (n > S3_KEY_MAX)
		return -ENAMETOOLONG;
	const unsigned char *s = (const unsigned char *)key;
	for (size_t i = 0; i < n;) {
		if (s[i] < 0x20 || s[i] == 0x7f || s[i] == '\\')
			return -EINVAL;
		size_t l = utf8_len(s + i);
		if (!l)
			return -EILSEQ;
		i += l;
	}
	/* Segments: none empty (no leading '/', no "//"), none "." or "..".
	 * A trailing '/' is allowed ("dir/" keys are common markers). */
	const char *seg = key;
	while (*seg) {
		const char *end = strchr(seg, '/');
		size_t len = end ? (size_t)(end - seg) : strlen(seg);
		if (len == 0)
			return -EINVAL;
		if ((len == 1 && seg[0] == '.') || (len == 2 && seg[0] == '.' && seg[1] == '.'))
			return -EINVAL;
		if (!end)
			break;
		seg = end + 1;
	}
	return 0;
}

int s3_key_check(const char *key)
{
	return path_check(key, false);
}

void s3_url_free(struct s3_url *u)
{
	if (!u)
		return;
	free(u->bucket);
	free(u->prefix);
	u->bucket = u->prefix = NULL;
}

int s3_url_parse(const char *url, struct s3_url *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	if (!url || strncmp(url, "s3://", 5)) {
		snprintf(err, errlen, "not an s3:// URL: '%.200s'", url ? url : "");
		return -EINVAL;
	}
	const char *b = url + 5;
	const char *slash = strchr(b, '/');
	size_t blen = slash ? (size_t)(slash - b) : strlen(b);
	out->bucket = strndup(b, blen);
	if (!out->bucket)
		return -ENOMEM;
	if (s3_bucket_check(out->bucket)) {
		snprintf(err, errlen, "invalid bucket name '%.80s' in '%.200s' "
			 "(3-63 of a-z 0-9 . -, starting and ending with a letter or digit)",
			 out->bucket, url);
		s3_url_free(out);
		return -EINVAL;
	}
	const char *p = slash ? slash + 1 : "";
	size_t plen = strlen(p);
	while (plen && p[plen - 1] == '/')
		plen--;
	out->prefix = strndup(p, plen);
	if (!out->prefix) {
		s3_url_free(out);
		return -ENOMEM;
	}
	/* Room for the keys below it (job/step/rank names). */
	int r = path_check(out->prefix, true);
	if (!r && plen > S3_KEY_MAX - 256)
		r = -ENAMETOOLONG;
	if (r) {
		snprintf(err, errlen, "invalid key prefix in '%.200s' (UTF-8, no control "
			 "characters, no empty, '.' or '..' segment, at most %d bytes)",
			 url, S3_KEY_MAX - 256);
		s3_url_free(out);
		return r;
	}
	return 0;
}

int s3_endpoint_parse(const char *url, struct s3_endpoint *ep)
{
	memset(ep, 0, sizeof(*ep));
	const char *h;
	if (!strncasecmp(url, "https://", 8)) {
		ep->https = true;
		h = url + 8;
	} else if (!strncasecmp(url, "http://", 7)) {
		h = url + 7;
	} else {
		return -EINVAL;
	}
	const char *end = h + strcspn(h, "/?#");
	if (*end == '?' || *end == '#' || (*end == '/' && end[1] != '\0'))
		return -EINVAL;   /* a path below the endpoint is not supported */
	const char *port = NULL, *hend = end;
	if (*h == '[') {
		const char *rb = memchr(h, ']', (size_t)(end - h));
		if (!rb)
			return -EINVAL;
		hend = rb + 1;
		if (hend < end) {
			if (*hend != ':')
				return -EINVAL;
			port = hend + 1;
		}
	} else {
		const char *colon = memchr(h, ':', (size_t)(end - h));
		if (colon) {
			hend = colon;
			port = colon + 1;
		}
	}
	if (hend == h || hend - h > 253)
		return -EINVAL;
	for (const char *p = h; p < hend; p++) {
		char c = *p;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '[' ||
		      c == ']' || c == ':'))
			return -EINVAL;
	}
	memcpy(ep->host, h, (size_t)(hend - h));
	ep->host[hend - h] = '\0';
	for (char *p = ep->host; *p; p++)
		if (*p >= 'A' && *p <= 'Z')
			*p = (char)(*p - 'A' + 'a');
	ep->port = ep->https ? 443 : 80;
	ep->explicit_port = false;
	if (port) {
		char *e;
		if (port == end)
			return -EINVAL;
		unsigned long v = strtoul(port, &e, 10);
		if (e != end || v == 0 || v > 65535)
			return -EINVAL;
		ep->port = (unsigned)v;
		ep->explicit_port = true;
	}
	return 0;
}

static bool host_is_ip(const char *host)
{
	unsigned char buf[16];
	if (host[0] == '[')
		return true;
	return inet_pton(AF_INET, host, buf) == 1;
}

bool s3_use_virtual(enum s3_addressing a, const char *endpoint_host, bool https,
		    const char *bucket)
{
	if (a == S3_ADDRESSING_PATH)
		return false;
	if (a == S3_ADDRESSING_VIRTUAL)
		return true;
	/* Auto, as the AWS SDKs do: virtual-hosted only where the bucket can
	 * be a DNS label (no dots over https: the wildcard certificate covers
	 * one label) and the endpoint is AWS's; custom endpoints and IPs get
	 * path style, which every S3-compatible server understands. */
	if (s3_bucket_check(bucket) || (https && strchr(bucket, '.')))
		return false;
	if (!endpoint_host)
		return true;
	if (host_is_ip(endpoint_host))
		return false;
	return ends_with(endpoint_host, ".amazonaws.com") ||
	       ends_with(endpoint_host, ".amazonaws.com.cn");
}

void s3_target_free(struct s3_target *t)
{
	if (!t)
		return;
	free(t->url);
	free(t->host);
	free(t->path);
	memset(t, 0, sizeof(*t));
}

int s3_target_make(const struct s3_config *cfg, const char *bucket,
		   const char *key, struct s3_target *out)
{
	struct s3_endpoint ep;
	char aws_host[128];
	memset(out, 0, sizeof(*out));
	if (cfg->endpoint_url) {
		if (s3_endpoint_parse(cfg->endpoint_url, &ep))
			return -EINVAL;
	} else {
		memset(&ep, 0, sizeof(ep));
		snprintf(aws_host, sizeof(aws_host), "s3.%s.amazonaws.com", cfg->region);
		snprintf(ep.host, sizeof(ep.host), "%s", aws_host);
		ep.https = true;
		ep.port = 443;
	}
	if (!key)
		key = "";
	bool virt = s3_use_virtual(cfg->addressing, cfg->endpoint_url ? ep.host : NULL,
				   ep.https, bucket);
	out->virtual_hosted = virt;

	size_t hostlen = strlen(ep.host) + strlen(bucket) + 16;
	out->host = malloc(hostlen);
	size_t plen = strlen(bucket) + strlen(key) + 3;
	out->path = malloc(plen);
	if (!out->host || !out->path)
		goto nomem;
	char port[12] = "";
	if (ep.explicit_port && ep.port != (ep.https ? 443u : 80u))
		snprintf(port, sizeof(port), ":%u", ep.port);
	if (virt) {
		snprintf(out->host, hostlen, "%s.%s%s", bucket, ep.host, port);
		snprintf(out->path, plen, "/%s", key);
	} else {
		snprintf(out->host, hostlen, "%s%s", ep.host, port);
		if (*key)
			snprintf(out->path, plen, "/%s/%s", bucket, key);
		else
			snprintf(out->path, plen, "/%s", bucket);
	}
	char *enc = s3_uri_encode(out->path, strlen(out->path), true);
	if (!enc)
		goto nomem;
	size_t ulen = strlen(out->host) + strlen(enc) + 16;
	out->url = malloc(ulen);
	if (!out->url) {
		free(enc);
		goto nomem;
	}
	snprintf(out->url, ulen, "%s://%s%s", ep.https ? "https" : "http", out->host, enc);
	free(enc);
	return 0;
nomem:
	s3_target_free(out);
	return -ENOMEM;
}

int s3_part_plan(uint64_t object_size, uint64_t preferred, uint64_t *part_size,
		 uint32_t *parts)
{
	const uint64_t mib = (uint64_t)1 << 20;
	if (object_size > S3_OBJECT_MAX)
		return -EFBIG;
	uint64_t ps = preferred;
	if (ps < S3_PART_MIN)
		ps = S3_PART_MIN;
	if (ps > S3_PART_MAX)
		ps = S3_PART_MAX;
	if (object_size / ps + (object_size % ps != 0) > S3_PARTS_MAX) {
		ps = object_size / S3_PARTS_MAX + (object_size % S3_PARTS_MAX != 0);
		ps = (ps + mib - 1) / mib * mib;
		if (ps > S3_PART_MAX)
			return -EFBIG;
	}
	uint64_t n = object_size / ps + (object_size % ps != 0);
	if (n == 0)
		n = 1;   /* an empty object is one empty part */
	*part_size = ps;
	*parts = (uint32_t)n;
	return 0;
}
