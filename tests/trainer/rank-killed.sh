#!/bin/bash
# SPDX-License-Identifier: MIT
# One rank killed (kill -9, not mpirun) in the middle of a 2-rank job that
# checkpoints asynchronously: mpirun stops the job with a non-zero status;
# no step directory without MANIFEST.json is ever taken for committed (ckptd
# restarted, ckpt-inspect lists only complete steps, and they verify); the
# restarted job resumes from the newest committed step and finishes.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-train.sh"

NP=2
STEPS=400
ROOT=$T/root
JOB=$ROOT/rk
CK=(--ckpt-mode async --ckpt-every 5 --socket "$(sock d)" --job rk --wait-ms 10000)
RUN=("${TINY[@]}" --steps $STEPS --log-every 1 "${CK[@]}")

# inspect_steps: "STEP STATE" per step directory, as ckpt-inspect --json sees them.
inspect_steps() {
	local out
	out=$(timeout 60 "$CKPT_INSPECT" "$JOB" --json) || fail "ckpt-inspect $JOB --json failed"
	printf '%s' "$out" | python3 -c '
import json, sys
for s in json.load(sys.stdin)["steps"]:
    print(s["step"], s["state"])' || fail "ckpt-inspect --json printed no step list"
}

ckptd_start d "$ROOT" --keep-last 0
# Slow enough (about 25 ms a step) that the kill lands mid-run.
train_start $NP run "${RUN[@]}" --no-resume --step-sleep-ms 20
wait_log run "ckpt step [0-9]+ committed" 30 || fail "no save committed before the kill"
sleep "0.$((RANDOM % 50 + 50))" # 0.5 to 1 s: saves are in flight all the time
ranks=$(for p in $(descendants "$TRAIN_PID"); do
	[ "$(cat /proc/"$p"/comm 2>/dev/null)" = ckpt-train ] && echo "$p"
done)
[ "$(echo "$ranks" | wc -w)" -eq $NP ] || fail "expected $NP ranks below mpirun, found: $ranks"
victim=$(echo "$ranks" | tail -n 1)
kill -9 "$victim"
log "killed rank pid $victim near step $(grep -Eo '^step [0-9]+' "$T/run.log" | tail -n 1 | cut -d' ' -f2)"

# mpirun must notice and end the job, with a failure status.
for i in $(seq 1 300); do
	kill -0 "$TRAIN_PID" 2>/dev/null || break
	sleep 0.05
done
kill -0 "$TRAIN_PID" 2>/dev/null && fail "mpirun still runs 15 s after a rank was killed"
wait "$TRAIN_PID"
rc=$?
[ "$rc" -ne 0 ] || fail "mpirun exited 0 although a rank was killed"
grep -q "^step $STEPS loss" "$T/run.log" && fail "the job reached its last step: the kill came too late"
for p in $ranks; do
	for i in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
	kill -0 "$p" 2>/dev/null && fail "rank pid $p survived the end of the job"
done
log "mpirun exited with status $rc"

# What is on disk now: a directory without a manifest must not read as committed.
while read -r s state; do
	if [ -f "$(stepdir "$JOB" "$s")/MANIFEST.json" ]; then
		[ "$state" = committed ] || fail "step $s has a manifest but ckpt-inspect says $state"
	else
		[ "$state" != committed ] || fail "step $s has no manifest but ckpt-inspect says committed"
	fi
done < <(inspect_steps)

# ckptd restarted and took the job over: only complete steps remain, and
# each verifies.
ckptd_kill9 d
ckptd_start d "$ROOT" --keep-last 0
job_takeover "$(sock d)" rk
listed=$(inspect_steps)
[ -n "$listed" ] || fail "no step left after the restart"
echo "$listed" | awk '$2 != "committed" { bad = 1 } END { exit bad }' ||
	fail "ckpt-inspect lists steps that are not committed after the restart: $(echo "$listed" | tr '\n' ' ')"
[ -z "$(uncommitted_steps "$JOB")" ] || fail "uncommitted step dirs survived the restart: $(uncommitted_steps "$JOB" | tr '\n' ' ')"
n=$(verify_all "$JOB")
newest=$(committed_steps "$JOB" | tail -n 1)
log "after the restart: $n committed steps, all verify; newest $newest"

# The restarted job resumes from the newest committed step and finishes.
train_run $NP again "${RUN[@]}"
grep -q "^resumed from step $newest\$" "$T/again.log" ||
	fail "the restarted job did not resume from step $newest: $(grep -E '^(resumed|no checkpoint)' "$T/again.log")"
grep -q "^step $STEPS loss" "$T/again.log" || fail "the restarted job did not reach step $STEPS"
grep -q "ckpt step $STEPS committed" "$T/again.log" || fail "the restarted job's last save did not commit"
verify "$JOB" $STEPS
ckptd_stop d
log "pass"
