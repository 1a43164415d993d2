#!/bin/bash
# SPDX-License-Identifier: MIT
# --device cuda where it cannot work fails at once and clearly: every rank
# says why ("no CUDA device: cudaGetDeviceCount: ..." on a machine without
# a GPU; "built without GPU support" from a build without the gpu
# feature), nothing trains, and the job exits with status 2. Skipped only
# on a machine that has a GPU (the other gpu-* tests run there).
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-train.sh"

if [ "${CKPT_TRAIN_GPU:-0}" = 1 ]; then
	want='--device cuda: no CUDA device: cudaGetDeviceCount: '
else
	want='--device cuda: this ckpt-train was built without GPU support'
fi
timeout 120 "$MPIRUN" -np 2 "$CKPT_TRAIN" "${TINY[@]}" --steps 20 --ckpt-mode off \
	--device cuda >"$T/nodev.log" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q '^device: cuda' "$T/nodev.log"; then
	skip "this machine has a GPU: $(grep '^device: cuda' "$T/nodev.log")"
fi
[ "$rc" -eq 2 ] || fail "exit status $rc, expected 2"
for r in 0 1; do
	grep -qF -- "ckpt-train: rank $r: $want" "$T/nodev.log" ||
		fail "rank $r did not say '$want'"
done
! grep -q '^step ' "$T/nodev.log" || fail "it trained anyway"
log "$(grep -m1 -F -- "$want" "$T/nodev.log")"
log "pass"
