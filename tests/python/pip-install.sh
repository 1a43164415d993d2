#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `pip install .` from the source tree works: meson-python builds a wheel of
# the package ckpt with libckpt inside it (no daemon, no tools), the wheel
# installs, and the installed package loads the libckpt next to it and
# documents itself (help(ckpt)). The build runs without isolation, on the
# meson-python that scripts/install-deps.sh installs, so no network is needed.
set -euo pipefail
src=${1:?source tree}
T=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-pip.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: pip-install: $*" >&2; exit 1; }

python3 -m pip wheel --quiet --no-build-isolation --no-deps -w "$T/wheel" "$src" >"$T/build.log" 2>&1 ||
	{ tail -40 "$T/build.log" >&2; fail "pip wheel failed"; }
whl=$(ls "$T"/wheel/ckpt-*.whl) || fail "no wheel built"
echo "built $(basename "$whl")"
python3 -m zipfile -l "$whl" | grep -q 'ckpt/libckpt.so' || fail "the wheel holds no ckpt/libckpt.so"
if python3 -m zipfile -l "$whl" | grep -E 'ckptd|ckpt-inspect|include/'; then
	fail "the wheel holds the daemon, the tools or the headers"
fi
python3 -m pip install --quiet --root-user-action=ignore --no-deps --target "$T/site" "$whl" || fail "pip install of the wheel failed"
cd "$T"
env -u CKPT_LIBRARY PYTHONPATH="$T/site" python3 - "$T/site" <<'PY' || fail "the installed package does not work"
import os, pydoc, sys
import ckpt
site = os.path.realpath(sys.argv[1])
lib = os.path.realpath(ckpt._lib.lib._name)
assert lib.startswith(site + os.sep), f"libckpt loaded from {lib}, not from the package"
text = pydoc.render_doc(ckpt, renderer=pydoc.plaintext)
for word in ("connect", "Context", "CkptError"):
    assert word in text, f"help(ckpt) does not mention {word}"
assert ckpt.HAVE_READ_RANGES, "the packaged libckpt has no ckpt_read_ranges"
print("installed ckpt loads", os.path.basename(lib), "from its package directory")
PY
echo pass
