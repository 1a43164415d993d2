/* SPDX-License-Identifier: MIT */
/*
 * Agreed restore (agree.h). A round per job at the coordinator:
 *
 *   JOIN     each rank's request joins the job's round (the first opens it
 *            and starts the deadline; a worker lists the candidates from
 *            the root's manifests and S3, newest first);
 *   TRY      every rank that joined reads and verifies its shard of the
 *            current candidate into its slot (restore.c, on a worker);
 *   REPORT   its outcome: verified, damaged, or an error that persisted
 *            after restore.c's retries;
 *   DONE     once every rank of the world verified the candidate, each gets
 *            RESTORE_OK for it; a damaged shard makes the candidate bad for
 *            the job (loudly) and every rank tries the next older one; an
 *            error, no candidate left, or the deadline ends the round with
 *            an error for every rank.
 *
 * The coordinator's own ranks take the same steps through function calls;
 * other nodes' ranks through the peer link (PEER_AGREE_*).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agree.h"
#include "ckptd.h"
#include "coord.h"
#include "restore.h"
#include "server.h"
#include "peer.h"
#include "peerwire.h"
#include "s3.h"
#include "uploader.h"

/* ---- state ----------------------------------------------------------- */

/* A rank of this node waiting in a round. */
struct agree_rank {
	struct agree_rank *next;
	struct daemon *d;
	struct client *c;          /* referenced until the answer */
	char job[CKPT_JOB_NAME_MAX + 1];
	uint32_t rank, world, slot, seq, flags;
	uint64_t want;             /* CKPT_NO_STEP: the newest */
	uint64_t nonce;            /* names this request in JOIN and a refusal */
	uint64_t round;            /* the coordinator's round, once a TRY named it */
	bool busy;                 /* a worker reads into the slot */
	uint64_t next_try;         /* a TRY that came while busy, or CKPT_NO_STEP */
	bool have_ok;              /* the slot holds ok_step, verified */
	uint64_t ok_step;
	struct ckpt_msg_restore_ok ok;
	char tier[16];
	bool decided;              /* the round's outcome came while busy */
	int done_status;
	uint64_t done_step;
	char done_reason[CKPT_REASON_MAX + 1];
	int64_t deadline_ns;       /* a safety net on nodes that do not coordinate */
	bool gone;                 /* its client left: answered, no longer found by rank_find */
	bool deferred;             /* an attempt that could not start: reported from agree_tick */
	int deferred_status;
	uint64_t deferred_step;
};

/* A job's round at the coordinator. */
struct agree_round {
	struct agree_round *next;
	char job[CKPT_JOB_NAME_MAX + 1];
	uint32_t world, flags;
	uint64_t want;
	uint64_t id;
	int64_t deadline_ns;       /* for every rank to join */
	bool listing;              /* the candidates are being listed */
	bool finished;             /* waits only for the listing worker to return */
	uint64_t *cand;            /* newest first */
	size_t ncand, ci;          /* ci: the current candidate */
	uint32_t *node_of;         /* per rank: node + 1, 0 until it joins */
	uint64_t *nonce_of;        /* per rank: its JOIN's nonce */
	uint8_t *verified;         /* per rank, for cand[ci] */
	uint32_t joined, n_verified;
	unsigned bad;              /* candidates found damaged */
	char warning[CKPT_REASON_MAX + 1];
};

struct agree {
	struct agree_rank *ranks;
	struct agree_round *rounds;
	uint64_t next_id;
};

static struct agree *state(struct daemon *d)
{
	if (!d->agree)
		d->agree = calloc(1, sizeof(*d->agree));
	return d->agree;
}

static int64_t timeout_ns(const struct daemon *d)
{
	return (int64_t)d->cfg->restore_agree_timeout_ms * 1000000;
}

/* ---- the local half ---------------------------------------------------- */

static struct agree_rank *rank_find(struct daemon *d, const char *job, uint32_t rank)
{
	struct agree *a = d->agree;

	for (struct agree_rank *ar = a ? a->ranks : NULL; ar; ar = ar->next)
		if (!ar->gone && ar->rank == rank && !strcmp(ar->job, job))
			return ar;
	return NULL;
}

static void rank_unlink(struct agree_rank *ar)
{
	struct agree *a = ar->d->agree;

	for (struct agree_rank **pp = &a->ranks; *pp; pp = &(*pp)->next)
		if (*pp == ar) {
			*pp = ar->next;
			return;
		}
}

/* The round's outcome for this rank, to its client; frees ar. The slot
 * must not be in a worker's hands. */
