# SPDX-License-Identifier: MIT
"""One rank of the DCP tests: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
and CKPT_SOCKET come from the environment (as torchrun sets them).

  train --job J --steps N [--save-every K] [--resume] --dump FILE
      a small decoder-only transformer with AdamW, data parallel over
      gloo; async saves through ckptd every K steps; with --resume it
      first loads the newest committed step. Writes the final model and
      optimizer state to FILE.RANK. Prints "step S committed" lines.
  reshard-save --job J --step S / reshard-load --job J --step S
      a DTensor-sharded state saved at one world size and checked
      against its global values when loaded at another.
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

import ckpt
from ckpt.dcp import CkptStager, CkptStorageReader, CkptStorageWriter

VOCAB, DIM, SEQ, BATCH = 64, 32, 16, 4


class TinyDecoder(nn.Module):
    """Decoder-only: token + position embeddings, causal self-attention blocks, LM head."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(SEQ, DIM)
        layer = nn.TransformerEncoderLayer(DIM, nhead=2, dim_feedforward=64, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, x):
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        return self.head(self.norm(self.blocks(h, mask=mask, is_causal=True)))


def batch(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)


def train(a, rank, world):
    torch.manual_seed(0)
    model = TinyDecoder()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    ctx = ckpt.connect(job=a.job, max_save_bytes=8 << 20)
    ckpt_pg = dist.new_group(backend="gloo")  # the save thread's own collectives
    start = 0
    if a.resume:
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd, "progress": {"step": -1, "seen": []}}
        reader = CkptStorageReader(ctx)
        dcp.load(state, storage_reader=reader, process_group=ckpt_pg)
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        start = state["progress"]["step"]
        assert start == reader.loaded_step, (start, reader.loaded_step)
        assert state["progress"]["seen"] == list(range(1, start + 1))
        print(f"rank {rank} resumed at step {start}", flush=True)
    pending = None
    for step in range(start + 1, a.steps + 1):
        x = batch(step, rank)
        loss = nn.functional.cross_entropy(model(x[:, :-1]).reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        if a.save_every and step % a.save_every == 0:
            if pending is not None:
                pending[1].result()  # the previous step is COMMITTED (or this raises)
                print(f"rank {rank} step {pending[0]} committed", flush=True)
            msd, osd = get_state_dict(model, opt)
            state = {"model": msd, "optim": osd,
                     "progress": {"step": step, "seen": list(range(1, step + 1))}}
            w = CkptStorageWriter(ctx, step)
            pending = (step, dcp.async_save(state, storage_writer=w, async_stager=CkptStager(w),
                                            process_group=ckpt_pg))
        if a.step_delay:
            import time
            time.sleep(a.step_delay)
    if pending is not None:
        pending[1].result()
        print(f"rank {rank} step {pending[0]} committed", flush=True)
    msd, osd = get_state_dict(model, opt)
    torch.save({"model": msd, "optim": osd}, f"{a.dump}.{rank}")
    dist.barrier()
    ctx.close()


def global_values(step):
    g = torch.Generator().manual_seed(step)
    return {"w": torch.randn(12, 5, generator=g),
            "emb": torch.randn(7, 3, generator=g).to(torch.bfloat16),
            "rep": torch.arange(10, dtype=torch.int64) * step}


def reshard(a, rank, world, save):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (world,))
    ctx = ckpt.connect(job=a.job, max_save_bytes=1 << 20)
    ref = global_values(a.step)
    if save:
        state = {"w": distribute_tensor(ref["w"], mesh, [Shard(0)]),
                 "emb": distribute_tensor(ref["emb"], mesh, [Shard(1)]),
                 "rep": distribute_tensor(ref["rep"], mesh, [Replicate()]),
                 "meta": {"step": a.step, "world": world}}
        w = CkptStorageWriter(ctx, a.step)
        dcp.async_save(state, storage_writer=w, async_stager=CkptStager(w)).result()
        print(f"rank {rank} step {a.step} committed at world size {world}", flush=True)
    else:
        state = {"w": distribute_tensor(torch.zeros(12, 5), mesh, [Shard(0)]),
                 "emb": distribute_tensor(torch.zeros(7, 3, dtype=torch.bfloat16), mesh, [Shard(1)]),
                 "rep": distribute_tensor(torch.zeros(10, dtype=torch.int64), mesh, [Replicate()]),
                 "meta": {"step": None, "world": None}}
        dcp.load(state, storage_reader=CkptStorageReader(ctx, a.step))
        for k in ("w", "emb", "rep"):
            got = state[k].full_tensor()
            if not torch.equal(got, ref[k]):
                print(f"rank {rank}: {k} differs after loading step {a.step} at world {world}")
                sys.exit(1)
        assert state["meta"]["step"] == a.step, state["meta"]
        print(f"rank {rank} loaded step {a.step} (saved at world size {state['meta']['world']}) "
              f"at world size {world}: identical", flush=True)
    dist.barrier()
    ctx.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["train", "reshard-save", "reshard-load"])
    ap.add_argument("--job", required=True)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--step", type=int, default=0)
    ap.add_argument("--save-every", type=int, default=0)
    ap.add_argument("--step-delay", type=float, default=0.0)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--dump", default="")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    # The tests' launcher gives a file rendezvous (CKPT_TEST_INIT); torchrun
    # gives MASTER_ADDR/MASTER_PORT (env://).
    init = os.environ.get("CKPT_TEST_INIT")
    if init:
        dist.init_process_group("gloo", init_method=init, rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]))
    else:
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if a.mode == "train":
        train(a, rank, world)
    else:
        reshard(a, rank, world, a.mode == "reshard-save")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
