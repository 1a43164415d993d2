#!/bin/bash
# SPDX-License-Identifier: MIT
# Forged and malformed peer messages, sent by ckpt-peer-forge from its own
# libfabric endpoint to the daemons of a 3-node group. Garbage, a wrong or
# missing key, a bit flipped after signing, a field a type must not have,
# another group's cluster hash, a wrong receiver or sender epoch, a second
# vote for a rank that already voted, a COMMITTED or ABORT from a node that
# does not lead: each is logged as rejected and counted under its reason in
# ckpt_peer_rejected_total (a flood of garbage: every message counted, the
# log rate-limited). Votes that complete a step but lie (an index
# digest or a shard size that the files on the root do not bear out, an old
# shard replayed) make the leader refuse the commit: no manifest, and the
# other ranks are told the step failed. The group stays whole throughout and
# a normal step commits afterwards.
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

# What a rejection's log line matches (a test may widen it for one case).
REJECT_RE=rejected
rejected_lines() { grep -Ec "$REJECT_RE" "$T/ckptd-n$1.log"; }

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
	log "$what: node $k rejected it: $(grep -E "$REJECT_RE" "$T/ckptd-n$k.log" | tail -n 1)"
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

log "a flood of 300 garbage messages: every one counted, the log rate-limited"
before=$(metric 0 ckpt_peer_rejected_total reason=malformed)
lines=$(rejected_lines 0)
forge --to 0 --from 1 --garbage 100 --count 300
for i in $(seq 1 100); do
	got=$(metric 0 ckpt_peer_rejected_total reason=malformed)
	[ "$((${got%.*} - ${before%.*}))" -ge 300 ] 2>/dev/null && break
	sleep 0.2
done
[ "$((${got%.*} - ${before%.*}))" -eq 300 ] 2>/dev/null ||
	fail "node 0 counted $((${got%.*} - ${before%.*})) of 300 garbage messages as malformed"
logged=$(($(rejected_lines 0) - lines))
log "node 0 logged $logged lines for 300 rejections"
[ "$logged" -ge 1 ] && [ "$logged" -lt 100 ] || fail "node 0 logged $logged lines for a flood of 300"
cluster_wait_whole 10

# wait_accepted STEP "RANKS": those ranks (log sSTEP-R) handed STEP over.
wait_accepted() {
	local r i
	for r in $2; do
		for i in $(seq 1 300); do
			grep -q "rank $r step $1 accepted" "$T/s$1-$r.log" 2>/dev/null && break
			sleep 0.1
		done
		grep -q "rank $r step $1 accepted" "$T/s$1-$r.log" || fail "rank $r did not hand over step $1"
	done
}

# replay_files STEP RANK: rank RANK's step-1 shard and index, put into STEP's
# directory on the root (where node 1 never wrote them).
replay_files() {
	local d x
	d=$(stepdir "$JOB" "$1")
	mkdir -p "$d"
	for x in shard index; do
		cp "$S1/$(printf "rank-%06d.$x" "$2")" "$d/$(printf "rank-%06d.$x" "$2")"
	done
}

# expect_step_failed STEP "RANKS" WHY: the ranks (started with --expect-fail
# STEP) were told STEP failed, the leader logged why, no manifest exists.
expect_step_failed() {
	cluster_wait "s$1" "$2"
	grep -q "step abandoned job=fg step=$1 .*$3" "$T/ckptd-n0.log" ||
		fail "the leader did not abandon step $1 because of: $3"
	[ -e "$(stepdir "$JOB" "$1")/MANIFEST.json" ] && fail "step $1 was committed"
	log "step $1 not committed: $(grep -o "step abandoned job=fg step=$1 .*" "$T/ckptd-n0.log" | head -n 1)"
}

VOTE=(--type vote --job fg --world 6)

