# SPDX-License-Identifier: MIT
"""Resharding: DTensor state saved at world size 4, loaded at 2 and at 3
(values identical to the saved global tensors), saved again at 2 and
loaded at 4, through ranged reads of any rank's items (ckpt_read_ranges)."""

from pathlib import Path

import ckpt

WORKER = Path(__file__).resolve().parent / "dcp_worker.py"


def test_save_at_4_load_at_2_and_3_then_grow_back_to_4(ckptd, launch):
    assert ckpt.HAVE_READ_RANGES
    launch(WORKER, ["reshard-save", "--job", "rs", "--step", "1"], 4, "save4").wait(120)
    for world in (2, 3):
        j = launch(WORKER, ["reshard-load", "--job", "rs", "--step", "1"], world, f"load{world}")
        j.wait(120)
        assert "saved at world size 4) at world size %d: identical" % world in j.output()
    launch(WORKER, ["reshard-save", "--job", "rs", "--step", "2"], 2, "save2").wait(120)
    j = launch(WORKER, ["reshard-load", "--job", "rs", "--step", "2"], 4, "load4")
    j.wait(120)
    assert "saved at world size 2) at world size 4: identical" in j.output()
    assert ckptd.committed("rs") == [1, 2]
