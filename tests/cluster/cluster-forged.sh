#!/bin/bash
# SPDX-License-Identifier: MIT
# Forged and malformed peer messages, sent by ckpt-peer-forge from its own
# libfabric endpoint to the daemons of a 3-node group: garbage, a wrong or
# missing key, a bit flipped after signing, a field a type must not have,
# another group's cluster hash, a wrong receiver or sender epoch, votes
# whose sizes or index digest lie about the shard files on the root, and a
# COMMITTED from a node that is not the leader. Each one is logged as
# rejected and counted in ckpt_peer_rejected_total; the lying votes'
# step never gets a manifest and no rank hears it committed; the group
# stays whole and a normal step commits afterwards.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-cluster.sh"

: "${CKPT_PEER_FORGE:?CKPT_PEER_FORGE must name the ckpt-peer-forge binary}"

JOB=$ROOT/fg
DATA=(--job fg --seed 3 --tensors 5 --min-bytes 4K --max-bytes 2M --blob-bytes 99)

# forge [ckpt-peer-forge options...]: send one message (must be sent).
forge() {
	echo "+ forge $*" >>"$T/forge.log"
	"$CKPT_PEER_FORGE" --dir "$RENDEZVOUS" --nodes "$NODES" --cluster-id "$CLUSTER_ID" "$@" \
		>>"$T/forge.log" 2>&1 || fail "ckpt-peer-forge $* exited $? (see forge.log)"
}

rejected_lines() { grep -c rejected "$T/ckptd-n$1.log"; }

# expect_rejected NODE REASON WHAT [forge options without --to]: the message
# sent to NODE is counted under REASON ("any": under some reason) and its
# rejection logged, within 10 s.
expect_rejected() {
	local k=$1 reason=$2 what=$3 labels="" before total_before lines i got total
	shift 3
	[ "$reason" = any ] || labels="reason=$reason"
	# shellcheck disable=SC2086
	before=$(metric "$k" ckpt_peer_rejected_total $labels)
	total_before=$(rejected "$k")
	lines=$(rejected_lines "$k")
	forge --to "$k" "$@"
	for i in $(seq 1 50); do
		# shellcheck disable=SC2086
		got=$(metric "$k" ckpt_peer_rejected_total $labels)
		[ "${got%.*}" -gt "${before%.*}" ] 2>/dev/null && [ "$(rejected_lines "$k")" -gt "$lines" ] && break
		sleep 0.2
	done
	total=$(rejected "$k")
	if ! [ "${got%.*}" -gt "${before%.*}" ] 2>/dev/null; then
		metrics "$k" | grep '^ckpt_peer_rejected' >&2
		fail "$what: node $k did not count it under reason $reason ($before -> $got; all reasons $total_before -> $total)"
	fi
	[ "$(rejected_lines "$k")" -gt "$lines" ] || fail "$what: node $k did not log a rejection"
	log "$what: node $k rejected it: $(grep rejected "$T/ckptd-n$k.log" | tail -n 1)"
}

cluster_start
for k in 0 1 2; do
	[ "$(rejected $k)" = 0 ] || fail "node $k counts rejections before any forged message"
done

log "step 1 commits normally"
run_cluster_ranks s1 "${DATA[@]}" --steps 1 --wait
expect_committed "$JOB" 1
S1=$(stepdir "$JOB" 1)
e0=$(sed -n 's/^epoch=//p' "$RENDEZVOUS/node-0")
[ -n "$e0" ] || fail "no epoch= line in $RENDEZVOUS/node-0: $(cat "$RENDEZVOUS/node-0")"

log "messages that fail before they mean anything"
expect_rejected 0 malformed "garbage bytes" --from 1 --garbage 300
expect_rejected 0 malformed "a short garbage datagram" --from 1 --garbage 7
expect_rejected 0 auth "a heartbeat under another key" --from 1 --type heartbeat --wrong-key
expect_rejected 0 auth "a heartbeat without a tag" --from 1 --type heartbeat --no-key
expect_rejected 2 auth "a heartbeat with a bit flipped after signing" --from 1 --type heartbeat \
	--corrupt-byte 40
