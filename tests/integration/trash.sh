#!/bin/bash
# SPDX-License-Identifier: MIT
# Removed steps give their space back while ckptd runs: with --keep-last 2,
# ten saves leave nothing of the eight removed steps in <root>/.trash, and
# the partial files of failed saves do not pile up there either.
. "$(dirname "$0")/lib.sh"

ROOT=$T/root
ckptd_start d "$ROOT" --keep-last 2
OPTS=(--socket "$(sock d)" --job tr --seed 5 --tensors 4 --min-bytes 1M --max-bytes 2M --timeout-ms 30000)

# trash_settles: .trash must become (and stay) empty within 20 s.
trash_settles() {
	local i
	for i in $(seq 1 200); do
		[ -z "$(ls -A "$ROOT/.trash")" ] && return 0
		sleep 0.1
	done
	fail "$1: .trash still holds $(ls -A "$ROOT/.trash" | wc -l) entries" \
		"($(du -sk "$ROOT/.trash" | cut -f1) KiB): $(ls -A "$ROOT/.trash" | head -3 | tr '\n' ' ')"
}

run_ranks 2 save "${OPTS[@]}" --first 1 --every 1 --count 10 --wait
for i in $(seq 1 200); do
	[ "$(committed_steps "$ROOT/tr" | tr '\n' ' ')" = "9 10 " ] && break
	sleep 0.1
done
expect_committed "$ROOT/tr" "9 10"
for i in $(seq 1 200); do
	[ "$(grep -c 'retention: removed job=tr' "$T/ckptd-d.log")" -ge 8 ] && break
	sleep 0.1
done
[ "$(grep -c 'retention: removed job=tr' "$T/ckptd-d.log")" -ge 8 ] ||
	fail "fewer than 8 removals logged"
trash_settles "after ten saves with keep_last 2"
# The space is returned: the root holds about two steps, not ten.
step_kb=$(du -sk "$(stepdir "$ROOT/tr" 10)" | cut -f1)
root_kb=$(du -sk "$ROOT" | cut -f1)
[ "$root_kb" -le $((3 * step_kb + 256)) ] ||
	fail "root uses $root_kb KiB for two steps of about $step_kb KiB each"

# Failed saves: rank 1 dies by SIGKILL while copying steps 11 and 12;
# rank 0's files of those steps go to the trash, then away.
for s in 11 12; do
	rank_start ok$s "${OPTS[@]}" --rank 0 --world 2 --steps $s --wait --expect-fail $s
	okpid=$LAST_PID
	rank_start die$s "${OPTS[@]}" --rank 1 --world 2 --steps $s --wait --die-in-step $s --die-when copy
	wait "$LAST_PID"
	rank_wait "$okpid" ok$s
	for i in $(seq 1 200); do grep_log ckptd-d "removed job=tr step=$s reason=failed" && break; sleep 0.1; done
	grep_log ckptd-d "removed job=tr step=$s reason=failed" || fail "no removal of failed step $s logged"
	[ -e "$(stepdir "$ROOT/tr" $s)" ] && fail "failed step $s was not removed"
done
trash_settles "after two failed saves"
expect_committed "$ROOT/tr" "9 10"
ckptd_stop d
log "pass"
