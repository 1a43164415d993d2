#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Power cuts under ckptd: its root is on ckpt-powerfs, which keeps only what
# was fsync'ed. Each cycle starts ckptd on the root (start-up recovery), checks
# a restore through it, lets two ranks save steps back to back (--wait: each
# "step N committed" line in their logs is an acknowledgement), then cuts the
# power at a random point: a timed cut, an armed cut (the N-th mutating file
# operation: lands inside shard writes, commits, LATEST, retention), or a cut
# armed before ckptd starts (lands in start-up recovery or the first save).
# Then kill -9 of everything, revert to the durable state, and check:
#   - every committed step (MANIFEST.json present) verifies (ckpt-inspect
#     --verify): nothing broken is visible as committed;
#   - every step a rank was told is COMMITTED is still committed, unless
#     retention may have removed it (keep_last newer committed steps exist);
#   - LATEST, when present, names a committed step;
#   - after the restart a restore of "latest" by both ranks gets the newest
#     committed step, byte for byte.
#
# Options (also from the environment: PC_CUTS, PC_SEED, PC_KEEP_LAST, PC_MODE):
#   --cuts N            cuts to make (default 200)
#   --seed S            RNG seed (default: random; printed)
#   --keep-last K       ckptd's keep_last (default 2)
#   --max-bytes B       largest tensor per rank (default 192K)
#   --nodes 2           a 2-daemon group (one rank per node, partner memory):
#                       the commit goes through the group's leader, and a
#                       third kind of cycle restores a replaced node's rank
#                       from its partner's memory with a cut during it
#   --per-process-dirsync
#                       ckpt-powerfs's per-client model: a directory fsync
#                       makes durable only the fsyncing process's changes
#                       (each daemon of a group is a node of a parallel file
#                       system): every daemon must make durable what it
#                       created before it votes
#   --negative MODE     negative control: run ckpt-powerfs with one fsync of
#                       the commit path ignored and require that the suite
#                       catches it within --cuts cuts (default 20). MODE:
#                       stepdir  (fsync of step-* directories: MANIFEST.json's
#                                 rename and the shard names never durable)
#                       manifest (fsync of MANIFEST.json.tmp: its bytes)
#                       latest   (fsync of LATEST.tmp: its bytes)
#                       shard    (fsync of *.shard: the tensor bytes, which
#                                 ckptd syncs through io_uring)
# Prints the counts at the end: cuts, acknowledged commits, checked steps,
# lost, corrupt visible.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-powercut.sh"

CUTS=${PC_CUTS:-}
SEED=${PC_SEED:-$(( $(date +%s%N) % 1000000007 ))}
KEEP=${PC_KEEP_LAST:-2}
MAXB=192K
NODES=1
PER_PROCESS=
NEG=${PC_MODE:-}
while [ $# -gt 0 ]; do
	case $1 in
	--cuts) CUTS=$2; shift 2 ;;
	--seed) SEED=$2; shift 2 ;;
	--keep-last) KEEP=$2; shift 2 ;;
	--max-bytes) MAXB=$2; shift 2 ;;
	--nodes) NODES=$2; shift 2 ;;
	--per-process-dirsync) PER_PROCESS=1; shift ;;
	--negative) NEG=$2; shift 2 ;;
	*) echo "usage: $0 [--cuts N] [--seed S] [--keep-last K] [--max-bytes B] [--nodes 1|2] [--per-process-dirsync] [--negative stepdir|manifest|latest|shard]" >&2; exit 2 ;;
	esac
done
[ -n "$CUTS" ] || { [ -n "$NEG" ] && CUTS=20 || CUTS=200; }
RANDOM=$SEED
case $NODES in 1|2) ;; *) fail "--nodes must be 1 or 2" ;; esac
log "seed $SEED (rerun: $0 --seed $SEED --cuts $CUTS --nodes $NODES${PER_PROCESS:+ --per-process-dirsync}${NEG:+ --negative $NEG}), keep_last $KEEP, $NODES daemon(s)"

PFS_OPTS=()
case $NEG in
'') ;;
stepdir) PFS_OPTS=(--ignore-fsyncdir-of 'step-*') ;;
manifest) PFS_OPTS=(--ignore-fsync-of 'MANIFEST.json.tmp') ;;
latest) PFS_OPTS=(--ignore-fsync-of 'LATEST.tmp') ;;
shard) PFS_OPTS=(--ignore-fsync-of '*.shard') ;;
*) fail "unknown --negative mode '$NEG'" ;;
esac
[ -n "$PER_PROCESS" ] && PFS_OPTS+=(--per-process-dirsync) &&
	log "per-process directory sync: each daemon's own directory changes need its own fsync"
