# SPDX-License-Identifier: MIT
"""A node lost and restored through DCP from partner memory.

Two daemons as two nodes of one group (as in scripts/demo.sh and
tests/cluster/cluster-node-lost.sh), each keeping its partner node's ranks'
newest step in memory. 4 ranks, 2 per node, each connected to its node's
daemon, train a small model (data parallel) with a table sharded over the
ranks (a DTensor: each rank's rows exist only in its shard) and save with
dcp.async_save through ckpt.dcp until steps commit. Then the whole job is
killed with SIGKILL and node 1 is lost with it: its daemon killed, its
node-local directory wiped, and its ranks' files of every step removed from
the shared root. A fresh daemon takes node 1's place; a new job loads the
newest committed step with dcp.load through CkptStorageReader. Every rank
must get back exactly what it saved, and node 1's ranks' bytes must have
come from node 0's memory (restore bytes of tier "partner", none from the
root), since the root no longer has them.

Run as a script, this file is one rank of that job (see rank_main)."""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from pathlib import Path

JOB = "partner"
WORLD = 4
SAVE_EVERY = 2
ROWS = 256  # the sharded table's rows per rank


# -- one rank (python3 test_dcp_partner.py save|load --dump DIR) -------------

def _equal(a, b, path: str) -> int:
    """Bit for bit; returns how many tensors were compared."""
    import torch
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.dtype != b.dtype or a.shape != b.shape:
            raise AssertionError(f"{path}: {b!r} is not a tensor like {a.dtype} {tuple(a.shape)}")
        if not torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)):
            raise AssertionError(f"{path}: the loaded tensor differs from the saved one")
        return 1
    if isinstance(a, dict):
        if set(a) != set(b):
            raise AssertionError(f"{path}: keys {sorted(map(str, a))} vs {sorted(map(str, b))}")
        return sum(_equal(a[k], b[k], f"{path}.{k}") for k in a)
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            raise AssertionError(f"{path}: {len(a)} items vs {len(b)}")
        return sum(_equal(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(a, b)))
    if a != b:
        raise AssertionError(f"{path}: {a!r} != {b!r}")
    return 0


def rank_main(argv: list[str]) -> int:
    import argparse

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch import nn
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    import ckpt
    from ckpt.dcp import CkptStager, CkptStorageReader, CkptStorageWriter

    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["save", "load"])
    ap.add_argument("--dump", required=True, type=Path)
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--step-delay", type=float, default=0.05)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    # The launcher's file rendezvous (conftest.py, CKPT_TEST_INIT).
    dist.init_process_group("gloo", init_method=os.environ["CKPT_TEST_INIT"],
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    save = a.mode == "save"
    torch.manual_seed(0 if save else 1)  # the loading job starts from other values
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 16))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    table = torch.zeros(ROWS, 16)  # this rank's rows of the (world * ROWS, 16) table
    ctx = ckpt.connect(job=JOB, max_save_bytes=4 << 20)
    pg = dist.new_group(backend="gloo")  # the save thread's own collectives

    def state(step: int) -> dict:
        msd, osd = get_state_dict(model, opt)
        return {"model": msd, "optim": osd, "progress": {"step": step, "rank": rank},
                "table": DTensor.from_local(table, mesh, [Shard(0)], run_check=False)}

    if not save:
        s = state(-1)
        reader = CkptStorageReader(ctx)
        dcp.load(s, storage_reader=reader, process_group=pg)
        step = reader.loaded_step
        s["table"] = s["table"].to_local()
        saved = torch.load(a.dump / f"saved-{step}.{rank}", weights_only=True)
        n = _equal(saved, s, f"rank {rank} step {step}")
        print(f"rank {rank} loaded step {step}: {n} tensors identical to what it saved",
              flush=True)
        dist.barrier()
        ctx.close()
        dist.destroy_process_group()
        return 0

    pending = None
    for step in range(1, a.steps + 1):
        g = torch.Generator().manual_seed(step * world + rank)
        x = torch.randn(8, 16, generator=g)
        loss = nn.functional.mse_loss(model(x), x)
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        table.add_(torch.randn(ROWS, 16, generator=g))  # rows only this rank has
        if step % SAVE_EVERY == 0:
            if pending is not None:
                pending[1].result()  # COMMITTED, or this raises
                print(f"rank {rank} step {pending[0]} committed", flush=True)
            s = state(step)
            # What this rank saves, as a file to compare the load with.
            ref = dict(s, table=table)
            tmp = a.dump / f".saved-{step}.{rank}"
            torch.save(ref, tmp)
            tmp.rename(a.dump / f"saved-{step}.{rank}")
            w = CkptStorageWriter(ctx, step)
            pending = (step, dcp.async_save(s, storage_writer=w, async_stager=CkptStager(w),
                                            process_group=pg))
        time.sleep(a.step_delay)
    return 0


