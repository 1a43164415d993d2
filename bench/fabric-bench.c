/* SPDX-License-Identifier: MIT */
/*
 * fabric-bench: raw libfabric transfer bandwidth between two processes on
 * one host, the floor for ckptd's partner copies (one daemon copying a
 * node's checkpoint shards into a partner daemon's memory).
 *
 * The program forks a receiver and a sender, which talk over a libfabric
 * RDM endpoint like two daemons would. The receiver hands its endpoint
 * address to the sender through a pipe; everything else goes over the
 * fabric. The sender copies --bytes from a pre-faulted source buffer into
 * the receiver's pre-faulted destination buffer in --piece sized pieces,
 * --inflight of them outstanding, in one or both of two ways:
 *
 *   tagged  fi_tsend; the receiver posts an fi_trecv straight into the
 *           destination for every piece (tag = piece index)
 *   rma     fi_write into the receiver's registered destination buffer,
 *           whose address and key come over a small fi_send
 *
 * Data operations complete with FI_DELIVERY_COMPLETE: a completion at the
 * sender means the piece is in the receiver's buffer, so the time of a
 * transfer is the sender's, from posting the first piece until the last
 * one completes. After each transfer the receiver checksums its buffer and
 * compares it with the source's checksum; a mismatch fails the run.
 * Repetitions interleave the modes (tagged, rma, tagged, rma, ...), so a
 * slow spell of the host hits both alike. See docs/BENCHMARKS.md.
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FABRIC_VERSION FI_VERSION(1, 12)
#define KIB ((uint64_t)1 << 10)
#define MIB ((uint64_t)1 << 20)
#define GIB ((uint64_t)1 << 30)
#define MAX_REPS 1000
#define MAX_INFLIGHT 4096
#define MAX_RECV_WINDOW 4096
#define ADDR_MAX 256
/* No completion for this long means the peer or the provider is stuck. */
#define STALL_SECONDS 60
#define EXIT_SKIP 77

enum mode { MODE_TAGGED, MODE_RMA, MODE_COUNT };
static const char *const mode_names[MODE_COUNT] = { "tagged", "rma" };

struct options {
	const char *provider;
	const char *addr;
	uint64_t bytes;
	uint64_t piece;
	unsigned inflight;
	unsigned reps;
	bool modes[MODE_COUNT];
};

/* ---- errors (a tool: errors end the process) ---------------------------- */

static const char *role; /* "sender" or "receiver" in the children */

static void __attribute__((format(printf, 2, 3), noreturn)) die_code(int code, const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("fabric-bench: ", stderr);
	if (role)
		fprintf(stderr, "%s: ", role);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

#define die(...) die_code(1, __VA_ARGS__)
#define die_usage(...) die_code(2, __VA_ARGS__)

/* A libfabric call failed: name the call and what it was for. */
static void __attribute__((noreturn)) die_fi(const char *call, const char *what, ssize_t ret)
{
	int err = ret < 0 ? (int)-ret : (int)ret;

	die("%s (%s): %s (%d)", call, what, fi_strerror(err), -err);
}

static double now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- options -------------------------------------------------------------- */

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: fabric-bench [OPTION]...\n"
		"Measure raw libfabric transfer bandwidth between two processes on this host:\n"
		"the floor for ckptd's in-memory partner copies.\n"
		"\n"
		"The program forks a receiver and a sender, which talk over a libfabric RDM\n"
		"endpoint. The sender copies SIZE bytes from a pre-faulted source buffer into\n"
		"the receiver's pre-faulted destination buffer, in pieces with N outstanding;\n"
		"data operations use FI_DELIVERY_COMPLETE, and a transfer's time runs from\n"
		"posting the first piece to the completion of the last one. The receiver\n"
		"checks the destination's checksum against the source's after every transfer.\n"
		"\n"
		"Options:\n"
		"  -p, --provider NAME  libfabric provider (default \"tcp;ofi_rxm\")\n"
		"  -a, --addr NODE      local address both endpoints bind to (default 127.0.0.1);\n"
		"                       empty: the provider's default (shm wants that)\n"
		"  -b, --bytes SIZE     bytes per transfer (default 1GiB)\n"
		"  -P, --piece SIZE     bytes per data operation (default 8MiB)\n"
		"  -i, --inflight N     data operations outstanding at once (default 8)\n"
		"  -r, --reps N         repetitions of each mode (default 3)\n"
		"  -m, --mode MODE      tagged, rma or both (default both):\n"
		"                         tagged: fi_tsend into an fi_trecv posted per piece\n"
		"                         rma:    fi_write into a registered buffer\n"
		"                       both alternates the modes within each repetition\n"
		"  -h, --help           show this help and exit\n"
		"\n"
		"SIZE takes the suffixes KiB, MiB, GiB (or K, M, G; powers of 1024).\n"
		"\n"
		"Output: one line per mode and repetition, then one JSON line per mode:\n"
		"  {\"bench\":\"fabric\",\"mode\":...,\"provider\":...,\"bytes\":...,\"piece\":...,\n"
		"   \"inflight\":...,\"reps\":...,\"gbps_median\":...,\"seconds\":[...]}\n"
		"GB/s are 1e9 bytes per second. A provider without FI_RMA skips rma.\n"
		"\n"
		"Exit status: 0 on success, 77 if the provider is not available here,\n"
		"2 on a usage error, 1 on any other error (a libfabric error names the call).\n"
		"\n"
		"Examples:\n"
		"  fabric-bench --bytes 1GiB --reps 3\n"
		"  fabric-bench --provider shm --addr '' --mode tagged --piece 1MiB\n");
}

