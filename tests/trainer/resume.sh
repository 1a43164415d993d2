#!/bin/bash
# SPDX-License-Identifier: MIT
# Bit-exact resume: a job checkpointing through ckptd is killed (kill -9
# of mpirun and every rank) at random points twice and restarted each time;
# it must end with parameters and optimizer state bitwise identical to the
# same job run straight through without checkpoints. Every committed step
# verifies.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-train.sh"

NP=2
STEPS=600
ROOT=$T/root
JOB=$ROOT/kr
RUN=("${TINY[@]}" --steps $STEPS --log-every 1)

train_run $NP straight "${RUN[@]}" --ckpt-mode off --dump "$T/straight.%r"

ckptd_start d "$ROOT" --keep-last 0
CK=(--ckpt-mode async --ckpt-every 10 --socket "$(sock d)" --job kr)

# check_resumed LOGNAME MIN: the run resumed from a committed step >= MIN.
check_resumed() {
	local from
	[ "$2" -gt 0 ] || return 0
	from=$(sed -n 's/^resumed from step \([0-9]*\)$/\1/p' "$T/$1.log")
	[ -n "$from" ] || fail "$1 did not resume"
	[ "$from" -ge "$2" ] && [ -f "$(stepdir "$JOB" "$from")/MANIFEST.json" ] ||
		fail "$1 resumed from step $from, expected a committed step >= $2"
	log "$1 resumed from step $from"
}

floor=0
for round in 1 2; do
	# Kill after a random commit (so that the restart really resumes),
	# a random moment later.
	target=$(((floor + 20 + RANDOM % 150) / 10 * 10))
	train_start $NP run$round "${RUN[@]}" "${CK[@]}"
	wait_log run$round "ckpt step $target committed" 60 ||
		fail "round $round: step $target never committed"
	sleep "0.$((RANDOM % 16 + 10))" # 0.10 to 0.25 s
	train_kill9
	last=$(last_committed run$round)
	log "round $round: killed after step $(grep -Eo '^step [0-9]+' "$T/run$round.log" | tail -n 1 | cut -d' ' -f2), last commit seen $last"
	check_resumed run$round "$floor"
	# A save handed over before the kill still commits: let ckptd settle.
	sleep 0.5
	floor=$(committed_steps "$JOB" | tail -n 1)
	[ -n "$floor" ] && [ "$floor" -ge "$target" ] || fail "round $round: newest committed step '$floor' < $target"
	uncommitted=$(uncommitted_steps "$JOB")
	log "round $round: newest committed $floor; uncommitted dirs: ${uncommitted:-none}"
	[ "$floor" -lt $STEPS ] || fail "the job finished before it was killed; make it slower"
done

train_run $NP final "${RUN[@]}" "${CK[@]}" --dump "$T/resumed.%r"
check_resumed final "$floor"
grep -q "ckpt step $STEPS committed" "$T/final.log" || fail "step $STEPS was not committed"
for r in $(seq 0 $((NP - 1))); do
	cmp "$T/straight.$r" "$T/resumed.$r" ||
		fail "rank $r: final state differs between the straight and the resumed run"
done
n=$(verify_all "$JOB")
log "$n committed steps verify"
ckptd_stop d
log "pass"
