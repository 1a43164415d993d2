# SPDX-License-Identifier: MIT
# S3-tier test helpers (bash; sourced after tests/integration/lib.sh): a
# real Ceph RADOS Gateway for the test (tests/s3/radosgw.sh), the AWS CLI
# pointed at it, and waits on what ckptd uploads.
: "${CKPT_S3_HARNESS:?CKPT_S3_HARNESS must name the tests/s3 directory}"

# The machine's own AWS settings must not leak in.
for v in $(compgen -e | grep '^AWS_'); do unset "$v"; done
export AWS_CONFIG_FILE=$T/aws-config AWS_SHARED_CREDENTIALS_FILE=$T/aws-credentials
: >"$AWS_CONFIG_FILE"
: >"$AWS_SHARED_CREDENTIALS_FILE"
export AWS_PAGER=""

RGW_DIR=$T/rgw
rgw_stop() { [ -f "$RGW_DIR/env" ] && bash "$CKPT_S3_HARNESS/radosgw.sh" stop "$RGW_DIR" >/dev/null 2>&1; }
trap '_rc=$?; rgw_stop; (exit $_rc); cleanup' EXIT

# rgw_up: start radosgw, export its endpoint, keys and bucket ($S3_BUCKET).
rgw_up() {
	log "starting radosgw"
	bash "$CKPT_S3_HARNESS/radosgw.sh" start "$RGW_DIR" >"$T/radosgw-start.log" 2>&1 ||
		fail "radosgw did not start: $(tail -n 20 "$T/radosgw-start.log")"
	# shellcheck disable=SC1091
	. "$RGW_DIR/env"
	RGW_ENDPOINT=$AWS_ENDPOINT_URL
	log "radosgw at $RGW_ENDPOINT, bucket $S3_BUCKET"
}

# The AWS CLI: Debian's v2 where installed, else whichever is on PATH.
AWS_CLI=aws
[ -x /usr/bin/aws ] && AWS_CLI=/usr/bin/aws

# aws3 ARGS...: the AWS CLI against radosgw directly (never through a proxy).
aws3() { "$AWS_CLI" --endpoint-url "$RGW_ENDPOINT" "$@"; }

# s3_keys PREFIX: every key under the prefix, one per line, sorted.
s3_keys() {
	aws3 s3api list-objects-v2 --bucket "$S3_BUCKET" --prefix "$1" \
		--query 'Contents[].Key' --output text 2>/dev/null | tr '\t' '\n' | grep -v '^None$' | sort
}

# s3_has KEY
s3_has() { aws3 s3api head-object --bucket "$S3_BUCKET" --key "$1" >/dev/null 2>&1; }

# wait_s3 SECONDS CMD...: poll until CMD succeeds.
wait_s3() {
	local secs=$1 i
	shift
	for i in $(seq 1 $((secs * 2))); do
		"$@" && return 0
		sleep 0.5
	done
	return 1
}

# s3_step_key PREFIX JOB STEP [NAME]
s3_step_key() { printf '%s/%s/step-%010d/%s' "$1" "$2" "$3" "${4:-}"; }

# open_uploads PREFIX: multipart uploads in progress under the prefix.
open_uploads() {
	aws3 s3api list-multipart-uploads --bucket "$S3_BUCKET" --prefix "$1" \
		--query 'Uploads[].Key' --output text 2>/dev/null | tr '\t' '\n' | grep -v '^None$' | grep -c .
}

# same_as_root ROOTJOBDIR PREFIX JOB STEP: download the step with the AWS CLI
# and compare every file with the root's, byte for byte.
same_as_root() {
	local d=$T/dl-$3-$4 f n=0
	rm -rf "$d"
	aws3 s3 cp --quiet --recursive "s3://$S3_BUCKET/$(s3_step_key "$2" "$3" "$4")" "$d" ||
		fail "aws s3 cp of step $4 failed"
	for f in "$(stepdir "$1" "$4")"/*; do
		cmp -s "$f" "$d/$(basename "$f")" || fail "s3 copy of $(basename "$f") (step $4) differs from the root's"
		n=$((n + 1))
	done
	[ "$(ls "$d" | wc -l)" -eq "$n" ] || fail "step $4 on S3 has $(ls "$d" | wc -l) objects, the root $n files"
}
