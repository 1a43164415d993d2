#!/bin/bash
# SPDX-License-Identifier: MIT
# kill -9 of ckptd at random moments while three ranks save in a loop
# (--reconnect-loop: a step lost to the crash is saved again on a new
# connection). After each crash every committed step verifies;
# after each restart the job's takeover (when the ranks reconnect) removes
# every step directory without a manifest, and the ranks save again and commit.
. "$(dirname "$0")/../integration/lib.sh"

ITER=${CKPT_KILL_ITERATIONS:-22}
WORLD=3
ROOT=$T/root
JOB=$ROOT/kd
OPTS=(--socket "$(sock d)" --job kd --seed 23 --tensors 6 --min-bytes 4K --max-bytes 3M)
DOPTS=(--keep-last 4)

ckptd_start d "$ROOT" "${DOPTS[@]}"
pids=()
for r in $(seq 0 $((WORLD - 1))); do
	rank_start loop-$r "${OPTS[@]}" --rank $r --world $WORLD --reconnect-loop \
		--first 1 --every 1 --count 0 --sleep-between-ms 20 --wait \
		--stop-file "$T/stop" --timeout-ms 30000 --connect-timeout-ms 2000
	pids+=("$LAST_PID")
done

newest() { committed_steps "$JOB" | tail -n 1; }

# wait_commit_after N: a step newer than N commits within 30 s.
wait_commit_after() {
	local i n
	for i in $(seq 1 300); do
		n=$(newest)
		[ -n "$n" ] && [ "$n" -gt "$1" ] && return 0
		for p in "${pids[@]}"; do
			kill -0 "$p" 2>/dev/null || fail "a rank exited during the loop"
		done
		sleep 0.1
	done
	fail "no step newer than $1 committed within 30 s (iteration $it)"
}

last=0
for it in $(seq 1 "$ITER"); do
	wait_commit_after "$last"
	# A random moment: 0-400 ms into the next saves.
	sleep "0.$(printf '%03d' $((RANDOM % 400)))"
	ckptd_kill9 d
	kill -STOP "${pids[@]}"
	last=$(newest)
	# Every committed step is readable and verifies, and LATEST names one.
	n=$(verify_all "$JOB")
	if [ -e "$JOB/LATEST" ]; then
		l=$((10#$(tr -d ' \n' <"$JOB/LATEST")))
		[ -f "$(stepdir "$JOB" "$l")/MANIFEST.json" ] || fail "LATEST names step $l, which is not committed"
	fi
	left=$(uncommitted_steps "$JOB" | wc -l)
	lines=$(wc -l <"$T/ckptd-d.log")
	ckptd_start d "$ROOT" "${DOPTS[@]}"
	# The job is recovered when the ranks come back (its takeover, before
	# any of them is connected): every step directory without a manifest
	# that the crash left is removed then.
	kill -CONT "${pids[@]}"
	rec=
	for i in $(seq 1 100); do
		rec=$(tail -n +"$((lines + 1))" "$T/ckptd-d.log" | grep -m1 'recovery.*job=kd committed=')
		[ -n "$rec" ] && break
		sleep 0.1
	done
	[ -n "$rec" ] || fail "after restart $it, job kd was not taken over within 10 s"
	removed=$(sed -n 's/.*removed=\([0-9]*\).*/\1/p' <<<"$rec")
	[ "$removed" = "$left" ] ||
		fail "after restart $it, $left step dirs without MANIFEST.json were left, $removed removed: $rec"
	log "iteration $it: newest committed $last, $n verified, $left uncommitted removed"
done
wait_commit_after "$last"
touch "$T/stop"
for r in $(seq 0 $((WORLD - 1))); do
	rank_wait "${pids[$r]}" loop-$r
done
# Retention runs while ckptd does: verify with it stopped, then restore.
ckptd_stop d
verify_all "$JOB" >/dev/null
ckptd_start d "$ROOT" "${DOPTS[@]}"
run_ranks $WORLD restore "${OPTS[@]}" --restore latest --expect-step "$(newest)"
ckptd_stop d
log "pass"
