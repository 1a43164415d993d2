/* SPDX-License-Identifier: MIT */
/*
 * ckpt-peer-forge: sends one forged or malformed message to a ckptd of a
 * multi-node group over its own libfabric RDM endpoint, for the cluster
 * fault tests. Messages are built with ckptd's own encoder (peerwire.h),
 * so a field is wrong only where the test asks for it.
 *
 * The target's address and incarnation come from the rendezvous directory
 * (node-<K>: "epoch=<16 hex digits>" and "addr=<hex of the fi_getname
 * bytes>" lines); the group key from <dir>/key unless told otherwise.
 *
 * Exit status: 0 sent (the send completed locally), 1 failed, 2 bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include "peerwire.h"

struct node_file {
	uint64_t epoch;
	uint8_t addr[PEER_ADDR_MAX];
	size_t addr_len;
};

struct fab {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
};

static const char *prog = "ckpt-peer-forge";

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Hex text (whitespace ends it) into at most cap bytes; returns the count. */
static int unhex(const char *s, uint8_t *out, size_t cap)
{
	size_t n = 0;

	while (*s && *s != '\n' && *s != '\r' && *s != ' ') {
		int hi = hexval((unsigned char)s[0]);
		int lo = s[1] ? hexval((unsigned char)s[1]) : -1;

		if (hi < 0 || lo < 0 || n == cap)
			return -EINVAL;
		out[n++] = (uint8_t)(hi << 4 | lo);
		s += 2;
	}
	return (int)n;
}

static int read_node_file(const char *dir, unsigned node, struct node_file *nf, bool quiet)
{
	char path[4096], line[2 * PEER_ADDR_MAX + 64];
	bool have_epoch = false;
	FILE *f;
	int r;

	memset(nf, 0, sizeof(*nf));
	snprintf(path, sizeof(path), "%s/node-%u", dir, node);
	f = fopen(path, "r");
	if (!f) {
		r = -errno;
		if (!quiet)
			fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(-r));
		return r;
	}
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "epoch=", 6)) {
			char *end;

			errno = 0;
			nf->epoch = strtoull(line + 6, &end, 16);
			have_epoch = !errno && end != line + 6;
		} else if (!strncmp(line, "addr=", 5)) {
			r = unhex(line + 5, nf->addr, sizeof(nf->addr));
			nf->addr_len = r > 0 ? (size_t)r : 0;
		}
	}
	fclose(f);
	if (!have_epoch || !nf->addr_len) {
		fprintf(stderr, "%s: %s: no epoch= or addr= line\n", prog, path);
		return -EINVAL;
	}
	return 0;
}

static int read_file(const char *path, uint8_t *buf, size_t cap, size_t *len)
{
	FILE *f = fopen(path, "rb");
	size_t n;

	if (!f) {
		fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno));
		return -errno;
	}
	n = fread(buf, 1, cap, f);
	if (ferror(f) || (n == cap && fgetc(f) != EOF)) {
		fclose(f);
		fprintf(stderr, "%s: %s: unreadable or longer than %zu bytes\n", prog, path, cap);
		return -EINVAL;
	}
	fclose(f);
	*len = n;
	return 0;
}

/* Size and SHA-256 of a file (an index on the root). */
static int digest_file(const char *path, uint64_t *size, uint8_t sha[32])
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	unsigned char buf[65536];
	unsigned int mdlen = 0;
	FILE *f = fopen(path, "rb");
	size_t n;
	int r = 0;

	*size = 0;
	if (!f || !md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL)) {
		r = f ? -ENOMEM : -errno;
		goto out;
	}
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
		*size += n;
		if (!EVP_DigestUpdate(md, buf, n)) {
			r = -EIO;
			goto out;
		}
	}
	if (ferror(f) || !EVP_DigestFinal_ex(md, sha, &mdlen) || mdlen != 32)
		r = -EIO;
out:
	if (r < 0)
		fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(-r));
	if (f)
		fclose(f);
	EVP_MD_CTX_free(md);
	return r;
}

static void fab_close(struct fab *fb)
{
	if (fb->ep)
		fi_close(&fb->ep->fid);
	if (fb->av)
		fi_close(&fb->av->fid);
	if (fb->cq)
		fi_close(&fb->cq->fid);
	if (fb->domain)
		fi_close(&fb->domain->fid);
	if (fb->fabric)
		fi_close(&fb->fabric->fid);
	if (fb->info)
		fi_freeinfo(fb->info);
}

