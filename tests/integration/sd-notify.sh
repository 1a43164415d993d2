#!/bin/bash
# SPDX-License-Identifier: MIT
# ckptd speaks the service manager's notify protocol (sd_notify(3)), as
# ckptd.service (Type=notify) relies on: READY=1 comes only once the control
# socket accepts connections (a planted uncommitted step is removed when the
# job's first rank connects, not at start-up), WATCHDOG=1 pings come while
# $WATCHDOG_USEC is set, and SIGTERM sends STOPPING=1 before a clean exit.
# A stand-in service manager (python3, standard library) reads the datagrams.
. "$(dirname "$0")/lib.sh"

[ "${CKPT_HAVE_SYSTEMD:-0}" = 1 ] ||
	skip "ckptd was built without libsystemd (-Dsystemd), so it sends no notifications"
command -v python3 >/dev/null || skip "python3 is not installed"

ROOT=$T/root
NOTIFY=$T/notify.sock
EVENTS=$T/notify-events.log
CONTROL=$(sock d)
PLANTED=$(stepdir "$ROOT/nj" 7)

# An interrupted save from an earlier run: the job's takeover removes it.
mkdir -p "$PLANTED"
echo partial >"$PLANTED/rank-000000.shard"

# The listener writes one line per datagram field ("READY=1", ...). On
# READY=1 it checks, at that instant, that the control socket accepts a
# connection and that the planted step is gone, and writes the verdicts.
cat >"$T/listener.py" <<'EOF'
import os, socket, sys

notify, control, planted = sys.argv[1:4]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(notify)
s.settimeout(120)
while True:
    try:
        data = s.recv(4096).decode("utf-8", "replace")
    except socket.timeout:
        print("LISTENER-TIMEOUT", flush=True)
        break
    for field in data.split("\n"):
        print(field, flush=True)
    if "READY=1" in data.split("\n"):
        c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            c.connect(control)
            print("CHECK connect=ok", flush=True)
        except OSError as e:
            print("CHECK connect=failed:%s" % e, flush=True)
        c.close()
        print("CHECK planted=%s" % ("present" if os.path.exists(planted) else "gone"),
              flush=True)
    if "STOPPING=1" in data.split("\n"):
        break
EOF
python3 "$T/listener.py" "$NOTIFY" "$CONTROL" "$PLANTED" >"$EVENTS" 2>"$T/listener.log" &
LISTENER=$!
EXTRA_PIDS+=("$LISTENER")
for _ in $(seq 1 200); do
	[ -S "$NOTIFY" ] && break
	kill -0 "$LISTENER" 2>/dev/null || fail "the notify listener exited early"
	sleep 0.05
done
[ -S "$NOTIFY" ] || fail "the notify listener did not bind $NOTIFY"

# wait_event PATTERN SECONDS: until a line of the event log matches.
wait_event() {
	for _ in $(seq 1 $(($2 * 10))); do
		grep -q -- "$1" "$EVENTS" && return 0
		sleep 0.1
	done
	return 1
}

# A 300 ms watchdog: pings every 150 ms while the loop is idle.
NOTIFY_SOCKET=$NOTIFY WATCHDOG_USEC=300000 ckptd_start d "$ROOT" --staging-bytes 64MiB
wait_event '^READY=1$' 30 || fail "no READY=1 within 30 s (events: $(tr '\n' ' ' <"$EVENTS"))"
wait_event '^CHECK planted=' 10 || fail "the listener did not check at READY"
# The first READY=1 is the one that counts.
[ "$(grep -m1 '^CHECK connect=' "$EVENTS")" = "CHECK connect=ok" ] ||
	fail "READY=1 came before the control socket accepted: $(grep -m1 '^CHECK connect' "$EVENTS")"
[ "$(grep -m1 '^CHECK planted=' "$EVENTS")" = "CHECK planted=present" ] ||
	fail "ckptd recovered job nj at start-up, before any rank of it connected"
[ "$(grep -c '^READY=1$' "$EVENTS")" -eq 1 ] || fail "READY=1 sent more than once"
grep -q '^STATUS=recovering checkpoint root' "$EVENTS" || fail "no STATUS= line for recovery"
[ "$(grep -n '^STATUS=recovering' "$EVENTS" | head -1 | cut -d: -f1)" -lt \
  "$(grep -n '^READY=1$' "$EVENTS" | head -1 | cut -d: -f1)" ] ||
	fail "the recovery STATUS= came after READY=1"

# The daemon serves: a save commits.
run_ranks 1 save --socket "$CONTROL" --job nj --steps 10 --wait
expect_committed "$ROOT/nj" "10"
[ -e "$PLANTED" ] && fail "the takeover of job nj did not remove the uncommitted step $PLANTED"

# Watchdog pings keep coming while ckptd idles (3 more at least).
before=$(grep -c '^WATCHDOG=1$' "$EVENTS")
for _ in $(seq 1 200); do
	[ "$(grep -c '^WATCHDOG=1$' "$EVENTS")" -ge $((before + 3)) ] && break
	sleep 0.1
done
[ "$(grep -c '^WATCHDOG=1$' "$EVENTS")" -ge $((before + 3)) ] ||
	fail "fewer than 3 WATCHDOG=1 pings in 20 s with WATCHDOG_USEC=300000"

ckptd_stop d
wait_event '^STOPPING=1$' 10 || fail "no STOPPING=1 after SIGTERM"
wait "$LISTENER"
grep -q LISTENER-TIMEOUT "$EVENTS" && fail "the listener timed out"
log "events: $(grep -c . "$EVENTS") lines, $(grep -c '^WATCHDOG=1$' "$EVENTS") watchdog pings"
log "pass"
