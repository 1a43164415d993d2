#!/usr/bin/env bash
# ckpt end to end, in one command: install the dependencies, build, start
# ckptd, train with 4 ranks that checkpoint every 10 steps, crash them all
# (SIGKILL) mid-run, inspect what survived, resume every rank from the
# newest committed checkpoint (verified byte for byte), keep training and
# verify the whole checkpoint root.
#
# The ranks are ckpt-test-rank (tests/integration), which saves
# deterministic data through libckpt and checks it on restore.
#
# Environment:
#   CKPT_SKIP_INSTALL=1   do not run scripts/install-deps.sh
#   CKPT_DEMO_DIR=DIR     work in a new directory under DIR (default: $TMPDIR or /tmp)
#   CKPT_DEMO_KEEP=1      keep the work directory afterwards
#   CKPT_BUILD_DIR=DIR    build directory (default: build)
set -euo pipefail

cd "$(dirname "$0")/.."
build=${CKPT_BUILD_DIR:-build}
ranks=4
job=demo

say() { printf '\n==> %s\n' "$*"; }
# A child that exited stays a zombie until waited for: kill -0 would
# still succeed on it.
alive() {
	local st
	st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
	[ -n "$st" ] && [ "${st:0:1}" != Z ]
}
note() { printf '    %s\n' "$*"; }

# ---- 1. dependencies and build ----------------------------------------------
if [ "${CKPT_SKIP_INSTALL:-0}" != 1 ]; then
	say "Installing build dependencies (Debian packages)"
	scripts/install-deps.sh
fi

say "Building into $build/"
if [ ! -f "$build/meson-private/coredata.dat" ]; then
	meson setup "$build" >/dev/null
fi
ninja -C "$build" >/dev/null
bdir=$(cd "$build" && pwd)
ckptd=$bdir/ckptd/ckptd
inspect=$bdir/tools/ckpt-inspect
rank_bin=$bdir/tests/integration/ckpt-test-rank
for b in "$ckptd" "$inspect" "$rank_bin"; do
	[ -x "$b" ] || { echo "demo: $b was not built" >&2; exit 1; }
done
note "ckptd, ckpt-inspect and the rank program are built"

# ---- 2. a checkpoint root and a daemon ---------------------------------------
mkdir -p "${CKPT_DEMO_DIR:-${TMPDIR:-/tmp}}"
work=$(mktemp -d "${CKPT_DEMO_DIR:-${TMPDIR:-/tmp}}/ckpt-demo.XXXXXX")
root=$work/root
sock=$work/ckptd.sock
mkdir -p "$root"
ckptd_pid=
rank_pids=()

