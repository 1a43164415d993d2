#!/bin/bash
# SPDX-License-Identifier: MIT
# ckpt-inspect on S3 against a real radosgw: after a ckptd uploaded a job
# it lists the jobs under a prefix and the steps of the job (LATEST
# marked), shows a step's manifest exactly as the root's, and --verify
# passes; a shard object overwritten with one flipped byte makes --verify
# exit 1 naming rank, tensor and offset. --s3 adds the tiers of each step
# (root+s3, root, s3, uploading) to a root's listing. Malformed s3:// URLs
# are usage errors (exit 2), missing things exit 3, --json always parses.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-s3.sh"
: "${CKPT_RESTORE:?}"

PY=python3
insp() { timeout 120 "$CKPT_INSPECT" --no-progress "$@"; }
# json_check FILE PYTHON-EXPR: the expression (over d, the parsed document) must be true.
json_check() {
	"$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' "$1" "$2" ||
		fail "JSON check failed: $2 on $(head -c 3000 "$1")"
}

# Hostile input first: no server needed to refuse it.
for u in 's3://' 's3:/bucket/x' 's3://Bad_Bucket/x' 's3://ab' 's3://bkt/a//b' 's3://bkt/../x' \
	's3://bkt/a/job@abc' 's3://bkt/a/job@' 's3://bkt@5' $'s3://bkt/a\x01b' \
	"s3://bkt/$(head -c 1500 /dev/zero | tr '\0' x)"; do
	insp "$u" >"$T/bad.out" 2>"$T/bad.err"
	rc=$?
	[ "$rc" -eq 2 ] || fail "malformed URL '$u' exited $rc, not 2: $(cat "$T/bad.err")"
	grep -q 'ckpt-inspect: ' "$T/bad.err" || fail "no message for malformed URL '$u'"
	! grep -q $'\x01' "$T/bad.err" || fail "a control character was echoed for '$u'"
	[ ! -s "$T/bad.out" ] || fail "output on stdout for malformed URL '$u'"
done
insp --endpoint-url ftp://x "s3://bkt/a" >/dev/null 2>&1
[ $? -eq 2 ] || fail "--endpoint-url ftp://x was not a usage error"
insp --s3 's3://' "$T" >/dev/null 2>&1
[ $? -eq 2 ] || fail "a malformed --s3 URL was not a usage error"

rgw_up
ROOT=$T/root
OPTS=(--job up --seed 7 --tensors 3 --min-bytes 1M --max-bytes 6M)
ckptd_start d "$ROOT" --keep-last 0 --s3-url "s3://$S3_BUCKET/ci" --s3-part-size 5MiB \
	--s3-parallel 4 --s3-keep-last 0
