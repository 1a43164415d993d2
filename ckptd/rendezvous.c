/* SPDX-License-Identifier: MIT */
/*
 * The peer link's addresses and rendezvous: how the nodes of a group find
 * each other. Each daemon publishes its fabric address and epoch as a file
 * of the rendezvous directory (or takes the --peers list), reads the other
 * nodes' files on a worker (never on the loop: the directory is on a
 * shared file system that may hang), and loads the group's key. What a
 * node's address and epoch then mean for membership is peer.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "ckptd.h"
#include "agree.h"
#include "peer.h"
#include "peer_internal.h"
#include "peerwire.h"

int peer_node_set_addr(struct peerlink *pl, uint32_t k, const uint8_t *addr, size_t len)
{
	struct node *nd = &pl->nodes[k];
	fi_addr_t fa;

	if (len == 0 || len > PEER_ADDR_MAX)
		return -EINVAL;
	if (nd->have_addr && nd->addr_len == len && memcmp(nd->addr, addr, len) == 0)
		return 0;
	if (fi_av_insert(pl->av, addr, 1, &fa, 0, NULL) != 1)
		return -EINVAL;
	/* The old address is left in the table: operations may still
	 * complete against it. */
	nd->fa = fa;
	memcpy(nd->addr, addr, len);
	nd->addr_len = len;
	nd->have_addr = true;
	return 0;
}

static int unhex(const char *s, uint8_t *out, size_t cap, size_t *len)
{
	size_t n = strlen(s);

	while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
		n--;
	if (n % 2 || n / 2 > cap)
		return -EINVAL;
	for (size_t i = 0; i < n / 2; i++) {
		unsigned v = 0;
		for (int j = 0; j < 2; j++) {
			char c = s[2 * i + (size_t)j];
			v <<= 4;
			if (c >= '0' && c <= '9')
				v |= (unsigned)(c - '0');
			else if (c >= 'a' && c <= 'f')
				v |= (unsigned)(c - 'a' + 10);
			else
				return -EINVAL;
		}
		out[i] = (uint8_t)v;
	}
	*len = n / 2;
	return 0;
}

