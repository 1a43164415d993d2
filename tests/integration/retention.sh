#!/bin/bash
# SPDX-License-Identifier: MIT
# --keep-last 2 leaves exactly the last two committed steps.
. "$(dirname "$0")/lib.sh"

ROOT=$T/root
ckptd_start d "$ROOT" --keep-last 2
OPTS=(--socket "$(sock d)" --job ret --seed 7 --tensors 4 --min-bytes 4K --max-bytes 2M)
run_ranks 2 save "${OPTS[@]}" --first 1 --every 1 --count 6 --wait
# Retention runs just after each commit, on a worker (uncommit, then move
# the directory away): give it time to finish on a loaded machine.
for i in $(seq 1 200); do
	[ "$(committed_steps "$ROOT/ret" | tr '\n' ' ')" = "5 6 " ] &&
		[ -z "$(uncommitted_steps "$ROOT/ret")" ] && break
	sleep 0.1
done
expect_committed "$ROOT/ret" "5 6"
[ -z "$(uncommitted_steps "$ROOT/ret")" ] || fail "step dirs without manifest left: $(uncommitted_steps "$ROOT/ret")"
expect_latest "$ROOT/ret" 6
verify_all "$ROOT/ret" >/dev/null
run_ranks 2 restore "${OPTS[@]}" --restore 5 --expect-step 5
# Asking for a removed step must not hand out anything else silently.
rank_start gone "${OPTS[@]}" --rank 0 --world 2 --restore 2
wait "$LAST_PID" && fail "restore of removed step 2 succeeded"
ckptd_stop d
log "pass"
