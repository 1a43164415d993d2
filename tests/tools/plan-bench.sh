#!/bin/bash
# SPDX-License-Identifier: MIT
# ckpt-plan's times against ckpt-bench on this machine: given the bandwidths
# the benchmark's own floors measure (memcpy into pre-faulted memory as the
# copy into shared memory, write+fsync as the file system), the planner's
# stall and time to durable for the benchmark's save are within a factor of
# FACTOR of the stall and the time to committed that ckpt-bench measures
# for ckptd. The factor is wide on purpose: the floors are buffered writes
# where ckptd writes with O_DIRECT, and small VMs vary 2-4x between runs.
#
# Environment: CKPT_PLAN, CKPT_BENCH, CKPTD.
set -u -o pipefail
: "${CKPT_PLAN:?}" "${CKPT_BENCH:?}" "${CKPTD:?}"
FACTOR=5
RANKS=2
MIB=64

[ -x "$CKPT_BENCH" ] || { echo "SKIP: no ckpt-bench in this build (-Dbench=false)" >&2; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-plan-bench.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: plan-bench: $*" >&2; exit 1; }

timeout 300 "$CKPT_BENCH" --dir "$T" --ranks $RANKS --bytes ${MIB}MiB --reps 3 --no-drop-caches \
	--fio '' --ckptd "$CKPTD" >"$T/bench.out" 2>&1 || { cat "$T/bench.out" >&2; fail "ckpt-bench failed"; }
# | bytes per rank | memcpy | write+fsync | ckpt stall | ckpt committed | ...
read -r memcpy wsync stall committed < <(awk -F'|' -v b="${MIB}MiB" '
	{ for (i = 2; i <= 6; i++) gsub(/ /, "", $i) } $2 == b { print $3, $4, $5, $6 }' "$T/bench.out")
[ -n "${committed:-}" ] || { cat "$T/bench.out" >&2; fail "no row for $MIB MiB in ckpt-bench's output"; }
echo "ckpt-bench: memcpy $memcpy s, write+fsync $wsync s, ckpt stall $stall s, committed $committed s"

# The benchmark's save as a model: 4 f32 tensors, every rank $MIB MiB.
elems=$((MIB * 1024 * 1024 / 16))
cat >"$T/model.json" <<EOF
{"format": "ckpt-train-model", "version": 1, "model": "bench", "n_params": $((elems * RANKS)),
 "sharding": "contiguous", "blob_bytes": 0, "save_reserve_bytes": 0,
 "tensors": [{"name": "t0", "dtype": "f32"}, {"name": "t1", "dtype": "f32"},
             {"name": "t2", "dtype": "f32"}, {"name": "t3", "dtype": "f32"}]}
EOF
bw() { awk -v b="$1" -v t="$2" 'BEGIN { printf "%.6f", b / t / 1e9 }'; }
rank_bytes=$((MIB * 1024 * 1024))
plan=$("$CKPT_PLAN" --model-file "$T/model.json" --world $RANKS --gpus-per-node $RANKS --json \
	--d2h-bw "$(bw $rank_bytes "$memcpy")" \
	--host-copy-bw "$(bw $((rank_bytes * RANKS)) "$memcpy")" \
	--fs-write-bw "$(bw $((rank_bytes * RANKS)) "$wsync")") || fail "ckpt-plan exited $?: $plan"
p_stall=$(sed -n 's/^ *"stall_s": \([0-9.e+-]*\),\?$/\1/p' <<<"$plan")
p_durable=$(sed -n 's/^ *"durable_s": \([0-9.e+-]*\),\?$/\1/p' <<<"$plan")
[ -n "$p_stall" ] && [ -n "$p_durable" ] || fail "no stall_s or durable_s in: $plan"
echo "ckpt-plan: stall $p_stall s, durable $p_durable s (factor allowed: $FACTOR)"
within() {
	awk -v p="$1" -v m="$2" -v f=$FACTOR 'BEGIN { exit !(p > 0 && m > 0 && p / m <= f && m / p <= f) }'
}
within "$p_stall" "$stall" || fail "predicted stall $p_stall s, measured $stall s: off by more than ${FACTOR}x"
within "$p_durable" "$committed" ||
	fail "predicted time to durable $p_durable s, measured committed $committed s: off by more than ${FACTOR}x"
echo "pass"
