# SPDX-License-Identifier: MIT
# Helpers for the power-cut tests (bash; sourced after ../integration/lib.sh).
#
# CKPT_POWERFS names the ckpt-powerfs binary (powerfs.c). pfs_start mounts
# one at $T/NAME with its private store in $T/NAME.store and its control
# socket at $T/NAME.ctl; lib.sh's cleanup unmounts it.

: "${CKPT_POWERFS:?CKPT_POWERFS must name the ckpt-powerfs binary}"

declare -A PFS_PID=()

# pfs_start NAME [ckpt-powerfs options...]: mount $T/NAME, wait until served.
pfs_start() {
	local name=$1 i
	shift
	[ -c /dev/fuse ] || skip "no /dev/fuse on this machine"
	mkdir -p "$T/$name"
	rm -f "$T/$name.ctl"
	"$CKPT_POWERFS" --ctl "$T/$name.ctl" "$@" "$T/$name.store" "$T/$name" \
		>>"$T/powerfs-$name.log" 2>&1 &
	PFS_PID[$name]=$!
	EXTRA_PIDS+=("$!")
	MOUNTS+=("$T/$name")
	for i in $(seq 1 200); do
		[ -S "$T/$name.ctl" ] && return 0
		kill -0 "${PFS_PID[$name]}" 2>/dev/null || fail "ckpt-powerfs $name exited during start-up"
		sleep 0.05
	done
	fail "ckpt-powerfs $name: control socket did not appear within 10 s"
}

# pfs_ctl NAME COMMAND [ARG]: prints the reply; fails the test on "err".
pfs_ctl() {
	local name=$1 out
	shift
	out=$("$CKPT_POWERFS" ctl "$T/$name.ctl" "$@") || fail "ckpt-powerfs ctl $name $*: $out"
	echo "$out"
}

# pfs_stat NAME KEY: one counter of `status` (state, cuts, fsyncs, ignored, ...).
pfs_stat() {
	pfs_ctl "$1" status | tr ' ' '\n' | sed -n "s/^$2=//p"
}

# pfs_stop NAME: unmount and wait for the server to exit.
pfs_stop() {
	local name=$1
	umount "$T/$name" 2>/dev/null || umount -l "$T/$name" 2>/dev/null
	wait "${PFS_PID[$name]}" 2>/dev/null
	unset "PFS_PID[$name]"
}

# fsync_paths PATH...: fsync each (a directory: fsyncdir), like sync(1) does.
fsync_paths() { sync -- "$@"; }