static uint64_t parse_size(const char *opt, const char *s)
{
	static const struct {
		const char *suffix;
		uint64_t mult;
	} units[] = {
		{ "", 1 }, { "B", 1 },
		{ "K", KIB }, { "KiB", KIB }, { "M", MIB }, { "MiB", MIB },
		{ "G", GIB }, { "GiB", GIB },
	};
	char *end;
	uint64_t v;

	errno = 0;
	if (*s < '0' || *s > '9')
		die_usage("%s: not a size: '%s'", opt, s);
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		die_usage("%s: not a size: '%s'", opt, s);
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcasecmp(end, units[i].suffix))
			continue;
		if (v == 0)
			die_usage("%s: must be above zero", opt);
		if (v > (UINT64_C(1) << 48) / units[i].mult)
			die_usage("%s: too large: '%s'", opt, s);
		return v * units[i].mult;
	}
	die_usage("%s: unknown unit in '%s' (use KiB, MiB or GiB)", opt, s);
}

static unsigned parse_count(const char *opt, const char *s, unsigned max)
{
	char *end;
	unsigned long v;

	errno = 0;
	if (*s < '0' || *s > '9')
		die_usage("%s: not a number: '%s'", opt, s);
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end)
		die_usage("%s: not a number: '%s'", opt, s);
	if (v < 1 || v > max)
		die_usage("%s: must be 1 .. %u", opt, max);
	return (unsigned)v;
}

