#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ckpt-powerfs's own model, shown case by case: what a power cut keeps
# (fsync'ed bytes under fsync'ed names) and what it drops (everything else),
# EIO from the cut until the revert, an armed cut, and the two fault modes.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-powercut.sh"

pfs_start fs
M=$T/fs

cut_revert() {
	pfs_ctl fs cut >/dev/null
	pfs_ctl fs revert >/dev/null
}
expect_absent() { [ ! -e "$1" ] && [ ! -L "$1" ] || fail "$1 survived the cut"; }
expect_content() {
	local got
	got=$(cat "$1" 2>&1) || fail "$1 is gone after the cut: $got"
	[ "$got" = "$2" ] || fail "$1 holds '$got' after the cut, expected '$2'"
}

# A durable file: data fsync'ed, name fsync'ed.
mkdir "$M/d"
fsync_paths "$M"
echo one >"$M/d/durable"
fsync_paths "$M/d/durable" "$M/d"

log "1. a file never fsync'ed vanishes"
echo volatile >"$M/d/unsynced"
cut_revert
expect_absent "$M/d/unsynced"
expect_content "$M/d/durable" one

log "2. fsync of a new file keeps its bytes, not its name"
echo data >"$M/d/newname"
fsync_paths "$M/d/newname"
cut_revert
expect_absent "$M/d/newname"

log "3. fsync of an existing durable name keeps the new bytes"
echo two >"$M/d/durable"
fsync_paths "$M/d/durable"
cut_revert
expect_content "$M/d/durable" two

log "4. overwrite and truncation without fsync revert to the synced bytes"
echo three-not-synced >"$M/d/durable"
cut_revert
expect_content "$M/d/durable" two
truncate -s 0 "$M/d/durable"
cut_revert
expect_content "$M/d/durable" two
dd if=/dev/zero of="$M/d/durable" bs=1 count=1 seek=1 conv=notrunc status=none
cut_revert
expect_content "$M/d/durable" two

log "5. a rename without a directory fsync reverts; with it, it stays"
mv "$M/d/durable" "$M/d/renamed"
cut_revert
expect_content "$M/d/durable" two
expect_absent "$M/d/renamed"
echo tmp-bytes >"$M/d/file.tmp"
fsync_paths "$M/d/file.tmp"
mv "$M/d/file.tmp" "$M/d/file"
fsync_paths "$M/d"
cut_revert
expect_content "$M/d/file" tmp-bytes
expect_absent "$M/d/file.tmp"
mkdir "$M/e"
fsync_paths "$M"
mv "$M/d/file" "$M/e/file"
fsync_paths "$M/e"   # only the target: the per-directory model keeps both names
cut_revert
expect_content "$M/d/file" tmp-bytes
expect_content "$M/e/file" tmp-bytes

log "6. an fsync'ed directory keeps its names; a name whose file was never fsync'ed is empty"
echo kept >"$M/d/synced-both"
echo lost-bytes >"$M/d/name-only"
fsync_paths "$M/d/synced-both" "$M/d"
cut_revert
expect_content "$M/d/synced-both" kept
[ -f "$M/d/name-only" ] && [ ! -s "$M/d/name-only" ] ||
	fail "a durable name of a never-fsync'ed file must come back empty"

log "7. unlink, rmdir, mkdir, symlink, link revert without a directory fsync"
rm "$M/d/synced-both"
rmdir "$M/e" 2>/dev/null || { rm "$M/e/file"; rmdir "$M/e"; }
mkdir "$M/d/sub"
ln -s target "$M/d/sym"
ln "$M/d/durable" "$M/d/hard"
cut_revert
expect_content "$M/d/synced-both" kept
expect_content "$M/e/file" tmp-bytes
expect_absent "$M/d/sub"
expect_absent "$M/d/sym"
expect_absent "$M/d/hard"
mkdir "$M/new"
echo deep >"$M/new/f"
fsync_paths "$M/new/f" "$M/new"   # not the root: the directory itself is not durable
cut_revert
expect_absent "$M/new"

log "8. from the cut to the revert every operation fails with EIO"
echo open-before >"$M/d/fd-file"
fsync_paths "$M/d/fd-file" "$M/d"
exec 3>>"$M/d/fd-file"
pfs_ctl fs cut >/dev/null
for what in "cat $M/d/durable" "ls $M/d" "touch $M/d/x" "mkdir $M/d/y" "stat -f $M"; do
	out=$($what 2>&1) && fail "'$what' succeeded after the cut"
	case $out in *"Input/output error"*) ;; *) fail "'$what' after the cut: '$out', expected EIO" ;; esac
done
if { echo more >&3 && sync "$M/d/fd-file"; } 2>/dev/null; then
	fail "a write+fsync through a descriptor opened before the cut succeeded"
fi
[ "$(pfs_stat fs state)" = cut ] || fail "state is not 'cut' after a cut"
pfs_ctl fs revert >/dev/null
{ echo more >&3; } 2>/dev/null && fail "a descriptor from before the revert still writes"
exec 3>&-
expect_content "$M/d/fd-file" open-before
touch "$M/d/x" || fail "no writes after the revert"

