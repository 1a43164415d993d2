#!/bin/bash
# SPDX-License-Identifier: MIT
# Two ranks of one job that disagree on the world size: the second is
# refused with a reason naming the job and both world sizes (which libckpt
# hands to the caller), ckptd logs it, and the first rank's open step does
# not wait forever: it fails, saying why.
. "$(dirname "$0")/../integration/lib.sh"

ROOT=$T/root
OPTS=(--socket "$(sock d)" --job ws --seed 3 --tensors 2 --min-bytes 4K --max-bytes 64K)
ckptd_start d "$ROOT" --keep-last 0

# Rank 0 of 2 saves step 10 and waits for it (at most 30 s).
rank_start r0 "${OPTS[@]}" --rank 0 --world 2 --steps 10 --wait --timeout-ms 30000 --expect-fail 10
p0=$LAST_PID
for i in $(seq 1 100); do
	grep_log ckptd-d "save accepted job=ws step=10 rank=0" && break
	sleep 0.1
done
grep_log ckptd-d "save accepted job=ws step=10 rank=0" || fail "rank 0's save of step 10 was not accepted"

# Rank 1 says the world is 4 ranks.
rank_start r1 "${OPTS[@]}" --rank 1 --world 4 --steps 10 --wait --timeout-ms 5000
p1=$LAST_PID
wait "$p1" && fail "rank 1 with a conflicting world size was not refused"
cat "$T/r1.log"
grep -q "job ws: rank 1 says world size 4, connected ranks say 2" "$T/r1.log" ||
	fail "rank 1's refusal does not carry ckptd's reason"
grep_log ckptd-d "rank refused job=ws rank=1 .*world=4: the connected ranks say world=2" ||
	fail "ckptd did not log the refusal"

# Rank 0's step 10 ended (FAILED, as --expect-fail says), long before its
# 30 s wait would have.
t0=$(date +%s)
rank_wait "$p0" r0
cat "$T/r0.log"
[ $(( $(date +%s) - t0 )) -lt 15 ] || fail "rank 0 waited for its step for too long"
grep -q "step 10 FAILED.*disagree on the world size" "$T/r0.log" ||
	fail "rank 0's step 10 did not fail with the world-size reason"

# The job is fine for ranks that agree.
run_ranks 2 good "${OPTS[@]}" --steps 20 --wait --timeout-ms 20000
expect_committed "$ROOT/ws" "20"
ckptd_stop d
log "pass"
