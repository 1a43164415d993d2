# SPDX-License-Identifier: MIT
"""Without ranged reads (a libckpt lacking ckpt_read_ranges), a load at
another world size than the save fails on every rank with a clear error,
and none hangs."""

from pathlib import Path

import pytest

import ckpt

WORKER = Path(__file__).resolve().parent / "dcp_worker.py"


def test_load_at_another_world_size_fails_clearly_without_ranged_reads(ckptd, launch):
    if ckpt.HAVE_READ_RANGES:
        pytest.skip("this libckpt has ranged reads: test_dcp_reshard.py covers resharding")
    launch(WORKER, ["reshard-save", "--job", "ws", "--step", "1"], 2, "save2").wait(120)
    j = launch(WORKER, ["reshard-load", "--job", "ws", "--step", "1"], 1, "load1")
    for p in j.procs:
        p.wait(120)
    assert all(p.returncode != 0 for p in j.procs), j.output()
    out = j.output()
    assert "saved at world size 2, loading at 1" in out and "ckpt_read_ranges" in out, out


def test_dtensor_shards_round_trip_at_the_same_world_size(ckptd, launch):
    # DTensors (Shard(0), Shard(1), Replicate) staged into the slot as
    # their local chunks, named fqn@offsets, restored from each rank's own shard.
    launch(WORKER, ["reshard-save", "--job", "dt", "--step", "3"], 2, "save2").wait(120)
    j = launch(WORKER, ["reshard-load", "--job", "dt", "--step", "3"], 2, "load2")
    j.wait(120)
    assert "saved at world size 2) at world size 2: identical" in j.output(), j.output()