static void rank_answer(struct agree_rank *ar, int status, uint64_t step, const char *reason)
{
	struct client *c = ar->c;
	struct ckpt_msg m;

	rank_unlink(ar);
	memset(&m, 0, sizeof(m));
	m.seq = ar->seq;
	if (status == 0 && !(ar->have_ok && ar->ok_step == step)) {
		/* Cannot happen: DONE(ok) comes only after this rank's verified
		 * report of that step. Refuse rather than hand out a slot that
		 * holds something else. */
		status = -EPROTO;
		reason = "the round chose a step this rank's slot does not hold";
	}
	if (status == 0) {
		m.type = CKPT_MSG_RESTORE_OK;
		m.u.restore_ok = ar->ok;
		m.u.restore_ok.flags = 0;
		m.u.restore_ok.warning[0] = '\0';
		if (reason && reason[0]) {
			m.u.restore_ok.flags |= CKPT_RESTORE_OK_F_FELL_BACK;
			snprintf(m.u.restore_ok.warning, sizeof(m.u.restore_ok.warning), "%s", reason);
		}
		log_info("restore", "agreed job=%s step=%llu rank=%u bytes=%llu tier=%s%s", ar->job,
			 (unsigned long long)step, ar->rank, (unsigned long long)ar->ok.data_bytes,
			 ar->tier, reason && reason[0] ? " fell_back=1" : "");
		metrics_inc(M_RESTORES_TOTAL, ar->job, reason && reason[0] ? "fell_back" : "ok");
	} else {
		m.type = CKPT_MSG_ERROR;
		m.u.error.code = status;
		snprintf(m.u.error.message, sizeof(m.u.error.message), "%s",
			 reason && reason[0] ? reason : strerror(-status));
		if (status == -CKPT_E_NO_CHECKPOINT)
			log_debug("restore", "agreed restore: nothing to restore job=%s rank=%u", ar->job,
				  ar->rank);
		else
			log_warn("restore", "agreed restore failed job=%s rank=%u error=\"%s\"",
				 ar->job, ar->rank, m.u.error.message);
		metrics_inc(M_RESTORES_TOTAL, ar->job, "failed");
	}
	if (!c->dead) {
		c->slot_state[ar->slot] = status == 0 ? SLOT_RESTORED : SLOT_CLIENT;
		client_send(c, &m);
	}
	client_unref(c);
	free(ar);
}

/* A DONE (or the coordinator's verdict) for a local rank. */
static void rank_decided(struct agree_rank *ar, int status, uint64_t step, const char *reason)
{
	if (ar->busy) {
		/* Its slot is being read into: answer when the read ends. */
		ar->decided = true;
		ar->done_status = status;
		ar->done_step = step;
		snprintf(ar->done_reason, sizeof(ar->done_reason), "%s", reason ? reason : "");
		return;
	}
	rank_answer(ar, status, step, reason);
}

static void coord_join(struct daemon *d, const char *job, uint32_t world, uint32_t rank,
		       uint32_t node, uint64_t want, uint32_t flags, uint64_t nonce);
static void coord_report(struct daemon *d, const char *job, uint32_t rank, uint32_t node,
			 uint64_t round, uint64_t step, int status, const char *reason);

static void send_to_leader(struct agree_rank *ar, enum peer_type type, uint64_t step,
			   uint64_t xfer, int status, const char *reason)
{
	struct peer_msg m;

	memset(&m, 0, sizeof(m));
	m.h.type = (uint16_t)type;
	snprintf(m.job, sizeof(m.job), "%s", ar->job);
	m.step = step;
	m.world_size = ar->world;
	m.rank = ar->rank;
	m.xfer = xfer;
	m.status = status;
	snprintf(m.reason, sizeof(m.reason), "%s", reason ? reason : "");
	if (peer_send_agree(ar->d, 0, &m) < 0)
		rank_decided(ar, -CKPT_E_ABORTED, CKPT_NO_STEP,
			     "agreed restore: the leader (node 0) is not reachable");
}

static void rank_report(struct agree_rank *ar, uint64_t step, int status, const char *reason)
{
	if (coord_is_leader(ar->d))
		coord_report(ar->d, ar->job, ar->rank, peer_node_index(ar->d), ar->round, step, status,
			     reason);
	else
		send_to_leader(ar, PEER_AGREE_REPORT, step, ar->round, status, reason);
}

static void rank_try(struct agree_rank *ar, uint64_t step)
{
	if (ar->busy) {
		ar->next_try = step;
		return;
	}
	ar->have_ok = false;
	int r = restore_attempt_start(ar->c, ar->slot, step, ar);
	if (r < 0) {
		/* Reported from the loop's next turn: the coordinator may be
		 * in the middle of telling every rank to try. */
		ar->deferred = true;
		ar->deferred_status = r;
		ar->deferred_step = step;
		return;
	}
	ar->busy = true;
}

