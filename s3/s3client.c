/* SPDX-License-Identifier: MIT */
/*
 * The S3 client: operations as libcurl multi transfers, driven by the
 * caller's event loop (socket and timer callbacks forwarded through
 * s3_loop_ops) or by s3_client_wait's own epoll loop. Each attempt is
 * signed afresh (x-amz-date moves on), failed attempts are retried with
 * full-jitter exponential backoff when s3_classify says so.
 *
 * Life of an operation: submit -> queue (wait for one of max_inflight
 * slots) -> active (a curl easy handle in the multi) -> done, or -> retry
 * list (backoff) -> queue again. Submission never starts the transfer
 * itself: the timer is armed to fire at once, so done always runs from
 * s3_client_on_fd / s3_client_on_timeout, never from inside the submitting
 * call or from inside libcurl.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "clock.h"
#include "s3.h"
#include "s3internal.h"

#define RESP_MAX ((size_t)1 << 20)          /* error bodies, small replies */
#define RESP_LIST_MAX ((size_t)32 << 20)    /* a listing page (1000 keys of 1 KiB) */
#define HASH_CHUNK ((size_t)1 << 20)
/* A GET into a file starts the kernel's writeback every this many bytes. */
#define SINK_WRITEBACK_BYTES ((uint64_t)8 << 20)
#define MAX_QUERY 8

enum op_kind {
	OP_PUT, OP_GET, OP_HEAD, OP_DELETE, OP_LIST_OBJECTS, OP_CREATE_MPU,
	OP_UPLOAD_PART, OP_COMPLETE_MPU, OP_ABORT_MPU, OP_LIST_PARTS, OP_LIST_UPLOADS,
};

struct s3_op {
	struct s3_client *c;
	struct s3_op *next, *prev;     /* in the queue, retry or active list */
	enum op_kind kind;
	const char *method;
	char *bucket, *key;
	struct s3_target target;
	struct s3_kv query[MAX_QUERY];
	size_t n_query;
	char *query_owned[MAX_QUERY];
	char *url;                     /* target.url + encoded query */

	bool has_body;
	struct s3_source src;
	char *body_owned;              /* Complete's XML */
	char payload_hash[65];
	char md5_b64[32];              /* "" if not sent */
	const char *content_type;

	bool is_get;
	struct s3_sink sink;
	uint64_t range_off, range_len;

	/* per attempt */
	CURL *easy;
	struct curl_slist *hdrs;
	uint64_t sent, received;
	uint64_t writeback_from;       /* sink bytes not yet handed to writeback */
	char *resp;
	size_t resp_len, resp_cap, resp_max;
	bool resp_truncated;
	char etag[256];
	uint64_t content_length;
	char meta_digest_in[72];       /* x-amz-meta-ckpt-index-sha256 of a reply */
	char meta_digest_out[72];      /* the same, sent with a PUT or Create ("" none) */
	int local_err;                 /* set by our callbacks: not retried */

	unsigned attempts;
	int64_t due_ms;
	long status;
	int terr;
	char code[128];
	char message[384];

	s3_done_fn done;
	void *arg;
};

struct op_list {
	struct s3_op *head, *tail;
	unsigned n;
};

struct s3_client {
	struct s3_config cfg;
	struct s3_client_options o;
	struct s3_loop_ops loop;
	bool own_loop;
	int epfd;
	int64_t own_due_ms;
	CURLM *multi;
	struct op_list queue, retry, active;
	unsigned pending;
	int64_t curl_due_ms;
	uint64_t rng;
	bool processing;
	struct s3_stats st;
	char ua[64];
};

static void list_push(struct op_list *l, struct s3_op *op)
{
	op->next = NULL;
	op->prev = l->tail;
	if (l->tail)
		l->tail->next = op;
	else
		l->head = op;
	l->tail = op;
	l->n++;
}

static void list_remove(struct op_list *l, struct s3_op *op)
{
	if (op->prev)
		op->prev->next = op->next;
	else
		l->head = op->next;
	if (op->next)
		op->next->prev = op->prev;
	else
		l->tail = op->prev;
	op->next = op->prev = NULL;
	l->n--;
}

static struct s3_op *list_pop(struct op_list *l)
{
	struct s3_op *op = l->head;
	if (op)
		list_remove(l, op);
	return op;
}

static uint64_t rng_next(struct s3_client *c)
{
	/* xorshift64*: jitter needs spread, not secrecy. */
	c->rng ^= c->rng >> 12;
	c->rng ^= c->rng << 25;
	c->rng ^= c->rng >> 27;
	return c->rng * 2685821657736338717ull;
}

/* ---------------------------------------------------------------- timers */

static void update_timer(struct s3_client *c)
{
	int64_t due = -1, now = ckpt_mono_ms();
	if (c->curl_due_ms >= 0)
		due = c->curl_due_ms;
	if (c->retry.head) {
		for (struct s3_op *op = c->retry.head; op; op = op->next)
			if (due < 0 || op->due_ms < due)
				due = op->due_ms;
	}
	if (c->queue.n && c->active.n < c->o.max_inflight)
		due = now;
	if (c->own_loop) {
		c->own_due_ms = due;
		return;
	}
	c->loop.timer(c->loop.loop, due < 0 ? -1 : (due > now ? (long)(due - now) : 0));
}

static int curl_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
	struct s3_client *c = userp;
	c->curl_due_ms = timeout_ms < 0 ? -1 : ckpt_mono_ms() + timeout_ms;
	/* Within our own processing the timer is recomputed on the way out. */
	if (!c->processing)
		update_timer(c);
	return 0;
}

static int curl_socket_cb(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
	struct s3_client *c = userp;
	unsigned ev = 0;
	if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
		ev |= S3_EV_READ;
	if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
		ev |= S3_EV_WRITE;
	if (!c->own_loop)
		return c->loop.watch(c->loop.loop, s, what == CURL_POLL_REMOVE ? 0 : ev) ? -1 : 0;

	if (what == CURL_POLL_REMOVE) {
		epoll_ctl(c->epfd, EPOLL_CTL_DEL, s, NULL);   /* may already be closed */
		curl_multi_assign(c->multi, s, NULL);
		return 0;
	}
	struct epoll_event e = { 0 };
	e.events = (ev & S3_EV_READ ? EPOLLIN : 0) | (ev & S3_EV_WRITE ? EPOLLOUT : 0);
	e.data.fd = s;
	if (epoll_ctl(c->epfd, socketp ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, s, &e) < 0) {
		if (errno == EEXIST)
			epoll_ctl(c->epfd, EPOLL_CTL_MOD, s, &e);
		else if (errno == ENOENT)
			epoll_ctl(c->epfd, EPOLL_CTL_ADD, s, &e);
		else
			return -1;
	}
	curl_multi_assign(c->multi, s, (void *)1);
	return 0;
}

