# SPDX-License-Identifier: MIT
"""4 ranks (gloo) train a small decoder-only transformer with AdamW and
save asynchronously through ckptd with ckpt.dcp; the whole job is killed
with SIGKILL mid-run; a new job resumes from the newest committed step and
ends bit-identical to an uninterrupted run."""

import time
from pathlib import Path

import torch

WORKER = Path(__file__).resolve().parent / "dcp_worker.py"
WORLD = 4


def _states_equal(a, b, path=""):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), path
        assert a.dtype == b.dtype and a.shape == b.shape, path
        # Bit for bit: compare the raw bytes, not the float values.
        assert torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)), \
            f"{path} differs"
        return 1
    if isinstance(a, dict):
        assert set(a) == set(b), f"{path}: keys {sorted(a)} vs {sorted(b)}"
        return sum(_states_equal(a[k], b[k], f"{path}.{k}") for k in a)
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        return sum(_states_equal(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(a, b)))
    assert a == b, f"{path}: {a!r} != {b!r}"
    return 0


def test_kill9_mid_run_then_resume_is_bit_identical(ckptd, launch, tmp_path):
    # The run to be killed: saves every 3 steps, slowed down so that the
    # kill lands mid-run, with saves behind it and in flight.
    run = launch(WORKER, ["train", "--job", "tiny", "--steps", "400", "--save-every", "3",
                          "--step-delay", "0.05", "--dump", str(tmp_path / "never")],
                 WORLD, "killed")
    deadline = time.monotonic() + 90
    while len(ckptd.committed("tiny")) < 3:
        assert time.monotonic() < deadline, "no 3 steps committed in 90 s\n" + run.output() + \
            "\n" + ckptd.tail()
        assert all(p.poll() is None for p in run.procs), "a rank died\n" + run.output()
        time.sleep(0.1)
    run.kill9()
    committed = ckptd.committed("tiny")
    newest = committed[-1]
    assert newest < 400 and newest % 3 == 0, committed
    assert not (tmp_path / "never.0").exists()

    # Resume from the newest committed step, train 5 steps past it.
    end = newest + 5
    resumed = launch(WORKER, ["train", "--job", "tiny", "--steps", str(end), "--save-every", "3",
                              "--resume", "--dump", str(tmp_path / "resumed")], WORLD, "resumed")
    resumed.wait(120)
    assert f"rank 0 resumed at step {newest}" in resumed.output()

    # The same run without interruption (another job: nothing to resume).
    ref = launch(WORKER, ["train", "--job", "reference", "--steps", str(end),
                          "--dump", str(tmp_path / "ref")], WORLD, "reference")
    ref.wait(120)

    for r in range(WORLD):
        a = torch.load(tmp_path / f"resumed.{r}", weights_only=True)
        b = torch.load(tmp_path / f"ref.{r}", weights_only=True)
        n = _states_equal(a, b, f"rank {r}")
        assert n > 20, n  # parameters, exp_avg, exp_avg_sq, step of every parameter
    # The resumed job's own saves committed after the resume.
    assert max(ckptd.committed("tiny")) > newest