static int fab_open(struct fab *fb, const char *provider, const char *node)
{
	struct fi_info *hints = fi_allocinfo();
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE };
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	const char *what;
	int r;

	if (!hints)
		return -ENOMEM;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG;
	hints->mode = FI_CONTEXT;
	/* Sends come from plain memory: no FI_MR_LOCAL. */
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup(provider);
	/* FI_SOURCE: bind this end to `node` (loopback in the tests). */
	what = "fi_getinfo";
	r = fi_getinfo(FI_VERSION(1, 12), node, NULL, FI_SOURCE, hints, &fb->info);
	fi_freeinfo(hints);
	if (r)
		goto err;
	what = "fi_fabric";
	r = fi_fabric(fb->info->fabric_attr, &fb->fabric, NULL);
	if (r)
		goto err;
	what = "fi_domain";
	r = fi_domain(fb->fabric, fb->info, &fb->domain, NULL);
	if (r)
		goto err;
	what = "fi_cq_open";
	r = fi_cq_open(fb->domain, &cq_attr, &fb->cq, NULL);
	if (r)
		goto err;
	what = "fi_av_open";
	r = fi_av_open(fb->domain, &av_attr, &fb->av, NULL);
	if (r)
		goto err;
	what = "fi_endpoint";
	r = fi_endpoint(fb->domain, fb->info, &fb->ep, NULL);
	if (r)
		goto err;
	what = "fi_ep_bind";
	r = fi_ep_bind(fb->ep, &fb->cq->fid, FI_TRANSMIT | FI_RECV);
	if (!r)
		r = fi_ep_bind(fb->ep, &fb->av->fid, 0);
	if (r)
		goto err;
	what = "fi_enable";
	r = fi_enable(fb->ep);
	if (r)
		goto err;
	return 0;
err:
	fprintf(stderr, "%s: %s (provider %s, node %s): %s\n", prog, what, provider, node,
		fi_strerror(-r));
	return r < 0 ? r : -EIO;
}

/* Send len bytes to dest and wait for the local completion. */
static int fab_send(struct fab *fb, fi_addr_t dest, const void *buf, size_t len, int timeout_ms)
{
	struct fi_context ctx;
	struct fi_cq_entry ce;
	double deadline = now_ms() + timeout_ms;
	ssize_t r;

	for (;;) {
		r = fi_send(fb->ep, buf, len, NULL, dest, &ctx);
		if (r != -FI_EAGAIN)
			break;
		fi_cq_read(fb->cq, &ce, 1); /* progress the connection */
		if (now_ms() > deadline)
			break;
		usleep(1000);
	}
	if (r) {
		fprintf(stderr, "%s: fi_send: %s\n", prog, fi_strerror((int)-r));
		return (int)r;
	}
	for (;;) {
		r = fi_cq_read(fb->cq, &ce, 1);
		if (r == 1)
			return 0;
		if (r == -FI_EAVAIL) {
			struct fi_cq_err_entry err = { 0 };

			fi_cq_readerr(fb->cq, &err, 0);
			fprintf(stderr, "%s: send failed: %s\n", prog, fi_strerror(err.err));
			return -EIO;
		}
		if (r != -FI_EAGAIN) {
			fprintf(stderr, "%s: fi_cq_read: %s\n", prog, fi_strerror((int)-r));
			return -EIO;
		}
		if (now_ms() > deadline) {
			fprintf(stderr, "%s: the send did not complete within %d ms\n", prog, timeout_ms);
			return -ETIMEDOUT;
		}
		usleep(1000);
	}
}