/* --------------------------------------------------------- curl callbacks */

static size_t read_cb(char *buf, size_t size, size_t nitems, void *userp)
{
	struct s3_op *op = userp;
	size_t want = size * nitems;
	uint64_t left = op->src.len - op->sent;
	if (want > left)
		want = (size_t)left;
	if (!want)
		return 0;
	if (op->src.buf) {
		memcpy(buf, (const char *)op->src.buf + op->sent, want);
	} else {
		ssize_t n = pread(op->src.fd, buf, want, (off_t)(op->src.offset + op->sent));
		if (n <= 0) {
			op->local_err = n < 0 ? -errno : -ENODATA;
			return CURL_READFUNC_ABORT;
		}
		want = (size_t)n;
	}
	op->sent += want;
	op->c->st.bytes_sent += want;
	return want;
}

static int seek_cb(void *userp, curl_off_t offset, int origin)
{
	struct s3_op *op = userp;
	if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > op->src.len)
		return CURL_SEEKFUNC_CANTSEEK;
	op->sent = (uint64_t)offset;
	return CURL_SEEKFUNC_OK;
}

static size_t header_cb(char *buf, size_t size, size_t nitems, void *userp)
{
	struct s3_op *op = userp;
	size_t n = size * nitems;
	if (n >= 5 && !strncmp(buf, "HTTP/", 5)) {
		/* A new response (after 100 Continue): forget the last one's. */
		op->etag[0] = '\0';
		op->content_length = 0;
		op->meta_digest_in[0] = '\0';
		return n;
	}
	const char *colon = memchr(buf, ':', n);
	if (!colon)
		return n;
	size_t nl = (size_t)(colon - buf);
	const char *v = colon + 1, *end = buf + n;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
		end--;
	size_t vl = (size_t)(end - v);
	if (nl == 4 && !strncasecmp(buf, "ETag", 4)) {
		if (vl >= sizeof(op->etag))
			vl = sizeof(op->etag) - 1;
		memcpy(op->etag, v, vl);
		op->etag[vl] = '\0';
	} else if (nl == strlen(S3_META_INDEX_SHA256) &&
		   !strncasecmp(buf, S3_META_INDEX_SHA256, nl)) {
		if (vl >= sizeof(op->meta_digest_in))
			vl = sizeof(op->meta_digest_in) - 1;
		memcpy(op->meta_digest_in, v, vl);
		op->meta_digest_in[vl] = '\0';
	} else if (nl == 14 && !strncasecmp(buf, "Content-Length", 14)) {
		char tmp[32];
		if (vl < sizeof(tmp)) {
			memcpy(tmp, v, vl);
			tmp[vl] = '\0';
			op->content_length = strtoull(tmp, NULL, 10);
		}
	}
	return n;
}

static int resp_append(struct s3_op *op, const char *buf, size_t n)
{
	if (op->resp_len + n > op->resp_max) {
		op->resp_truncated = true;
		n = op->resp_max - op->resp_len;
	}
	if (op->resp_len + n + 1 > op->resp_cap) {
		size_t cap = op->resp_cap ? op->resp_cap : 4096;
		while (cap < op->resp_len + n + 1)
			cap *= 2;
		char *p = realloc(op->resp, cap);
		if (!p)
			return -ENOMEM;
		op->resp = p;
		op->resp_cap = cap;
	}
	memcpy(op->resp + op->resp_len, buf, n);
	op->resp_len += n;
	op->resp[op->resp_len] = '\0';
	return 0;
}

static size_t write_cb(char *buf, size_t size, size_t nitems, void *userp)
{
	struct s3_op *op = userp;
	size_t n = size * nitems;
	long status = 0;
	curl_easy_getinfo(op->easy, CURLINFO_RESPONSE_CODE, &status);
	op->c->st.bytes_received += n;
	if (op->is_get && (status == 200 || status == 206)) {
		if (op->received + n > op->sink.cap) {
			op->local_err = -EOVERFLOW;
			return 0;
		}
		if (op->sink.buf) {
			memcpy((char *)op->sink.buf + op->received, buf, n);
		} else {
			size_t done = 0;
			while (done < n) {
				ssize_t w = pwrite(op->sink.fd, buf + done, n - done,
						   (off_t)(op->sink.offset + op->received + done));
				if (w < 0 && errno == EINTR)
					continue;
				if (w <= 0) {
					op->local_err = w < 0 ? -errno : -EIO;
					return 0;
				}
				done += (size_t)w;
			}
			/* Start writing back what is written, without waiting for it:
			 * dirty pages would otherwise pile up (the kernel starts on its
			 * own only past dirty_background_ratio of RAM, or after 30 s),
			 * and the caller's fsync at the end would then write all of
			 * them while the network idles. */
			uint64_t pending = op->received + n - op->writeback_from;
			if (pending >= SINK_WRITEBACK_BYTES) {
				(void)sync_file_range(op->sink.fd,
						      (off_t)(op->sink.offset + op->writeback_from),
						      (off_t)pending, SYNC_FILE_RANGE_WRITE);
				op->writeback_from += pending;
			}
		}
		op->received += n;
		return n;
	}
	if (resp_append(op, buf, n)) {
		op->local_err = -ENOMEM;
		return 0;
	}
	if (op->resp_truncated && op->resp_max == RESP_LIST_MAX && status < 300) {
		op->local_err = -EOVERFLOW;
		return 0;
	}
	return n;
}

/* --------------------------------------------------------------- attempts */

/* "Name: value" (value NULL: "Name:", which removes a header curl would
 * add on its own). */
static int add_header(struct curl_slist **l, const char *name, const char *value)
{
	char line[2048];
	if ((size_t)snprintf(line, sizeof(line), "%s:%s%s", name, value ? " " : "",
			     value ? value : "") >= sizeof(line))
		return -E2BIG;
	struct curl_slist *n = curl_slist_append(*l, line);
	if (!n)
		return -ENOMEM;
	*l = n;
	return 0;
}