cleanup() {
	local rc=$?
	set +e
	for p in "${rank_pids[@]}"; do
		kill -9 "$p" 2>/dev/null
	done
	if [ -n "$ckptd_pid" ]; then
		kill "$ckptd_pid" 2>/dev/null
		wait "$ckptd_pid" 2>/dev/null
	fi
	if [ "$rc" -ne 0 ]; then
		echo
		echo "demo FAILED (exit $rc). Logs:" >&2
		for f in "$work"/*.log; do
			[ -e "$f" ] || continue
			echo "----- $(basename "$f") (last 30 lines) -----" >&2
			tail -n 30 "$f" >&2
		done
	fi
	if [ "${CKPT_DEMO_KEEP:-0}" = 1 ] || [ "$rc" -ne 0 ]; then
		echo "demo: files kept in $work" >&2
	else
		rm -rf "$work"
	fi
	exit "$rc"
}
trap cleanup EXIT

say "Starting ckptd (root $root)"
"$ckptd" --root "$root" --socket "$sock" --staging-bytes 512MiB --slots-per-rank 2 \
	--keep-last 3 --log-level info >"$work/ckptd.log" 2>&1 &
ckptd_pid=$!
for _ in $(seq 100); do
	[ -S "$sock" ] && break
	alive "$ckptd_pid" || { echo "demo: ckptd exited at start" >&2; exit 1; }
	sleep 0.1
done
[ -S "$sock" ] || { echo "demo: ckptd did not create $sock" >&2; exit 1; }
note "ckptd is up: pid $ckptd_pid, socket $sock"

# What every rank of the job shares; each adds its own --rank.
common=(--socket "$sock" --job "$job" --world "$ranks" --seed 7
	--tensors 6 --min-bytes 256K --max-bytes 4M --timeout-ms 30000)

# The job's newest committed step, from its LATEST pointer (0: none yet).
latest() {
	local v
	v=
	[ -f "$root/$job/LATEST" ] && v=$(tr -dc '0-9' <"$root/$job/LATEST")
	echo $((10#${v:-0}))
}

# ---- 3. train, checkpointing every 10 steps, then crash ----------------------
say "Training: $ranks ranks, a checkpoint every 10 steps (each rank waits for the commit)"
for r in $(seq 0 $((ranks - 1))); do
	"$rank_bin" "${common[@]}" --rank "$r" --first 10 --every 10 --count 0 \
		--sleep-between-ms 200 --wait >"$work/rank-$r.log" 2>&1 &
	rank_pids+=($!)
done

deadline=$((SECONDS + 120))
while [ "$(latest)" -lt 50 ]; do
	for i in "${!rank_pids[@]}"; do
		if ! alive "${rank_pids[$i]}"; then
			echo "demo: rank $i stopped before the crash" >&2
			exit 1
		fi
	done
	[ $SECONDS -lt $deadline ] || { echo "demo: no step 50 within 120 s" >&2; exit 1; }
	sleep 0.1
done
note "committed so far: up to step $(latest); rank 0 says:"
grep -h 'committed' "$work/rank-0.log" | tail -n 3 | sed 's/^/      /'

say "CRASH: kill -9 every rank in the middle of training"
kill -9 "${rank_pids[@]}"
wait "${rank_pids[@]}" 2>/dev/null || true
rank_pids=()
# ckptd abandons the steps the dead ranks left in flight; let it settle.
sleep 1
alive "$ckptd_pid" || { echo "demo: ckptd did not survive its clients' crash" >&2; exit 1; }
crashed_at=$(latest)
note "ranks are gone; ckptd kept running; newest committed step: $crashed_at"

say "What survived (ckptd keeps the newest 3 steps; a step without a manifest does not exist): ckpt-inspect $root"
"$inspect" "$root"
say "ckpt-inspect $root/$job"
"$inspect" "$root/$job"

# ---- 4. resume ---------------------------------------------------------------
say "Restart: every rank restores the newest committed step and checks it byte for byte"
for r in $(seq 0 $((ranks - 1))); do
	"$rank_bin" "${common[@]}" --rank "$r" --restore latest --expect-step "$crashed_at" \
		>"$work/restore-$r.log" 2>&1 &
	rank_pids+=($!)
done
for i in "${!rank_pids[@]}"; do
	wait "${rank_pids[$i]}" || { echo "demo: rank $i failed to restore" >&2; exit 1; }
done
rank_pids=()
cat "$work"/restore-*.log | sed 's/^/    /'

say "Training continues from step $crashed_at: 3 more checkpoints"
for r in $(seq 0 $((ranks - 1))); do
	"$rank_bin" "${common[@]}" --rank "$r" --first $((crashed_at + 10)) --every 10 --count 3 \
		--wait >"$work/resume-$r.log" 2>&1 &
	rank_pids+=($!)
done
for i in "${!rank_pids[@]}"; do
	wait "${rank_pids[$i]}" || { echo "demo: rank $i failed after the restart" >&2; exit 1; }
done
rank_pids=()
grep -h 'committed' "$work/resume-0.log" | sed 's/^/    /'
[ "$(latest)" -eq $((crashed_at + 30)) ] ||
	{ echo "demo: LATEST is $(latest), expected $((crashed_at + 30))" >&2; exit 1; }

# ---- 5. verify and stop --------------------------------------------------------
say "Verifying every checkpoint: ckpt-inspect --verify $root/$job"
"$inspect" "$root/$job" --verify

say "Stopping ckptd (SIGTERM)"
kill "$ckptd_pid"
rc=0
wait "$ckptd_pid" || rc=$?
ckptd_pid=
[ "$rc" -eq 0 ] || { echo "demo: ckptd exited with status $rc" >&2; exit 1; }

say "Demo complete: crashed at step $crashed_at, resumed, committed up to step $(latest), all verified"
