#!/bin/bash
# SPDX-License-Identifier: MIT
# A job owned by one ckptd is refused by a second one on the same root: a
# rank's HELLO gets an ERROR that names the holder (host, pid), the second
# daemon logs it, and the owner's saves keep committing.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/owner-lib.sh"
: "${CKPT_RAW_CLIENT:?CKPT_RAW_CLIENT must name the ckpt-raw-client binary}"

start_inflight
APID=${CKPTD_PID[a]}
ckptd_start b "$ROOT" --keep-last 1
out=$("$CKPT_RAW_CLIENT" --socket "$(sock b)" --hello ja) ||
	fail "b accepted a HELLO for job ja, which a owns: $out"
log "b answered: $out"
case "$out" in
*"pid $APID"*"$(hostname)"* | *"$(hostname)"*"pid $APID"*) ;;
*) fail "b's refusal does not name the holder (host $(hostname), pid $APID): $out" ;;
esac
grep -q "HELLO refused.*job=ja" "$T/ckptd-b.log" || fail "b did not log the refusal"
# The lock file names its holder.
grep -qx "pid=$APID" "$JOB/OWNER" || fail "$JOB/OWNER does not name a (pid $APID): $(cat "$JOB/OWNER" 2>&1)"

# ckpt-restore does not write into a job a daemon owns.
: "${CKPT_RESTORE:?CKPT_RESTORE must name the ckpt-restore binary}"
mkdir -p "$T/src"
cp -r "$JOB" "$T/src/ja"
rm -rf "$T/src/ja/$(basename "$(stepdir "$JOB" 4)")"
"$CKPT_RESTORE" --no-progress --force --step 2 "$T/src/ja" "$ROOT" >"$T/restore.out" 2>&1
rc=$?
[ "$rc" = 4 ] || fail "ckpt-restore into job ja, owned by a, exited $rc: $(cat "$T/restore.out")"
grep -q "owned by a running ckptd.*pid $APID" "$T/restore.out" ||
	fail "ckpt-restore did not name the owner: $(cat "$T/restore.out")"

# A real rank is refused too (and does not wait for ever).
rank_start b-r0 --socket "$(sock b)" --job ja --rank 0 --world 2 --steps 10 --wait \
	--timeout-ms 10000 --connect-timeout-ms 5000
wait "$LAST_PID" && fail "a rank of job ja connected to b, which does not own the job"
grep -q "ckpt_connect" "$T/b-r0.log" || fail "the refused rank did not report a connect failure"

# The owner goes on: step 4 and then more commit in a.
finish_inflight
run_ranks 2 a-more --socket "$(sock a)" --job ja --seed 42 --tensors 4 --min-bytes 4K \
	--max-bytes 1M --steps 5,6 --wait
expect_committed "$JOB" "1 2 3 4 5 6"
[ "$(verify_all "$JOB")" = 6 ] || fail "not every committed step verifies"
ckptd_stop b
ckptd_stop a
log "pass"
