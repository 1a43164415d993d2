#!/bin/bash
# SPDX-License-Identifier: MIT
# Three ckptd daemons, one per node, commit together: a job of 6 ranks (2 per
# node). While only the ranks of nodes 0 and 1 have saved step 1, no
# manifest appears and none of them hears "committed"; once node 2's ranks
# save it too, the step commits and every rank sees it. Then more steps
# commit and LATEST follows; every step verifies with ckpt-inspect and a
# fresh job restores the latest through each node's own daemon. Every
# daemon reports both other nodes up.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-cluster.sh"

JOB=$ROOT/cc
DATA=(--job cc --seed 5 --tensors 6 --min-bytes 4K --max-bytes 4M --blob-bytes 777)

cluster_start
for k in 0 1 2; do
	[ "$(peers_up $k)" -eq 2 ] || fail "node $k does not report both other nodes up"
done
[ -f "$RENDEZVOUS/key" ] || fail "no key file in the rendezvous directory $RENDEZVOUS"
for k in 0 1 2; do
	[ -s "$RENDEZVOUS/node-$k" ] || fail "node $k published no address in $RENDEZVOUS"
done

log "step 1: ranks of nodes 0 and 1 only"
cluster_ranks s1 "0 1 2 3" "${DATA[@]}" --steps 1 --wait --timeout-ms 90000
no_manifest_for "$JOB" 1 3
for r in 0 1 2 3; do
	kill -0 "${CRANK_PID[$r]}" 2>/dev/null ||
		fail "rank $r finished step 1 while node 2's ranks had not saved it: $(cat "$T/s1-$r.log")"
done
[ -e "$JOB/LATEST" ] && fail "LATEST exists before any step committed: $(cat "$JOB/LATEST")"

log "step 1: node 2's ranks save it too"
cluster_ranks s1 "4 5" "${DATA[@]}" --steps 1 --wait --timeout-ms 90000
cluster_wait s1 "0 1 2 3 4 5"
for r in 0 1 2 3 4 5; do
	grep_log "s1-$r" "rank $r step 1 committed" || fail "rank $r did not report step 1 committed"
done
expect_committed "$JOB" 1
expect_latest "$JOB" 1
verify "$JOB" 1

log "steps 2..5 on every rank"
run_cluster_ranks more "${DATA[@]}" --steps 2,3 --wait --timeout-ms 90000
expect_latest "$JOB" 3
run_cluster_ranks more2 "${DATA[@]}" --steps 4,5 --wait --timeout-ms 90000
for r in 0 1 2 3 4 5; do
	grep_log "more2-$r" "rank $r step 5 committed" || fail "rank $r did not report step 5 committed"
done
expect_committed "$JOB" "1 2 3 4 5"
expect_latest "$JOB" 5
[ -z "$(uncommitted_steps "$JOB")" ] || fail "uncommitted step directories: $(uncommitted_steps "$JOB")"
for s in 1 2 3 4 5; do
	d=$(stepdir "$JOB" $s)
	for r in 0 1 2 3 4 5; do
		[ -f "$d/$(printf 'rank-%06d.shard' $r)" ] || fail "$d: shard of rank $r missing"
		[ -f "$d/$(printf 'rank-%06d.index' $r)" ] || fail "$d: index of rank $r missing"
	done
done
n=$(verify_all "$JOB")
[ "$n" -eq 5 ] || fail "$n steps verified, expected 5"
timeout 120 "$CKPT_INSPECT" "$JOB" >"$T/inspect-job.log" 2>&1 || fail "ckpt-inspect $JOB exited $?"
for s in 1 2 3 4 5; do
	grep -Eq "(^|[^0-9])0*$s([^0-9]|$)" "$T/inspect-job.log" ||
		fail "ckpt-inspect $JOB does not list step $s"
done
# The root holds the group's rendezvous directory too: listing and
# verifying the whole root must not trip over it.
timeout 120 "$CKPT_INSPECT" "$ROOT" >"$T/inspect-root.log" 2>&1 || fail "ckpt-inspect $ROOT exited $?"
grep -Eq '^cc +5 +5 ' "$T/inspect-root.log" || fail "ckpt-inspect $ROOT: $(cat "$T/inspect-root.log")"
timeout 120 "$CKPT_INSPECT" "$ROOT" --verify >"$T/inspect-root-verify.log" 2>&1 ||
	fail "ckpt-inspect $ROOT --verify exited $?"
timeout 120 "$CKPT_INSPECT" "$(stepdir "$JOB" 5)" --json >"$T/inspect-json.log" 2>&1 ||
	fail "ckpt-inspect --json exited $?"
python3 - "$T/inspect-json.log" <<'EOF' || fail "ckpt-inspect --json: step 5 does not have world_size 6"
import json, sys
def find(d):
    if isinstance(d, dict):
        if "world_size" in d:
            return d["world_size"]
        d = list(d.values())
    if isinstance(d, list):
        for v in d:
            r = find(v)
            if r is not None:
                return r
    return None
sys.exit(0 if find(json.load(open(sys.argv[1]))) == 6 else 1)
EOF

log "restore the latest on 6 fresh ranks, each through its node's daemon"
run_cluster_ranks restore "${DATA[@]}" --restore latest --expect-step 5
run_cluster_ranks restore3 "${DATA[@]}" --restore 3 --expect-step 3

for k in 0 1 2; do
	[ "$(peers_up $k)" -eq 2 ] || fail "node $k no longer reports both other nodes up"
	[ "$(rejected $k)" = 0 ] || fail "node $k rejected peer messages in a healthy group"
	grep -q rejected "$T/ckptd-n$k.log" && fail "node $k logged a rejection in a healthy group"
done
for k in 2 1 0; do
	ckptd_stop n$k
	[ -e "$RENDEZVOUS/node-$k" ] && fail "node $k's rendezvous file outlived its daemon"
done
log "pass"
