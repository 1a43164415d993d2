#!/bin/bash
# SPDX-License-Identifier: MIT
# ckpt_read_ranges: 3 ranks save steps 10 and 20 (different tensors and
# blobs per rank; step 30 stays open and is refused), then a rank of a job
# run at world size 2 reads slices of every rank's tensors and blobs and
# compares them byte for byte (reads longer than its slot included), and
# the bad reads get their errors. Then a byte of a shard is flipped: reads
# of that chunk fail with -CKPT_E_CORRUPT naming the file, the rest work;
# so do reads of a rank whose index was changed after ckptd had read it.
. "$(dirname "$0")/lib.sh"

: "${CKPT_TEST_RANGEREAD:?CKPT_TEST_RANGEREAD must name the ckpt-test-rangeread binary}"
ROOT=$T/root
JOB=$ROOT/reshard

ckptd_start d "$ROOT" --slots-per-rank 2 --chunk-size 64KiB --keep-last 0
log "3 ranks save steps 10 and 20"
timeout 90 "$CKPT_TEST_RANGEREAD" --socket "$(sock d)" --save >"$T/save.log" 2>&1 ||
	fail "saving ranks failed (see save.log)"
expect_committed "$JOB" "10 20"
verify "$JOB" 10

log "a rank at world size 2 reads slices of all three ranks"
timeout 90 "$CKPT_TEST_RANGEREAD" --socket "$(sock d)" --read >"$T/read.log" 2>&1 ||
	fail "reading rank failed (see read.log)"
grep_log read "no tensor" || fail "read.log does not show ckptd's reason for a missing tensor"

log "a flipped byte in step 10's rank-000002.shard"
SHARD=$(stepdir "$JOB" 10)/rank-000002.shard
B=$(od -An -tu1 -j100 -N1 "$SHARD" | tr -d ' ')
printf "\\x$(printf %02x $((B ^ 255)))" | dd of="$SHARD" bs=1 seek=100 count=1 conv=notrunc status=none ||
	fail "could not damage $SHARD"
# Step 10's indexes were read (and kept by ckptd) above: a changed file
# must be read and checked again.
INDEX=$(stepdir "$JOB" 10)/rank-000001.index
B=$(od -An -tu1 -j10 -N1 "$INDEX" | tr -d ' ')
printf "\\x$(printf %02x $((B ^ 255)))" | dd of="$INDEX" bs=1 seek=10 count=1 conv=notrunc status=none ||
	fail "could not damage $INDEX"
timeout 90 "$CKPT_TEST_RANGEREAD" --socket "$(sock d)" --corrupt >"$T/corrupt.log" 2>&1 ||
	fail "the read of a damaged chunk went wrong (see corrupt.log)"
grep_log ckptd-d "rangeread.*rank-000002.shard" || fail "ckptd did not log the damaged chunk"

ckptd_stop d

log "an older ckptd (no \"read_ranges\" feature): a clear error"
timeout 30 "$CKPT_TEST_RANGEREAD" --socket "$T/old.sock" --old-daemon >"$T/old.log" 2>&1 ||
	fail "the read against an older ckptd went wrong (see old.log)"
log "pass"
