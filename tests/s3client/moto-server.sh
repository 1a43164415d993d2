#!/usr/bin/env bash
# Start a moto S3 server on loopback with SigV4 checking on, for the S3
# client tests. Usage (source it):
#   . moto-server.sh; moto_start DIR    # sets MOTO_PID, MOTO_PORT and exports
#                                       # AWS_* for a user allowed s3:*, and
#                                       # creates bucket $MOTO_BUCKET
#   moto_stop                           # kills the server (call from a trap)
# moto must be importable by python3 (scripts/install-deps.sh sees to it).

moto_python() {
	local py
	for py in python3 /usr/bin/python3; do
		if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import moto, boto3' 2>/dev/null; then
			echo "$py"
			return 0
		fi
	done
	return 1
}

moto_start() {
	local dir=$1 py i
	py=$(moto_python) || { echo "moto-server: no python3 that imports moto and boto3" >&2; return 1; }
	MOTO_PORT=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	"$py" -m moto.server -H 127.0.0.1 -p "$MOTO_PORT" >"$dir/moto.log" 2>&1 &
	MOTO_PID=$!
	for i in $(seq 1 300); do
		if "$py" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$MOTO_PORT/moto-api/', timeout=2)" 2>/dev/null; then
			break
		fi
		if ! kill -0 "$MOTO_PID" 2>/dev/null; then
			echo "moto-server: moto exited; log:" >&2
			cat "$dir/moto.log" >&2
			return 1
		fi
		sleep 0.1
	done
	MOTO_BUCKET=ckpt-s3-test
	# With auth still off: an IAM user with a key and an s3:* policy, and the
	# bucket. Then switch SigV4 checking on (POST /moto-api/reset-auth 0).
	"$py" - "$MOTO_PORT" "$MOTO_BUCKET" >"$dir/moto-keys" <<'PY' || return 1
import json, sys, urllib.request
import boto3
port, bucket = sys.argv[1], sys.argv[2]
ep = f"http://127.0.0.1:{port}"
kw = dict(endpoint_url=ep, region_name="us-east-1",
          aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
iam = boto3.client("iam", **kw)
iam.create_user(UserName="ckpt")
policy = iam.create_policy(PolicyName="ckpt-s3", PolicyDocument=json.dumps({
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
iam.attach_user_policy(UserName="ckpt", PolicyArn=policy["Policy"]["Arn"])
key = iam.create_access_key(UserName="ckpt")["AccessKey"]
boto3.client("s3", **kw).create_bucket(Bucket=bucket)
req = urllib.request.Request(f"{ep}/moto-api/reset-auth", data=b"0",
                             headers={"Content-Type": "text/plain"}, method="POST")
urllib.request.urlopen(req).read()
print(key["AccessKeyId"])
print(key["SecretAccessKey"])
PY
	AWS_ACCESS_KEY_ID=$(sed -n 1p "$dir/moto-keys")
	AWS_SECRET_ACCESS_KEY=$(sed -n 2p "$dir/moto-keys")
	export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
	export AWS_ENDPOINT_URL="http://127.0.0.1:$MOTO_PORT" AWS_REGION=us-east-1
	unset AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL_S3
	export MOTO_BUCKET MOTO_PORT
}

moto_stop() {
	if [ -n "${MOTO_PID:-}" ]; then
		kill "$MOTO_PID" 2>/dev/null
		for _ in $(seq 1 50); do
			kill -0 "$MOTO_PID" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$MOTO_PID" 2>/dev/null
		wait "$MOTO_PID" 2>/dev/null
		MOTO_PID=
	fi
}
