#!/bin/bash
# SPDX-License-Identifier: MIT
# ckptd's webhook events, POSTed to a local receiver:
# - a committed step arrives with its fields, after a retry (the receiver
#   answers the first request 503);
# - with webhook_rate 1 per minute and a queue of 2, a failed step waits
#   queued, a burst of skips merges into one queued event ("repeated"), and
#   the next distinct event is dropped; all counted in /metrics; at exit the
#   queue is flushed;
# - the URL's secret token never reaches ckptd's log or --check-config;
# - a second ckptd sends only "stall" events (webhook_events), one per rank
#   whose only slot stayed busy longer than stall_warn_ms, and one per save
#   whose rank reported (STALL) it stalled at least that long.
. "$(dirname "$0")/lib.sh"

HERE=$(cd "$(dirname "$0")" && pwd)
PROMQL="$HERE/promql.py"
command -v python3 >/dev/null || fail "python3 is not installed"

# receiver_start NAME [--fail-first N]: events go to $T/NAME.events.
receiver_start() {
	local name=$1 i
	shift
	python3 "$HERE/webhook-receiver.py" "$T/$name.port" "$T/$name.events" "$@" \
		>"$T/$name.log" 2>&1 &
	EXTRA_PIDS+=("$!")
	for i in $(seq 1 100); do
		[ -s "$T/$name.port" ] && return 0
		sleep 0.1
	done
	fail "webhook receiver $name did not start"
}

# events_of NAME EVENT: bodies of the successfully received EVENT events.
events_of() {
	python3 - "$T/$1.events" "$2" <<'PY'
import json, sys
try:
    lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
except FileNotFoundError:
    lines = []
for l in lines:
    r = json.loads(l)
    if r["status"] == 200 and isinstance(r["body"], dict) and r["body"].get("event") == sys.argv[2]:
        print(json.dumps(r["body"], sort_keys=True))
PY
}

# field JSON KEY
field() { python3 -c 'import json, sys; v = json.loads(sys.argv[1]).get(sys.argv[2]); print("" if v is None else v)' "$1" "$2"; }

# wait_event NAME EVENT [COUNT]: until COUNT (default 1) such events arrived.
wait_event() {
	local i
	for i in $(seq 1 120); do
		[ "$(events_of "$1" "$2" | wc -l)" -ge "${3:-1}" ] && return 0
		sleep 0.5
	done
	fail "no '$2' event reached receiver $1 within 60 s"
}

# metric NAME PROMETHEUS-SERIES: its value in ckptd NAME's /metrics (0 if absent).
metric() {
	python3 "$PROMQL" get "http://127.0.0.1:$(metrics_port "$1")/metrics" |
		awk -v s="$2" '$1 == s { print $2; found = 1 } END { if (!found) print 0 }'
}

# wait_metric NAME SERIES VALUE: until the series has that value (30 s).
wait_metric() {
	local i got
	for i in $(seq 1 60); do
		got=$(metric "$1" "$2")
		[ "$got" = "$3" ] && return 0
		sleep 0.5
	done
	fail "$2 is $got, expected $3"
}

SECRET="hook-token-$RANDOM$RANDOM"
receiver_start r1 --fail-first 1
URL="http://127.0.0.1:$(cat "$T/r1.port")/services/$SECRET"

# The token is refused by --check-config's output and never logged.
CKPTD_WEBHOOK_URL="$URL" "$CKPTD" --config '' --root "$T/root" --socket "$T/x.sock" \
	--check-config >"$T/check-config.out" 2>&1 || fail "--check-config failed: $(cat "$T/check-config.out")"
grep -q "webhook_url = (set, not shown)" "$T/check-config.out" || fail "--check-config does not mention webhook_url"
grep -qF "$SECRET" "$T/check-config.out" && fail "--check-config printed the webhook token"
"$CKPTD" --config '' --root "$T/root" --socket "$T/x.sock" --webhook-url "ftp://x/$SECRET" \
	--check-config >"$T/check-config-bad.out" 2>&1 && fail "an ftp:// webhook_url was accepted"