void agree_attempt_done(struct agree_rank *ar, uint64_t step, int result, const char *err,
			const struct ckpt_msg_restore_ok *ok, const char *tier)
{
	ar->busy = false;
	if (ar->decided) {
		if (result == 0 && ar->done_status == 0 && step == ar->done_step) {
			ar->have_ok = true;
			ar->ok_step = step;
			ar->ok = *ok;
		}
		rank_answer(ar, ar->done_status, ar->done_step, ar->done_reason);
		return;
	}
	if (ar->next_try != CKPT_NO_STEP) {
		/* The round moved on while this rank read an older candidate. */
		uint64_t next = ar->next_try;
		ar->next_try = CKPT_NO_STEP;
		rank_try(ar, next);
		return;
	}
	if (result == 0) {
		ar->have_ok = true;
		ar->ok_step = step;
		ar->ok = *ok;
		snprintf(ar->tier, sizeof(ar->tier), "%s", tier ? tier : "root");
	} else {
		log_warn("restore", "agreed restore attempt failed job=%s step=%llu rank=%u%s "
			 "error=\"%s\"", ar->job, (unsigned long long)step, ar->rank,
			 restore_error_is_damage(result) ? " damaged=1" : "", err);
	}
	char reason[CKPT_REASON_MAX + 1];
	snprintf(reason, sizeof(reason), "%s", result == 0 ? "" : err);
	rank_report(ar, step, result, reason);
}

void agree_request(struct client *c, uint32_t slot, uint64_t step, uint32_t flags, uint32_t seq)
{
	struct daemon *d = c->d;
	struct agree *a = state(d);
	struct agree_rank *ar = a ? calloc(1, sizeof(*ar)) : NULL;
	struct ckpt_msg m;

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_ERROR;
	m.seq = seq;
	if (!ar) {
		m.u.error.code = -ENOMEM;
		snprintf(m.u.error.message, sizeof(m.u.error.message), "agreed restore: out of memory");
		client_send(c, &m);
		return;
	}
	if (rank_find(d, c->job->name, c->rank)) {
		m.u.error.code = -CKPT_E_BUSY;
		snprintf(m.u.error.message, sizeof(m.u.error.message),
			 "job %s rank %u already waits in an agreed restore", c->job->name, c->rank);
		client_send(c, &m);
		free(ar);
		return;
	}
	ar->d = d;
	ar->c = c;
	c->refs++;
	snprintf(ar->job, sizeof(ar->job), "%s", c->job->name);
	ar->rank = c->rank;
	ar->world = c->world_size;
	ar->slot = slot;
	ar->seq = seq;
	ar->flags = flags;
	ar->want = step;
	ar->nonce = (++a->next_id & PEER_XFER_MASK) ? (a->next_id & PEER_XFER_MASK) : 1;
	ar->next_try = CKPT_NO_STEP;
	snprintf(ar->tier, sizeof(ar->tier), "root");
	/* Beyond the coordinator's deadline: on another node, the leader may
	 * go silent without being declared lost in time. */
	ar->deadline_ns = ckpt_mono_ns() + timeout_ns(d) + 2 * (int64_t)d->cfg->peer_timeout_ms * 1000000;
	c->slot_state[slot] = SLOT_RESTORING;
	ar->next = a->ranks;
	a->ranks = ar;
	log_info("restore", "agreed restore requested job=%s rank=%u world=%u step=%s", ar->job,
		 ar->rank, ar->world, step == CKPT_NO_STEP ? "latest" : "given");
	if (coord_is_leader(d))
		coord_join(d, ar->job, ar->world, ar->rank, peer_node_index(d), step, flags, ar->nonce);
	else
		send_to_leader(ar, PEER_AGREE_JOIN, step, ar->nonce, (int)flags, NULL);
}

/* ---- the coordinator --------------------------------------------------- */

static struct agree_round *round_find(struct daemon *d, const char *job)
{
	struct agree *a = d->agree;

	for (struct agree_round *rd = a ? a->rounds : NULL; rd; rd = rd->next)
		if (!rd->finished && !strcmp(rd->job, job))
			return rd;
	return NULL;
}

static void round_free(struct agree_round *rd)
{
	free(rd->cand);
	free(rd->node_of);
	free(rd->nonce_of);
	free(rd->verified);
	free(rd);
}

static void round_unlink(struct daemon *d, struct agree_round *rd)
{
	for (struct agree_round **pp = &d->agree->rounds; *pp; pp = &(*pp)->next)
		if (*pp == rd) {
			*pp = rd->next;
			return;
		}
}

/* Tell one rank, wherever it is, the round's verdict (or a TRY). */
/* 0, or -errno when a message for another node could not be sent (a TRY
 * that never arrives would leave the round waiting for that rank). */
