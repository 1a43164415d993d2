/* SPDX-License-Identifier: MIT */
/*
 * s3:// URLs, bucket and key rules, addressing (path and virtual-hosted),
 * multipart part sizing, XML replies (errors, listings) and the retry
 * classification.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "s3.h"

static void urls(void)
{
	struct s3_url u;
	char err[512];

	CHECK_EQ(s3_url_parse("s3://my-bucket/ckpt/run1/", &u, err, sizeof(err)), 0);
	CHECK(!strcmp(u.bucket, "my-bucket") && !strcmp(u.prefix, "ckpt/run1"));
	s3_url_free(&u);
	CHECK_EQ(s3_url_parse("s3://my.bucket.1", &u, err, sizeof(err)), 0);
	CHECK(!strcmp(u.bucket, "my.bucket.1") && !strcmp(u.prefix, ""));
	s3_url_free(&u);
	CHECK_EQ(s3_url_parse("s3://abc/", &u, err, sizeof(err)), 0);
	s3_url_free(&u);
	CHECK_EQ(s3_url_parse("s3://abc/\xe6\x97\xa5\xe6\x9c\xac/x", &u, err, sizeof(err)), 0);
	s3_url_free(&u);

	static const char *const bad[] = {
		"http://bucket/x", "s3://", "s3://ab", "s3://Bucket", "s3://-bucket",
		"s3://bucket-", "s3://bu..cket", "s3://192.168.1.1", "s3://xn--bucket",
		"s3://bucket-s3alias", "s3://sthree-bucket", "s3://bucket--ol-s3",
		"s3://bu_cket", "s3://a234567890123456789012345678901234567890123456789012345678901234",
		"s3://bucket//x", "s3://bucket/a//b", "s3://bucket/a/../b", "s3://bucket/./a",
		"s3://bucket/a/..", "s3://bucket/a\nb", "s3://bucket/a\rb", "s3://bucket/a\\b",
		"s3://bucket/\xff\xfe", "s3://bucket/\xc0\xaf", "s3://bucket/\xed\xa0\x80",
		"s3://bucket/a\x7f", NULL,
	};
	for (const char *const *b = bad; *b; b++) {
		int r = s3_url_parse(*b, &u, err, sizeof(err));
		if (r == 0) {
			fprintf(stderr, "accepted bad URL '%s'\n", *b);
			check_failures++;
			s3_url_free(&u);
		} else {
			CHECK(err[0] != '\0');
		}
	}
	CHECK_EQ(s3_bucket_check("abc"), 0);
	CHECK_EQ(s3_bucket_check("a-b.c-d"), 0);
	char longkey[S3_KEY_MAX + 2];
	memset(longkey, 'k', sizeof(longkey) - 1);
	longkey[sizeof(longkey) - 1] = '\0';
	CHECK_EQ(s3_key_check(longkey), -ENAMETOOLONG);
	longkey[S3_KEY_MAX] = '\0';
	CHECK_EQ(s3_key_check(longkey), 0);
	CHECK_EQ(s3_key_check(""), -EINVAL);
	CHECK_EQ(s3_key_check("/abs"), -EINVAL);
	CHECK_EQ(s3_key_check("job/step-0000000001/rank-000000.shard"), 0);
	CHECK_EQ(s3_key_check("dir/"), 0);
	CHECK_EQ(s3_key_check("sp ace+plus%pct$&=?#"), 0);
}

static void target(const char *endpoint, enum s3_addressing a, const char *bucket,
		   const char *key, const char *want_url, const char *want_host,
		   const char *want_path)
{
	struct s3_config cfg = { .region = "eu-west-1", .addressing = a };
	cfg.endpoint_url = (char *)endpoint;
	struct s3_target t;
	int r = s3_target_make(&cfg, bucket, key, &t);
	CHECK_EQ(r, 0);
	if (r)
		return;
	if (strcmp(t.url, want_url) || strcmp(t.host, want_host) || strcmp(t.path, want_path)) {
		fprintf(stderr, "target(%s, %d, %s, %s): url=%s host=%s path=%s\n",
			endpoint ? endpoint : "AWS", a, bucket, key, t.url, t.host, t.path);
		check_failures++;
	}
	s3_target_free(&t);
}

static void addressing(void)
{
	/* AWS: virtual-hosted for DNS-safe names, path for dotted ones (TLS). */
	target(NULL, S3_ADDRESSING_AUTO, "bkt", "a b/c",
	       "https://bkt.s3.eu-west-1.amazonaws.com/a%20b/c",
	       "bkt.s3.eu-west-1.amazonaws.com", "/a b/c");
	target(NULL, S3_ADDRESSING_AUTO, "b.kt", "k",
	       "https://s3.eu-west-1.amazonaws.com/b.kt/k", "s3.eu-west-1.amazonaws.com",
	       "/b.kt/k");
	target(NULL, S3_ADDRESSING_PATH, "bkt", "k",
	       "https://s3.eu-west-1.amazonaws.com/bkt/k", "s3.eu-west-1.amazonaws.com",
	       "/bkt/k");
	/* Custom endpoints and IPs: path style, port kept in Host. */
	target("http://127.0.0.1:7480", S3_ADDRESSING_AUTO, "bkt", "x/y",
	       "http://127.0.0.1:7480/bkt/x/y", "127.0.0.1:7480", "/bkt/x/y");
	target("http://[::1]:9000/", S3_ADDRESSING_AUTO, "bkt", NULL,
	       "http://[::1]:9000/bkt", "[::1]:9000", "/bkt");
	target("https://minio.example.com", S3_ADDRESSING_AUTO, "bkt", "k",
	       "https://minio.example.com/bkt/k", "minio.example.com", "/bkt/k");
	target("https://minio.example.com:443", S3_ADDRESSING_VIRTUAL, "bkt", "k",
	       "https://bkt.minio.example.com/k", "bkt.minio.example.com", "/k");
	target("https://s3.us-east-2.amazonaws.com", S3_ADDRESSING_AUTO, "bkt", "k",
	       "https://bkt.s3.us-east-2.amazonaws.com/k", "bkt.s3.us-east-2.amazonaws.com", "/k");
	/* Encoded once: "%" becomes %25, "+" %2B, unicode per byte. */
	target("http://localhost:5000", S3_ADDRESSING_AUTO, "bkt", "p%c+d/\xe6\x97\xa5",
	       "http://localhost:5000/bkt/p%25c%2Bd/%E6%97%A5", "localhost:5000",
	       "/bkt/p%c+d/\xe6\x97\xa5");

	struct s3_config cfg = { .region = "us-east-1" };
	struct s3_target t;
	static const char *const bad_ep[] = {
		"ftp://x", "http://", "http://host:0", "http://host:99999", "http://host/path",
		"http://user@host", "http://host?x", "host:9000", NULL,
	};
	for (const char *const *e = bad_ep; *e; e++) {
		cfg.endpoint_url = (char *)*e;
		if (s3_target_make(&cfg, "bkt", "k", &t) == 0) {
			fprintf(stderr, "accepted bad endpoint '%s'\n", *e);
			check_failures++;
			s3_target_free(&t);
		}
	}
}