grep -qF "$SECRET" "$T/check-config-bad.out" && fail "a refused webhook_url was printed"
"$CKPTD" --config '' --root "$T/root" --socket "$T/x.sock" --webhook-events committed,nope \
	--check-config >/dev/null 2>&1 && fail "an unknown webhook event was accepted"

ROOT="$T/root"
export CKPTD_WEBHOOK_URL="$URL"
ckptd_start m "$ROOT" --backpressure skip --slots-per-rank 1 --keep-last 0 \
	--queue-depth 1 --request-size 4KiB --staging-bytes 1GiB \
	--webhook-rate 1 --webhook-queue 2 --stall-warn-ms 0
unset CKPTD_WEBHOOK_URL
grep_log ckptd-m "webhook=http://127.0.0.1:$(cat "$T/r1.port")" || fail "webhook host not logged"

RANK=(--socket "$(sock m)" --job m --rank 0 --world 1 --seed 3 --tensors 2)

# 1. Committed: sent at once (the bucket holds one), retried after a 503.
rank_start a "${RANK[@]}" --min-bytes 256K --max-bytes 1M --steps 1 --wait
rank_wait "$LAST_PID" a
wait_event r1 committed
ev=$(events_of r1 committed | head -n 1)
log "committed event: $ev"
[ "$(field "$ev" job)" = m ] || fail "committed: job is not m"
[ "$(field "$ev" step)" = 1 ] || fail "committed: step is not 1"
[ "$(field "$ev" ranks)" = 1 ] || fail "committed: ranks is not 1"
python3 -c "import sys; sys.exit(0 if float('$(field "$ev" seconds)') > 0 and int('$(field "$ev" bytes)') > 0 else 1)" ||
	fail "committed: seconds or bytes missing"
field "$ev" text | grep -q "job m step 1 committed" || fail "committed: text is '$(field "$ev" text)'"
[ "$(grep -c '"status": 503' "$T/r1.events")" -eq 1 ] || fail "the first request was not answered 503"
grep -q '"content_type": "application/json"' "$T/r1.events" || fail "not sent as application/json"
wait_metric m 'ckpt_webhook_events_total{outcome="sent"}' 1
[ "$(metric m 'ckpt_webhook_requests_total{result="error"}')" = 1 ] || fail "the 503 was not counted"
[ "$(metric m 'ckpt_webhook_requests_total{result="ok"}')" = 1 ] || fail "the 200 was not counted"

# 2. Failed (its step directory is taken by a file): queued, no token left.
: >"$(stepdir "$ROOT/m" 2)"
rank_start b "${RANK[@]}" --min-bytes 256K --max-bytes 1M --steps 2 --wait --expect-fail 2
rank_wait "$LAST_PID" b

# 3. A burst: skips merge into one queued event; the burst's commit finds
# the queue full and is dropped.
rank_start c "${RANK[@]}" --min-bytes 8M --max-bytes 8M --first 10 --every 1 --count 10 \
	--accept-skipped
rank_wait "$LAST_PID" c
n_skip=$(grep -Ec '^rank 0 step [0-9]+ skipped($|:)' "$T/c.log")
last_skip=$(grep -E '^rank 0 step [0-9]+ skipped($|:)' "$T/c.log" | awk '{print $4}' | sort -n | tail -n 1)
log "burst: $n_skip skipped, the last $last_skip"
[ "$n_skip" -ge 2 ] || fail "burst: fewer than 2 saves skipped (writes too fast to test merging)"
coalesced=$(metric m 'ckpt_webhook_events_total{outcome="coalesced"}')
dropped=$(metric m 'ckpt_webhook_events_total{outcome="dropped"}')
log "before exit: coalesced=$coalesced dropped=$dropped"
[ "$coalesced" = $((n_skip - 1)) ] || fail "coalesced $coalesced, expected $((n_skip - 1))"
[ "$dropped" -ge 1 ] || fail "nothing dropped with a full queue"
[ "$(events_of r1 failed | wc -l)" -eq 0 ] || fail "the failed event was sent despite webhook_rate 1"

