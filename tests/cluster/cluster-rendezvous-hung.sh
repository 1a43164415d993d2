#!/bin/bash
# SPDX-License-Identifier: MIT
# Rendezvous reads never stall the event loop: node 2 of a 3-node group is
# down, so nodes 0 and 1 keep reading its rendezvous file, and that file
# hangs every open (a FIFO nobody writes: a metadata server that does not
# answer). Nodes 0 and 1 must still form the group, commit a job whose ranks
# all run on them, and answer /metrics. Then the "server" answers again.
NODES=3
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-cluster.sh"

JOB=$ROOT/rh
DATA=(--job rh --seed 3 --tensors 4 --min-bytes 64K --max-bytes 2M)
WORLD=4 # ranks 0-3: nodes 0 and 1 only

mkdir -p "$RENDEZVOUS"
chmod 700 "$RENDEZVOUS"
mkfifo "$RENDEZVOUS/node-2"
unhang() {
	# Opened read-write, a FIFO lets every blocked reader's open through;
	# removed and closed, each sees end of file.
	exec 3<>"$RENDEZVOUS/node-2"
	rm -f "$RENDEZVOUS/node-2"
	exec 3>&-
}

node_start 0
node_start 1
for i in $(seq 1 200); do
	grep -q "peer up node=1" "$T/ckptd-n0.log" && grep -q "peer up node=0" "$T/ckptd-n1.log" && break
	sleep 0.1
done
grep -q "peer up node=1" "$T/ckptd-n0.log" && grep -q "peer up node=0" "$T/ckptd-n1.log" ||
	{ unhang; fail "nodes 0 and 1 did not see each other within 20 s while node 2's file hangs"; }

log "a job on nodes 0 and 1 commits while node 2's rendezvous file hangs every read"
cluster_ranks s1 "0 1 2 3" "${DATA[@]}" --steps 1,2 --wait --timeout-ms 20000 --connect-timeout-ms 10000
for r in 0 1 2 3; do
	if ! timeout 40 tail --pid="${CRANK_PID[$r]}" -f /dev/null; then
		unhang
		fail "rank $r did not finish within 40 s: the loop is stuck in a rendezvous read"
	fi
done
for k in 0 1; do
	timeout 5 python3 "$PROMQL" get "http://127.0.0.1:$(metrics_port "n$k")/metrics" >/dev/null ||
		{ unhang; fail "node $k does not answer /metrics"; }
done
unhang
cluster_wait s1 "0 1 2 3"
expect_committed "$JOB" "1 2"
verify "$JOB" 2
ckptd_stop n1
ckptd_stop n0
log "pass"
