/* SPDX-License-Identifier: MIT */
/*
 * SigV4 for S3 (OpenSSL): canonical request, string to sign, signing key,
 * Authorization header. libcurl's own CURLOPT_AWS_SIGV4 is not used: in the
 * libcurl we build against it neither sorts the query nor adds
 * x-amz-content-sha256.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "s3.h"

/* A growing string; on ENOMEM it goes sticky-bad and the caller checks
 * once at the end. */
struct sbuf {
	char *p;
	size_t len, cap;
	bool bad;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
	if (b->bad)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->bad = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_str(struct sbuf *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

static bool unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
}

static void sb_encode(struct sbuf *b, const char *s, size_t n, bool keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (unreserved(c) || (keep_slash && c == '/')) {
			sb_add(b, (const char *)&s[i], 1);
		} else {
			char e[3] = { '%', hex[c >> 4], hex[c & 15] };
			sb_add(b, e, 3);
		}
	}
}

char *s3_uri_encode(const char *src, size_t len, bool keep_slash)
{
	struct sbuf b = { 0 };
	sb_add(&b, "", 0);
	sb_encode(&b, src, len, keep_slash);
	if (b.bad) {
		free(b.p);
		return NULL;
	}
	return b.p;
}

static void hex_encode(const unsigned char *in, size_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex[in[i] >> 4];
		out[2 * i + 1] = hex[in[i] & 15];
	}
	out[2 * n] = '\0';
}

void s3_sha256_hex(const void *buf, size_t len, char out[65])
{
	unsigned char md[32];
	unsigned int mdlen = 0;
	EVP_Digest(buf, len, md, &mdlen, EVP_sha256(), NULL);
	hex_encode(md, 32, out);
}

void s3_amz_date(int64_t unix_seconds, char out[17])
{
	time_t t = (time_t)unix_seconds;
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}

static int hmac(const void *key, size_t keylen, const char *msg, unsigned char out[32])
{
	unsigned int len = 32;
	if (!HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)msg,
		  strlen(msg), out, &len))
		return -EIO;
	return 0;
}

/* Sort helpers: the canonical forms are compared byte-wise. */
struct enc_pair {
	char *name;
	char *value;
};

static int cmp_pair(const void *a, const void *b)
{
	const struct enc_pair *x = a, *y = b;
	int r = strcmp(x->name, y->name);
	return r ? r : strcmp(x->value, y->value);
}

struct hdr {
	char *name;      /* lower case */
	struct sbuf value;
	size_t order;
};

static int cmp_hdr(const void *a, const void *b)
{
	const struct hdr *x = a, *y = b;
	int r = strcmp(x->name, y->name);
	if (r)
		return r;
	return x->order < y->order ? -1 : x->order > y->order;
}

/* Trim and collapse runs of spaces and tabs to one space (values spanning
 * lines arrive already split by the caller). */
static void sb_trimmed(struct sbuf *b, const char *v)
{
	while (*v == ' ' || *v == '\t')
		v++;
	bool space = false;
	for (; *v; v++) {
		if (*v == ' ' || *v == '\t' || *v == '\r' || *v == '\n') {
			space = true;
			continue;
		}
		if (space)
			sb_add(b, " ", 1);
		space = false;
		sb_add(b, v, 1);
	}
}

void s3_sigv4_output_free(struct s3_sigv4_output *out)
{
	if (!out)
		return;
	free(out->canonical_request);
	free(out->string_to_sign);
	free(out->authorization);
	free(out->signed_headers);
	memset(out, 0, sizeof(*out));
}

