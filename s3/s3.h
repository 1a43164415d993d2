/* SPDX-License-Identifier: MIT */
/*
 * s3: the S3 client shared by ckptd's uploader and the tools (libckpts3,
 * internal). SigV4 signing with OpenSSL, credentials and endpoint resolved
 * the way the AWS CLI does, s3:// URLs, and asynchronous operations over the
 * libcurl multi interface, driven either by the caller's event loop or by a
 * small blocking driver (s3_client_wait).
 *
 * Conventions: functions return 0 (or a count) or -errno; where an `err`
 * buffer is taken a failure leaves a one-line reason there. Nothing here
 * prints, exits or logs, and no function ever puts a secret (secret key,
 * session token, signature) into an error message or a description.
 *
 * Threading: an s3_client and everything it calls back belong to one thread.
 */
#ifndef CKPT_S3_H
#define CKPT_S3_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------
 * Limits (S3's documented ones)
 */
#define S3_BUCKET_MIN 3
#define S3_BUCKET_MAX 63
#define S3_KEY_MAX 1024                          /* bytes of UTF-8 */
#define S3_PART_MIN ((uint64_t)5 << 20)          /* every part but the last */
#define S3_PART_MAX ((uint64_t)5 << 30)
#define S3_PARTS_MAX 10000u
#define S3_OBJECT_MAX ((uint64_t)5 << 40)

/* ------------------------------------------------------------------------
 * SigV4 (s3sign.c)
 */
/* User metadata ckptd stores with each shard and index object: the SHA-256
 * of the rank's index as the root's manifest records it (FORMAT.md). */
#define S3_META_INDEX_SHA256 "x-amz-meta-ckpt-index-sha256"

struct s3_kv {
	const char *name;
	const char *value;
};

struct s3_sigv4_input {
	const char *method;         /* "GET", "PUT", ... */
	/* The path as sent, decoded ("/bucket/my key"); encoded here per S3
	 * rules: every byte but A-Z a-z 0-9 - . _ ~ and '/' as %XX, once,
	 * never normalised ("//" and "/./" stay). */
	const char *path;
	const struct s3_kv *query;  /* decoded names and values; may repeat */
	size_t n_query;
	/* Headers to sign (any case; repeated names are joined with ','
	 * in order). Must include host and x-amz-date. */
	const struct s3_kv *headers;
	size_t n_headers;
	const char *payload_hash;   /* lower-case hex SHA-256, or "UNSIGNED-PAYLOAD" */
	const char *amz_date;       /* "YYYYMMDDTHHMMSSZ" */
	const char *region;
	const char *service;        /* "s3" */
	const char *access_key_id;
	const char *secret_access_key;
};

struct s3_sigv4_output {
	char *canonical_request;    /* malloc'd; for tests and debugging */
	char *string_to_sign;       /* malloc'd */
	char *authorization;        /* malloc'd: the Authorization header value */
	char *signed_headers;       /* malloc'd: "host;x-amz-date;..." */
};

/* Sign a request. On success the caller owns out's strings
 * (s3_sigv4_output_free); on failure out is left empty. */
int s3_sigv4_sign(const struct s3_sigv4_input *in, struct s3_sigv4_output *out);
void s3_sigv4_output_free(struct s3_sigv4_output *out);

/* URI-encode src into a malloc'd string: every byte but unreserved ones as
 * %XX (upper-case hex); '/' kept when keep_slash. NULL on ENOMEM. */
char *s3_uri_encode(const char *src, size_t len, bool keep_slash);
/* Lower-case hex SHA-256 of buf (65 bytes with the NUL). */
void s3_sha256_hex(const void *buf, size_t len, char out[65]);
/* "YYYYMMDDTHHMMSSZ" of a UNIX time, UTC. */
void s3_amz_date(int64_t unix_seconds, char out[17]);

/* ------------------------------------------------------------------------
 * Configuration and credentials (s3creds.c)
 */
enum s3_addressing {
	S3_ADDRESSING_AUTO = 0,  /* virtual for AWS + DNS-safe bucket, else path */
	S3_ADDRESSING_PATH,
	S3_ADDRESSING_VIRTUAL,
};

/* Values set explicitly (ckptd's config, a tool's flags); NULL or 0 means
 * "not set" and leaves the AWS lookup to decide. All borrowed. */
struct s3_settings {
	const char *profile;
	const char *access_key_id;
	const char *secret_access_key;
	const char *session_token;
	const char *region;
	const char *endpoint_url;    /* "http://127.0.0.1:7480", "https://..." */
	const char *ca_bundle;       /* PEM file for https */
	enum s3_addressing addressing;
	bool no_verify_tls;          /* for tests against self-signed servers */
};

/* The resolved configuration. Strings are malloc'd and owned by it
 * (s3_config_free); NULL where nothing set them. */
struct s3_config {
	char *profile;
	char *access_key_id;
	char *secret_access_key;
	char *session_token;
	char *region;                /* never NULL after resolve ("us-east-1") */
	char *endpoint_url;          /* NULL: AWS, https://s3.<region>.amazonaws.com */
	char *ca_bundle;
	enum s3_addressing addressing;
	bool verify_tls;
	/* Where each value came from, for messages: "explicit", "env
	 * AWS_REGION", "config file [profile x]", ... (static strings). */
	const char *credentials_source;
	const char *region_source;
	const char *endpoint_source;
};

/*
 * Resolve like the AWS CLI (highest first):
 *  profile:     explicit > AWS_PROFILE > AWS_DEFAULT_PROFILE > "default"
 *  credentials: explicit pair > env AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY
 *               (+ AWS_SESSION_TOKEN; skipped when the profile is explicit)
 *               > credentials file [profile] > config file [profile NAME]
 *  region:      explicit > AWS_REGION > AWS_DEFAULT_REGION > config > us-east-1
 *  endpoint:    explicit > AWS_ENDPOINT_URL_S3 > AWS_ENDPOINT_URL > config
 *               "s3 =" endpoint_url > config endpoint_url (env and config
 *               ignored when AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true)
 *  addressing:  explicit > config "s3 =" addressing_style > auto
 *  CA bundle:   explicit > AWS_CA_BUNDLE > config ca_bundle
 * Files: AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials), AWS_CONFIG_FILE
 * (~/.aws/config); a missing file is not an error, an unreadable one is.
 * A named profile that exists in neither file is an error (-ENOENT), as is
 * a half pair of keys (-EINVAL). No credentials at all is not an error
 * here (s3_client_new refuses it).
 */
int s3_config_resolve(const struct s3_settings *explicit_settings,
		      struct s3_config *out, char *err, size_t errlen);
void s3_config_free(struct s3_config *cfg);
/* One line describing cfg with secrets redacted (the key id shows its
 * first 4 characters only; secret and token show as "(set)"). Returns the
 * length snprintf would have written. */
int s3_config_describe(const struct s3_config *cfg, char *buf, size_t len);

/* ------------------------------------------------------------------------
 * Names and addressing (s3url.c)
 */
/* Bucket naming rules for new buckets: 3-63 of [a-z0-9.-], starts and
 * ends with a letter or digit, no "..", not an IPv4 address, none of the
 * reserved prefixes/suffixes (xn--, sthree-, -s3alias, --ol-s3). */
int s3_bucket_check(const char *bucket);
/* Keys we write or read: 1..1024 bytes of valid UTF-8, no control bytes,
 * no backslash, no empty, "." or ".." segment (proxies and HTTP stacks
 * normalise those), not starting with '/'. */
int s3_key_check(const char *key);

struct s3_url {
	char *bucket;
	char *prefix;   /* "" or "a/b" (no leading or trailing '/') */
};
/* Parse "s3://bucket[/prefix[/]]" (both checked). */
int s3_url_parse(const char *url, struct s3_url *out, char *err, size_t errlen);
void s3_url_free(struct s3_url *u);

/* Where a request for (bucket, key) goes. */
struct s3_target {
	char *url;       /* full URL with the encoded path, without the query */
	char *host;      /* Host header value ("host" or "host:port") */
	char *path;      /* decoded path to sign ("/key" or "/bucket/key") */
	bool virtual_hosted;
};
/* key may be NULL or "" (bucket-level requests). */
int s3_target_make(const struct s3_config *cfg, const char *bucket,
		   const char *key, struct s3_target *out);
void s3_target_free(struct s3_target *t);
/* Whether auto addressing picks virtual-hosted style for this endpoint
 * host (NULL: AWS) and bucket. */
bool s3_use_virtual(enum s3_addressing a, const char *endpoint_host,
		    bool https, const char *bucket);

/* Part size for a multipart upload of object_size bytes, as close to
 * preferred as S3's limits allow (>= 5 MiB, <= 5 GiB, <= 10,000 parts;
 * rounded up to whole MiB when raised). -EFBIG above 5 TiB. */
int s3_part_plan(uint64_t object_size, uint64_t preferred,
		 uint64_t *part_size, uint32_t *parts);

/* ------------------------------------------------------------------------
 * Responses (s3xml.c, libxml2)
 */
struct s3_object_info {
	char *key;
	uint64_t size;
	char *etag;
	char *last_modified;
};
struct s3_part_info {
	uint32_t number;
	uint64_t size;
	char *etag;
};
struct s3_upload_info {
	char *key;
	char *upload_id;
	char *initiated;
};
/* A listing page; which arrays are filled depends on the operation. */
struct s3_list {
	struct s3_object_info *objects;
	size_t n_objects;
	char **prefixes;               /* CommonPrefixes */
	size_t n_prefixes;
	struct s3_part_info *parts;
	size_t n_parts;
	struct s3_upload_info *uploads;
	size_t n_uploads;
	bool truncated;
	/* Pass back for the next page: ListObjectsV2's continuation token,
	 * ListParts' part-number marker, ListMultipartUploads' key marker
	 * (with next_upload_id_marker). */
	char *next_marker;
	char *next_upload_id_marker;
};
void s3_list_free(struct s3_list *l);

/* Parse an S3 <Error> body: code and message (truncated to fit). Returns 0
 * when the body is an <Error> document, -EBADMSG otherwise. */
int s3_xml_parse_error(const char *body, size_t len, char *code, size_t codelen,
		       char *message, size_t msglen);
/* Parse a listing (ListBucketResult, ListPartsResult,
 * ListMultipartUploadsResult) into out. -EBADMSG on anything else. */
int s3_xml_parse_list(const char *body, size_t len, struct s3_list *out);
/* Text of the first element named `name` under the root (e.g. "UploadId",
 * "ETag") into a malloc'd string; the root element's name must be `root`.
 * -EBADMSG if the root differs, -ENOENT if the element is absent. */
int s3_xml_get(const char *body, size_t len, const char *root,
	       const char *name, char **value);

/* ------------------------------------------------------------------------
 * Errors and retries
 */
enum s3_retry {
	S3_NO_RETRY = 0,
	S3_RETRY,
};
/* Classify one attempt: HTTP status (0: none, transport failed), the S3
 * error code ("" or NULL: none) and the transport error (-errno from the
 * transfer, 0 if it completed). Retried: 5xx except 501, 429, SlowDown,
 * RequestTimeout, InternalError, ServiceUnavailable, Throttling*,
 * connection refused/reset, timeouts, a truncated body, DNS failure. Never
 * retried: 4xx auth (InvalidAccessKeyId, SignatureDoesNotMatch,
 * AccessDenied, ...), 404 (NoSuchBucket, NoSuchKey, NoSuchUpload), TLS
 * certificate errors, local errors. */
enum s3_retry s3_classify(long http_status, const char *s3_code, int transport_err);
/* -errno that an operation failing with this reports: -EACCES (auth),
 * -ENOENT (404), -ERANGE (416), -EAGAIN (throttled), -EIO (5xx),
 * -EINVAL (other 4xx), or transport_err itself. */
int s3_error_errno(long http_status, const char *s3_code, int transport_err);

/* ------------------------------------------------------------------------
 * Client (s3client.c)
 */
typedef struct s3_client s3_client;

enum {
	S3_EV_READ = 1,
	S3_EV_WRITE = 2,
	S3_EV_ERROR = 4,
};

/* The embedding event loop (ckptd's epoll). Both callbacks are required
 * when ops is given to s3_client_new. */
struct s3_loop_ops {
	/* Watch fd for events (S3_EV_READ|S3_EV_WRITE); events == 0: stop
	 * watching (the fd may be closed right after). Return 0 or -errno. */
	int (*watch)(void *loop, int fd, unsigned events);
	/* Arm the one timer to fire in ms milliseconds (0: as soon as
	 * possible); ms < 0 disarms it. Firing calls s3_client_on_timeout. */
	void (*timer)(void *loop, long ms);
	void *loop;
};

struct s3_client_options {
	unsigned max_inflight;        /* concurrent requests (default 8) */
	unsigned max_attempts;        /* per operation, first included (default 6) */
	unsigned backoff_base_ms;     /* full jitter: sleep rand(0, min(max, base*2^n)) (100) */
	unsigned backoff_max_ms;      /* (20000) */
	uint64_t max_bytes_per_sec;   /* 0: unlimited; else shared by max_inflight transfers */
	long connect_timeout_ms;      /* (10000) */
	long stall_timeout_s;         /* abort when below stall_bytes_per_sec this long (30) */
	long stall_bytes_per_sec;     /* (1) */
	long request_timeout_ms;      /* whole attempt, 0: none (default 0) */
	bool unsigned_payload;        /* PutObject over https: UNSIGNED-PAYLOAD (UploadPart is always signed) */
};

/* Create a client for cfg (copied). With loop == NULL the client uses its
 * own epoll instance and is driven by s3_client_wait. -EINVAL without
 * credentials, with a bad endpoint URL or bad options (err says which). */
int s3_client_new(const struct s3_config *cfg, const struct s3_client_options *opts,
		  const struct s3_loop_ops *loop, s3_client **out,
		  char *err, size_t errlen);
/* Cancels what is in flight (each done callback runs with -ECANCELED) and
 * frees. NULL is fine. */
void s3_client_free(s3_client *c);

/* Embedding: forward the loop's events. Completion callbacks run from
 * inside these calls (never from inside libcurl). A callback may start new
 * operations; it must not call s3_client_wait or s3_client_free. */
void s3_client_on_fd(s3_client *c, int fd, unsigned events);
void s3_client_on_timeout(s3_client *c);
/* Blocking driver: run until no operation is pending (or timeout_ms
 * elapsed, -ETIMEDOUT; timeout_ms < 0: no limit). Only for clients created
 * without loop ops. */
int s3_client_wait(s3_client *c, int timeout_ms);
/* Operations accepted and not yet completed. */
unsigned s3_client_pending(const s3_client *c);

struct s3_stats {
	uint64_t ops_started;
	uint64_t ops_ok;
	uint64_t ops_failed;
	uint64_t attempts;          /* HTTP requests sent, retries included */
	uint64_t retries;
	uint64_t throttled;         /* 429/503 SlowDown and similar answers */
	uint64_t http_4xx;
	uint64_t http_5xx;
	uint64_t transport_errors;  /* connect, reset, timeout */
	uint64_t bytes_sent;        /* request bodies */
	uint64_t bytes_received;    /* response bodies */
	unsigned inflight;          /* now */
	unsigned queued;            /* now: waiting for a slot or a backoff */
};
void s3_client_stats(const s3_client *c, struct s3_stats *out);

/* What a request body comes from. Owned by the caller, who keeps buf / fd
 * valid until the done callback ran. sha256 / md5 may carry digests the
 * caller already has (computed in a worker thread); else the client
 * computes them (reading a file range once, on the calling thread). */
struct s3_source {
	const void *buf;            /* memory, or NULL for fd */
	int fd;
	uint64_t offset;            /* into fd */
	uint64_t len;
	const uint8_t *sha256;      /* 32 bytes or NULL */
	const uint8_t *md5;         /* 16 bytes or NULL */
	/* PUT only: sent as S3_META_INDEX_SHA256 (lower-case hex), or NULL. */
	const char *meta_index_sha256;
};
/* Where a GET body goes: buf (cap bytes) or fd at offset (pwrite). Bytes
 * written to fd are handed to the kernel's writeback as they arrive
 * (sync_file_range, not waited for), so a caller's fsync at the end has
 * little left to write. */
struct s3_sink {
	void *buf;
	int fd;
	uint64_t offset;
	uint64_t cap;               /* a longer body fails the op with -EOVERFLOW */
};

/* Outcome of an operation. Valid only during the callback; copy what you
 * keep. */
struct s3_result {
	int err;                    /* 0 or -errno (see s3_error_errno) */
	long http_status;           /* of the last attempt, 0 if none answered */
	const char *s3_code;        /* "" or e.g. "SignatureDoesNotMatch" */
	const char *s3_message;     /* "" or the server's message */
	/* One line for logs, naming method, bucket/key, status, code and the
	 * attempt count, e.g. "PUT s3://b/k: HTTP 403 SignatureDoesNotMatch:
	 * ... (not retried)". "" on success. */
	const char *error;
	unsigned attempts;
	const char *etag;           /* Put, UploadPart, Head, Complete ("" if none: radosgw's Complete) */
	const char *upload_id;      /* CreateMultipartUpload */
	uint64_t content_length;    /* Head: object size; Get: bytes written */
	const char *meta_index_sha256; /* Head, Get: S3_META_INDEX_SHA256 as stored, "" if none */
	const struct s3_list *list; /* List*: the page */
};
typedef void (*s3_done_fn)(const struct s3_result *res, void *arg);

/* Every operation copies bucket/key/strings it is given and returns 0 once
 * accepted (done runs later, exactly once) or -errno at once without
 * calling done (bad bucket/key, ENOMEM, reading the source failed). */
int s3_put_object(s3_client *c, const char *bucket, const char *key,
		  const struct s3_source *src, s3_done_fn done, void *arg);
/* Range [offset, offset+len); len == 0: to the end of the object. */
int s3_get_object(s3_client *c, const char *bucket, const char *key,
		  uint64_t offset, uint64_t len, const struct s3_sink *dst,
		  s3_done_fn done, void *arg);
int s3_head_object(s3_client *c, const char *bucket, const char *key,
		   s3_done_fn done, void *arg);
int s3_delete_object(s3_client *c, const char *bucket, const char *key,
		     s3_done_fn done, void *arg);

struct s3_list_args {
	const char *prefix;         /* NULL: none */
	const char *delimiter;      /* NULL: none */
	const char *marker;         /* continuation token / key marker / part-number marker */
	const char *upload_id_marker; /* ListMultipartUploads */
	unsigned max_keys;          /* 0: server default (1000) */
};
int s3_list_objects(s3_client *c, const char *bucket, const struct s3_list_args *args,
		    s3_done_fn done, void *arg);

int s3_create_multipart(s3_client *c, const char *bucket, const char *key,
			s3_done_fn done, void *arg);
/* The same, storing meta_index_sha256 (lower-case hex, or NULL: none) as
 * the object's S3_META_INDEX_SHA256 metadata. */
int s3_create_multipart_meta(s3_client *c, const char *bucket, const char *key,
			     const char *meta_index_sha256, s3_done_fn done, void *arg);
/* Content-MD5 always sent; the payload SHA-256 is signed. */
int s3_upload_part(s3_client *c, const char *bucket, const char *key,
		   const char *upload_id, uint32_t part_number,
		   const struct s3_source *src, s3_done_fn done, void *arg);
struct s3_completed_part {
	uint32_t number;
	const char *etag;           /* as UploadPart returned it, quotes included */
};
/* parts ascending by number; copied. A 200 reply carrying an <Error> is a
 * failure (and retried when the code says so). */
int s3_complete_multipart(s3_client *c, const char *bucket, const char *key,
			  const char *upload_id, const struct s3_completed_part *parts,
			  size_t n_parts, s3_done_fn done, void *arg);
int s3_abort_multipart(s3_client *c, const char *bucket, const char *key,
		       const char *upload_id, s3_done_fn done, void *arg);
/* args: marker = part-number marker, max_keys = max-parts. */
int s3_list_parts(s3_client *c, const char *bucket, const char *key,
		  const char *upload_id, const struct s3_list_args *args,
		  s3_done_fn done, void *arg);
int s3_list_multipart_uploads(s3_client *c, const char *bucket,
			      const struct s3_list_args *args,
			      s3_done_fn done, void *arg);

/* ------------------------------------------------------------------------
 * Blocking helpers (s3sync.c), for code on a thread of its own (tools,
 * ckptd's restore workers). err gets one line naming bucket and key on
 * failure.
 *
 * On a client the caller keeps: made by s3_sync_client_new (without loop
 * ops), used by one thread, freed with s3_client_free. Each call starts its
 * operations and runs the client until none is pending, so connections are
 * reused from one call to the next.
 */
/* s3_client_new with max_inflight concurrent requests (0: 1) and the
 * other options at their defaults; err: "S3 client: ..." */
int s3_sync_client_new(const struct s3_config *cfg, unsigned max_inflight, s3_client **c,
			char *err, size_t errlen);
/* HEAD: the object's size. -ENOENT (err: "no such object") when absent. */
int s3_sync_head(s3_client *c, const char *bucket, const char *key, uint64_t *size,
		 char *err, size_t errlen);
/* One page of a listing, valid during the call only. Return 0 for the next
 * page, > 0 to stop after this one (a look, not everything), or -errno to
 * fail the listing with it. */
typedef int (*s3_sync_page_fn)(void *ctx, const struct s3_list *page);
/* Every page of a ListObjectsV2 listing (args as s3_list_objects takes
 * them; args->marker: where to start), in order, each to page(). */
int s3_sync_list_each(s3_client *c, const char *bucket, const struct s3_list_args *args,
		      s3_sync_page_fn page, void *ctx, char *err, size_t errlen);
/* The same over ListMultipartUploads (page->uploads). */
int s3_sync_list_uploads_each(s3_client *c, const char *bucket,
			      const struct s3_list_args *args, s3_sync_page_fn page,
			      void *ctx, char *err, size_t errlen);
/* One GET of a batch: the caller fills key, range and sink (kept valid
 * until s3_sync_get_many returned); the outcome lands in err,
 * content_length and error. */
struct s3_sync_get {
	const char *key;
	uint64_t offset;
	uint64_t len;               /* 0: to the end of the object */
	struct s3_sink sink;
	int err;                    /* 0, -errno, or -ECANCELED: never started */
	uint64_t content_length;    /* bytes written */
	char error[600];            /* "" or s3_result.error */
};
/* Run n GETs at once (the client keeps max_inflight in flight and queues
 * the rest). Returns 0 once all ended, each with its own outcome (look at
 * v[i].err), or -errno when starting one or waiting failed (err says
 * which; what was started has still ended unless waiting timed out). */
int s3_sync_get_many(s3_client *c, const char *bucket, struct s3_sync_get *v, size_t n,
		     char *err, size_t errlen);
/* A whole object that must be exactly size bytes (a listing or HEAD said
 * so) into a new NUL-terminated buffer (*buf: free); -EBADMSG when it is
 * not, -EOVERFLOW when it grew. */
int s3_sync_get_exact(s3_client *c, const char *bucket, const char *key, uint64_t size,
		      char **buf, char *err, size_t errlen);
/* Bytes [offset, offset + len) of an object into buf as `parts` ranged
 * GETs at once (0: 1); each range must come back whole (-EBADMSG, err
 * without the key: "a range of N bytes came back with M"). */
int s3_sync_get_ranges(s3_client *c, const char *bucket, const char *key, uint64_t offset,
		       size_t len, void *buf, unsigned parts, char *err, size_t errlen);

/*
 * One call, one client: each makes a private client from cfg, runs it to
 * completion and frees it; calls on different threads are independent.
 */
/* Every key under prefix with its size, in key order (*keys: free each and
 * the array; *sizes: free). */
int s3_sync_list(const struct s3_config *cfg, const char *bucket, const char *prefix,
		 char ***keys, uint64_t **sizes, size_t *n, char *err, size_t errlen);
/* A whole object of at most max bytes into a new NUL-terminated buffer
 * (*buf: free). -ENOENT when it does not exist. */
int s3_sync_get_small(const struct s3_config *cfg, const char *bucket, const char *key,
		      uint64_t max, char **buf, size_t *len, char *err, size_t errlen);
/* An object that must be `size` bytes into fd from offset 0, with
 * `parallel` ranged GETs in flight; progress (may be NULL) gets the bytes
 * of each range as it lands. */
int s3_sync_get_file(const struct s3_config *cfg, const char *bucket, const char *key,
		     uint64_t size, int fd, unsigned parallel,
		     void (*progress)(void *opaque, uint64_t delta), void *opaque,
		     char *err, size_t errlen);
/* The steps committed on S3 (a MANIFEST.json object) under
 * "<job_key>/step-<N>/", ascending (*steps: free). */
int s3_sync_list_steps(const struct s3_config *cfg, const char *bucket, const char *job_key,
		       uint64_t **steps, size_t *n, char *err, size_t errlen);
/* A compressed shard object (zshard.h) into fd as the raw shard of
 * raw_size bytes: trailer and table first, then batches of frames with
 * `parallel` ranged GETs, each frame checked and decompressed. */
int s3_sync_get_zshard(const struct s3_config *cfg, const char *bucket, const char *key,
		       uint64_t raw_size, int fd, unsigned parallel,
		       void (*progress)(void *opaque, uint64_t delta), void *opaque,
		       char *err, size_t errlen);

#endif
