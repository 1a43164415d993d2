#!/bin/bash
# SPDX-License-Identifier: MIT
# A fault-injecting proxy between ckptd and radosgw: connection resets
# before and after the body, 500s, 503 SlowDown, a stalled answer, answers
# cut short. The ranks' saves all commit meanwhile (the root tier never
# waits for S3), every committed step still ends up in S3 byte-identical,
# each kind of fault really happened, and no multipart upload is left open.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-s3.sh"

rgw_up
ROOT=$T/root
python3 "$CKPT_S3_HARNESS/faultproxy.py" --upstream "$RGW_ENDPOINT" --port-file "$T/proxy.port" \
	--stats-file "$T/proxy-stats.json" --seed 7 \
	--fault 'kind=reset_before_body,method=PUT,match=partNumber=,every=5' \
	--fault 'kind=reset_after_body,method=PUT,match=partNumber=,every=7' \
	--fault 'kind=slowdown,method=PUT,every=4' \
	--fault 'kind=error,status=500,every=9' \
	--fault 'kind=error,status=503,method=GET,every=3' \
	--fault 'kind=drop_response,method=POST,every=3' \
	--fault 'kind=stall,seconds=3,method=PUT,limit=2,every=11' \
	>"$T/proxy.log" 2>&1 &
EXTRA_PIDS+=($!)
wait_s3 30 test -s "$T/proxy.port" || fail "the fault proxy did not start: $(cat "$T/proxy.log")"
PROXY=http://127.0.0.1:$(cat "$T/proxy.port")

# ckptd talks to the proxy; short backoffs keep the test quick.
AWS_ENDPOINT_URL=$PROXY ckptd_start d "$ROOT" --keep-last 0 --s3-url "s3://$S3_BUCKET/ft" \
	--s3-part-size 5MiB --s3-parallel 4 --s3-keep-last 0 --s3-max-attempts 10
run_ranks 2 save --socket "$(sock d)" --job ft --seed 9 --tensors 3 --min-bytes 2M --max-bytes 9M \
	--steps 10,20,30 --wait
expect_committed "$ROOT/ft" "10 20 30"
for s in 10 20 30; do
	wait_s3 300 s3_has "$(s3_step_key ft ft $s MANIFEST.json)" || fail "step $s never reached S3 through the faults"
	same_as_root "$ROOT/ft" ft ft $s
done
[ "$(open_uploads ft/)" -eq 0 ] || fail "multipart uploads left open: $(open_uploads ft/)"

python3 - "$T/proxy-stats.json" <<'PY' || fail "not every fault happened: $(cat "$T/proxy-stats.json")"
import json, sys
st = json.load(open(sys.argv[1]))
faults = st.get("faults", {})
want = ["reset_before_body", "reset_after_body", "slowdown", "error_500", "drop_response", "stall"]
missing = [k for k in want if not faults.get(k)]
print("faults injected:", faults)
sys.exit(1 if missing else 0)
PY
m=$(curl -fsS "http://127.0.0.1:$(metrics_port d)/metrics") || fail "metrics scrape failed"
echo "$m" | grep -Eq '^ckpt_s3_retries_total [1-9]' || fail "no S3 retries counted: $(echo "$m" | grep s3_)"
ckptd_stop d
log "pass"
