#!/bin/bash
# SPDX-License-Identifier: MIT
# A job's takeover runs beside the event loop: while one rank's HELLO waits
# for its job to be taken over, other jobs' ranks connect, save and commit.
# To make a takeover wait, the test holds job "slow"'s OWNER lock itself in
# the name of the daemon under test (its daemon id from the log): ckptd
# then takes it for its own release of the job, still finishing, and waits
# for it (a few seconds at most) instead of refusing.
. "$(dirname "$0")/../integration/lib.sh"
command -v python3 >/dev/null || skip "python3 is not installed"

ROOT=$T/root
ckptd_start a "$ROOT" --keep-last 0
id=$(sed -n 's/.*owner: daemon id=\([0-9a-f]*\).*/\1/p' "$T/ckptd-a.log" | tail -n 1)
# On a ckptd without job ownership there is no id: hold the lock anyway.
mkdir -p "$ROOT/slow"
cat >"$T/hold.py" <<'PY'
import fcntl, os, struct, sys, time
path, daemon, locked, unlock = sys.argv[1:5]
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, ("ckpt-owner 1\nhost=%s\npid=%d\ndaemon=%s\ncluster=default\nnode=0\n"
              "nodes=1\nsince=2026-01-01T00:00:00Z\n" % (os.uname().nodename, os.getpid(),
                                                        daemon)).encode())
# struct flock: l_type, l_whence, l_start, l_len, l_pid (x86-64 layout)
fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhxxxxqqixxxx", fcntl.F_WRLCK, 0, 0, 0, 0))
open(locked, "w").close()
for _ in range(600):
    if os.path.exists(unlock):
        break
    time.sleep(0.01)
os.close(fd)
PY
python3 "$T/hold.py" "$ROOT/slow/OWNER" "${id:-none}" "$T/locked" "$T/unlock" &
EXTRA_PIDS+=("$!")
for i in $(seq 1 100); do
	[ -e "$T/locked" ] && break
	sleep 0.05
done
[ -e "$T/locked" ] || fail "the lock holder did not start"

SLOW=(--socket "$(sock a)" --job slow --seed 3 --tensors 2 --min-bytes 4K --max-bytes 64K)
rank_start slow-0 "${SLOW[@]}" --rank 0 --world 1 --steps 1 --wait --timeout-ms 30000
SLOWPID=$LAST_PID
t0=$(date +%s%N)
run_ranks 2 fast --socket "$(sock a)" --job fast --seed 4 --tensors 2 --min-bytes 4K \
	--max-bytes 64K --steps 1,2 --wait
t1=$(date +%s%N)
expect_committed "$ROOT/fast" "1 2"
log "job fast: 2 steps committed in $(((t1 - t0) / 1000000)) ms while job slow waited"
grep -q "connected" "$T/slow-0.log" &&
	fail "the rank of job slow connected while its job could not be taken over: $(cat "$T/slow-0.log")"
touch "$T/unlock"
rank_wait "$SLOWPID" slow-0
expect_committed "$ROOT/slow" "1"
grep -qx "pid=${CKPTD_PID[a]}" "$ROOT/slow/OWNER" || fail "ckptd did not take job slow over: $(cat "$ROOT/slow/OWNER")"
ckptd_stop a
log "pass"
