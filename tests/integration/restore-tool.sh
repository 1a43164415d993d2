#!/bin/bash
# SPDX-License-Identifier: MIT
# ckpt-restore from a checkpoint root that a real ckptd wrote: the copy is
# byte-identical and commits in DEST (which a second ckptd then restores
# ranks from); a damaged newest step falls back (or fails with --exact,
# leaving nothing behind); bad arguments get clear errors.
. "$(dirname "$0")/lib.sh"
: "${CKPT_RESTORE:?CKPT_RESTORE must name the ckpt-restore binary}"

ROOT=$T/root
DEST=$T/dest/nested
OPTS=(--job rt --seed 7 --tensors 4 --min-bytes 64K --max-bytes 1M)
ckptd_start d "$ROOT" --keep-last 0
run_ranks 3 save --socket "$(sock d)" "${OPTS[@]}" --steps 10,20 --wait
expect_committed "$ROOT/rt" "10 20"
ckptd_stop d

restore() { timeout 120 "$CKPT_RESTORE" --no-progress "$@" >"$T/restore.out" 2>"$T/restore.err"; }

restore "$ROOT/rt" "$DEST" || fail "ckpt-restore exited $?: $(cat "$T/restore.err")"
grep -q 'step-0000000020: restored' "$T/restore.out" || fail "no summary: $(cat "$T/restore.out")"
for f in MANIFEST.json rank-000000.shard rank-000001.index rank-000002.shard; do
	cmp -s "$(stepdir "$ROOT/rt" 20)/$f" "$(stepdir "$DEST/rt" 20)/$f" || fail "$f differs after restore"
done
[ "$(cat "$DEST/rt/LATEST")" = 20 ] || fail "DEST LATEST is '$(cat "$DEST/rt/LATEST")', expected 20"
verify "$DEST/rt" 20

# Again: already there, verified, not fetched.
restore "$ROOT/rt" "$DEST" || fail "second restore exited $?"
grep -q 'already present and verified' "$T/restore.out" || fail "second restore: $(cat "$T/restore.out")"

# An older step by '@': LATEST stays at the newest.
restore "$ROOT/rt@10" "$DEST" || fail "restore of @10 exited $?: $(cat "$T/restore.err")"
expect_committed "$DEST/rt" "10 20"
[ "$(cat "$DEST/rt/LATEST")" = 20 ] || fail "restoring an older step moved LATEST"

# A ckptd serving DEST hands the restored step to ranks.
ckptd_start e "$DEST" --keep-last 0
rank_start r0 --socket "$(sock e)" "${OPTS[@]}" --rank 0 --world 3 --restore latest --expect-step 20
rank_wait "$LAST_PID" r0
ckptd_stop e

# Damage step 20 in ROOT: the newest that verifies is 10.
SHARD=$(stepdir "$ROOT/rt" 20)/rank-000002.shard
b=$(od -An -tu1 -j 100 -N 1 "$SHARD" | tr -d ' ')
printf "$(printf '\\%03o' $((b ^ 0x5a)))" | dd of="$SHARD" bs=1 seek=100 conv=notrunc status=none
D2=$T/dest2
restore "$ROOT/rt" "$D2" || fail "fallback restore exited $?: $(cat "$T/restore.err")"
grep -q 'step 20 .* does not verify' "$T/restore.err" || fail "no fallback warning: $(cat "$T/restore.err")"
grep -q 'rank-000002.shard' "$T/restore.err" || fail "the warning does not name the shard"
expect_committed "$D2/rt" "10"
[ ! -e "$(stepdir "$D2/rt" 20)" ] || fail "the failed step 20 was left in DEST"

restore --exact "$ROOT/rt" "$T/dest3"
rc=$?
[ $rc -eq 1 ] || fail "--exact on a damaged newest step exited $rc, expected 1"
[ -z "$(ls "$T/dest3/rt")" ] || fail "--exact left files behind: $(ls "$T/dest3/rt")"

# Bad arguments.
restore "$ROOT/rt@x" "$T/d4"; [ $? -eq 2 ] || fail "a bad @STEP is not a usage error"
restore "$ROOT/nojob" "$T/d4"; [ $? -eq 3 ] || fail "a missing job is not exit 3"
restore "$ROOT/rt@99" "$T/d4"; [ $? -eq 3 ] || fail "a missing step is not exit 3"
grep -q 'step-0000000099' "$T/restore.err" || fail "missing step not named: $(cat "$T/restore.err")"
touch "$T/afile"
restore "$ROOT/rt@10" "$T/afile"; [ $? -eq 4 ] || fail "an unwritable DEST is not exit 4"
restore "$ROOT/rt"; [ $? -eq 2 ] || fail "one argument is not a usage error"
log "pass"