static void attempt_reset(struct s3_op *op)
{
	if (op->easy) {
		curl_multi_remove_handle(op->c->multi, op->easy);
		curl_easy_cleanup(op->easy);
		op->easy = NULL;
	}
	curl_slist_free_all(op->hdrs);
	op->hdrs = NULL;
	op->sent = op->received = op->writeback_from = 0;
	op->resp_len = 0;
	op->resp_truncated = false;
	op->etag[0] = '\0';
	op->content_length = 0;
	op->meta_digest_in[0] = '\0';
	op->local_err = 0;
	op->status = 0;
	op->terr = 0;
	op->code[0] = op->message[0] = '\0';
}

static int attempt_start(struct s3_op *op)
{
	struct s3_client *c = op->c;
	const struct s3_config *cfg = &c->cfg;
	struct s3_kv h[9];
	size_t nh = 0;
	char date[17], range[64] = "";
	struct s3_sigv4_output sig = { 0 };
	int ret;

	attempt_reset(op);
	s3_amz_date((int64_t)time(NULL), date);
	h[nh++] = (struct s3_kv){ "host", op->target.host };
	h[nh++] = (struct s3_kv){ "x-amz-content-sha256", op->payload_hash };
	h[nh++] = (struct s3_kv){ "x-amz-date", date };
	if (cfg->session_token)
		h[nh++] = (struct s3_kv){ "x-amz-security-token", cfg->session_token };
	if (op->md5_b64[0])
		h[nh++] = (struct s3_kv){ "content-md5", op->md5_b64 };
	if (op->is_get && (op->range_off || op->range_len)) {
		if (op->range_len)
			snprintf(range, sizeof(range), "bytes=%" PRIu64 "-%" PRIu64,
				 op->range_off, op->range_off + op->range_len - 1);
		else
			snprintf(range, sizeof(range), "bytes=%" PRIu64 "-", op->range_off);
		h[nh++] = (struct s3_kv){ "range", range };
	}
	if (op->meta_digest_out[0])
		h[nh++] = (struct s3_kv){ S3_META_INDEX_SHA256, op->meta_digest_out };
	struct s3_sigv4_input in = {
		.method = op->method,
		.path = op->target.path,
		.query = op->query,
		.n_query = op->n_query,
		.headers = h,
		.n_headers = nh,
		.payload_hash = op->payload_hash,
		.amz_date = date,
		.region = cfg->region,
		.service = "s3",
		.access_key_id = cfg->access_key_id,
		.secret_access_key = cfg->secret_access_key,
	};
	ret = s3_sigv4_sign(&in, &sig);
	if (ret)
		return ret;

	ret = -ENOMEM;
	for (size_t i = 0; i < nh; i++)
		if (add_header(&op->hdrs, h[i].name, h[i].value))
			goto out;
	if (add_header(&op->hdrs, "Authorization", sig.authorization) ||
	    /* No "Expect: 100-continue": servers that never answer it would
	     * cost a second per part. */
	    add_header(&op->hdrs, "Expect", NULL) ||
	    ((op->has_body || !strcmp(op->method, "POST")) &&
	     add_header(&op->hdrs, "Content-Type",
			op->content_type ? op->content_type : "application/octet-stream")))
		goto out;

	CURL *e = curl_easy_init();
	if (!e)
		goto out;
	op->easy = e;
	curl_easy_setopt(e, CURLOPT_PRIVATE, op);
	curl_easy_setopt(e, CURLOPT_URL, op->url);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, op->hdrs);
	curl_easy_setopt(e, CURLOPT_USERAGENT, c->ua);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, c->o.connect_timeout_ms);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, c->o.stall_bytes_per_sec);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, c->o.stall_timeout_s);
	if (c->o.request_timeout_ms)
		curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, c->o.request_timeout_ms);
	if (c->o.max_bytes_per_sec) {
		curl_off_t share = (curl_off_t)(c->o.max_bytes_per_sec / c->o.max_inflight);
		if (share < 1)
			share = 1;
		curl_easy_setopt(e, CURLOPT_MAX_SEND_SPEED_LARGE, share);
		curl_easy_setopt(e, CURLOPT_MAX_RECV_SPEED_LARGE, share);
	}
	curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, cfg->verify_tls ? 1L : 0L);
	curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, cfg->verify_tls ? 2L : 0L);
	if (cfg->ca_bundle)
		curl_easy_setopt(e, CURLOPT_CAINFO, cfg->ca_bundle);
	curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L * 1024);
	curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, 1024L * 1024);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, op);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, op);

	if (!strcmp(op->method, "HEAD")) {
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
	} else if (op->has_body || !strcmp(op->method, "POST")) {
		/* PUT and POST both go out as uploads with a known length. */
		curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE,
				 (curl_off_t)(op->has_body ? op->src.len : 0));
		curl_easy_setopt(e, CURLOPT_READFUNCTION, read_cb);
		curl_easy_setopt(e, CURLOPT_READDATA, op);
		curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, seek_cb);
		curl_easy_setopt(e, CURLOPT_SEEKDATA, op);
		if (strcmp(op->method, "PUT"))
			curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, op->method);
	} else if (strcmp(op->method, "GET")) {
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, op->method);
	}

	op->attempts++;
	c->st.attempts++;
	if (op->attempts > 1)
		c->st.retries++;
	list_push(&c->active, op);
	if (curl_multi_add_handle(c->multi, e) != CURLM_OK) {
		list_remove(&c->active, op);
		goto out;
	}
	ret = 0;
out:
	s3_sigv4_output_free(&sig);
	return ret;
}

static int curl_errno(CURLcode r)
{
	switch (r) {
	case CURLE_COULDNT_CONNECT:
		return -ECONNREFUSED;
	case CURLE_OPERATION_TIMEDOUT:
		return -ETIMEDOUT;
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
		return -ECONNRESET;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return -EHOSTUNREACH;
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CONNECT_ERROR:
		return -EPROTO;
	case CURLE_OUT_OF_MEMORY:
		return -ENOMEM;
	default:
		return -EIO;
	}
}

static const char *op_name(enum op_kind k)
{
	static const char *const names[] = {
		[OP_PUT] = "PutObject", [OP_GET] = "GetObject", [OP_HEAD] = "HeadObject",
		[OP_DELETE] = "DeleteObject", [OP_LIST_OBJECTS] = "ListObjectsV2",
		[OP_CREATE_MPU] = "CreateMultipartUpload", [OP_UPLOAD_PART] = "UploadPart",
		[OP_COMPLETE_MPU] = "CompleteMultipartUpload",
		[OP_ABORT_MPU] = "AbortMultipartUpload", [OP_LIST_PARTS] = "ListParts",
		[OP_LIST_UPLOADS] = "ListMultipartUploads",
	};
	return names[k];
}

