#!/bin/bash
# SPDX-License-Identifier: MIT
# The manual pages stay true and clean: each renders with groff with every
# warning enabled (-ww) and none printed, and each program's page names every
# long option its --help prints.
#
# Usage: man-pages.sh PAGE[=PROGRAM] ...
set -u -o pipefail

command -v groff >/dev/null ||
	{ echo "SKIP: groff is not installed (scripts/install-deps.sh installs groff-base)" >&2; exit 77; }
errors=0
fail() {
	echo "FAIL: $*" >&2
	errors=$((errors + 1))
}

for arg in "$@"; do
	page=${arg%%=*}
	prog=
	[ "$arg" != "$page" ] && prog=${arg#*=}
	name=$(basename "$page")
	[ -r "$page" ] || { fail "$name: cannot read $page"; continue; }

	out=$(LC_ALL=C.UTF-8 groff -man -ww -z -Tutf8 "$page" 2>&1)
	rc=$?
	if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
		fail "$name: groff -ww (exit $rc): $out"
	fi
	grep -q '^\.SH NAME' "$page" || fail "$name: no NAME section"

	[ -n "$prog" ] || { echo "ok: $name renders"; continue; }
	# The page's words with roff escapes for hyphens and fonts removed.
	text=$(sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' -e 's/\\c//g' "$page")
	help=$("$prog" --help 2>&1)
	opts=$(grep -oE -- '(^|[^[:alnum:]-])--[a-z][a-z0-9-]*' <<<"$help" |
		sed 's/^[^-]*//' | sort -u)
	n=$(grep -c . <<<"$opts")
	[ "$n" -ge 3 ] || { fail "$name: '$prog --help' printed only $n long options"; continue; }
	missing=()
	for o in $opts; do
		grep -qE -- "(^|[^[:alnum:]-])$o([^[:alnum:]-]|\$)" <<<"$text" || missing+=("$o")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		fail "$name does not mention ${missing[*]} (printed by $(basename "$prog") --help)"
	else
		echo "ok: $name renders and names all $n long options of $(basename "$prog") --help"
	fi
done
[ "$errors" -eq 0 ]
