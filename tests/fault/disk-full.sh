#!/bin/bash
# SPDX-License-Identifier: MIT
# The checkpoint root fills up: the save reports FAILED with a reason that
# says "No space left" and names the file; the older committed step still
# verifies; ckptd keeps running; after space is freed a new save commits.
. "$(dirname "$0")/../integration/lib.sh"

MNT=$T/mnt
mkdir -p "$MNT"
if ! err=$(mount -t tmpfs -o size=96m ckpt-test "$MNT" 2>&1); then
	skip "cannot mount a tmpfs for the full-disk test ($err); needs root or CAP_SYS_ADMIN"
fi
MOUNTS+=("$MNT")
ROOT=$MNT/root
JOB=$ROOT/df
SMALL=(--socket "$(sock d)" --job df --seed 31 --tensors 4 --min-bytes 4K --max-bytes 1M)
BIG=(--socket "$(sock d)" --job df --seed 32 --tensors 3 --min-bytes 20M --max-bytes 20M --timeout-ms 30000)

ckptd_start d "$ROOT" --keep-last 0
run_ranks 1 small "${SMALL[@]}" --steps 10 --wait
expect_committed "$JOB" "10"
dd if=/dev/zero of="$MNT/filler" bs=1M count=70 status=none 2>/dev/null # leaves ~26 MiB
run_ranks 1 full "${BIG[@]}" --steps 20 --wait --expect-fail 20
grep -q 'step 20 FAILED' "$T/full-0.log" || fail "the save that filled the disk was not reported FAILED"
grep 'step 20 FAILED' "$T/full-0.log" | grep -q 'No space left' ||
	fail "FAILED reason does not say 'No space left': $(grep 'step 20' "$T/full-0.log")"
grep 'step 20 FAILED' "$T/full-0.log" | grep -Eq 'rank-000000\.(shard|index)|step-0000000020' ||
	fail "FAILED reason does not name the file: $(grep 'step 20' "$T/full-0.log")"
ckptd_alive d || fail "ckptd died on a full disk"
[ -f "$(stepdir "$JOB" 20)/MANIFEST.json" ] && fail "step 20 committed on a full disk"
verify "$JOB" 10
run_ranks 1 restore10 "${SMALL[@]}" --restore latest --expect-step 10

rm -f "$MNT/filler"
run_ranks 1 after "${BIG[@]}" --steps 30 --wait
expect_committed "$JOB" "10 30"
verify_all "$JOB" >/dev/null
ckptd_stop d
log "pass"
