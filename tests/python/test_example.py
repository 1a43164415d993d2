# SPDX-License-Identifier: MIT
"""README's "From PyTorch" example (examples/pytorch/train_dcp.py), run as
written with torchrun on 2 ranks: it saves, then a second run resumes, and
a third run on 3 ranks resumes from the 2-rank step (resharding)."""

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pytorch" / "train_dcp.py"


def _torchrun(*args, ranks=2):
    # torchrun, with its rendezvous on a free local port.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           str(ranks), str(EXAMPLE), *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_example_saves_then_resumes(ckptd):
    out = _torchrun("--steps", "10", "--save-every", "5")
    assert "committed steps: [5, 10]" in out, out
    out = _torchrun("--steps", "15", "--save-every", "5")
    assert "resumed from step 10" in out and "committed steps: [5, 10, 15]" in out, out
    assert ckptd.committed("example") == [5, 10, 15]
    # The same job goes on at another world size: DCP reshards the saved
    # state through ranged reads of the 2-rank step.
    out = _torchrun("--steps", "20", "--save-every", "5", ranks=3)
    assert "resumed from step 15" in out and "committed steps: [5, 10, 15, 20]" in out, out
