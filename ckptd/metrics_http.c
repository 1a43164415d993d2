/* SPDX-License-Identifier: MIT */
/*
 * The metrics endpoint: libmicrohttpd with its own polling thread serves
 * GET /metrics (rendered from the atomics in metrics.c, so a scrape never
 * waits for the event loop and the loop never waits for a scrape) and
 * GET /healthz. Nothing else: no request bodies, no other paths.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "log.h"
#include "metrics.h"

struct metrics_http {
	struct MHD_Daemon *mhd;
	atomic_bool stopping;
};

int metrics_listen_parse(const char *text, struct sockaddr_storage *ss, unsigned *sslen)
{
	struct sockaddr_storage tmp;
	char host[INET6_ADDRSTRLEN + 1];
	const char *port_text;
	size_t hlen;
	bool v6 = false;

	if (!ss)
		ss = &tmp;
	memset(ss, 0, sizeof(*ss));
	if (!text || !*text || !strcmp(text, "off"))
		return 1;
	if (text[0] == '[') {
		const char *end = strchr(text, ']');
		if (!end || end[1] != ':')
			return -EINVAL;
		hlen = (size_t)(end - text - 1);
		if (hlen == 0 || hlen >= sizeof(host))
			return -EINVAL;
		memcpy(host, text + 1, hlen);
		port_text = end + 2;
		v6 = true;
	} else {
		const char *colon = strrchr(text, ':');
		if (!colon || strchr(text, ':') != colon)
			return -EINVAL;
		hlen = (size_t)(colon - text);
		if (hlen == 0 || hlen >= sizeof(host))
			return -EINVAL;
		memcpy(host, text, hlen);
		port_text = colon + 1;
	}
	host[hlen] = 0;
	/* Digits only: strtoul would take signs and blanks. */
	if (!*port_text || strlen(port_text) > 5 || strspn(port_text, "0123456789") != strlen(port_text))
		return -EINVAL;
	unsigned long port = strtoul(port_text, NULL, 10);
	if (port > 65535)
		return -EINVAL;
	if (v6) {
		struct sockaddr_in6 *sa = (struct sockaddr_in6 *)ss;
		sa->sin6_family = AF_INET6;
		sa->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, host, &sa->sin6_addr) != 1)
			return -EINVAL;
		if (sslen)
			*sslen = sizeof(*sa);
	} else {
		struct sockaddr_in *sa = (struct sockaddr_in *)ss;
		sa->sin_family = AF_INET;
		sa->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
			return -EINVAL;
		if (sslen)
			*sslen = sizeof(*sa);
	}
	return 0;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *ctype,
			     void *body, size_t len, enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, mode);
	enum MHD_Result r;

	if (!resp) {
		if (mode == MHD_RESPMEM_MUST_FREE)
			free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	r = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **req_cls)
{
	struct metrics_http *h = cls;
	static const char text[] = "text/plain; charset=utf-8";
	static const char index_html[] = "<html><body><a href=\"/metrics\">/metrics</a> "
					 "<a href=\"/healthz\">/healthz</a></body></html>\n";

	(void)version;
	(void)upload_data;
	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
		return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, text, (void *)"GET only\n", 9,
			     MHD_RESPMEM_PERSISTENT);
	/* A GET with a body: swallow it before answering. */
	if (*upload_data_size) {
		*upload_data_size = 0;
		return MHD_YES;
	}
	(void)req_cls;
	if (!strcmp(url, "/metrics")) {
		char *body;
		size_t len;

		if (metrics_render(&body, &len) < 0)
			return reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, text,
				     (void *)"out of memory\n", 14, MHD_RESPMEM_PERSISTENT);
		return reply(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", body, len,
			     MHD_RESPMEM_MUST_FREE);
	}
	if (!strcmp(url, "/healthz")) {
		if (atomic_load_explicit(&h->stopping, memory_order_relaxed))
			return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, text, (void *)"stopping\n", 9,
				     MHD_RESPMEM_PERSISTENT);
		return reply(conn, MHD_HTTP_OK, text, (void *)"ok\n", 3, MHD_RESPMEM_PERSISTENT);
	}
	if (!strcmp(url, "/"))
		return reply(conn, MHD_HTTP_OK, "text/html; charset=utf-8", (void *)index_html,
			     sizeof(index_html) - 1, MHD_RESPMEM_PERSISTENT);
	return reply(conn, MHD_HTTP_NOT_FOUND, text, (void *)"not found\n", 10,
		     MHD_RESPMEM_PERSISTENT);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	size_t n;

	(void)cls;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = 0;
	log_warn("metrics", "http server error=\"%s\"", msg);
}