static void parse_options(struct options *o, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "provider", required_argument, NULL, 'p' },
		{ "addr", required_argument, NULL, 'a' },
		{ "bytes", required_argument, NULL, 'b' },
		{ "piece", required_argument, NULL, 'P' },
		{ "inflight", required_argument, NULL, 'i' },
		{ "reps", required_argument, NULL, 'r' },
		{ "mode", required_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*o = (struct options){
		.provider = "tcp;ofi_rxm",
		.addr = "127.0.0.1",
		.bytes = GIB,
		.piece = 8 * MIB,
		.inflight = 8,
		.reps = 3,
		.modes = { true, true },
	};
	while ((c = getopt_long(argc, argv, "p:a:b:P:i:r:m:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (!*optarg)
				die_usage("--provider: empty name");
			o->provider = optarg;
			break;
		case 'a':
			o->addr = optarg;
			break;
		case 'b':
			o->bytes = parse_size("--bytes", optarg);
			break;
		case 'P':
			o->piece = parse_size("--piece", optarg);
			break;
		case 'i':
			o->inflight = parse_count("--inflight", optarg, MAX_INFLIGHT);
			break;
		case 'r':
			o->reps = parse_count("--reps", optarg, MAX_REPS);
			break;
		case 'm':
			if (!strcmp(optarg, "tagged")) {
				o->modes[MODE_TAGGED] = true;
				o->modes[MODE_RMA] = false;
			} else if (!strcmp(optarg, "rma")) {
				o->modes[MODE_TAGGED] = false;
				o->modes[MODE_RMA] = true;
			} else if (!strcmp(optarg, "both")) {
				o->modes[MODE_TAGGED] = true;
				o->modes[MODE_RMA] = true;
			} else {
				die_usage("--mode: '%s' is not tagged, rma or both", optarg);
			}
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			fprintf(stderr, "Try 'fabric-bench --help'.\n");
			exit(2);
		}
	}
	if (optind < argc)
		die_usage("unexpected argument '%s' (try --help)", argv[optind]);
	if (o->bytes > SIZE_MAX / 2)
		die_usage("--bytes: too large for this machine");
	if (o->piece > o->bytes)
		o->piece = o->bytes;
}

/* ---- data pattern and checksum ------------------------------------------- */

static uint64_t pattern_word(uint64_t i)
{
	uint64_t z = i + UINT64_C(0x9e3779b97f4a7c15);

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static void pattern_fill(unsigned char *buf, uint64_t len)
{
	uint64_t words = len / 8, w;

	for (uint64_t i = 0; i < words; i++) {
		w = pattern_word(i);
		memcpy(buf + i * 8, &w, 8);
	}
	if (len % 8) {
		w = pattern_word(words);
		memcpy(buf + words * 8, &w, len % 8);
	}
}

/* Where buf first differs from the pattern, or len if nowhere. */
static uint64_t pattern_first_mismatch(const unsigned char *buf, uint64_t len)
{
	uint64_t w;

	for (uint64_t off = 0; off < len; off += 8) {
		uint64_t n = len - off < 8 ? len - off : 8;

		w = pattern_word(off / 8);
		if (memcmp(buf + off, &w, n)) {
			for (uint64_t k = 0; k < n; k++)
				if (buf[off + k] != ((const unsigned char *)&w)[k])
					return off + k;
		}
	}
	return len;
}

#define PRIME1 UINT64_C(0x9e3779b185ebca87)
#define PRIME2 UINT64_C(0xc2b2ae3d27d4eb4f)

static uint64_t rotl64(uint64_t x, unsigned r)
{
	return (x << r) | (x >> (64 - r));
}

static uint64_t mix_round(uint64_t acc, uint64_t w)
{
	return rotl64(acc + w * PRIME2, 31) * PRIME1;
}

/*
 * Order-sensitive 64-bit checksum (four interleaved multiply-rotate lanes):
 * pieces landing at the wrong offset change it, as do flipped bits.
 */
static uint64_t checksum(const unsigned char *buf, uint64_t len)
{
	uint64_t acc[4] = { PRIME1 + PRIME2, PRIME2, 0, -PRIME1 };
	uint64_t blocks = len / 32, h, w[4];
	uint64_t off;

	for (uint64_t b = 0; b < blocks; b++) {
		memcpy(w, buf + b * 32, 32);
		acc[0] = mix_round(acc[0], w[0]);
		acc[1] = mix_round(acc[1], w[1]);
		acc[2] = mix_round(acc[2], w[2]);
		acc[3] = mix_round(acc[3], w[3]);
	}
	h = rotl64(acc[0], 1) + rotl64(acc[1], 7) + rotl64(acc[2], 12) + rotl64(acc[3], 18);
	for (off = blocks * 32; off < len; off++)
		h = rotl64(h ^ (buf[off] * PRIME1), 11) * PRIME2;
	h ^= len;
	h ^= h >> 33;
	h *= PRIME2;
	h ^= h >> 29;
	return h;
}

/* ---- fabric endpoint ------------------------------------------------------- */

enum op_kind { OP_DATA, OP_CTL_SEND, OP_CTL_RECV };

/* One outstanding operation; FI_CONTEXT wants the fi_context first. */
struct op {
	struct fi_context fi_ctx;
	enum op_kind kind;
	uint64_t piece;     /* OP_DATA: piece index */
	size_t len;         /* OP_DATA: its length */
	bool done;          /* OP_CTL_*: its completion has been read */
};

enum msg_type { MSG_HELLO = 1, MSG_READY, MSG_GO, MSG_DONE, MSG_VERIFIED };

#define MSG_MAGIC 0x46424e43u  /* "FBNC" */

/* The control messages between sender and receiver. */
struct ctl_msg {
	uint32_t magic;
	uint32_t type;
	uint32_t rep;
	uint32_t mode;
	uint64_t bytes;         /* HELLO: transfer size, to cross-check */
	uint64_t piece;         /* HELLO: piece size */
	uint64_t sum;           /* HELLO: checksum of the source */
	uint64_t rma_addr;      /* READY: destination for fi_write */
	uint64_t rma_key;       /* READY: its key */
	uint32_t rma;           /* READY: the receiver registered it for FI_RMA */
	uint32_t ok;            /* VERIFIED: checksum matched */
	uint64_t bad_offset;    /* VERIFIED: first wrong byte, if not ok */
	uint32_t namelen;       /* HELLO: sender's endpoint address */
	uint8_t name[ADDR_MAX];
};

struct endpoint {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_cq *cq;
	struct fid_av *av;
	struct fid_ep *ep;
	fi_addr_t peer;
	bool rma;               /* the provider gave FI_RMA */
	uint64_t next_key;      /* for providers without FI_MR_PROV_KEY */

	/* control messages: one send and one receive buffer, registered */
	struct ctl_msg *ctl;    /* [0] send, [1] receive */
	struct fid_mr *ctl_mr;
	void *ctl_desc;
	struct op ctl_send_op;
	struct op ctl_recv_op;

	/* data operations */
	struct op *ops;
	unsigned nops;
	unsigned *free_ops;
	unsigned nfree;
	uint64_t data_done;     /* data completions since data_reset() */
};

static struct fi_info *getinfo_try(const struct options *o, uint64_t caps, int *ret)
{
	struct fi_info *hints, *info = NULL;

	hints = fi_allocinfo();
	if (!hints)
		die("fi_allocinfo: out of memory");
	hints->caps = caps;
	/* We pass a struct fi_context with every operation. */
	hints->mode = FI_CONTEXT;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	/* Every registration mode we handle: local descriptors, virtual or
	 * offset-based remote addresses, provider keys, MRs bound to the EP. */
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				      FI_MR_PROV_KEY | FI_MR_ENDPOINT;
	/* A completion means the data is in the receiver's buffer. */
	hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
	hints->fabric_attr->prov_name = strdup(o->provider);
	if (!hints->fabric_attr->prov_name)
		die("out of memory");
	/* Bind to --addr (loopback by default), never to another interface;
	 * an empty --addr leaves the address to the provider (shm). */
	if (*o->addr)
		*ret = fi_getinfo(FABRIC_VERSION, o->addr, NULL, FI_SOURCE, hints, &info);
	else
		*ret = fi_getinfo(FABRIC_VERSION, NULL, NULL, 0, hints, &info);
	fi_freeinfo(hints);
	return *ret ? NULL : info;
}

static struct fi_info *getinfo(const struct options *o, bool *rma)
{
	uint64_t base = FI_MSG | FI_TAGGED;
	struct fi_info *info;
	int ret;

	*rma = false;
	if (o->modes[MODE_RMA]) {
		info = getinfo_try(o, base | FI_RMA, &ret);
		if (info) {
			*rma = true;
			return info;
		}
		if (ret != -FI_ENODATA)
			die_fi("fi_getinfo", o->provider, ret);
	}
	info = getinfo_try(o, base, &ret);
	if (ret == -FI_ENODATA)
		die_code(EXIT_SKIP, "fi_getinfo: provider \"%s\" offers no RDM endpoint with FI_MSG, "
			 "FI_TAGGED and FI_DELIVERY_COMPLETE on %s (%s)", o->provider,
			 *o->addr ? o->addr : "its default address", fi_strerror(-ret));
	if (ret)
		die_fi("fi_getinfo", o->provider, ret);
	return info;
}

static void ep_open(struct endpoint *e, const struct options *o, unsigned recv_window)
{
	struct fi_cq_attr cq_attr = { 0 };
	struct fi_av_attr av_attr = { 0 };
	int ret;

	e->info = getinfo(o, &e->rma);
	if (e->info->domain_attr->mr_key_size > sizeof(uint64_t))
		die("provider \"%s\": memory keys of %zu bytes are not supported",
		    o->provider, e->info->domain_attr->mr_key_size);
	ret = fi_fabric(e->info->fabric_attr, &e->fabric, NULL);
	if (ret)
		die_fi("fi_fabric", e->info->fabric_attr->name, ret);
	ret = fi_domain(e->fabric, e->info, &e->domain, NULL);
	if (ret)
		die_fi("fi_domain", e->info->domain_attr->name, ret);

	cq_attr.format = FI_CQ_FORMAT_TAGGED;
	cq_attr.wait_obj = FI_WAIT_NONE;
	cq_attr.size = recv_window + o->inflight + 16;
	if (cq_attr.size < 1024)
		cq_attr.size = 1024;
	ret = fi_cq_open(e->domain, &cq_attr, &e->cq, NULL);
	if (ret)
		die_fi("fi_cq_open", "completion queue", ret);

	av_attr.type = FI_AV_UNSPEC;
	av_attr.count = 2;
	ret = fi_av_open(e->domain, &av_attr, &e->av, NULL);
	if (ret)
		die_fi("fi_av_open", "address vector", ret);

	ret = fi_endpoint(e->domain, e->info, &e->ep, NULL);
	if (ret)
		die_fi("fi_endpoint", "RDM endpoint", ret);
	ret = fi_ep_bind(e->ep, &e->av->fid, 0);
	if (ret)
		die_fi("fi_ep_bind", "address vector", ret);
	ret = fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV);
	if (ret)
		die_fi("fi_ep_bind", "completion queue", ret);
	ret = fi_enable(e->ep);
	if (ret)
		die_fi("fi_enable", "RDM endpoint", ret);
	e->peer = FI_ADDR_UNSPEC;
	e->next_key = 1;
}

/* Register buf for access, honouring the provider's FI_MR_* mode bits. */
static struct fid_mr *mr_register(struct endpoint *e, void *buf, size_t len,
				  uint64_t access, const char *what)
{
	int mr_mode = e->info->domain_attr->mr_mode;
	uint64_t key = (mr_mode & FI_MR_PROV_KEY) ? 0 : e->next_key++;
	struct fid_mr *mr;
	int ret;

	ret = fi_mr_reg(e->domain, buf, len, access, 0, key, 0, &mr, NULL);
	if (ret)
		die_fi("fi_mr_reg", what, ret);
	if (mr_mode & FI_MR_ENDPOINT) {
		ret = fi_mr_bind(mr, &e->ep->fid, 0);
		if (ret)
			die_fi("fi_mr_bind", what, ret);
		ret = fi_mr_enable(mr);
		if (ret)
			die_fi("fi_mr_enable", what, ret);
	}
	return mr;
}

static void *map_buffer(size_t len, const char *what)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die("mmap %zu bytes (%s): %s", len, what, strerror(errno));
	return p;
}

