#!/bin/bash
# SPDX-License-Identifier: MIT
# A job stays owned while its steps still go up to S3: the ranks save two
# steps and leave at once; until the last step is on S3, daemon a keeps
# the job's OWNER lock (a second daemon on the same root refuses the job,
# naming a), then a lets the lock go (the second daemon takes the job).
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-s3.sh"
: "${CKPT_RAW_CLIENT:?CKPT_RAW_CLIENT must name the ckpt-raw-client binary}"

rgw_up
ROOT=$T/root
S3=(--keep-last 0 --s3-url "s3://$S3_BUCKET/rl" --s3-part-size 5MiB --s3-parallel 2 --s3-keep-last 0)
# 2 MiB/s: about 10 MiB of shards take several seconds.
ckptd_start a "$ROOT" "${S3[@]}" --s3-max-rate 2MiB
ckptd_start b "$ROOT" "${S3[@]}"
APID=${CKPTD_PID[a]}
run_ranks 1 save --socket "$(sock a)" --job rl --seed 21 --tensors 2 --min-bytes 2M --max-bytes 3M \
	--steps 1,2 --wait
expect_committed "$ROOT/rl" "1 2"
s3_has "$(s3_step_key rl rl 2 MANIFEST.json)" &&
	fail "step 2 reached S3 before the ranks left: the test needs a slower upload"

# The ranks are gone; uploads are not done: a still owns the job. (The raw
# client exits 0 when the HELLO is refused.)
out=$("$CKPT_RAW_CLIENT" --socket "$(sock b)" --hello rl) ||
	fail "b accepted job rl while a was still uploading it: $out"
case "$out" in
*"pid $APID"*) ;;
*) fail "b's refusal does not name a (pid $APID): $out" ;;
esac
grep -q 'job released job=rl' "$T/ckptd-a.log" && fail "a released job rl before its uploads were done"

wait_s3 90 s3_has "$(s3_step_key rl rl 2 MANIFEST.json)" || fail "step 2 never reached S3"
wait_s3 60 s3_has "$(s3_step_key rl rl 1 MANIFEST.json)" || fail "step 1 never reached S3"
# Then the lock goes, after the last upload.
wait_s3 20 grep_log ckptd-a "job released job=rl" || fail "a kept job rl after its uploads were done"
up=$(grep -n 'uploaded job=rl step=' "$T/ckptd-a.log" | tail -1 | cut -d: -f1)
rel=$(grep -n 'job released job=rl' "$T/ckptd-a.log" | head -1 | cut -d: -f1)
[ "$(grep -c 'uploaded job=rl step=' "$T/ckptd-a.log")" -eq 2 ] || fail "a did not log two uploads of job rl"
[ "$rel" -gt "$up" ] || fail "a released job rl (log line $rel) before its last upload (line $up)"
out=$("$CKPT_RAW_CLIENT" --socket "$(sock b)" --hello rl)
[ "$out" = HELLO_OK ] || fail "b refused job rl after a let it go: $out"
ckptd_stop a
ckptd_stop b
log "pass"
