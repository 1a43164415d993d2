# SPDX-License-Identifier: MIT
# Shared harness for the integration and fault tests (bash; sourced).
#
# Binaries come from the environment that meson test sets:
#   CKPTD, CKPT_INSPECT, CKPT_TEST_RANK, CKPT_RAW_CLIENT (fault tests only).
# Every test gets a temp dir ($T); whatever it started (ckptd, ranks) is
# killed on exit, mounts are undone, and on failure the logs are printed.
# Set CKPT_TEST_KEEP=1 to keep $T for a post-mortem.

set -u
set -o pipefail

: "${CKPTD:?CKPTD must name the ckptd binary}"
: "${CKPT_INSPECT:?CKPT_INSPECT must name the ckpt-inspect binary}"
: "${CKPT_TEST_RANK:?CKPT_TEST_RANK must name the ckpt-test-rank binary}"

# Settings must come from the test alone, not from the caller's environment.
for v in $(compgen -e | grep '^CKPTD_'); do unset "$v"; done
unset CKPT_SOCKET

TEST_NAME=$(basename "$0" .sh)
T=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-$TEST_NAME.XXXXXX")
declare -A CKPTD_PID=()    # name -> pid
declare -a RANK_PIDS=()    # ranks started with rank_start
declare -a MOUNTS=()
declare -a EXTRA_PIDS=()

log() { printf '[%s %s] %s\n' "$TEST_NAME" "$(date +%T.%3N)" "$*"; }

dump_logs() {
	local f
	for f in "$T"/*.log; do
		[ -e "$f" ] || continue
		echo "----- $(basename "$f") (last 60 lines) -----"
		tail -n 60 "$f"
	done
}

# fail MESSAGE: print it and every log, then exit 1 (cleanup runs on EXIT).
fail() {
	echo "FAIL: $TEST_NAME: $*" >&2
	dump_logs >&2
	exit 1
}

skip() {
	echo "SKIP: $TEST_NAME: $*" >&2
	exit 77
}

cleanup() {
	local rc=$? p m
	set +e
	for p in "${RANK_PIDS[@]}" "${EXTRA_PIDS[@]}"; do
		kill -9 "$p" 2>/dev/null
	done
	for p in "${CKPTD_PID[@]}"; do
		kill -9 "$p" 2>/dev/null
	done
	wait 2>/dev/null
	for m in "${MOUNTS[@]}"; do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
	done
	if [ "${CKPT_TEST_KEEP:-0}" = 1 ] || [ "$rc" -ne 0 -a "${CKPT_TEST_KEEP:-0}" = fail ]; then
		echo "kept $T" >&2
	else
		rm -rf "$T"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ckptd_start NAME ROOT [ckptd options...]: start ckptd with socket
# $T/NAME.sock and log $T/ckptd-NAME.log (appended across restarts); wait
# until the socket exists.
ckptd_start() {
	local name=$1 root=$2 sock="$T/$1.sock" i
	shift 2
	mkdir -p "$root"
	rm -f "$sock"
	echo "=== start $(date +%T.%3N): $* ===" >>"$T/ckptd-$name.log"
	# --config '': no system config file; tests say every setting they rely on.
	# Metrics on a free loopback port (written to $T/NAME.metrics-port), so
	# that every test exercises the endpoint and none collide on a port.
	rm -f "$T/$name.metrics-port"
	"$CKPTD" --config '' --root "$root" --socket "$sock" --log-level debug \
		--metrics-listen 127.0.0.1:0 --metrics-port-file "$T/$name.metrics-port" "$@" \
		>>"$T/ckptd-$name.log" 2>&1 &
	CKPTD_PID[$name]=$!
	for i in $(seq 1 200); do
		[ -S "$sock" ] && return 0
		if ! kill -0 "${CKPTD_PID[$name]}" 2>/dev/null; then
			wait "${CKPTD_PID[$name]}"
			fail "ckptd $name exited with status $? during start-up"
		fi
		sleep 0.05
	done
	fail "ckptd $name: socket $sock did not appear within 10 s"
}

sock() { echo "$T/$1.sock"; }

# metrics_port NAME: the port ckptd NAME serves /metrics on (written at start).
metrics_port() { cat "$T/$1.metrics-port"; }

ckptd_alive() { kill -0 "${CKPTD_PID[$1]}" 2>/dev/null; }

# ckptd_stop NAME: SIGTERM, must exit 0 within 20 s.
ckptd_stop() {
	local name=$1 pid=${CKPTD_PID[$1]} i rc
	kill -TERM "$pid" 2>/dev/null || fail "ckptd $name was not running at stop"
	for i in $(seq 1 200); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		kill -9 "$pid"
		fail "ckptd $name did not exit within 20 s of SIGTERM"
	fi
	wait "$pid"
	rc=$?
	unset "CKPTD_PID[$name]"
	[ "$rc" -eq 0 ] || fail "ckptd $name exited with status $rc after SIGTERM"
}

# ckptd_kill9 NAME
ckptd_kill9() {
	local pid=${CKPTD_PID[$1]}
	kill -9 "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	unset "CKPTD_PID[$1]"
}

# rank_start LOGNAME [ckpt-test-rank options...]: start a rank in the
# background (log $T/LOGNAME.log); its pid is in $LAST_PID.
rank_start() {
	local name=$1
	shift
	# No timeout(1) wrapper: $! must be the rank itself (tests signal it);
	# ranks bound their own waits, and cleanup kills them.
	"$CKPT_TEST_RANK" "$@" >"$T/$name.log" 2>&1 &
	LAST_PID=$!
	RANK_PIDS+=("$LAST_PID")
}

# rank_wait PID LOGNAME: the rank must exit 0.
rank_wait() {
	local rc
	wait "$1"
	rc=$?
	[ "$rc" -eq 0 ] || fail "rank $2 exited with status $rc (see $2.log)"
}

# job_takeover SOCKET JOB: connect one rank of JOB that saves nothing and
# leaves, so that ckptd takes the job over and recovers it (ckptd recovers
# a job at its first HELLO, not at start-up).
job_takeover() {
	: >"$T/takeover-stop"
	"$CKPT_TEST_RANK" --socket "$1" --job "$2" --rank 0 --world 1 --tensors 1 \
		--min-bytes 4K --max-bytes 4K --stop-file "$T/takeover-stop" \
		>"$T/takeover-$2.log" 2>&1 ||
		fail "job $2: a rank could not connect to take the job over (see takeover-$2.log)"
}

# run_ranks WORLD LOGPREFIX [options...]: run ranks 0..WORLD-1 of a job
# concurrently (options must include --socket and --job); all must exit 0.
run_ranks() {
	local world=$1 prefix=$2 r
	local -a pids=()
	shift 2
	for r in $(seq 0 $((world - 1))); do
		rank_start "$prefix-$r" --rank "$r" --world "$world" "$@"
		pids+=("$LAST_PID")
	done
	for r in $(seq 0 $((world - 1))); do
		rank_wait "${pids[$r]}" "$prefix-$r"
	done
}

stepdir() { printf '%s/step-%010d' "$1" "$2"; }

# committed_steps JOBDIR: committed step numbers (dirs with MANIFEST.json), ascending.
committed_steps() {
	local d
	for d in "$1"/step-*; do
		[ -f "$d/MANIFEST.json" ] || continue
		echo $((10#${d##*/step-}))
	done | sort -n
}

