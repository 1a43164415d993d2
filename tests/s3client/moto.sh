#!/usr/bin/env bash
# Integration: every S3 client operation against a moto S3 server with
# SigV4 checking on (test-s3-moto, given as $1). moto is required: a
# machine without it has not run scripts/install-deps.sh, which is a
# failure, not a skip.
set -u
here=$(dirname "$0")
. "$here/moto-server.sh"

test_bin=$1
work=$(mktemp -d /tmp/ckpt-s3-moto.XXXXXX)
flaky_pid=
cleanup() {
	moto_stop
	if [ -n "$flaky_pid" ]; then
		kill "$flaky_pid" 2>/dev/null
		wait "$flaky_pid" 2>/dev/null
	fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

if ! moto_python >/dev/null; then
	echo "moto.sh: FAIL: no python3 that imports moto and boto3 (run scripts/install-deps.sh)" >&2
	exit 1
fi
if ! moto_start "$work"; then
	echo "moto.sh: FAIL: could not start moto" >&2
	exit 1
fi
# A port with nothing listening, for the connection-refused retry check.
S3_DEAD_PORT=$("$(moto_python)" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export S3_DEAD_PORT
# The fault-injecting stand-in for the retry checks.
"$(moto_python)" "$here/flaky-s3.py" "$work/flaky-port" 2>"$work/flaky.log" &
flaky_pid=$!
for _ in $(seq 1 100); do
	[ -s "$work/flaky-port" ] && break
	sleep 0.1
done
if [ ! -s "$work/flaky-port" ]; then
	echo "moto.sh: FAIL: flaky-s3.py did not start" >&2
	cat "$work/flaky.log" >&2
	exit 1
fi
S3_FLAKY_PORT=$(cat "$work/flaky-port")
export S3_FLAKY_PORT
"$test_bin"
rc=$?
if [ $rc -ne 0 ]; then
	echo "moto.sh: test failed ($rc); moto log tail:" >&2
	tail -n 30 "$work/moto.log" >&2
	exit 1
fi
exit 0
