#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""meson test's entry to the Python tests: pytest on the given files.

Fails (not skips) when torch is not importable: scripts/install-deps.sh
installs torch==2.13.0 for the python3 on PATH, so a missing torch is a
broken installation, not a machine that cannot run the tests."""

import sys


def main() -> int:
    args = sys.argv[1:]
    try:
        import torch  # noqa: F401
        import torch.distributed.checkpoint  # noqa: F401
    except ImportError as e:
        print(f"FAIL: torch is not importable ({e}); scripts/install-deps.sh installs "
              "torch==2.13.0 for the python3 on PATH", file=sys.stderr)
        return 1
    import pytest
    return int(pytest.main(["-q", "-p", "no:cacheprovider", "-W",
                            "ignore:torch.distributed is disabled:UserWarning", *args]))


if __name__ == "__main__":
    sys.exit(main())