run_ranks 2 save --socket "$(sock d)" "${OPTS[@]}" --steps 10,20 --wait
latest_is_20() { [ "$(aws3 s3 cp "s3://$S3_BUCKET/ci/up/LATEST" - 2>/dev/null)" = 20 ]; }
wait_s3 120 latest_is_20 || fail "step 20 never reached S3"
ckptd_stop d
# Step 30 is never uploaded: this ckptd has no S3 tier.
ckptd_start d "$ROOT" --keep-last 0
run_ranks 2 save --socket "$(sock d)" "${OPTS[@]}" --steps 30 --wait
ckptd_stop d
expect_committed "$ROOT/up" "10 20 30"

# The jobs under the prefix.
insp "s3://$S3_BUCKET/ci" >"$T/jobs.txt" 2>&1 || fail "listing s3://$S3_BUCKET/ci failed: $(cat "$T/jobs.txt")"
grep -Eq '^up +2 +20 ' "$T/jobs.txt" || fail "job up (2 steps, LATEST 20) not listed: $(cat "$T/jobs.txt")"
insp --json "s3://$S3_BUCKET/ci" >"$T/jobs.json" || fail "--json listing of jobs failed"
json_check "$T/jobs.json" 'd["ok"] and [(j["job"], j["committed_steps"], j["latest"]) for j in d["jobs"]] == [("up", 2, 20)]'
# A prefix with nothing under it, a bucket that does not exist: not found.
insp "s3://$S3_BUCKET/nothing-here" >/dev/null 2>&1
[ $? -eq 3 ] || fail "an empty prefix did not exit 3"
insp "s3://no-such-bucket-$$/ci" >/dev/null 2>&1
[ $? -eq 3 ] || fail "a missing bucket did not exit 3"

# The steps of the job.
insp "s3://$S3_BUCKET/ci/up" >"$T/steps.txt" 2>&1 || fail "listing the job failed: $(cat "$T/steps.txt")"
grep -Eq '^ +10 +committed +2 ' "$T/steps.txt" || fail "step 10 not listed: $(cat "$T/steps.txt")"
grep -Eq '^ +20 +committed +2 .*LATEST' "$T/steps.txt" || fail "step 20 not listed as LATEST: $(cat "$T/steps.txt")"
! grep -Eq '^ +30 ' "$T/steps.txt" || fail "step 30 is listed on S3: $(cat "$T/steps.txt")"
insp --json "s3://$S3_BUCKET/ci/up" >"$T/steps.json" || fail "--json listing of steps failed"
json_check "$T/steps.json" '[(s["step"], s["state"], s["latest"]) for s in d["steps"]] == [(10, "committed", False), (20, "committed", True)] and d["latest"] == 20'
json_check "$T/steps.json" 'all(s["created_unix_ns"] > 0 and s["bytes"] > 0 for s in d["steps"])'

# A step: the manifest as the root shows it, by JOB@STEP and by JOB/STEP.
insp --json "$ROOT/up/20" >"$T/root20.json" || fail "showing the root's step 20 failed"
for spec in "up@20" "up/20" "up/step-0000000020"; do
	insp --json "s3://$S3_BUCKET/ci/$spec" >"$T/s3step.json" || fail "showing s3://.../$spec failed"
	"$PY" - "$T/root20.json" "$T/s3step.json" <<-'EOF' || fail "S3 step ($spec) differs from the root's"
	import json, sys
	a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
	assert b.pop("url").endswith("/ci/up"), "url"
	a.pop("latest"); b.pop("latest")
	assert a == b, (a, b)
	EOF
done
insp "s3://$S3_BUCKET/ci/up@20" >"$T/show.txt" || fail "showing step 20 failed"
grep -Eq '^step +20  \(LATEST\)' "$T/show.txt" || fail "step 20 not shown as LATEST: $(head -5 "$T/show.txt")"
insp "s3://$S3_BUCKET/ci/up@30" >/dev/null 2>"$T/nf.err"
[ $? -eq 3 ] || fail "a step S3 does not have did not exit 3"
grep -q 'no such step' "$T/nf.err" || fail "no 'no such step' message: $(cat "$T/nf.err")"

# --verify on S3 passes; also with credentials and endpoint from flags only.
insp --verify "s3://$S3_BUCKET/ci/up" >"$T/verify.txt" 2>&1 || fail "--verify of the job on S3 failed: $(cat "$T/verify.txt")"
grep -q '^step 10: OK (2 ranks' "$T/verify.txt" && grep -q '^step 20: OK (2 ranks' "$T/verify.txt" ||
	fail "--verify did not report both steps OK: $(cat "$T/verify.txt")"
# Endpoint, region and profile from flags alone (here and in ckpt-restore):
# the keys only in a named profile, nothing in the environment.
printf '[ckpt-flags]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
	"$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >"$AWS_SHARED_CREDENTIALS_FILE"
(
	unset AWS_ENDPOINT_URL AWS_REGION AWS_DEFAULT_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
	FLAGS=(--endpoint-url "$RGW_ENDPOINT" --region us-east-1 --profile ckpt-flags)
	insp --verify --rank 1 "${FLAGS[@]}" "s3://$S3_BUCKET/ci/up@10" >"$T/verify-flags.txt" 2>&1 ||
		fail "--verify with --endpoint-url/--profile failed: $(cat "$T/verify-flags.txt")"
	grep -q '^  rank 1: OK' "$T/verify-flags.txt" || fail "rank 1 not verified: $(cat "$T/verify-flags.txt")"
	insp --endpoint-url "$RGW_ENDPOINT" --profile no-such-profile "s3://$S3_BUCKET/ci" >/dev/null 2>"$T/np.err"
	[ $? -eq 3 ] || fail "an unknown --profile did not exit 3"
	grep -q "no-such-profile" "$T/np.err" || fail "the unknown profile is not named: $(cat "$T/np.err")"
	timeout 300 "$CKPT_RESTORE" --no-progress "${FLAGS[@]}" "s3://$S3_BUCKET/ci/up@10" "$T/restored" \
		>"$T/restore-flags.log" 2>&1 || fail "ckpt-restore with --endpoint-url/--profile failed"
	timeout 60 "$CKPT_RESTORE" --no-progress --endpoint-url ftp://x "s3://$S3_BUCKET/ci/up" "$T/r2" >/dev/null 2>&1
	[ $? -eq 2 ] || fail "ckpt-restore --endpoint-url ftp://x was not a usage error"
) || exit 1
expect_committed "$T/restored/up" "10"
verify "$T/restored/up" 10
insp --verify --json "s3://$S3_BUCKET/ci" >"$T/verify.json" || fail "--verify --json of the prefix failed"
json_check "$T/verify.json" 'd["ok"] and d["jobs"][0]["committed_steps"] == 2 and all(s["ok"] and s["ranks_checked"] == 2 for s in d["jobs"][0]["steps"])'

# Tiers: 10 only on S3 once the root loses it, 20 in both, 30 only in the root.
rm -rf "$(stepdir "$ROOT/up" 10)"
insp "$ROOT/up" --s3 "s3://$S3_BUCKET/ci" >"$T/tiers.txt" 2>&1 || fail "--s3 listing failed: $(cat "$T/tiers.txt")"
grep -Eq '^ +10 +committed .* s3( |$)' "$T/tiers.txt" || fail "step 10 is not s3: $(cat "$T/tiers.txt")"
grep -Eq '^ +20 +committed .* root\+s3( |$)' "$T/tiers.txt" || fail "step 20 is not root+s3: $(cat "$T/tiers.txt")"
grep -Eq '^ +30 +committed .* root( |$).*LATEST' "$T/tiers.txt" || fail "step 30 is not root: $(cat "$T/tiers.txt")"
insp --json "$ROOT/up" --s3 "s3://$S3_BUCKET/ci" >"$T/tiers.json" || fail "--s3 --json listing failed"
json_check "$T/tiers.json" '[(s["step"], s["tiers"]) for s in d["steps"]] == [(10, "s3"), (20, "root+s3"), (30, "root")]'
insp --json "$ROOT" --s3 "s3://$S3_BUCKET/ci" >"$T/tiers-root.json" || fail "--s3 --json of the root failed"
json_check "$T/tiers-root.json" 'd["jobs"][0]["tiers"] == {"root+s3": 1, "root": 1, "s3": 1, "uploading": 0}'
insp "$ROOT" --s3 "s3://$S3_BUCKET/ci" >"$T/tiers-root.txt" 2>&1 || fail "--s3 listing of the root failed"
grep -q '1 root+s3, 1 root, 1 s3' "$T/tiers-root.txt" || fail "root tiers: $(cat "$T/tiers-root.txt")"
# An open multipart upload under step 30: uploading.
key=ci/up/step-0000000030/rank-000000.shard
upid=$(aws3 s3api create-multipart-upload --bucket "$S3_BUCKET" --key "$key" --query UploadId --output text) ||
	fail "could not open a multipart upload"
insp --json "$ROOT/up" --s3 "s3://$S3_BUCKET/ci" >"$T/tiers2.json" || fail "--s3 listing with an open upload failed"
json_check "$T/tiers2.json" '[s["tiers"] for s in d["steps"] if s["step"] == 30] == ["uploading"]'
aws3 s3api abort-multipart-upload --bucket "$S3_BUCKET" --key "$key" --upload-id "$upid" ||
	fail "could not abort the multipart upload"
insp --verify "$ROOT/up" --s3 "s3://$S3_BUCKET/ci" >/dev/null 2>&1
[ $? -eq 2 ] || fail "--verify with --s3 was not a usage error"

# One flipped byte in rank 1's shard object of step 20, 100 bytes into
# its first tensor.
read -r tensor off < <("$PY" -c 'import json,sys
r = json.load(open(sys.argv[1]))["ranks"][1]
t = min(r["tensors"], key=lambda t: t["data_offset"])
print(t["name"], t["data_offset"] + 100)' "$T/root20.json") || fail "no tensor of rank 1"
aws3 s3 cp --quiet "s3://$S3_BUCKET/ci/up/step-0000000020/rank-000001.shard" "$T/shard" || fail "download failed"
"$PY" -c 'import sys
f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0x10]))' \
	"$T/shard" "$off"