log "9. arm N: the N-th mutating operation from now cuts, and fails itself"
pfs_ctl fs arm 2 >/dev/null
echo a >"$M/d/armed1" 2>/dev/null   # create + write: the write is number 2
[ "$(pfs_stat fs state)" = cut ] || fail "an armed cut did not fire"
touch "$M/d/armed2" 2>/dev/null && fail "a create succeeded after an armed cut"
pfs_ctl fs revert >/dev/null
expect_absent "$M/d/armed1"

log "10. O_DIRECT writes and reads of a MiB file, and statfs"
dd if=/dev/urandom of="$T/ref" bs=1M count=3 status=none
dd if="$T/ref" of="$M/d/direct" bs=1M oflag=direct conv=fsync status=none || fail "O_DIRECT write"
fsync_paths "$M/d"
cut_revert
cmp "$T/ref" <(dd if="$M/d/direct" bs=1M iflag=direct status=none) || fail "O_DIRECT read back differs"
stat -f "$M" >/dev/null || fail "statfs"
pfs_stop fs

log "11. --ignore-fsyncdir-of: an ignored directory fsync makes nothing durable"
pfs_start nf --ignore-fsyncdir-of 'step-*' --ignore-fsync-of '*.tmp'
M=$T/nf
mkdir "$M/step-1" "$M/other"
fsync_paths "$M"
echo a >"$M/step-1/f"
echo b >"$M/other/f"
echo c >"$M/other/g.tmp"
fsync_paths "$M/step-1/f" "$M/other/f" "$M/other/g.tmp" "$M/step-1" "$M/other"
[ "$(pfs_stat nf ignored)" = 2 ] || fail "expected 2 ignored fsyncs, status: $(pfs_ctl nf status)"
pfs_ctl nf cut >/dev/null
pfs_ctl nf revert >/dev/null
expect_absent "$M/step-1/f"
expect_content "$M/other/f" b
[ -f "$M/other/g.tmp" ] && [ ! -s "$M/other/g.tmp" ] || fail "an ignored file fsync kept bytes"
pfs_stop nf

log "12. --direct-read-einval: O_DIRECT opens work, O_DIRECT reads fail with EINVAL"
pfs_start dr --direct-read-einval
M=$T/dr
dd if="$T/ref" of="$M/f" bs=1M oflag=direct status=none || fail "O_DIRECT write in --direct-read-einval mode"
out=$(dd if="$M/f" of=/dev/null bs=1M iflag=direct 2>&1) && fail "an O_DIRECT read succeeded"
case $out in *"Invalid argument"*) ;; *) fail "O_DIRECT read: '$out', expected EINVAL" ;; esac
cmp "$T/ref" "$M/f" || fail "a buffered read in --direct-read-einval mode differs"
pfs_stop dr
log "13. --per-process-dirsync: a directory fsync covers only the fsyncing process's changes"
pfs_start pp --per-process-dirsync
M=$T/pp
mkdir "$M/d"
pfs_ctl pp sync >/dev/null
echo theirs >"$M/d/theirs"        # created by this echo's shell...
fsync_paths "$M/d/theirs" "$M/d"  # ...fsync'ed by sync(1), another process
python3 -c '
import os, sys
d = sys.argv[1]
fd = os.open(d + "/mine", os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, b"mine\n"); os.fsync(fd); os.close(fd)
dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY); os.fsync(dfd); os.close(dfd)
' "$M/d" || fail "python3 create+fsync"
pfs_ctl pp cut >/dev/null
pfs_ctl pp revert >/dev/null
expect_absent "$M/d/theirs"
expect_content "$M/d/mine" mine
echo synced >"$M/d/all"
pfs_ctl pp sync >/dev/null
pfs_ctl pp cut >/dev/null
pfs_ctl pp revert >/dev/null
expect_content "$M/d/all" synced
log "14. --per-process-dirsync: a pending rename into a newer directory is dropped cleanly by a cut"
# f is older (a lower inode) than the directory it moves into: the revert
# must give back the pending entry's reference without wrapping f's count.
echo older >"$M/f"
mkdir "$M/z"
pfs_ctl pp sync >/dev/null
mv "$M/f" "$M/z/f"
pfs_ctl pp cut >/dev/null
pfs_ctl pp revert >/dev/null
expect_content "$M/f" older
expect_absent "$M/z/f"
python3 -c '
import os, sys
m = sys.argv[1]
os.rename(m + "/f", m + "/z/f")
dfd = os.open(m, os.O_RDONLY | os.O_DIRECTORY); os.fsync(dfd); os.close(dfd)
os.unlink(m + "/z/f")
' "$M" || fail "python3 rename+fsync+unlink"
pfs_ctl pp sync >/dev/null
pfs_ctl pp cut >/dev/null
pfs_ctl pp revert >/dev/null
expect_absent "$M/f"
expect_absent "$M/z/f"
pfs_stop pp
log "PASS: powerfs model holds"
