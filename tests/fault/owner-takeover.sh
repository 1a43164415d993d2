#!/bin/bash
# SPDX-License-Identifier: MIT
# A job moves to another ckptd once its owner is gone: after kill -9 of the
# owner (the kernel drops its OWNER lock), a second daemon on the same root,
# started while the first still ran, takes the job over at its first HELLO
# and recovers it then: the step left in flight goes, LATEST names the
# newest committed step, the ranks restore it and save on.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/owner-lib.sh"

B_OPTS=(--socket "$(sock b)" --job ja --seed 41 --tensors 4 --min-bytes 4K --max-bytes 1M)
# b first: its start-up comes before step 4 exists.
ckptd_start b "$ROOT" --keep-last 0
start_inflight
ckptd_kill9 a
kill -9 "$R0" "$R1" 2>/dev/null
wait "$R0" "$R1" 2>/dev/null
[ -d "$(stepdir "$JOB" 4)" ] || fail "step 4 vanished before b took job ja over"
expect_committed "$JOB" "1 2 3"

run_ranks 2 b-restore "${B_OPTS[@]}" --restore latest --expect-step 3
grep -q "removing uncommitted step job=ja step=4" "$T/ckptd-b.log" ||
	fail "b did not recover job ja when it took it over"
[ -e "$(stepdir "$JOB" 4)" ] && fail "step 4 (never committed) survived b's takeover of job ja"
expect_latest "$JOB" 3
grep -qx "pid=${CKPTD_PID[b]}" "$JOB/OWNER" || fail "$JOB/OWNER does not name b: $(cat "$JOB/OWNER")"
run_ranks 2 b-save "${B_OPTS[@]}" --steps 4,5 --wait
expect_committed "$JOB" "1 2 3 4 5"
[ "$(verify_all "$JOB")" = 5 ] || fail "not every committed step verifies"

# And back to a restarted a once b stops cleanly.
ckptd_stop b
ckptd_start a "$ROOT" --keep-last 0
run_ranks 2 a-restore --socket "$(sock a)" --job ja --seed 41 --tensors 4 --min-bytes 4K \
	--max-bytes 1M --restore latest --expect-step 5
ckptd_stop a
log "pass"
