#!/bin/bash
# SPDX-License-Identifier: MIT
# A node is lost and replaced: ckpt-train (6 ranks, 2 per node) checkpoints
# through 3 daemons that keep their partner's ranks in memory; the job is
# killed (kill -9 of every rank) after a commit, node 1's daemon is killed
# too and its node-local directory wiped, and a fresh daemon takes node 1's
# place. The resumed job must end bitwise identical to the same job run
# straight through, and node 1's ranks must have come back from node 2's
# memory (restore bytes of tier "partner"), not from the root.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/../trainer/lib-train.sh"
. "$(dirname "$0")/lib-cluster.sh"

NP=$WORLD
STEPS=300
JOB=$ROOT/nl
RUN=("${TINY[@]}" --steps $STEPS --log-every 1)
CK=(--ckpt-mode async --ckpt-every 10 --job nl)
CLUSTER_OPTS+=(--partner-memory 256MiB --partners 1)

cluster_train_wrapper

train_run $NP straight "${RUN[@]}" --ckpt-mode off --dump "$T/straight.%r"

cluster_start
target=$((40 + RANDOM % 8 * 10))
train_start $NP run1 "${RUN[@]}" "${CK[@]}"
wait_log run1 "ckpt step $target committed" 120 || fail "step $target never committed"
sleep "0.$((RANDOM % 16 + 10))"
train_kill9
log "killed the job after step $(grep -Eo '^step [0-9]+' "$T/run1.log" | tail -n 1 | cut -d' ' -f2), last commit seen $(last_committed run1)"

# Let a save handed over before the kill finish (or fail): the newest
# committed step stops moving.
prev=
for i in $(seq 1 40); do
	cur=$(committed_steps "$JOB" | tail -n 1)
	[ -n "$cur" ] && [ "$cur" = "$prev" ] && break
	prev=$cur
	sleep 0.5
done
floor=$(committed_steps "$JOB" | tail -n 1)
[ -n "$floor" ] && [ "$floor" -ge "$target" ] || fail "newest committed step '$floor' < $target"
[ "$floor" -lt $STEPS ] || fail "the job finished before it was killed; make it slower"
# Node 1's ranks' copies of that step reach node 2's memory.
for r in $(ranks_of 1); do
	for i in $(seq 1 150); do
		grep -q "partner copy received job=nl step=$floor rank=$r " "$T/ckptd-n2.log" && break
		sleep 0.2
	done
	grep -q "partner copy received job=nl step=$floor rank=$r " "$T/ckptd-n2.log" ||
		fail "node 2 did not receive the partner copy of rank $r of step $floor"
done
pb=$(metric 2 ckpt_partner_bytes)
log "newest committed step $floor; node 2 holds $pb bytes of partner copies"
[ "${pb%.*}" -gt 0 ] 2>/dev/null || fail "node 2 holds no partner copy (ckpt_partner_bytes $pb)"

log "node 1 is lost: kill -9 its daemon, wipe its node-local directory, start a fresh one"
ckptd_kill9 n1
rm -rf "$(node_dir 1)"
node_start 1
cluster_wait_whole 30
for t in partner root s3; do
	v=$(metric 1 ckpt_restore_bytes_total ckpt_job=nl tier=$t)
	[ "$v" = 0 ] || fail "the fresh node 1 daemon starts with restore bytes $v of tier $t"
done

train_run $NP final "${RUN[@]}" "${CK[@]}" --dump "$T/resumed.%r"
from=$(sed -n 's/^resumed from step \([0-9]*\)$/\1/p' "$T/final.log" | head -n 1)
[ "$from" = "$floor" ] || fail "the job resumed from step '$from', expected the newest committed step $floor"
log "resumed from step $from"
grep -q "ckpt step $STEPS committed" "$T/final.log" || fail "step $STEPS was not committed"
for r in $(seq 0 $((NP - 1))); do
	cmp "$T/straight.$r" "$T/resumed.$r" ||
		fail "rank $r: final state differs between the straight and the resumed run"
done

for r in $(ranks_of 1); do
	grep -q "fetched from partner memory job=nl step=$floor rank=$r " "$T/ckptd-n1.log" ||
		fail "node 1 did not log fetching rank $r of step $floor from partner memory"
done
partner=$(metric 1 ckpt_restore_bytes_total ckpt_job=nl tier=partner)
root=$(metric 1 ckpt_restore_bytes_total ckpt_job=nl tier=root)
log "node 1 restored $partner bytes from partner memory, $root from the root"
[ "${partner%.*}" -gt 0 ] 2>/dev/null || fail "node 1 restored nothing from partner memory (tier=partner $partner)"
[ "$root" = 0 ] || fail "node 1 read $root bytes from the root, expected all from partner memory"
# Messages of the old node 1, or racing the fresh one's HELLO, may be
# turned away as stale; nothing else may be.
for k in 0 1 2; do
	for reason in malformed auth cluster conflict; do
		v=$(metric $k ckpt_peer_rejected_total reason=$reason)
		[ "$v" = 0 ] || fail "node $k rejected $v peer messages as $reason"
	done
done
n=$(verify_all "$JOB")
log "$n committed steps verify"
for k in 2 1 0; do
	ckptd_stop n$k
done
log "pass"
