#!/bin/bash
# SPDX-License-Identifier: MIT
# ckptd killed (kill -9) and restarted in the middle of a 2-rank job that
# checkpoints asynchronously: training never stops (every step runs and the
# job exits 0), saves while ckptd is gone are reported as failed with a
# backoff, saves after the restart commit, and the next run resumes from
# the newest committed step, which verifies.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-train.sh"

NP=2
STEPS=300
ROOT=$T/root
JOB=$ROOT/cr
CK=(--ckpt-mode async --ckpt-every 5 --socket "$(sock d)" --job cr --wait-ms 10000)
# About 25 ms a step: some 10 s in all.
RUN=("${TINY[@]}" --steps $STEPS --log-every 1 --step-sleep-ms 20 "${CK[@]}")

ckptd_start d "$ROOT" --keep-last 0
train_start $NP run "${RUN[@]}" --no-resume
wait_log run "ckpt step [0-9]+ committed" 30 || fail "no save committed before the kill"
sleep 1
ckptd_kill9 d
killed_at=$(grep -Eo '^step [0-9]+' "$T/run.log" | tail -n 1 | cut -d' ' -f2)
before=$(last_committed run)
log "ckptd killed near step $killed_at; last commit seen: $before"
sleep 2
kill -0 "$TRAIN_PID" 2>/dev/null || fail "the job stopped while ckptd was down"
restarted_at=$(grep -Eo '^step [0-9]+' "$T/run.log" | tail -n 1 | cut -d' ' -f2)
[ "$restarted_at" -gt "$killed_at" ] || fail "training did not progress while ckptd was down (step $killed_at -> $restarted_at)"
ckptd_start d "$ROOT" --keep-last 0
log "ckptd restarted near step $restarted_at"

# The job must end by itself, with status 0.
for i in $(seq 1 600); do
	kill -0 "$TRAIN_PID" 2>/dev/null || break
	sleep 0.05
done
kill -0 "$TRAIN_PID" 2>/dev/null && fail "the job did not finish within 30 s of the restart"
wait "$TRAIN_PID"
rc=$?
[ "$rc" -eq 0 ] || fail "the job exited with status $rc"

# Every step ran, once.
n=$(grep -cE '^step [0-9]+ loss' "$T/run.log")
[ "$n" -eq $STEPS ] || fail "$n step lines, expected $STEPS"
grep -q "^step $STEPS loss" "$T/run.log" || fail "step $STEPS was not logged"
grep -Eq 'ckpt step [0-9]+ failed: ckptd unreachable \(retry in [0-9.]+ s\)' "$T/run.log" ||
	fail "no save was reported as skipped while ckptd was unreachable"
grep -q 'ckpt: ckptd reachable again' "$T/run.log" || fail "the trainer never reconnected"
after=$(grep -Eo 'ckpt step [0-9]+ committed' "$T/run.log" | awk -v r="$restarted_at" '$3 > r { n++ } END { print n + 0 }')
[ "$after" -ge 1 ] || fail "no save after the restart (step $restarted_at) committed"
newest=$(last_committed run)
log "saves committed after the restart: $after; newest $newest"
[ "$newest" -eq $STEPS ] || fail "the last step ($STEPS) was not committed (newest $newest)"
# The backoff kept failed attempts cheap: few reconnect attempts, not one per save.
attempts=$(grep -c 'ckptd unreachable; next save attempt' "$T/run.log")
skipped=$(grep -c 'failed: ckptd unreachable (retry in' "$T/run.log")
log "while ckptd was down: $attempts failed attempts, $skipped saves skipped without trying"
[ "$attempts" -le 4 ] || fail "$attempts reconnect attempts in about 2 s: no backoff"

# Commits on disk agree with the log; the newest verifies.
disk=$(committed_steps "$JOB" | tail -n 1)
[ "$disk" = "$newest" ] || fail "newest committed on disk '$disk', log says $newest"
verify "$JOB" "$newest"

# A later run resumes from the newest committed step and goes on.
train_run $NP resume "${TINY[@]}" --steps $((STEPS + 20)) "${CK[@]}"
grep -q "^resumed from step $newest\$" "$T/resume.log" || fail "the next run did not resume from step $newest"
grep -q "ckpt step $((STEPS + 20)) committed" "$T/resume.log" || fail "the resumed run's last save did not commit"
verify "$JOB" $((STEPS + 20))
ckptd_stop d
log "pass"
