#!/bin/bash
# SPDX-License-Identifier: MIT
# A step kept in the root for S3 is kept on top of keep_last, never in the
# place of a newer step: step 1's uploads are refused (a fault proxy answers
# 403 to every PUT under step-0000000001/), steps 2..5 reach S3, and with
# --keep-last 2 the root holds step 1 (for S3) and the newest two, 4 and 5.
# Counting step 1 toward keep_last would leave only 1 and 5.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-s3.sh"

rgw_up
ROOT=$T/root
python3 "$CKPT_S3_HARNESS/faultproxy.py" --upstream "$RGW_ENDPOINT" --port-file "$T/proxy.port" \
	--stats-file "$T/proxy-stats.json" \
	--fault 'kind=error,status=403,method=PUT,match=/step-0000000001/' \
	>"$T/proxy.log" 2>&1 &
EXTRA_PIDS+=($!)
wait_s3 30 test -s "$T/proxy.port" || fail "the fault proxy did not start: $(cat "$T/proxy.log")"
PROXY=http://127.0.0.1:$(cat "$T/proxy.port")

AWS_ENDPOINT_URL=$PROXY ckptd_start d "$ROOT" --keep-last 2 --s3-url "s3://$S3_BUCKET/kn" \
	--s3-part-size 5MiB --s3-keep-last 10 --s3-max-attempts 2
OPTS=(--job kn --seed 5 --tensors 2 --min-bytes 64K --max-bytes 256K)
for s in 1 2 3 4 5; do
	run_ranks 1 "save$s" --socket "$(sock d)" "${OPTS[@]}" --steps "$s" --wait
	# Each step on S3 before the next commits, so that retention sees it
	# confirmed (step 1 never is).
	[ "$s" = 1 ] || wait_s3 60 s3_has "$(s3_step_key kn kn "$s" MANIFEST.json)" ||
		fail "step $s never reached S3"
done
s3_has "$(s3_step_key kn kn 1 MANIFEST.json)" && fail "step 1 reached S3 through the refusing proxy"
# Retention runs after each commit and again when S3 confirms a step.
for i in $(seq 1 100); do
	[ "$(committed_steps "$ROOT/kn" | tr '\n' ' ')" = "1 4 5 " ] && break
	sleep 0.1
done
expect_committed "$ROOT/kn" "1 4 5"
ckptd_stop d
log "pass"
