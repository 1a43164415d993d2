#!/bin/bash
# SPDX-License-Identifier: MIT
# ckpt_latest and ckpt_list answer from the checkpoint root's manifests,
# not from ckptd's memory of the job (which lags, e.g. on a node that
# missed a COMMITTED): a step committed into the root behind the back of a
# running ckptd (here: copied by hand, manifest last) is listed at once to a
# rank that was connected all along, and an agreed restore takes it.
. "$(dirname "$0")/lib.sh"

ROOT=$T/root
ROOT2=$T/other
OPTS=(--job lf --seed 9 --tensors 3 --min-bytes 64K --max-bytes 512K)
ckptd_start d "$ROOT" --keep-last 0
ckptd_start e "$ROOT2" --keep-last 0
run_ranks 1 save-d --socket "$(sock d)" "${OPTS[@]}" --steps 10,20 --wait
run_ranks 1 save-e --socket "$(sock e)" "${OPTS[@]}" --steps 10,20,30,40 --wait

rank_start watch --socket "$(sock d)" "${OPTS[@]}" --rank 0 --world 1 --latest-after "$T/go"
WATCH=$LAST_PID
sleep 0.3
# Step 40 into d's root: shards and indexes first, the manifest last.
src=$(stepdir "$ROOT2/lf" 40) dst=$(stepdir "$ROOT/lf" 40)
mkdir "$dst"
cp "$src"/rank-* "$dst"/
sync
cp "$src/MANIFEST.json" "$dst/MANIFEST.json"
sync
touch "$T/go"
rank_wait "$WATCH" watch
grep_log watch "latest 40, 3 committed steps, newest listed 40" ||
	fail "ckpt_latest/ckpt_list lag behind the root: $(tail -n 1 "$T/watch.log")"

AGREE=(--agree)
"$CKPT_TEST_RANK" --help 2>&1 | grep -q -- '--agree' || AGREE=()
run_ranks 1 restore --socket "$(sock d)" "${OPTS[@]}" --restore latest --expect-step 40 "${AGREE[@]}"
ckptd_stop d
ckptd_stop e
log "pass"