# -- the test -----------------------------------------------------------------

def _wait(cond, timeout: float, what: str, extra=lambda: "") -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"{what} within {timeout} s\n{extra()}")
        time.sleep(0.1)


def _newest_settled(node, job: str) -> int:
    """The newest committed step once it stops moving (a save handed over
    before the kill may still commit)."""
    prev = None
    for _ in range(40):
        cur = node.committed(job)
        if cur and cur[-1] == prev:
            return prev
        prev = cur[-1] if cur else None
        time.sleep(0.5)
    raise AssertionError(f"the newest committed step of {job} kept moving: {node.committed(job)}")


def test_lost_node_restores_from_partner_memory(cluster2, cluster_launch, tmp_path):
    c = cluster2
    n0 = c.nodes[0]
    dump = tmp_path / "saved"
    dump.mkdir()
    me = Path(__file__).resolve()

    run = cluster_launch(me, ["save", "--dump", str(dump)], WORLD, "saving")
    _wait(lambda: len(n0.committed(JOB)) >= 2 or any(p.poll() is not None for p in run.procs),
          90, "no 2 steps committed", lambda: run.output() + n0.tail())
    assert all(p.poll() is None for p in run.procs), "a rank ended\n" + run.output()
    run.kill9()
    newest = _newest_settled(n0, JOB)
    assert newest % SAVE_EVERY == 0, n0.committed(JOB)

    # Node 1's ranks' copies of that step are in node 0's memory.
    for r in c.ranks_of(1):
        want = f"partner copy received job={JOB} step={newest} rank={r} "
        _wait(lambda: want in n0.log.read_text(errors="replace"), 30,
              f"node 0 did not log '{want}'", n0.tail)
    assert n0.metric("ckpt_partner_bytes") > 0

    # Node 1 is lost: its daemon, its node-local directory, and its ranks'
    # files of every step in the shared root.
    c.nodes[1].kill9()
    shutil.rmtree(c.node_dir(1))
    gone = 0
    for step_dir in (c.root / JOB).glob("step-*"):
        for r in c.ranks_of(1):
            for f in step_dir.glob(f"rank-{r:06d}.*"):
                f.unlink()
                gone += 1
    assert gone >= 2 * len(c.ranks_of(1)), gone  # a shard and an index each, at least
    c.start(1)
    c.wait_whole()
    n1 = c.nodes[1]
    for tier in ("partner", "root", "memory"):
        assert n1.metric("ckpt_restore_bytes_total", ckpt_job=JOB, tier=tier) == 0

    load = cluster_launch(me, ["load", "--dump", str(dump)], WORLD, "loading")
    load.wait(90)
    out = load.output()
    for r in range(WORLD):
        m = re.search(rf"^rank {r} loaded step (\d+): (\d+) tensors identical", out, re.M)
        assert m, f"rank {r} did not load\n{out}"
        assert int(m.group(1)) == newest, (r, m.group(1), newest)
        assert int(m.group(2)) > 10, m.group(2)  # model, AdamW state, the table

    # Node 1's ranks came from partner memory (the root has none of their files).
    log1 = n1.log.read_text(errors="replace")
    for r in c.ranks_of(1):
        assert f"fetched from partner memory job={JOB} step={newest} rank={r} " in log1, \
            f"node 1 did not fetch rank {r} from partner memory\n{n1.tail()}"
        assert re.search(rf"agreed job={JOB} step={newest} rank={r} .*tier=partner", log1), \
            n1.tail()
    partner = n1.metric("ckpt_restore_bytes_total", ckpt_job=JOB, tier="partner")
    root = n1.metric("ckpt_restore_bytes_total", ckpt_job=JOB, tier="root")
    assert partner >= len(c.ranks_of(1)) * ROWS * 16 * 4, partner  # at least their tables
    assert root == 0, f"node 1 read {root} bytes from the root"
    # Node 0's ranks: not from the partner tier (their files are in the root,
    # or the arena the killed ranks left on node 0).
    assert n0.metric("ckpt_restore_bytes_total", ckpt_job=JOB, tier="partner") == 0


if __name__ == "__main__":
    sys.exit(rank_main(sys.argv[1:]))
