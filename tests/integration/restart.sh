#!/bin/bash
# SPDX-License-Identifier: MIT
# A ckptd restart keeps committed steps (they restore and verify) and
# removes an uncommitted step directory planted while it was down (when
# the job is taken over again, at its first HELLO).
. "$(dirname "$0")/lib.sh"

ROOT=$T/root
JOB=$ROOT/rs
OPTS=(--socket "$(sock d)" --job rs --seed 9 --tensors 5 --min-bytes 4K --max-bytes 8M)
ckptd_start d "$ROOT" --keep-last 0
run_ranks 2 save "${OPTS[@]}" --steps 10,20 --wait
ckptd_stop d

# An interrupted save: shard files, no manifest.
P=$(stepdir "$JOB" 30)
mkdir -p "$P"
head -c 1048576 /dev/urandom >"$P/rank-000000.shard"
echo junk >"$P/rank-000000.index"
ckptd_start d "$ROOT" --keep-last 0
# The job is recovered when ckptd takes it over, at its first HELLO (not at
# start-up: other daemons may own other jobs of the root).
run_ranks 2 restore "${OPTS[@]}" --restore latest --expect-step 20
[ -e "$P" ] && fail "planted uncommitted $P survived the restart"
expect_committed "$JOB" "10 20"
expect_latest "$JOB" 20
verify_all "$JOB" >/dev/null
# Saving goes on after the restart.
run_ranks 2 save2 "${OPTS[@]}" --steps 40 --wait
expect_committed "$JOB" "10 20 40"
ckptd_stop d
log "pass"