[ -n "$NEG" ] && log "NEGATIVE CONTROL: ckpt-powerfs ${PFS_OPTS[*]}: the suite must catch it"

pfs_start fs "${PFS_OPTS[@]}"
ROOT=$T/fs/root
JOB=pc
JOBDIR=$ROOT/$JOB
mkdir "$ROOT"
fsync_paths "$T/fs"
pfs_ctl fs sync >/dev/null
WORLD=2
RANK_OPTS=(--job "$JOB" --seed 11 --tensors 3 --min-bytes 4K --max-bytes "$MAXB" --timeout-ms 20000)

declare -A ACKED=()    # step -> 1: a rank was told COMMITTED, not yet retired
n_cuts=0 n_acked=0 n_checked=0 n_lost=0 n_corrupt=0 n_latest_bad=0 n_retired=0
n_restores=0 n_restore_bad=0 n_startup=0 n_armed=0 n_timed=0 n_partner=0 n_partner_restores=0
CLUSTER_ID="pc-$$-$RANDOM"
if [ "$NODES" -eq 1 ]; then DAEMONS=(d); else DAEMONS=(n0 n1); fi
# rank_sock R: the socket of rank R's daemon (one rank per node in a group).
rank_sock() { if [ "$NODES" -eq 1 ]; then echo "$T/d.sock"; else echo "$T/n$1.sock"; fi; }
next_step=1
declare -a PIDS=()
problems=()

# problem TEXT: a broken guarantee. Fatal, except in a negative control.
problem() {
	problems+=("cut $n_cuts: $*")
	log "VIOLATION after cut $n_cuts: $*"
	[ -n "$NEG" ] || fail "$* (seed $SEED, cut $n_cuts)"
}

is_cut() { [ "$(pfs_stat fs state)" = cut ]; }

# start_daemon NAME: like ckptd_start, but a start-up that dies of the power
# cut is an outcome, not a failure. This start's log is $T/cur-NAME.log
# (appended to ckptd-NAME.log when it is killed). Returns 1 when the power
# is out.
start_daemon() {
	local name=$1 sock=$T/$1.sock i
	local -a opts=()
	rm -f "$sock"
	if [ "$NODES" -gt 1 ]; then
		opts=(--nodes "$NODES" --node-index "${name#n}" --cluster-id "$CLUSTER_ID"
			--fabric-provider 'tcp;ofi_rxm' --fabric-address 127.0.0.1
			--peer-timeout-ms 2000 --partner-memory 64MiB --partners 1)
	fi
	echo "=== start $(date +%T.%3N) cycle $n_cuts ===" >"$T/cur-$name.log"
	"$CKPTD" --config '' --root "$ROOT" --socket "$sock" --log-level debug \
		--keep-last "$KEEP" --staging-bytes 64MiB --workers 2 \
		--metrics-listen 127.0.0.1:0 "${opts[@]}" >>"$T/cur-$name.log" 2>&1 &
	CKPTD_PID[$name]=$!
	for i in $(seq 1 400); do
		[ -S "$sock" ] && return 0
		if ! kill -0 "${CKPTD_PID[$name]}" 2>/dev/null; then
			wait "${CKPTD_PID[$name]}"
			local rc=$?
			unset "CKPTD_PID[$name]"
			is_cut && return 1
			fail "ckptd $name exited with status $rc at start-up with the power on"
		fi
		sleep 0.025
	done
	is_cut && return 1
	fail "ckptd $name: socket did not appear within 10 s"
}

