#!/usr/bin/env bash
# A moto S3 server on loopback with SigV4 checking switched on, for tests.
#
#   moto.sh start DIR [BUCKET]   start moto under DIR, create an IAM user with
#                                an allow-all policy and an access key, turn
#                                authentication on, create BUCKET (default
#                                ckpt-test), write DIR/env
#   moto.sh stop DIR             stop it, empty DIR
#   moto.sh status DIR           exit 0 when it answers
#
# DIR/env has the same variables as radosgw.sh's: AWS_ACCESS_KEY_ID,
# AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, AWS_REGION, AWS_DEFAULT_REGION,
# S3_BUCKET (and S3_SERVER=moto).
#
# moto keeps everything in memory (tens of MiB/s): use it for protocol and
# fault tests, radosgw.sh for volume.
#
# Environment:
#   MOTO_PYTHON         a python3 that has moto (default: python3, then
#                       /usr/bin/python3)
#   MOTO_START_TIMEOUT  seconds to wait for the server (default 60)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
timeout_s=${MOTO_START_TIMEOUT:-60}
marker='# Written by tests/s3/moto.sh'

die() {
	echo "moto.sh: $*" >&2
	exit 1
}

find_python() {
	local p
	for p in ${MOTO_PYTHON:-} python3 /usr/bin/python3; do
		if command -v "$p" >/dev/null && "$p" -c 'import moto.server, boto3' 2>/dev/null; then
			command -v "$p"
			return 0
		fi
	done
	return 1
}

alive() {
	local pid
	[ -f "$1/moto.pid" ] || return 1
	pid=$(cat "$1/moto.pid")
	[ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "moto.server"
}

kill_server() {
	local d=$1 pid
	alive "$d" || return 0
	pid=$(cat "$d/moto.pid")
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 1 50); do
		alive "$d" || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	for _ in $(seq 1 100); do
		alive "$d" || return 0
		sleep 0.1
	done
	echo "moto.sh: moto (pid $pid) survives SIGKILL" >&2
	return 1
}

cmd_start() {
	local dir=$1 bucket=${2:-ckpt-test} py start_ns
	start_ns=$(date +%s%N)
	py=$(find_python) || die "no python3 with moto and boto3 (set MOTO_PYTHON)"
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	[ -e "$dir/instance" ] && die "$dir already holds an instance (stop it first)"
	echo "$marker" >"$dir/instance"
	local port endpoint
	port=$("$py" "$here/s3util.py" freeport 1)
	endpoint=http://127.0.0.1:$port

	rc=0
	trap 'rc=$?; if [ $rc -ne 0 ]; then echo "---- tail of $dir/moto.log ----" >&2; tail -n 25 "$dir/moto.log" >&2; kill_server "$dir" || true; fi' EXIT

	# moto would otherwise pick up credentials or a profile from the caller.
	env -u AWS_PROFILE -u AWS_SESSION_TOKEN "$py" -m moto.server -H 127.0.0.1 -p "$port" \
		</dev/null >>"$dir/moto.log" 2>&1 &
	echo $! >"$dir/moto.pid"
	"$py" "$here/s3util.py" wait-http "$endpoint/moto-api/" "$timeout_s" ||
		die "moto not serving on $endpoint"
	alive "$dir" || die "moto exited during start"

	# While authentication is still off, any credentials are accepted:
	# create the user, its allow-all policy and its key, then switch
	# authentication on and create the bucket with the new key (which
	# proves the key works).
	(
		umask 077
		env -u AWS_PROFILE -u AWS_SESSION_TOKEN \
			AWS_ACCESS_KEY_ID=bootstrap AWS_SECRET_ACCESS_KEY=bootstrap \
			AWS_EC2_METADATA_DISABLED=true \
			"$py" - "$endpoint" "$bucket" >"$dir/env" 2>>"$dir/moto.log" <<'PY'
import json, shlex, sys, urllib.request
import boto3
endpoint, bucket = sys.argv[1], sys.argv[2]
iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1")
iam.create_user(UserName="ckpt-test")
iam.put_user_policy(UserName="ckpt-test", PolicyName="allow-all", PolicyDocument=json.dumps(
    {"Version": "2012-10-17",
     "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
key = iam.create_access_key(UserName="ckpt-test")["AccessKey"]
req = urllib.request.Request(endpoint + "/moto-api/reset-auth", data=b"0", method="POST",
                             headers={"Content-Type": "text/plain"})
urllib.request.urlopen(req, timeout=30).read()
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                  aws_access_key_id=key["AccessKeyId"],
                  aws_secret_access_key=key["SecretAccessKey"])
s3.create_bucket(Bucket=bucket)
print("export AWS_ACCESS_KEY_ID=%s" % shlex.quote(key["AccessKeyId"]))
print("export AWS_SECRET_ACCESS_KEY=%s" % shlex.quote(key["SecretAccessKey"]))
PY
	) || die "setting up the user, authentication or bucket $bucket failed"
	cat >>"$dir/env" <<EOF
export AWS_ENDPOINT_URL=$endpoint
export AWS_REGION=us-east-1
export AWS_DEFAULT_REGION=us-east-1
export AWS_EC2_METADATA_DISABLED=true
export S3_BUCKET=$bucket
export S3_SERVER=moto
EOF
	trap - EXIT
	local ms=$((($(date +%s%N) - start_ns) / 1000000))
	echo "moto.sh: $endpoint ready in $((ms / 1000)).$(printf %03d $((ms % 1000))) s, bucket $bucket; source $dir/env"
}

cmd_stop() {
	local d=$1
	[ -d "$d" ] || return 0
	d=$(cd "$d" && pwd)
	if [ ! -f "$d/instance" ] || [ "$(head -n 1 "$d/instance")" != "$marker" ]; then
		[ -z "$(ls -A "$d")" ] && return 0
		die "$d is not a moto.sh instance; not touching it"
	fi
	kill_server "$d" || die "moto of $d would not stop; left $d in place"
	find "$d" -mindepth 1 -delete
}

cmd_status() {
	local d=$1
	[ -f "$d/env" ] || return 1
	# shellcheck disable=SC1091
	(source "$d/env" && python3 "$here/s3util.py" wait-http "$AWS_ENDPOINT_URL/moto-api/" 5 2>/dev/null)
}

case "${1:-}" in
start) [ $# -ge 2 ] || die "usage: moto.sh start DIR [BUCKET]"; cmd_start "$2" "${3:-}" ;;
stop) [ $# -eq 2 ] || die "usage: moto.sh stop DIR"; cmd_stop "$2" ;;
status) [ $# -eq 2 ] || die "usage: moto.sh status DIR"; cmd_status "$2" ;;
*) die "usage: moto.sh start DIR [BUCKET] | stop DIR | status DIR" ;;
esac
