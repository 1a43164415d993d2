#!/bin/bash
# SPDX-License-Identifier: MIT
# s3_compress = zstd on real trainer state (ckpt-train, 2 MPI ranks):
# shards land on S3 as compressed objects (smaller than the root's), the
# S3 manifest says so, ckpt-restore brings them back byte-identical, the
# job resumes from S3 alone after its root directory is lost, and a
# damaged frame is caught by its checksum.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/../trainer/lib-train.sh"
. "$(dirname "$0")/lib-s3.sh"
: "${CKPT_RESTORE:?}"

rgw_up
ROOT=$T/root
S3=(--s3-url "s3://$S3_BUCKET/z" --s3-part-size 5MiB --s3-keep-last 0 --s3-compress zstd)
ckptd_start d "$ROOT" --keep-last 0 "${S3[@]}"
MODEL=(--data "$CKPT_TRAIN_DATA" --ctx 8 --embd 32 --hidden 512 --layers 3 --batch 2 --seq 16
	--lr 3e-3 --warmup 5 --seed 3)
train_run 2 train1 "${MODEL[@]}" --steps 40 --ckpt-every 20 --socket "$(sock d)" --job tz --no-resume
expect_committed "$ROOT/tz" "20 40"
wait_s3 180 s3_has "$(s3_step_key z tz 40 MANIFEST.json)" || fail "step 40 never reached S3"

keys=$(s3_keys "$(s3_step_key z tz 40)")
echo "$keys" | grep -q 'rank-000000.shard.zst$' || fail "no compressed shard object: $keys"
echo "$keys" | grep -q 'rank-000000.shard$' && fail "an uncompressed shard object too: $keys"
aws3 s3 cp "s3://$S3_BUCKET/$(s3_step_key z tz 40 MANIFEST.json)" "$T/s3-manifest.json" >/dev/null ||
	fail "cannot fetch the S3 manifest"
grep -q '"s3_encoding": "zstd"' "$T/s3-manifest.json" || fail "the S3 manifest does not record the compression"
raw=$(stat -c %s "$(stepdir "$ROOT/tz" 40)/rank-000000.shard")
z=$(aws3 s3api head-object --bucket "$S3_BUCKET" --key "$(s3_step_key z tz 40 rank-000000.shard.zst)" \
	--query ContentLength --output text)
log "rank 0 shard: $raw bytes in the root, $z on S3"
[ "$z" -lt "$raw" ] || fail "the compressed shard ($z) is not smaller than the raw one ($raw)"

# ckpt-restore decompresses: the same bytes as the root, the root's manifest.
timeout 300 "$CKPT_RESTORE" --no-progress "s3://$S3_BUCKET/z/tz" "$T/back" >"$T/restore.log" 2>&1 ||
	fail "ckpt-restore of a compressed step failed: $(cat "$T/restore.log")"
for f in "$(stepdir "$ROOT/tz" 40)"/*; do
	cmp -s "$f" "$(stepdir "$T/back/tz" 40)/$(basename "$f")" || fail "restored $(basename "$f") differs"
done

# The root directory is lost: the job resumes from S3 alone and goes on.
ckptd_stop d
rm -rf "${ROOT:?}/tz"
ckptd_start d "$ROOT" --keep-last 0 "${S3[@]}"
train_run 2 train2 "${MODEL[@]}" --steps 60 --ckpt-every 20 --socket "$(sock d)" --job tz
grep -q 'resumed from step 40' "$T/train2.log" || fail "the job did not resume from step 40 on S3"
grep -q 'fetched from S3 job=tz step=40' "$T/ckptd-d.log" || fail "ckptd did not fetch step 40 from S3"
expect_committed "$ROOT/tz" "40 60"

# One flipped byte in a frame: caught, named, nothing restored.
obj="$(s3_step_key z tz 40 rank-000001.shard.zst)"
aws3 s3 cp "s3://$S3_BUCKET/$obj" "$T/z1" >/dev/null || fail "cannot fetch the compressed shard"
b=$(od -An -tu1 -j 200 -N 1 "$T/z1" | tr -d ' ')
printf "$(printf '\\%03o' $((b ^ 0x21)))" | dd of="$T/z1" bs=1 seek=200 conv=notrunc status=none
aws3 s3 cp "$T/z1" "s3://$S3_BUCKET/$obj" >/dev/null || fail "cannot put the damaged shard back"
timeout 300 "$CKPT_RESTORE" --no-progress --exact "s3://$S3_BUCKET/z/tz@40" "$T/back2" >"$T/restore2.log" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "restoring a damaged compressed shard exited $rc: $(cat "$T/restore2.log")"
grep -q 'frame damaged' "$T/restore2.log" || fail "the damage is not named: $(cat "$T/restore2.log")"
ckptd_stop d
log "pass"