static void parts(void)
{
	const uint64_t MiB = 1 << 20;
	uint64_t ps;
	uint32_t n;
	CHECK_EQ(s3_part_plan(17 * MiB, 8 * MiB, &ps, &n), 0);
	CHECK_EQ(ps, 8 * MiB);
	CHECK_EQ(n, 3);
	CHECK_EQ(s3_part_plan(17 * MiB, 1 * MiB, &ps, &n), 0);   /* raised to 5 MiB */
	CHECK_EQ(ps, 5 * MiB);
	CHECK_EQ(n, 4);
	CHECK_EQ(s3_part_plan(0, 8 * MiB, &ps, &n), 0);
	CHECK_EQ(n, 1);
	CHECK_EQ(s3_part_plan(100 * MiB, 100 * S3_PART_MAX, &ps, &n), 0);   /* capped */
	CHECK_EQ(ps, S3_PART_MAX);
	CHECK_EQ(n, 1);
	/* 1 TiB at 8 MiB would be 131072 parts: raised to fit 10,000. */
	CHECK_EQ(s3_part_plan((uint64_t)1 << 40, 8 * MiB, &ps, &n), 0);
	CHECK(n <= S3_PARTS_MAX);
	CHECK_EQ(ps % MiB, 0);
	CHECK(ps * n >= (uint64_t)1 << 40);
	CHECK(ps * (n - 1) < (uint64_t)1 << 40);
	CHECK_EQ(s3_part_plan(S3_OBJECT_MAX, 8 * MiB, &ps, &n), 0);
	CHECK(n <= S3_PARTS_MAX && ps <= S3_PART_MAX);
	CHECK_EQ(s3_part_plan(S3_OBJECT_MAX + 1, 8 * MiB, &ps, &n), -EFBIG);
	/* Exactly 10,000 parts of the preferred size stay as they are. */
	CHECK_EQ(s3_part_plan(10000 * 8 * MiB, 8 * MiB, &ps, &n), 0);
	CHECK_EQ(ps, 8 * MiB);
	CHECK_EQ(n, 10000);
}