# uncommitted_steps JOBDIR: step dirs without MANIFEST.json.
uncommitted_steps() {
	local d
	for d in "$1"/step-*; do
		[ -d "$d" ] || continue
		[ -f "$d/MANIFEST.json" ] && continue
		echo $((10#${d##*/step-}))
	done | sort -n
}

# expect_committed JOBDIR "10 20 30": exactly these steps are committed.
expect_committed() {
	local got
	got=$(committed_steps "$1" | tr '\n' ' ' | sed 's/ $//')
	[ "$got" = "$2" ] || fail "$1: committed steps are '$got', expected '$2'"
}

# verify JOBDIR STEP: ckpt-inspect --verify on one step must pass.
verify() {
	local out rc
	out=$(timeout 120 "$CKPT_INSPECT" "$(stepdir "$1" "$2")" --verify 2>&1)
	rc=$?
	[ "$rc" -eq 0 ] || { echo "$out" | tail -n 30 >&2; fail "ckpt-inspect --verify of $1 step $2 exited $rc"; }
}

# verify_all JOBDIR: every committed step verifies; prints how many.
verify_all() {
	local s n=0
	for s in $(committed_steps "$1"); do
		verify "$1" "$s"
		n=$((n + 1))
	done
	echo "$n"
}

expect_latest() {
	local got
	got=$(tr -d ' \n' <"$1/LATEST" 2>/dev/null) || fail "$1/LATEST is missing"
	[ "$((10#$got))" -eq "$2" ] || fail "$1/LATEST says '$got', expected $2"
}

grep_log() { grep -q -- "$2" "$T/$1.log"; }