static const struct {
	const char *name;
	enum peer_type type;
} type_words[] = {
	{ "hello", PEER_HELLO },           { "hello-ack", PEER_HELLO_ACK },
	{ "heartbeat", PEER_HEARTBEAT },   { "vote", PEER_VOTE },
	{ "committed", PEER_COMMITTED },   { "abort", PEER_ABORT },
	{ "copy-offer", PEER_COPY_OFFER }, { "fetch", PEER_FETCH },
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ckpt-peer-forge --dir RENDEZVOUS --nodes N --to K --from F --cluster-id ID\n"
		"                       --type TYPE [options]\n"
		"  TYPE: hello hello-ack heartbeat vote committed abort copy-offer fetch\n"
		"  --provider P          libfabric provider (tcp;ofi_rxm)\n"
		"  --node HOST           address this end binds (127.0.0.1)\n"
		"  --key-file PATH       group key (default RENDEZVOUS/key)\n"
		"  --no-key              send an unauthenticated message (zero tag)\n"
		"  --wrong-key           sign with the key with one bit flipped\n"
		"  --cluster-hash-of ID  header cluster hash of another group id\n"
		"  --to-epoch HEX        receiver epoch in the header (default: its node file)\n"
		"  --from-epoch HEX      sender epoch (default: node F's file, else random)\n"
		"  --garbage N           send N pseudo-random bytes instead of a message\n"
		"  --corrupt-byte OFF    flip a bit of the encoded message at OFF (after signing)\n"
		"  --job J --step S --world W --rank R\n"
		"  --shard-bytes B --blob-bytes B --index-bytes B --blob-crc32c C\n"
		"  --index-sha256 HEX    claimed index digest (64 hex digits)\n"
		"  --index-file PATH     index_bytes and index_sha256 of this file\n"
		"  --shard-file PATH     shard_bytes of this file\n"
		"  --status N --xfer N --piece-bytes N --reason TEXT\n"
		"  --count N             send the message N times (1)\n"
		"  --timeout-ms MS       per send (10000)\n");
}

enum {
	O_DIR = 256, O_NODES, O_TO, O_FROM, O_CLUSTER, O_TYPE, O_PROVIDER, O_NODE, O_KEYFILE,
	O_NOKEY, O_WRONGKEY, O_CLHASH, O_TOEPOCH, O_FROMEPOCH, O_GARBAGE, O_CORRUPT, O_JOB,
	O_STEP, O_WORLD, O_RANK, O_SHARD, O_BLOB, O_INDEXB, O_CRC, O_SHA, O_INDEXF, O_SHARDF,
	O_STATUS, O_XFER, O_PIECE, O_REASON, O_COUNT, O_TIMEOUT, O_HELP,
};

static const struct option longopts[] = {
	{ "dir", 1, NULL, O_DIR },            { "nodes", 1, NULL, O_NODES },
	{ "to", 1, NULL, O_TO },              { "from", 1, NULL, O_FROM },
	{ "cluster-id", 1, NULL, O_CLUSTER }, { "type", 1, NULL, O_TYPE },
	{ "provider", 1, NULL, O_PROVIDER },  { "node", 1, NULL, O_NODE },
	{ "key-file", 1, NULL, O_KEYFILE },   { "no-key", 0, NULL, O_NOKEY },
	{ "wrong-key", 0, NULL, O_WRONGKEY }, { "cluster-hash-of", 1, NULL, O_CLHASH },
	{ "to-epoch", 1, NULL, O_TOEPOCH },   { "from-epoch", 1, NULL, O_FROMEPOCH },
	{ "garbage", 1, NULL, O_GARBAGE },    { "corrupt-byte", 1, NULL, O_CORRUPT },
	{ "job", 1, NULL, O_JOB },            { "step", 1, NULL, O_STEP },
	{ "world", 1, NULL, O_WORLD },        { "rank", 1, NULL, O_RANK },
	{ "shard-bytes", 1, NULL, O_SHARD },  { "blob-bytes", 1, NULL, O_BLOB },
	{ "index-bytes", 1, NULL, O_INDEXB }, { "blob-crc32c", 1, NULL, O_CRC },
	{ "index-sha256", 1, NULL, O_SHA },   { "index-file", 1, NULL, O_INDEXF },
	{ "shard-file", 1, NULL, O_SHARDF },  { "status", 1, NULL, O_STATUS },
	{ "xfer", 1, NULL, O_XFER },          { "piece-bytes", 1, NULL, O_PIECE },
	{ "reason", 1, NULL, O_REASON },      { "count", 1, NULL, O_COUNT },
	{ "timeout-ms", 1, NULL, O_TIMEOUT }, { "help", 0, NULL, O_HELP },
	{ NULL, 0, NULL, 0 },
};

static int parse_num(const char *s, int base, uint64_t *out)
{
	char *end;

	errno = 0;
	*out = strtoull(s, &end, base);
	return errno || end == s || *end || s[0] == '-' ? -EINVAL : 0;
}

static uint64_t random_u64(void)
{
	uint64_t v = 0;
	FILE *f = fopen("/dev/urandom", "rb");

	if (f) {
		if (fread(&v, sizeof(v), 1, f) != 1)
			v = 0;
		fclose(f);
	}
	return v ? v : (uint64_t)now_ms() | 1;
}

