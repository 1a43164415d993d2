#!/bin/bash
# SPDX-License-Identifier: MIT
# Bytes are verified before they leave the root, and what is already in S3
# counts only if it was made from the same step:
# - a shard whose bytes no longer match its index (a flipped byte) is not
#   uploaded: the error names job, step, rank and chunk, it is counted,
#   and the step's manifest never reaches S3;
# - an object of the right size but other bytes (left by an earlier run of
#   the step number) is replaced, raw and zstd-compressed;
# - S3 retention keeps the last good copy (step 10, copied there by hand)
#   while the newer steps are not both verified.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-s3.sh"
: "${CKPT_RESTORE:?}"

bash "$CKPT_S3_HARNESS/radosgw.sh" start "$RGW_DIR" >"$T/radosgw-start.log" 2>&1 &
RGW_START=$!

ROOT=$T/root
JOB=$ROOT/v
OPTS=(--job v --seed 8 --tensors 3 --min-bytes 1M --max-bytes 3M)
ckptd_start d "$ROOT" --keep-last 0
run_ranks 2 save --socket "$(sock d)" "${OPTS[@]}" --steps 10,20,30 --wait
ckptd_stop d
expect_committed "$JOB" "10 20 30"

# Flip one byte of rank 1's shard of step 20, inside its first tensor.
python3 - "$(stepdir "$JOB" 20)/rank-000001.shard" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(5000)
    b = f.read(1)
    f.seek(5000)
    f.write(bytes([b[0] ^ 0x5A]))
PY

wait "$RGW_START" || fail "radosgw did not start: $(tail -n 20 "$T/radosgw-start.log")"
# shellcheck disable=SC1091
. "$RGW_DIR/env"
RGW_ENDPOINT=$AWS_ENDPOINT_URL
# Step 10 is on S3 (copied by hand); step 30's rank-0 shard is there with
# the right size and other bytes, raw and compressed.
for p in raw zst; do
	aws3 s3 sync --quiet "$(stepdir "$JOB" 10)" "s3://$S3_BUCKET/$(s3_step_key $p v 10)" ||
		fail "aws s3 sync failed"
done
size=$(stat -c %s "$(stepdir "$JOB" 30)/rank-000000.shard")
head -c "$size" /dev/urandom >"$T/other.shard"
aws3 s3api put-object --bucket "$S3_BUCKET" --key "$(s3_step_key raw v 30 rank-000000.shard)" \
	--body "$T/other.shard" >/dev/null || fail "put-object failed"
aws3 s3api put-object --bucket "$S3_BUCKET" --key "$(s3_step_key zst v 30 rank-000000.shard.zst)" \
	--body "$T/other.shard" >/dev/null || fail "put-object failed"

metric() { curl -fsS "http://127.0.0.1:$(metrics_port d)/metrics" | sed -n "s/^$1 //p"; }

# check_prefix PREFIX: step 30 reached S3 whole and restores bit-exact,
# step 20 did not, step 10 stayed.
check_prefix() {
	local p=$1 i
	wait_s3 90 s3_has "$(s3_step_key "$p" v 30 MANIFEST.json)" || fail "$p: step 30 never reached S3"
	wait_s3 60 grep -q "verification failed job=v step=20 rank=1 file=rank-000001.shard chunk_offset=" \
		"$T/ckptd-d.log" || fail "$p: no verification failure logged for step 20"
	[ "$(metric 'ckpt_s3_verify_failures_total{ckpt_job="v"}')" -ge 1 ] 2>/dev/null ||
		fail "$p: verify failures not counted"
	wait_s3 10 grep -q "s3: upload failed job=v step=20 .*verification failed" "$T/ckptd-d.log" ||
		fail "$p: the failed upload of step 20 is not reported"
	s3_has "$(s3_step_key "$p" v 20 MANIFEST.json)" && fail "$p: step 20 counts as on S3 with a corrupt shard"
	grep -q "uploaded job=v step=20" "$T/ckptd-d.log" && fail "$p: step 20 logged as uploaded"
	s3_has "$(s3_step_key "$p" v 10 MANIFEST.json)" ||
		fail "$p: S3 retention removed step 10, the last good copy before step 30"
	rm -rf "$T/back-$p"
	timeout 120 "$CKPT_RESTORE" --no-progress "s3://$S3_BUCKET/$p/v@30" "$T/back-$p" \
		>"$T/restore-$p.log" 2>&1 || fail "$p: restore of step 30 from S3 failed: $(cat "$T/restore-$p.log")"
	for f in "$(stepdir "$JOB" 30)"/*; do
		cmp -s "$f" "$(stepdir "$T/back-$p/v" 30)/$(basename "$f")" ||
			fail "$p: step 30's $(basename "$f") from S3 differs from the root's"
	done
}

S3=(--keep-last 0 --s3-part-size 5MiB --s3-keep-last 2 --s3-max-attempts 2)
ckptd_start d "$ROOT" "${S3[@]}" --s3-url "s3://$S3_BUCKET/raw"
check_prefix raw
grep -q "object in S3 is not this step's, sending it again job=v step=30 object=rank-000000.shard" \
	"$T/ckptd-d.log" || fail "raw: the foreign object of step 30 was not replaced"
ckptd_stop d
# Each object records the index it was made from (x-amz-meta-ckpt-index-sha256).
want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ranks"][0]["index_sha256"])' \
	"$(stepdir "$JOB" 30)/MANIFEST.json") || fail "no index_sha256 in the manifest"
for o in rank-000000.shard rank-000000.index; do
	got=$(aws3 s3api head-object --bucket "$S3_BUCKET" --key "$(s3_step_key raw v 30 $o)" \
		--query 'Metadata."ckpt-index-sha256"' --output text)
	[ "$got" = "$want" ] || fail "raw: $o records index $got, the manifest $want"
done
# After a restart S3 is confirmed again: step 30's objects match and are
# not sent again.
: >"$T/ckptd-d.log"
ckptd_start d "$ROOT" "${S3[@]}" --s3-url "s3://$S3_BUCKET/raw"
wait_s3 60 grep -q "uploaded job=v step=30" "$T/ckptd-d.log" || fail "raw: step 30 not confirmed after a restart"
grep -q "not this step's.*step=30" "$T/ckptd-d.log" && fail "raw: step 30's own objects were not recognised"
sent=$(sed -n 's/.*uploaded job=v step=30 .* sent=\([0-9]*\) .*/\1/p' "$T/ckptd-d.log")
[ "$sent" -lt 100000 ] || fail "raw: step 30 was sent again ($sent bytes)"
ckptd_stop d
: >"$T/ckptd-d.log"
ckptd_start d "$ROOT" "${S3[@]}" --s3-url "s3://$S3_BUCKET/zst" --s3-compress zstd
check_prefix zst
ckptd_stop d
expect_committed "$JOB" "10 20 30"
log "pass"