static void ctl_setup(struct endpoint *e)
{
	e->ctl = map_buffer(2 * sizeof(struct ctl_msg), "control messages");
	memset(e->ctl, 0, 2 * sizeof(struct ctl_msg));
	e->ctl_mr = mr_register(e, e->ctl, 2 * sizeof(struct ctl_msg), FI_SEND | FI_RECV,
				"control messages");
	e->ctl_desc = fi_mr_desc(e->ctl_mr);
	e->ctl_send_op.kind = OP_CTL_SEND;
	e->ctl_recv_op.kind = OP_CTL_RECV;
}

static void data_ops_setup(struct endpoint *e, unsigned n)
{
	e->ops = calloc(n, sizeof(*e->ops));
	e->free_ops = calloc(n, sizeof(*e->free_ops));
	if (!e->ops || !e->free_ops)
		die("out of memory");
	e->nops = n;
}

static void data_reset(struct endpoint *e)
{
	e->nfree = e->nops;
	for (unsigned i = 0; i < e->nops; i++) {
		e->ops[i].kind = OP_DATA;
		e->free_ops[i] = e->nops - 1 - i;
	}
	e->data_done = 0;
}

static const char *op_name(const struct op *op)
{
	switch (op->kind) {
	case OP_DATA:
		return "data operation";
	case OP_CTL_SEND:
		return "control send";
	case OP_CTL_RECV:
		return "control receive";
	}
	return "operation";
}

