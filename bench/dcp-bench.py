#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""dcp-bench: ckpt's DCP storage writer against DCP's own FileSystemWriter.

For each size S (bytes of state per rank) the bench starts a ckptd and R
rank processes (gloo, as torchrun would start them). Every rank builds the
same kind of state dict of S bytes: fp32 and bf16 tensors of realistic
sizes ([4096, 4096], [4096, 1024], [1024, 4096], [4096], ...) under
"model.*", plus non-tensor items (a step counter, an lr). Then, every
repetition, side by side (the saves in this order, each repetition starting one
later: rep 1 with fs-thread, rep 2 with fs-thread-ds, ...):

  memcpy      torch.Tensor.copy_ of every tensor into pre-allocated,
              pre-faulted tensors: the floor of any save's stall; run
              right before every save, so that each save has a floor
              measured under the same load of the (shared) machine.
  fs-sync     dcp.save(FileSystemWriter(dir)).
  fs-thread   dcp.async_save(FileSystemWriter(dir)), thread executor; the
              writer is its own stager (BlockingAsyncStager: a fresh CPU
              copy of the state every save), what a plain
              async_save(storage_writer=FileSystemWriter(...)) does.
  fs-thread-ds  the same with DCP's DefaultStager (pinned memory asked
              for, which torch ignores without CUDA; shared memory; its
              storages cached and reused across saves; synchronous
              staging, since asynchronous staging needs an accelerator).
  fs-proc-ds  the same DefaultStager, AsyncCheckpointerType.PROCESS (the
              save runs in a spawned process of each rank).
  ckpt        dcp.async_save(CkptStorageWriter, async_stager=CkptStager)
              through the ckptd, thread executor (the only one ckpt's
              writer supports).
  load-fs     dcp.load(FileSystemReader) of this repetition's fs-sync
              checkpoint into the pre-allocated tensors of memcpy.
  load-ckpt   dcp.load(CkptStorageReader) of this repetition's ckpt step.

Reported per variant: blocked (the call until dcp.save / dcp.async_save
returns: what the training loop waits for) and durable (the call until
the data is on disk: for FileSystemWriter until its future is done, which
includes its fsync of every file (sync_files=True, the default) and of
.metadata, plus an fsync of the checkpoint directory and its parent by
this bench, which DCP does not do; for ckpt until ckptd reports the step
COMMITTED). A measurement is that of the slowest rank (all ranks start
after a barrier). The first repetition is a warm-up (DCP's process
executor spawns its processes then, DefaultStager allocates its cache,
ckptd faults in its slots); it is printed but not in the medians.

