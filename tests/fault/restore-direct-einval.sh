#!/bin/bash
# SPDX-License-Identifier: MIT
# A file system that accepts O_DIRECT at open but refuses O_DIRECT reads
# (EINVAL): ckptd's restore reads the shard again through the page cache
# and restores the newest step, verified, with no fallback (rather than
# counting every read as corruption and falling back step after step).
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/../powercut/lib-powercut.sh"

WORLD=2
OPTS=(--socket "$(sock d)" --job de --seed 11 --tensors 4 --min-bytes 64K --max-bytes 1M)
AGREE=(--agree)
"$CKPT_TEST_RANK" --help 2>&1 | grep -q -- '--agree' || AGREE=()
pfs_start fs --direct-read-einval
ROOT=$T/fs/root
JOB=$ROOT/de
ckptd_start d "$ROOT" --keep-last 0 --direct-io auto
run_ranks $WORLD save "${OPTS[@]}" --steps 10,20,30,40 --wait
expect_committed "$JOB" "10 20 30 40"

# Every rank of the job (agreed), then one rank on its own (the per-rank
# call): step 40, no warning (the rank fails on an unexpected fallback).
run_ranks $WORLD agreed "${OPTS[@]}" --restore latest --expect-step 40 "${AGREE[@]}"
rank_start single "${OPTS[@]}" --rank 1 --world $WORLD --restore latest --expect-step 40
rank_wait "$LAST_PID" single
for l in agreed-0 agreed-1 single; do
	grep_log "$l" "restored step 40 ok" || fail "$l did not restore step 40"
done
grep -q "O_DIRECT read refused, reading buffered" "$T/ckptd-d.log" ||
	fail "ckptd did not say it read buffered"
if grep -q "step does not restore\|damaged" "$T/ckptd-d.log"; then
	fail "ckptd counted a refused O_DIRECT read against a step"
fi
ckptd_alive d || fail "ckptd died"
ckptd_stop d
log "pass"