aws3 s3 cp --quiet "$T/shard" "s3://$S3_BUCKET/ci/up/step-0000000020/rank-000001.shard" || fail "upload failed"
insp --verify "s3://$S3_BUCKET/ci/up@20" >"$T/bad.txt" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "--verify of a damaged shard object exited $rc, not 1: $(cat "$T/bad.txt")"
grep -q "rank 1 step 20: tensor '$tensor'" "$T/bad.txt" || fail "the damaged tensor is not named: $(cat "$T/bad.txt")"
grep -q "at byte offset $((off - 100)) " "$T/bad.txt" || fail "the damaged chunk's offset is not named: $(cat "$T/bad.txt")"
grep -q 'rank-000001.shard' "$T/bad.txt" || fail "the damaged object is not named: $(cat "$T/bad.txt")"
insp --verify --json "s3://$S3_BUCKET/ci/up" >"$T/bad.json"
[ $? -eq 1 ] || fail "--verify --json of the job did not exit 1"
json_check "$T/bad.json" '[(s["step"], s["ok"]) for s in d["steps"]] == [(10, True), (20, False)] and [r["bad_chunks"] for r in d["steps"][1]["ranks"]] == [0, 1]'
# The root's copy is untouched.
verify "$ROOT/up" 20

# Compressed shard objects (s3_compress zstd) verify frame by frame; a
# flipped byte in a frame is caught.
ckptd_start z "$T/rootz" --keep-last 0 --s3-url "s3://$S3_BUCKET/cz" --s3-compress zstd
run_ranks 2 savez --socket "$(sock z)" --job zj --seed 9 --tensors 3 --min-bytes 1M --max-bytes 6M \
	--steps 5 --wait