static void op_free(struct s3_op *op)
{
	if (!op)
		return;
	attempt_reset(op);
	free(op->resp);
	free(op->bucket);
	free(op->key);
	s3_target_free(&op->target);
	for (size_t i = 0; i < MAX_QUERY; i++)
		free(op->query_owned[i]);
	free(op->url);
	free(op->body_owned);
	free(op);
}

/* Run the callback and free the op. */
static void op_complete(struct s3_op *op, int err)
{
	struct s3_client *c = op->c;
	struct s3_result r = { 0 };
	struct s3_list list = { 0 };
	char *upload_id = NULL, *xml_etag = NULL;
	char line[1024] = "";

	if (!err && op->kind == OP_CREATE_MPU) {
		err = s3_xml_get(op->resp, op->resp_len, "InitiateMultipartUploadResult",
				 "UploadId", &upload_id);
		if (!err && !*upload_id)
			err = -EBADMSG;
		if (err)
			snprintf(op->message, sizeof(op->message), "reply without an UploadId");
	} else if (!err && op->kind == OP_COMPLETE_MPU) {
		int r2 = s3_xml_get(op->resp, op->resp_len, "CompleteMultipartUploadResult",
				    "ETag", &xml_etag);
		if (r2 == -ENOENT)
			r2 = 0;   /* radosgw may leave it out or empty */
		err = r2;
		if (err)
			snprintf(op->message, sizeof(op->message), "unexpected reply body");
	} else if (!err && (op->kind == OP_LIST_OBJECTS || op->kind == OP_LIST_PARTS ||
			    op->kind == OP_LIST_UPLOADS)) {
		err = s3_xml_parse_list(op->resp, op->resp_len, &list);
		if (err)
			snprintf(op->message, sizeof(op->message), "unparsable listing");
	}

	if (err) {
		const char *target_key = op->key ? op->key : "";
		int n = snprintf(line, sizeof(line), "%s %s s3://%s/%s: ", op_name(op->kind),
				 op->method, op->bucket, target_key);
		if (n < 0)
			n = 0;
		size_t off = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
		if (op->status)
			off += (size_t)snprintf(line + off, sizeof(line) - off, "HTTP %ld%s%s%s%s",
						op->status, op->code[0] ? " " : "", op->code,
						op->message[0] ? ": " : "", op->message);
		else if (op->message[0])
			off += (size_t)snprintf(line + off, sizeof(line) - off, "%s", op->message);
		else
			off += (size_t)snprintf(line + off, sizeof(line) - off, "%s", strerror(-err));
		if (off < sizeof(line)) {
			if (err == -EACCES)
				snprintf(line + off, sizeof(line) - off,
					 " (not retried; credentials from %s, access key %.4s...)",
					 c->cfg.credentials_source, c->cfg.access_key_id);
			else if (op->attempts > 1)
				snprintf(line + off, sizeof(line) - off, " (after %u attempts)",
					 op->attempts);
			else
				snprintf(line + off, sizeof(line) - off, " (not retried)");
		}
		c->st.ops_failed++;
	} else {
		c->st.ops_ok++;
	}

	r.err = err;
	r.http_status = op->status;
	r.s3_code = op->code;
	r.s3_message = op->message;
	r.error = line;
	r.attempts = op->attempts;
	r.etag = xml_etag ? xml_etag : op->etag;
	r.upload_id = upload_id ? upload_id : "";
	r.content_length = op->is_get ? op->received : op->content_length;
	r.meta_index_sha256 = op->meta_digest_in;
	r.list = !err && (op->kind == OP_LIST_OBJECTS || op->kind == OP_LIST_PARTS ||
			  op->kind == OP_LIST_UPLOADS) ? &list : NULL;

	c->pending--;
	/* r points into op: free it only after the callback. */
	if (op->done)
		op->done(&r, op->arg);
	op_free(op);
	s3_list_free(&list);
	free(upload_id);
	free(xml_etag);
}

/* An attempt ended (curl finished it, or it could not start). */
static void attempt_finish(struct s3_op *op, CURLcode cr)
{
	struct s3_client *c = op->c;
	int err = 0;

	if (op->easy) {
		list_remove(&c->active, op);
		curl_easy_getinfo(op->easy, CURLINFO_RESPONSE_CODE, &op->status);
		curl_multi_remove_handle(c->multi, op->easy);
		curl_easy_cleanup(op->easy);
		op->easy = NULL;
	}
	if (op->local_err) {
		err = op->local_err;
		snprintf(op->message, sizeof(op->message), "%s",
			 err == -EOVERFLOW ? "reply larger than the buffer given" : strerror(-err));
		op_complete(op, err);
		return;
	}
	if (cr != CURLE_OK) {
		op->terr = curl_errno(cr);
		op->status = 0;
		c->st.transport_errors++;
		snprintf(op->message, sizeof(op->message), "%s", curl_easy_strerror(cr));
	} else if (op->status >= 300 || op->status < 100) {
		if (s3_xml_parse_error(op->resp, op->resp_len, op->code, sizeof(op->code),
				       op->message, sizeof(op->message))) {
			/* HEAD replies and some proxies carry no XML. */
			const char *code = op->status == 404 ? "NotFound" :
					   op->status == 403 ? "Forbidden" : "";
			snprintf(op->code, sizeof(op->code), "%s", code);
		}
	} else if (op->kind == OP_COMPLETE_MPU &&
		   !s3_xml_parse_error(op->resp, op->resp_len, op->code, sizeof(op->code),
				       op->message, sizeof(op->message))) {
		/* S3 may answer 200 and put an error in the body. */
		if (!op->code[0])
			snprintf(op->code, sizeof(op->code), "InternalError");
	} else if (op->is_get && (op->range_off || op->range_len) && op->status != 206) {
		snprintf(op->message, sizeof(op->message),
			 "asked for a range, got HTTP %ld", op->status);
		op_complete(op, -EPROTO);
		return;
	} else {
		op_complete(op, 0);
		return;
	}

	if (op->status >= 500)
		c->st.http_5xx++;
	else if (op->status >= 400)
		c->st.http_4xx++;
	bool throttled = op->status == 429 || !strcmp(op->code, "SlowDown") ||
			 s3_error_errno(op->status, op->code, 0) == -EAGAIN;
	if (throttled)
		c->st.throttled++;
	err = s3_error_errno(op->status, op->code, op->terr);
	if (!err)
		err = -EIO;
	if (s3_classify(op->status, op->code, op->terr) == S3_RETRY &&
	    op->attempts < c->o.max_attempts) {
		uint64_t cap = (uint64_t)c->o.backoff_base_ms << (op->attempts - 1 < 20 ? op->attempts - 1 : 20);
		if (cap > c->o.backoff_max_ms)
			cap = c->o.backoff_max_ms;
		op->due_ms = ckpt_mono_ms() + (int64_t)(cap ? rng_next(c) % (cap + 1) : 0);
		list_push(&c->retry, op);
		return;
	}
	op_complete(op, err);
}

