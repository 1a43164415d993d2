#!/bin/bash
# SPDX-License-Identifier: MIT
# A daemon that does not lead makes its ranks' directory entries durable
# before it votes: after each of its rank's index is fdatasync'ed, it
# fsyncs the step directory and then the job directory (the step
# directory's entry), and only then reports the rank durable and votes.
# Checked with strace on node 1 (a stand-in for a power cut: kill -9
# keeps the page cache, so no other test here could catch a missing fsync).
NODES=2
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-cluster.sh"

STRACE=$(command -v strace) || skip "strace is not installed"
JOB=$ROOT/dv
DATA=(--job dv --seed 8 --tensors 4 --min-bytes 64K --max-bytes 1M)

cluster_start
"$STRACE" -f -qq -yy -e trace=fsync,fdatasync -o "$T/n1.strace" -p "${CKPTD_PID[n1]}" &
EXTRA_PIDS+=($!)
STRACE_PID=$!
for i in $(seq 1 100); do
	tracer=$(awk '/^TracerPid:/ { print $2 }' "/proc/${CKPTD_PID[n1]}/status")
	[ "${tracer:-0}" != 0 ] && break
	sleep 0.1
done
[ "${tracer:-0}" != 0 ] || fail "strace did not attach to node 1's daemon"

log "steps 1 and 2 on all 4 ranks, node 1 traced"
run_cluster_ranks s "${DATA[@]}" --steps 1,2 --wait --timeout-ms 60000
expect_committed "$JOB" "1 2"
sleep 0.5
kill -INT "$STRACE_PID"
wait "$STRACE_PID" 2>/dev/null

# For every rank of node 1 and step: the index's fdatasync, then an fsync
# of the step directory, then one of the job directory, in that order.
for s in 1 2; do
	sd=$(stepdir "$JOB" $s)
	for r in 2 3; do
		idx=$sd/$(printf 'rank-%06d.index' $r)
		awk -v idx="<$idx>" -v sd="<$sd>" -v jd="<$JOB>" '
			index($0, "fdatasync(") && index($0, idx) && !a { a = NR; next }
			a && !b && index($0, "fsync(") && !index($0, "fdatasync(") && index($0, sd) { b = NR; next }
			b && !c && index($0, "fsync(") && !index($0, "fdatasync(") && index($0, jd) { c = NR }
			END { exit !(a && b && c) }' "$T/n1.strace" ||
			fail "node 1, step $s, rank $r: no fdatasync of the index followed by fsync of $sd and of $JOB before its vote: $(grep -E 'fsync|fdatasync' "$T/n1.strace" | grep -v metrics | head -40)"
	done
done
ckptd_stop n1
ckptd_stop n0
log "pass"