zkey=cz/zj/step-0000000005/rank-000000.shard.zst
wait_s3 120 s3_has cz/zj/step-0000000005/MANIFEST.json || fail "the compressed step never reached S3"
ckptd_stop z
s3_has "$zkey" || fail "no compressed shard object: $(s3_keys cz/)"
insp --verify "s3://$S3_BUCKET/cz/zj@5" >"$T/z.txt" 2>&1 || fail "--verify of a compressed step failed: $(cat "$T/z.txt")"
grep -q '^step 5: OK (2 ranks' "$T/z.txt" || fail "compressed step not verified: $(cat "$T/z.txt")"
aws3 s3 cp --quiet "s3://$S3_BUCKET/$zkey" "$T/zshard" || fail "download failed"
"$PY" -c 'import sys
f = open(sys.argv[1], "r+b"); f.seek(1000); b = f.read(1); f.seek(1000); f.write(bytes([b[0] ^ 1]))' "$T/zshard"
aws3 s3 cp --quiet "$T/zshard" "s3://$S3_BUCKET/$zkey" || fail "upload failed"
insp --verify "s3://$S3_BUCKET/cz/zj@5" >"$T/zbad.txt" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "--verify of a damaged compressed object exited $rc, not 1: $(cat "$T/zbad.txt")"
grep -q 'rank-000000.shard.zst: read at byte offset 0: compressed frame 0 ' "$T/zbad.txt" ||
	fail "the damaged frame is not named: $(cat "$T/zbad.txt")"
log "pass"
