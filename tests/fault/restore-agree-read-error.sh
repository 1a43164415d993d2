#!/bin/bash
# SPDX-License-Identifier: MIT
# A read error on one rank's shard (the file made unreadable to a ckptd
# that runs as another user): an agreed restore reports the error to every
# rank of the job after bounded retries; no rank falls back to an older
# step on its own, and the step is not counted as damaged. Once the file is
# readable again the same restore gives every rank the newest step.
. "$(dirname "$0")/../integration/lib.sh"

ROOT=$T/root
JOB=$ROOT/re
WORLD=2
OPTS=(--socket "$(sock d)" --job re --seed 5 --tensors 3 --min-bytes 64K --max-bytes 512K)
AGREE=(--agree)
EXPECT_ERROR=(--expect-restore-error)
# An older ckpt-test-rank restores rank by rank and knows neither option.
"$CKPT_TEST_RANK" --help 2>&1 | grep -q -- '--agree' || AGREE=() EXPECT_ERROR=()

# A daemon that permissions apply to: as root, run it as nobody.
RUN_AS=()
if [ "$(id -u)" = 0 ]; then
	command -v setpriv >/dev/null || skip "setpriv is not installed"
	RUN_AS=(setpriv --reuid=65534 --regid=65534 --clear-groups --)
	mkdir -p "$ROOT"
	chown 65534:65534 "$ROOT"
	chown 65534:65534 "$T"  # the socket and the metrics port file
fi
ckptd_as() {
	local real=$CKPTD
	CKPTD_WRAP=$(mktemp "$T/ckptd-as.XXXXXX")
	printf '#!/bin/sh\nexec %s %s "$@"\n' "${RUN_AS[*]}" "$real" >"$CKPTD_WRAP"
	chmod 755 "$CKPTD_WRAP"
	CKPTD=$CKPTD_WRAP ckptd_start d "$ROOT" --keep-last 0
	CKPTD=$real
}
ckptd_as
chmod 777 "$T/d.sock" 2>/dev/null
run_ranks $WORLD save "${OPTS[@]}" --steps 10,20 --wait
expect_committed "$JOB" "10 20"

SHARD=$(stepdir "$JOB" 20)/rank-000001.shard
chmod 000 "$SHARD"
declare -a pids=()
for r in 0 1; do
	rank_start fail-$r "${OPTS[@]}" --rank $r --world $WORLD --restore latest "${AGREE[@]}" \
		"${EXPECT_ERROR[@]}"
	pids+=("$LAST_PID")
done
for r in 0 1; do
	wait "${pids[$r]}"
	rc=$?
	[ "$rc" -eq 0 ] && grep_log fail-$r "(as expected)" ||
		fail "rank $r did not fail its restore: $(tail -n 2 "$T/fail-$r.log")"
	grep_log fail-$r "Permission denied" ||
		fail "rank $r's error is not the read error: $(tail -n 2 "$T/fail-$r.log")"
done
grep -q "read error, retrying" "$T/ckptd-d.log" || fail "ckptd did not retry the read"
if grep -q "step is damaged for the job" "$T/ckptd-d.log"; then
	fail "a read error was counted as damage"
fi

chmod 644 "$SHARD"
# A rank that asks and dies while it waits for the others leaves the round:
# the restarted job's ranks are not taken for a second request of it.
rank_start dies "${OPTS[@]}" --rank 0 --world $WORLD --restore latest "${AGREE[@]}"
sleep 0.5
kill -9 "$LAST_PID"
wait "$LAST_PID" 2>/dev/null
run_ranks $WORLD ok "${OPTS[@]}" --restore latest --expect-step 20 "${AGREE[@]}"
ckptd_alive d || fail "ckptd died"
ckptd_stop d
log "pass"
