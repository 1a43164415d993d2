#!/bin/bash
# SPDX-License-Identifier: MIT
# kill -9 of one rank halfway through copying step 20 into its slot: step
# 20 never commits, the other ranks get FAILED for it, ckptd keeps serving,
# and step 30 commits once a restarted rank 3 has joined.
. "$(dirname "$0")/../integration/lib.sh"

ROOT=$T/root
JOB=$ROOT/kr
OPTS=(--socket "$(sock d)" --job kr --seed 11 --tensors 6 --min-bytes 1M --max-bytes 48M --timeout-ms 30000)
ckptd_start d "$ROOT" --keep-last 0
pids=()
# The survivors save step 30 only once the new rank 3 is connected ($T/gate).
for r in 0 1 2; do
	rank_start r$r "${OPTS[@]}" --rank $r --world 4 --steps 10,20,30 --wait --expect-fail 20 \
		--gate "30:$T/gate"
	pids+=("$LAST_PID")
done
rank_start r3-dies "${OPTS[@]}" --rank 3 --world 4 --steps 10,20 --wait --die-in-step 20 --die-when copy
wait "$LAST_PID"
rc=$?
[ "$rc" -eq 137 ] || fail "rank 3 was to die by SIGKILL in step 20, exit status $rc"
grep_log r3-dies "step 10 committed" || fail "step 10 did not commit before the kill"

# The survivors must hear that step 20 failed.
for i in $(seq 1 300); do
	n=0
	for r in 0 1 2; do grep_log r$r "step 20 FAILED" && n=$((n + 1)); done
	[ $n -eq 3 ] && break
	ckptd_alive d || fail "ckptd died after a rank was killed"
	sleep 0.1
done
[ $n -eq 3 ] || fail "not every surviving rank got FAILED for step 20 within 30 s"
[ -f "$(stepdir "$JOB" 20)/MANIFEST.json" ] && fail "step 20 committed without rank 3"

rank_start r3-new "${OPTS[@]}" --rank 3 --world 4 --steps 30 --wait
pids+=("$LAST_PID")
for i in $(seq 1 300); do
	grep_log r3-new "connected" && break
	sleep 0.1
done
touch "$T/gate"
for r in 0 1 2; do rank_wait "${pids[$r]}" r$r; done
rank_wait "${pids[3]}" r3-new
expect_committed "$JOB" "10 30"
for i in $(seq 1 50); do [ -e "$(stepdir "$JOB" 20)" ] || break; sleep 0.1; done
[ -e "$(stepdir "$JOB" 20)" ] && fail "the abandoned step 20's directory was not removed"
verify_all "$JOB" >/dev/null
run_ranks 4 restore "${OPTS[@]}" --restore latest --expect-step 30
ckptd_stop d
log "pass"
