#!/usr/bin/env bash
# ckpt end to end, in one command: install the dependencies, build, start
# two ckptd daemons as two "nodes" of one group (their own sockets, one
# shared checkpoint root, a libfabric peer link on loopback), train
# ckpt-train (a byte-level language model, data-parallel over 4 MPI ranks,
# two per node, on the Japanese manual pages) with an asynchronous
# checkpoint every 50 steps, crash the whole job (SIGKILL of mpirun and
# every rank) mid-run and lose node 1 with it (its daemon killed, its
# directory wiped), inspect what survived, start a fresh daemon for node 1,
# restart the job so that it resumes from the newest committed manifest
# (node 1's ranks from node 0's memory, where their partner copy is),
# watch the loss carry on, and verify the whole checkpoint root. Committed
# steps are also uploaded to S3 (a local one-node Ceph RADOS Gateway that
# the demo starts), and the last one is brought back from S3 with
# ckpt-restore and verified. Last, a PyTorch job on the same two daemons:
# examples/pytorch/train_dcp.py under torchrun, 2 ranks (gloo, one per
# node), saves with dcp.async_save through ckptd (ckpt.dcp) until its steps
# commit, and a second run resumes from the newest one with dcp.load
# (skipped, saying so, where python3 cannot import torch).
#
# Environment:
#   CKPT_SKIP_INSTALL=1   do not run scripts/install-deps.sh
#   CKPT_DEMO_DIR=DIR     work in a new directory under DIR (default: $TMPDIR or /tmp)
#   CKPT_DEMO_KEEP=1      keep the work directory afterwards
#   CKPT_BUILD_DIR=DIR    build directory (default: build)
#   CKPT_DEMO_DATA=FILE   train on this UTF-8 file instead of the Japanese
#                         manual pages (ckpt-train --data)
#   CKPT_DEMO_S3=0        no S3 tier (no RADOS Gateway)
set -euo pipefail

cd "$(dirname "$0")/.."
build=${CKPT_BUILD_DIR:-build}
ranks=4
job=demo
steps=400
every=50
crash_after=150 # kill the job once this step is committed

say() { printf '\n==> %s\n' "$*"; }
# A child that exited stays a zombie until waited for: kill -0 would
# still succeed on it.
alive() {
	local st
	st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
	[ -n "$st" ] && [ "${st:0:1}" != Z ]
}
note() { printf '    %s\n' "$*"; }
indent() { sed 's/^/      /'; }

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
restore=$bdir/tools/ckpt-restore
train=$bdir/trainer/ckpt-train
use_s3=${CKPT_DEMO_S3:-1}
for b in "$ckptd" "$inspect" "$restore" "$train"; do
	[ -x "$b" ] || { echo "demo: $b was not built (ckpt-train needs Open MPI: libopenmpi-dev)" >&2; exit 1; }
done
command -v mpirun >/dev/null || { echo "demo: mpirun not found (openmpi-bin)" >&2; exit 1; }
note "ckptd, ckpt-inspect and ckpt-train are built"

# Open MPI: allow root, more ranks than cores, shared memory only.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader
export OMPI_MCA_btl_base_warn_component_unused=0

# ---- 2. a checkpoint root and a daemon ---------------------------------------
mkdir -p "${CKPT_DEMO_DIR:-${TMPDIR:-/tmp}}"
work=$(mktemp -d "${CKPT_DEMO_DIR:-${TMPDIR:-/tmp}}/ckpt-demo.XXXXXX")
root=$work/root
mkdir -p "$root"
# Node K's node-local directory holds its daemon's socket.
node_dir() { echo "$work/node$1"; }
ckptd_pid=   # node 0's daemon (the leader: manifests, retention, S3)
ckptd1_pid=  # node 1's daemon
job_pid=
torch_pids=() # the torchrun launchers of the PyTorch job

# descendants PID: every process below PID.
descendants() {
	local c
	for c in $(pgrep -P "$1"); do
		echo "$c"
		descendants "$c"
	done
}

# kill_job: SIGKILL mpirun and every rank at once (the job runs in its own
# process group), then wait until they are gone.
kill_job() {
	local pids p i
	[ -n "$job_pid" ] || return 0
	pids=$(descendants "$job_pid")
	kill -9 -- -"$job_pid" "$job_pid" $pids 2>/dev/null || true
	wait "$job_pid" 2>/dev/null || true
	job_pid=
	for i in $(seq 100); do
		for p in $pids; do
			alive "$p" && continue 2
		done
		return 0
	done
	echo "demo: ranks of the killed job are still alive" >&2
	return 1
}

