/* SPDX-License-Identifier: MIT */
/*
 * S3's XML replies (libxml2) and what an error means: retry or not, which
 * -errno. The parser never loads a DTD, never expands external entities and
 * never touches the network; elements are matched by local name so that
 * the S3 namespace (present or not, servers differ) does not matter.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

#include "s3.h"

#define S3_XML_MAX ((size_t)64 << 20)

static xmlDocPtr parse(const char *body, size_t len)
{
	if (!body || len == 0 || len > S3_XML_MAX)
		return NULL;
	return xmlReadMemory(body, (int)len, "s3.xml", NULL,
			     XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING |
			     XML_PARSE_NOBLANKS);
}

static bool named(const xmlNode *n, const char *name)
{
	return n && n->type == XML_ELEMENT_NODE && !strcmp((const char *)n->name, name);
}

/* A reply's root element. moto names some of them "...Response" where S3
 * says "...Result"; both are accepted. */
static bool root_is(const xmlNode *n, const char *name)
{
	if (named(n, name))
		return true;
	size_t len = strlen(name);
	if (!n || n->type != XML_ELEMENT_NODE || len < 6 || strcmp(name + len - 6, "Result"))
		return false;
	const char *rn = (const char *)n->name;
	return !strncmp(rn, name, len - 6) && !strcmp(rn + len - 6, "Response");
}

static xmlNode *child(const xmlNode *parent, const char *name)
{
	for (xmlNode *n = parent ? parent->children : NULL; n; n = n->next)
		if (named(n, name))
			return n;
	return NULL;
}

/* malloc'd text of an element ("" if empty), NULL on ENOMEM or no node. */
static char *text(const xmlNode *n)
{
	if (!n)
		return NULL;
	xmlChar *t = xmlNodeGetContent(n);
	char *r = strdup(t ? (const char *)t : "");
	xmlFree(t);
	return r;
}

static char *child_text(const xmlNode *parent, const char *name)
{
	return text(child(parent, name));
}

static void copy_trunc(char *dst, size_t len, const char *src)
{
	if (!len)
		return;
	size_t n = src ? strlen(src) : 0;
	if (n >= len)
		n = len - 1;
	if (n)
		memcpy(dst, src, n);
	dst[n] = '\0';
	/* Messages end up in one log line. */
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)dst[i] < 0x20)
			dst[i] = ' ';
}

int s3_xml_parse_error(const char *body, size_t len, char *code, size_t codelen,
		       char *message, size_t msglen)
{
	copy_trunc(code, codelen, "");
	copy_trunc(message, msglen, "");
	xmlDocPtr doc = parse(body, len);
	if (!doc)
		return -EBADMSG;
	xmlNode *root = xmlDocGetRootElement(doc);
	int ret = -EBADMSG;
	if (named(root, "Error")) {
		char *c = child_text(root, "Code");
		char *m = child_text(root, "Message");
		copy_trunc(code, codelen, c);
		copy_trunc(message, msglen, m);
		free(c);
		free(m);
		ret = 0;
	}
	xmlFreeDoc(doc);
	return ret;
}

int s3_xml_get(const char *body, size_t len, const char *root_name,
	       const char *name, char **value)
{
	*value = NULL;
	xmlDocPtr doc = parse(body, len);
	if (!doc)
		return -EBADMSG;
	xmlNode *root = xmlDocGetRootElement(doc);
	int ret = -EBADMSG;
	if (root_is(root, root_name)) {
		xmlNode *n = child(root, name);
		if (!n) {
			ret = -ENOENT;
		} else {
			*value = text(n);
			ret = *value ? 0 : -ENOMEM;
		}
	}
	xmlFreeDoc(doc);
	return ret;
}

