#!/bin/bash
# SPDX-License-Identifier: MIT
# One flipped byte in the newest step's shard: ckpt-inspect --verify exits 1
# naming the tensor; a restore of "latest" by that rank falls back to the
# older step (with a warning) and its data match that step.
. "$(dirname "$0")/../integration/lib.sh"

ROOT=$T/root
JOB=$ROOT/cs
OPTS=(--socket "$(sock d)" --job cs --seed 41 --tensors 5 --min-bytes 64K --max-bytes 2M)
ckptd_start d "$ROOT" --keep-last 0
run_ranks 2 save "${OPTS[@]}" --steps 10,20 --wait
expect_committed "$JOB" "10 20"
verify "$JOB" 20

# The first tensor of the table starts at offset 0 of the shard (FORMAT.md:
# extents from offset 0, 4 KiB aligned); it is at least 64 KiB.
SHARD=$(stepdir "$JOB" 20)/rank-000001.shard
OFF=100
b=$(od -An -tu1 -j $OFF -N 1 "$SHARD" | tr -d ' ')
printf "$(printf '\\%03o' $((b ^ 0x5a)))" | dd of="$SHARD" bs=1 seek=$OFF conv=notrunc status=none
sync

timeout 60 "$CKPT_INSPECT" "$(stepdir "$JOB" 20)" --verify >"$T/inspect-bad.log" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "ckpt-inspect --verify of the corrupted step exited $rc, expected 1"
grep -q 'model.layers.0.self_attn.q_proj.weight' "$T/inspect-bad.log" ||
	fail "ckpt-inspect did not name the damaged tensor: $(cat "$T/inspect-bad.log")"
verify "$JOB" 10

# Rank 1's shard of step 20 is damaged: its restore of "latest" must fall
# back to step 10 and say so. (Rank 0's own shard of step 20 is intact.)
rank_start restore-1 "${OPTS[@]}" --rank 1 --world 2 --restore latest --expect-step 10 --expect-fallback
rank_wait "$LAST_PID" restore-1
grep_log restore-1 "fell back" || fail "rank 1 printed no fallback warning"
ckptd_alive d || fail "ckptd died restoring a corrupted step"
ckptd_stop d
log "pass"
