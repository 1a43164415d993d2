#!/bin/bash
# SPDX-License-Identifier: MIT
# Saves in a tight loop without waiting, one slot per rank.
# skip: every step ends committed or skipped, none is lost, some commit.
# block: every step commits.
. "$(dirname "$0")/lib.sh"

OPTS=(--tensors 6 --min-bytes 1M --max-bytes 12M --seed 5 --first 1 --every 1 --count 20 --sleep-between-ms 20)

ckptd_start skip "$T/root-skip" --slots-per-rank 1 --backpressure skip --keep-last 0
run_ranks 1 skip --socket "$(sock skip)" --job bp "${OPTS[@]}" --accept-skipped
n_commit=$(grep -Ec '^rank 0 step [0-9]+ committed' "$T/skip-0.log")
n_skip=$(grep -Ec '^rank 0 step [0-9]+ skipped($|:)' "$T/skip-0.log")
log "skip policy: $n_commit committed, $n_skip skipped of 20"
[ "$n_commit" -ge 1 ] || fail "skip policy: nothing committed"
[ $((n_commit + n_skip)) -eq 20 ] || fail "skip policy: $n_commit committed + $n_skip skipped != 20 steps"
[ "$(committed_steps "$T/root-skip/bp" | wc -l)" -eq "$n_commit" ] ||
	fail "skip policy: $(committed_steps "$T/root-skip/bp" | wc -l) step dirs committed on disk, rank saw $n_commit"
verify_all "$T/root-skip/bp" >/dev/null
ckptd_stop skip

# Two ranks, skip policy: a step one rank skipped cannot commit for the other
# (it gets FAILED, aborted); still nothing may be lost or hang.
ckptd_start skip2 "$T/root-skip2" --slots-per-rank 1 --backpressure skip --keep-last 0
run_ranks 2 skip2 --socket "$(sock skip2)" --job bp2 "${OPTS[@]}" --accept-skipped --accept-aborted
verify_all "$T/root-skip2/bp2" >/dev/null
ckptd_stop skip2

ckptd_start block "$T/root-block" --slots-per-rank 1 --backpressure block --keep-last 0
run_ranks 2 block --socket "$(sock block)" --job bp "${OPTS[@]}"
expect_committed "$T/root-block/bp" "$(seq -s " " 1 20)"
ckptd_stop block
log "pass"
