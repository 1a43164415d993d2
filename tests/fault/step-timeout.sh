#!/bin/bash
# SPDX-License-Identifier: MIT
# A single ckptd (no group): a step that one rank never saves (a hung rank,
# or one the launch never started) fails after step_timeout_ms with a
# reason naming the missing rank, so the other ranks' waits end; a step
# every rank saves still commits.
. "$(dirname "$0")/../integration/lib.sh"

ROOT=$T/root
OPTS=(--socket "$(sock d)" --job st --seed 5 --tensors 2 --min-bytes 4K --max-bytes 64K)
ckptd_start d "$ROOT" --keep-last 0 --step-timeout-ms 2000

# Rank 0 of 2 saves step 10; rank 1 never comes. Without a bound rank 0
# would wait its whole 60 s.
t0=$(date +%s)
rank_start r0 "${OPTS[@]}" --rank 0 --world 2 --steps 10 --wait --timeout-ms 60000 --expect-fail 10
rank_wait "$LAST_PID" r0
cat "$T/r0.log"
[ $(( $(date +%s) - t0 )) -lt 30 ] || fail "rank 0 waited for step 10 for too long"
grep -q "step 10 FAILED.*step_timeout_ms=2000.*rank(s) never saved it (1)" "$T/r0.log" ||
	fail "rank 0's step 10 did not fail naming rank 1 and step_timeout_ms"
grep_log ckptd-d "step abandoned job=st step=10 .*never saved it (1)" ||
	fail "ckptd did not log the abandoned step"
[ -z "$(committed_steps "$ROOT/st")" ] || fail "a step with a missing rank is committed"

# Both ranks: it commits.
run_ranks 2 good "${OPTS[@]}" --steps 20 --wait --timeout-ms 20000
expect_committed "$ROOT/st" "20"
ckptd_stop d
log "pass"