static void pump(struct s3_client *c)
{
	int64_t now = ckpt_mono_ms();
	for (struct s3_op *op = c->retry.head, *next; op; op = next) {
		next = op->next;
		if (op->due_ms <= now) {
			list_remove(&c->retry, op);
			list_push(&c->queue, op);
		}
	}
	while (c->queue.n && c->active.n < c->o.max_inflight) {
		struct s3_op *op = list_pop(&c->queue);
		int r = attempt_start(op);
		if (r) {
			snprintf(op->message, sizeof(op->message), "cannot start request: %s",
				 strerror(-r));
			attempt_reset(op);
			op_complete(op, r);
		}
	}
}

static void process_done(struct s3_client *c)
{
	CURLMsg *m;
	int left;
	while ((m = curl_multi_info_read(c->multi, &left))) {
		if (m->msg != CURLMSG_DONE)
			continue;
		char *priv = NULL;
		CURLcode cr = m->data.result;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
		if (priv)
			attempt_finish((struct s3_op *)(void *)priv, cr);
	}
}

static void after_events(struct s3_client *c)
{
	process_done(c);
	pump(c);
	c->processing = false;
	update_timer(c);
}

void s3_client_on_fd(s3_client *c, int fd, unsigned events)
{
	int mask = 0, running;
	if (!c)
		return;
	if (events & S3_EV_READ)
		mask |= CURL_CSELECT_IN;
	if (events & S3_EV_WRITE)
		mask |= CURL_CSELECT_OUT;
	if (events & S3_EV_ERROR)
		mask |= CURL_CSELECT_ERR;
	c->processing = true;
	curl_multi_socket_action(c->multi, fd, mask, &running);
	after_events(c);
}

void s3_client_on_timeout(s3_client *c)
{
	int running;
	if (!c)
		return;
	c->processing = true;
	if (c->curl_due_ms >= 0 && c->curl_due_ms <= ckpt_mono_ms()) {
		c->curl_due_ms = -1;
		curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	}
	after_events(c);
}

int s3_client_wait(s3_client *c, int timeout_ms)
{
	if (!c || !c->own_loop)
		return -EINVAL;
	int64_t deadline = timeout_ms < 0 ? -1 : ckpt_mono_ms() + timeout_ms;
	while (c->pending) {
		int64_t now = ckpt_mono_ms();
		if (deadline >= 0 && now >= deadline)
			return -ETIMEDOUT;
		int64_t t = c->own_due_ms < 0 ? 1000 : (c->own_due_ms > now ? c->own_due_ms - now : 0);
		if (deadline >= 0 && deadline - now < t)
			t = deadline - now;
		struct epoll_event ev[16];
		int n = epoll_wait(c->epfd, ev, 16, (int)t);
		if (n < 0 && errno != EINTR)
			return -errno;
		for (int i = 0; i < n; i++) {
			unsigned e = 0;
			if (ev[i].events & EPOLLIN)
				e |= S3_EV_READ;
			if (ev[i].events & EPOLLOUT)
				e |= S3_EV_WRITE;
			if (ev[i].events & (EPOLLERR | EPOLLHUP))
				e |= S3_EV_ERROR;
			s3_client_on_fd(c, ev[i].data.fd, e);
		}
		if (c->own_due_ms >= 0 && c->own_due_ms <= ckpt_mono_ms())
			s3_client_on_timeout(c);
	}
	return 0;
}

unsigned s3_client_pending(const s3_client *c)
{
	return c ? c->pending : 0;
}

void s3_client_stats(const s3_client *c, struct s3_stats *out)
{
	*out = c->st;
	out->inflight = c->active.n;
	out->queued = c->queue.n + c->retry.n;
}

/* ------------------------------------------------------------- lifecycle */

static int copy_config(const struct s3_config *in, struct s3_config *out)
{
	*out = *in;
	out->profile = in->profile ? strdup(in->profile) : NULL;
	out->access_key_id = in->access_key_id ? strdup(in->access_key_id) : NULL;
	out->secret_access_key = in->secret_access_key ? strdup(in->secret_access_key) : NULL;
	out->session_token = in->session_token ? strdup(in->session_token) : NULL;
	out->region = strdup(in->region ? in->region : "us-east-1");
	out->endpoint_url = in->endpoint_url ? strdup(in->endpoint_url) : NULL;
	out->ca_bundle = in->ca_bundle ? strdup(in->ca_bundle) : NULL;
	if ((in->profile && !out->profile) || (in->access_key_id && !out->access_key_id) ||
	    (in->secret_access_key && !out->secret_access_key) ||
	    (in->session_token && !out->session_token) || !out->region ||
	    (in->endpoint_url && !out->endpoint_url) || (in->ca_bundle && !out->ca_bundle)) {
		s3_config_free(out);
		return -ENOMEM;
	}
	return 0;
}

