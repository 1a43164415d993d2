/* SPDX-License-Identifier: MIT */
/*
 * ckptd internals: the daemon state shared by server.c (event loop and
 * clients), writer.c (io_uring shard writes), coord.c (votes, commit,
 * retention, recovery), restore.c and workers.c.
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
	bool hello_job_wait;  /* HELLO waits for the job's takeover (coord.c) */
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
	 * filled that slot again (retain.c; own_index NULL: none). */
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
	/* Ownership (coord.c, FORMAT.md "OWNER"): a job is usable once this
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
	struct retained *retained;    /* arenas of departed ranks, for restores (retain.c) */
	struct agree *agree;          /* agreed restores waiting here, or NULL (agree.c) */
	unsigned busy;             /* saves, commits, removals, restores in flight */
	char daemon_id[40];        /* this run, in OWNER files (coord.c) */
	char holder_id[512];       /* this daemon across restarts, OWNER's holder= (coord.c) */
};

/* server.c */
void client_send(struct client *c, const struct ckpt_msg *m);
void client_send_status(struct client *c, uint64_t step, enum ckpt_state state,
			int error, uint32_t slot_freed, const char *reason);
struct client *job_client_for_rank(struct job *job, uint32_t rank);
void client_unref(struct client *c);

/* writer.c */
int writer_init(struct daemon *d);
void writer_fini(struct daemon *d);
/* Start writing the slot; on success the job owns a client reference. */
int writer_start(struct client *c, struct step *st, uint32_t slot,
		 const struct ckpt_msg_save *msg, struct ckpt_table *table,
		 char *err, size_t errlen);
/* Register c's arena as io_uring fixed buffers where allowed (best effort)
 * and drop the registration (only once no I/O uses it). */
void writer_register_arena(struct client *c);
void writer_unregister_arena(struct client *c);
void writer_on_cqe(struct daemon *d, struct io_uring_cqe *cqe);
void writer_pump(struct daemon *d);
/* A slot of c changed state: account the time every slot was busy
 * saving (metrics, stall events). */
void slots_watch(struct client *c);

/* coord.c */
int coord_recover(struct daemon *d);
/* Take over again, on a worker, the jobs whose OWNER names this daemon as
 * their holder (it owned them before a crash or a stop), so that their
 * recovery and S3 uploads resume with no rank connected. Once the
 * uploader (uploader_init) and the peer link are up. */
void coord_resume_owned(struct daemon *d);
/* Apply root retention to job `name` again (S3 confirmed steps of it), if
 * this daemon has the job loaded; never takes a job over. */
void coord_retention_recheck(struct daemon *d, const char *name);
/* Something that kept job `name` loaded (the uploader's last task for it)
 * is over: release it if nothing else uses it. */
void coord_job_idle(struct daemon *d, const char *name);
/* Delete what waits in the trash, in a worker. */
void coord_trash_empty(struct daemon *d);
/*
 * A job this daemon has taken over, or NULL. With `create`, a job not yet
 * known is taken over here, synchronously (blocking metadata I/O on the
 * loop: only the peer link's messages still do that); a job whose takeover
 * is running on a worker is not returned.
 */
struct job *job_get(struct daemon *d, const char *name, bool create);
/*
 * Take the job over on a worker (create its directory, take its OWNER lock,
 * recover it, load its committed steps, apply retention) unless that is done
 * or running already, and call ready(arg, job, 0, NULL) on the loop once the
 * job is usable, or ready(arg, NULL, error, reason) if it cannot be (another
 * daemon or group owns it: -CKPT_E_REFUSED, the reason names the holder).
 * ready may run before job_open returns. 0, or -ENOMEM (ready not called).
 */
typedef void (*job_ready_fn)(void *arg, struct job *job, int error, const char *reason);
int job_open(struct daemon *d, const char *name, job_ready_fn ready, void *arg);
/* Forget a job nobody uses (its fd, memory; its directory if empty) and
 * give up its ownership. */
void job_release(struct job *job);
bool job_is_committed(const struct job *job, uint64_t step);
/* A step restored from S3 into the root is committed there again. */
void coord_adopt(struct job *job, uint64_t step);
uint64_t job_latest(const struct job *job);
struct step *step_find(struct job *job, uint64_t step);
/* The job's open steps, in an array of their own (*out, free()): failing
 * one may prune failed ones from the job's list. Their number; 0 and
 * *out NULL when none (or out of memory, logged). */
