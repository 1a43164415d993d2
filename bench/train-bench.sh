#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# train-bench: ckpt-train's throughput (steps/s) with a checkpoint every K
# steps in --ckpt-mode off, sync and async, side by side in one run.
#
# Every repetition runs the three modes in turn (off, sync, async), so a
# slow spell of the disk or the host hits them alike; each run is a fresh
# job (--no-resume) of the same model, and its steps/s is the trainer's
# own figure (the training loop only: start-up and the wait for the last
# async outcome at exit are not in it). Reported: the median over the
# repetitions of the time per step, the overhead of sync and async
# against off, and the ratio of their overheads (sync / async).
#
# The script starts its own ckptd on DIR/train-bench-PID/root, writes the
# sync checkpoints to DIR/train-bench-PID/sync-REP, and removes it all at the end
# (unless --keep). See docs/BENCHMARKS.md, "Trainer throughput".
set -euo pipefail

usage() {
	cat <<'USAGE'
usage: bench/train-bench.sh --dir DIR [options]
  --dir DIR        file system under test (required): ckptd's root and the
                   sync checkpoints go to DIR/train-bench-PID/
  --build DIR      build directory (default: build)
  --np N           MPI ranks (default 2)
  --every K        checkpoint every K steps (default 5)
  --steps N        steps per run (default 24: saves at K, 2K, ..., then
                   N mod K steps without one)
  --reps R         repetitions of off/sync/async (default 2)
  --model "FLAGS"  ckpt-train model flags (default: --ctx 16 --embd 128
                   --hidden 4096 --layers 6 --batch 1 --seq 1: 93.4 M
                   parameters, 1.04 GiB of master weights + Adam m and v)
  --device D       cpu (default) or cuda: where ckpt-train trains (cuda: a
                   build with -Dgpu=enabled, one GPU per rank; a save's
                   stall is then the device-to-host copy into ckpt's arena)
  --keep           keep DIR/train-bench-PID
USAGE
}

dir=
build=build
np=2
every=5
steps=24
reps=2
model="--ctx 16 --embd 128 --hidden 4096 --layers 6 --batch 1 --seq 1"
keep=0
device=cpu
while [ $# -gt 0 ]; do
	case $1 in
	--dir) dir=$2; shift 2 ;;
	--build) build=$2; shift 2 ;;
	--np) np=$2; shift 2 ;;
	--every) every=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--reps) reps=$2; shift 2 ;;
	--model) model=$2; shift 2 ;;
	--device) device=$2; shift 2 ;;
	--keep) keep=1; shift ;;
	-h|--help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
[ -n "$dir" ] || { usage >&2; exit 2; }
[ -d "$dir" ] || { echo "train-bench: $dir is not a directory" >&2; exit 1; }
train=$build/trainer/ckpt-train
ckptd=$build/ckptd/ckptd
for b in "$train" "$ckptd"; do
	[ -x "$b" ] || { echo "train-bench: $b not built" >&2; exit 1; }