cleanup() {
	local rc=$?
	set +e
	kill_job
	for p in "${torch_pids[@]}"; do
		kill -9 -- -"$p" "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	for p in $ckptd1_pid $ckptd_pid; do
		kill "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	[ -f "$work/rgw/env" ] && tests/s3/radosgw.sh stop "$work/rgw" >/dev/null 2>&1
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

s3_args=()
if [ "$use_s3" = 1 ]; then
	say "Starting a local S3 server: a one-node Ceph RADOS Gateway (about 20 s)"
	tests/s3/radosgw.sh start "$work/rgw" >"$work/radosgw.log" 2>&1 ||
		{ echo "demo: the RADOS Gateway did not start (CKPT_DEMO_S3=0 runs without S3)" >&2; exit 1; }
	# shellcheck disable=SC1091
	. "$work/rgw/env" # AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, S3_BUCKET
	s3url=s3://$S3_BUCKET/ckpt
	s3_args=(--s3-url "$s3url" --s3-keep-last 3 --s3-part-size 8MiB)
	note "S3 endpoint $AWS_ENDPOINT_URL, bucket $S3_BUCKET; ckptd uploads committed steps to $s3url/"
fi

# start_node K [ckptd options...]: node K's daemon, in the background; its
# pid in $started. Every node gets the same group settings: 2 nodes, a
# libfabric peer link on loopback, and memory for the partner node's newest
# step (node 0's ranks are copied to node 1 and node 1's to node 0).
start_node() {
	local k=$1 dir
	shift
	dir=$(node_dir "$k")
	mkdir -p "$dir"
	"$ckptd" --config '' --root "$root" --socket "$dir/ckptd.sock" --staging-bytes 128MiB \
		--slots-per-rank 2 --keep-last 3 --log-level info --metrics-listen 127.0.0.1:0 \
		--nodes 2 --node-index "$k" --cluster-id demo --fabric-address 127.0.0.1 \
		--peer-timeout-ms 3000 --partner-memory 256MiB "$@" >>"$work/ckptd-node$k.log" 2>&1 &
	started=$!
	for _ in $(seq 100); do
		[ -S "$dir/ckptd.sock" ] && break
		alive "$started" || { echo "demo: node $k's ckptd exited at start" >&2; exit 1; }
		sleep 0.1
	done
	[ -S "$dir/ckptd.sock" ] || { echo "demo: node $k's ckptd did not create its socket" >&2; exit 1; }
	note "node $k: ckptd pid $started, socket $dir/ckptd.sock"
}

say "Starting two ckptd daemons, nodes 0 and 1 of one group (shared root $root)"
start_node 0 "${s3_args[@]}"
ckptd_pid=$started
start_node 1
ckptd1_pid=$started
for _ in $(seq 100); do
	grep -q "peer up node=1" "$work/ckptd-node0.log" && break
	sleep 0.1
done
grep -q "peer up node=1" "$work/ckptd-node0.log" ||
	{ echo "demo: the two daemons did not find each other" >&2; exit 1; }
grep -hE "peer (link up|up)" "$work"/ckptd-node*.log | sed 's/^[^ ]* //' | indent

# The job, the same command both times: it resumes from the newest
# committed step of job $job when there is one.
data=()
[ -n "${CKPT_DEMO_DATA:-}" ] && data=(--data "$CKPT_DEMO_DATA")
# Ranks 0-1 run on "node 0", ranks 2-3 on "node 1": each connects to its
# node's daemon (CKPT_SOCKET, as on a cluster where every node has its own).
job_cmd=(mpirun -np "$ranks" bash -c 'CKPT_SOCKET=$0/node$((OMPI_COMM_WORLD_RANK / 2))/ckptd.sock exec "$@"'
	"$work" "$train" "${data[@]}" --steps "$steps" --log-every 10
	--ckpt-mode async --ckpt-every "$every" --job "$job")

# start_job LOG: the job in the background, in a process group of its own
# (so that one kill reaches every rank, and bash reports nothing about it).
start_job() {
	setsid "${job_cmd[@]}" >"$1" 2>&1 &
	job_pid=$!
}

# latest [JOB]: the newest committed step of JOB (default $job), from its
# LATEST pointer (0: none yet).
latest() {
	local v j=${1:-$job}
	v=
	[ -f "$root/$j/LATEST" ] && v=$(tr -dc '0-9' <"$root/$j/LATEST")
	echo $((10#${v:-0}))
}
# loss_lines LOG: the training log's loss and checkpoint lines.
loss_lines() { grep -E '^(step [0-9]+ loss|ckpt step|resumed from)' "$1" || true; }

# ---- 3. train, checkpointing every $every steps, then crash ---------------------
say "Training: ckpt-train on $ranks MPI ranks, $steps steps, an asynchronous checkpoint every $every steps"
note "${job_cmd[*]}"
start_job "$work/train-1.log"
deadline=$((SECONDS + 120))
while ! grep -q "^ckpt step $crash_after committed" "$work/train-1.log"; do
	alive "$job_pid" || { echo "demo: the job stopped before the crash" >&2; exit 1; }
	[ $SECONDS -lt $deadline ] || { echo "demo: step $crash_after not committed within 120 s" >&2; exit 1; }
	sleep 0.05
done
sleep 1.2 # past the commit: the crash lands between two checkpoints
grep -E '^(data|model|corpus)' "$work/train-1.log" | indent

say "CRASH: kill -9 mpirun and every rank in the middle of training, and lose node 1: kill -9 its ckptd, wipe its directory"
kill -9 "$ckptd1_pid"
wait "$ckptd1_pid" 2>/dev/null || true
ckptd1_pid=
kill_job
rm -rf "$(node_dir 1)"
# A save handed over before the kill may still commit: let ckptd settle.
sleep 1
alive "$ckptd_pid" || { echo "demo: node 0's ckptd did not survive the crash" >&2; exit 1; }
crashed_at=$(latest)
last_step=$(grep -Eo '^step [0-9]+ loss' "$work/train-1.log" | tail -n 1 | cut -d' ' -f2)
note "the last lines the job printed before it died:"
loss_lines "$work/train-1.log" | tail -n 8 | indent
note "ranks and node 1 are gone; node 0's ckptd kept running; newest committed step: $crashed_at (last step logged: $last_step)"
grep -E "peer lost node=1|partner copy received job=$job step=$crashed_at " "$work/ckptd-node0.log" |
	sed 's/^[^ ]* //' | indent
[ "$crashed_at" -ge "$crash_after" ] || { echo "demo: newest committed step $crashed_at < $crash_after" >&2; exit 1; }

say "What survived (ckptd keeps the newest 3 steps; a step without a manifest does not exist): ckpt-inspect $root"
"$inspect" "$root"
say "ckpt-inspect $root/$job"
"$inspect" "$root/$job"

# ---- 4. resume ---------------------------------------------------------------
say "A replacement node 1: a fresh ckptd, with nothing of the old one"
start_node 1
ckptd1_pid=$started
for _ in $(seq 100); do
	grep -q "peer up node=0" "$work/ckptd-node1.log" && break
	sleep 0.1
done

say "Restart: the same command; every rank restores its shard of the newest committed step"
start_job "$work/train-2.log"
rc=0
wait "$job_pid" || rc=$?
job_pid=
[ "$rc" -eq 0 ] || { echo "demo: the restarted job exited with status $rc" >&2; exit 1; }
resumed=$(sed -n 's/^resumed from step \([0-9]*\)$/\1/p' "$work/train-2.log")
[ "$resumed" = "$crashed_at" ] ||
	{ echo "demo: resumed from step '${resumed}', expected $crashed_at" >&2; exit 1; }
note "where each rank's shard came from (tier=memory: the arena the killed rank left on its own node; tier=partner: node 1's ranks from the copy in node 0's memory):"
# ckpt-train resumes through the agreed restore ("agreed job=..."); a
# rank on its own logs "restored job=...".
grep -hE "info restore: (agreed|restored) job=$job step=$resumed " "$work"/ckptd-node*.log | sed 's/^[^ ]* //' | indent
grep -qE "info restore: (agreed|restored) job=$job step=$resumed rank=[23] .*tier=partner" "$work/ckptd-node1.log" ||
	{ echo "demo: node 1's ranks did not restore from partner memory" >&2; exit 1; }
note "the loss carries on from step $resumed:"
loss_lines "$work/train-2.log" | head -n 8 | indent
# Steps resumed..last_step ran twice: a bit-exact resume logs the same loss.
redone=0
while read -r line; do
	n=$(cut -d' ' -f2 <<<"$line")
	[ "$n" -le "$last_step" ] || break
	grep -q "^step $n loss" "$work/train-1.log" || continue # step resumed+1 is always logged
	grep -qxF -- "$line" "$work/train-1.log" ||
		{ echo "demo: after the resume '$line' differs from the first run" >&2; exit 1; }
	redone=$((redone + 1))
done < <(grep -E '^step [0-9]+ loss' "$work/train-2.log")
note "steps $((resumed + 1))..$last_step ran twice: loss lines compared with the first run: $redone, all identical (bit-exact resume)"
note "..."
loss_lines "$work/train-2.log" | tail -n 3 | indent
grep '^done:' "$work/train-2.log" | indent
grep -q "^ckpt step $steps committed" "$work/train-2.log" ||
	{ echo "demo: the last step ($steps) was not committed" >&2; exit 1; }
[ "$(latest)" -eq "$steps" ] || { echo "demo: LATEST is $(latest), expected $steps" >&2; exit 1; }
first_loss=$(sed -n 's/^step 1 loss \([0-9.]*\).*/\1/p' "$work/train-1.log")
final_loss=$(sed -n "s/^step $steps loss \([0-9.]*\).*/\1/p" "$work/train-2.log")
awk -v a="$first_loss" -v b="$final_loss" 'BEGIN { exit !(b < a - 1) }' ||
	{ echo "demo: the loss did not fall (step 1: $first_loss, step $steps: $final_loss)" >&2; exit 1; }

# ---- 5. verify ----------------------------------------------------------------
say "Verifying every checkpoint: ckpt-inspect --verify $root/$job"
"$inspect" "$root/$job" --verify

if [ "$use_s3" = 1 ]; then
	say "S3: waiting for step $steps to be uploaded (the manifest object goes last)"
	deadline=$((SECONDS + 180))
	until grep -q "info s3: uploaded job=$job step=$steps " "$work/ckptd-node0.log"; do
		[ $SECONDS -lt $deadline ] || { echo "demo: step $steps did not reach S3 within 180 s" >&2; exit 1; }
		sleep 0.5
	done
	grep -E "info s3: uploaded job=$job " "$work/ckptd-node0.log" | sed 's/^[^ ]* //' | tail -n 4 | indent
	say "Disaster recovery: ckpt-restore $s3url/$job -> a fresh root, verified"
	"$restore" --no-progress "$s3url/$job" "$work/from-s3" | indent
	"$inspect" "$work/from-s3/$job" --verify | indent
fi

# ---- 6. a PyTorch job through the same daemons ----------------------------------
pyjob=pytorch
torch_ok=0
if ! python3 -c 'import torch, torch.distributed.checkpoint' 2>/dev/null; then
	say "PyTorch: SKIPPED: $(command -v python3 || echo python3) cannot import torch (scripts/install-deps.sh installs torch==2.13.0)"
else
	torch_ok=1
	# The package from the source tree, with this build's libckpt.
	export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} CKPT_LIBRARY=$bdir/libckpt/libckpt.so
	export OMP_NUM_THREADS=1

	# torch_job LOG ARGS...: examples/pytorch/train_dcp.py as a job of two
	# nodes, as torchrun runs one on a cluster: a launcher per node
	# (--nnodes 2 --node-rank K, one rank each) whose rank connects to its
	# node's daemon (CKPT_SOCKET). Node 0's launcher's output (rank 0
	# prints) in LOG, node 1's in LOG with .log replaced by -node1.log.
	torch_job() {
		local log=$1 port k p rc=0 live
		shift
		port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
		torch_pids=()
		for k in 0 1; do
			CKPT_SOCKET=$(node_dir "$k")/ckptd.sock setsid timeout 300 \
				python3 -m torch.distributed.run --nnodes 2 --node-rank "$k" --nproc-per-node 1 \
				--master-addr 127.0.0.1 --master-port "$port" \
				examples/pytorch/train_dcp.py --job "$pyjob" --max-save-mib 8 "$@" \
				>"$([ "$k" = 0 ] && echo "$log" || echo "${log%.log}-node1.log")" 2>&1 &
			torch_pids+=($!)
		done
		# Until both end; when one fails, the other (waiting for its peer
		# in torchrun's rendezvous or a collective) is killed.
		while [ "${#torch_pids[@]}" -gt 0 ]; do
			live=()
			for p in "${torch_pids[@]}"; do
				if alive "$p"; then live+=("$p"); else wait "$p" || rc=$?; fi
			done
			torch_pids=("${live[@]}")
			if [ "$rc" -ne 0 ]; then
				for p in "${torch_pids[@]}"; do
					kill -9 -- -"$p" "$p" 2>/dev/null || true
					wait "$p" 2>/dev/null || true
				done
				torch_pids=()
			fi
			sleep 0.2
		done
		return "$rc"
	}
	torch_lines() { grep -E '^(step [0-9]+: loss|resumed from|done at)' "$1" || true; }

	say "PyTorch: examples/pytorch/train_dcp.py, 2 ranks (gloo), one per node, saving with dcp.async_save through ckptd"
	note "torchrun --nnodes 2 --node-rank K --nproc-per-node 1 examples/pytorch/train_dcp.py --job $pyjob --steps 20 --save-every 5"
	note "(one launcher per node; node K's rank connects to node K's ckptd: CKPT_SOCKET=$(node_dir K)/ckptd.sock)"
	torch_job "$work/torch-1.log" --steps 20 --save-every 5 ||
		{ echo "demo: the PyTorch job exited with status $?" >&2; exit 1; }
	torch_lines "$work/torch-1.log" | indent
	[ "$(grep -c '^step [0-9]*: loss .*, saving' "$work/torch-1.log")" -eq 4 ] ||
		{ echo "demo: the PyTorch job did not save 4 times" >&2; exit 1; }
	grep -q '^resumed from' "$work/torch-1.log" &&
		{ echo "demo: the first PyTorch run resumed; there was nothing to resume from" >&2; exit 1; }
	grep -q '^done at step 20;' "$work/torch-1.log" ||
		{ echo "demo: the PyTorch job did not finish step 20" >&2; exit 1; }
	# Each dcp.async_save future completes only once ckptd committed the step.
	[ "$(latest "$pyjob")" -eq 20 ] ||
		{ echo "demo: LATEST of job $pyjob is $(latest "$pyjob"), expected 20" >&2; exit 1; }
	note "every future completed once ckptd committed the step: LATEST $(latest "$pyjob") (ckptd keeps the newest 3):"
	"$inspect" "$root/$pyjob" | indent
	note "rank 0's shard of step 20: DCP's items as ckpt tensors, by their FQNs (ckpt-inspect $root/$pyjob/step-0000000020):"
	"$inspect" "$root/$pyjob/step-0000000020" | sed -n '/^rank 0/,/^$/p' | grep -E '^  (NAME|model|optim.state)' |
		sed -n 1,8p | indent
	note "  ..."

	say "PyTorch: the same command to step 30: it loads the newest committed step with dcp.load (CkptStorageReader)"
	torch_job "$work/torch-2.log" --steps 30 --save-every 5 ||
		{ echo "demo: the resumed PyTorch job exited with status $?" >&2; exit 1; }
	torch_lines "$work/torch-2.log" | indent
	grep -qx 'resumed from step 20' "$work/torch-2.log" ||
		{ echo "demo: the PyTorch job did not resume from step 20" >&2; exit 1; }
	note "where each rank's shard came from (ckptd's agreed restore; memory: the arena the rank left on its node, partner: the other node's copy):"
	grep -hE "info restore: agreed job=$pyjob step=20 " "$work"/ckptd-node*.log | sed 's/^[^ ]* //' | indent
	[ "$(cat "$work"/ckptd-node*.log | grep -cE "info restore: agreed job=$pyjob step=20 rank=[01] ")" -eq 2 ] ||
		{ echo "demo: ckptd did not restore both ranks of step 20 of job $pyjob" >&2; exit 1; }
	[ "$(latest "$pyjob")" -eq 30 ] ||
		{ echo "demo: LATEST of job $pyjob is $(latest "$pyjob"), expected 30" >&2; exit 1; }
	note "resumed from step 20 and committed steps 25 and 30 (LATEST $(latest "$pyjob"))"
	"$inspect" "$root/$pyjob" --verify | indent
fi

# ---- 7. stop ---------------------------------------------------------------------
say "Stopping both daemons (SIGTERM)"
for p in $ckptd1_pid $ckptd_pid; do
	rc=0
	kill "$p"
	wait "$p" || rc=$?
	[ "$rc" -eq 0 ] || { echo "demo: ckptd (pid $p) exited with status $rc" >&2; exit 1; }
done
ckptd_pid=
ckptd1_pid=

say "Demo complete: crashed after step $last_step with node 1 lost, resumed from committed step $crashed_at (node 1's ranks from partner memory), trained to step $steps (loss $first_loss -> $final_loss), all verified$([ "$use_s3" = 1 ] && echo ", step $steps uploaded to S3 and restored from it")$([ "$torch_ok" = 1 ] && echo "; a PyTorch job saved through ckptd with dcp.async_save and resumed with dcp.load" || echo "; PyTorch skipped (no torch)")"
