#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""meson test's entry to the Python tests: pytest on the given files.

Exit 77 (skip) when torch is not importable (scripts/install-deps.sh
installs torch==2.13.0), and, for the resharding tests (--needs-read-ranges),
when the libckpt in $CKPT_LIBRARY has no ckpt_read_ranges."""

import sys


def main() -> int:
    args = sys.argv[1:]
    needs_ranges = "--needs-read-ranges" in args
    args = [a for a in args if a != "--needs-read-ranges"]
    try:
        import torch  # noqa: F401
        import torch.distributed.checkpoint  # noqa: F401
    except ImportError as e:
        print(f"SKIP: torch is not importable ({e}); scripts/install-deps.sh installs "
              "torch==2.13.0 for the python3 on PATH", file=sys.stderr)
        return 77
    import ckpt
    if needs_ranges and not ckpt.HAVE_READ_RANGES:
        print("SKIP: this libckpt has no ckpt_read_ranges (ranged reads of any rank's "
              "items), which resharding needs", file=sys.stderr)
        return 77
    import pytest
    return int(pytest.main(["-q", "-p", "no:cacheprovider", "-W",
                            "ignore:torch.distributed is disabled:UserWarning", *args]))


if __name__ == "__main__":
    sys.exit(main())