int rdv_mkdir_p(const char *path, mode_t mode)
{
	char tmp[PATH_MAX];
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(tmp, path, len + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, mode) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* node-<K>: "ckpt-peer 1", "node=K", "epoch=<16 hex>", "addr=<hex>". */
int rdv_publish(struct peerlink *pl)
{
	char path[PATH_MAX + 32], tmp[PATH_MAX + 64];
	char addr[2 * PEER_ADDR_MAX + 1];
	FILE *f;

	snprintf(path, sizeof(path), "%s/node-%u", pl->rdv, pl->me);
	snprintf(tmp, sizeof(tmp), "%s/.node-%u.%d.tmp", pl->rdv, pl->me, (int)getpid());
	ckpt_hex(addr, pl->myaddr, pl->myaddr_len);
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fprintf(f, "ckpt-peer 1\nnode=%u\nepoch=%016llx\naddr=%s\n", pl->me,
		(unsigned long long)pl->epoch, addr);
	if (fflush(f) != 0 || fsync(fileno(f)) < 0) {
		int r = -errno;
		fclose(f);
		unlink(tmp);
		return r;
	}
	fclose(f);
	if (rename(tmp, path) < 0) {
		int r = -errno;
		unlink(tmp);
		return r;
	}
	return 0;
}

/* Node k's rendezvous file in rdv: 0 with its epoch and address, -ENOENT,
 * or -EBADMSG for a file that is not a node-k address. Blocking metadata
 * I/O on the shared root: on a worker only, once the loop runs. */
static int read_node_file(const char *rdv, uint32_t k, uint64_t *epoch_out,
			  uint8_t *addr, size_t *addr_len)
{
	char path[PATH_MAX + 32], line[2 * PEER_ADDR_MAX + 64];
	unsigned long long epoch = 0;
	unsigned node = UINT_MAX;
	bool magic = false;
	FILE *f;

	*addr_len = 0;
	snprintf(path, sizeof(path), "%s/node-%u", rdv, k);
	f = fopen(path, "r");
	if (!f)
		return -ENOENT;
	while (fgets(line, sizeof(line), f)) {
		if (strcmp(line, "ckpt-peer 1\n") == 0)
			magic = true;
		else if (sscanf(line, "node=%u", &node) == 1)
			;
		else if (sscanf(line, "epoch=%llx", &epoch) == 1)
			;
		else if (strncmp(line, "addr=", 5) == 0 &&
			 unhex(line + 5, addr, PEER_ADDR_MAX, addr_len) < 0)
			*addr_len = 0;
	}
	fclose(f);
	if (!magic || node != k || epoch == 0 || *addr_len == 0)
		return -EBADMSG;
	*epoch_out = epoch;
	return 0;
}

/* Whether this daemon's own rendezvous file still names it (at stop: the
 * loop has ended). */
bool rdv_own_file_is_ours(const struct peerlink *pl)
{
	uint8_t addr[PEER_ADDR_MAX];
	size_t addr_len;
	uint64_t epoch = 0;

	return read_node_file(pl->rdv, pl->me, &epoch, addr, &addr_len) == 0 &&
	       epoch == pl->epoch;
}

/*
 * A look at one node's rendezvous file, on a worker: the file of a node
 * that is down (its address may be new), or this daemon's own (another
 * daemon started with the same node_index replaces it). The shared root's
 * metadata server may be slow or hung: the loop never waits for it, and
 * each file has at most one read in flight, so a file that hangs holds up
 * only its own node (and one worker).
 */
struct rdv_read {
	struct peerlink *pl;
	char rdv[PATH_MAX];
	uint32_t k;
	int result;
	uint64_t epoch;
	uint8_t addr[PEER_ADDR_MAX];
	size_t addr_len;
};

static void rdv_read_run(void *arg)
{
	struct rdv_read *rd = arg;

	rd->result = read_node_file(rd->rdv, rd->k, &rd->epoch, rd->addr, &rd->addr_len);
}

static void rdv_read_done(void *arg)
{
	struct rdv_read *rd = arg;
	struct peerlink *pl = rd->pl;
	struct node *nd = &pl->nodes[rd->k];
	uint32_t k = rd->k;

	nd->rdv_reading = false;
	if (k == pl->me) {
		if ((rd->result < 0 || rd->epoch != pl->epoch) && !pl->duplicate_logged) {
			/* Said once: the group cannot work like this, and the
			 * other nodes see node K "restart" at every message of
			 * either. */
			log_error("peer", "another daemon has published itself as node %u in %s: two "
				  "daemons with node_index %u? (this one: epoch %016llx)", pl->me,
				  pl->rdv, pl->me, (unsigned long long)pl->epoch);
			pl->duplicate_logged = true;
		}
		free(rd);
		return;
	}
	if (pl->stopping || nd->up)
		goto out;
	if (rd->result == -EBADMSG)
		log_warn("peer", "ignoring rendezvous file %s/node-%u: not a node-%u address",
			 pl->rdv, k, k);
	if (rd->result < 0 || rd->epoch == nd->file_epoch)
		goto out;
	if (peer_node_set_addr(pl, k, rd->addr, rd->addr_len) < 0) {
		log_warn("peer", "rendezvous file %s/node-%u: address not usable by provider %s",
			 pl->rdv, k, pl->d->cfg->fabric_provider);
		goto out;
	}
	nd->file_epoch = rd->epoch;
	/* A new address: no need to wait for the next tick. */
	peer_send_hello(pl, k, false);
out:
	free(rd);
}

void rdv_read_start(struct peerlink *pl, uint32_t k)
{
	struct node *nd = &pl->nodes[k];
	struct rdv_read *rd;

	if (pl->explicit_peers || nd->rdv_reading)
		return;
	rd = calloc(1, sizeof(*rd));
	if (!rd)
		return;
	rd->pl = pl;
	rd->k = k;
	snprintf(rd->rdv, sizeof(rd->rdv), "%s", pl->rdv);
	if (workers_submit(pl->d->workers, rdv_read_run, rdv_read_done, rd) < 0) {
		free(rd);
		return;
	}
	nd->rdv_reading = true;
}

int peer_load_key(struct peerlink *pl)
{
	const struct ckptd_config *cfg = pl->d->cfg;
	char path[PATH_MAX + 8], tmp[PATH_MAX + 64];
	uint8_t buf[PEER_KEY_MAX + 1];
	ssize_t n;
	int fd;

	if (*cfg->peer_key_file) {
		snprintf(path, sizeof(path), "%s", cfg->peer_key_file);
	} else if (pl->explicit_peers) {
		log_warn("peer", "peers is set and peer_key_file is not: peer messages are not "
			 "authenticated");
		pl->keylen = 0;
		return 0;
	} else {
		snprintf(path, sizeof(path), "%s/key", pl->rdv);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT) {
			/* The first daemon creates it: written under a
			 * temporary name, then linked, so nobody reads half. */
			uint8_t key[32];
			if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key))
				return -EIO;
			snprintf(tmp, sizeof(tmp), "%s/.key.%d.tmp", pl->rdv, (int)getpid());
			int t = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
			if (t < 0)
				return -errno;
			bool ok = write(t, key, sizeof(key)) == (ssize_t)sizeof(key) && fsync(t) == 0;
			close(t);
			if (ok && link(tmp, path) < 0 && errno != EEXIST)
				ok = false;
			unlink(tmp);
			if (!ok)
				return -EIO;
		} else if (fd >= 0) {
			close(fd);
		}
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int r = -errno;
		log_error("peer", "cannot read the peer key %s: %s", path, strerror(-r));
		return r;
	}
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n < 16 || n > PEER_KEY_MAX) {
		log_error("peer", "peer key %s must hold 16 to %d bytes", path, PEER_KEY_MAX);
		return -EINVAL;
	}
	memcpy(pl->key, buf, (size_t)n);
	pl->keylen = (size_t)n;
	return 0;
}

/* "host:port" number k of the comma-separated list. */
int peer_entry(const char *list, uint32_t k, char *host, size_t hcap, char *port,
	       size_t pcap)
{
	const char *p = list;

	for (uint32_t i = 0; i < k; i++) {
		p = strchr(p, ',');
		if (!p)
			return -EINVAL;
		p++;
	}
	const char *end = strchr(p, ',');
	size_t len = end ? (size_t)(end - p) : strlen(p);
	const char *colon = NULL;
	for (size_t i = 0; i < len; i++)
		if (p[i] == ':')
			colon = p + i;
	if (!colon || colon == p || (size_t)(colon - p) >= hcap ||
	    len - (size_t)(colon - p) - 1 >= pcap || len - (size_t)(colon - p) - 1 == 0)
		return -EINVAL;
	memcpy(host, p, (size_t)(colon - p));
	host[colon - p] = '\0';
	memcpy(port, colon + 1, len - (size_t)(colon - p) - 1);
	port[len - (size_t)(colon - p) - 1] = '\0';
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	return 0;
}

