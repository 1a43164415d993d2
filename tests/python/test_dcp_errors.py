# SPDX-License-Identifier: MIT
"""Bad input through ckpt.dcp (one process, no process group): a clear
error, nothing committed for the failed step, and the next save works."""

import pytest
import torch
import torch.distributed.checkpoint as dcp

import ckpt
from ckpt.dcp import CkptStager, CkptStorageReader, CkptStorageWriter


def _async_save(ctx, state, step):
    w = CkptStorageWriter(ctx, step)
    return dcp.async_save(state, storage_writer=w, async_stager=CkptStager(w))


@pytest.fixture
def ctx(ckptd):
    with ckpt.connect(job="bad", rank=0, world_size=1, max_save_bytes=1 << 20) as c:
        yield c


def _good(step):
    return {"w": torch.full((4, 4), float(step)), "extra": {"step": step, "names": ["a", "b"]}}


def test_unsupported_dtype_fails_at_staging_and_training_goes_on(ctx, ckptd):
    state = {"w": torch.ones(3), "z": torch.zeros(2, dtype=torch.complex64)}
    with pytest.raises(ckpt.UnsupportedDtypeError, match=r"step 1: item 'z'.*complex64"):
        _async_save(ctx, state, 1)
    _async_save(ctx, _good(2), 2).result()
    assert ckptd.committed("bad") == [2]


def test_unsupported_dtype_in_a_synchronous_save(ctx, ckptd):
    from torch.distributed.checkpoint.api import CheckpointException
    with pytest.raises(CheckpointException) as e:
        dcp.save({"z": torch.zeros(2, dtype=torch.complex128)},
                 storage_writer=CkptStorageWriter(ctx, 1))
    # DCP wraps each rank's exception (with its traceback) in a CheckpointException.
    exc = e.value.failures[0][0]
    assert isinstance(exc, ckpt.UnsupportedDtypeError), exc
    assert "item 'z'" in str(exc) and "complex128" in str(exc) and "step 1" in str(exc)
    dcp.save(_good(2), storage_writer=CkptStorageWriter(ctx, 2))
    assert ckptd.committed("bad") == [2]


def test_non_contiguous_tensors_are_stored_contiguous_and_load_back(ctx):
    base = torch.arange(24, dtype=torch.float64).view(4, 6)
    state = {"t": base.t(), "s": base[:, ::2], "e": torch.empty(0, 3)}
    _async_save(ctx, state, 1).result()
    out = {"t": torch.zeros(6, 4, dtype=torch.float64), "s": torch.zeros(4, 3, dtype=torch.float64),
           "e": torch.empty(0, 3)}
    dcp.load(out, storage_reader=CkptStorageReader(ctx))
    assert torch.equal(out["t"], base.t()) and torch.equal(out["s"], base[:, ::2])


def test_state_dict_larger_than_negotiated(ctx, ckptd):
    big = {"huge": torch.zeros(ctx.slot_bytes // 4 + 1)}
    with pytest.raises(ckpt.TooBigError, match="step 1"):
        _async_save(ctx, big, 1)
    _async_save(ctx, _good(2), 2).result()
    assert ckptd.committed("bad") == [2]


def test_ckptd_down_at_save_time(ctx, ckptd):
    _async_save(ctx, _good(1), 1).result()
    ckptd.kill9()
    with pytest.raises(ckpt.CkptError) as e:
        _async_save(ctx, _good(2), 2)
    assert "step 2" in str(e.value) and e.value.code < 0
    ckptd.start()
    _async_save(ctx, _good(3), 3).result()  # libckpt reconnects by itself
    assert ckptd.committed("bad") == [1, 3]
    out = _good(0)
    reader = CkptStorageReader(ctx)
    dcp.load(out, storage_reader=reader)
    assert reader.loaded_step == 3
    assert torch.equal(out["w"], torch.full((4, 4), 3.0)) and out["extra"]["step"] == 3


def test_load_of_an_older_step_and_bytes_items(ctx):
    for step in (1, 2):
        _async_save(ctx, _good(step), step).result()
    out = _good(0)
    dcp.load(out, storage_reader=CkptStorageReader(ctx, 1))
    assert torch.equal(out["w"], torch.ones(4, 4)) and out["extra"] == {"step": 1, "names": ["a", "b"]}


def test_ckpt_inspect_lists_dcp_items_by_name(ctx, ckptd):
    import os
    import subprocess
    state = {"model": {"layer.weight": torch.ones(2, 2)}, "optim": {"param_groups": [{"lr": 1}]}}
    _async_save(ctx, state, 1).result()
    step = str(ckptd.job_dir("bad") / "step-0000000001")
    out = subprocess.run([os.environ["CKPT_INSPECT"], step, "--verify"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    out = subprocess.run([os.environ["CKPT_INSPECT"], step], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "model.layer.weight" in out.stdout and "optim.param_groups" in out.stdout, out.stdout