static void __attribute__((noreturn)) die_cq_error(struct endpoint *e)
{
	struct fi_cq_err_entry err = { 0 };
	char provbuf[256];
	const char *prov_msg;
	ssize_t ret;

	ret = fi_cq_readerr(e->cq, &err, 0);
	if (ret < 0)
		die_fi("fi_cq_readerr", "completion queue", ret);
	prov_msg = fi_cq_strerror(e->cq, err.prov_errno, err.err_data, provbuf, sizeof(provbuf));
	die("fi_cq_read: %s failed: %s (%d); provider: %s",
	    err.op_context ? op_name(err.op_context) : "operation",
	    fi_strerror(err.err), -err.err, prov_msg ? prov_msg : "-");
}

/*
 * Read what completions there are and account for them. Returns how many
 * were read; dies on a completion error or when nothing has completed for
 * STALL_SECONDS since *last (which it moves on whenever something does).
 */
static unsigned progress(struct endpoint *e, double *last, const char *waiting_for)
{
	struct fi_cq_tagged_entry ent[16];
	ssize_t n;

	n = fi_cq_read(e->cq, ent, 16);
	if (n == -FI_EAGAIN) {
		static unsigned spins;

		if ((++spins & 0xfff) == 0 && now_seconds() - *last > STALL_SECONDS)
			die("no completion for %d s while waiting for %s", STALL_SECONDS, waiting_for);
		return 0;
	}
	if (n == -FI_EAVAIL)
		die_cq_error(e);
	if (n < 0)
		die_fi("fi_cq_read", "completion queue", n);
	for (ssize_t i = 0; i < n; i++) {
		struct op *op = ent[i].op_context;

		if (!op)
			die("fi_cq_read: completion without a context");
		if (op->kind == OP_DATA) {
			if ((ent[i].flags & (FI_RECV | FI_TAGGED)) == (FI_RECV | FI_TAGGED) &&
			    (ent[i].tag != op->piece || ent[i].len != op->len))
				die("fi_cq_read: tagged receive for piece %" PRIu64 " (%zu bytes) "
				    "completed with tag %" PRIu64 ", %zu bytes", op->piece, op->len,
				    (uint64_t)ent[i].tag, ent[i].len);
			e->free_ops[e->nfree++] = (unsigned)(op - e->ops);
			e->data_done++;
		} else {
			op->done = true;
		}
	}
	*last = now_seconds();
	return (unsigned)n;
}

static void ctl_recv_post(struct endpoint *e)
{
	double last = now_seconds();
	ssize_t ret;

	e->ctl_recv_op.done = false;
	memset(&e->ctl[1], 0, sizeof(e->ctl[1]));
	while ((ret = fi_recv(e->ep, &e->ctl[1], sizeof(e->ctl[1]), e->ctl_desc, FI_ADDR_UNSPEC,
			      &e->ctl_recv_op.fi_ctx)) == -FI_EAGAIN)
		progress(e, &last, "room to post a control receive");
	if (ret)
		die_fi("fi_recv", "control message", ret);
}

/* Wait for the posted control receive; it must be of type. */
static const struct ctl_msg *ctl_recv_wait(struct endpoint *e, enum msg_type type,
					   const char *waiting_for)
{
	double last = now_seconds();
	const struct ctl_msg *m = &e->ctl[1];

	while (!e->ctl_recv_op.done)
		progress(e, &last, waiting_for);
	if (m->magic != MSG_MAGIC || m->type != (uint32_t)type)
		die("protocol error: expected message %d (%s), got %u", type, waiting_for, m->type);
	return m;
}

/* Send ctl[0] and wait for its completion. */
static void ctl_send(struct endpoint *e, enum msg_type type)
{
	double last = now_seconds();
	ssize_t ret;

	e->ctl[0].magic = MSG_MAGIC;
	e->ctl[0].type = type;
	e->ctl_send_op.done = false;
	while ((ret = fi_send(e->ep, &e->ctl[0], sizeof(e->ctl[0]), e->ctl_desc, e->peer,
			      &e->ctl_send_op.fi_ctx)) == -FI_EAGAIN)
		progress(e, &last, "room to send a control message");
	if (ret)
		die_fi("fi_send", "control message", ret);
	while (!e->ctl_send_op.done)
		progress(e, &last, "a control send to complete");
}

static fi_addr_t av_insert(struct endpoint *e, const void *name)
{
	fi_addr_t addr = FI_ADDR_UNSPEC;
	int ret;

	ret = fi_av_insert(e->av, name, 1, &addr, 0, NULL);
	if (ret != 1)
		die_fi("fi_av_insert", "peer address", ret < 0 ? ret : -FI_EINVAL);
	return addr;
}

static void ep_close(struct endpoint *e, struct fid_mr *data_mr)
{
	/* Teardown errors do not change a measured result; ignore them. */
	if (data_mr)
		fi_close(&data_mr->fid);
	if (e->ctl_mr)
		fi_close(&e->ctl_mr->fid);
	fi_close(&e->ep->fid);
	fi_close(&e->av->fid);
	fi_close(&e->cq->fid);
	fi_close(&e->domain->fid);
	fi_close(&e->fabric->fid);
	fi_freeinfo(e->info);
	free(e->ops);
	free(e->free_ops);
}

