# SPDX-License-Identifier: MIT
"""DTensor state at the same world size as the save: each rank restores
its own shard (test_dcp_reshard.py loads at other world sizes)."""

from pathlib import Path

WORKER = Path(__file__).resolve().parent / "dcp_worker.py"


def test_dtensor_shards_round_trip_at_the_same_world_size(ckptd, launch):
    # DTensors (Shard(0), Shard(1), Replicate) staged into the slot as
    # their local chunks, named fqn@offsets, restored from each rank's own shard.
    launch(WORKER, ["reshard-save", "--job", "dt", "--step", "3"], 2, "save2").wait(120)
    j = launch(WORKER, ["reshard-load", "--job", "dt", "--step", "3"], 2, "load2")
    j.wait(120)
    assert "saved at world size 2) at world size 2: identical" in j.output(), j.output()


def test_same_world_load_with_one_slot_per_rank(ckptd, launch):
    # A rank other than 0 reads rank 0's metadata before its agreed restore
    # takes its only slot, and must not read it again afterwards (a second
    # slot it does not have: "slot or rank in use").
    ckptd.stop()
    ckptd.start("--slots-per-rank", "1")
    launch(WORKER, ["reshard-save", "--job", "one", "--step", "4"], 2, "save2").wait(120)
    j = launch(WORKER, ["reshard-load", "--job", "one", "--step", "4"], 2, "load2")
    j.wait(120)
    assert "saved at world size 2) at world size 2: identical" in j.output(), j.output()