static int tell_rank(struct daemon *d, const struct agree_round *rd, const char *job,
		     uint32_t world, uint32_t rank, uint32_t node, enum peer_type type,
		     uint64_t step, uint64_t xfer, int status, const char *reason)
{
	if (node == peer_node_index(d)) {
		struct agree_rank *ar = rank_find(d, job, rank);
		if (!ar)
			return 0; /* its client went away and was answered */
		if (type == PEER_AGREE_TRY) {
			ar->round = xfer;
			/* The leader is alive and asking: the safety net starts
			 * again (reading the shard is not limited by it). */
			ar->deadline_ns = ckpt_mono_ns() + timeout_ns(d) +
					  2 * (int64_t)d->cfg->peer_timeout_ms * 1000000;
			rank_try(ar, step);
		} else {
			rank_decided(ar, status, step, reason);
		}
		return 0;
	}
	struct peer_msg m;
	memset(&m, 0, sizeof(m));
	m.h.type = (uint16_t)type;
	snprintf(m.job, sizeof(m.job), "%s", job);
	m.step = step;
	m.world_size = world;
	m.rank = rank;
	m.xfer = xfer;
	m.status = status;
	snprintf(m.reason, sizeof(m.reason), "%s", reason ? reason : "");
	int r = peer_send_agree(d, node, &m);
	if (r < 0)
		log_warn("restore", "agreed restore: %s not sent job=%s rank=%u node=%u error=\"%s\"",
			 peer_type_name(type), job, rank, node, strerror(-r));
	(void)rd;
	return r;
}

