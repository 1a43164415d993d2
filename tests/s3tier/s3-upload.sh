#!/bin/bash
# SPDX-License-Identifier: MIT
# ckptd uploads committed steps to a real radosgw: multipart shards, the
# manifest last, LATEST; what lands is byte-identical to the root (checked
# with the AWS CLI); S3 retention keeps the newest s3_keep_last and the
# multiples of s3_keep_every; no
# multipart upload is left open; ckpt-restore brings a step back from S3,
# also one that `aws s3 sync` copied there.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-s3.sh"
: "${CKPT_RESTORE:?}"

rgw_up
ROOT=$T/root
OPTS=(--job up --seed 3 --tensors 3 --min-bytes 2M --max-bytes 8M)
ckptd_start d "$ROOT" --keep-last 0 --s3-url "s3://$S3_BUCKET/ci" --s3-part-size 5MiB \
	--s3-parallel 4 --s3-keep-last 2 --s3-keep-every 20
run_ranks 2 save --socket "$(sock d)" "${OPTS[@]}" --steps 10,20,30,40 --wait
expect_committed "$ROOT/up" "10 20 30 40"

wait_s3 120 s3_has "$(s3_step_key ci up 40 MANIFEST.json)" || fail "step 40 never reached S3"
# s3_keep_last 2 keeps 30 and 40, s3_keep_every 20 keeps 20 too; step 10
# leaves S3 (manifest first, then the rest).
step_gone() { [ -z "$(s3_keys "$(s3_step_key ci up "$1")")" ]; }
wait_s3 60 step_gone 10 ||
	fail "step 10 is still on S3 past s3_keep_last: $(s3_keys "$(s3_step_key ci up 10)")"
s3_has "$(s3_step_key ci up 20 MANIFEST.json)" || fail "step 20 (a multiple of s3_keep_every) left S3"
same_as_root "$ROOT/up" ci up 20
same_as_root "$ROOT/up" ci up 30
same_as_root "$ROOT/up" ci up 40
[ "$(aws3 s3 cp "s3://$S3_BUCKET/ci/up/LATEST" - 2>/dev/null)" = 40 ] || fail "LATEST on S3 is not 40"
[ "$(open_uploads ci/)" -eq 0 ] || fail "multipart uploads left open: $(open_uploads ci/)"
grep -q 'info s3: uploaded job=up step=30' "$T/ckptd-d.log" || fail "no upload logged"
# The root kept every step (keep_last 0): S3 retention is separate.
expect_committed "$ROOT/up" "10 20 30 40"

# Metrics: bytes uploaded and the newest step on S3.
m=$(curl -fsS "http://127.0.0.1:$(metrics_port d)/metrics") || fail "metrics scrape failed"
echo "$m" | grep -q '^ckpt_newest_committed_step{ckpt_job="up",tier="s3"} 40' ||
	fail "no newest S3 step in metrics: $(echo "$m" | grep newest)"
echo "$m" | grep -Eq '^ckpt_s3_uploaded_bytes_total\{ckpt_job="up"\} [1-9]' || fail "no uploaded bytes in metrics"
ckptd_stop d

# ckpt-restore from S3 into an empty root: the newest step, verified.
timeout 300 "$CKPT_RESTORE" --no-progress "s3://$S3_BUCKET/ci/up" "$T/froms3" >"$T/restore.log" 2>&1 ||
	fail "ckpt-restore from S3 failed: $(cat "$T/restore.log")"
expect_committed "$T/froms3/up" "40"
for f in "$(stepdir "$ROOT/up" 40)"/*; do
	cmp -s "$f" "$(stepdir "$T/froms3/up" 40)/$(basename "$f")" || fail "restored $(basename "$f") differs"
done
# An explicit step that retention removed from S3 is not there.
timeout 120 "$CKPT_RESTORE" --no-progress "s3://$S3_BUCKET/ci/up@10" "$T/froms3" >"$T/restore10.log" 2>&1
[ $? -eq 3 ] || fail "restoring a step S3 no longer has did not exit 3: $(cat "$T/restore10.log")"

# Interop the other way: a step directory copied with aws s3 sync restores.
aws3 s3 sync --quiet "$(stepdir "$ROOT/up" 10)" "s3://$S3_BUCKET/synced/up/$(basename "$(stepdir "$ROOT/up" 10)")" ||
	fail "aws s3 sync failed"
timeout 300 "$CKPT_RESTORE" --no-progress "s3://$S3_BUCKET/synced/up@10" "$T/fromsync" >"$T/restore-sync.log" 2>&1 ||
	fail "ckpt-restore of an aws s3 sync copy failed: $(cat "$T/restore-sync.log")"
verify "$T/fromsync/up" 10
log "pass"