# 4. Exit flushes the queue (rate limit aside).
ckptd_stop m
ev=$(events_of r1 failed | head -n 1)
log "failed event: $ev"
[ -n "$ev" ] || fail "the queued failed event was not flushed at exit"
[ "$(field "$ev" job)" = m ] && [ "$(field "$ev" step)" = 2 ] || fail "failed: wrong job or step"
[ -n "$(field "$ev" reason)" ] || fail "failed: no reason"
ev=$(events_of r1 skipped | head -n 1)
log "skipped event: $ev"
[ -n "$ev" ] || fail "the merged skipped event was not flushed at exit"
[ "$(events_of r1 skipped | wc -l)" -eq 1 ] || fail "skips were not merged into one message"
[ "$(field "$ev" rank)" = 0 ] || fail "skipped: rank is not 0"
[ "$(field "$ev" repeated)" = $((n_skip - 1)) ] || fail "skipped: repeated is not $((n_skip - 1))"
[ "$(field "$ev" step)" = "$last_skip" ] || fail "skipped: step is not the newest ($last_skip)"
field "$ev" text | grep -q "and $((n_skip - 1)) more" || fail "skipped: text does not say how many"
[ "$(events_of r1 committed | wc -l)" -eq 1 ] || fail "the dropped committed event arrived"
grep -qF "$SECRET" "$T/ckptd-m.log" && fail "the webhook token is in ckptd's log"

# 5. Stall events only, with no rate limit to speak of.
receiver_start r2
export CKPTD_WEBHOOK_URL="http://127.0.0.1:$(cat "$T/r2.port")/stall/$SECRET"
ckptd_start s "$T/root-s" --backpressure block --slots-per-rank 1 --keep-last 0 \
	--queue-depth 1 --request-size 4KiB --staging-bytes 1GiB \
	--webhook-events stall --stall-warn-ms 1 --webhook-rate 600
unset CKPTD_WEBHOOK_URL
rank_start e --socket "$(sock s)" --job st --rank 0 --world 1 --seed 4 --tensors 2 \
	--min-bytes 8M --max-bytes 8M --first 1 --every 1 --count 3
rank_wait "$LAST_PID" e
wait_event r2 stall
ev=$(events_of r2 stall | head -n 1)
log "stall event: $ev"
[ "$(field "$ev" job)" = st ] && [ "$(field "$ev" rank)" = 0 ] || fail "stall: wrong job or rank"
python3 -c "import sys; sys.exit(0 if float('$(field "$ev" seconds)') >= 0.001 else 1)" ||
	fail "stall: seconds below stall_warn_ms"
[ "$(metric s 'ckpt_slot_wait_seconds_total{ckpt_job="st"}')" != 0 ] || fail "slot wait not counted"
# The rank's own reports: saves 2 and 3 waited for the only slot, far
# longer than 1 ms, so at least one reported stall is an event too.
ev=
for i in $(seq 1 120); do
	ev=$(events_of r2 stall | grep -F 'the rank reported' | head -n 1)
	[ -n "$ev" ] && break
	sleep 0.5
done
[ -n "$ev" ] || fail "no stall event for a stall the rank reported"
log "reported stall event: $ev"
case "$(field "$ev" step)" in 1|2|3) ;; *) fail "reported stall: step is '$(field "$ev" step)'" ;; esac
[ "$(field "$ev" job)" = st ] && [ "$(field "$ev" rank)" = 0 ] || fail "reported stall: wrong job or rank"
field "$ev" text | grep -q "job st rank 0: saving step [123] stalled the rank for" ||
	fail "reported stall: text is '$(field "$ev" text)'"
python3 -c "import sys; sys.exit(0 if float('$(field "$ev" seconds)') >= 0.001 else 1)" ||
	fail "reported stall: seconds below stall_warn_ms"
[ "$(metric s 'ckpt_save_stall_seconds_count{ckpt_job="st"}')" = 3 ] ||
	fail "reported stalls: count is $(metric s 'ckpt_save_stall_seconds_count{ckpt_job="st"}'), not 3"
ckptd_stop s
[ -z "$(events_of r2 committed)" ] || fail "webhook_events=stall sent committed events"
grep -qF "$SECRET" "$T/ckptd-s.log" && fail "the webhook token is in ckptd's log"
log "pass"
