# SPDX-License-Identifier: MIT
"""The ckpt package over a real ckptd: saves, outcomes, listing, restores,
zero-copy views and errors that carry ckpt's reason."""

import pydoc

import numpy as np
import pytest
import torch

import ckpt


@pytest.fixture
def ctx(ckptd):
    with ckpt.connect(job="bind", rank=0, world_size=1, max_save_bytes=1 << 20) as c:
        yield c


def test_save_wait_restore_round_trip_with_views(ctx):
    t = torch.arange(12, dtype=torch.float32).view(3, 4)
    with ctx.save(10) as s:
        s.add("plain", t)
        s.add("transposed", t.t())  # non-contiguous: copied into the slot contiguous
        v = s.reserve("reserved", torch.bfloat16, (5,))
        v.copy_(torch.linspace(0, 1, 5))
        s.add("numpy", np.arange(6, dtype=np.int16).reshape(2, 3))
        s.add("bytes", b"param groups")
        s.set_blob(b"rng")
    st = ctx.wait(10, 30)
    assert st.state == ckpt.State.COMMITTED and st.error == 0
    states = [e.state for e in ctx.events() if e.step == 10]
    assert states[-1] == ckpt.State.COMMITTED
    assert ctx.latest() == 10 and ctx.list() == [10]
    assert ctx.poll(10).state == ckpt.State.COMMITTED

    with ctx.restore() as r:
        assert r.step == 10 and r.warning is None
        info = r.tensors()
        assert info["transposed"].shape == (4, 3) and info["reserved"].dtype == "bf16"
        assert torch.equal(r.tensor("plain"), t)
        assert torch.equal(r.tensor("transposed"), t.t().contiguous())
        assert torch.equal(r.tensor("reserved"), torch.linspace(0, 1, 5).to(torch.bfloat16))
        assert (r.tensor("numpy", "numpy") == np.arange(6).reshape(2, 3)).all()
        assert bytes(r.tensor("bytes", "memoryview")) == b"param groups"
        assert r.blob() == b"rng"
        dst = torch.zeros(4, 3).t()  # into a strided destination
        r.copy_into("plain", dst)
        assert torch.equal(dst, t)
        with pytest.raises(ckpt.NotFoundError, match="no tensor 'missing'"):
            r.tensor("missing")


def test_errors_carry_the_reason_and_code(ctx):
    with ctx.save(5):
        pass
    ctx.wait(5, 30)
    with pytest.raises(ckpt.StepOrderError) as e:
        ctx.save(5)
    assert e.value.code == -1008 and "step 5" in str(e.value)
    with ctx.save(6) as s:
        with pytest.raises(ckpt.BadNameError, match="'/'"):
            s.add("a/b", torch.zeros(1))
        with pytest.raises(ckpt.UnsupportedDtypeError, match="tensor 'c'.*complex64"):
            s.add("c", torch.zeros(2, dtype=torch.complex64))
        s.add("ok", torch.ones(2))  # the save stays usable
    assert ctx.wait(6, 30).state == ckpt.State.COMMITTED
    big = ctx.slot_bytes // 4 + 1
    with pytest.raises(ckpt.TooBigError, match="step 7"):
        with ctx.save(7) as s:
            s.add("huge", torch.zeros(big))
    assert ctx.list() == [5, 6]
    with pytest.raises(ckpt.CkptTimeoutError):
        ctx.wait(99, 0.1)


def test_connect_refusal_and_missing_daemon(ckptd, tmp_path):
    with pytest.raises(ckpt.CkptError) as e:
        ckpt.connect(job="bad/name", rank=0, world_size=1, max_save_bytes=1 << 20)
    assert "bad/name" in str(e.value)
    with pytest.raises(ckpt.CkptError) as e:
        ckpt.connect(job="j", rank=0, world_size=1, max_save_bytes=1 << 20,
                     socket=tmp_path / "nobody.sock", connect_timeout=0.2)
    assert e.value.code < 0 and str(e.value)


def test_read_ranges_of_a_tensor_slice_and_a_blob_size(ctx):
    assert ckpt.HAVE_READ_RANGES
    with ctx.save(3) as s:
        s.add("x", torch.arange(100, dtype=torch.int32))
        s.set_blob(b"hello blob")
    ctx.wait(3, 30)
    got = ctx.read_ranges(3, [ckpt.ReadRequest(0, "x", 8, 8), ckpt.ReadRequest(0, None, 0, 0)])
    assert bytes(got[0].data) == torch.arange(2, 4, dtype=torch.int32).numpy().tobytes()
    assert got[1].total == len(b"hello blob")
    with pytest.raises(ckpt.CkptError, match="no such tensor|not found|ENOENT|No such"):
        ctx.read_ranges(3, [ckpt.ReadRequest(0, "nope", 0, 4)])


def test_help_reads_well():
    text = pydoc.render_doc(ckpt, renderer=pydoc.plaintext)
    for needle in ("connect(job", "class Save", "reserve(", "class Restore", "CkptError"):
        assert needle in text
