/* SPDX-License-Identifier: MIT */
/*
 * ckptd internals: the structs the daemon's units share (daemon, client,
 * job, step, and what they hold). Only structs: each unit declares its
 * functions in its own header (server.h, writer.h, coord.h, jobs.h,
 * retention.h, restore.h, memtier.h, arena.h, ...); docs/ARCHITECTURE.md
 * says which file owns what.
 *
 * Threading: everything here is owned by the event-loop thread, except what
 * a worker task is handed explicitly (see workers.h); a task's result comes
 * back to the loop through its done callback.
 */
#ifndef CKPTD_H
#define CKPTD_H

#include <liburing.h>
#include <stdbool.h>
#include <stdint.h>

#include "clock.h"
#include "config.h"
#include "events.h"
#include "log.h"
#include "loop.h"
#include "metrics.h"
#include "proto.h"
#include "store.h"
#include "workers.h"

struct daemon;
struct job;
struct step;
struct client;
struct save_job;

enum slot_state {
	SLOT_CLIENT = 0,   /* the client's to fill */
	SLOT_SAVING,       /* ckptd is writing it */
	SLOT_RESTORING,    /* ckptd is reading a shard into it */
	SLOT_RESTORED,     /* the client reads the restored shard until RELEASE */
};

struct outmsg {
	struct outmsg *next;
	size_t len;
	uint8_t buf[];
};

struct client {
	struct daemon *d;
	struct client *next;
	int fd;
	struct loop_source source; /* fd in the event loop (loop.h) */
	uint64_t id;          /* connection number, for logs */
	uint64_t generation;  /* d->generation at HELLO */
	pid_t pid;
	uid_t uid;
	bool hello_done;
	bool hello_pending;   /* HELLO accepted, arena being populated */
	bool hello_job_wait;  /* HELLO waits for the job's takeover (jobs.c) */
	uint32_t hello_seq;
	bool dead;            /* connection closed; freed when refs == 0 */
	unsigned refs;        /* save jobs and restores using the arena */
	struct job *job;
	uint32_t rank, world_size, local_rank;
	uint64_t last_step;   /* CKPT_NO_STEP before the first SAVE/SKIP */
	uint64_t stall_step;  /* accepted SAVE whose STALL may come, or CKPT_NO_STEP */
	/* arena */
	int arena_fd;
	uint8_t *arena;
	uint64_t arena_bytes, slot_bytes;
	uint32_t slots;
	int fixed_base;       /* first registered-buffer index, or -1 */
	unsigned fixed_count;
	uint8_t *slot_state;  /* enum slot_state per slot */
	uint64_t *slot_step;  /* step a SAVING slot belongs to */
	/* replies that did not fit the socket buffer */
	struct outmsg *out_head, *out_tail;
	bool want_out;
	int64_t slots_busy_since; /* every slot SAVING since (now_ns), or 0 */
	bool goodbye;         /* the rank said GOODBYE: it did not crash */
	/* Its newest durable shard, still in slot own_slot unless the rank
	 * filled that slot again (memtier.c; own_index NULL: none). */
	void *own_index;
	uint64_t own_index_bytes, own_step, own_shard_bytes;
	uint32_t own_slot;
	char own_job[CKPT_JOB_NAME_MAX + 1]; /* c->job may be gone when it is freed */
};

/* One rank's durable shard of a step: its vote. */
struct rank_vote {
	bool durable;
	uint64_t shard_bytes;
	uint64_t index_bytes;
	uint8_t index_sha256[32];
	uint64_t blob_bytes;
	uint32_t blob_crc32c;
	struct ckpt_table table; /* with crc32c filled in; remote votes: read at commit */
	uint32_t node;           /* the node whose daemon cast it */
	bool remote;             /* cast over the peer link (the leader reads its index) */
};

enum step_state { STEP_OPEN = 0, STEP_COMMITTING, STEP_COMMITTED, STEP_FAILED };

