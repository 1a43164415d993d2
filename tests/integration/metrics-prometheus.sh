#!/bin/bash
# SPDX-License-Identifier: MIT
# ckptd's /metrics scraped by a real Prometheus server (every second), after
# a known sequence of saves: 3 committed, 1 failed (its step directory is
# taken by a file), a burst under backpressure=skip (some committed, the
# rest skipped), and a restore. Prometheus's HTTP API must then report the
# target up and exactly those outcomes, bytes and steps, and the stall the
# rank reported for each accepted save; the Grafana dashboard's queries
# must name only metrics ckptd exposes.
. "$(dirname "$0")/lib.sh"

HERE=$(cd "$(dirname "$0")" && pwd)
PROMQL="$HERE/promql.py"
DASHBOARD="$HERE/../../docs/grafana/ckptd-dashboard.json"

command -v prometheus >/dev/null ||
	fail "prometheus is not installed (scripts/install-deps.sh installs it)"
command -v python3 >/dev/null || fail "python3 is not installed"

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Slow, small writes (one 4 KiB request in flight) so that a quick second
# save finds the rank's only slot still busy: deterministic skips.
ROOT="$T/root"
ckptd_start m "$ROOT" --backpressure skip --slots-per-rank 1 --keep-last 0 \
	--queue-depth 1 --request-size 4KiB --staging-bytes 1GiB
MPORT=$(metrics_port m) || fail "ckptd wrote no metrics port file"
log "ckptd metrics on 127.0.0.1:$MPORT"
python3 "$PROMQL" get "http://127.0.0.1:$MPORT/healthz" | grep -qx ok || fail "/healthz is not 'ok'"
grep_log ckptd-m "metrics listening address=127.0.0.1:$MPORT" || fail "bound address not logged"

PPORT=$(free_port)
PROM="http://127.0.0.1:$PPORT"
cat >"$T/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: ckptd
    scrape_interval: 1s
    scrape_timeout: 1s
    static_configs:
      - targets: ['127.0.0.1:$MPORT']
EOF
prometheus --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/tsdb" \
	--web.listen-address="127.0.0.1:$PPORT" --log.level=warn >"$T/prometheus.log" 2>&1 &
EXTRA_PIDS+=("$!")
for i in $(seq 1 300); do
	python3 "$PROMQL" get "$PROM/-/ready" >/dev/null 2>&1 && break
	kill -0 "${EXTRA_PIDS[-1]}" 2>/dev/null || fail "prometheus exited during start-up"
	sleep 0.1
done
python3 "$PROMQL" get "$PROM/-/ready" >/dev/null 2>&1 || fail "prometheus not ready within 30 s"
log "prometheus on $PROM"

RANK=(--socket "$(sock m)" --job m --rank 0 --world 1 --seed 7 --tensors 2)

# 1. Three committed steps.
rank_start a "${RANK[@]}" --min-bytes 256K --max-bytes 1M --steps 1,2,3 --wait
rank_wait "$LAST_PID" a
# 2. One failed step: a file where its directory must go.
: >"$(stepdir "$ROOT/m" 4)"
rank_start b "${RANK[@]}" --min-bytes 256K --max-bytes 1M --steps 4 --wait --expect-fail 4
rank_wait "$LAST_PID" b
grep -Eq '^rank 0 step 4 FAILED' "$T/b.log" || fail "step 4 did not fail"
# 3. A burst of 10 saves without waiting: the first gets the slot, the
# next ones find it busy and are skipped.
rank_start c "${RANK[@]}" --min-bytes 8M --max-bytes 8M --first 10 --every 1 --count 10 \
	--accept-skipped
rank_wait "$LAST_PID" c
n_commit_c=$(grep -Ec '^rank 0 step [0-9]+ committed' "$T/c.log")
n_skip=$(grep -Ec '^rank 0 step [0-9]+ skipped($|:)' "$T/c.log")
log "burst: $n_commit_c committed, $n_skip skipped of 10"
[ $((n_commit_c + n_skip)) -eq 10 ] || fail "burst: $n_commit_c + $n_skip != 10"
[ "$n_skip" -ge 1 ] || fail "burst: nothing was skipped (the writes were too fast to test skips)"
n_commit=$((3 + n_commit_c))
last=$(committed_steps "$ROOT/m" | tail -n 1)
expect_latest "$ROOT/m" "$last"
# 4. A restore of the newest step.
rank_start d "${RANK[@]}" --min-bytes 8M --max-bytes 8M --restore latest --expect-step "$last"
rank_wait "$LAST_PID" d
# 5. Another job with only committed saves: one stall report each.
N_STALL=4
rank_start s --socket "$(sock m)" --job s --rank 0 --world 1 --seed 9 --tensors 3 \
	--min-bytes 512K --max-bytes 2M --steps 1,2,3,4 --wait