/* The round ends: every rank that joined gets the verdict. */
static void round_finish(struct daemon *d, struct agree_round *rd, int status, uint64_t step,
			 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void round_finish(struct daemon *d, struct agree_round *rd, int status, uint64_t step,
			 const char *fmt, ...)
{
	char reason[CKPT_REASON_MAX + 1] = "";
	va_list ap;

	if (fmt) {
		va_start(ap, fmt);
		vsnprintf(reason, sizeof(reason), fmt, ap);
		va_end(ap);
	}
	if (status == 0)
		log_info("restore", "agreed on a step job=%s step=%llu world=%u bad_steps=%u", rd->job,
			 (unsigned long long)step, rd->world, rd->bad);
	else if (status == -CKPT_E_NO_CHECKPOINT)
		log_info("restore", "agreed restore: nothing to restore job=%s world=%u reason=\"%s\"",
			 rd->job, rd->world, reason); /* a fresh job: not a failure */
	else
		log_error("restore", "agreed restore failed for every rank job=%s world=%u "
			  "error=\"%s\"", rd->job, rd->world, reason);
	rd->finished = true;
	/* DONE names the rank's own request (its JOIN's nonce): the round may
	 * end before a TRY told the rank's node the round's id. */
	for (uint32_t r = 0; r < rd->world; r++)
		if (rd->node_of[r])
			tell_rank(d, rd, rd->job, rd->world, r, rd->node_of[r] - 1, PEER_AGREE_DONE,
				  status == 0 ? step : CKPT_NO_STEP, rd->nonce_of[r], status, reason);
	if (!rd->listing) {
		round_unlink(d, rd);
		round_free(rd);
	}
}

/* Every rank that joined tries the current candidate. */
static void round_try_current(struct daemon *d, struct agree_round *rd)
{
	if (rd->ci >= rd->ncand) {
		if (rd->bad)
			round_finish(d, rd, -CKPT_E_CORRUPT, 0,
				     "job %s: no committed step restores on every rank: %s", rd->job,
				     rd->warning);
		else
			round_finish(d, rd, -CKPT_E_NO_CHECKPOINT, 0, "job %s has no committed step%s",
				     rd->job, rd->want == CKPT_NO_STEP ? "" : " at or below the one asked for");
		return;
	}
	memset(rd->verified, 0, rd->world);
	rd->n_verified = 0;
	log_info("restore", "agreed restore tries job=%s step=%llu ranks_joined=%u world=%u",
		 rd->job, (unsigned long long)rd->cand[rd->ci], rd->joined, rd->world);
	int64_t unreachable = -1;
	for (uint32_t r = 0; r < rd->world && !rd->finished; r++)
		if (rd->node_of[r] &&
		    tell_rank(d, rd, rd->job, rd->world, r, rd->node_of[r] - 1, PEER_AGREE_TRY,
			      rd->cand[rd->ci], rd->id, 0, NULL) < 0)
			unreachable = rd->node_of[r] - 1;
	if (unreachable >= 0 && !rd->finished)
		round_finish(d, rd, -CKPT_E_ABORTED, 0, "job %s: agreed restore: node %lld is not "
			     "reachable", rd->job, (long long)unreachable);
}

struct list_task {
	struct daemon *d;
	struct agree_round *rd;
	char job[CKPT_JOB_NAME_MAX + 1];
	struct s3_origin s3;
	uint64_t *steps;
	size_t n;
	int error;
	char err[CKPT_REASON_MAX + 1];
};

/* Worker: the committed steps of the job, from the root's manifests (not
 * from any daemon's memory) and from S3. */
static void list_run(void *arg)
{
	struct list_task *t = arg;
	uint64_t *root = NULL, *s3 = NULL;
	size_t nroot = 0, ns3 = 0;
	int fd = openat(t->d->root_fd, t->job, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);

	if (fd >= 0) {
		t->error = store_list_steps(fd, true, &root, &nroot);
		close(fd);
		if (t->error < 0)
			snprintf(t->err, sizeof(t->err), "listing the steps of job %s in the root: %s",
				 t->job, strerror(-t->error));
	} else if (errno != ENOENT) {
		t->error = -errno;
		snprintf(t->err, sizeof(t->err), "opening job %s in the root: %s", t->job,
			 strerror(errno));
	}
	if (t->error == 0 && t->s3.cfg) {
		if (t->s3.current) {
			s3 = t->s3.n_steps ? malloc(t->s3.n_steps * sizeof(*s3)) : NULL;
			if (s3) {
				memcpy(s3, t->s3.steps, t->s3.n_steps * sizeof(*s3));
				ns3 = t->s3.n_steps;
			}
		} else {
			char err[300] = "";
			int r = s3_sync_list_steps(t->s3.cfg, t->s3.bucket, t->s3.job_key, &s3, &ns3,
						   err, sizeof(err));
			if (r < 0) {
				/* Without S3's list the candidates could skip
				 * the newest step: an error, not a guess. */
				t->error = r;
				snprintf(t->err, sizeof(t->err), "listing job %s on S3: %s", t->job, err);
			}
		}
	}
	if (t->error == 0) {
		/* Merge (both ascending), newest first, without duplicates. */
		t->steps = malloc((nroot + ns3 ? nroot + ns3 : 1) * sizeof(*t->steps));
		if (!t->steps) {
			t->error = -ENOMEM;
			snprintf(t->err, sizeof(t->err), "out of memory");
		} else {
			size_t i = nroot, k = ns3;
			while (i > 0 || k > 0) {
				uint64_t s;
				if (k == 0 || (i > 0 && root[i - 1] >= s3[k - 1])) {
					s = root[--i];
					if (k > 0 && s3[k - 1] == s)
						k--;
				} else {
					s = s3[--k];
				}
				t->steps[t->n++] = s;
			}
		}
	}
	free(root);
	free(s3);
}

static void list_done(void *arg)
{
	struct list_task *t = arg;
	struct daemon *d = t->d;
	struct agree_round *rd = t->rd;

	d->busy--;
	rd->listing = false;
	if (rd->finished) {
		round_unlink(d, rd);
		round_free(rd);
	} else if (t->error < 0) {
		round_finish(d, rd, t->error, 0, "%s", t->err);
	} else {
		/* The candidates: at or below the step asked for (which must
		 * itself be committed, as for a plain RESTORE), only that one
		 * with EXACT. */
		size_t n = 0;
		for (size_t i = 0; i < t->n; i++) {
			uint64_t s = t->steps[i];
			if (rd->want != CKPT_NO_STEP && s > rd->want)
				continue;
			if (rd->want != CKPT_NO_STEP && n == 0 && s != rd->want)
				break;
			t->steps[n++] = s;
			if (rd->flags & CKPT_RESTORE_F_EXACT)
				break;
		}
		rd->cand = t->steps;
		rd->ncand = n;
		t->steps = NULL;
		rd->ci = 0;
		round_try_current(d, rd);
	}
	uploader_origin_free(&t->s3);
	free(t->steps);
	free(t);
}

static struct agree_round *round_open(struct daemon *d, const char *job, uint32_t world,
				      uint64_t want, uint32_t flags)
{
	struct agree *a = state(d);
	struct agree_round *rd = a ? calloc(1, sizeof(*rd)) : NULL;
	struct list_task *t = rd ? calloc(1, sizeof(*t)) : NULL;

	if (!rd || !t || !(rd->node_of = calloc(world, sizeof(*rd->node_of))) ||
	    !(rd->nonce_of = calloc(world, sizeof(*rd->nonce_of))) ||
	    !(rd->verified = calloc(world, 1))) {
		if (rd)
			round_free(rd);
		free(t);
		return NULL;
	}
	snprintf(rd->job, sizeof(rd->job), "%s", job);
	rd->world = world;
	rd->want = want;
	rd->flags = flags;
	rd->id = (++a->next_id & PEER_XFER_MASK) ? (a->next_id & PEER_XFER_MASK) : 1;
	rd->deadline_ns = ckpt_mono_ns() + timeout_ns(d);
	rd->listing = true;
	t->d = d;
	t->rd = rd;
	snprintf(t->job, sizeof(t->job), "%s", job);
	if (uploader_origin(d, job, &t->s3) < 0)
		memset(&t->s3, 0, sizeof(t->s3));
	d->busy++;
	if (workers_submit(d->workers, list_run, list_done, t) < 0) {
		d->busy--;
		uploader_origin_free(&t->s3);
		free(t);
		round_free(rd);
		return NULL;
	}
	rd->next = a->rounds;
	a->rounds = rd;
	log_info("restore", "agreed restore round opened job=%s world=%u round=%llu timeout_ms=%u",
		 job, world, (unsigned long long)rd->id, d->cfg->restore_agree_timeout_ms);
	return rd;
}

/* Refuse one request that cannot join (it is not part of any round). */
static void refuse(struct daemon *d, const char *job, uint32_t world, uint32_t rank,
		   uint32_t node, uint64_t nonce, int status, const char *reason)
{
	log_warn("restore", "agreed restore refused job=%s rank=%u node=%u error=\"%s\"", job, rank,
		 node, reason);
	tell_rank(d, NULL, job, world, rank, node, PEER_AGREE_DONE, CKPT_NO_STEP, nonce, status,
		  reason);
}

static void coord_join(struct daemon *d, const char *job, uint32_t world, uint32_t rank,
		       uint32_t node, uint64_t want, uint32_t flags, uint64_t nonce)
{
	struct agree_round *rd = round_find(d, job);
	char why[CKPT_REASON_MAX + 1];

	if (rd && (rd->world != world || rd->want != want || rd->flags != flags)) {
		/* Ranks that want different things cannot agree: say so to
		 * all of them rather than let the others time out. */
		snprintf(why, sizeof(why), "job %s: rank %u asks for an agreed restore of %s%s "
			 "with %u ranks; the round has %s%s with %u ranks", job, rank,
			 want == CKPT_NO_STEP ? "the newest step" : "a given step",
			 flags & CKPT_RESTORE_F_EXACT ? " (exact)" : "", world,
			 rd->want == CKPT_NO_STEP ? "the newest step" : "a given step",
			 rd->flags & CKPT_RESTORE_F_EXACT ? " (exact)" : "", rd->world);
		refuse(d, job, world, rank, node, nonce, -EINVAL, why);
		round_finish(d, rd, -EINVAL, 0, "%s", why);
		return;
	}
	if (rd && rd->node_of[rank]) {
		snprintf(why, sizeof(why), "job %s: rank %u joined the agreed restore twice (nodes %u "
			 "and %u)", job, rank, rd->node_of[rank] - 1, node);
		refuse(d, job, world, rank, node, nonce, -CKPT_E_BUSY, why);
		round_finish(d, rd, -CKPT_E_BUSY, 0, "%s", why);
		return;
	}
	if (!rd && !(rd = round_open(d, job, world, want, flags))) {
		refuse(d, job, world, rank, node, nonce, -ENOMEM, "agreed restore: out of memory");
		return;
	}
	rd->node_of[rank] = node + 1;
	rd->nonce_of[rank] = nonce;
	rd->joined++;
	if (!rd->listing &&
	    tell_rank(d, rd, job, world, rank, node, PEER_AGREE_TRY, rd->cand[rd->ci], rd->id, 0,
		      NULL) < 0)
		round_finish(d, rd, -CKPT_E_ABORTED, 0, "job %s: agreed restore: node %u is not "
			     "reachable", job, node);
}

static void coord_report(struct daemon *d, const char *job, uint32_t rank, uint32_t node,
			 uint64_t round, uint64_t step, int status, const char *reason)
{
	struct agree_round *rd = round_find(d, job);

	if (rd && status == -CKPT_E_ABORTED && rank < rd->world && rd->node_of[rank] == node + 1 &&
	    (round == rd->id || round == rd->nonce_of[rank])) {
		/* The rank left (whatever the round was doing): the job cannot
		 * resume as a whole from this round. */
		round_finish(d, rd, -CKPT_E_ABORTED, 0, "job %s: rank %u (node %u) left the agreed "
			     "restore: %s", job, rank, node, reason && reason[0] ? reason : "gone");
		return;
	}
	if (!rd || rd->id != round || rd->listing || rd->ci >= rd->ncand ||
	    rd->cand[rd->ci] != step || rank >= rd->world || !rd->node_of[rank])
		return; /* a report for a candidate the round has left */
	if (status == 0) {
		if (!rd->verified[rank]) {
			rd->verified[rank] = 1;
			rd->n_verified++;
		}
		if (rd->n_verified == rd->world)
			round_finish(d, rd, 0, step, "%s", rd->warning);
		return;
	}
	if (!restore_error_is_damage(status)) {
		round_finish(d, rd, status, 0, "job %s step %llu, rank %u (node %u): %s", job,
			     (unsigned long long)step, rank, rd->node_of[rank] - 1,
			     reason && reason[0] ? reason : strerror(-status));
		return;
	}
	/* Damaged for the job: no rank may resume from it. */
	rd->bad++;
	log_error("restore", "step is damaged for the job, every rank moves to an older step "
		  "job=%s step=%llu rank=%u node=%u error=\"%s\"", job, (unsigned long long)step,
		  rank, rd->node_of[rank] - 1, reason ? reason : "");
	metrics_inc(M_RESTORE_BAD_STEPS_TOTAL, job);
	reason_append(rd->warning, sizeof(rd->warning), "%sstep %llu not restored (rank %u: %s)",
	       rd->warning[0] ? "; " : "", (unsigned long long)step, rank,
	       reason && reason[0] ? reason : strerror(-status));
	if (rd->flags & CKPT_RESTORE_F_EXACT) {
		round_finish(d, rd, -CKPT_E_CORRUPT, 0, "%s", rd->warning);
		return;
	}
	rd->ci++;
	round_try_current(d, rd);
}

void agree_peer_message(struct daemon *d, uint32_t node, const struct peer_msg *m)
{
	struct agree_rank *ar;

	switch (m->h.type) {
	case PEER_AGREE_JOIN:
		coord_join(d, m->job, m->world_size, m->rank, node, m->step, (uint32_t)m->status,
			   m->xfer);
		break;
	case PEER_AGREE_REPORT:
		coord_report(d, m->job, m->rank, node, m->xfer, m->step, m->status, m->reason);
		break;
	case PEER_AGREE_TRY:
		ar = rank_find(d, m->job, m->rank);
		if (!ar || ar->world != m->world_size)
			break;
		ar->round = m->xfer;
		rank_try(ar, m->step);
		break;
	case PEER_AGREE_DONE:
		ar = rank_find(d, m->job, m->rank);
		/* The round's verdict on (or a refusal of) this very request. */
		if (!ar || m->xfer != ar->nonce)
			break;
		rank_decided(ar, m->status, m->step, m->reason);
		break;
	default:
		break;
	}
}

void agree_client_gone(struct client *c)
{
	struct daemon *d = c->d;
	struct agree *a = d->agree;

	if (!a)
		return;
	for (;;) {
		struct agree_rank *ar = a->ranks;
		while (ar && (ar->c != c || ar->gone))
			ar = ar->next;
		if (!ar)
			break;
		char job[CKPT_JOB_NAME_MAX + 1], why[64];
		uint32_t rank = ar->rank, world = ar->world;
		uint64_t id = ar->round ? ar->round : ar->nonce;
		snprintf(job, sizeof(job), "%s", ar->job);
		snprintf(why, sizeof(why), "rank %u disconnected", rank);
		ar->gone = true;
		rank_decided(ar, -CKPT_E_ABORTED, CKPT_NO_STEP, why); /* may free ar */
		if (coord_is_leader(d)) {
			coord_report(d, job, rank, peer_node_index(d), id, 0, -CKPT_E_ABORTED, why);
			continue;
		}
		struct peer_msg m;
		memset(&m, 0, sizeof(m));
		m.h.type = PEER_AGREE_REPORT;
		snprintf(m.job, sizeof(m.job), "%s", job);
		m.step = 0;
		m.world_size = world;
		m.rank = rank;
		m.xfer = id;
		m.status = -CKPT_E_ABORTED;
		snprintf(m.reason, sizeof(m.reason), "%s", why);
		peer_send_agree(d, 0, &m);
	}
}

void agree_node_lost(struct daemon *d, uint32_t node, const char *why)
{
	struct agree *a = d->agree;

	if (!a)
		return;
	if (node == 0 && !coord_is_leader(d)) {
		for (struct agree_rank *ar = a->ranks, *next; ar; ar = next) {
			next = ar->next;
			if (!ar->decided)
				rank_decided(ar, -CKPT_E_ABORTED,
					     CKPT_NO_STEP, "agreed restore: the leader (node 0) was lost");
		}
		return;
	}
	for (struct agree_round *rd = a->rounds, *next; rd; rd = next) {
		next = rd->next;
		if (rd->finished)
			continue;
		bool there = false;
		for (uint32_t r = 0; r < rd->world && !there; r++)
			there = rd->node_of[r] == node + 1;
		if (there)
			round_finish(d, rd, -CKPT_E_ABORTED, 0,
				     "job %s: node %u, which has ranks of the round, was lost (%s)",
				     rd->job, node, why);
	}
}

/* ---- deadlines ------------------------------------------------------------ */

int agree_poll_ms(struct daemon *d)
{
	struct agree *a = d->agree;
	int64_t next = -1, now = ckpt_mono_ns();

	if (!a)
		return -1;
	for (struct agree_rank *ar = a->ranks; ar; ar = ar->next)
		if (ar->deferred)
			return 0;
	for (struct agree_round *rd = a->rounds; rd; rd = rd->next)
		if (!rd->finished && rd->joined < rd->world && (next < 0 || rd->deadline_ns < next))
			next = rd->deadline_ns;
	for (struct agree_rank *ar = a->ranks; ar; ar = ar->next)
		if (!coord_is_leader(d) && !ar->decided && !ar->busy && !ar->gone &&
		    (next < 0 || ar->deadline_ns < next))
			next = ar->deadline_ns;
	if (next < 0)
		return -1;
	return next <= now ? 0 : (int)((next - now) / 1000000 + 1);
}

void agree_tick(struct daemon *d)
{
	struct agree *a = d->agree;
	int64_t now = ckpt_mono_ns();

	if (!a)
		return;
	/* A report may answer and free other ranks: look again each time. */
	for (;;) {
		struct agree_rank *ar = a->ranks;
		while (ar && !ar->deferred)
			ar = ar->next;
		if (!ar)
			break;
		char why[CKPT_REASON_MAX + 1];
		ar->deferred = false;
		snprintf(why, sizeof(why), "rank %u: cannot start reading step %llu: %s", ar->rank,
			 (unsigned long long)ar->deferred_step, strerror(-ar->deferred_status));
		rank_report(ar, ar->deferred_step, ar->deferred_status, why);
	}
	for (struct agree_round *rd = a->rounds, *next; rd; rd = next) {
		next = rd->next;
		if (rd->finished || rd->joined == rd->world || now < rd->deadline_ns)
			continue;
		char missing[CKPT_REASON_MAX + 1] = "";
		uint32_t n = 0;
		for (uint32_t r = 0; r < rd->world; r++)
			if (!rd->node_of[r] && n++ < 16)
				reason_append(missing, sizeof(missing), "%s%u", n > 1 ? ", " : "", r);
		round_finish(d, rd, -ETIMEDOUT, 0,
			     "job %s: %u of %u ranks never asked for the agreed restore within %u ms "
			     "(missing: %s%s)", rd->job, rd->world - rd->joined, rd->world,
			     d->cfg->restore_agree_timeout_ms, missing, n > 16 ? ", ..." : "");
	}
	if (coord_is_leader(d))
		return;
	for (;;) {
		/* Deciding a rank may free it (and others): look again each time. */
		struct agree_rank *ar = a->ranks;
		while (ar && (ar->decided || ar->busy || ar->gone || now < ar->deadline_ns))
			ar = ar->next;
		if (!ar)
			break;
		/* The leader hears of it, or its round would wait for this rank. */
		static const char why[] = "agreed restore: no verdict from the leader (node 0) in time";
		struct peer_msg m;
		memset(&m, 0, sizeof(m));
		m.h.type = PEER_AGREE_REPORT;
		snprintf(m.job, sizeof(m.job), "%s", ar->job);
		m.world_size = ar->world;
		m.rank = ar->rank;
		m.xfer = ar->round ? ar->round : ar->nonce;
		m.status = -CKPT_E_ABORTED;
		snprintf(m.reason, sizeof(m.reason), "%s", why);
		peer_send_agree(d, 0, &m);
		rank_decided(ar, -ETIMEDOUT, CKPT_NO_STEP, why);
	}
}

void agree_fini(struct daemon *d)
{
	struct agree *a = d->agree;

	if (!a)
		return;
	/* Ranks first (their answers), then the rounds (a listing worker has
	 * returned by now: the workers are gone). */
	for (struct agree_rank *ar = a->ranks, *next; ar; ar = next) {
		next = ar->next;
		if (ar->busy) {
			rank_unlink(ar);
			client_unref(ar->c);
			free(ar);
			continue;
		}
		rank_answer(ar, -CKPT_E_DISCONNECTED, CKPT_NO_STEP, "ckptd is stopping");
	}
	while (a->rounds) {
		struct agree_round *rd = a->rounds;
		a->rounds = rd->next;
		round_free(rd);
	}
	free(a);
	d->agree = NULL;
}