done
command -v mpirun >/dev/null || { echo "train-bench: mpirun not found" >&2; exit 1; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader
export OMPI_MCA_btl_base_warn_component_unused=0

read -ra mflags <<<"$model"
mflags+=(--device "$device")

# The model's size, from a zero-step run (no checkpointing).
probe=$(mpirun -np "$np" "$train" "${mflags[@]}" --steps 0 --ckpt-mode off 2>&1) ||
	{ echo "$probe" >&2; exit 1; }
params=$(sed -n 's/^model: .*: \([0-9]*\) parameters.*/\1/p' <<<"$probe")
[ -n "$params" ] || { echo "train-bench: cannot read the parameter count: $probe" >&2; exit 1; }
state=$((params * 12)) # fp32 master weights + Adam m + v, over all ranks
saves=$((steps / every))
mib() { awk -v b="$1" 'BEGIN { printf "%.0f MiB", b / 1048576 }'; }

# Room for every sync save (nothing is deleted before the end: on a file
# system mounted with discard, the trim work of a deletion would land on
# the next run) plus the steps ckptd keeps (--keep-last 2, plus one being
# written), and a margin.
need=$(((reps * saves + 3) * state + (1 << 30)))
free=$(($(df -Pk "$dir" | awk 'NR == 2 { print $4 }') * 1024))
if [ "$free" -lt "$need" ]; then
	echo "train-bench: $dir has $(mib "$free") free, needs $(mib "$need")" >&2
	exit 1
fi

work=$dir/train-bench-$$
mkdir -p "$work/root"
sock=$work/ckptd.sock
ckptd_pid=
cleanup() {
	local rc=$?
	set +e
	if [ -n "$ckptd_pid" ]; then
		kill "$ckptd_pid" 2>/dev/null
		wait "$ckptd_pid" 2>/dev/null
	fi
	if [ "$rc" -ne 0 ]; then
		for f in "$work"/*.log; do
			[ -e "$f" ] || continue
			echo "----- $f (last 15 lines) -----" >&2
			tail -n 15 "$f" >&2
		done
		echo "train-bench: FAILED; files kept in $work" >&2
	elif [ "$keep" = 1 ]; then
		echo "train-bench: files kept in $work"
	else
		rm -rf "$work"
	fi
	exit "$rc"
}
trap cleanup EXIT

# Staging: one slot per rank (a rank's share of the state plus room).
# With two slots of ~0.5 GiB each, faulting in the arena made ckptd's
# HELLO answer miss ckpt-train's 2 s connect timeout.
slot=$((state / np + (64 << 20)))
"$ckptd" --root "$work/root" --socket "$sock" --staging-bytes $((np * slot)) \
	--slots-per-rank 1 --keep-last 2 --log-level info >"$work/ckptd.log" 2>&1 &
ckptd_pid=$!
for _ in $(seq 100); do
	[ -S "$sock" ] && break
	kill -0 "$ckptd_pid" 2>/dev/null || { echo "train-bench: ckptd exited at start" >&2; exit 1; }
	sleep 0.1
done
[ -S "$sock" ] || { echo "train-bench: ckptd did not start" >&2; exit 1; }

echo "train-bench: $np ranks, $params parameters, checkpointed state $(mib "$state") in all" \
	"($(mib $((state / np))) per rank), a checkpoint every $every steps, $steps steps per run," \
	"$saves saves, $reps repetitions; dir $dir"
echo "model: $model; device: $device"

declare -A sps stall
modes=(off sync async)
for rep in $(seq 1 "$reps"); do
	for mode in "${modes[@]}"; do
		ck=(--ckpt-mode "$mode" --ckpt-every "$every")
		case $mode in
		sync) mkdir -p "$work/sync-$rep"; ck+=(--sync-dir "$work/sync-$rep") ;;
		async) ck+=(--socket "$sock" --job "bench-$rep" --wait-ms 60000) ;;
		esac
		sync # nothing dirty from the previous run lands on this one
		log=$work/$mode-$rep.log
		mpirun -np "$np" "$train" "${mflags[@]}" --steps "$steps" --log-every "$steps" \
			--no-resume "${ck[@]}" >"$log" 2>&1 ||
			{ echo "train-bench: $mode run $rep failed" >&2; exit 1; }
		done_line=$(grep '^done:' "$log")
		s=$(sed -n 's/.*(\([0-9.]*\) steps\/s).*/\1/p' <<<"$done_line")
		st=$(sed -n 's/.*stall \([0-9.]*\) ms.*/\1/p' <<<"$done_line")
		failed=$(sed -n 's/.*saves [0-9]* (\([0-9]*\) failed).*/\1/p' <<<"$done_line")
		[ "$mode" = off ] || [ "$failed" = 0 ] ||
			{ echo "train-bench: $mode run $rep: $failed saves failed" >&2; exit 1; }
		if [ "$mode" = async ]; then
			n=$(grep -c '^ckpt step [0-9]* committed' "$log" || true)
			[ "$n" -eq "$saves" ] ||
				{ echo "train-bench: async run $rep: $n of $saves saves committed" >&2; exit 1; }
		fi
		secs=$(sed -n 's/.* in \([0-9.]*\) s .*/\1/p' <<<"$done_line")
		# The trainer rounds steps/s to 0.1: compute it from the loop time.
		printf '  rep %d %-5s %7.3f steps/s  %6.3f s/step  rank 0 stall %8.1f ms (%s s)\n' \
			"$rep" "$mode" "$(awk -v t="$secs" -v n="$steps" 'BEGIN { print n / t }')" \
			"$(awk -v t="$secs" -v n="$steps" 'BEGIN { print t / n }')" "$st" "$secs"
		sps[$mode]+="$secs "
		stall[$mode]+="$st "
	done
done

# Medians of the loop time per run; per-step time = that / steps.
med() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
t_off=$(med <<<"${sps[off]}")
t_sync=$(med <<<"${sps[sync]}")
t_async=$(med <<<"${sps[async]}")
echo
echo "| mode | steps/s | s/step | overhead vs off, per run | per save | rank 0 stall per save |"
echo "|---|---|---|---|---|---|"
for mode in "${modes[@]}"; do
	t=$(med <<<"${sps[$mode]}")
	st=$(med <<<"${stall[$mode]}")
	awk -v m="$mode" -v t="$t" -v off="$t_off" -v n="$steps" -v k="$saves" -v st="$st" 'BEGIN {
		ov = t - off
		if (m == "off")
			printf "| %s | %.3f | %.3f | - | - | - |\n", m, n / t, t / n
		else
			printf "| %s | %.3f | %.3f | %+.1f%% (%+.2f s) | %+.3f s | %.3f s |\n", m, n / t, t / n,
				100 * ov / off, ov, ov / k, st / 1000 / k
	}'
done
awk -v s="$t_sync" -v a="$t_async" -v off="$t_off" 'BEGIN {
	os = s - off; oa = a - off
	printf "\nsync / async: overhead %s, time per step %.2fx\n",
		(oa > 0 ? sprintf("%.1fx", os / oa) : "n/a (async overhead <= 0, within noise)"), s / a
}'
