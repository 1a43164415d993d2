#!/bin/bash
# SPDX-License-Identifier: MIT
# A second ckptd starting on the same root while the first has a job with
# a save in flight touches nothing of that job: its start-up does not move
# the in-flight step to .trash, nor cut the job's committed steps to its
# own keep_last. The first daemon then commits the step, and every step
# verifies.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/owner-lib.sh"

start_inflight
# Both ranks' HELLOs came together: one takeover served them.
n=$(grep -c 'recovery: job=ja ' "$T/ckptd-a.log")
[ "$n" = 1 ] || fail "a took job ja over $n times for two ranks connecting at once"
ckptd_start b "$ROOT" --keep-last 1
# b is up: whatever its start-up does to the root is done by now (it
# would have done it before it listened).
errs=
[ -e "$(stepdir "$JOB" 4)/rank-000000.shard" ] ||
	errs+="b's start-up removed step 4 of job ja, which a is saving; "
got=$(committed_steps "$JOB" | tr '\n' ' ' | sed 's/ $//')
[ "$got" = "1 2 3" ] ||
	errs+="b's start-up cut job ja's committed steps 1 2 3 to '$got' (b's keep_last 1); "
grep -q 'job=ja' "$T/ckptd-b.log" && errs+="b's log mentions job ja: $(grep 'job=ja' "$T/ckptd-b.log" | head -3)"
[ -z "$errs" ] || fail "$errs"
finish_inflight
expect_committed "$JOB" "1 2 3 4"
expect_latest "$JOB" 4
[ "$(verify_all "$JOB")" = 4 ] || fail "not every committed step verifies"
ckptd_stop a
ckptd_stop b
expect_committed "$JOB" "1 2 3 4"
log "pass"