rank_wait "$LAST_PID" s
[ "$(grep -Ec '^rank 0 step [0-9]+ committed' "$T/s.log")" -eq "$N_STALL" ] ||
	fail "job s: not all $N_STALL steps committed"

# What the root holds: the shards of every committed step.
shard_bytes=0
for s in $(committed_steps "$ROOT/m"); do
	shard_bytes=$((shard_bytes + $(stat -c %s "$(stepdir "$ROOT/m" "$s")"/rank-000000.shard)))
done
log "expect: committed=$n_commit skipped=$n_skip failed=1 latest=$last shard_bytes>=$shard_bytes"

# query EXPR: the single value of an instant query ("" when no series).
query() { python3 "$PROMQL" query "$PROM" "$1"; }

# expect EXPR OP VALUE: wait (up to 60 s: scrapes every second) until the
# query's value compares true, else fail with the last value seen.
expect() {
	local expr=$1 op=$2 want=$3 got i
	for i in $(seq 1 120); do
		got=$(query "$expr" 2>/dev/null | head -n 1)
		if [ -n "$got" ] && python3 -c "import sys; sys.exit(0 if float('$got') $op float('$want') else 1)"; then
			log "ok: $expr = $got ($op $want)"
			return 0
		fi
		sleep 0.5
	done
	fail "prometheus: $expr = '${got}', expected $op $want"
}

J='ckpt_job="m"'
expect 'up{job="ckptd"}' == 1
[ "$(python3 "$PROMQL" target-health "$PROM" ckptd)" = up ] || fail "scrape target is not up"
expect "ckpt_saves_total{$J,outcome=\"committed\"}" == "$n_commit"
expect "ckpt_saves_total{$J,outcome=\"skipped\"}" == "$n_skip"
expect "ckpt_saves_total{$J,outcome=\"failed\"}" == 1
expect "ckpt_time_to_committed_seconds_count{$J}" == "$n_commit"
expect "ckpt_time_to_committed_seconds_bucket{$J,le=\"+Inf\"}" == "$n_commit"
expect "ckpt_time_to_committed_seconds_sum{$J}" '>' 0
expect "ckpt_time_to_durable_seconds_count{$J}" == "$n_commit"
expect "ckpt_written_bytes_total{$J}" '>=' "$shard_bytes"
expect "ckpt_staged_bytes_total{$J}" '>=' "$shard_bytes"
expect "ckpt_newest_committed_step{$J,tier=\"root\"}" == "$last"
expect "ckpt_restores_total{$J,outcome=\"ok\"}" == 1
expect "ckpt_slot_wait_seconds_total{$J}" '>' 0
# The ranks' own stall reports (STALL): one per save ckptd accepted. Job s
# committed N_STALL saves; job m's are its commits plus step 4, accepted
# and then failed (skipped saves were never accepted).
S='ckpt_job="s"'
expect "ckpt_save_stall_seconds_count{$S}" == "$N_STALL"
expect "ckpt_save_stall_seconds_bucket{$S,le=\"+Inf\"}" == "$N_STALL"
expect "ckpt_save_stall_seconds_sum{$S}" '>' 0
expect "ckpt_save_stall_seconds_total{$S}" '>' 0
expect "ckpt_save_stall_seconds_total{$S} - ckpt_save_stall_seconds_sum{$S}" == 0
expect "ckpt_save_stall_seconds_count{$J}" == "$((n_commit + 1))"
expect "ckpt_save_stall_seconds_sum{$J}" '>' 0
expect 'ckpt_clients_connected' == 0
expect 'ckpt_queue_depth{queue="write"}' == 0
expect 'ckpt_io_uring_in_flight{op="write"}' == 0
expect 'ckpt_staging_used_bytes' == 0
expect 'ckpt_staging_capacity_bytes' == 1073741824
expect 'ckpt_build_info' == 1
expect 'ckpt_peers_up' == 0
expect 'ckpt_s3_retries_total' == 0
expect 'ckpt_process_start_time_seconds' '>' 1600000000
# Quantiles as the dashboard computes them (over the totals here: every
# commit may have come before the first scrape, leaving rates at zero).
expect "histogram_quantile(0.9, sum by (le) (ckpt_time_to_committed_seconds_bucket{$J}))" '>' 0
expect "histogram_quantile(0.9, sum by (le) (ckpt_time_to_committed_seconds_bucket{$J}))" '<=' 600
expect "histogram_quantile(0.99, sum by (le) (ckpt_save_stall_seconds_bucket{$S}))" '>' 0
expect "histogram_quantile(0.99, sum by (le) (ckpt_save_stall_seconds_bucket{$S}))" '<=' 60

# The dashboard's queries against the live exposition.
python3 "$PROMQL" get "http://127.0.0.1:$MPORT/metrics" >"$T/metrics.txt" || fail "GET /metrics failed"
python3 "$HERE/dashboard-check.py" "$DASHBOARD" "$T/metrics.txt" || fail "dashboard check failed"

ckptd_stop m
log "pass"
