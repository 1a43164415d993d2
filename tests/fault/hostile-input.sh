#!/bin/bash
# SPDX-License-Identifier: MIT
# Malformed and hostile protocol input (ckpt-raw-client) while a
# well-behaved job saves on the same ckptd: each bad connection gets ERROR
# and/or is closed, the good ranks still commit every step, committed steps
# still verify, and nothing is created outside the checkpoint root.
. "$(dirname "$0")/../integration/lib.sh"
: "${CKPT_RAW_CLIENT:?CKPT_RAW_CLIENT must name ckpt-raw-client}"

ROOT=$T/root
JOB=$ROOT/good
OPTS=(--socket "$(sock d)" --job good --seed 17 --tensors 5 --min-bytes 4K --max-bytes 4M)
ckptd_start d "$ROOT" --keep-last 0
run_ranks 2 first "${OPTS[@]}" --steps 10,20 --wait
sleep 0.5
# Connection resources only (sockets, arenas); job directory fds are state.
conn_fds() { ls -l /proc/"${CKPTD_PID[d]}"/fd | grep -Ec 'socket:|memfd:'; }
fds_before=$(conn_fds)

rank_start good-0 "${OPTS[@]}" --rank 0 --world 2 --first 30 --every 10 --count 40 --sleep-between-ms 50 --wait
p0=$LAST_PID
rank_start good-1 "${OPTS[@]}" --rank 1 --world 2 --first 30 --every 10 --count 40 --sleep-between-ms 50 --wait
p1=$LAST_PID

timeout 200 "$CKPT_RAW_CLIENT" --socket "$(sock d)" --root "$ROOT" >"$T/raw-client.log" 2>&1
rc=$?
ckptd_alive d || fail "ckptd died under hostile input"
rank_wait $p0 good-0
rank_wait $p1 good-1
cat "$T/raw-client.log"
# Every refused connection, and every fd passed on one, must be closed.
sleep 0.5
fds_after=$(conn_fds)
[ "$fds_after" -le "$fds_before" ] ||
	fail "ckptd holds $fds_after socket/memfd fds after the hostile clients left, $fds_before before (fd leak)"
[ "$rc" -eq 0 ] || fail "ckpt-raw-client: some bad input was not refused (exit $rc)"

expect_committed "$JOB" "$(seq -s ' ' 10 10 420)"
verify_all "$JOB" >/dev/null
run_ranks 2 restore "${OPTS[@]}" --restore 20 --expect-step 20

# Hostile names must not have created anything outside the root, and only
# valid job names inside it.
for f in "$T"/*; do
	case "${f##*/}" in
	root|*.sock|*.log|*.metrics-port) ;;  # the harness's own files
	*) fail "unexpected file outside the root: $f" ;;
	esac
done
for f in "$ROOT"/*; do
	case "${f##*/}" in
	good|raw-*) ;;
	*) fail "unexpected entry in the root: '${f##*/}'" ;;
	esac
done
# A refused HELLO leaves no trace of its job.
for f in "$ROOT"/raw-*-huge "$ROOT"/raw-*-wrap; do
	[ -e "$f" ] && fail "a HELLO refused for its size created job directory ${f##*/}"
done
[ -z "$(find "$ROOT" -name 'passwd' -o -name '..*' -o -name '*[[:cntrl:]]*')" ] ||
	fail "hostile names reached the file system: $(find "$ROOT" -name 'passwd' -o -name '..*' -o -name '*[[:cntrl:]]*')"
ckptd_stop d
log "pass"