int s3_client_new(const struct s3_config *cfg, const struct s3_client_options *opts,
		  const struct s3_loop_ops *loop, s3_client **out, char *err, size_t errlen)
{
	*out = NULL;
	if (!cfg->access_key_id || !cfg->secret_access_key) {
		snprintf(err, errlen, "no AWS credentials (set AWS_ACCESS_KEY_ID and "
			 "AWS_SECRET_ACCESS_KEY, a profile, or the explicit settings)");
		return -EINVAL;
	}
	struct s3_endpoint ep;
	if (cfg->endpoint_url && s3_endpoint_parse(cfg->endpoint_url, &ep)) {
		snprintf(err, errlen, "bad S3 endpoint URL '%.200s' (want http[s]://host[:port])",
			 cfg->endpoint_url);
		return -EINVAL;
	}
	if (loop && (!loop->watch || !loop->timer)) {
		snprintf(err, errlen, "loop ops need both watch and timer");
		return -EINVAL;
	}
	static CURLcode global = CURLE_FAILED_INIT;
	if (global != CURLE_OK)
		global = curl_global_init(CURL_GLOBAL_DEFAULT);
	if (global != CURLE_OK) {
		snprintf(err, errlen, "curl_global_init failed");
		return -EIO;
	}

	struct s3_client *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->epfd = -1;
	if (copy_config(cfg, &c->cfg)) {
		free(c);
		return -ENOMEM;
	}
	if (opts)
		c->o = *opts;
	if (!c->o.max_inflight)
		c->o.max_inflight = 8;
	if (!c->o.max_attempts)
		c->o.max_attempts = 6;
	if (!c->o.backoff_base_ms)
		c->o.backoff_base_ms = 100;
	if (!c->o.backoff_max_ms)
		c->o.backoff_max_ms = 20000;
	if (!c->o.connect_timeout_ms)
		c->o.connect_timeout_ms = 10000;
	if (!c->o.stall_timeout_s)
		c->o.stall_timeout_s = 30;
	if (!c->o.stall_bytes_per_sec)
		c->o.stall_bytes_per_sec = 1;
	c->curl_due_ms = -1;
	c->own_due_ms = -1;
	c->rng = (uint64_t)ckpt_mono_ms() * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() ^ (uintptr_t)c;
	if (!c->rng)
		c->rng = 1;
	snprintf(c->ua, sizeof(c->ua), "ckpt-s3/1 %s", curl_version_info(CURLVERSION_NOW)->version);

	if (loop) {
		c->loop = *loop;
	} else {
		c->own_loop = true;
		c->epfd = epoll_create1(EPOLL_CLOEXEC);
		if (c->epfd < 0) {
			int e = -errno;
			s3_client_free(c);
			return e;
		}
	}
	c->multi = curl_multi_init();
	if (!c->multi) {
		s3_client_free(c);
		return -ENOMEM;
	}
	curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, curl_socket_cb);
	curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
	curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, curl_timer_cb);
	curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
	curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)c->o.max_inflight);
	curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, (long)c->o.max_inflight * 2);
	*out = c;
	return 0;
}

void s3_client_free(s3_client *c)
{
	if (!c)
		return;
	struct op_list *lists[] = { &c->active, &c->queue, &c->retry };
	for (size_t i = 0; i < 3; i++) {
		struct s3_op *op;
		while ((op = list_pop(lists[i]))) {
			snprintf(op->message, sizeof(op->message), "client shut down");
			op->status = 0;
			op_complete(op, -ECANCELED);
		}
	}
	if (c->multi)
		curl_multi_cleanup(c->multi);
	if (c->epfd >= 0)
		close(c->epfd);
	s3_config_free(&c->cfg);
	free(c);
}

/* ----------------------------------------------------------- operations */

static int op_query(struct s3_op *op, const char *name, const char *value)
{
	if (op->n_query == MAX_QUERY)
		return -E2BIG;
	char *v = strdup(value ? value : "");
	if (!v)
		return -ENOMEM;
	op->query_owned[op->n_query] = v;
	op->query[op->n_query++] = (struct s3_kv){ name, v };
	return 0;
}

static int op_query_u(struct s3_op *op, const char *name, uint64_t v)
{
	char buf[24];
	snprintf(buf, sizeof(buf), "%" PRIu64, v);
	return op_query(op, name, buf);
}

