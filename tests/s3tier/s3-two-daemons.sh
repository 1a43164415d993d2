#!/bin/bash
# SPDX-License-Identifier: MIT
# Two ckptd on one root with one S3 bucket and prefix: each uploads, scans
# and prunes on S3 only the jobs it owns. Daemon a owns job ja (s3_keep_last
# 4); daemon b owns job jb (s3_keep_last 1) and is killed with kill -9 in
# the middle of jb's upload, then restarted with no rank connecting: b
# resumes jb's upload by itself (its OWNER names b's holder), then lets jb
# go, and at no time scans, uploads or deletes anything of ja (its log
# never names ja; ja's four steps stay on S3).
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-s3.sh"

rgw_up
ROOT=$T/root
S3=(--keep-last 0 --s3-url "s3://$S3_BUCKET/two" --s3-part-size 5MiB --s3-parallel 2)
ckptd_start a "$ROOT" "${S3[@]}" --s3-keep-last 4
run_ranks 1 a-save --socket "$(sock a)" --job ja --seed 11 --tensors 2 --min-bytes 64K \
	--max-bytes 256K --steps 1,2,3,4 --wait
for s in 1 2 3 4; do
	wait_s3 60 s3_has "$(s3_step_key two ja $s MANIFEST.json)" || fail "step $s of ja never reached S3"
done
# a lets ja go once its uploads are done (an older ckptd never says so).
wait_s3 10 grep_log ckptd-a "job released job=ja" || log "a did not log the release of ja"

# b, slow (1 MiB/s): jb's first step is still going up when b is killed.
ckptd_start b "$ROOT" "${S3[@]}" --s3-keep-last 1 --s3-max-rate 1MiB
run_ranks 1 b-save --socket "$(sock b)" --job jb --seed 12 --tensors 2 --min-bytes 3M \
	--max-bytes 4M --steps 1,2 --wait
s3_has "$(s3_step_key two jb 2 MANIFEST.json)" &&
	fail "step 2 of jb reached S3 before the kill: the test needs a slower upload"
ckptd_kill9 b
log "killed b mid-upload"
ckptd_start b "$ROOT" "${S3[@]}" --s3-keep-last 1
wait_s3 60 s3_has "$(s3_step_key two jb 2 MANIFEST.json)" ||
	fail "b did not resume the upload of its job jb after the restart (no rank connected)"
same_as_root "$ROOT/jb" two jb 2
wait_s3 20 grep_log ckptd-b "job released job=jb" || released=no

errs=
grep -q 'job=ja' "$T/ckptd-b.log" &&
	errs+="b's log names a's job ja: $(grep 'job=ja' "$T/ckptd-b.log" | head -3 | tr '\n' '|'); "
for s in 1 2 3 4; do
	s3_has "$(s3_step_key two ja $s MANIFEST.json)" ||
		errs+="step $s of ja left S3 (b's s3_keep_last is 1, a's 4); "
done
[ -z "$errs" ] || fail "$errs"
[ "${released:-yes}" = yes ] || fail "b did not let jb go once its uploads were done"
expect_committed "$ROOT/ja" "1 2 3 4"
ckptd_stop b
ckptd_stop a
log "pass"