# group_whole NAME...: each named daemon logged the other node up.
group_whole() {
	local i name other ok
	[ "$NODES" -gt 1 ] || return 0
	for i in $(seq 1 400); do
		ok=1
		for name in "$@"; do
			other=$(( 1 - ${name#n} ))
			grep -q "peer up.* node=$other " "$T/cur-$name.log" || ok=0
		done
		[ "$ok" = 1 ] && return 0
		is_cut && return 1
		sleep 0.025
	done
	is_cut && return 1
	fail "the group was not whole within 10 s"
}

start_ckptd() {
	local name
	for name in "${DAEMONS[@]}"; do
		start_daemon "$name" || return 1
	done
	group_whole "${DAEMONS[@]}"
}

# kill_daemon NAME: kill -9, keep its log.
kill_daemon() {
	local name=$1
	if [ -n "${CKPTD_PID[$name]:-}" ]; then
		kill -9 "${CKPTD_PID[$name]}" 2>/dev/null
		{ wait "${CKPTD_PID[$name]}"; } 2>/dev/null
		unset "CKPTD_PID[$name]"
	fi
	if [ -f "$T/cur-$name.log" ]; then
		cat "$T/cur-$name.log" >>"$T/ckptd-$name.log"
		grep -c "restored job=$JOB .* tier=partner" "$T/cur-$name.log" >>"$T/partner-restores" 2>/dev/null
		rm -f "$T/cur-$name.log"
	fi
}

kill_ranks() {
	local p
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
	for p in "${PIDS[@]}"; do { wait "$p"; } 2>/dev/null; done
	PIDS=()
}

# kill_all: after the cut, so the order does not matter; one at a time, so
# that bash does not report a job killed behind our back.
kill_all() {
	local name
	kill_ranks
	for name in "${DAEMONS[@]}"; do kill_daemon "$name"; done
}

# start_saves: every rank saves steps back to back from next_step, waiting
# for each outcome; logs save-R.log.
start_saves() {
	local r
	for r in $(seq 0 $((WORLD - 1))); do
		"$CKPT_TEST_RANK" --socket "$(rank_sock "$r")" "${RANK_OPTS[@]}" --rank "$r" --world $WORLD \
			--first "$next_step" --every 1 --count 0 --wait >>"$T/save-$r.log" 2>&1 &
		PIDS+=("$!")
	done
}

# After the ranks died: let a commit in flight end (the newest committed step
# stops moving), then give node 0 a moment to hold rank 1's partner copy of
# it. Neither is required: without the copy the restore reads the root.
settle_and_wait_partner_copy() {
	local prev= cur i
	for i in $(seq 1 40); do
		is_cut && return 0
		cur=$(newest_committed)
		[ -n "$cur" ] && [ "$cur" = "$prev" ] && break
		prev=$cur
		sleep 0.1
	done
	[ -n "$cur" ] || return 0
	for i in $(seq 1 40); do
		grep -q "partner copy received job=$JOB step=$cur rank=1 " "$T/cur-n0.log" && return 0
		sleep 0.05
	done
}

# rand_sleep MAX_MS
rand_sleep() { sleep "$(printf '0.%03d' $((RANDOM % $1)))"; }

newest_committed() { committed_steps "$JOBDIR" | tail -n 1; }

# check_acked WHEN "COMMITTED STEPS": every acknowledged step is committed,
# or keep_last newer committed steps exist (retention may have removed it:
# it is then no longer followed).
check_acked() {
	local when=$1 steps=$2 s c newer
	local -a gone=() retired=()
	for s in "${!ACKED[@]}"; do
		if [ -f "$(stepdir "$JOBDIR" "$s")/MANIFEST.json" ]; then
			continue
		fi
		newer=0
		for c in $steps; do [ "$c" -gt "$s" ] && newer=$((newer + 1)); done
		if [ "$KEEP" -gt 0 ] && [ "$newer" -ge "$KEEP" ]; then
			retired+=("$s")
		else
			gone+=("$s:$newer")
		fi
	done
	# With ckptd running, an armed cut may fire under our reads (its
	# background work mutates): then what we read means nothing.
	is_cut && return 0
	for s in "${retired[@]}"; do
		n_retired=$((n_retired + 1))
		unset "ACKED[$s]"
	done
	for s in "${gone[@]}"; do
		n_lost=$((n_lost + 1))
		problem "step ${s%:*} was acknowledged COMMITTED and is gone $when (${s#*:} newer committed steps: $steps)"
		unset "ACKED[${s%:*}]"
	done
}

# check_durable: the on-disk state right after the revert.
check_durable() {
	local steps s newer out latest
	steps=$(committed_steps "$JOBDIR" 2>/dev/null | tr '\n' ' ')
	# Steps not verified before, and every 10th cut all of them (a long
	# run with keep_last 0 has thousands).
	local -a fresh=()
	for s in $steps; do
		[ -z "${VERIFIED[$s]:-}" ] || [ $((n_cuts % 10)) -eq 0 ] && fresh+=("$s")
	done
	if [ ${#fresh[@]} -gt 0 ]; then
		if [ ${#fresh[@]} -gt 4 ]; then
			out=$(timeout 300 "$CKPT_INSPECT" --verify --quiet --no-progress "$JOBDIR" 2>&1) || fresh_bad=1
		else
			fresh_bad=1
		fi
		if [ "${fresh_bad:-0}" = 1 ]; then
			for s in "${fresh[@]}"; do
				if ! out=$(timeout 60 "$CKPT_INSPECT" --verify --quiet --no-progress "$(stepdir "$JOBDIR" "$s")" 2>&1); then
					n_corrupt=$((n_corrupt + 1))
					problem "step $s is committed but does not verify: $(echo "$out" | head -n 3 | tr '\n' ' ')"
				fi
			done
		fi
		fresh_bad=0
		for s in "${fresh[@]}"; do
			n_checked=$((n_checked + 1))
			VERIFIED[$s]=1
		done
	fi
	check_acked "after the revert" "$steps"
	if [ -e "$JOBDIR/LATEST" ]; then
		latest=$(tr -d ' \n' <"$JOBDIR/LATEST" 2>/dev/null)
		if ! [[ $latest =~ ^[0-9]+$ ]] || ! [ -f "$(stepdir "$JOBDIR" $((10#$latest)))/MANIFEST.json" ]; then
			n_latest_bad=$((n_latest_bad + 1))
			problem "LATEST says '$latest', not a committed step (committed: $steps)"
		fi
	fi
}

# check_restore: both ranks restore "latest" through the restarted ckptd and
# get the newest committed step, bytes checked. 1 if the power went out.
check_restore() {
	local want r rc=0
	local -a rp=()
	want=$(newest_committed)
	[ -n "$want" ] || return 0
	for r in $(seq 0 $((WORLD - 1))); do
		"$CKPT_TEST_RANK" --socket "$(rank_sock "$r")" "${RANK_OPTS[@]}" --rank "$r" --world $WORLD \
			--restore latest --expect-step "$want" >"$T/restore-$r.log" 2>&1 &
		rp+=("$!")
		PIDS+=("$!")
	done
	[ -n "${CUT_DURING_RESTORE:-}" ] && { rand_sleep "$CUT_DURING_RESTORE"; pfs_ctl fs cut >/dev/null; }
	for r in $(seq 0 $((WORLD - 1))); do
		wait "${rp[$r]}" || rc=1
	done
	PIDS=()
	is_cut && return 1
	n_restores=$((n_restores + 1))
	if [ "$rc" -ne 0 ]; then
		n_restore_bad=$((n_restore_bad + 1))
		problem "restore of latest (newest committed step $want) failed: $(cat "$T"/restore-*.log | grep -v '^rank [0-9] restored' | head -n 4 | tr '\n' ' ')"
	fi
	return 0
}

collect_acks() {
	local r s max=0
	for r in $(seq 0 $((WORLD - 1))); do
		[ -f "$T/save-$r.log" ] || continue
		for s in $(sed -n 's/^rank [0-9]* step \([0-9]*\) committed.*/\1/p' "$T/save-$r.log"); do
			if [ -z "${ACKED[$s]:-}" ] && [ -z "${SEEN[$s]:-}" ]; then
				n_acked=$((n_acked + 1))
				ACKED[$s]=1
				SEEN[$s]=1
			fi
		done
		s=$(sed -n 's/^rank [0-9]* step \([0-9]*\) .*/\1/p' "$T/save-$r.log" | sort -n | tail -n 1)
		[ -n "$s" ] && [ "$s" -gt "$max" ] && max=$s
	done
	# The next cycle saves above every step tried (one may have been begun
	# without a line) and above every directory on the root.
	[ $((max + 2)) -gt "$next_step" ] && next_step=$((max + 2))
	for s in $(ls "$JOBDIR" 2>/dev/null | sed -n 's/^step-0*\([0-9][0-9]*\)$/\1/p'); do
		[ $((s + 1)) -gt "$next_step" ] && next_step=$((s + 1))
	done
	rm -f "$T"/save-*.log
}
declare -A SEEN=()
declare -A VERIFIED=() # step -> 1: verified after an earlier cut
declare -A CUT_AT=()   # the file operation a cut landed on -> count
cut_points() {
	local k
	for k in "${!CUT_AT[@]}"; do echo "$k ${CUT_AT[$k]}"; done | sort -k2,2nr | tr '\n' ',' | sed 's/,$//; s/,/, /g'
}

t0=$(date +%s)
while [ "$n_cuts" -lt "$CUTS" ]; do
	mode=$((RANDOM % 100))
	# A group: 30% partner restores, the rest split as for one daemon.
	if [ "$NODES" -gt 1 ] && [ $((RANDOM % 100)) -lt 30 ]; then
		kind=partner
		n_partner=$((n_partner + 1))
	elif [ "$mode" -lt 15 ]; then
		# Into start-up recovery (or the first operations after it).
		pfs_ctl fs arm $((RANDOM % 40 + 1)) >/dev/null
		n_startup=$((n_startup + 1))
		kind=startup
	elif [ "$mode" -lt 65 ]; then
		kind=armed
		n_armed=$((n_armed + 1))
	else
		kind=timed
		n_timed=$((n_timed + 1))
	fi
	if [ "$kind" = partner ]; then
		# Node 1 is lost after some commits and replaced; its rank
		# restores from node 0's memory while the power fails.
		if start_ckptd && check_restore; then
			start_saves
			sleep "1.$((RANDOM % 10))"
			kill_ranks
			settle_and_wait_partner_copy
			kill_daemon n1
			if ! is_cut && start_daemon n1 && group_whole n0 n1; then
				CUT_DURING_RESTORE=400 check_restore || true
			fi
		fi
	elif start_ckptd && check_restore; then
		# Start-up recovery (and the job's takeover by the restore) keep
		# every acknowledged step.
		check_acked "after ckptd's start-up and a restore" "$(committed_steps "$JOBDIR" 2>/dev/null | tr '\n' ' ')"
		start_saves
		case $kind in
		armed) pfs_ctl fs arm $((RANDOM % 400 + 1)) >/dev/null ;;
		timed) rand_sleep 1200; pfs_ctl fs cut >/dev/null ;;
		esac
	fi
	for i in $(seq 1 200); do
		is_cut && break
		sleep 0.025
	done
	is_cut || pfs_ctl fs cut >/dev/null
	n_cuts=$((n_cuts + 1))
	at=$(pfs_stat fs cut_at)
	CUT_AT[$at]=$(( ${CUT_AT[$at]:-0} + 1 ))
	kill_all
	collect_acks
	pfs_ctl fs revert >/dev/null
	check_durable
	if [ -n "$NEG" ] && [ ${#problems[@]} -gt 0 ]; then
		break
	fi
	if [ $((n_cuts % 20)) -eq 0 ]; then
		log "$n_cuts cuts ($n_startup start-up, $n_armed armed, $n_timed timed, $n_partner partner), $n_acked acknowledged commits, $n_checked checked, lost $n_lost, corrupt visible $n_corrupt, $(( $(date +%s) - t0 )) s"
	fi
done

# A last start on the durable state: recovery, then the restore check.
if [ -z "$NEG" ] || [ ${#problems[@]} -eq 0 ]; then
	start_ckptd || fail "the power went out with nothing armed"
	check_restore || true
	for name in "${DAEMONS[@]}"; do ckptd_stop "$name"; done
fi
for name in "${DAEMONS[@]}"; do
	[ -f "$T/cur-$name.log" ] && cat "$T/cur-$name.log" >>"$T/ckptd-$name.log"
	grep -c "restored job=$JOB .* tier=partner" "$T/cur-$name.log" >>"$T/partner-restores" 2>/dev/null
done
n_partner_restores=$(awk '{ s += $1 } END { print s + 0 }' "$T/partner-restores" 2>/dev/null || echo 0)
pfs_stop fs

summary="daemons $NODES, cuts $n_cuts ($n_startup start-up, $n_armed armed, $n_timed timed, $n_partner partner restore), acknowledged commits $n_acked, checked steps $n_checked, retired by retention $n_retired, restores $n_restores ($n_partner_restores rank restores from partner memory), lost $n_lost, corrupt visible $n_corrupt, bad LATEST $n_latest_bad, bad restores $n_restore_bad, $(( $(date +%s) - t0 )) s, seed $SEED"
if [ -n "$NEG" ]; then
	[ ${#problems[@]} -gt 0 ] ||
		fail "NEGATIVE CONTROL NOT CAUGHT: with ${PFS_OPTS[*]} $n_cuts cuts found nothing ($summary)"
	log "NEGATIVE CONTROL CAUGHT ($NEG: ${PFS_OPTS[*]}) after $n_cuts cut(s): ${problems[0]}"
	log "powercut negative: $summary"
	exit 0
fi
log "powercut: $summary"
log "cut points (operation the cut landed on; after-OP: a timed cut after OP): $(cut_points)"
[ "$n_acked" -gt 0 ] || fail "no commit was acknowledged in $n_cuts cuts: the suite tested nothing"
log "pass"