int main(int argc, char **argv)
{
	const char *dir = NULL, *cluster_id = NULL, *provider = "tcp;ofi_rxm", *node = "127.0.0.1";
	const char *key_file = NULL, *other_cluster = NULL, *index_file = NULL, *shard_file = NULL;
	uint64_t nodes = 0, to = UINT64_MAX, from = UINT64_MAX, garbage = 0, count = 1, v;
	uint64_t to_epoch = 0, from_epoch = 0, corrupt = UINT64_MAX, timeout_ms = 10000;
	bool have_to_epoch = false, have_from_epoch = false, no_key = false, wrong_key = false;
	bool have_sha = false, have_index_bytes = false, have_shard_bytes = false;
	static struct peer_msg m;
	static uint8_t key[PEER_KEY_MAX + 1], buf[PEER_MSG_MAX * 2];
	uint8_t claimed_sha[32];
	struct node_file target, sender;
	struct fab fb = { 0 };
	size_t keylen = 0, len;
	fi_addr_t dest;
	int c, r, type = 0;

	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		const char *a = optarg;

		switch (c) {
		case O_DIR: dir = a; break;
		case O_CLUSTER: cluster_id = a; break;
		case O_PROVIDER: provider = a; break;
		case O_NODE: node = a; break;
		case O_KEYFILE: key_file = a; break;
		case O_NOKEY: no_key = true; break;
		case O_WRONGKEY: wrong_key = true; break;
		case O_CLHASH: other_cluster = a; break;
		case O_INDEXF: index_file = a; break;
		case O_SHARDF: shard_file = a; break;
		case O_HELP: usage(stdout); return 0;
		case O_TYPE:
			for (size_t i = 0; i < sizeof(type_words) / sizeof(type_words[0]); i++)
				if (!strcmp(a, type_words[i].name))
					type = type_words[i].type;
			if (!type)
				goto bad;
			break;
		case O_JOB:
			if (strlen(a) > CKPT_JOB_NAME_MAX)
				goto bad;
			strcpy(m.job, a);
			break;
		case O_REASON:
			snprintf(m.reason, sizeof(m.reason), "%s", a);
			break;
		case O_SHA:
			if (unhex(a, claimed_sha, 32) != 32)
				goto bad;
			have_sha = true;
			break;
		case O_STATUS: {
			char *end;

			errno = 0;
			long long sv = strtoll(a, &end, 0);
			if (errno || end == a || *end || sv < INT32_MIN || sv > INT32_MAX)
				goto bad;
			m.status = (int32_t)sv;
			break;
		}
		case O_TOEPOCH:
		case O_FROMEPOCH:
			if (parse_num(a, 16, &v) < 0)
				goto bad;
			if (c == O_TOEPOCH) {
				to_epoch = v;
				have_to_epoch = true;
			} else {
				from_epoch = v;
				have_from_epoch = true;
			}
			break;
		case '?':
			usage(stderr);
			return 2;
		default:
			if (parse_num(a, 0, &v) < 0)
				goto bad;
			switch (c) {
			case O_NODES: nodes = v; break;
			case O_TO: to = v; break;
			case O_FROM: from = v; break;
			case O_GARBAGE: garbage = v; break;
			case O_CORRUPT: corrupt = v; break;
			case O_STEP: m.step = v; break;
			case O_WORLD: m.world_size = (uint32_t)v; break;
			case O_RANK: m.rank = (uint32_t)v; break;
			case O_SHARD: m.shard_bytes = v; have_shard_bytes = true; break;
			case O_BLOB: m.blob_bytes = v; break;
			case O_INDEXB: m.index_bytes = v; have_index_bytes = true; break;
			case O_CRC: m.blob_crc32c = (uint32_t)v; break;
			case O_XFER: m.xfer = v; break;
			case O_PIECE: m.piece_bytes = (uint32_t)v; break;
			case O_COUNT: count = v; break;
			case O_TIMEOUT: timeout_ms = v; break;
			default: goto bad;
			}
		}
		continue;
bad:
		fprintf(stderr, "%s: bad value for an option: '%s'\n", prog, a ? a : "");
		return 2;
	}
	if (optind != argc || !dir || !cluster_id || nodes < 2 || nodes > 65535 || to >= nodes ||
	    from >= nodes || (!type && !garbage) || garbage > sizeof(buf) || timeout_ms > 600000) {
		usage(stderr);
		return 2;
	}

	if (read_node_file(dir, (unsigned)to, &target, false) < 0)
		return 1;
	if (!have_from_epoch) {
		/* Pretend to be node F as the group knows it, if it is there. */
		from_epoch = read_node_file(dir, (unsigned)from, &sender, true) == 0 ? sender.epoch
									     : random_u64();
	}
	if (!have_to_epoch)
		to_epoch = target.epoch;
	if (!no_key) {
		char path[4096];

		if (!key_file) {
			snprintf(path, sizeof(path), "%s/key", dir);
			key_file = path;
		}
		if (read_file(key_file, key, sizeof(key), &keylen) < 0)
			return 1;
		if (keylen > PEER_KEY_MAX) {
			fprintf(stderr, "%s: %s: key longer than %d bytes\n", prog, key_file, PEER_KEY_MAX);
			return 1;
		}
		if (wrong_key && keylen)
			key[keylen / 2] ^= 0x01;
	}
	if (index_file) {
		uint64_t size;

		if (digest_file(index_file, &size, m.index_sha256) < 0)
			return 1;
		if (!have_index_bytes)
			m.index_bytes = size;
	}
	/* --index-sha256 wins over --index-file's digest: a lie about a real file. */
	if (have_sha)
		memcpy(m.index_sha256, claimed_sha, 32);
	if (shard_file && !have_shard_bytes) {
		uint8_t ignored[32];

		if (digest_file(shard_file, &m.shard_bytes, ignored) < 0)
			return 1;
	}

	if (fab_open(&fb, provider, node) < 0) {
		fab_close(&fb);
		return 1;
	}
	if (fi_av_insert(fb.av, target.addr, 1, &dest, 0, NULL) != 1) {
		fprintf(stderr, "%s: fi_av_insert of node %" PRIu64 "'s address failed\n", prog, to);
		fab_close(&fb);
		return 1;
	}

	if (garbage) {
		uint64_t s = random_u64();

		len = (size_t)garbage;
		for (size_t i = 0; i < len; i++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			buf[i] = (uint8_t)(s >> 56);
		}
	} else {
		m.h.type = (uint16_t)type;
		m.h.from_node = (uint32_t)from;
		m.h.to_node = (uint32_t)to;
		m.h.nodes = (uint32_t)nodes;
		m.h.from_epoch = from_epoch;
		m.h.to_epoch = type == PEER_HELLO ? 0 : to_epoch;
		m.h.seq = random_u64() & 0xffffff;
		m.h.cluster = peer_cluster_hash(other_cluster ? other_cluster : cluster_id);
		if (type == PEER_HELLO || type == PEER_HELLO_ACK) {
			size_t alen = sizeof(m.addr);

			if (fi_getname(&fb.ep->fid, m.addr, &alen) != 0 || alen > sizeof(m.addr)) {
				fprintf(stderr, "%s: fi_getname failed\n", prog);
				fab_close(&fb);
				return 1;
			}
			m.addr_len = (uint32_t)alen;
			snprintf(m.cluster_id, sizeof(m.cluster_id), "%s",
				 other_cluster ? other_cluster : cluster_id);
		}
		r = peer_encode(&m, key, keylen, buf, sizeof(buf));
		if (r < 0) {
			fprintf(stderr, "%s: peer_encode: %s\n", prog, strerror(-r));
			fab_close(&fb);
			return 1;
		}
		len = (size_t)r;
		if (corrupt != UINT64_MAX) {
			if (corrupt >= len) {
				fprintf(stderr, "%s: --corrupt-byte %" PRIu64 " beyond a message of %zu bytes\n",
					prog, corrupt, len);
				fab_close(&fb);
				return 2;
			}
			buf[corrupt] ^= 0x40;
		}
	}

	for (uint64_t i = 0; i < count; i++) {
		r = fab_send(&fb, dest, buf, len, (int)timeout_ms);
		if (r < 0) {
			fab_close(&fb);
			return 1;
		}
	}
	/* Let the provider flush before the endpoint goes away. */
	for (double end = now_ms() + 200; now_ms() < end;) {
		struct fi_cq_entry ce;

		fi_cq_read(fb.cq, &ce, 1);
		usleep(1000);
	}
	printf("sent %s%s (%zu bytes) x%" PRIu64 " to node %" PRIu64 " (epoch %016" PRIx64 ")\n",
	       garbage ? "garbage" : peer_type_name((unsigned)type), garbage ? "" : " message", len,
	       count, to, target.epoch);
	fab_close(&fb);
	return 0;
}
