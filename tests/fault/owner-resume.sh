#!/bin/bash
# SPDX-License-Identifier: MIT
# A ckptd restarted after kill -9 takes back, by itself, the jobs it owned
# (their OWNER names its holder): it recovers them with no rank connected
# (the step left in flight goes, LATEST names the newest committed step)
# and lets them go once idle. A job another daemon owns, with a save in
# flight, is not touched by that restart, and the released job can then be
# taken by the other daemon.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/owner-lib.sh"
: "${CKPT_RAW_CLIENT:?CKPT_RAW_CLIENT must name the ckpt-raw-client binary}"

# b owns job jb, whose step 2 stays in flight (rank 1 waits at a gate).
B_OPTS=(--socket "$(sock b)" --job jb --world 2 --seed 51 --tensors 2 --min-bytes 4K
	--max-bytes 64K --steps 1,2 --wait --timeout-ms 40000)
ckptd_start b "$ROOT" --keep-last 0
rank_start b-r0 "${B_OPTS[@]}" --rank 0
B0=$LAST_PID
rank_start b-r1 "${B_OPTS[@]}" --rank 1 --gate "2:$T/bgate"
B1=$LAST_PID
wait_for() { local i; for i in $(seq 1 $(($1 * 20))); do "${@:2}" && return 0; sleep 0.05; done; return 1; }
wait_for 10 test -e "$(stepdir "$ROOT/jb" 2)/rank-000000.index" ||
	fail "step 2 of job jb did not become durable on rank 0"

# a owns job ja, step 4 in flight; then a and its ranks die.
start_inflight
ckptd_kill9 a
kill -9 "$R0" "$R1" 2>/dev/null
wait "$R0" "$R1" 2>/dev/null
[ -d "$(stepdir "$JOB" 4)" ] || fail "step 4 of ja vanished before the restart"

ckptd_start a "$ROOT" --keep-last 0
wait_for 10 test ! -e "$(stepdir "$JOB" 4)" ||
	fail "the restarted a did not recover its job ja (step 4, never committed, is still there)"
errs=
[ -e "$(stepdir "$ROOT/jb" 2)/rank-000000.shard" ] ||
	errs+="a's restart removed step 2 of job jb, which b is saving; "
grep -q 'job=jb' "$T/ckptd-a.log" && errs+="a's log names b's job jb: $(grep 'job=jb' "$T/ckptd-a.log" | head -2 | tr '\n' '|'); "
[ -z "$errs" ] || fail "$errs"
expect_committed "$JOB" "1 2 3"
expect_latest "$JOB" 3
grep -q "^holder=single:" "$JOB/OWNER" || fail "$JOB/OWNER names no holder: $(cat "$JOB/OWNER")"
grep -q "resumed job=ja" "$T/ckptd-a.log" || fail "a did not log that it resumed job ja"
wait_for 10 grep_log ckptd-a "job released job=ja" || fail "a kept job ja although nothing uses it"

# b's save goes on; ja, released by a, is b's to take now.
touch "$T/bgate"
rank_wait "$B0" b-r0
rank_wait "$B1" b-r1
expect_committed "$ROOT/jb" "1 2"
out=$("$CKPT_RAW_CLIENT" --socket "$(sock b)" --hello ja)
[ "$out" = HELLO_OK ] || fail "b could not take job ja after a released it: $out"
[ "$(verify_all "$JOB")" = 3 ] || fail "not every committed step of ja verifies"
ckptd_stop a
ckptd_stop b
log "pass"