size_t job_open_steps(struct job *job, struct step ***out);
/* Append to a NUL-terminated string in buf[cap], cut where it is full. */
void reason_append(char *buf, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
struct step *step_get(struct job *job, uint64_t step, uint32_t world_size);
/* Reuse a failed step's record for a new incarnation of the job. */
int step_reopen(struct step *st, uint32_t world_size);
/*
 * A vote: `rank` of the job holds `step` durably. Local writers call it;
 * the peer link of a multi-node job calls it for remote ranks. Takes the
 * vote's table. Commits when every rank of the world has voted.
 */
void coord_vote(struct step *st, uint32_t rank, struct rank_vote *vote);
/* The step can never commit: tell every participant, remove it when idle. */
void coord_fail(struct step *st, int error, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A save job of the step finished (durable or not). */
void coord_save_done(struct step *st, uint32_t rank);
/* A rank's connection went away (or skipped): steps it cannot finish fail. */
void coord_rank_gone(struct job *job, uint32_t rank, const char *why);
/* A rank (re)joined the job. */
void coord_rank_back(struct job *job, uint32_t rank);
/* A rank of the job that left and cannot vote for st, or -1. */
int64_t coord_missing_rank(struct job *job, const struct step *st);
void coord_state_of(struct job *job, uint64_t step, struct ckpt_msg_status *out);
void job_pin(struct job *job, uint64_t step, int delta);
/* This daemon writes manifests and deletes steps: alone, or node 0. */
bool coord_is_leader(const struct daemon *d);
/* The peer link's messages (peer.c) for the coordinator. */
struct peer_msg;
void coord_peer_vote(struct daemon *d, uint32_t node, const struct peer_msg *m);
void coord_peer_committed(struct daemon *d, const struct peer_msg *m);
void coord_peer_abort(struct daemon *d, uint32_t node, const struct peer_msg *m);
void coord_peer_lost(struct daemon *d, uint32_t node, const char *why);
/* From the peer link's timer. Non-leader: ask the leader again for the
 * outcome of steps that have waited for one longer than `after_ns`.
 * Leader: fail steps with no vote for step_timeout_ms. */
void coord_peer_tick(struct daemon *d, int64_t now, int64_t after_ns);
/* Alone (no group): how soon coord_tick() wants to run (-1: no need), and
 * the step_timeout_ms bound on open steps it applies. */
int coord_poll_ms(const struct daemon *d);
void coord_tick(struct daemon *d, int64_t now);

/* arena.c */
/* Size, create, seal, populate (and mlock where allowed) c's arena. */
int arena_create(struct client *c, uint64_t max_save_bytes, uint32_t slots,
		 char *err, size_t errlen);
/* Fault in (and mlock where allowed) c's arena: on a worker thread. */
int arena_populate(struct client *c, char *err, size_t errlen);
void arena_destroy(struct client *c);
uint64_t arena_slot_bytes(uint64_t max_save_bytes);

/* retain.c: own memory, the first restore tier */
struct retained;
void retain_note_durable(struct client *c, uint32_t slot, uint64_t step, uint64_t shard_bytes,
			 const void *index, uint64_t index_bytes);
void retain_note_slot_used(struct client *c, uint32_t slot);
/* At the end of a connection: keep its arena if it holds a shard worth it. */
bool retain_take_arena(struct client *c);
/* A rank of the job saves again: what a departed one left is obsolete. */
void retain_drop(struct daemon *d, const char *job, uint32_t rank);
/* Give back departed ranks' memory until `need` more bytes fit staging. */
bool retain_evict(struct daemon *d, uint64_t need);
struct retained *retain_pin(struct daemon *d, const char *job, uint32_t rank);
void retain_unpin(struct daemon *d, struct retained *r);
/* From a pinned one, on any thread: the shard of `step` into dst. */
int retain_copy(const struct retained *r, uint64_t step, uint8_t *dst, uint64_t cap,
		const void **index, uint64_t *index_bytes, uint64_t *shard_bytes);
void retain_fini(struct daemon *d);

/* restore.c */
int restore_start(struct client *c, uint32_t slot, uint64_t step,
		  uint32_t flags, uint32_t seq);
/* One attempt of an agreed restore: exactly `step`, read and verified into
 * the slot; the outcome goes to agree_attempt_done(), not to the client. */
struct agree_rank;
int restore_attempt_start(struct client *c, uint32_t slot, uint64_t step,
			  struct agree_rank *agree);
/* Whether a restore error means the step's copy is damaged (and an older
 * step may be used) rather than that reading it failed. */
bool restore_error_is_damage(int r);

#endif
