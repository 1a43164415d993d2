#!/usr/bin/env bash
# Self-test of an S3 test-server harness: harness-test.sh radosgw|moto
#
# Starts the server once with tests/s3/<server>.sh, then with the aws CLI
# (an independent client) and the generated credentials: put, get, list,
# a multipart upload, a wrong secret and an unknown key rejected (proves
# SigV4 is checked), the same requests through faultproxy.py with no faults
# (proves the server accepts the Host the client signed for the proxy),
# and finally that stop leaves no process and an empty directory.
set -uo pipefail

server=${1:?usage: harness-test.sh radosgw|moto}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-s3-$server.XXXXXX")
srv=$tmp/srv
proxy_pid=

cleanup() {
	[ -n "$proxy_pid" ] && kill "$proxy_pid" 2>/dev/null
	"$here/$server.sh" stop "$srv" >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
	echo "FAIL: $*" >&2
	exit 1
}
ok() {
	echo "ok: $*"
}

command -v aws >/dev/null || fail "aws CLI not found (scripts/install-deps.sh installs awscli)"
if [ "$server" = moto ] && ! python3 -c 'import moto.server, boto3' 2>/dev/null &&
	! /usr/bin/python3 -c 'import moto.server, boto3' 2>/dev/null; then
	# Debian 12 has no moto package: only a python that ships it can run this.
	echo "SKIP: no python3 with moto and boto3 on this machine"
	exit 77
fi

# Keep the caller's aws configuration out of the test.
export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_PAGER=
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL_S3

start_ns=$(date +%s%N)
"$here/$server.sh" start "$srv" || fail "$server.sh start"
echo "start took $((($(date +%s%N) - start_ns) / 1000000)) ms"
[ -f "$srv/env" ] || fail "no $srv/env"
# shellcheck disable=SC1091
source "$srv/env"
for v in AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_ENDPOINT_URL AWS_REGION S3_BUCKET; do
	[ -n "${!v:-}" ] || fail "$v missing from $srv/env"
done
case "$AWS_ENDPOINT_URL" in
http://127.0.0.1:*) ;;
*) fail "endpoint $AWS_ENDPOINT_URL is not on loopback" ;;
esac
[ "$(stat -c %a "$srv/env")" = 600 ] || fail "$srv/env is readable by others"
ok "$server up at $AWS_ENDPOINT_URL, bucket $S3_BUCKET"

s3api() {
	aws --endpoint-url "$endpoint" s3api "$@"
}
endpoint=$AWS_ENDPOINT_URL

head -c 100000 /dev/urandom >"$tmp/small"
head -c $((12 * 1024 * 1024 + 12345)) /dev/urandom >"$tmp/big"

# roundtrip LABEL: put, get, list and a multipart copy against $endpoint.
roundtrip() {
	local label=$1 key=ckpt/$1/shard-0.bin
	s3api put-object --bucket "$S3_BUCKET" --key "$key" --body "$tmp/small" >"$tmp/out" 2>&1 ||
		fail "$label: put-object: $(cat "$tmp/out")"
	s3api get-object --bucket "$S3_BUCKET" --key "$key" "$tmp/small.back" >"$tmp/out" 2>&1 ||
		fail "$label: get-object: $(cat "$tmp/out")"
	cmp -s "$tmp/small" "$tmp/small.back" || fail "$label: object read back differs"
	# No --prefix: moto rejects a correctly signed prefix=ckpt%2F (README.md).
	s3api list-objects-v2 --bucket "$S3_BUCKET" --query 'Contents[].Key' --output text \
		>"$tmp/list" 2>&1 || fail "$label: list-objects-v2: $(cat "$tmp/list")"
	tr '\t' '\n' <"$tmp/list" | grep -qxF "$key" || fail "$label: $key not listed: $(cat "$tmp/list")"
	# 12 MiB is over the CLI's 8 MiB multipart threshold.
	aws --endpoint-url "$endpoint" s3 cp --only-show-errors "$tmp/big" "s3://$S3_BUCKET/ckpt/$label/big" \
		>"$tmp/out" 2>&1 || fail "$label: multipart upload: $(cat "$tmp/out")"
	aws --endpoint-url "$endpoint" s3 cp --only-show-errors "s3://$S3_BUCKET/ckpt/$label/big" "$tmp/big.back" \
		>"$tmp/out" 2>&1 || fail "$label: download: $(cat "$tmp/out")"
	cmp -s "$tmp/big" "$tmp/big.back" || fail "$label: multipart object read back differs"
	ok "$label: put/get/list and a 12 MiB multipart upload are byte-identical"
}
roundtrip direct

# A wrong secret must be refused. Some aws CLI versions crash on radosgw's
# empty <Message>, so the error code is read from the --debug log.
if AWS_SECRET_ACCESS_KEY=wrong-secret-0123456789 s3api list-objects-v2 --bucket "$S3_BUCKET" \
	--debug >"$tmp/out" 2>&1; then
	fail "a wrong secret was accepted"
fi
grep -q SignatureDoesNotMatch "$tmp/out" || fail "wrong secret: no SignatureDoesNotMatch: $(tail -5 "$tmp/out")"
ok "a wrong secret is rejected with SignatureDoesNotMatch"
if AWS_ACCESS_KEY_ID=AKIANOSUCHKEY0000000 s3api list-objects-v2 --bucket "$S3_BUCKET" \
	--debug >"$tmp/out" 2>&1; then
	fail "an unknown access key was accepted"
fi
grep -q InvalidAccessKeyId "$tmp/out" || fail "unknown key: no InvalidAccessKeyId: $(tail -5 "$tmp/out")"
ok "an unknown access key is rejected with InvalidAccessKeyId"

# Through the fault proxy (no faults): the client signs the proxy's Host.
python3 "$here/faultproxy.py" --upstream "$AWS_ENDPOINT_URL" --port-file "$tmp/proxy.port" \
	>"$tmp/proxy.log" 2>&1 &
proxy_pid=$!
for _ in $(seq 1 100); do
	[ -s "$tmp/proxy.port" ] && break
	sleep 0.1
done
[ -s "$tmp/proxy.port" ] || fail "faultproxy did not start: $(cat "$tmp/proxy.log")"
endpoint=http://127.0.0.1:$(cat "$tmp/proxy.port")
roundtrip via-proxy
kill "$proxy_pid"
wait "$proxy_pid" 2>/dev/null
proxy_pid=

# stop: nothing of this instance may survive, and the directory is emptied.
"$here/$server.sh" stop "$srv" || fail "$server.sh stop"
if [ "$server" = radosgw ]; then
	pattern=$srv/ceph.conf
else
	pattern="moto.server -H 127.0.0.1 -p ${AWS_ENDPOINT_URL##*:}"
fi
sleep 0.5
left=$(pgrep -f -- "$pattern" || true)
[ -z "$left" ] || fail "processes left after stop: $(ps -o pid,stat,args -p "${left//$'\n'/,}")"
[ -z "$(ls -A "$srv")" ] || fail "$srv not emptied: $(ls -A "$srv")"
python3 "$here/s3util.py" wait-http "$AWS_ENDPOINT_URL/" 1 2>/dev/null && fail "endpoint still answers after stop"
ok "stop leaves no process, no listener and an empty directory"
echo "PASS"