static uint64_t piece_count(const struct options *o)
{
	return (o->bytes + o->piece - 1) / o->piece;
}

static size_t piece_len(const struct options *o, uint64_t i)
{
	uint64_t off = i * o->piece;

	return (size_t)(o->bytes - off < o->piece ? o->bytes - off : o->piece);
}

/* ---- receiver --------------------------------------------------------------- */

static void full_write(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("write to the address pipe: %s", n < 0 ? strerror(errno) : "short write");
		p += n;
		len -= (size_t)n;
	}
}

static int full_read(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("read from the address pipe: %s", strerror(errno));
		if (n == 0)
			return -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Post trecvs for pieces [*next, npieces) while there is room. */
static void post_trecvs(struct endpoint *e, const struct options *o, unsigned char *dst,
			void *desc, uint64_t npieces, uint64_t *next, double *last)
{
	while (*next < npieces && e->nfree) {
		unsigned slot = e->free_ops[--e->nfree];
		struct op *op = &e->ops[slot];
		uint64_t i = *next;
		ssize_t ret;

		op->piece = i;
		op->len = piece_len(o, i);
		ret = fi_trecv(e->ep, dst + i * o->piece, op->len, desc, e->peer, i, 0, &op->fi_ctx);
		if (ret == -FI_EAGAIN) {
			e->free_ops[e->nfree++] = slot;
			progress(e, last, "room to post a tagged receive");
			continue;
		}
		if (ret)
			die_fi("fi_trecv", "destination piece", ret);
		(*next)++;
	}
}

static int run_receiver(const struct options *o, int addr_fd)
{
	struct endpoint e = { 0 };
	uint64_t npieces = piece_count(o), source_sum, access;
	unsigned window;
	char name[ADDR_MAX];
	size_t namelen = sizeof(name);
	uint32_t len32;
	unsigned char *dst;
	struct fid_mr *mr;
	void *desc;
	int ret;

	role = "receiver";
	window = npieces < MAX_RECV_WINDOW ? (unsigned)npieces : MAX_RECV_WINDOW;
	ep_open(&e, o, window);
	if (e.info->rx_attr->size > 1 && window > e.info->rx_attr->size - 1)
		window = (unsigned)e.info->rx_attr->size - 1;
	data_ops_setup(&e, window);
	ctl_setup(&e);

	/* Destination: every page faulted now, before any timing. */
	dst = map_buffer(o->bytes, "destination");
	memset(dst, 0xa5, o->bytes);
	access = FI_RECV | (e.rma ? FI_REMOTE_WRITE : 0);
	mr = mr_register(&e, dst, o->bytes, access, "destination");
	desc = fi_mr_desc(mr);

	/* The first message is the sender's HELLO; post for it, then publish. */
	ctl_recv_post(&e);
	ret = fi_getname(&e.ep->fid, name, &namelen);
	if (ret)
		die_fi("fi_getname", "receiver address", ret);
	len32 = (uint32_t)namelen;
	full_write(addr_fd, &len32, sizeof(len32));
	full_write(addr_fd, name, namelen);
	close(addr_fd);

	const struct ctl_msg *hello = ctl_recv_wait(&e, MSG_HELLO, "the sender's HELLO");
	if (hello->bytes != o->bytes || hello->piece != o->piece ||
	    hello->namelen == 0 || hello->namelen > ADDR_MAX)
		die("protocol error: bad HELLO");
	source_sum = hello->sum;
	e.peer = av_insert(&e, hello->name);

	memset(&e.ctl[0], 0, sizeof(e.ctl[0]));
	e.ctl[0].rma = e.rma;
	if (e.rma) {
		e.ctl[0].rma_addr = (e.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ?
				    (uint64_t)(uintptr_t)dst : 0;
		e.ctl[0].rma_key = fi_mr_key(mr);
		if (e.ctl[0].rma_key == FI_KEY_NOTAVAIL)
			die("fi_mr_key (destination): no key available");
	}
	ctl_send(&e, MSG_READY);

	for (unsigned rep = 0; rep < o->reps; rep++) {
		for (int mode = 0; mode < MODE_COUNT; mode++) {
			uint64_t next = 0, sum, bad;
			double last = now_seconds();

			if (!o->modes[mode] || (mode == MODE_RMA && !e.rma))
				continue;
			/* Untimed: clear the destination, so that only this
			 * transfer can make the checksum match. */
			memset(dst, 0, o->bytes);
			data_reset(&e);
			if (mode == MODE_TAGGED)
				post_trecvs(&e, o, dst, desc, npieces, &next, &last);
			ctl_recv_post(&e);
			memset(&e.ctl[0], 0, sizeof(e.ctl[0]));
			e.ctl[0].rep = rep;
			e.ctl[0].mode = (uint32_t)mode;
			ctl_send(&e, MSG_GO);
			if (mode == MODE_TAGGED) {
				while (e.data_done < npieces) {
					post_trecvs(&e, o, dst, desc, npieces, &next, &last);
					progress(&e, &last, "tagged pieces");
				}
			}
			const struct ctl_msg *done = ctl_recv_wait(&e, MSG_DONE, "the sender's DONE");
			if (done->rep != rep || done->mode != (uint32_t)mode)
				die("protocol error: DONE for another transfer");

			sum = checksum(dst, o->bytes);
			memset(&e.ctl[0], 0, sizeof(e.ctl[0]));
			e.ctl[0].rep = rep;
			e.ctl[0].mode = (uint32_t)mode;
			e.ctl[0].ok = sum == source_sum;
			if (!e.ctl[0].ok) {
				bad = pattern_first_mismatch(dst, o->bytes);
				e.ctl[0].bad_offset = bad;
				fprintf(stderr, "fabric-bench: receiver: %s rep %u: destination checksum "
					"%016" PRIx64 " != source %016" PRIx64 "; first wrong byte at "
					"offset %" PRIu64 " (piece %" PRIu64 ")\n", mode_names[mode],
					rep + 1, sum, source_sum, bad, bad / o->piece);
			}
			ctl_send(&e, MSG_VERIFIED);
			if (!e.ctl[0].ok)
				return 1;
		}
	}
	ep_close(&e, mr);
	munmap(dst, o->bytes);
	return 0;
}

/* ---- sender ------------------------------------------------------------------ */

/* Move all pieces with at most inflight outstanding; returns seconds taken. */
static double transfer(struct endpoint *e, const struct options *o, enum mode mode,
		       const unsigned char *src, void *desc, uint64_t rma_addr, uint64_t rma_key)
{
	uint64_t npieces = piece_count(o), next = 0;
	double t0, t1, last;

	data_reset(e);
	t0 = now_seconds();
	last = t0;
	while (e->data_done < npieces) {
		while (next < npieces && e->nfree) {
			unsigned slot = e->free_ops[--e->nfree];
			struct op *op = &e->ops[slot];
			uint64_t off = next * o->piece;
			size_t len = piece_len(o, next);
			ssize_t ret;

			op->piece = next;
			op->len = len;
			if (mode == MODE_TAGGED)
				ret = fi_tsend(e->ep, src + off, len, desc, e->peer, next, &op->fi_ctx);
			else
				ret = fi_write(e->ep, src + off, len, desc, e->peer, rma_addr + off,
					       rma_key, &op->fi_ctx);
			if (ret == -FI_EAGAIN) {
				e->free_ops[e->nfree++] = slot;
				break;
			}
			if (ret)
				die_fi(mode == MODE_TAGGED ? "fi_tsend" : "fi_write", "source piece", ret);
			next++;
		}
		progress(e, &last, mode == MODE_TAGGED ? "tagged sends" : "RMA writes");
	}
	t1 = now_seconds();
	return t1 - t0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(const double *v, unsigned n)
{
	double s[MAX_REPS];

	memcpy(s, v, n * sizeof(*v));
	qsort(s, n, sizeof(*s), cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static void json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void human_size(char *buf, size_t len, uint64_t v)
{
	if (v >= GIB && v % GIB == 0)
		snprintf(buf, len, "%" PRIu64 " GiB", v / GIB);
	else if (v >= MIB && v % MIB == 0)
		snprintf(buf, len, "%" PRIu64 " MiB", v / MIB);
	else if (v >= KIB && v % KIB == 0)
		snprintf(buf, len, "%" PRIu64 " KiB", v / KIB);
	else
		snprintf(buf, len, "%" PRIu64 " bytes", v);
}

static int run_sender(const struct options *o, int addr_fd)
{
	static double seconds[MODE_COUNT][MAX_REPS];
	struct endpoint e = { 0 };
	uint64_t rma_addr = 0, rma_key = 0, access;
	char peer_name[ADDR_MAX], bytes_s[32], piece_s[32];
	size_t namelen = ADDR_MAX;
	uint32_t len32;
	unsigned char *src;
	struct fid_mr *mr;
	bool rma;
	void *desc;
	int ret;

	role = "sender";
	if (full_read(addr_fd, &len32, sizeof(len32)) || len32 == 0 || len32 > ADDR_MAX ||
	    full_read(addr_fd, peer_name, len32))
		die("the receiver exited before publishing its address");
	close(addr_fd);

	ep_open(&e, o, 0);
	data_ops_setup(&e, o->inflight);
	ctl_setup(&e);
	e.peer = av_insert(&e, peer_name);

	/* Source: a deterministic pattern, every page written before timing. */
	src = map_buffer(o->bytes, "source");
	pattern_fill(src, o->bytes);
	access = FI_SEND | (e.rma ? FI_WRITE : 0);
	mr = mr_register(&e, src, o->bytes, access, "source");
	desc = fi_mr_desc(mr);

	memset(&e.ctl[0], 0, sizeof(e.ctl[0]));
	e.ctl[0].bytes = o->bytes;
	e.ctl[0].piece = o->piece;
	e.ctl[0].sum = checksum(src, o->bytes);
	ret = fi_getname(&e.ep->fid, e.ctl[0].name, &namelen);
	if (ret)
		die_fi("fi_getname", "sender address", ret);
	e.ctl[0].namelen = (uint32_t)namelen;
	ctl_recv_post(&e);
	ctl_send(&e, MSG_HELLO);
	const struct ctl_msg *ready = ctl_recv_wait(&e, MSG_READY, "the receiver's READY");
	rma = e.rma && ready->rma;
	rma_addr = ready->rma_addr;
	rma_key = ready->rma_key;

	human_size(bytes_s, sizeof(bytes_s), o->bytes);
	human_size(piece_s, sizeof(piece_s), o->piece);
	printf("fabric-bench: provider %s (fabric %s, domain %s), %s in %s pieces, %u in flight, "
	       "%u reps, FI_DELIVERY_COMPLETE\n",
	       e.info->fabric_attr->prov_name, e.info->fabric_attr->name,
	       e.info->domain_attr->name, bytes_s, piece_s, o->inflight, o->reps);
	if (o->modes[MODE_RMA] && !rma)
		printf("fabric-bench: provider %s offers no FI_RMA: rma skipped\n", o->provider);
	if (!o->modes[MODE_TAGGED] && !rma) {
		ep_close(&e, mr);
		return EXIT_SKIP;
	}
	fflush(stdout);

	for (unsigned rep = 0; rep < o->reps; rep++) {
		for (int mode = 0; mode < MODE_COUNT; mode++) {
			const struct ctl_msg *m;
			double s;

			if (!o->modes[mode] || (mode == MODE_RMA && !rma))
				continue;
			ctl_recv_post(&e);
			m = ctl_recv_wait(&e, MSG_GO, "the receiver's GO");
			if (m->rep != rep || m->mode != (uint32_t)mode)
				die("protocol error: GO for another transfer");

			s = transfer(&e, o, (enum mode)mode, src, desc, rma_addr, rma_key);

			ctl_recv_post(&e);
			memset(&e.ctl[0], 0, sizeof(e.ctl[0]));
			e.ctl[0].rep = rep;
			e.ctl[0].mode = (uint32_t)mode;
			ctl_send(&e, MSG_DONE);
			m = ctl_recv_wait(&e, MSG_VERIFIED, "the receiver's verification");
			if (m->rep != rep || m->mode != (uint32_t)mode)
				die("protocol error: VERIFIED for another transfer");
			if (!m->ok)
				die("%s rep %u: the destination does not match the source "
				    "(first wrong byte at offset %" PRIu64 ")",
				    mode_names[mode], rep + 1, m->bad_offset);
			seconds[mode][rep] = s;
			printf("%-6s rep %u/%u: %" PRIu64 " bytes in %.6f s = %.3f GB/s (verified)\n",
			       mode_names[mode], rep + 1, o->reps, o->bytes, s, (double)o->bytes / s / 1e9);
			fflush(stdout);
		}
	}

	for (int mode = 0; mode < MODE_COUNT; mode++) {
		double gbps[MAX_REPS];

		if (!o->modes[mode] || (mode == MODE_RMA && !rma))
			continue;
		for (unsigned rep = 0; rep < o->reps; rep++)
			gbps[rep] = (double)o->bytes / seconds[mode][rep] / 1e9;
		printf("{\"bench\":\"fabric\",\"mode\":\"%s\",\"provider\":", mode_names[mode]);
		json_string(e.info->fabric_attr->prov_name);
		printf(",\"bytes\":%" PRIu64 ",\"piece\":%" PRIu64 ",\"inflight\":%u,\"reps\":%u,"
		       "\"gbps_median\":%.4f,\"seconds\":[",
		       o->bytes, o->piece, o->inflight, o->reps, median(gbps, o->reps));
		for (unsigned rep = 0; rep < o->reps; rep++)
			printf("%s%.6f", rep ? "," : "", seconds[mode][rep]);
		printf("]}\n");
	}
	fflush(stdout);
	ep_close(&e, mr);
	munmap(src, o->bytes);
	return 0;
}

/* ---- main: fork the two sides and wait for both ----------------------------- */

static int exit_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

int main(int argc, char **argv)
{
	struct options o;
	pid_t receiver, sender, pid;
	int pipefd[2], status, code = 0, left = 2;

	parse_options(&o, argc, argv);
	if (pipe(pipefd))
		die("pipe: %s", strerror(errno));
	fflush(NULL);

	receiver = fork();
	if (receiver < 0)
		die("fork: %s", strerror(errno));
	if (receiver == 0) {
		close(pipefd[0]);
		exit(run_receiver(&o, pipefd[1]));
	}
	close(pipefd[1]);
	sender = fork();
	if (sender < 0) {
		kill(receiver, SIGTERM);
		die("fork: %s", strerror(errno));
	}
	if (sender == 0)
		exit(run_sender(&o, pipefd[0]));
	close(pipefd[0]);

	/* The first side to fail takes the other down: it would only wait. */
	while (left > 0) {
		pid = waitpid(-1, &status, 0);
		if (pid < 0) {
			if (errno == EINTR)
				continue;
			die("waitpid: %s", strerror(errno));
		}
		if (pid != receiver && pid != sender)
			continue;
		left--;
		if (exit_code(status) != 0 && code == 0) {
			code = exit_code(status);
			if (WIFSIGNALED(status))
				fprintf(stderr, "fabric-bench: the %s died of signal %d\n",
					pid == sender ? "sender" : "receiver", WTERMSIG(status));
			pid_t other = pid == sender ? receiver : sender;

			if (left && other > 0)
				kill(other, SIGTERM);
		}
		if (pid == sender)
			sender = -1;
		else
			receiver = -1;
	}
	return code;
}
