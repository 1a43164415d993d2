#!/bin/bash
# SPDX-License-Identifier: MIT
# kill -9 of ckptd in the middle of a multipart upload: after the restart
# the upload resumes (parts already in S3 are kept), the step lands
# byte-identical, and no multipart upload is left open. A multipart upload
# under the job's prefix that belongs to no step (an orphan) is aborted.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-s3.sh"

rgw_up
ROOT=$T/root
S3=(--s3-url "s3://$S3_BUCKET/rs" --s3-part-size 5MiB --s3-parallel 2 --s3-keep-last 0)

# An orphan: an upload nobody will finish.
aws3 s3api create-multipart-upload --bucket "$S3_BUCKET" --key rs/up/step-0000000001/rank-000000.shard \
	>/dev/null || fail "could not create the orphan upload"
[ "$(open_uploads rs/)" -eq 1 ] || fail "the orphan upload is not listed"

# Slow uploads (1 MiB/s), so the kill lands mid-upload.
ckptd_start d "$ROOT" --keep-last 0 "${S3[@]}" --s3-max-rate 1MiB
run_ranks 2 save --socket "$(sock d)" --job up --seed 5 --tensors 2 --min-bytes 8M --max-bytes 12M \
	--steps 10 --wait
has_parts() {
	local id
	id=$(aws3 s3api list-multipart-uploads --bucket "$S3_BUCKET" --prefix rs/up/step-0000000010/ \
		--query 'Uploads[0].[Key,UploadId]' --output text 2>/dev/null) || return 1
	[ -n "$id" ] && [ "$id" != "None" ] || return 1
	set -- $id
	[ "$(aws3 s3api list-parts --bucket "$S3_BUCKET" --key "$1" --upload-id "$2" \
		--query 'length(Parts)' --output text 2>/dev/null)" -ge 1 ] 2>/dev/null
}
wait_s3 120 has_parts || fail "no part of step 10 was ever uploaded"
s3_has "$(s3_step_key rs up 10 MANIFEST.json)" && fail "step 10 finished before the kill: the test needs a slower upload"
ckptd_kill9 d
log "killed ckptd mid-upload"

ckptd_start d "$ROOT" --keep-last 0 "${S3[@]}"
wait_s3 180 s3_has "$(s3_step_key rs up 10 MANIFEST.json)" || fail "step 10 never reached S3 after the restart"
same_as_root "$ROOT/up" rs up 10
[ "$(open_uploads rs/)" -eq 0 ] || fail "multipart uploads left open: $(open_uploads rs/)"
grep -q 'aborting orphaned multipart upload job=up key=rs/up/step-0000000001/rank-000000.shard' \
	"$T/ckptd-d.log" || fail "the orphan upload was not aborted"
# The restart found the unfinished upload and reused what it had sent.
grep -q 'scanned job=up .*open_uploads=[1-9]' "$T/ckptd-d.log" || fail "the restart did not see the open upload"
grep -q 'reused_parts=[1-9]' "$T/ckptd-d.log" || fail "no part was reused after the restart"
ckptd_stop d
log "pass"
