/* SPDX-License-Identifier: MIT */
/*
 * ckptd's settings, one entry each: key, type, default, bounds, --help
 * text, the reference file's description, and where the value goes. The
 * file keys, CKPTD_<KEY> variables, --key flags, --help and the reference
 * file are all generated from this table (config.c), so a setting cannot
 * exist in one place and be missing in another. An option whose value needs
 * more than its type's checks names a check hook; the hooks of options that
 * belong to another unit live with that unit (events.c), the others here.
 *
 * One concept: the table, which is data (most of its length is help text).
 */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_internal.h"
#include "events.h"
#include "metrics.h"
#include "proto.h"

static int allowed_group_check(struct ckptd_config *cfg, const char *value, char *msg,
			       size_t msglen);
static int metrics_listen_check(struct ckptd_config *cfg, const char *value, char *msg,
				size_t msglen);

static const char *const direct_io_values[] = { "auto", "on", "off", NULL };
static const char *const backpressure_values[] = { "block", "skip", NULL };
static const char *const log_level_values[] = { "error", "warn", "info", "debug", NULL };
static const char *const lock_memory_values[] = { "auto", "on", "off", NULL };
static const char *const s3_addressing_values[] = { "auto", "path", "virtual", NULL };
static const char *const s3_compress_values[] = { "none", "zstd", NULL };


