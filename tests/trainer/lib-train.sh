# SPDX-License-Identifier: MIT
# Helpers for the ckpt-train tests (bash; sourced after ../integration/lib.sh).
#
# Environment from meson: CKPT_TRAIN (the binary), CKPT_TRAIN_DATA (the
# sample text), MPIRUN.

: "${CKPT_TRAIN:?CKPT_TRAIN must name the ckpt-train binary}"
: "${CKPT_TRAIN_DATA:?CKPT_TRAIN_DATA must name the training text}"
: "${MPIRUN:=mpirun}"

# Open MPI as root and with more ranks than cores (CI machines have 2).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Shared memory only: tests never touch a network interface.
export OMPI_MCA_btl=self,vader
export OMPI_MCA_btl_base_warn_component_unused=0

# A tiny model: a few ms per step on one core.
TINY=(--data "$CKPT_TRAIN_DATA" --ctx 6 --embd 8 --hidden 48 --layers 2 --batch 2 --seq 32
	--lr 5e-3 --warmup 10 --seed 7)

# train_run NP LOGNAME [ckpt-train options...]: run to the end; must exit 0.
train_run() {
	local np=$1 name=$2 rc
	shift 2
	timeout 120 "$MPIRUN" -np "$np" "$CKPT_TRAIN" "$@" >"$T/$name.log" 2>&1
	rc=$?
	[ "$rc" -eq 0 ] || fail "ckpt-train ($name) exited with status $rc"
}

# train_start NP LOGNAME [options...]: start in the background in its own
# process group; the mpirun pid is in $TRAIN_PID.
train_start() {
	local np=$1 name=$2
	shift 2
	setsid "$MPIRUN" -np "$np" "$CKPT_TRAIN" "$@" >"$T/$name.log" 2>&1 &
	TRAIN_PID=$!
	EXTRA_PIDS+=("$TRAIN_PID")
}

# descendants PID: every process below PID.
descendants() {
	local c
	for c in $(pgrep -P "$1"); do
		echo "$c"
		descendants "$c"
	done
}

# train_kill9: kill -9 the whole job (mpirun and every rank) at once.
train_kill9() {
	local pids
	pids=$(descendants "$TRAIN_PID")
	kill -9 -- -"$TRAIN_PID" "$TRAIN_PID" $pids 2>/dev/null
	wait "$TRAIN_PID" 2>/dev/null
	# Ranks must really be gone before the job restarts with the same ranks.
	local i p
	for i in $(seq 1 100); do
		local alive=0
		for p in $pids; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ "$alive" = 0 ] && return 0
		sleep 0.05
	done
	fail "ranks of the killed job are still alive"
}

# wait_log LOGNAME REGEX SECS: wait until the log has a line matching REGEX.
wait_log() {
	local i
	for i in $(seq 1 $(($3 * 20))); do
		grep -Eq -- "$2" "$T/$1.log" 2>/dev/null && return 0
		kill -0 "$TRAIN_PID" 2>/dev/null || break
		sleep 0.05
	done
	grep -Eq -- "$2" "$T/$1.log" 2>/dev/null
}

# last_committed LOGNAME: highest step the log reports committed (or 0).
last_committed() {
	grep -Eo 'ckpt step [0-9]+ committed' "$T/$1.log" 2>/dev/null |
		awk '{ if ($3 > m) m = $3 } END { print m + 0 }'
}

# gpu_setup: for the --device cuda tests. Sets GPU_NP to the ranks a GPU
# job can have here (one per GPU, NCCL's rule; at most 2), or skips the
# test when this ckpt-train has no GPU support or the machine no GPU.
gpu_setup() {
	local out rc n
	# NCCL's bootstrap on loopback, like everything else here; its
	# warnings land in the job's log.
	export NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=WARN
	out=$(timeout 120 "$MPIRUN" -np 1 "$CKPT_TRAIN" --device cuda --data "$CKPT_TRAIN_DATA" \
		--steps 0 --ckpt-mode off 2>&1)
	rc=$?
	if [ "$rc" -eq 2 ] && grep -q 'built without GPU support' <<<"$out"; then
		skip "this ckpt-train was built without GPU support (-Dgpu=enabled)"
	fi
	if [ "$rc" -eq 2 ] && grep -q 'no CUDA device' <<<"$out"; then
		skip "no GPU on this machine ($(grep -o 'no CUDA device.*' <<<"$out" | head -n 1))"
	fi
	[ "$rc" -eq 0 ] || { echo "$out" >&2; fail "probing --device cuda: exit status $rc"; }
	n=$(sed -n 's/^device: cuda.* of \([0-9]*\))$/\1/p' <<<"$out")
	[ -n "$n" ] && [ "$n" -ge 1 ] || fail "no device count in: $out"
	GPU_NP=$((n >= 2 ? 2 : 1))
	log "$(grep '^device:' <<<"$out"); GPU jobs use $GPU_NP rank(s)"
}
