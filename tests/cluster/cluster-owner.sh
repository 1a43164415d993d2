#!/bin/bash
# SPDX-License-Identifier: MIT
# Job ownership between a single-node ckptd and a two-node group on one
# root. While the single daemon owns job "co" (a save of it in flight), the
# group refuses its ranks: the leader because the OWNER lock is held, the
# other node because the holder is not its group's leader; both name the
# holder. Once the single daemon has committed its step and released the
# job (its ranks left), the group's leader takes it over and its saves
# commit; then the single daemon refuses the job, naming the group (cluster
# id, node 0). The leader, killed and restarted, takes the job back by
# itself (OWNER's holder names the group's node 0) and releases it once idle.
NODES=2
RANKS_PER_NODE=1
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-cluster.sh"

JOB=$ROOT/co
DATA=(--job co --seed 7 --tensors 3 --min-bytes 4K --max-bytes 512K)

mkdir -p "$ROOT"
ckptd_start s "$ROOT" --keep-last 0 --nodes 1
SPID=${CKPTD_PID[s]}
# Rank 0 of a world of 2 saves step 1 and waits: step 1 stays open in s.
rank_start s-r0 --socket "$(sock s)" "${DATA[@]}" --rank 0 --world 2 --steps 1 --wait \
	--timeout-ms 60000
SR0=$LAST_PID
for i in $(seq 1 200); do
	grep -q "rank 0 connected" "$T/s-r0.log" && break
	sleep 0.05
done
grep -q "rank 0 connected" "$T/s-r0.log" || fail "rank 0 of job co did not connect to s"

cluster_start
log "the group's ranks of job co are refused while s owns it"
cluster_ranks refused "0 1" "${DATA[@]}" --steps 5 --wait --timeout-ms 10000 \
	--connect-timeout-ms 5000
for r in 0 1; do
	wait "${CRANK_PID[$r]}" && fail "rank $r of job co connected to node $r while s owns the job"
done
for k in 0 1; do
	grep "HELLO refused.*job=co" "$T/ckptd-n$k.log" | grep -q "pid $SPID" ||
		fail "node $k did not refuse job co naming its holder (pid $SPID): $(grep 'job=co' "$T/ckptd-n$k.log" | tail -3)"
done
grep "HELLO refused.*job=co" "$T/ckptd-n1.log" | grep -q "not by the leader of this group" ||
	fail "node 1's refusal does not say that its leader does not own job co"
expect_committed "$JOB" ""
grep -qx "pid=$SPID" "$JOB/OWNER" || fail "$JOB/OWNER does not name s: $(cat "$JOB/OWNER" 2>&1)"

log "s commits step 1 and releases job co; the group takes it over"
rank_start s-r1 --socket "$(sock s)" "${DATA[@]}" --rank 1 --world 2 --steps 1 --wait \
	--timeout-ms 60000
rank_wait "$LAST_PID" s-r1
rank_wait "$SR0" s-r0
for i in $(seq 1 100); do
	grep -q "job released job=co" "$T/ckptd-s.log" && break
	sleep 0.1
done
grep -q "job released job=co" "$T/ckptd-s.log" || fail "s did not release job co"
cluster_ranks g "0" "${DATA[@]}" --steps 5,6 --wait --timeout-ms 60000
cluster_ranks g "1" "${DATA[@]}" --steps 5,6 --wait --timeout-ms 60000 --gate "6:$T/gate"
for i in $(seq 1 300); do
	[ -f "$(stepdir "$JOB" 5)/MANIFEST.json" ] && break
	sleep 0.1
done
expect_committed "$JOB" "1 5"
grep -qx "cluster=$CLUSTER_ID" "$JOB/OWNER" && grep -qx "node=0" "$JOB/OWNER" &&
	grep -qx "pid=${CKPTD_PID[n0]}" "$JOB/OWNER" ||
	fail "$JOB/OWNER does not name the group's leader: $(cat "$JOB/OWNER")"

log "now s refuses job co, naming the group"
rank_start s-again --socket "$(sock s)" "${DATA[@]}" --rank 0 --world 2 --steps 9 --wait \
	--timeout-ms 10000 --connect-timeout-ms 5000
wait "$LAST_PID" && fail "a rank of job co connected to s while the group owns the job"
grep "HELLO refused.*job=co" "$T/ckptd-s.log" | grep -q "cluster $CLUSTER_ID, node 0 of 2" ||
	fail "s did not refuse job co naming the group: $(grep 'job=co' "$T/ckptd-s.log" | tail -2)"

log "the group's saves go on"
touch "$T/gate"
cluster_wait g "0 1"
expect_committed "$JOB" "1 5 6"
verify "$JOB" 1
verify "$JOB" 5
verify "$JOB" 6

log "the leader, restarted after kill -9, takes job co back by itself, and lets it go"
released=$(grep -c "job released job=co" "$T/ckptd-n0.log")
ckptd_kill9 n0
node_start 0
for i in $(seq 1 100); do
	[ "$(grep -c "job released job=co" "$T/ckptd-n0.log")" -gt "$released" ] && break
	sleep 0.1
done
grep -q "resumed job=co" "$T/ckptd-n0.log" || fail "the restarted leader did not take job co back"
[ "$(grep -c "job released job=co" "$T/ckptd-n0.log")" -gt "$released" ] ||
	fail "the restarted leader kept job co although nothing uses it"
grep -q "resumed job=co" "$T/ckptd-s.log" "$T/ckptd-n1.log" &&
	fail "a daemon other than the group's leader resumed job co"
grep -qx "holder=group:$CLUSTER_ID:0" "$JOB/OWNER" ||
	fail "$JOB/OWNER does not name the group's leader as its holder: $(cat "$JOB/OWNER")"
expect_committed "$JOB" "1 5 6"
ckptd_stop s
log "pass"