struct step {
	struct step *next;
	struct job *job;
	uint64_t step;
	uint32_t world_size;
	enum step_state state;
	uint32_t votes_in;
	struct rank_vote *votes;   /* world_size entries */
	uint8_t *saving;           /* per rank: a save job is in flight */
	unsigned inflight;         /* save jobs not yet finished */
	uint64_t failed_generation;/* d->generation when it failed */
	int error;
	char reason[CKPT_REASON_MAX + 1];
	bool removing;             /* its directory is being removed */
	bool skipped;              /* failed because a rank skipped it (backpressure) */
	bool abort_from_peer;      /* failed by the leader's word: not echoed back */
	int64_t opened_ns;
	int64_t last_vote_ns;      /* when the newest vote came */
	/* Non-leader of a group: the outcome is asked for again (coord_peer_tick). */
	int64_t asked_ns;          /* when this node last resent its votes or ABORT */
	unsigned abort_resends;    /* times its own ABORT went to the leader again */
	bool resolving;            /* leader lost: the root's manifest is being looked for */
};

struct job {
	struct job *next;
	struct daemon *d;
	char name[CKPT_JOB_NAME_MAX + 1];
	int dirfd;
	uint32_t world_size;       /* of the connected ranks; 0 when none */
	unsigned clients;
	uint64_t *committed;       /* ascending */
	size_t n_committed, cap_committed;
	unsigned *restore_pins;    /* parallel to committed: restores in progress */
	struct step *steps;        /* open, committing and recently failed steps */
	uint32_t *left;            /* ranks that disconnected and have not come back */
	size_t n_left, cap_left;
	unsigned retention_running;
	unsigned restores;         /* restores in flight: their workers use the job */
	/* Ownership (jobs.c, FORMAT.md "OWNER"): a job is usable once this
	 * daemon has taken it over on a worker; its waiters are told then. */
	bool ready;
	int lock_fd;               /* the OWNER lock it holds, or -1 (non-leader) */
	struct job_waiter *waiters;
	bool waking;               /* its waiters are being told */
};

struct io_req;

#define FIXED_BUFFERS 1024u
#define FIXED_PIECE (1ull << 30) /* the kernel's limit per registered buffer */

struct daemon {
	struct ckptd_config *cfg;
	int epfd;
	int listen_fd;
	int signal_fd;
	int ring_efd;
	struct io_uring ring;
	bool ring_ready;
	bool fixed_ok;             /* a sparse registered-buffer table exists */
	uint8_t *fixed_used;       /* FIXED_BUFFERS entries */
	unsigned ring_inflight;
	int root_fd;
	int trash_fd;              /* <root>/.trash: removed trees wait here */
	uint64_t trash_seq;
	bool trash_running, trash_again;
	struct workers *workers;
	struct client *clients;
	unsigned n_clients;
	uint64_t next_client_id;
	uint64_t generation;       /* bumped at each HELLO and step failure */
	struct job *jobs;
	struct save_job *writing;  /* save jobs with I/O to submit or in flight */
	uint64_t staging_used;
	int direct_io;             /* -1 unknown, 0 no, 1 yes (auto mode) */
	bool stopping;
	bool can_mlock;
	struct metrics_http *metrics; /* the metrics endpoint, or NULL */
	struct uploader *uploader;    /* the S3 tier, or NULL (uploader.c) */
	struct peerlink *peer;        /* the peer link of a multi-node group, or NULL (peer.c) */
	struct retained *retained;    /* arenas of departed ranks, for restores (memtier.c) */
	struct agree *agree;          /* agreed restores waiting here, or NULL (agree.c) */
	unsigned busy;             /* saves, commits, removals, restores in flight */
	char daemon_id[40];        /* this run, in OWNER files (jobs.c) */
	char holder_id[512];       /* this daemon across restarts, OWNER's holder= (jobs.c) */
};

#endif
