/* SPDX-License-Identifier: MIT */
/*
 * ckptd configuration: one table drives the config file, the environment
 * (CKPTD_<KEY>), the command line (--key value / --key=value), --help and
 * the reference file ckptd/ckptd.conf. Precedence: defaults < file <
 * environment < command line.
 */
#ifndef CKPTD_CONFIG_H
#define CKPTD_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

enum direct_io_mode { DIRECT_IO_AUTO = 0, DIRECT_IO_ON = 1, DIRECT_IO_OFF = 2 };
enum backpressure_policy { BACKPRESSURE_BLOCK = 0, BACKPRESSURE_SKIP = 1 };
enum log_level { LOG_LEVEL_ERROR = 0, LOG_LEVEL_WARN = 1, LOG_LEVEL_INFO = 2, LOG_LEVEL_DEBUG = 3 };
enum lock_memory_mode { LOCK_MEMORY_AUTO = 0, LOCK_MEMORY_ON = 1, LOCK_MEMORY_OFF = 2 };

struct ckptd_config {
	char *config_file;       /* file read, or NULL */
	char *socket_path;       /* socket */
	uint32_t socket_mode;    /* socket_mode, octal, e.g. 0660 */
	char *allowed_group;     /* allowed_group: name or gid; "" = none */
	gid_t allowed_gid;       /* resolved; (gid_t)-1 when none */
	char *root;              /* root: checkpoint root directory */
	uint64_t staging_bytes;  /* staging_bytes: total arena budget; 0 = half of RAM */
	uint32_t slots_per_rank; /* slots_per_rank */
	uint32_t queue_depth;    /* queue_depth: io_uring requests in flight */
	uint64_t request_bytes;  /* request_size */
	uint64_t chunk_bytes;    /* chunk_size: checksum chunk */
	enum direct_io_mode direct_io;         /* direct_io: auto|on|off */
	uint32_t keep_last;      /* keep_last: committed steps kept per job, 0 = all */
	enum backpressure_policy backpressure; /* backpressure: block|skip */
	enum log_level log_level;              /* log_level */
	enum lock_memory_mode lock_memory;     /* lock_memory: auto|on|off */
	uint32_t workers;        /* workers: checksum threads, 0 = auto */
	uint32_t max_clients;    /* max_clients */
	bool fixed_buffers;      /* fixed_buffers: register arenas with io_uring */
	/* Operations: metrics endpoint and webhook events (metrics.h, events.h). */
	char *metrics_listen;    /* metrics_listen: "HOST:PORT"; "" or "off" = none */
	char *metrics_port_file; /* metrics_port_file: bound port written here; "" = none */
	char *webhook_url;       /* webhook_url: "" = no events sent (a secret: never logged) */
	char *webhook_events;    /* webhook_events: names, or "all" */
	uint32_t webhook_rate;   /* webhook_rate: messages per minute at most */
	uint32_t webhook_queue;  /* webhook_queue: events waiting at most */
	uint32_t stall_warn_ms;  /* stall_warn_ms: 0 = no stall events */
	uint32_t restore_agree_timeout_ms; /* restore_agree_timeout_ms: ranks joining an agreed restore */
	/* The S3 tier (uploader.c); s3_url "" = off. */
	char *s3_url, *s3_endpoint, *s3_region, *s3_profile, *s3_ca_bundle;
	uint32_t s3_addressing;  /* s3_addressing: enum s3_addressing order (auto|path|virtual) */
	uint64_t s3_part_bytes;  /* s3_part_size */
	uint32_t s3_parallel;
	uint64_t s3_max_rate;    /* bytes/s, 0 = unlimited */
	uint32_t s3_keep_last, s3_keep_every, s3_max_attempts;
	uint32_t s3_compress;    /* s3_compress: 0 none, 1 zstd */
	uint32_t s3_compress_level;
	/* Many nodes (peer.c). nodes == 1: a node on its own. */
	char *nodes_text;        /* nodes: "auto" or N */
	char *node_index_text;   /* node_index: "auto" or K */
	uint32_t nodes;          /* resolved */
	uint32_t node_index;     /* resolved */
	char *cluster_id;        /* cluster_id: "auto" = $SLURM_JOB_ID, else "default" */
	char *peers;             /* peers: "HOST:PORT,..." by node index; "" = rendezvous */
	char *rendezvous_dir;    /* rendezvous_dir: "" = <root>/.cluster/<cluster_id> */
	char *fabric_provider;   /* fabric_provider */
	char *fabric_address;    /* fabric_address: host or IP the endpoint binds; "" = any */
	char *peer_key_file;     /* peer_key_file: "" = <rendezvous_dir>/key */
	uint32_t peer_timeout_ms;/* peer_timeout_ms */
	uint32_t step_timeout_ms;/* step_timeout_ms */
	uint64_t partner_memory; /* partner_memory: bytes for partner copies, 0 = none */
	uint32_t partners;       /* partners: nodes that hold a copy of this node's ranks */
};

enum config_action {
	CONFIG_RUN = 0,     /* start the daemon */
	CONFIG_EXIT_OK,     /* --help / --version / --check-config done */
	CONFIG_EXIT_ERROR,  /* bad configuration, already reported */
};

/*
 * Fill *cfg from defaults, the config file (--config PATH, else
 * $CKPTD_CONFIG, else <sysconfdir>/ckpt/ckptd.conf if it exists), the
 * environment and argv. Errors name the source (file:line, variable or
 * flag) and are written to `errout`. --help and --version print to `out`.
 * --check-config validates everything, prints the effective configuration
 * and returns CONFIG_EXIT_OK (or CONFIG_EXIT_ERROR).
 */
enum config_action config_load(struct ckptd_config *cfg, int argc, char **argv,
			       FILE *out, FILE *errout);
/* Print the effective configuration as a config file ("key = value"). */
void config_print(const struct ckptd_config *cfg, FILE *out);
/* Print the reference config file (every key, commented) generated from
 * the table. ckptd/ckptd.conf must equal this output (a unit test checks). */
void config_print_reference(FILE *out);
void config_free(struct ckptd_config *cfg);

/* Parse "4GiB", "512M", "1048576", "1.5G" (binary units, optional "B"/"iB").
 * 0 or -EINVAL / -ERANGE. Shared with the tools. */
int config_parse_size(const char *s, uint64_t *out);

#endif
