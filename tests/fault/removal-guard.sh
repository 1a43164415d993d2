#!/bin/bash
# SPDX-License-Identifier: MIT
# A failed step never takes a committed step directory with it. Here ckptd
# does not know that step 30 of job j is committed: the directory came in
# while it was serving the job (copied from another root, as ckpt-restore
# or a second node would bring it). A rank then SKIPs step 30, which fails
# that step number; the removal of the failed step finds MANIFEST.json and
# leaves the directory alone (only retention removes committed steps), and
# ckptd records step 30 as committed from then on.
. "$(dirname "$0")/../integration/lib.sh"
: "${CKPT_RAW_CLIENT:?CKPT_RAW_CLIENT must name ckpt-raw-client}"

A=$T/root-a
B=$T/root-b
SMALL=(--seed 9 --tensors 2 --min-bytes 4K --max-bytes 64K)
ckptd_start a "$A" --keep-last 0
ckptd_start b "$B" --keep-last 0

# Step 30 of job j, committed on b.
run_ranks 1 b "${SMALL[@]}" --socket "$(sock b)" --job j --steps 30 --wait
verify "$B/j" 30

# On a, rank 0 of a 2-rank job j connects and holds the job open.
rank_start hold "${SMALL[@]}" --socket "$(sock a)" --job j --rank 0 --world 2 --steps 40 \
	--gate "40:$T/gate" --timeout-ms 30000 --accept-aborted
hold=$LAST_PID
for i in $(seq 1 100); do
	grep_log ckptd-a "rank connected job=j rank=0" && break
	sleep 0.1
done
grep_log ckptd-a "rank connected job=j rank=0" || fail "rank 0 did not connect to a"

# The committed step arrives behind a's back, then rank 1 skips it.
cp -a "$B/j/step-0000000030" "$A/j/"
timeout 30 "$CKPT_RAW_CLIENT" --socket "$(sock a)" --case skip --job j --rank 1 --world 2 \
	--step 30 >"$T/raw-client.log" 2>&1
rc=$?
cat "$T/raw-client.log"
[ "$rc" -eq 0 ] || fail "the SKIP of step 30 was not answered SKIPPED"
sleep 1

[ -f "$A/j/step-0000000030/MANIFEST.json" ] ||
	fail "the failed step's removal took the committed step-0000000030 (now in .trash: $(ls "$A/.trash"))"
verify "$A/j" 30
grep_log ckptd-a "not removing failed step job=j step=30" ||
	fail "ckptd did not say why it kept step 30"

touch "$T/gate"
wait "$hold"
# Step 30 is committed on a: a rank of the job restores it.
run_ranks 1 restore "${SMALL[@]}" --socket "$(sock a)" --job j --restore 30 --expect-step 30
ckptd_stop a
ckptd_stop b
log "pass"