static void xml(void)
{
	char code[64], msg[256];
	const char *e1 = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SignatureDoesNotMatch"
			 "</Code><Message>The request signature we calculated does not match"
			 "</Message><RequestId>1</RequestId></Error>";
	CHECK_EQ(s3_xml_parse_error(e1, strlen(e1), code, sizeof(code), msg, sizeof(msg)), 0);
	CHECK(!strcmp(code, "SignatureDoesNotMatch"));
	CHECK(!strncmp(msg, "The request signature", 21));
	/* Truncation, control characters flattened for one log line. */
	const char *e2 = "<Error><Code>NoSuchKey</Code><Message>line1\nline2 and a long tail</Message></Error>";
	CHECK_EQ(s3_xml_parse_error(e2, strlen(e2), code, 4, msg, 12), 0);
	CHECK(!strcmp(code, "NoS"));
	CHECK(!strcmp(msg, "line1 line2"));
	/* Not an error document; garbage; an entity bomb is not expanded. */
	const char *ok = "<ListBucketResult></ListBucketResult>";
	CHECK_EQ(s3_xml_parse_error(ok, strlen(ok), code, sizeof(code), msg, sizeof(msg)), -EBADMSG);
	CHECK_EQ(s3_xml_parse_error("<<<", 3, code, sizeof(code), msg, sizeof(msg)), -EBADMSG);
	CHECK_EQ(s3_xml_parse_error("", 0, code, sizeof(code), msg, sizeof(msg)), -EBADMSG);
	const char *xxe = "<?xml version=\"1.0\"?><!DOCTYPE e [<!ENTITY x SYSTEM \"file:///etc/passwd\">]>"
			  "<Error><Code>&x;</Code><Message>m</Message></Error>";
	s3_xml_parse_error(xxe, strlen(xxe), code, sizeof(code), msg, sizeof(msg));
	CHECK(!strstr(code, "root"));

	const char *list =
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
		"<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
		"<Name>b</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount><IsTruncated>true</IsTruncated>"
		"<NextContinuationToken>tok/en+=</NextContinuationToken>"
		"<Contents><Key>p/a &amp; b</Key><Size>17825792</Size><ETag>&quot;abc-3&quot;</ETag>"
		"<LastModified>2026-01-01T00:00:00.000Z</LastModified></Contents>"
		"<Contents><Key>p/c</Key><Size>0</Size></Contents>"
		"<CommonPrefixes><Prefix>p/d/</Prefix></CommonPrefixes></ListBucketResult>";
	struct s3_list l;
	CHECK_EQ(s3_xml_parse_list(list, strlen(list), &l), 0);
	CHECK_EQ(l.n_objects, 2);
	CHECK_EQ(l.n_prefixes, 1);
	CHECK(l.truncated);
	if (l.n_objects == 2 && l.n_prefixes == 1) {
		CHECK(!strcmp(l.objects[0].key, "p/a & b"));
		CHECK_EQ(l.objects[0].size, 17825792);
		CHECK(!strcmp(l.objects[0].etag, "\"abc-3\""));
		CHECK(!strcmp(l.objects[1].etag, ""));
		CHECK(!strcmp(l.prefixes[0], "p/d/"));
		CHECK(!strcmp(l.next_marker, "tok/en+="));
	}
	s3_list_free(&l);
	const char *badsize = "<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>";
	CHECK_EQ(s3_xml_parse_list(badsize, strlen(badsize), &l), -EBADMSG);
	const char *trunc_no_token = "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>";
	CHECK_EQ(s3_xml_parse_list(trunc_no_token, strlen(trunc_no_token), &l), -EBADMSG);
	const char *partsx =
		"<ListPartsResult><UploadId>u</UploadId><IsTruncated>false</IsTruncated>"
		"<Part><PartNumber>1</PartNumber><ETag>\"e1\"</ETag><Size>5242880</Size></Part>"
		"<Part><PartNumber>2</PartNumber><ETag>\"e2\"</ETag><Size>1</Size></Part></ListPartsResult>";
	CHECK_EQ(s3_xml_parse_list(partsx, strlen(partsx), &l), 0);
	CHECK_EQ(l.n_parts, 2);
	if (l.n_parts == 2)
		CHECK(l.parts[1].number == 2 && l.parts[1].size == 1 && !strcmp(l.parts[1].etag, "\"e2\""));
	s3_list_free(&l);
	const char *part0 = "<ListPartsResult><Part><PartNumber>0</PartNumber><Size>1</Size></Part></ListPartsResult>";
	CHECK_EQ(s3_xml_parse_list(part0, strlen(part0), &l), -EBADMSG);
	const char *ups =
		"<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>"
		"<Upload><Key>k1</Key><UploadId>id1</UploadId><Initiated>t</Initiated></Upload>"
		"</ListMultipartUploadsResult>";
	CHECK_EQ(s3_xml_parse_list(ups, strlen(ups), &l), 0);
	CHECK_EQ(l.n_uploads, 1);
	if (l.n_uploads == 1)
		CHECK(!strcmp(l.uploads[0].key, "k1") && !strcmp(l.uploads[0].upload_id, "id1"));
	s3_list_free(&l);
	CHECK_EQ(s3_xml_parse_list(e1, strlen(e1), &l), -EBADMSG);

	char *v;
	const char *init = "<InitiateMultipartUploadResult><Bucket>b</Bucket><UploadId>xyz</UploadId></InitiateMultipartUploadResult>";
	CHECK_EQ(s3_xml_get(init, strlen(init), "InitiateMultipartUploadResult", "UploadId", &v), 0);
	CHECK(v && !strcmp(v, "xyz"));
	free(v);
	CHECK_EQ(s3_xml_get(init, strlen(init), "CompleteMultipartUploadResult", "ETag", &v), -EBADMSG);
	/* radosgw's Complete reply: an empty ETag is still a success. */
	const char *rgw = "<CompleteMultipartUploadResult><Location>l</Location><ETag></ETag></CompleteMultipartUploadResult>";
	CHECK_EQ(s3_xml_get(rgw, strlen(rgw), "CompleteMultipartUploadResult", "ETag", &v), 0);
	CHECK(v && !strcmp(v, ""));
	free(v);
}

