#!/bin/bash
# SPDX-License-Identifier: MIT
# ckptd restores from S3 when the root cannot: a rank whose root copy of a
# step is damaged gets the step (not an older one) by fetching its files
# from S3, which also repairs the root; after the job's directory is lost,
# every rank restores the newest step from S3 and the step is committed
# in the root again.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-s3.sh"

rgw_up
ROOT=$T/root
OPTS=(--job rs --seed 11 --tensors 3 --min-bytes 1M --max-bytes 7M)
S3=(--s3-url "s3://$S3_BUCKET/rst" --s3-part-size 5MiB --s3-keep-last 0)
ckptd_start d "$ROOT" --keep-last 0 "${S3[@]}"
run_ranks 2 save --socket "$(sock d)" "${OPTS[@]}" --steps 10,20 --wait
wait_s3 120 s3_has "$(s3_step_key rst rs 20 MANIFEST.json)" || fail "step 20 never reached S3"

# Damage rank 1's shard of step 20 in the root.
SHARD=$(stepdir "$ROOT/rs" 20)/rank-000001.shard
b=$(od -An -tu1 -j 100 -N 1 "$SHARD" | tr -d ' ')
printf "$(printf '\\%03o' $((b ^ 0x5a)))" | dd of="$SHARD" bs=1 seek=100 conv=notrunc status=none
rank_start r1 --socket "$(sock d)" "${OPTS[@]}" --rank 1 --world 2 --restore 20 --expect-step 20
rank_wait "$LAST_PID" r1
grep -q 'root copy does not restore, fetching it from S3 job=rs step=20 rank=1' "$T/ckptd-d.log" ||
	fail "ckptd did not say it fetched the damaged step from S3"
grep -q 'fetched from S3 job=rs step=20 rank=1' "$T/ckptd-d.log" || fail "no fetch from S3 logged"
verify "$ROOT/rs" 20
ckptd_stop d

# The job's directory is lost: both ranks restore the newest step from S3.
rm -rf "${ROOT:?}/rs"
ckptd_start d "$ROOT" --keep-last 0 "${S3[@]}"
for r in 0 1; do
	rank_start restore-$r --socket "$(sock d)" "${OPTS[@]}" --rank $r --world 2 --restore latest --expect-step 20
	pids[$r]=$LAST_PID
done
for r in 0 1; do rank_wait "${pids[$r]}" restore-$r; done
grep -q 'committed again from S3 job=rs step=20' "$T/ckptd-d.log" || fail "step 20 was not committed in the root again"
expect_committed "$ROOT/rs" "20"
expect_latest "$ROOT/rs" 20
verify "$ROOT/rs" 20
# The job saves on from there.
run_ranks 2 save2 --socket "$(sock d)" "${OPTS[@]}" --steps 30 --wait
expect_committed "$ROOT/rs" "20 30"

# A step that exists nowhere: a clear refusal.
rank_start missing --socket "$(sock d)" "${OPTS[@]}" --rank 0 --world 2 --restore 25 --expect-step 25
wait "$LAST_PID" && fail "restoring a step that exists nowhere succeeded"
ckptd_alive d || fail "ckptd died"
ckptd_stop d
log "pass"
