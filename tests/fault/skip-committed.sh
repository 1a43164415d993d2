#!/bin/bash
# SPDX-License-Identifier: MIT
# A SKIP only ever concerns an open step the sender takes part in
# (PROTOCOL.md, SKIP). A rank that comes back and SKIPs a step number that
# is already committed (a trainer under backpressure=skip that rolled back
# and counts again) is answered SKIPPED, and the committed step stays:
# its directory and MANIFEST.json, LATEST, nothing moved to .trash, and it
# still verifies and restores.
. "$(dirname "$0")/../integration/lib.sh"
: "${CKPT_RAW_CLIENT:?CKPT_RAW_CLIENT must name ckpt-raw-client}"

ROOT=$T/root
ckptd_start d "$ROOT" --keep-last 0 --backpressure skip

timeout 60 "$CKPT_RAW_CLIENT" --socket "$(sock d)" --root "$ROOT" --case skip-committed-step \
	>"$T/raw-client.log" 2>&1
rc=$?
cat "$T/raw-client.log"
ckptd_alive d || fail "ckptd died"
[ "$rc" -eq 0 ] || fail "ckpt-raw-client skip-committed-step failed (exit $rc)"

JOB=$(ls -d "$ROOT"/raw-*-skipc) || fail "the raw client's job directory is missing"
expect_committed "$JOB" "10"
expect_latest "$JOB" 10
verify "$JOB" 10
[ -z "$(ls -A "$ROOT/.trash" 2>/dev/null)" ] ||
	fail "the SKIP of a committed step moved something to .trash: $(ls -A "$ROOT/.trash")"
grep_log ckptd-d "SKIP changes nothing job=${JOB##*/} step=10" ||
	fail "ckptd did not log why the SKIP changed nothing"
grep_log ckptd-d "removed job=${JOB##*/}" && fail "ckptd removed a step of ${JOB##*/}"
grep_log ckptd-d "step abandoned job=${JOB##*/}" && fail "ckptd abandoned a step of ${JOB##*/}"

# The same through libckpt, for a job of two ranks: both commit 10 and 20;
# then rank 1 comes back and saves 10 again (refused: committed), while the
# job's steps stay as they are.
OPTS=(--socket "$(sock d)" --job roll --seed 5 --tensors 3 --min-bytes 4K --max-bytes 64K)
run_ranks 2 first "${OPTS[@]}" --steps 10,20 --wait
rank_start again-1 "${OPTS[@]}" --rank 1 --world 2 --steps 10 --wait --timeout-ms 5000
p=$LAST_PID
wait "$p"
grep -q "already committed" "$T/again-1.log" || fail "a SAVE of a committed step was not refused as committed"
sleep 0.5
expect_committed "$ROOT/roll" "10 20"
verify_all "$ROOT/roll" >/dev/null
ckptd_stop d
log "pass"