const struct config_option config_options[] = {
	{
		.key = "socket", .type = OPT_PATH, .def = SOCKET_FALLBACK, .computed_default = true,
		.arg = "PATH", .help = "control socket the ranks connect to",
		.description =
			"Unix socket (SOCK_SEQPACKET) the training ranks connect to.\n"
			"Default: $CKPT_SOCKET if set, else $XDG_RUNTIME_DIR/ckptd.sock\n"
			"when ckptd runs as a non-root user that has it, else\n"
			"/run/ckpt/ckptd.sock: the same rule libckpt uses to find ckptd.",
		.offset = FIELD(socket_path),
	},
	{
		.key = "socket_mode", .type = OPT_MODE, .def = "0660", .min = 0, .max = 0777,
		.arg = "MODE", .help = "permissions of the control socket (octal)",
		.description =
			"Permissions of the control socket, in octal. Whoever can connect\n"
			"can write checkpoints into the root as ckptd's user.",
		.offset = FIELD(socket_mode),
	},
	{
		.key = "allowed_group", .type = OPT_STRING, .def = "",
		.arg = "GROUP", .help = "group (name or gid) given the control socket",
		.description =
			"Group (name or numeric gid) that owns the control socket, so that\n"
			"its members may connect under socket_mode. Empty: leave the\n"
			"group of the socket as created.",
		.offset = FIELD(allowed_group),
		.check = allowed_group_check,
	},
	{
		.key = "root", .type = OPT_PATH, .def = "/var/lib/ckpt",
		.arg = "DIR", .help = "checkpoint root directory",
		.description =
			"Checkpoint root: checkpoints are written to\n"
			"<root>/<job>/step-<N>/. Should be a local file system or a\n"
			"parallel one mounted at the same path on every node of a job.",
		.offset = FIELD(root),
	},
	{
		.key = "staging_bytes", .type = OPT_SIZE, .def = "0", .min = 0, .max = UINT64_MAX,
		.arg = "SIZE", .help = "shared-memory staging budget; 0 = half of RAM",
		.description =
			"Total shared memory handed to ranks as staging slots, over all\n"
			"clients. A connect that would exceed it is refused. 0: half of\n"
			"the physical memory, resolved at start-up.",
		.offset = FIELD(staging_bytes),
	},
	{
		.key = "slots_per_rank", .type = OPT_UINT, .def = "2", .min = 1, .max = 64,
		.arg = "N", .help = "staging slots per rank",
		.description =
			"Staging slots per rank. With 2, a rank can copy save N+1 while\n"
			"save N is still being written; more slots absorb slower storage\n"
			"at the cost of memory (each slot holds a whole shard).",
		.offset = FIELD(slots_per_rank),
	},
	{
		.key = "queue_depth", .type = OPT_UINT, .def = "16", .min = 1, .max = 4096,
		.arg = "N", .help = "io_uring requests in flight",
		.description =
			"io_uring requests in flight, for all saves together. NVMe and\n"
			"parallel file systems need several in flight to reach full\n"
			"bandwidth; queue_depth x request_size is the data in flight.",
		.offset = FIELD(queue_depth),
	},
	{
		.key = "request_size", .type = OPT_SIZE, .def = "4MiB",
		.min = 4096, .max = 64ull << 20, .multiple = CKPT_ALIGN,
		.arg = "SIZE", .help = "bytes per write or read request",
		.description =
			"Bytes per io_uring write or read request; a multiple of 4KiB\n"
			"(O_DIRECT alignment), from 4KiB to 64MiB. Match the block\n"
			"device's largest request (/sys/block/DEV/queue/max_sectors_kb)\n"
			"or the file system's stripe size: fewer, larger requests win\n"
			"where the device limits requests per second.",
		.offset = FIELD(request_bytes),
	},
	{
		.key = "chunk_size", .type = OPT_SIZE, .def = "4MiB",
		.min = CKPT_CHUNK_MIN, .max = CKPT_CHUNK_MAX, .multiple = CKPT_ALIGN,
		.arg = "SIZE", .help = "checksum chunk size",
		.description =
			"Checksum chunk: every extent of a shard is checksummed (CRC-32C)\n"
			"in pieces of this size, recorded in the rank's index. Smaller\n"
			"chunks localise corruption; larger ones make smaller indexes.\n"
			"A multiple of 4KiB, from 64KiB to 64MiB.",
		.offset = FIELD(chunk_bytes),
	},
	{
		.key = "direct_io", .type = OPT_ENUM, .def = "auto", .values = direct_io_values,
		.arg = "auto|on|off", .help = "write shards with O_DIRECT",
		.description =
			"Write and read shards with O_DIRECT, bypassing the page cache.\n"
			"auto: use it where the file system accepts it, else buffered I/O;\n"
			"on: fail a save if O_DIRECT is refused; off: always buffered.",
		.offset = FIELD(direct_io),
	},
	{
		.key = "restore_agree_timeout_ms", .type = OPT_UINT, .def = "600000", .min = 100,
		.max = 86400000,
		.arg = "MS", .help = "wait for every rank of an agreed restore",
		.description =
			"An agreed restore (every rank of a job restores the same step)\n"
			"waits this long, from the first rank's request, for the other\n"
			"ranks of the job to ask; then every rank that asked gets an error\n"
			"naming the missing ones. Reading the shards is not limited.",
		.offset = FIELD(restore_agree_timeout_ms),
	},
	{
		.key = "keep_last", .type = OPT_UINT, .def = "3", .min = 0, .max = 1000000,
		.arg = "N", .help = "committed steps kept per job; 0 = all",
		.description =
			"Committed steps kept per job in the root; older ones are removed\n"
			"after a newer step commits. 0 keeps every step.",
		.offset = FIELD(keep_last),
	},
	{
		.key = "backpressure", .type = OPT_ENUM, .def = "block", .values = backpressure_values,
		.arg = "block|skip", .help = "what a save does when no slot is free",
		.description =
			"What a save does when the rank has no free slot because earlier\n"
			"saves are still being written. block: the save waits for a slot;\n"
			"skip: the save is refused with CKPT_E_SKIPPED and counted.",
		.offset = FIELD(backpressure),
	},
	{
		.key = "log_level", .type = OPT_ENUM, .def = "info", .values = log_level_values,
		.arg = "error|warn|info|debug", .help = "least severe messages logged",
		.description =
			"Least severe level written to the log (stderr):\n"
			"error, warn, info or debug.",
		.offset = FIELD(log_level),
	},
	{
		.key = "lock_memory", .type = OPT_ENUM, .def = "auto", .values = lock_memory_values,
		.arg = "auto|on|off", .help = "mlock staging memory",
		.description =
			"Lock staging memory in RAM (mlock) so it is never swapped out.\n"
			"auto: lock when RLIMIT_MEMLOCK or CAP_IPC_LOCK allows, else warn\n"
			"and go on; on: fail to start if it cannot; off: never lock.",
		.offset = FIELD(lock_memory),
	},
	{
		.key = "workers", .type = OPT_UINT, .def = "0", .min = 0, .max = 1024,
		.arg = "N", .help = "checksum threads; 0 = min(4, CPUs)",
		.description =
			"Worker threads that checksum chunks beside the event loop.\n"
			"0: min(4, online CPUs), resolved at start-up.",
		.offset = FIELD(workers),
	},
	{
		.key = "max_clients", .type = OPT_UINT, .def = "1024", .min = 1, .max = 65536,
		.arg = "N", .help = "most ranks connected at once",
		.description =
			"Most client connections (ranks) served at once; further\n"
			"connects are refused.",
		.offset = FIELD(max_clients),
	},
	{
		.key = "fixed_buffers", .type = OPT_BOOL, .def = "true",
		.arg = "true|false", .help = "register staging arenas with io_uring",
		.description =
			"Register staging arenas with io_uring as fixed buffers, which saves\n"
			"pinning pages on every request. Falls back to plain buffers when\n"
			"registration fails (RLIMIT_MEMLOCK).",
		.offset = FIELD(fixed_buffers),
	},
	{
		.key = "metrics_listen", .type = OPT_STRING, .def = "127.0.0.1:9464",
		.arg = "HOST:PORT", .help = "Prometheus metrics endpoint; \"off\" = none",
		.description =
			"Address of the HTTP endpoint serving Prometheus metrics\n"
			"(GET /metrics) and a health check (GET /healthz): a numeric\n"
			"IPv4 address and port, or [IPv6]:port. Port 0 picks a free port\n"
			"(logged, and written to metrics_port_file). Empty or \"off\": no\n"
			"endpoint. Metrics are listed in docs/METRICS.md.",
		.offset = FIELD(metrics_listen),
		.check = metrics_listen_check,
	},
	{
		.key = "metrics_port_file", .type = OPT_STRING, .def = "",
		.arg = "PATH", .help = "file the metrics port is written to",
		.description =
			"When set, the port the metrics endpoint listens on is written\n"
			"to this file at start-up (useful with port 0). Empty: none.",
		.offset = FIELD(metrics_port_file),
	},
	{
		.key = "webhook_url", .type = OPT_STRING, .def = "", .secret = true,
		.arg = "URL", .help = "http(s) URL events are POSTed to",
		.description =
			"Events (step committed, save failed or skipped, S3 upload given\n"
			"up, stall, peer lost) are POSTed here as Slack-compatible JSON\n"
			"({\"text\": ...} plus structured fields). The URL may hold a\n"
			"secret token: it is never logged (only its scheme and host);\n"
			"prefer the environment (CKPTD_WEBHOOK_URL) to a command line.\n"
			"Empty: no events are sent.",
		.offset = FIELD(webhook_url),
		.check = events_url_check,
	},
	{
		.key = "webhook_events", .type = OPT_STRING, .def = "all",
		.arg = "LIST", .help = "events sent to the webhook",
		.description =
			"Events sent to webhook_url, separated by commas: committed,\n"
			"failed, skipped, s3_failed, s3_backlog, stall, peer_lost, or all.",
		.offset = FIELD(webhook_events),
		.check = events_list_check,
	},
	{
		.key = "webhook_rate", .type = OPT_UINT, .def = "20", .min = 1, .max = 6000,
		.arg = "N", .help = "webhook messages per minute at most",
		.description =
			"Webhook messages per minute at most (a token bucket holding N).\n"
			"Events beyond it wait in the queue, where identical ones (numbers\n"
			"aside) merge into one message that says how many it stands for.",
		.offset = FIELD(webhook_rate),
	},
	{
		.key = "webhook_queue", .type = OPT_UINT, .def = "64", .min = 1, .max = 4096,
		.arg = "N", .help = "webhook events waiting at most",
		.description =
			"Events waiting to be sent at most; further ones are dropped and\n"
			"counted (ckpt_webhook_events_total{outcome=\"dropped\"}).",
		.offset = FIELD(webhook_queue),
	},
	{
		.key = "stall_warn_ms", .type = OPT_UINT, .def = "30000", .min = 0, .max = 86400000,
		.arg = "MS", .help = "report a rank stalled this long (no free slot, or one save); 0 = never",
		.description =
			"A \"stall\" event is sent when a rank had every staging slot busy\n"
			"with saves being written for longer than this many milliseconds\n"
			"(a save begun then waits (backpressure block) or is skipped), and\n"
			"when a rank reports that one save stalled it at least this long\n"
			"(ckpt_save_begin .. ckpt_save_finish). 0: never.",
		.offset = FIELD(stall_warn_ms),
	},
	{
		.key = "s3_url", .type = OPT_STRING, .def = "",
		.arg = "s3://BUCKET[/PREFIX]", .help = "upload committed steps here; empty = no S3 tier",
		.description =
			"S3 tier: every committed step is uploaded under\n"
			"s3://BUCKET/PREFIX/<job>/step-<N>/, the manifest last (the S3\n"
			"commit). Credentials, region and endpoint follow the AWS\n"
			"conventions (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,\n"
			"AWS_SESSION_TOKEN, AWS_PROFILE, AWS_REGION, AWS_ENDPOINT_URL_S3,\n"
			"AWS_ENDPOINT_URL, ~/.aws/credentials and ~/.aws/config) unless\n"
			"the s3_* keys below set them. Empty: no S3 tier.",
		.offset = FIELD(s3_url),
	},
	{
		.key = "s3_endpoint", .type = OPT_STRING, .def = "",
		.arg = "URL", .help = "S3 endpoint; empty = the AWS way",
		.description =
			"S3 endpoint URL (http://host:port or https://host), for\n"
			"S3-compatible stores (Ceph RGW, MinIO). Empty: AWS_ENDPOINT_URL_S3,\n"
			"AWS_ENDPOINT_URL, the profile's endpoint_url, else AWS itself.",
		.offset = FIELD(s3_endpoint),
	},
	{
		.key = "s3_region", .type = OPT_STRING, .def = "",
		.arg = "REGION", .help = "S3 region; empty = the AWS way",
		.description =
			"Region used to sign requests. Empty: AWS_REGION,\n"
			"AWS_DEFAULT_REGION, the profile's region, else us-east-1.",
		.offset = FIELD(s3_region),
	},
	{
		.key = "s3_profile", .type = OPT_STRING, .def = "",
		.arg = "NAME", .help = "profile in the AWS shared files",
		.description =
			"Profile of ~/.aws/credentials and ~/.aws/config to use.\n"
			"Empty: AWS_PROFILE, else \"default\".",
		.offset = FIELD(s3_profile),
	},
	{
		.key = "s3_addressing", .type = OPT_ENUM, .def = "auto", .values = s3_addressing_values,
		.arg = "auto|path|virtual", .help = "bucket in the host name or the path",
		.description =
			"virtual: https://BUCKET.host/key; path: https://host/BUCKET/key;\n"
			"auto: the profile's s3 addressing_style, else virtual for AWS\n"
			"endpoints and DNS-safe buckets, path for anything else.",
		.offset = FIELD(s3_addressing),
	},
	{
		.key = "s3_ca_bundle", .type = OPT_STRING, .def = "",
		.arg = "FILE", .help = "CA certificates (PEM) for https endpoints",
		.description =
			"PEM file of CA certificates to verify the endpoint with. Empty:\n"
			"AWS_CA_BUNDLE, the profile's ca_bundle, else the system's.\n"
			"Certificates are always verified.",
		.offset = FIELD(s3_ca_bundle),
	},
	{
		.key = "s3_part_size", .type = OPT_SIZE, .def = "16MiB",
		.min = 5ull << 20, .max = 5ull << 30,
		.arg = "SIZE", .help = "multipart upload part size",
		.description =
			"Preferred part of a multipart upload, 5MiB to 5GiB; raised for\n"
			"shards that would need more than 10,000 parts. Files up to this\n"
			"size are sent in one PUT. Each part in flight holds a buffer of\n"
			"this size: memory is s3_parallel x s3_part_size.",
		.offset = FIELD(s3_part_bytes),
	},
	{
		.key = "s3_parallel", .type = OPT_UINT, .def = "4", .min = 1, .max = 256,
		.arg = "N", .help = "parts (or small objects) in flight",
		.description =
			"Parts or whole small objects uploaded at once. More hides the\n"
			"latency of each request; each holds s3_part_size of memory.",
		.offset = FIELD(s3_parallel),
	},
	{
		.key = "s3_max_rate", .type = OPT_SIZE, .def = "0", .min = 0, .max = UINT64_MAX,
		.arg = "SIZE", .help = "upload bytes per second; 0 = unlimited",
		.description =
			"Cap on S3 traffic in bytes per second, shared by all transfers,\n"
			"so that uploads leave the network to training. 0: no cap.",
		.offset = FIELD(s3_max_rate),
	},
	{
		.key = "s3_keep_last", .type = OPT_UINT, .def = "5", .min = 0, .max = 1000000,
		.arg = "N", .help = "committed steps kept per job on S3; 0 = all",
		.description =
			"Committed steps kept per job on S3 (the newest N); older ones are\n"
			"deleted after a newer one is uploaded, manifest first. 0 keeps\n"
			"every step. The newest committed step is never deleted.",
		.offset = FIELD(s3_keep_last),
	},
	{
		.key = "s3_keep_every", .type = OPT_UINT, .def = "0", .min = 0, .max = UINT32_MAX,
		.arg = "N", .help = "also keep every step that is a multiple of N",
		.description =
			"Steps that are a multiple of N are kept on S3 (and uploaded)\n"
			"whatever s3_keep_last says, e.g. 1000 for long-term snapshots.\n"
			"0: none.",
		.offset = FIELD(s3_keep_every),
	},
	{
		.key = "s3_max_attempts", .type = OPT_UINT, .def = "6", .min = 1, .max = 100,
		.arg = "N", .help = "tries per S3 request before a step's upload fails",
		.description =
			"Tries per request (the first included) on throttling, 5xx,\n"
			"timeouts and resets, with exponential backoff and full jitter.\n"
			"Auth errors and missing buckets are not retried. A step whose\n"
			"upload failed is tried again later, after a growing delay.",
		.offset = FIELD(s3_max_attempts),
	},
	{
		.key = "s3_compress", .type = OPT_ENUM, .def = "none", .values = s3_compress_values,
		.arg = "none|zstd", .help = "compress shards on S3",
		.description =
			"zstd: shards are stored on S3 as rank-<R>.shard.zst, cut into\n"
			"pieces along tensors, float tensors byte-shuffled, one zstd frame\n"
			"per piece (ranged reads still work), and the S3 manifest says so\n"
			"(proto/FORMAT.md). The root keeps the shards as they are. Costs\n"
			"CPU on the worker threads; float32 state gains ~1.2x, bf16 ~1.5x.",
		.offset = FIELD(s3_compress),
	},
	{
		.key = "s3_compress_level", .type = OPT_UINT, .def = "1", .min = 1, .max = 19,
		.arg = "N", .help = "zstd level for s3_compress",
		.description =
			"zstd compression level, 1 (fastest) to 19. Float state gains\n"
			"little from higher levels.",
		.offset = FIELD(s3_compress_level),
	},
	{
		.key = "nodes", .type = OPT_STRING, .def = "auto", .computed_default = true,
		.arg = "N|auto", .help = "daemons (nodes) that share the job's commits",
		.description =
			"How many ckptd daemons, one per node, commit together: a step is\n"
			"committed only when every rank on every node has it durable.\n"
			"auto: $SLURM_NNODES (or $SLURM_JOB_NUM_NODES) when SLURM_NODEID is\n"
			"set (ckptd started by srun, one task per node), else\n"
			"$OMPI_COMM_WORLD_SIZE (mpirun --npernode 1), else 1. With 1 the\n"
			"daemon is on its own and every other setting of this group is\n"
			"unused.",
		.offset = FIELD(nodes_text),
	},
	{
		.key = "node_index", .type = OPT_STRING, .def = "auto", .computed_default = true,
		.arg = "K|auto", .help = "this node's index, 0 to nodes-1",
		.description =
			"This daemon's index among the nodes. Node 0 is the leader: it\n"
			"writes the manifests, applies keep_last and uploads to S3.\n"
			"auto: $SLURM_NODEID, else $OMPI_COMM_WORLD_RANK, else 0.",
		.offset = FIELD(node_index_text),
	},
	{
		.key = "cluster_id", .type = OPT_STRING, .def = "auto", .computed_default = true,
		.arg = "NAME", .help = "names the group of daemons",
		.description =
			"Names this group of daemons: the rendezvous directory and every\n"
			"peer message carry it, so groups sharing a root or a network\n"
			"never mix. auto: $SLURM_JOB_ID, else \"default\". Letters,\n"
			"digits, '.', '_' and '-'.",
		.offset = FIELD(cluster_id),
	},
	{
		.key = "peers", .type = OPT_STRING, .def = "",
		.arg = "HOST:PORT,...", .help = "explicit peer addresses, by node index",
		.description =
			"The daemons' addresses in node-index order, comma-separated: node K\n"
			"listens on the K-th. Empty: the daemons find each other through\n"
			"rendezvous_dir instead (each publishes its own address there).",
		.offset = FIELD(peers),
	},
	{
		.key = "rendezvous_dir", .type = OPT_STRING, .def = "", .computed_default = true,
		.arg = "DIR", .help = "where the daemons publish their addresses",
		.description =
			"Directory every node can read and write (on the shared checkpoint\n"
			"file system) where each daemon publishes its peer address as\n"
			"node-<K>. Default: <root>/.cluster/<cluster_id>.",
		.offset = FIELD(rendezvous_dir),
	},
	{
		.key = "fabric_provider", .type = OPT_STRING, .def = "tcp;ofi_rxm",
		.arg = "NAME", .help = "libfabric provider of the peer link",
		.description =
			"libfabric provider for the RDM endpoint of the peer link, as\n"
			"fi_info -p names it: tcp;ofi_rxm (any TCP network), verbs;ofi_rxm\n"
			"(InfiniBand, RoCE), efa (AWS EFA).",
		.offset = FIELD(fabric_provider),
	},
	{
		.key = "fabric_address", .type = OPT_STRING, .def = "",
		.arg = "HOST", .help = "address the peer endpoint binds",
		.description =
			"Host name or IP address of this node's interface for the peer\n"
			"link. Empty: the provider's first choice (set FI_TCP_IFACE or\n"
			"FI_VERBS_IFACE to pick an interface by name).",
		.offset = FIELD(fabric_address),
	},
	{
		.key = "peer_key_file", .type = OPT_STRING, .def = "", .computed_default = true,
		.arg = "FILE", .help = "shared secret that authenticates peer messages",
		.description =
			"File with the secret (at least 16 bytes) every daemon of the group\n"
			"uses to authenticate peer messages (HMAC-SHA-256). Default:\n"
			"<rendezvous_dir>/key, created (mode 0600) by the first daemon.\n"
			"With peers set and no key file, peer messages are not\n"
			"authenticated (a warning says so).",
		.offset = FIELD(peer_key_file),
		.secret = true,
	},
	{
		.key = "peer_timeout_ms", .type = OPT_UINT, .def = "10000", .min = 200,
		.max = 3600000,
		.arg = "MS", .help = "silence after which a peer is lost",
		.description =
			"A peer not heard from for this long is lost: steps open at the\n"
			"time fail on every node (no commit without its votes). Heartbeats\n"
			"go out every quarter of it.",
		.offset = FIELD(peer_timeout_ms),
	},
	{
		.key = "step_timeout_ms", .type = OPT_UINT, .def = "600000", .min = 0,
		.max = 86400000,
		.arg = "MS", .help = "a step with no new vote for this long fails; 0 = never",
		.description =
			"A step that has had no new vote for this long fails, naming the\n"
			"ranks that never saved it (a hung rank, or one the launch never\n"
			"started), so that no step stays open and every wait ends. In a\n"
			"multi-node group the leader applies it. 0: no limit.",
		.offset = FIELD(step_timeout_ms),
	},
	{
		.key = "partner_memory", .type = OPT_SIZE, .def = "0", .min = 0, .max = UINT64_MAX,
		.arg = "SIZE", .help = "memory for partner nodes' newest step; 0 = none",
		.description =
			"Memory this daemon spends on copies of its partner nodes' ranks\n"
			"of the newest committed step (the fastest restore tier: a\n"
			"replaced node gets its ranks' state back from it without reading\n"
			"the file system). Needs room for two steps while a new one\n"
			"arrives. 0: this daemon neither keeps partner copies nor sends\n"
			"its own ranks' shards to its partners.",
		.offset = FIELD(partner_memory),
	},
	{
		.key = "partners", .type = OPT_UINT, .def = "1", .min = 1, .max = 16,
		.arg = "N", .help = "nodes that copy this node's ranks",
		.description =
			"Node K's ranks are copied to nodes K+1 .. K+N (mod nodes) after\n"
			"each commit, where those nodes have partner_memory.",
		.offset = FIELD(partners),
	},
};