void s3_list_free(struct s3_list *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n_objects; i++) {
		free(l->objects[i].key);
		free(l->objects[i].etag);
		free(l->objects[i].last_modified);
	}
	free(l->objects);
	for (size_t i = 0; i < l->n_prefixes; i++)
		free(l->prefixes[i]);
	free(l->prefixes);
	for (size_t i = 0; i < l->n_parts; i++)
		free(l->parts[i].etag);
	free(l->parts);
	for (size_t i = 0; i < l->n_uploads; i++) {
		free(l->uploads[i].key);
		free(l->uploads[i].upload_id);
		free(l->uploads[i].initiated);
	}
	free(l->uploads);
	free(l->next_marker);
	free(l->next_upload_id_marker);
	memset(l, 0, sizeof(*l));
}

static int parse_u64(const xmlNode *n, uint64_t *out)
{
	char *t = text(n);
	if (!t)
		return -EBADMSG;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(t, &end, 10);
	int ret = (errno || end == t || *end || t[0] == '-') ? -EBADMSG : 0;
	free(t);
	if (!ret)
		*out = v;
	return ret;
}

static size_t count(const xmlNode *root, const char *name)
{
	size_t n = 0;
	for (xmlNode *c = root->children; c; c = c->next)
		n += named(c, name);
	return n;
}

int s3_xml_parse_list(const char *body, size_t len, struct s3_list *out)
{
	memset(out, 0, sizeof(*out));
	xmlDocPtr doc = parse(body, len);
	if (!doc)
		return -EBADMSG;
	xmlNode *root = xmlDocGetRootElement(doc);
	int ret = -EBADMSG;
	bool objects = root_is(root, "ListBucketResult");
	bool parts = root_is(root, "ListPartsResult");
	bool uploads = root_is(root, "ListMultipartUploadsResult");
	if (!objects && !parts && !uploads)
		goto out;

	ret = -ENOMEM;
	size_t n;
	if (objects && (n = count(root, "Contents")) &&
	    !(out->objects = calloc(n, sizeof(*out->objects))))
		goto out;
	if (objects && (n = count(root, "CommonPrefixes")) &&
	    !(out->prefixes = calloc(n, sizeof(*out->prefixes))))
		goto out;
	if (parts && (n = count(root, "Part")) && !(out->parts = calloc(n, sizeof(*out->parts))))
		goto out;
	if (uploads && (n = count(root, "Upload")) &&
	    !(out->uploads = calloc(n, sizeof(*out->uploads))))
		goto out;

	for (xmlNode *c = root->children; c; c = c->next) {
		if (c->type != XML_ELEMENT_NODE)
			continue;
		if (objects && named(c, "Contents")) {
			struct s3_object_info *o = &out->objects[out->n_objects++];
			ret = -EBADMSG;
			if (!child(c, "Key") || parse_u64(child(c, "Size"), &o->size))
				goto out;
			ret = -ENOMEM;
			o->key = child_text(c, "Key");
			o->etag = child(c, "ETag") ? child_text(c, "ETag") : strdup("");
			o->last_modified = child(c, "LastModified") ?
					   child_text(c, "LastModified") : strdup("");
			if (!o->key || !o->etag || !o->last_modified)
				goto out;
		} else if (objects && named(c, "CommonPrefixes")) {
			ret = -EBADMSG;
			if (!child(c, "Prefix"))
				goto out;
			ret = -ENOMEM;
			if (!(out->prefixes[out->n_prefixes++] = child_text(c, "Prefix")))
				goto out;
		} else if (parts && named(c, "Part")) {
			struct s3_part_info *p = &out->parts[out->n_parts++];
			uint64_t num;
			ret = -EBADMSG;
			if (parse_u64(child(c, "PartNumber"), &num) || num < 1 ||
			    num > S3_PARTS_MAX || parse_u64(child(c, "Size"), &p->size))
				goto out;
			p->number = (uint32_t)num;
			ret = -ENOMEM;
			if (!(p->etag = child(c, "ETag") ? child_text(c, "ETag") : strdup("")))
				goto out;
		} else if (uploads && named(c, "Upload")) {
			struct s3_upload_info *u = &out->uploads[out->n_uploads++];
			ret = -EBADMSG;
			if (!child(c, "Key") || !child(c, "UploadId"))
				goto out;
			ret = -ENOMEM;
			u->key = child_text(c, "Key");
			u->upload_id = child_text(c, "UploadId");
			u->initiated = child(c, "Initiated") ? child_text(c, "Initiated") : strdup("");
			if (!u->key || !u->upload_id || !u->initiated)
				goto out;
		} else if (named(c, "IsTruncated")) {
			char *t = text(c);
			if (!t) {
				ret = -ENOMEM;
				goto out;
			}
			out->truncated = !strcasecmp(t, "true");
			free(t);
		}
	}
	const char *marker = objects ? "NextContinuationToken" :
			     parts ? "NextPartNumberMarker" : "NextKeyMarker";
	ret = -ENOMEM;
	if (child(root, marker) && !(out->next_marker = child_text(root, marker)))
		goto out;
	if (uploads && child(root, "NextUploadIdMarker") &&
	    !(out->next_upload_id_marker = child_text(root, "NextUploadIdMarker")))
		goto out;
	ret = -EBADMSG;
	if (out->truncated && (!out->next_marker || !*out->next_marker))
		goto out;   /* a truncated page must say where to go on */
	ret = 0;
out:
	if (ret)
		s3_list_free(out);
	xmlFreeDoc(doc);
	return ret;
}

