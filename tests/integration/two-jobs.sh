#!/bin/bash
# SPDX-License-Identifier: MIT
# Two jobs of different world sizes save at the same time on one ckptd;
# each commits its own steps and restores its own data.
. "$(dirname "$0")/lib.sh"

ROOT=$T/root
ckptd_start d "$ROOT" --keep-last 0
A=(--socket "$(sock d)" --job job-a --seed 1 --tensors 6 --min-bytes 1K --max-bytes 16M)
B=(--socket "$(sock d)" --job job_b.v2 --seed 2 --tensors 12 --min-bytes 512 --max-bytes 4M)
run_ranks 3 a "${A[@]}" --steps 100,200,300 --wait &
pa=$!
run_ranks 2 b "${B[@]}" --steps 5,6,7,8 --wait &
pb=$!
wait $pa || fail "job-a ranks failed"
wait $pb || fail "job_b.v2 ranks failed"
expect_committed "$ROOT/job-a" "100 200 300"
expect_committed "$ROOT/job_b.v2" "5 6 7 8"
expect_latest "$ROOT/job-a" 300
expect_latest "$ROOT/job_b.v2" 8
verify_all "$ROOT/job-a" >/dev/null
verify_all "$ROOT/job_b.v2" >/dev/null
run_ranks 3 ra "${A[@]}" --restore latest --expect-step 300
run_ranks 2 rb "${B[@]}" --restore 6 --expect-step 6
ckptd_stop d
log "pass"
