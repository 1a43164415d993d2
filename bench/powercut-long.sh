#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# powercut-long: the power-cut suite (tests/powercut/powercut.sh) at length,
# for a benchmark machine: many cuts on one daemon with bigger shards, a
# 2-daemon group with partner restores, keep_last 0 (no retention: every
# acknowledged step must stay) and the negative controls, each with its own
# seed. Prints each run's counts and a summary line per run; exits non-zero
# if any run failed.
#
#   bench/powercut-long.sh [--build DIR] [--cuts N] [--group-cuts N] [--s3-cuts N] [--seed S]
#     --build DIR     build tree (default: build)
#     --cuts N        cuts of the one-daemon runs (default 2000)
#     --group-cuts N  cuts of the 2-daemon run (default 500)
#     --s3-cuts N     cuts during S3 adoption (radosgw; default 100, 0: none)
#     --max-bytes B   largest tensor per rank in the big-shard run (default 8M)
#     --seed S        base seed (default: random; run i uses S+i)
# Needs root and /dev/fuse. Takes about 1 s per one-daemon cut and 2 s per
# group cut on an idle 2-core machine (2000 + 500 cuts: roughly an hour).
# The S3 run starts a RADOS Gateway (tests/s3/radosgw.sh) first.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$here/build CUTS=2000 GCUTS=500 SCUTS=100 BIGB=8M
SEED=$(( $(date +%s) % 1000000 ))
while [ $# -gt 0 ]; do
	case $1 in
	--build) BUILD=$(cd "$2" && pwd); shift 2 ;;
	--cuts) CUTS=$2; shift 2 ;;
	--group-cuts) GCUTS=$2; shift 2 ;;
	--s3-cuts) SCUTS=$2; shift 2 ;;
	--max-bytes) BIGB=$2; shift 2 ;;
	--seed) SEED=$2; shift 2 ;;
	-h|--help) sed -n '3,21p' "$0"; exit 0 ;;
	*) echo "powercut-long: unknown option $1" >&2; exit 2 ;;
	esac
done
export CKPTD=$BUILD/ckptd/ckptd CKPT_INSPECT=$BUILD/tools/ckpt-inspect
export CKPT_TEST_RANK=$BUILD/tests/integration/ckpt-test-rank CKPT_POWERFS=$BUILD/tests/ckpt-powerfs
for b in "$CKPTD" "$CKPT_INSPECT" "$CKPT_TEST_RANK" "$CKPT_POWERFS"; do
	[ -x "$b" ] || { echo "powercut-long: $b missing (build with -Dtests=true)" >&2; exit 2; }
done
export CKPT_S3_HARNESS=$here/tests/s3
suite=$here/tests/powercut/powercut.sh
s3suite=$here/tests/powercut/powercut-s3.sh
# Each run: the script, then its options.
runs=(
	"--cuts $CUTS"
	"--cuts $((CUTS / 2)) --max-bytes $BIGB"
	"--cuts $((CUTS / 4)) --keep-last 0"
	"--cuts $GCUTS --nodes 2"
	"--cuts $GCUTS --nodes 2 --per-process-dirsync"
	"--negative stepdir --cuts 20"
	"--negative manifest --cuts 20"
	"--negative latest --cuts 20"
	"--negative shard --cuts 20"
)
[ "$SCUTS" -gt 0 ] && runs+=("s3 --cuts $SCUTS")
failed=0 i=0
declare -a lines=()
for args in "${runs[@]}"; do
	i=$((i + 1))
	echo "=== powercut-long run $i: $args --seed $((SEED + i)) ==="
	script=$suite a=$args
	case $args in s3\ *) script=$s3suite a=${args#s3 } ;; esac
	# shellcheck disable=SC2086
	out=$(bash "$script" $a --seed $((SEED + i)) 2>&1 | tee /dev/stderr | grep -E 'powercut(-s3| negative)?: ' | tail -n 1)
	rc=${PIPESTATUS[0]}
	[ "$rc" -eq 0 ] || failed=$((failed + 1))
	lines+=("run $i ($args): rc $rc: ${out#*] }")
done
echo "=== powercut-long summary (base seed $SEED) ==="
printf '%s\n' "${lines[@]}"
exit $((failed > 0))