static void classify(void)
{
	CHECK_EQ(s3_classify(500, "InternalError", 0), S3_RETRY);
	CHECK_EQ(s3_classify(502, "", 0), S3_RETRY);
	CHECK_EQ(s3_classify(503, "SlowDown", 0), S3_RETRY);
	CHECK_EQ(s3_classify(503, NULL, 0), S3_RETRY);
	CHECK_EQ(s3_classify(429, "", 0), S3_RETRY);
	CHECK_EQ(s3_classify(400, "RequestTimeout", 0), S3_RETRY);
	CHECK_EQ(s3_classify(501, "NotImplemented", 0), S3_NO_RETRY);
	CHECK_EQ(s3_classify(403, "InvalidAccessKeyId", 0), S3_NO_RETRY);
	CHECK_EQ(s3_classify(403, "SignatureDoesNotMatch", 0), S3_NO_RETRY);
	CHECK_EQ(s3_classify(403, "AccessDenied", 0), S3_NO_RETRY);
	CHECK_EQ(s3_classify(403, "RequestTimeTooSkewed", 0), S3_NO_RETRY);
	CHECK_EQ(s3_classify(404, "NoSuchBucket", 0), S3_NO_RETRY);
	CHECK_EQ(s3_classify(404, "NoSuchKey", 0), S3_NO_RETRY);
	CHECK_EQ(s3_classify(400, "EntityTooSmall", 0), S3_NO_RETRY);
	CHECK_EQ(s3_classify(0, "", -ECONNRESET), S3_RETRY);
	CHECK_EQ(s3_classify(0, "", -ECONNREFUSED), S3_RETRY);
	CHECK_EQ(s3_classify(0, "", -ETIMEDOUT), S3_RETRY);
	CHECK_EQ(s3_classify(0, "", -EPROTO), S3_NO_RETRY);   /* TLS verification */
	CHECK_EQ(s3_classify(0, "", -EOVERFLOW), S3_NO_RETRY);

	CHECK_EQ(s3_error_errno(403, "SignatureDoesNotMatch", 0), -EACCES);
	CHECK_EQ(s3_error_errno(400, "ExpiredToken", 0), -EACCES);
	CHECK_EQ(s3_error_errno(404, "NoSuchBucket", 0), -ENOENT);
	CHECK_EQ(s3_error_errno(416, "InvalidRange", 0), -ERANGE);
	CHECK_EQ(s3_error_errno(503, "SlowDown", 0), -EAGAIN);
	CHECK_EQ(s3_error_errno(500, "", 0), -EIO);
	CHECK_EQ(s3_error_errno(400, "EntityTooSmall", 0), -EINVAL);
	CHECK_EQ(s3_error_errno(0, "", -ETIMEDOUT), -ETIMEDOUT);
	CHECK_EQ(s3_error_errno(200, "", 0), 0);
}