int s3_sigv4_sign(const struct s3_sigv4_input *in, struct s3_sigv4_output *out)
{
	struct sbuf creq = { 0 }, shdr = { 0 }, sts = { 0 }, auth = { 0 };
	struct enc_pair *q = NULL;
	struct hdr *h = NULL;
	size_t nh = 0;
	int ret = -ENOMEM;

	memset(out, 0, sizeof(*out));
	if (!in->method || !in->path || in->path[0] != '/' || !in->payload_hash ||
	    !in->amz_date || strlen(in->amz_date) != 16 || !in->region ||
	    !in->service || !in->access_key_id || !in->secret_access_key)
		return -EINVAL;

	sb_str(&creq, in->method);
	sb_add(&creq, "\n", 1);
	sb_encode(&creq, in->path, strlen(in->path), true);
	sb_add(&creq, "\n", 1);

	if (in->n_query) {
		q = calloc(in->n_query, sizeof(*q));
		if (!q)
			goto out;
		for (size_t i = 0; i < in->n_query; i++) {
			const char *v = in->query[i].value ? in->query[i].value : "";
			q[i].name = s3_uri_encode(in->query[i].name, strlen(in->query[i].name), false);
			q[i].value = s3_uri_encode(v, strlen(v), false);
			if (!q[i].name || !q[i].value) {
				for (size_t j = 0; j <= i; j++) {
					free(q[j].name);
					free(q[j].value);
				}
				free(q);
				q = NULL;
				goto out;
			}
		}
		qsort(q, in->n_query, sizeof(*q), cmp_pair);
		for (size_t i = 0; i < in->n_query; i++) {
			if (i)
				sb_add(&creq, "&", 1);
			sb_str(&creq, q[i].name);
			sb_add(&creq, "=", 1);
			sb_str(&creq, q[i].value);
		}
	}
	sb_add(&creq, "\n", 1);

	/* Headers: lower-case names, merge repeats in order, sort by name. */
	h = calloc(in->n_headers ? in->n_headers : 1, sizeof(*h));
	if (!h)
		goto out;
	for (size_t i = 0; i < in->n_headers; i++) {
		const char *name = in->headers[i].name;
		size_t j;
		for (j = 0; j < nh; j++)
			if (!strcasecmp(h[j].name, name))
				break;
		if (j == nh) {
			h[nh].name = strdup(name);
			if (!h[nh].name)
				goto out;
			for (char *p = h[nh].name; *p; p++)
				if (*p >= 'A' && *p <= 'Z')
					*p = (char)(*p - 'A' + 'a');
			h[nh].order = nh;
			sb_add(&h[nh].value, "", 0);
			nh++;
		} else {
			sb_add(&h[j].value, ",", 1);
		}
		sb_trimmed(&h[j].value, in->headers[i].value ? in->headers[i].value : "");
	}
	qsort(h, nh, sizeof(*h), cmp_hdr);
	for (size_t i = 0; i < nh; i++) {
		if (h[i].value.bad)
			goto out;
		sb_str(&creq, h[i].name);
		sb_add(&creq, ":", 1);
		sb_str(&creq, h[i].value.p);
		sb_add(&creq, "\n", 1);
		if (i)
			sb_add(&shdr, ";", 1);
		sb_str(&shdr, h[i].name);
	}
	sb_add(&shdr, "", 0);
	sb_add(&creq, "\n", 1);
	sb_str(&creq, shdr.p ? shdr.p : "");
	sb_add(&creq, "\n", 1);
	sb_str(&creq, in->payload_hash);
	if (creq.bad || shdr.bad)
		goto out;

	char date[9];
	memcpy(date, in->amz_date, 8);
	date[8] = '\0';
	char creq_hash[65];
	s3_sha256_hex(creq.p, creq.len, creq_hash);
	sb_str(&sts, "AWS4-HMAC-SHA256\n");
	sb_str(&sts, in->amz_date);
	sb_add(&sts, "\n", 1);
	sb_str(&sts, date);
	sb_add(&sts, "/", 1);
	sb_str(&sts, in->region);
	sb_add(&sts, "/", 1);
	sb_str(&sts, in->service);
	sb_str(&sts, "/aws4_request\n");
	sb_str(&sts, creq_hash);
	if (sts.bad)
		goto out;

	/* kSigning = HMAC(HMAC(HMAC(HMAC("AWS4"+secret, date), region), service), "aws4_request") */
	{
		size_t slen = strlen(in->secret_access_key);
		unsigned char k[32], sig[32];
		char *seed = malloc(slen + 5);
		if (!seed)
			goto out;
		memcpy(seed, "AWS4", 4);
		memcpy(seed + 4, in->secret_access_key, slen + 1);
		int r = hmac(seed, slen + 4, date, k);
		OPENSSL_cleanse(seed, slen + 4);
		free(seed);
		if (!r)
			r = hmac(k, 32, in->region, k);
		if (!r)
			r = hmac(k, 32, in->service, k);
		if (!r)
			r = hmac(k, 32, "aws4_request", k);
		if (!r)
			r = hmac(k, 32, sts.p, sig);
		OPENSSL_cleanse(k, sizeof(k));
		if (r) {
			ret = r;
			goto out;
		}
		char sighex[65];
		hex_encode(sig, 32, sighex);
		sb_str(&auth, "AWS4-HMAC-SHA256 Credential=");
		sb_str(&auth, in->access_key_id);
		sb_add(&auth, "/", 1);
		sb_str(&auth, date);
		sb_add(&auth, "/", 1);
		sb_str(&auth, in->region);
		sb_add(&auth, "/", 1);
		sb_str(&auth, in->service);
		sb_str(&auth, "/aws4_request, SignedHeaders=");
		sb_str(&auth, shdr.p);
		sb_str(&auth, ", Signature=");
		sb_str(&auth, sighex);
		if (auth.bad)
			goto out;
	}

	out->canonical_request = creq.p;
	out->string_to_sign = sts.p;
	out->authorization = auth.p;
	out->signed_headers = shdr.p;
	creq.p = sts.p = auth.p = shdr.p = NULL;
	ret = 0;
out:
	if (q) {
		for (size_t i = 0; i < in->n_query; i++) {
			free(q[i].name);
			free(q[i].value);
		}
		free(q);
	}
	if (h) {
		for (size_t i = 0; i < nh; i++) {
			free(h[i].name);
			free(h[i].value.p);
		}
		free(h);
	}
	free(creq.p);
	free(shdr.p);
	free(sts.p);
	free(auth.p);
	return ret;
}
