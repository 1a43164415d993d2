#!/bin/bash
# SPDX-License-Identifier: MIT
# Wrong credentials, then a missing bucket: the root tier keeps committing,
# the log says what is wrong (naming the bucket and the S3 error), metrics
# count it, and nothing is retried in a storm. No secret reaches the log.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-s3.sh"

rgw_up
ROOT=$T/root
GOOD_SECRET=$AWS_SECRET_ACCESS_KEY
BAD_SECRET=wrong${GOOD_SECRET:5}
AWS_SECRET_ACCESS_KEY=$BAD_SECRET ckptd_start d "$ROOT" --keep-last 0 --s3-url "s3://$S3_BUCKET/au" \
	--s3-part-size 5MiB
run_ranks 2 save --socket "$(sock d)" --job au --seed 2 --tensors 2 --min-bytes 1M --max-bytes 3M \
	--steps 10,20,30 --wait
expect_committed "$ROOT/au" "10 20 30"
wait_s3 30 grep -q 'SignatureDoesNotMatch' "$T/ckptd-d.log" || fail "no SignatureDoesNotMatch in the log"
grep -q 'check the S3 credentials' "$T/ckptd-d.log" || fail "the log gives no hint about credentials"
sleep 5
n=$(grep -c 'error s3:' "$T/ckptd-d.log")
[ "$n" -le 2 ] || fail "$n S3 errors logged within seconds: a retry storm"
grep -qF -- "$BAD_SECRET" "$T/ckptd-d.log" && fail "the secret key is in the log"
m=$(curl -fsS "http://127.0.0.1:$(metrics_port d)/metrics") || fail "metrics scrape failed"
echo "$m" | grep -Eq '^ckpt_s3_errors_total\{kind="auth"\} [1-9]' || fail "no auth error counted: $(echo "$m" | grep s3_)"
[ -z "$(s3_keys au/)" ] || fail "objects appeared with a wrong secret"
ckptd_stop d

ckptd_start e "$ROOT" --keep-last 0 --s3-url "s3://no-such-bucket-ckpt/au" --s3-part-size 5MiB
run_ranks 2 save --socket "$(sock e)" --job au --seed 2 --tensors 2 --min-bytes 1M --max-bytes 3M \
	--steps 40 --wait
expect_committed "$ROOT/au" "10 20 30 40"
wait_s3 30 grep -q 'NoSuchBucket' "$T/ckptd-e.log" || fail "no NoSuchBucket in the log"
grep 'NoSuchBucket' "$T/ckptd-e.log" | grep -q 'no-such-bucket-ckpt' || fail "the error does not name the bucket"
ckptd_stop e
log "pass"
