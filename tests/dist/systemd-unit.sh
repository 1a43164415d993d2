#!/bin/bash
# SPDX-License-Identifier: MIT
# The generated ckptd.service stays true to ckptd: it starts the installed
# binary with the installed config, uses Type=notify exactly when ckptd can
# send READY=1, creates the directories of ckptd's default socket and root,
# lifts RLIMIT_MEMLOCK, lets io_uring through its system-call filter, and
# has no ExecReload while ckptd ignores SIGHUP. Then `systemd-analyze verify`
# must accept it without a single message, and `systemd-analyze security`
# must rate its exposure 3.0 or lower.
#
# Usage: systemd-unit.sh UNIT CKPTD SBINDIR SYSCONFDIR HAVE_SYSTEMD(0|1)
set -u -o pipefail

UNIT=$1 CKPTD=$2 SBINDIR=$3 SYSCONFDIR=$4 HAVE_SYSTEMD=$5
T=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-systemd-unit.XXXXXX")
trap 'rm -rf "$T"' EXIT
errors=0

fail() {
	echo "FAIL: $*" >&2
	errors=$((errors + 1))
}

# value KEY: the value of the last KEY= line (as systemd takes it).
value() { sed -n "s/^$1=//p" "$UNIT" | tail -n 1; }

[ -r "$UNIT" ] || { echo "FAIL: cannot read $UNIT" >&2; exit 1; }

exec_start=$(value ExecStart)
[ "${exec_start%% *}" = "$SBINDIR/ckptd" ] ||
	fail "ExecStart runs '${exec_start%% *}', not $SBINDIR/ckptd"
case " $exec_start " in
*" --config $SYSCONFDIR/ckpt/ckptd.conf "*) ;;
*) fail "ExecStart does not read $SYSCONFDIR/ckpt/ckptd.conf: $exec_start" ;;
esac
# Every flag in ExecStart must be one ckptd accepts.
read -r -a argv <<<"$exec_start"
if ! "$CKPTD" "${argv[@]:1}" --config '' --check-config >"$T/check.out" 2>&1; then
	fail "ckptd rejects the ExecStart flags: $(cat "$T/check.out")"
fi

want_type="exec"
[ "$HAVE_SYSTEMD" = 1 ] && want_type=notify
[ "$(value Type)" = "$want_type" ] ||
	fail "Type=$(value Type), expected $want_type (ckptd built with libsystemd: $HAVE_SYSTEMD)"

if "$CKPTD" --help | grep -A2 '^    SIGHUP' | grep -q 'ignores it'; then
	grep -q '^ExecReload=' "$UNIT" && fail "ExecReload= is set, but ckptd ignores SIGHUP"
else
	grep -q '^ExecReload=' "$UNIT" ||
		fail "ckptd --help no longer says SIGHUP is ignored: consider ExecReload="
fi

# ckptd's defaults as systemd starts it: no CKPT_SOCKET, no XDG_RUNTIME_DIR.
env -i "$CKPTD" --config '' --check-config >"$T/defaults" 2>&1 ||
	fail "ckptd --check-config failed: $(cat "$T/defaults")"
socket=$(sed -n 's/^socket = //p' "$T/defaults")
root=$(sed -n 's/^root = //p' "$T/defaults")
[ "$socket" = "/run/$(value RuntimeDirectory)/ckptd.sock" ] ||
	fail "default socket $socket is not in RuntimeDirectory=$(value RuntimeDirectory)"
[ "$root" = "/var/lib/$(value StateDirectory)" ] ||
	fail "default root $root is not StateDirectory=$(value StateDirectory)"

[ "$(value LimitMEMLOCK)" = infinity ] ||
	fail "LimitMEMLOCK=$(value LimitMEMLOCK): ckptd mlocks and registers staging memory"
filter=$(value SystemCallFilter)
for sc in io_uring_setup io_uring_enter io_uring_register; do
	case " $filter " in
	*" $sc "* | *" @aio "*) ;;
	*) fail "SystemCallFilter does not allow $sc: $filter" ;;
	esac
done
case " $(value RestrictAddressFamilies) " in
*" AF_UNIX "*) ;;
*) fail "RestrictAddressFamilies lacks AF_UNIX (the control socket)" ;;
esac

if command -v systemd-analyze >/dev/null; then
	# The binary must exist for verify: point ExecStart at the built one.
	mkdir -p "$T/units"
	sed "s#^ExecStart=[^ ]*#ExecStart=$CKPTD#" "$UNIT" >"$T/units/ckptd.service"
	# --man=no: the pages are not installed here (tests/man checks them).
	if ! systemd-analyze verify --man=no "$T/units/ckptd.service" >"$T/verify.out" 2>&1 ||
	   [ -s "$T/verify.out" ]; then
		fail "systemd-analyze verify: $(cat "$T/verify.out")"
	fi
	if ! systemd-analyze security --offline=true --threshold=30 \
	     "$T/units/ckptd.service" >"$T/security.out" 2>&1; then
		fail "systemd-analyze security rates the unit above 3.0: $(tail -n 1 "$T/security.out")"
	fi
	echo "systemd-analyze: $(grep -o 'Overall exposure level.*' "$T/security.out")"
else
	# Not installed (scripts/install-deps.sh installs it): the checks above
	# are all that can run.
	echo "note: systemd-analyze is not installed; structural checks only"
fi

[ "$errors" -eq 0 ] || exit 1
echo "ok: $UNIT"