expect_rejected 1 auth "a HELLO under another key" --from 2 --type hello --wrong-key
expect_rejected 0 malformed "a heartbeat that names a job" --from 2 --type heartbeat --job fg
expect_rejected 0 malformed "a vote of rank 9 of 6" --from 1 --type vote --job fg --step 1 \
	--world 6 --rank 9 --index-bytes 4096 --shard-bytes 8192
expect_rejected 1 cluster "a heartbeat of another group" --from 0 --type heartbeat \
	--cluster-hash-of "other-$CLUSTER_ID"
expect_rejected 0 stale "a heartbeat to another incarnation of node 0" --from 1 --type heartbeat \
	--to-epoch "$(printf '%016x' $((0x$e0 ^ 0x5a5a)))"
expect_rejected 0 epoch "a heartbeat from another incarnation of node 2" --from 2 --type heartbeat \
	--from-epoch 0123456789abcdef
cluster_wait_whole 10

log "step 2: ranks of nodes 0 and 2 save it; node 1's votes are forged"
cluster_ranks s2 "0 1 4 5" "${DATA[@]}" --steps 2 --timeout-ms 20000
for r in 0 1 4 5; do
	for i in $(seq 1 300); do
		grep -q "rank $r step 2 accepted" "$T/s2-$r.log" 2>/dev/null && break
		sleep 0.1
	done
	grep -q "rank $r step 2 accepted" "$T/s2-$r.log" || fail "rank $r did not hand over step 2"
done
# Files for ranks 2 and 3 on the root that node 1 never wrote (step 1's):
# the forged votes describe them, but lie about their sizes or digest.
S2=$(stepdir "$JOB" 2)
mkdir -p "$S2"
for r in 2 3; do
	for x in shard index; do
		cp "$S1/$(printf "rank-%06d.$x" $r)" "$S2/$(printf "rank-%06d.$x" $r)"
	done
done
LIE=(--type vote --from 1 --job fg --step 2 --world 6)
expect_rejected 0 any "a vote whose index digest does not match the file on the root" "${LIE[@]}" \
	--rank 2 --index-file "$S2/rank-000002.index" --shard-file "$S2/rank-000002.shard" \
	--index-sha256 "$(printf 'ab%.0s' $(seq 1 32))"
expect_rejected 0 any "a vote whose shard size does not match the file on the root" "${LIE[@]}" \
	--rank 3 --index-file "$S2/rank-000003.index" \
	--shard-bytes $(($(stat -c %s "$S2/rank-000003.shard") + 4096))
no_manifest_for "$JOB" 2 3
expect_rejected 2 any "a COMMITTED from node 1, which is not the leader" --type committed --from 1 \
	--job fg --step 2 --world 6
expect_rejected 1 any "a COMMITTED from node 2, which is not the leader" --type committed --from 2 \
	--job fg --step 2 --world 6
no_manifest_for "$JOB" 2 2
for r in 0 1 4 5; do
	grep -q "step 2 committed" "$T/s2-$r.log" && fail "rank $r was told step 2 committed"
done
for r in 0 1 4 5; do
	kill -9 "${CRANK_PID[$r]}" 2>/dev/null
	wait "${CRANK_PID[$r]}" 2>/dev/null
done
[ -e "$S2/MANIFEST.json" ] && fail "step 2 was committed"
for k in 0 1 2; do
	ckptd_alive n$k || fail "node $k's daemon died"
done
cluster_wait_whole 10

log "step 3 commits normally"
run_cluster_ranks s3 "${DATA[@]}" --steps 3 --wait
expect_committed "$JOB" "1 3"
expect_latest "$JOB" 3
verify "$JOB" 3
run_cluster_ranks r3 "${DATA[@]}" --restore latest --expect-step 3
for k in 0 1 2; do
	log "node $k: $(rejected $k) peer messages rejected"
done
for k in 2 1 0; do
	ckptd_stop n$k
done
log "pass"
