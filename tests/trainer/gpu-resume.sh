#!/bin/bash
# SPDX-License-Identifier: MIT
# Bit-exact resume on the GPU (resume.sh with --device cuda): the job is
# killed with kill -9 at random points twice and restarted; it must end
# with parameters and optimizer state bitwise identical to the same job
# run straight through. Then a CPU job of the same shape resumes from the
# GPU job's last checkpoint: the checkpoints are interchangeable. Skipped
# without a GPU.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-train.sh"

gpu_setup
NP=$GPU_NP
STEPS=600
ROOT=$T/root
JOB=$ROOT/gr
RUN=("${TINY[@]}" --steps $STEPS --log-every 1 --device cuda)

train_run $NP straight "${RUN[@]}" --ckpt-mode off --dump "$T/straight.%r"

ckptd_start d "$ROOT" --keep-last 0
# A GPU step takes about a millisecond: slow the job down so that it is
# still running when it is killed. The pause changes nothing else.
CK=(--ckpt-mode async --ckpt-every 10 --socket "$(sock d)" --job gr --step-sleep-ms 4)

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
	target=$(((floor + 20 + RANDOM % 150) / 10 * 10))
	train_start $NP run$round "${RUN[@]}" "${CK[@]}"
	wait_log run$round "ckpt step $target committed" 60 ||
		fail "round $round: step $target never committed"
	sleep "0.$((RANDOM % 16 + 10))"
	train_kill9
	check_resumed run$round "$floor"
	sleep 0.5
	floor=$(committed_steps "$JOB" | tail -n 1)
	[ -n "$floor" ] && [ "$floor" -ge "$target" ] || fail "round $round: newest committed step '$floor' < $target"
	log "round $round: newest committed $floor"
	[ "$floor" -lt $STEPS ] || fail "the job finished before it was killed; make it slower"
done

train_run $NP final "${RUN[@]}" "${CK[@]}" --dump "$T/resumed.%r"
check_resumed final "$floor"
grep -q "ckpt step $STEPS committed" "$T/final.log" || fail "step $STEPS was not committed"
for r in $(seq 0 $((NP - 1))); do
	cmp "$T/straight.$r" "$T/resumed.$r" ||
		fail "rank $r: final state differs between the straight and the resumed run"
done
grep -q 'cudaHostRegister.*failed' "$T"/run*.log "$T/final.log" &&
	log "note: the arena could not be registered; saves copied from pageable memory"

# The same slices and blob on both variants: the CPU picks up step $STEPS.
train_run $NP cpu "${TINY[@]}" --steps $((STEPS + 20)) --log-every 1 --ckpt-mode async \
	--ckpt-every 10 --socket "$(sock d)" --job gr
check_resumed cpu $STEPS
grep -q "^step $((STEPS + 20)) loss" "$T/cpu.log" || fail "the CPU job did not train on"
n=$(verify_all "$JOB")
log "$n committed steps verify"
ckptd_stop d
log "pass"