static bool code_is(const char *code, const char *const *list)
{
	if (!code || !*code)
		return false;
	for (; *list; list++)
		if (!strcmp(code, *list))
			return true;
	return false;
}

static const char *const throttle_codes[] = {
	"SlowDown", "Throttling", "ThrottlingException", "ThrottledException",
	"RequestThrottled", "RequestThrottledException", "TooManyRequestsException",
	"RequestLimitExceeded", "BandwidthLimitExceeded", "EC2ThrottledException",
	"ProvisionedThroughputExceededException", "TransactionInProgressException",
	NULL,
};
static const char *const transient_codes[] = {
	"RequestTimeout", "RequestTimeoutException", "InternalError",
	"ServiceUnavailable", "PriorRequestNotComplete", "IDPCommunicationError",
	NULL,
};
static const char *const auth_codes[] = {
	"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied",
	"AuthorizationHeaderMalformed", "ExpiredToken", "InvalidToken",
	"TokenRefreshRequired", "AllAccessDisabled", "AccountProblem",
	"RequestTimeTooSkewed", "InvalidSecurity", "NotSignedUp",
	NULL,
};

enum s3_retry s3_classify(long status, const char *code, int terr)
{
	if (status == 0) {
		switch (-terr) {
		case ECONNREFUSED:
		case ECONNRESET:
		case ECONNABORTED:
		case ETIMEDOUT:
		case EPIPE:
		case EHOSTUNREACH:
		case ENETUNREACH:
		case EAGAIN:
			return S3_RETRY;
		default:
			return S3_NO_RETRY;
		}
	}
	if (code_is(code, auth_codes))
		return S3_NO_RETRY;
	if (code_is(code, throttle_codes) || code_is(code, transient_codes))
		return S3_RETRY;
	if (status == 429 || (status >= 500 && status != 501))
		return S3_RETRY;
	return S3_NO_RETRY;
}

int s3_error_errno(long status, const char *code, int terr)
{
	if (status == 0)
		return terr ? terr : -EIO;
	if (status == 401 || status == 403 || code_is(code, auth_codes))
		return -EACCES;
	if (status == 404)
		return -ENOENT;
	if (status == 416)
		return -ERANGE;
	if (status == 429 || code_is(code, throttle_codes))
		return -EAGAIN;
	if (status >= 500 || code_is(code, transient_codes))
		return -EIO;
	if (status >= 300 || (code && *code))
		return -EINVAL;
	return 0;
}
