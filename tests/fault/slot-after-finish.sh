#!/bin/bash
# SPDX-License-Identifier: MIT
# A rank that keeps writing into its slot after ckpt_save_finish (as an
# unsynchronised GPU copy into reserved memory would): the save must fail
# with a reason that names the rank, the step and the tensor, and never
# commit; the next save of the same rank, left alone, commits and
# verifies, and ckptd keeps serving.
. "$(dirname "$0")/../integration/lib.sh"

ROOT=$T/root
JOB=$ROOT/sa
OPTS=(--socket "$(sock d)" --job sa --seed 4 --tensors 4 --min-bytes 8M --max-bytes 32M --timeout-ms 30000)
ckptd_start d "$ROOT" --keep-last 0
rank_start r0 "${OPTS[@]}" --rank 0 --world 1 --steps 1,2,3 --wait --expect-fail 2 --scribble-step 2
rank_wait "$LAST_PID" r0
grep_log r0 "step 1 committed" || fail "step 1 did not commit: $(cat "$T/r0.log")"
grep_log r0 "step 2 accepted; writing into its slot" || fail "rank 0 did not write into step 2's slot"
grep_log r0 "step 2 FAILED.*rank 0 wrote into its slot after ckpt_save_finish: step 2, tensor '" ||
	fail "step 2's failure does not say the slot changed after finish: $(grep 'step 2' "$T/r0.log")"
grep_log r0 "step 3 committed" || fail "step 3 did not commit: $(cat "$T/r0.log")"
grep -q "wrote into its slot after ckpt_save_finish" "$T/ckptd-d.log" || fail "ckptd did not log it"
[ -e "$(stepdir "$JOB" 2)/MANIFEST.json" ] && fail "step 2 was committed with changed bytes"
expect_committed "$JOB" "1 3"
verify "$JOB" 1
verify "$JOB" 3
ckptd_stop d
log "pass"