static void client_args(void)
{
	struct s3_config cfg = { .region = "us-east-1" };
	s3_client *c = NULL;
	char err[256];
	CHECK_EQ(s3_client_new(&cfg, NULL, NULL, &c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "credentials"));
	cfg.access_key_id = "AKIDX";
	cfg.secret_access_key = "topsecretvalue";
	cfg.endpoint_url = "http://127.0.0.1:1/x";
	CHECK_EQ(s3_client_new(&cfg, NULL, NULL, &c, err, sizeof(err)), -EINVAL);
	CHECK(!strstr(err, "topsecretvalue"));
	cfg.endpoint_url = "http://127.0.0.1:1";
	CHECK_EQ(s3_client_new(&cfg, NULL, NULL, &c, err, sizeof(err)), 0);
	/* Bad names are refused at once, without a callback. */
	char buf[4];
	struct s3_source src = { .buf = buf, .fd = -1, .len = 4 };
	CHECK_EQ(s3_put_object(c, "Bad_Bucket", "k", &src, NULL, NULL), -EINVAL);
	CHECK_EQ(s3_put_object(c, "bucket", "../k", &src, NULL, NULL), -EINVAL);
	CHECK_EQ(s3_upload_part(c, "bucket", "k", "id", 0, &src, NULL, NULL), -EINVAL);
	CHECK_EQ(s3_upload_part(c, "bucket", "k", "id", 10001, &src, NULL, NULL), -EINVAL);
	CHECK_EQ(s3_upload_part(c, "bucket", "k", "i d", 1, &src, NULL, NULL), -EINVAL);
	CHECK_EQ(s3_client_pending(c), 0);
	s3_client_free(c);
	s3_client_free(NULL);
}

int main(void)
{
	urls();
	addressing();
	parts();
	xml();
	classify();
	client_args();
	return check_result("test-s3-names");
}