Run as root, the bench syncs and drops the page cache (echo 3 >
/proc/sys/vm/drop_caches) before every save and load (--no-drop-caches
to skip); not as root it says so. Everything goes under DIR/dcp-bench-PID
(ckptd's root and the FileSystemWriter checkpoints), removed at the end
unless --keep; each repetition's FileSystemWriter checkpoints are removed
at the end of the repetition, ckptd keeps its steps (--keep-last 0).

    bench/dcp-bench.py --dir /var/tmp --sizes 1GiB,2GiB --reps 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

SAVE_VARIANTS = ["fs-sync", "fs-thread", "fs-thread-ds", "fs-proc-ds", "ckpt"]
LOADS = ["load-fs", "load-ckpt"]


def parse_size(s: str) -> int:
    s = s.strip()
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = s.upper().removesuffix("B").removesuffix("I")
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def fmt_size(n: int) -> str:
    return f"{n / (1 << 30):g} GiB" if n >= 1 << 30 else f"{n / (1 << 20):g} MiB"


# --------------------------------------------------------------------------
# The rank processes
# --------------------------------------------------------------------------

def build_state(nbytes: int, seed: int, rank: int):
    """A model-like state dict of about nbytes, the rank's own layers (as a
    pipeline stage holds them: FQNs "model.stage{rank}.layers.{i}...", so
    that DCP deduplicates nothing across ranks): per layer an fp32
    [4096, 4096] (64 MiB), a bf16 [4096, 4096] (32 MiB), an fp32
    [4096, 1024] (16 MiB), a bf16 [1024, 4096] (8 MiB) and fp32 [4096]
    norms; the rest in fp32 [1024, 1024] tensors."""
    import torch
    g = torch.Generator().manual_seed(seed)
    shapes = [("attn.wqkv.weight", (4096, 4096), torch.float32),
              ("mlp.w_in.weight", (4096, 4096), torch.bfloat16),
              ("attn.wo.weight", (4096, 1024), torch.float32),
              ("mlp.w_out.weight", (1024, 4096), torch.bfloat16),
              ("attn_norm.weight", (4096,), torch.float32),
              ("mlp_norm.weight", (4096,), torch.float32)]
    layer = sum(torch.Size(s).numel() * torch.empty((), dtype=d).element_size()
                for _, s, d in shapes)
    model = {}
    left = nbytes
    i = 0
    while left >= layer:
        for name, shape, dt in shapes:
            model[f"stage{rank}.layers.{i}.{name}"] = torch.randn(shape, generator=g).to(dt)
        left -= layer
        i += 1
    j = 0
    while left >= 4 << 20:
        model[f"stage{rank}.extra.{j}.weight"] = torch.randn((1024, 1024), generator=g)
        left -= 4 << 20
        j += 1
    if left >= 4:
        model[f"stage{rank}.tail.bias"] = torch.randn((left // 4,), generator=g)
    return {"model": model, "extra": {"step": 1000, "lr": 3e-4, "note": "dcp-bench"}}


def tensors_of(sd):
    return list(sd["model"].values())


def worker(a) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
    from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

    import ckpt
    from ckpt.dcp import CkptStager, CkptStorageReader, CkptStorageWriter

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    save_pg = dist.new_group(backend="gloo")
    work = Path(a.work)
    S = a.bytes
    variants = a.variants.split(",")

    src = build_state(S, 1234 + rank, rank)
    total = sum(t.numel() * t.element_size() for t in tensors_of(src))
    ntens = len(src["model"])
    dst = build_state(S, 99, rank)  # same structure, other values
    for t in tensors_of(dst):
        t.zero_()  # faulted in

    ctx = ckpt.connect(job=a.job, rank=rank, world_size=world,
                       max_save_bytes=total + (64 << 20))
    ds = DefaultStager(StagingOptions(use_pinned_memory=True, use_shared_memory=True,
                                      use_async_staging=False, use_non_blocking_copy=False))

    def log(msg):
        if rank == 0:
            print(msg, flush=True)

    def drop():
        """Rank 0 syncs and drops the page cache while the others wait."""
        dist.barrier()
        if rank == 0:
            os.sync()
            if a.drop_caches:
                with open("/proc/sys/vm/drop_caches", "w") as f:
                    f.write("3\n")
        dist.barrier()

    def fsync_dir(p: Path) -> None:
        for d in (p, p.parent):
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def timed(fn, box):
        def stage(sd):
            t = time.perf_counter()
            try:
                return fn(sd)
            finally:
                box[0] = time.perf_counter() - t
        return stage

    def slowest(*vals):
        t = torch.tensor(vals, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def check(d, what):
        bad = [k for k, v in src["model"].items() if not torch.equal(v, d["model"][k])]
        if bad or d["extra"] != src["extra"]:
            raise SystemExit(f"rank {rank}: {what}: {len(bad)} of {ntens} tensors differ "
                             f"(first {bad[:1]}), extra {d['extra']}")

    log(f"rank state: {ntens} tensors, {total / (1 << 20):.1f} MiB "
        f"(fp32 and bf16), + 3 non-tensor items")

    results = []
    for rep in range(a.reps + 1):
        r: dict[str, list[float]] = {}
        rdir = work / f"fs-{rep}"
        if rank == 0:
            rdir.mkdir(parents=True, exist_ok=True)
        dist.barrier()

        def memcpy() -> float:
            """The floor: one copy of the state into pre-faulted tensors."""
            dist.barrier()
            t0 = time.perf_counter()
            with torch.no_grad():
                for s_, d_ in zip(tensors_of(src), tensors_of(dst)):
                    d_.copy_(s_)
            t1 = time.perf_counter() - t0
            return slowest(t1)[0]

        mc: list[float] = []

        # Each repetition starts one variant later, so that no variant always
        # runs first after the previous repetition's files were deleted.
        k = rep % len(variants)
        for v in variants[k:] + variants[:k]:
            drop()
            # A memcpy right before each save: the machine is shared and its
            # speed drifts, so each save is compared with its own floor.
            mc.append(memcpy())
            r["memcpy@" + v] = [mc[-1]]
            path = rdir / v
            staged = [0.0]
            if v == "ckpt":
                w = CkptStorageWriter(ctx, rep + 1)
                stager = CkptStager(w)
                kw = dict(storage_writer=w, async_stager=stager, process_group=save_pg)
            else:
                w = FileSystemWriter(str(path))  # sync_files=True, thread_count=1
                kw = dict(storage_writer=w, process_group=save_pg)
                stager = w  # FileSystemWriter is a BlockingAsyncStager
                if v.endswith("-ds"):
                    kw["async_stager"] = stager = ds
                if v.startswith("fs-proc"):
                    kw["async_checkpointer_type"] = AsyncCheckpointerType.PROCESS
            if v != "fs-sync":
                stager.stage = timed(type(stager).stage.__get__(stager), staged)
            dist.barrier()
            t0 = time.perf_counter()
            if v == "fs-sync":
                dcp.save(src, **kw)
                tb = time.perf_counter() - t0
            else:
                fut = dcp.async_save(src, **kw)
                tb = time.perf_counter() - t0
                fut.result()
            if v != "ckpt" and rank == 0:
                fsync_dir(path)  # DCP leaves the directory entries unsynced
            td = time.perf_counter() - t0
            if v != "fs-sync":
                del stager.stage
            r[v] = slowest(tb, td, staged[0])
            log(f"  rep {rep} {v:13s} blocked {r[v][0]:7.3f} s  durable {r[v][1]:7.3f} s  "
                f"(stager's stage() {r[v][2]:7.3f} s; memcpy before it {mc[-1]:.3f} s)")

        for v in LOADS:
            if v == "load-fs" and "fs-sync" not in variants:
                continue
            if v == "load-ckpt" and "ckpt" not in variants:
                continue
            for t in tensors_of(dst):
                t.zero_()
            dst["extra"] = {"step": 0, "lr": 0.0, "note": ""}
            drop()
            t0 = time.perf_counter()
            if v == "load-fs":
                dcp.load(dst, storage_reader=FileSystemReader(str(rdir / "fs-sync")),
                         process_group=save_pg)
            else:
                rd = CkptStorageReader(ctx, rep + 1)
                dcp.load(dst, storage_reader=rd, process_group=save_pg)
            tl = time.perf_counter() - t0
            r[v] = slowest(tl, tl)
            if rep <= 1:
                check(dst, f"rep {rep} {v}")
            log(f"  rep {rep} {v:13s} {r[v][0]:7.3f} s")

        r["memcpy"] = [statistics.median(mc)]
        dist.barrier()
        if rank == 0:
            shutil.rmtree(rdir)
        results.append(r)
        log(f"  rep {rep} {'(warm-up)' if rep == 0 else ''} done")

    if rank == 0:
        with open(a.out, "w") as f:
            json.dump({"bytes_per_rank": total, "tensors_per_rank": ntens, "reps": results}, f)
    ds.close()
    ctx.close()
    dist.barrier()
    dist.destroy_process_group()


# --------------------------------------------------------------------------
# The driver
# --------------------------------------------------------------------------

def mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ckptd(exe: str, work: Path, sock: Path, staging: int) -> subprocess.Popen:
    (work / "root").mkdir(parents=True, exist_ok=True)
    log = open(work / "ckptd.log", "ab")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CKPTD_")}
    p = subprocess.Popen([exe, "--config", "", "--root", str(work / "root"),
                          "--socket", str(sock), "--staging-bytes", str(staging),
                          "--slots-per-rank", "1", "--keep-last", "0",
                          "--log-level", "warn"],
                         stdout=log, stderr=subprocess.STDOUT, env=env)
    log.close()
    for _ in range(200):
        if sock.exists():
            return p
        if p.poll() is not None:
            raise SystemExit(f"dcp-bench: ckptd exited {p.returncode} at start; "
                             f"see {work / 'ckptd.log'}")
        time.sleep(0.05)
    p.kill()
    raise SystemExit("dcp-bench: ckptd's socket did not appear within 10 s")


def stop(p: subprocess.Popen | None) -> None:
    if p is None or p.poll() is not None:
        return
    p.terminate()
    try:
        p.wait(20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def run_size(a, S: int, work: Path) -> dict:
    sock = work / "ckptd.sock"
    staging = a.ranks * (S + S // 8 + (128 << 20))  # ckptd's slot: max_save_bytes + index
    d = start_ckptd(a.ckptd, work, sock, staging)
    out = work / f"result-{S}.json"
    port = free_port()
    procs = []
    try:
        for r in range(a.ranks):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(a.ranks), LOCAL_RANK=str(r),
                       LOCAL_WORLD_SIZE=str(a.ranks), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), CKPT_SOCKET=str(sock), OMP_NUM_THREADS="1")
            # the ckpt package and libckpt of this source and build tree, unless set
            env["PYTHONPATH"] = os.pathsep.join(
                x for x in (str(REPO / "python"), env.get("PYTHONPATH")) if x)
            env.setdefault("CKPT_LIBRARY", a.library)
            cmd = [sys.executable, __file__, "--worker", "--work", str(work), "--bytes", str(S),
                   "--reps", str(a.reps), "--job", f"dcpbench-{S >> 20}m",
                   "--variants", ",".join(a.variants), "--out", str(out)]
            if a.drop_caches:
                cmd.append("--drop-caches")
            # rank 0 prints its progress; the others only their errors
            procs.append(subprocess.Popen(cmd, env=env,
                                          stdout=None if r == 0 else subprocess.DEVNULL))
        end = time.monotonic() + a.timeout
        bad = []
        for i, p in enumerate(procs):
            try:
                rc = p.wait(max(1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise SystemExit(f"dcp-bench: ranks did not finish within {a.timeout} s")
            if rc != 0:
                bad.append((i, rc))
        if bad:
            raise SystemExit(f"dcp-bench: ranks exited {bad}; ckptd log: {work / 'ckptd.log'}")
        if d.poll() is not None:
            raise SystemExit(f"dcp-bench: ckptd exited {d.returncode} during the run")
        with open(out) as f:
            return json.load(f)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
        stop(d)


def report(S: int, res: dict, variants: list[str], ranks: int) -> None:
    reps = res["reps"][1:]  # rep 0 is the warm-up
    first = res["reps"][0]

    def med(k, i):
        return statistics.median(r[k][i] for r in reps)

    mc = statistics.median(r["memcpy@" + v][0] for r in reps for v in variants)

    def paired(v):
        """Median over the repetitions of blocked / the memcpy right before."""
        return statistics.median(r[v][0] / r["memcpy@" + v][0] for r in reps)

    print(f"\n### {ranks} ranks x {fmt_size(S)} ({res['tensors_per_rank']} tensors per rank, "
          f"{res['bytes_per_rank'] / (1 << 20):.0f} MiB), median of {len(reps)}\n")
    print("| variant | blocked s | of which stage() s | durable s | blocked / memcpy | "
          "blocked / memcpy before it | first save: blocked / durable s |")
    print("|---|---|---|---|---|---|---|")
    print(f"| memcpy (floor; median of all) | {mc:.3f} | - | - | 1.00 | - | "
          f"{first['memcpy'][0]:.3f} / - |")
    for v in variants:
        st = f"{med(v, 2):.3f}" if v != "fs-sync" else "-"
        print(f"| {v} | {med(v, 0):.3f} | {st} | {med(v, 1):.3f} | {med(v, 0) / mc:.2f} | "
              f"{paired(v):.2f} | {first[v][0]:.3f} / {first[v][1]:.3f} |")
    for v in LOADS:
        if v in reps[0]:
            print(f"| {v} | {med(v, 0):.3f} | - | - | - | - | {first[v][0]:.3f} |")
    if "ckpt" in variants:
        asyncs = [v for v in variants if v not in ("fs-sync", "ckpt")]
        cb, cd = med("ckpt", 0), med("ckpt", 1)
        print()
        print(f"- ckpt blocked / memcpy: {cb / mc:.2f}x, / the memcpy right before it: "
              f"{paired('ckpt'):.2f}x (median of the repetitions' ratios; goal <= 1.2x)")
        if asyncs:
            best = min(asyncs, key=lambda v: med(v, 0))
            print(f"- ckpt blocked / DCP's best async blocked ({best}): "
                  f"{cb / med(best, 0):.2f}x")
        if "fs-sync" in variants:
            print(f"- ckpt durable / fs-sync durable: {cd / med('fs-sync', 1):.2f}x "
                  f"(goal <= 1.0x)")
            print(f"- ckpt blocked / fs-sync blocked: {cb / med('fs-sync', 0):.3f}x")
        for v in asyncs:
            print(f"- ckpt durable / {v} durable: {cd / med(v, 1):.2f}x")
        if "load-fs" in reps[0] and "load-ckpt" in reps[0]:
            print(f"- load-ckpt / load-fs: {med('load-ckpt', 0) / med('load-fs', 0):.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] +
                                 " Method and results: docs/BENCHMARKS.md.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/var/tmp",
                    help="file system under test: everything goes to DIR/dcp-bench-PID "
                         "(default /var/tmp)")
    ap.add_argument("--sizes", default="1GiB,2GiB", help="bytes of state per rank, comma "
                    "separated (default 1GiB,2GiB)")
    ap.add_argument("--reps", default="3", help="repetitions after the warm-up, one number "
                    "or one per size (e.g. 3,2; default 3)")
    ap.add_argument("--ranks", type=int, default=2, help="rank processes (default 2)")
    ap.add_argument("--variants", default=",".join(SAVE_VARIANTS),
                    help=f"saves to run, of {','.join(SAVE_VARIANTS)} (default all)")
    ap.add_argument("--ckptd", default=str(REPO / "build" / "ckptd" / "ckptd"),
                    help="the ckptd binary to start (default: the build tree's)")
    ap.add_argument("--library", default=str(REPO / "build" / "libckpt" / "libckpt.so.0"),
                    help="libckpt the ckpt package loads, unless $CKPT_LIBRARY is set")
    ap.add_argument("--no-drop-caches", dest="drop_caches", action="store_false",
                    help="do not drop the page cache (it is dropped only as root)")
    ap.add_argument("--keep", action="store_true", help="keep DIR/dcp-bench-PID")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per size")
    # the rank processes
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--bytes", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--job", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--drop-caches", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.worker:
        a.reps = int(a.reps)
        worker(a)
        return

    a.variants = [v for v in a.variants.split(",") if v]
    for v in a.variants:
        if v not in SAVE_VARIANTS:
            ap.error(f"unknown variant {v!r} (known: {', '.join(SAVE_VARIANTS)})")
    sizes = [parse_size(s) for s in a.sizes.split(",") if s]
    reps = [int(x) for x in a.reps.split(",")]
    if len(reps) == 1:
        reps *= len(sizes)
    if len(reps) != len(sizes) or min(reps) < 1:
        ap.error("--reps: one number >= 1, or one per size")
    if not os.access(a.ckptd, os.X_OK):
        ap.error(f"{a.ckptd} is not an executable ckptd (--ckptd)")
    if a.drop_caches and os.geteuid() != 0:
        print("dcp-bench: not root: the page cache is not dropped", flush=True)
        a.drop_caches = False
    base = Path(a.dir)
    if not base.is_dir():
        ap.error(f"{base} is not a directory")
    work = base / f"dcp-bench-{os.getpid()}"

    import torch
    print(f"dcp-bench: torch {torch.__version__}, {a.ranks} ranks on gloo, sizes "
          f"{', '.join(fmt_size(s) for s in sizes)} per rank, reps {reps} (+1 warm-up), "
          f"dir {base}, page cache {'dropped' if a.drop_caches else 'not dropped'} "
          f"before every save and load", flush=True)
    ok = False
    try:
        out = []
        for S, n in zip(sizes, reps):
            a.reps = n
            sw = work / f"s{S >> 20}m"
            sw.mkdir(parents=True)
            free = shutil.disk_usage(sw).free
            need = a.ranks * S * (2 + n)
            if free < need:
                raise SystemExit(f"dcp-bench: {base} has {fmt_size(free)} free, needs "
                                 f"{fmt_size(need)}")
            print(f"\n== {a.ranks} ranks x {fmt_size(S)}", flush=True)
            # Resident at the peak, per rank: the state, the memcpy / load
            # target, DefaultStager's cache, ckptd's slot and, during
            # fs-thread, the writer's fresh copy; plus ~0.5 GiB of each
            # process. fs-thread is left out where that does not fit.
            wanted = list(a.variants)
            peak = a.ranks * (S * 5 + (1 << 29))
            avail = mem_available()
            if "fs-thread" in a.variants and avail is not None and avail < peak + (1 << 30):
                a.variants = [v for v in a.variants if v != "fs-thread"]
                print(f"dcp-bench: {fmt_size(avail)} of memory available, fs-thread needs about "
                      f"{fmt_size(peak)}: fs-thread left out at this size", flush=True)
            out.append((S, run_size(a, S, sw), a.variants))
            report(*out[-1], a.ranks)
            a.variants = wanted
        print("\n## Results (all sizes)")
        for S, res, vs in out:
            report(S, res, vs, a.ranks)
        ok = True
    finally:
        if a.keep or not ok:
            print(f"\ndcp-bench: files kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