static struct s3_op *op_new(s3_client *c, enum op_kind kind, const char *method,
			    const char *bucket, const char *key, s3_done_fn done,
			    void *arg, int *err)
{
	*err = -EINVAL;
	if (!c || !bucket || s3_bucket_check(bucket))
		return NULL;
	if (key && s3_key_check(key))
		return NULL;
	*err = -ENOMEM;
	struct s3_op *op = calloc(1, sizeof(*op));
	if (!op)
		return NULL;
	op->c = c;
	op->kind = kind;
	op->method = method;
	op->done = done;
	op->arg = arg;
	op->resp_max = RESP_MAX;
	op->bucket = strdup(bucket);
	op->key = key ? strdup(key) : NULL;
	if (!op->bucket || (key && !op->key)) {
		op_free(op);
		return NULL;
	}
	/* The payload of a request without a body. */
	snprintf(op->payload_hash, sizeof(op->payload_hash),
		 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	*err = 0;
	return op;
}

/* Finish building (target URL with query) and queue. */
static int op_submit(struct s3_op *op)
{
	struct s3_client *c = op->c;
	int r = s3_target_make(&c->cfg, op->bucket, op->key, &op->target);
	if (r)
		goto fail;
	size_t len = strlen(op->target.url) + 2;
	char *qs[MAX_QUERY][2] = { { 0 } };
	r = -ENOMEM;
	for (size_t i = 0; i < op->n_query; i++) {
		qs[i][0] = s3_uri_encode(op->query[i].name, strlen(op->query[i].name), false);
		qs[i][1] = s3_uri_encode(op->query[i].value, strlen(op->query[i].value), false);
		if (!qs[i][0] || !qs[i][1])
			goto free_qs;
		len += strlen(qs[i][0]) + strlen(qs[i][1]) + 2;
	}
	op->url = malloc(len);
	if (!op->url)
		goto free_qs;
	char *p = op->url;
	p += sprintf(p, "%s", op->target.url);
	for (size_t i = 0; i < op->n_query; i++)
		p += sprintf(p, "%c%s=%s", i ? '&' : '?', qs[i][0], qs[i][1]);
	r = 0;
free_qs:
	for (size_t i = 0; i < MAX_QUERY; i++) {
		free(qs[i][0]);
		free(qs[i][1]);
	}
	if (r)
		goto fail;
	c->pending++;
	c->st.ops_started++;
	list_push(&c->queue, op);
	update_timer(c);
	return 0;
fail:
	op->done = NULL;
	op_free(op);
	return r;
}

/* SHA-256 and MD5 of the body, unless the caller gave them. */
static int op_hash_body(struct s3_op *op, bool want_sha, bool want_md5)
{
	const struct s3_source *s = &op->src;
	uint8_t sha[32], md5[16];
	bool need_sha = want_sha && !s->sha256, need_md5 = want_md5 && !s->md5;
	int ret = 0;
	if (need_sha || need_md5) {
		EVP_MD_CTX *cs = EVP_MD_CTX_new(), *cm = EVP_MD_CTX_new();
		char *buf = s->buf ? NULL : malloc(HASH_CHUNK);
		if (!cs || !cm || (!s->buf && !buf)) {
			ret = -ENOMEM;
			goto done;
		}
		EVP_DigestInit_ex(cs, EVP_sha256(), NULL);
		EVP_DigestInit_ex(cm, EVP_md5(), NULL);
		for (uint64_t off = 0; off < s->len;) {
			size_t n = s->len - off > HASH_CHUNK ? HASH_CHUNK : (size_t)(s->len - off);
			const void *chunk;
			if (s->buf) {
				chunk = (const char *)s->buf + off;
			} else {
				ssize_t got = pread(s->fd, buf, n, (off_t)(s->offset + off));
				if (got < 0 && errno == EINTR)
					continue;
				if (got <= 0) {
					ret = got < 0 ? -errno : -ENODATA;
					goto done;
				}
				n = (size_t)got;
				chunk = buf;
			}
			if (need_sha)
				EVP_DigestUpdate(cs, chunk, n);
			if (need_md5)
				EVP_DigestUpdate(cm, chunk, n);
			off += n;
		}
		if (need_sha)
			EVP_DigestFinal_ex(cs, sha, NULL);
		if (need_md5)
			EVP_DigestFinal_ex(cm, md5, NULL);
done:
		EVP_MD_CTX_free(cs);
		EVP_MD_CTX_free(cm);
		free(buf);
		if (ret)
			return ret;
	}
	if (want_sha) {
		const uint8_t *d = s->sha256 ? s->sha256 : sha;
		for (int i = 0; i < 32; i++)
			snprintf(op->payload_hash + 2 * i, 3, "%02x", d[i]);
	} else {
		snprintf(op->payload_hash, sizeof(op->payload_hash), "UNSIGNED-PAYLOAD");
	}
	if (want_md5)
		EVP_EncodeBlock((unsigned char *)op->md5_b64, s->md5 ? s->md5 : md5, 16);
	return 0;
}

static int op_set_body(struct s3_op *op, const struct s3_source *src, bool want_sha,
		       bool want_md5)
{
	if (!src || (!src->buf && src->fd < 0) || src->len > S3_PART_MAX)
		return -EINVAL;
	op->has_body = true;
	op->src = *src;
	return op_hash_body(op, want_sha, want_md5);
}

#define OP_BEGIN(kind, method, key)                                           \
	int r;                                                                \
	struct s3_op *op = op_new(c, kind, method, bucket, key, done, arg, &r); \
	if (!op)                                                              \
		return r

#define OP_TRY(expr)                                                          \
	do {                                                                  \
		r = (expr);                                                   \
		if (r) {                                                      \
			op->done = NULL;                                      \
			op_free(op);                                          \
			return r;                                             \
		}                                                             \
	} while (0)

/* A metadata value goes into a signed header: lower-case hex only. */
static int meta_set(struct s3_op *op, const char *hex)
{
	if (!hex || !*hex)
		return 0;
	size_t n = strlen(hex);
	if (n >= sizeof(op->meta_digest_out) || strspn(hex, "0123456789abcdef") != n)
		return -EINVAL;
	memcpy(op->meta_digest_out, hex, n + 1);
	return 0;
}

int s3_put_object(s3_client *c, const char *bucket, const char *key,
		  const struct s3_source *src, s3_done_fn done, void *arg)
{
	OP_BEGIN(OP_PUT, "PUT", key);
	OP_TRY(!key || !src ? -EINVAL : 0);
	bool https = c->cfg.endpoint_url ? !strncasecmp(c->cfg.endpoint_url, "https:", 6) : true;
	bool sign = !(c->o.unsigned_payload && https);
	OP_TRY(op_set_body(op, src, sign, sign || src->md5));
	OP_TRY(meta_set(op, src->meta_index_sha256));
	return op_submit(op);
}

int s3_get_object(s3_client *c, const char *bucket, const char *key, uint64_t offset,
		  uint64_t len, const struct s3_sink *dst, s3_done_fn done, void *arg)
{
	OP_BEGIN(OP_GET, "GET", key);
	OP_TRY(!key || !dst || (!dst->buf && dst->fd < 0) ? -EINVAL : 0);
	op->is_get = true;
	op->sink = *dst;
	op->range_off = offset;
	op->range_len = len;
	return op_submit(op);
}

int s3_head_object(s3_client *c, const char *bucket, const char *key, s3_done_fn done,
		   void *arg)
{
	OP_BEGIN(OP_HEAD, "HEAD", key);
	OP_TRY(!key ? -EINVAL : 0);
	return op_submit(op);
}

int s3_delete_object(s3_client *c, const char *bucket, const char *key, s3_done_fn done,
		     void *arg)
{
	OP_BEGIN(OP_DELETE, "DELETE", key);
	OP_TRY(!key ? -EINVAL : 0);
	return op_submit(op);
}

static int check_list_arg(const char *s)
{
	/* Prefix and markers may be "" but otherwise follow key rules,
	 * except that "dir/" style trailing slashes are fine. */
	if (!s || !*s)
		return 0;
	return strlen(s) > S3_KEY_MAX || strpbrk(s, "\r\n") ? -EINVAL : 0;
}

int s3_list_objects(s3_client *c, const char *bucket, const struct s3_list_args *a,
		    s3_done_fn done, void *arg)
{
	static const struct s3_list_args none;
	if (!a)
		a = &none;
	OP_BEGIN(OP_LIST_OBJECTS, "GET", NULL);
	op->resp_max = RESP_LIST_MAX;
	OP_TRY(check_list_arg(a->prefix) || check_list_arg(a->delimiter) ||
	       check_list_arg(a->marker) ? -EINVAL : 0);
	OP_TRY(op_query(op, "list-type", "2"));
	if (a->prefix && *a->prefix)
		OP_TRY(op_query(op, "prefix", a->prefix));
	if (a->delimiter && *a->delimiter)
		OP_TRY(op_query(op, "delimiter", a->delimiter));
	if (a->marker && *a->marker)
		OP_TRY(op_query(op, "continuation-token", a->marker));
	if (a->max_keys)
		OP_TRY(op_query_u(op, "max-keys", a->max_keys));
	return op_submit(op);
}

int s3_create_multipart(s3_client *c, const char *bucket, const char *key,
			s3_done_fn done, void *arg)
{
	return s3_create_multipart_meta(c, bucket, key, NULL, done, arg);
}

int s3_create_multipart_meta(s3_client *c, const char *bucket, const char *key,
			     const char *meta_index_sha256, s3_done_fn done, void *arg)
{
	OP_BEGIN(OP_CREATE_MPU, "POST", key);
	OP_TRY(!key ? -EINVAL : 0);
	OP_TRY(op_query(op, "uploads", ""));
	OP_TRY(meta_set(op, meta_index_sha256));
	return op_submit(op);
}

static int check_upload_id(const char *id)
{
	if (!id || !*id || strlen(id) > 1024)
		return -EINVAL;
	for (const char *p = id; *p; p++)
		if ((unsigned char)*p < 0x21 || *p == 0x7f)
			return -EINVAL;
	return 0;
}

int s3_upload_part(s3_client *c, const char *bucket, const char *key,
		   const char *upload_id, uint32_t part_number, const struct s3_source *src,
		   s3_done_fn done, void *arg)
{
	OP_BEGIN(OP_UPLOAD_PART, "PUT", key);
	OP_TRY(!key || check_upload_id(upload_id) || part_number < 1 ||
	       part_number > S3_PARTS_MAX ? -EINVAL : 0);
	OP_TRY(op_query_u(op, "partNumber", part_number));
	OP_TRY(op_query(op, "uploadId", upload_id));
	OP_TRY(op_set_body(op, src, true, true));
	return op_submit(op);
}

static int xml_escaped(char **p, size_t *left, const char *s)
{
	for (; *s; s++) {
		const char *rep = NULL;
		switch (*s) {
		case '&': rep = "&amp;"; break;
		case '<': rep = "&lt;"; break;
		case '>': rep = "&gt;"; break;
		case '"': rep = "&quot;"; break;
		case '\'': rep = "&apos;"; break;
		}
		size_t n = rep ? strlen(rep) : 1;
		if (n >= *left)
			return -E2BIG;
		memcpy(*p, rep ? rep : s, n);
		*p += n;
		*left -= n;
	}
	**p = '\0';
	return 0;
}

int s3_complete_multipart(s3_client *c, const char *bucket, const char *key,
			  const char *upload_id, const struct s3_completed_part *parts,
			  size_t n_parts, s3_done_fn done, void *arg)
{
	OP_BEGIN(OP_COMPLETE_MPU, "POST", key);
	OP_TRY(!key || check_upload_id(upload_id) || !parts || !n_parts ||
	       n_parts > S3_PARTS_MAX ? -EINVAL : 0);
	size_t cap = 128;
	for (size_t i = 0; i < n_parts; i++) {
		if (!parts[i].etag || strlen(parts[i].etag) > 256 || parts[i].number < 1 ||
		    parts[i].number > S3_PARTS_MAX || (i && parts[i].number <= parts[i - 1].number))
			OP_TRY(-EINVAL);
		cap += 80 + 6 * strlen(parts[i].etag);
	}
	op->body_owned = malloc(cap);
	OP_TRY(op->body_owned ? 0 : -ENOMEM);
	char *p = op->body_owned;
	size_t left = cap;
	int n = snprintf(p, left, "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
	p += n;
	left -= (size_t)n;
	for (size_t i = 0; i < n_parts; i++) {
		n = snprintf(p, left, "<Part><PartNumber>%u</PartNumber><ETag>", parts[i].number);
		p += n;
		left -= (size_t)n;
		OP_TRY(xml_escaped(&p, &left, parts[i].etag));
		n = snprintf(p, left, "</ETag></Part>");
		p += n;
		left -= (size_t)n;
	}
	n = snprintf(p, left, "</CompleteMultipartUpload>");
	p += n;
	op->content_type = "application/xml";
	OP_TRY(op_query(op, "uploadId", upload_id));
	struct s3_source src = { .buf = op->body_owned, .fd = -1,
				 .len = (uint64_t)(p - op->body_owned) };
	OP_TRY(op_set_body(op, &src, true, true));
	return op_submit(op);
}

int s3_abort_multipart(s3_client *c, const char *bucket, const char *key,
		       const char *upload_id, s3_done_fn done, void *arg)
{
	OP_BEGIN(OP_ABORT_MPU, "DELETE", key);
	OP_TRY(!key || check_upload_id(upload_id) ? -EINVAL : 0);
	OP_TRY(op_query(op, "uploadId", upload_id));
	return op_submit(op);
}

int s3_list_parts(s3_client *c, const char *bucket, const char *key,
		  const char *upload_id, const struct s3_list_args *a, s3_done_fn done,
		  void *arg)
{
	static const struct s3_list_args none;
	if (!a)
		a = &none;
	OP_BEGIN(OP_LIST_PARTS, "GET", key);
	op->resp_max = RESP_LIST_MAX;
	OP_TRY(!key || check_upload_id(upload_id) || check_list_arg(a->marker) ? -EINVAL : 0);
	OP_TRY(op_query(op, "uploadId", upload_id));
	if (a->marker && *a->marker)
		OP_TRY(op_query(op, "part-number-marker", a->marker));
	if (a->max_keys)
		OP_TRY(op_query_u(op, "max-parts", a->max_keys));
	return op_submit(op);
}

int s3_list_multipart_uploads(s3_client *c, const char *bucket,
			      const struct s3_list_args *a, s3_done_fn done, void *arg)
{
	static const struct s3_list_args none;
	if (!a)
		a = &none;
	OP_BEGIN(OP_LIST_UPLOADS, "GET", NULL);
	op->resp_max = RESP_LIST_MAX;
	OP_TRY(check_list_arg(a->prefix) || check_list_arg(a->delimiter) ||
	       check_list_arg(a->marker) || check_list_arg(a->upload_id_marker) ? -EINVAL : 0);
	OP_TRY(op_query(op, "uploads", ""));
	if (a->prefix && *a->prefix)
		OP_TRY(op_query(op, "prefix", a->prefix));
	if (a->delimiter && *a->delimiter)
		OP_TRY(op_query(op, "delimiter", a->delimiter));
	if (a->marker && *a->marker)
		OP_TRY(op_query(op, "key-marker", a->marker));
	if (a->upload_id_marker && *a->upload_id_marker)
		OP_TRY(op_query(op, "upload-id-marker", a->upload_id_marker));
	if (a->max_keys)
		OP_TRY(op_query_u(op, "max-uploads", a->max_keys));
	return op_submit(op);
}