/* The port, as text, replacing the file in one rename: a reader never
 * sees a half-written number. */
static int write_port_file(const char *path, unsigned port)
{
	char tmp[PATH_MAX], text[16];
	int fd, n, r = 0;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	n = snprintf(text, sizeof(text), "%u\n", port);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (write(fd, text, (size_t)n) != n)
		r = -EIO;
	if (close(fd) < 0 && !r)
		r = -errno;
	if (!r && rename(tmp, path) < 0)
		r = -errno;
	if (r)
		unlink(tmp);
	return r;
}

int metrics_http_start(const char *listen, const char *port_file, struct metrics_http **out)
{
	struct sockaddr_storage ss, bound;
	socklen_t blen = sizeof(bound);
	unsigned sslen = 0;
	struct metrics_http *h;
	const union MHD_DaemonInfo *info;
	char addr[INET6_ADDRSTRLEN];
	unsigned port;
	int r;

	*out = NULL;
	r = metrics_listen_parse(listen, &ss, &sslen);
	if (r == 1) {
		log_info("metrics", "metrics endpoint disabled (metrics_listen is empty or off)");
		return 0;
	}
	if (r < 0) {
		log_error("metrics", "bad metrics_listen value=\"%s\"", listen);
		return r;
	}
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->mhd = MHD_start_daemon(MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
				  (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0),
				  0, NULL, NULL, on_request, h,
				  /* First: options before it would log through
				   * MHD's own logger. */
				  MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
				  MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
				  /* Scrapers are few; a stuck one must not hold
				   * a connection for long. */
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned)32,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
				  MHD_OPTION_END);
	if (!h->mhd) {
		r = errno ? -errno : -EADDRINUSE;
		log_error("metrics", "cannot serve metrics address=%s error=\"%s\"", listen,
			  strerror(-r));
		free(h);
		return r;
	}
	info = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_LISTEN_FD);
	if (!info || getsockname(info->listen_fd, (struct sockaddr *)&bound, &blen) < 0) {
		log_error("metrics", "cannot read the metrics listening address");
		MHD_stop_daemon(h->mhd);
		free(h);
		return -EIO;
	}
	if (bound.ss_family == AF_INET6) {
		struct sockaddr_in6 *sa = (struct sockaddr_in6 *)&bound;
		inet_ntop(AF_INET6, &sa->sin6_addr, addr, sizeof(addr));
		port = ntohs(sa->sin6_port);
		log_info("metrics", "metrics listening address=[%s]:%u", addr, port);
	} else {
		struct sockaddr_in *sa = (struct sockaddr_in *)&bound;
		inet_ntop(AF_INET, &sa->sin_addr, addr, sizeof(addr));
		port = ntohs(sa->sin_port);
		log_info("metrics", "metrics listening address=%s:%u", addr, port);
	}
	if (port_file && *port_file) {
		r = write_port_file(port_file, port);
		if (r < 0) {
			log_error("metrics", "cannot write metrics_port_file path=%s error=\"%s\"",
				  port_file, strerror(-r));
			MHD_stop_daemon(h->mhd);
			free(h);
			return r;
		}
	}
	*out = h;
	return 0;
}

void metrics_http_stopping(struct metrics_http *h)
{
	if (h)
		atomic_store_explicit(&h->stopping, true, memory_order_relaxed);
}

void metrics_http_stop(struct metrics_http *h)
{
	if (!h)
		return;
	MHD_stop_daemon(h->mhd);
	free(h);
}
