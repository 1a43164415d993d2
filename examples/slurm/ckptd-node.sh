#!/bin/bash
# SPDX-License-Identifier: MIT
# One ckptd on this node for the length of a Slurm job: started as a job step
# with one task per node by train.sbatch. Waits until the daemon's socket
# exists, then writes READY_DIR/<host>.ready so that the batch script knows
# every node is ready; forwards SIGTERM to ckptd (which drains: see ckptd(8))
# and exits with ckptd's status.
#
# Usage: ckptd-node.sh CONFIG READY_DIR
set -u -o pipefail

config=$1 ready_dir=$2
host=$(hostname -s)
ckptd=${CKPTD:-ckptd}

# The socket path comes from the config file (socket = ...).
socket=$("$ckptd" --config "$config" --check-config | sed -n 's/^socket = //p')
[ -n "$socket" ] || { echo "ckptd-node: $host: invalid configuration $config" >&2; exit 2; }
mkdir -p "$(dirname "$socket")"

"$ckptd" --config "$config" &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null' TERM INT

# The socket file appears at bind(); listen() follows at once, and libckpt's
# connect retries for connect_timeout_ms, so its existence is enough.
for _ in $(seq 1 600); do
	[ -S "$socket" ] && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
if [ -S "$socket" ]; then
	touch "$ready_dir/$host.ready"
else
	echo "ckptd-node: $host: ckptd did not create $socket" >&2
	kill -TERM "$pid" 2>/dev/null
fi

# `wait` returns early when the trapped SIGTERM arrives: wait again until
# ckptd has drained and exited, and report its status.
while :; do
	wait "$pid"
	rc=$?
	kill -0 "$pid" 2>/dev/null || break
done
echo "ckptd-node: $host: ckptd exited with status $rc" >&2
exit "$rc"