log "step 2: every rank's vote is in, but node 1's were forged: one lies about its index digest"
cluster_ranks s2 "0 1 4 5" "${DATA[@]}" --steps 2 --expect-fail 2 --timeout-ms 30000
wait_accepted 2 "0 1 4 5"
replay_files 2 2
replay_files 2 3
S2=$(stepdir "$JOB" 2)
forge --to 0 --from 1 "${VOTE[@]}" --step 2 --rank 3 --index-file "$S2/rank-000003.index" \
	--shard-file "$S2/rank-000003.shard"
forge --to 0 --from 1 "${VOTE[@]}" --step 2 --rank 2 --index-file "$S2/rank-000002.index" \
	--shard-file "$S2/rank-000002.shard" --index-sha256 "$(printf 'ab%.0s' $(seq 1 32))"
expect_step_failed 2 "0 1 4 5" "commit failed: rank [23]"

log "step 3: node 1's rank 2 votes for real; rank 3's forged vote replays an old shard and lies about its size"
cluster_ranks s3 "0 1 2 4 5" "${DATA[@]}" --steps 3 --expect-fail 3 --timeout-ms 30000
wait_accepted 3 "0 1 2 4 5"
replay_files 3 3
S3=$(stepdir "$JOB" 3)
forge --to 0 --from 1 "${VOTE[@]}" --step 3 --rank 3 --index-file "$S3/rank-000003.index" \
	--shard-bytes $(($(stat -c %s "$S3/rank-000003.shard") + 4096))
expect_step_failed 3 "0 1 2 4 5" "commit failed: rank 3"

log "step 4: a forged second vote for a rank that already voted"
cluster_ranks s4 "0 1 2 4 5" "${DATA[@]}" --steps 4 --expect-fail 4 --timeout-ms 30000
wait_accepted 4 "0 1 2 4 5"
for i in $(seq 1 100); do
	grep -q "durable job=fg step=4 rank=2" "$T/ckptd-n1.log" && break
	sleep 0.1
done
sleep 0.5 # node 1's vote reaches the leader
# The leader counts it as a conflict and abandons the step, saying why.
REJECT_RE="rejected|voted twice"
expect_rejected 0 conflict "a second vote for rank 2, from node 2" "${VOTE[@]}" --from 2 --step 4 \
	--rank 2 --index-file "$S1/rank-000002.index" --shard-file "$S1/rank-000002.shard"
REJECT_RE=rejected
expect_step_failed 4 "0 1 2 4 5" "voted twice"

log "step 5: COMMITTED and ABORT from nodes that do not lead"
cluster_ranks s5 "0 1 4 5" "${DATA[@]}" --steps 5 --timeout-ms 15000
wait_accepted 5 "0 1 4 5"
expect_rejected 2 conflict "a COMMITTED from node 1" --type committed --from 1 --job fg --step 5 --world 6
expect_rejected 1 conflict "a COMMITTED from node 2" --type committed --from 2 --job fg --step 5 --world 6
expect_rejected 2 conflict "an ABORT from node 1" --type abort --from 1 --job fg --step 5 --world 6 \
	--status -125 --reason forged
no_manifest_for "$JOB" 5 2
for r in 0 1 4 5; do
	grep -Eq "step 5 (committed|FAILED)" "$T/s5-$r.log" &&
		fail "rank $r was told an outcome of step 5: $(grep 'step 5' "$T/s5-$r.log")"
done
for r in 0 1 4 5; do
	kill -9 "${CRANK_PID[$r]}" 2>/dev/null
	wait "${CRANK_PID[$r]}" 2>/dev/null
done
for k in 0 1 2; do
	ckptd_alive n$k || fail "node $k's daemon died"
done
cluster_wait_whole 10

log "step 6 commits normally"
run_cluster_ranks s6 "${DATA[@]}" --steps 6 --wait
expect_committed "$JOB" "1 6"
expect_latest "$JOB" 6
verify "$JOB" 6
run_cluster_ranks r6 "${DATA[@]}" --restore latest --expect-step 6
for k in 0 1 2; do
	log "node $k: $(rejected $k) peer messages rejected"
done
for k in 2 1 0; do
	ckptd_stop n$k
done
log "pass"
