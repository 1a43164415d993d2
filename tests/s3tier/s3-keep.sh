#!/bin/bash
# SPDX-License-Identifier: MIT
# With S3 configured, the root keeps every step S3 has not confirmed:
# - S3 unreachable from the start (no scan ever succeeds): ten steps past
#   --keep-last 2 would go; all stay, counted in ckpt_root_steps_held_for_s3,
#   one warning and one s3_backlog event for the episode (not one per save);
# - a restart while S3 is still unreachable (start-up recovery) keeps them;
# - once S3 is reachable and has confirmed the newest steps, the root goes
#   back to keep_last, and the backlog metric to 0.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-s3.sh"

HERE=$(dirname "$0")/../integration
# radosgw starts in the background while S3 is still "unreachable".
bash "$CKPT_S3_HARNESS/radosgw.sh" start "$RGW_DIR" >"$T/radosgw-start.log" 2>&1 &
RGW_START=$!

python3 "$HERE/webhook-receiver.py" "$T/hook.port" "$T/hook.events" >"$T/hook.log" 2>&1 &
EXTRA_PIDS+=("$!")
wait_s3 10 test -s "$T/hook.port" || fail "webhook receiver did not start"
backlog_events() { grep -c '"event": "s3_backlog"' "$T/hook.events" 2>/dev/null || true; }

ROOT=$T/root
OPTS=(--job k --seed 4 --tensors 2 --min-bytes 64K --max-bytes 256K)
S3OPTS=(--keep-last 2 --s3-url "s3://ckpt-test/keep" --s3-keep-last 2 --s3-part-size 5MiB --s3-max-attempts 1
	--webhook-url "http://127.0.0.1:$(cat "$T/hook.port")/hook" --webhook-rate 600)
# Nothing listens on port 9 of loopback: every request is refused.
dead_start() {
	AWS_ACCESS_KEY_ID=AKIDEXAMPLE AWS_SECRET_ACCESS_KEY=secret AWS_REGION=us-east-1 \
		AWS_ENDPOINT_URL=http://127.0.0.1:9 ckptd_start d "$ROOT" "${S3OPTS[@]}"
}
metric() {
	curl -fsS "http://127.0.0.1:$(metrics_port d)/metrics" | sed -n "s/^$1 //p"
}

dead_start
run_ranks 1 save --socket "$(sock d)" "${OPTS[@]}" --first 1 --every 1 --count 10 --wait
sleep 1 # retention runs after each commit, on a worker
expect_committed "$ROOT/k" "1 2 3 4 5 6 7 8 9 10"
wait_s3 20 grep_log ckptd-d "s3: scan failed job=k" || fail "no failed S3 scan logged"
[ "$(grep -c 'keeping steps for S3 job=k' "$T/ckptd-d.log")" -eq 1 ] ||
	fail "want one backlog warning, got $(grep -c 'keeping steps for S3 job=k' "$T/ckptd-d.log")"
[ "$(metric 'ckpt_root_steps_held_for_s3{ckpt_job="k"}')" = 8 ] ||
	fail "ckpt_root_steps_held_for_s3 is not 8: $(metric 'ckpt_root_steps_held_for_s3{ckpt_job="k"}')"
wait_s3 20 test "$(backlog_events)" -ge 1 || fail "no s3_backlog event"
ckptd_kill9 d

# Start-up recovery with S3 still unreachable: nothing goes either.
dead_start
wait_s3 20 test "$(grep -c 'keeping steps for S3 job=k' "$T/ckptd-d.log")" -eq 2 ||
	fail "no backlog warning after the restart"
expect_committed "$ROOT/k" "1 2 3 4 5 6 7 8 9 10"
[ "$(metric 'ckpt_root_steps_held_for_s3{ckpt_job="k"}')" = 8 ] || fail "backlog metric not 8 after the restart"
ckptd_stop d
[ "$(backlog_events)" -eq 2 ] || fail "want one s3_backlog event per run, got $(backlog_events)"

wait "$RGW_START" || fail "radosgw did not start: $(tail -n 20 "$T/radosgw-start.log")"
# shellcheck disable=SC1091
. "$RGW_DIR/env"
RGW_ENDPOINT=$AWS_ENDPOINT_URL
S3OPTS[3]="s3://$S3_BUCKET/keep"
ckptd_start d "$ROOT" "${S3OPTS[@]}"
wait_s3 60 s3_has "$(s3_step_key keep k 10 MANIFEST.json)" || fail "step 10 never reached S3"
wait_s3 30 s3_has "$(s3_step_key keep k 9 MANIFEST.json)" || fail "step 9 never reached S3"
for i in $(seq 1 100); do
	[ "$(committed_steps "$ROOT/k" | tr '\n' ' ')" = "9 10 " ] && break
	sleep 0.1
done
expect_committed "$ROOT/k" "9 10"
[ "$(metric 'ckpt_root_steps_held_for_s3{ckpt_job="k"}')" = 0 ] || fail "backlog metric not back to 0"
grep_log ckptd-d "S3 caught up job=k" || fail "no end of the backlog logged"
# A new step: the root holds three until S3 has it, then two.
run_ranks 1 save11 --socket "$(sock d)" "${OPTS[@]}" --steps 11 --wait
wait_s3 60 s3_has "$(s3_step_key keep k 11 MANIFEST.json)" || fail "step 11 never reached S3"
for i in $(seq 1 100); do
	[ "$(committed_steps "$ROOT/k" | tr '\n' ' ')" = "10 11 " ] && break
	sleep 0.1
done
expect_committed "$ROOT/k" "10 11"
ckptd_stop d
log "pass"