_Static_assert(sizeof(config_options) / sizeof(config_options[0]) == CONFIG_N_OPTIONS,
	       "CONFIG_N_OPTIONS (config_internal.h) is not the number of options");

/* ---- check hooks --------------------------------------------------------- */

/* allowed_group's check: the group is looked up now, so that a name that
 * does not resolve stops ckptd before it listens. */
static int allowed_group_check(struct ckptd_config *cfg, const char *g, char *msg,
			       size_t msglen)
{
	struct group grp, *res = NULL;
	char *buf = NULL;
	size_t cap = 1024;
	uint64_t gid;
	int r;

	cfg->allowed_gid = (gid_t)-1;
	if (!*g)
		return 0;
	if (config_parse_uint(g, 10, &gid) == 0) {
		if (gid >= (gid_t)-1) {
			snprintf(msg, msglen, "gid %s is out of range", g);
			return -ERANGE;
		}
		cfg->allowed_gid = (gid_t)gid;
		return 0;
	}
	for (;;) {
		char *nbuf = realloc(buf, cap);
		if (!nbuf) {
			r = ENOMEM;
			break;
		}
		buf = nbuf;
		r = getgrnam_r(g, &grp, buf, cap, &res);
		if (r != ERANGE || cap >= (1u << 20))
			break;
		cap *= 2;
	}
	if (r == 0 && res)
		cfg->allowed_gid = res->gr_gid;
	free(buf);
	if (r) {
		snprintf(msg, msglen, "cannot look up group '%s': %s", g, strerror(r));
		return -r;
	}
	if (!res) {
		snprintf(msg, msglen, "no such group '%s'", g);
		return -ENOENT;
	}
	return 0;
}

/* metrics_listen's check, here because its parser lives with the endpoint
 * (metrics_http.c), which has no business with the table. */
static int metrics_listen_check(struct ckptd_config *cfg, const char *value, char *msg,
				size_t msglen)
{
	(void)cfg;
	if (metrics_listen_parse(value, NULL, NULL) >= 0)
		return 0;
	snprintf(msg, msglen, "'%s' is not an address (expected IPV4:PORT, [IPV6]:PORT or off)",
		 value);
	return -EINVAL;
}
