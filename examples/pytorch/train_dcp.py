# SPDX-License-Identifier: MIT
"""Train with torch.distributed.checkpoint saving through ckptd.

    ckptd --root /var/lib/ckpt &                 # or the ckptd of the node
    torchrun --nproc-per-node 2 examples/pytorch/train_dcp.py --steps 20
    torchrun --nproc-per-node 2 examples/pytorch/train_dcp.py --steps 40   # resumes at 20
    torchrun --nproc-per-node 3 examples/pytorch/train_dcp.py --steps 60   # at 40, on 3 ranks

Every --save-every steps the state goes to ckptd with dcp.async_save: the
training loop waits only for the copy into ckptd's shared memory; the
future completes when every rank's shard is durable and the step is
committed. On start the newest committed step is loaded, if there is one.
"""

import argparse

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

import ckpt
from ckpt.dcp import CkptStager, CkptStorageReader, CkptStorageWriter


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", default="example")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--save-every", type=int, default=5)
    ap.add_argument("--max-save-mib", type=int, default=64,
                    help="the largest save of a rank, MiB (ckptd sizes its slots from it)")
    args = ap.parse_args()

    dist.init_process_group("gloo")  # RANK, WORLD_SIZE, ... from torchrun
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 16))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    # One connection per rank; the socket is $CKPT_SOCKET or ckptd's default.
    ctx = ckpt.connect(job=args.job, rank=rank, world_size=world, max_save_bytes=args.max_save_mib << 20)
    save_pg = dist.new_group(backend="gloo")  # the background save's own collectives

    def state(step):
        msd, osd = get_state_dict(model, opt)
        return {"model": msd, "optim": osd, "step": step}

    # Resume from the newest step the whole job committed.
    start = 0
    if ctx.latest() is not None:
        s = state(0)
        dcp.load(s, storage_reader=CkptStorageReader(ctx), process_group=save_pg)
        set_state_dict(model, opt, model_state_dict=s["model"], optim_state_dict=s["optim"])
        start = s["step"]
        if rank == 0:
            print(f"resumed from step {start}")

    pending = None
    for step in range(start + 1, args.steps + 1):
        g = torch.Generator().manual_seed(step * world + rank)
        x = torch.randn(32, 16, generator=g)
        loss = nn.functional.mse_loss(model(x), x)
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()

        if step % args.save_every == 0:
            if pending is not None:
                pending.result()  # the previous save committed (raises if it failed)
            writer = CkptStorageWriter(ctx, step)
            pending = dcp.async_save(state(step), storage_writer=writer,
                                     async_stager=CkptStager(writer), process_group=save_pg)
            if rank == 0:
                print(f"step {step}: loss {loss.item():.4f}, saving")
    if pending is not None:
        pending.result()
    if rank == 0:
        print(f"done at step {args.steps}; committed steps: {ctx.list()}")
    ctx.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
