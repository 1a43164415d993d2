# SPDX-License-Identifier: MIT
"""ckpt as the storage behind torch.distributed.checkpoint (DCP).

    import torch.distributed.checkpoint as dcp
    from ckpt.dcp import CkptStorageWriter, CkptStorageReader, CkptStager

    ctx = ckpt.connect(job="llama", max_save_bytes=...)   # rank, world from $RANK, $WORLD_SIZE
    w = CkptStorageWriter(ctx, step)
    fut = dcp.async_save(state, storage_writer=w, async_stager=CkptStager(w),
                         process_group=ckpt_pg)   # a gloo group of its own
    ...                                   # training goes on
    fut.result()                          # step COMMITTED by ckptd, or raises

    dcp.load(state, storage_reader=CkptStorageReader(ctx))  # the newest step

How a DCP checkpoint is laid out in a ckpt step
-----------------------------------------------
* Every write item of a rank is a ckpt tensor of that rank's shard, named
  item_name(fqn, chunk offset): the fully qualified name, percent-escaped
  ("%" "/" "@" and control characters), followed by "@o0,o1,..." when the
  chunk does not start at the origin (a DTensor or sharded tensor's local
  chunk); names over 255 bytes are cut and end with "~" and a hash. Tensors
  keep their dtype, shape, global shape and offset, so ckpt-inspect shows
  them by their FQNs. Non-tensor items (optimizer param groups, RNG and
  data-loader state, ...) are DCP's torch.save bytes, stored as u8 tensors.
* Each rank stores every item of its own local plan, including replicated
  items DCP's planner deduplicated to another rank: every shard is
  self-contained, so a restore at the same world size reads only the
  rank's own shard (which ckpt serves from its fastest tier: own memory,
  partner memory, root, S3).
* DCP's global Metadata (with, for every item, the rank, ckpt tensor, byte
  offset and length that hold it) is pickled into the blob of rank 0, the
  DCP coordinator, which hands its shard over last: the step commits only
  with its metadata.
* Loading at the same world size: an agreed restore (one step for the whole
  job); rank 0 has the metadata in its blob, the others read it with a
  ranged read of rank 0's blob or, with a libckpt without ranged reads, get
  it from rank 0 over torch.distributed. Loading at another world size
  (resharding): ranged reads of any rank's items (ckpt_read_ranges), only
  the rows each rank needs.

Staging (CkptStager): dcp.async_save's only blocking part is the copy of
every tensor into ckptd's shared memory: the stager opens the ckpt save
and copies each tensor (plain or DTensor, any strides) straight into a slot
reservation; the state dict DCP then serializes in the background holds
views of the slot. Non-tensor values are deep-copied. No pinned pool, no
second copy. The future completes when ckptd reports the step COMMITTED; a
failure raises with ckpt's reason.
"""

from __future__ import annotations

import copy
import dataclasses
import errno
import hashlib
import io
import os
import pickle
import threading
from typing import Any, Sequence

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex
from torch.distributed.checkpoint.planner import (
    LoadItemType, LoadPlan, LoadPlanner, ReadItem, SavePlan, SavePlanner, WriteItem,
    WriteItemType,
)
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
from torch.futures import Future

import ckpt
from ckpt import CkptError, Context, ReadRequest

try:  # AsyncStager is a typing Protocol; subclass it where it exists.
    from torch.distributed.checkpoint.staging import AsyncStager as _AsyncStagerBase
except ImportError:  # pragma: no cover
    _AsyncStagerBase = object  # type: ignore[assignment,misc]

__all__ = ["CkptStorageWriter", "CkptStorageReader", "CkptStager", "async_save", "item_name",
           "ItemLocation", "FORMAT"]

#: Written into rank 0's blob; a reader refuses other formats.
FORMAT = "ckpt.dcp/1"

_NAME_MAX = 255


def item_name(fqn: str, offset: Sequence[int] | None = None) -> str:
    """The ckpt tensor name of DCP item (fqn, chunk offset); see the module
    docstring. Deterministic, so writer and reader agree."""
    out = []
    for ch in fqn:
        if ch in "%/@" or ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("%%%02X" % ord(ch))
        else:
            out.append(ch)
    name = "".join(out)
    if name in ("", ".", ".."):
        name = "%" + name.encode().hex() + "."
    if offset is not None and any(int(o) for o in offset):
        name += "@" + ",".join(str(int(o)) for o in offset)
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) > _NAME_MAX:
        h = hashlib.sha256(raw).hexdigest()[:16]
        keep = raw[:_NAME_MAX - 17].decode("utf-8", "ignore")
        name = keep + "~" + h
    return name


@dataclasses.dataclass(frozen=True)
class ItemLocation:
    """Where an item's bytes are: `nbytes` bytes from byte `offset` of
    ckpt tensor `name` of rank `rank` (the WriteResult storage_data)."""

    rank: int
    name: str
    offset: int
    nbytes: int


def _dtensor_type() -> Any:
    try:
        from torch.distributed.tensor import DTensor
        return DTensor
    except ImportError:  # pragma: no cover
        return None


def _dtensor_chunk(t: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    sizes, offsets = compute_local_shape_and_global_offset(t.shape, t.device_mesh, t.placements)
    return tuple(int(s) for s in sizes), tuple(int(o) for o in offsets)


class CkptStorageWriter(StorageWriter):
    """A DCP StorageWriter that saves step `step` of ckpt context `ctx`.

    The step: the constructor's `step`, the `step` attribute, or DCP's
    checkpoint_id (an int or a decimal string), in that order of
    precedence; with CkptStager it must be set before dcp.async_save (the
    stager opens the save). Rank 0 must be DCP's coordinator. finish()
    waits for ckptd's COMMITTED, at most commit_timeout seconds (None: no
    limit), and raises the CkptError ckptd reported otherwise.

    One writer per save, or one reused with a new `step` each time: a save
    still open from a failed attempt is aborted when the next begins."""

    def __init__(self, ctx: Context, step: int | None = None, *,
                 commit_timeout: float | None = 600.0):
        super().__init__()
        self.ctx = ctx
        self.step = step
        self.commit_timeout = commit_timeout
        self._lock = threading.Lock()
        self._save: ckpt.Save | None = None
        self._save_step: int | None = None
        self._reserved: dict[str, torch.Tensor] = {}
        self._stored: set[str] = set()
        self._sizes: dict[str, int] = {}  # bytes items stored: their lengths
        self._local_items: list[WriteItem] = []
        self._is_coordinator = False

    # -- opening the ckpt save --------------------------------------------

    def _open(self) -> ckpt.Save:
        if self.step is None:
            raise CkptError(-errno.EINVAL, f"job {self.ctx.job} rank {self.ctx.rank}: "
                            "CkptStorageWriter needs a step (step=, .step or checkpoint_id)")
        step = int(self.step)
        if self._save is not None and self._save_step == step:
            return self._save
        if self._save is not None:
            self._save.abort()  # left open by a failed attempt at an older step
        self._save = self.ctx.save(step)
        self._save_step = step
        self._reserved = {}
        self._stored = set()
        self._sizes = {}
        return self._save

    def _abort(self) -> None:
        if self._save is not None:
            self._save.abort()
        self._save = None
        self._save_step = None
        self._reserved = {}

    def _reserve_tensor(self, save: ckpt.Save, name: str, t: torch.Tensor, *,
                        global_shape: Sequence[int] | None = None,
                        offset: Sequence[int] | None = None) -> torch.Tensor:
        try:
            view = save.reserve(name, t.dtype, tuple(t.shape), global_shape=global_shape,
                                offset=offset, like="torch")
        except ckpt.UnsupportedDtypeError as e:
            raise ckpt.UnsupportedDtypeError(
                e.code, f"job {self.ctx.job} rank {self.ctx.rank} step {save.step}: item "
                f"{name!r}: dtype {t.dtype} cannot be stored by ckpt (supported: "
                f"{', '.join(ckpt.DTYPES)}); convert it, e.g. a complex tensor with "
                "torch.view_as_real()", save.step) from None
        with torch.no_grad():
            view.copy_(t.detach())  # any device, any strides: one copy into the slot
        self._reserved[name] = view
        self._stored.add(name)
        return view

    # -- staging (CkptStager) ------------------------------------------------

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """Copy state_dict's tensors into a new ckpt save of self.step and
        return a state dict of views of the slot (CkptStager.stage)."""
        from torch.distributed.checkpoint._nested_dict import (
            flatten_state_dict, unflatten_state_dict,
        )
        with self._lock:
            save = self._open()
            try:
                flat, mappings = flatten_state_dict(state_dict)
                staged: dict[str, Any] = {}
                DTensor = _dtensor_type()
                for fqn, v in flat.items():
                    staged[fqn] = self._stage_value(save, fqn, v, DTensor)
            except BaseException:
                self._abort()
                raise
            return unflatten_state_dict(staged, mappings)

    def _stage_value(self, save: ckpt.Save, fqn: str, v: Any, DTensor: Any) -> Any:
        if DTensor is not None and isinstance(v, DTensor):
            local = v.to_local()
            if local.numel() == 0:
                return copy.deepcopy(v)
            sizes, offsets = _dtensor_chunk(v)
            view = self._reserve_tensor(save, item_name(fqn, offsets), local,
                                        global_shape=tuple(v.shape), offset=offsets)
            return DTensor.from_local(view, v.device_mesh, v.placements, run_check=False,
                                      shape=v.shape, stride=v.stride())
        if isinstance(v, torch.Tensor) and type(v).__module__.startswith("torch") and \
                not hasattr(v, "local_shards"):
            if v.numel() == 0:
                return v.detach().clone()
            view = self._reserve_tensor(save, item_name(fqn, (0,) * v.dim()), v)
            if isinstance(v, torch.nn.Parameter):
                return torch.nn.Parameter(view, requires_grad=v.requires_grad)
            return view
        # Sharded tensors and every other value: an ordinary deep copy.
        return copy.deepcopy(v)

    # -- StorageWriter ------------------------------------------------------

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id is not None and self.step is None:
            self.step = _step_of(checkpoint_id)

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self._is_coordinator = is_coordinator
        if is_coordinator and self.ctx.rank != 0:
            raise CkptError(-errno.EINVAL, f"job {self.ctx.job}: DCP's coordinator is ckpt "
                            f"rank {self.ctx.rank}; it must be rank 0, whose blob holds the "
                            "metadata")

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        self._local_items = list(plan.items)  # before the coordinator's dedup
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        return plans

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        with self._lock:
            try:
                results = self._write(plan, planner)
                if not self._is_coordinator:
                    self._finish_save()
            except BaseException:
                self._abort()
                raise
        fut: Future[list[WriteResult]] = Future()
        fut.set_result(results)
        return fut

    def _store(self, save: ckpt.Save, item: WriteItem, planner: SavePlanner) -> ItemLocation:
        off = item.index.offset
        name = item_name(item.index.fqn, off if item.type != WriteItemType.BYTE_IO else None)
        if item.type == WriteItemType.BYTE_IO:
            if name not in self._stored:
                data = planner.resolve_data(item)
                buf = data.getbuffer() if isinstance(data, io.BytesIO) else memoryview(data)
                save.add(name, buf)
                self._stored.add(name)
                self._sizes[name] = len(buf)
            return ItemLocation(self.ctx.rank, name, 0, self._sizes[name])
        td = item.tensor_data
        assert td is not None
        n = 1
        for s in td.chunk.sizes:
            n *= int(s)
        nbytes = n * torch._utils._element_size(td.properties.dtype)
        if nbytes == 0:
            return ItemLocation(self.ctx.rank, name, 0, 0)
        if name not in self._stored:
            t = planner.resolve_data(item)
            self._reserve_tensor(save, name, t, global_shape=tuple(td.size),
                                 offset=tuple(td.chunk.offsets))
        else:
            view = self._reserved.get(name)
            if view is not None:
                t = planner.resolve_data(item)
                if t.data_ptr() != view.data_ptr():  # a planner that transformed it
                    with torch.no_grad():
                        view.copy_(t.detach().reshape(view.shape))
        return ItemLocation(self.ctx.rank, name, 0, nbytes)

    def _write(self, plan: SavePlan, planner: SavePlanner) -> list[WriteResult]:
        save = self._open()
        results = []
        for item in plan.items:
            loc = self._store(save, item, planner)
            results.append(WriteResult(index=item.index, size_in_bytes=loc.nbytes,
                                       storage_data=loc))
        planned = {it.index for it in plan.items}
        for item in self._local_items:  # self-contained shards: deduplicated items too
            if item.index not in planned:
                self._store(save, item, planner)
        return results

    def _finish_save(self) -> None:
        save = self._save
        assert save is not None
        self._save = None
        self._save_step = None
        self._reserved = {}
        save.finish()

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """Coordinator: store the metadata in rank 0's blob, hand the shard
        over, and wait until ckptd commits the step (raises otherwise)."""
        with self._lock:
            save = self._save
            if save is None:
                raise CkptError(-errno.EINVAL, f"job {self.ctx.job} rank {self.ctx.rank}: "
                                "finish() without an open save")
            step = save.step
            storage = {}
            for rl in results:
                for r in rl:
                    storage[r.index] = r.storage_data
            metadata.storage_data = storage
            blob = pickle.dumps({"format": FORMAT, "world_size": self.ctx.world_size,
                                 "step": step, "metadata": metadata},
                                protocol=pickle.HIGHEST_PROTOCOL)
            try:
                save.set_blob(blob)
                self._finish_save()
            except BaseException:
                self._abort()
                raise
        self.ctx.wait(step, self.commit_timeout)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return False

    def storage_meta(self) -> Any:
        return None

    def __getstate__(self) -> Any:
        raise TypeError("CkptStorageWriter cannot be pickled: the save runs in the process "
                        "that owns the ckpt context and its slot; use dcp.async_save's default "
                        "thread executor, not AsyncCheckpointerType.PROCESS")


class CkptStager(_AsyncStagerBase):  # type: ignore[misc,valid-type]
    """The AsyncStager for dcp.async_save with a CkptStorageWriter: stages
    the state dict straight into the writer's ckpt slot (the copy is the
    whole stall), so DCP needs no pinned pool and makes no second copy."""

    _synchronize_after_execute = False

    def __init__(self, writer: CkptStorageWriter):
        self.writer = writer

    @property
    def should_synchronize_after_execute(self) -> bool:
        return False

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:  # type: ignore[override]
        return self.writer.stage(state_dict)

    def synchronize_staging(self) -> None:
        """Nothing to do: stage() returns once the copy is done."""

    def close(self) -> None:
        """Nothing to release: the slot belongs to the writer's save."""


def async_save(state_dict: dict[str, Any], ctx: Context, step: int, **kwargs: Any) -> Any:
    """dcp.async_save of `state_dict` as ckpt step `step` through a new
    CkptStorageWriter and CkptStager; returns DCP's future (done when the
    step is COMMITTED). kwargs go to dcp.async_save (e.g. process_group)."""
    import torch.distributed.checkpoint as dcp
    w = CkptStorageWriter(ctx, step)
    return dcp.async_save(state_dict, storage_writer=w, async_stager=CkptStager(w), **kwargs)


def _step_of(checkpoint_id: Any) -> int:
    s = os.fspath(checkpoint_id) if not isinstance(checkpoint_id, int) else checkpoint_id
    try:
        return int(str(s).rsplit("-", 1)[-1])
    except ValueError:
        raise CkptError(-errno.EINVAL, f"checkpoint_id {checkpoint_id!r} is not a step "
                        "number") from None


class CkptStorageReader(StorageReader):
    """A DCP StorageReader of a committed ckpt step of `ctx`'s job.

    step: None (the newest the whole job can read), a step number, or DCP's
    checkpoint_id. At the world size of the save it restores each rank's
    own shard with an agreed restore; at another world size (or with
    reshard=True) it reads the byte ranges each rank needs from any rank's
    shard, which needs a libckpt with ranged reads (ckpt.HAVE_READ_RANGES)."""

    def __init__(self, ctx: Context, step: int | None = None, *, reshard: bool | None = None):
        super().__init__()
        self.ctx = ctx
        self.step = step
        self.reshard = reshard
        #: The step read_metadata() settled on.
        self.loaded_step: int | None = None
        self._restore: ckpt.Restore | None = None
        self._own: dict[str, ckpt.TensorInfo] = {}
        self._metadata: Metadata | None = None
        self._world_saved: int | None = None

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id is not None:
            self.step = _step_of(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return False

    def _blob_of_rank0(self, step: int) -> bytes:
        rq = self.ctx.read_ranges(step, [ReadRequest(0, None, 0, 0)])[0]
        if rq.total == 0:
            return b""
        rq = self.ctx.read_ranges(step, [ReadRequest(0, None, 0, rq.total)])[0]
        return bytes(rq.data)

    def _decode(self, blob: bytes, step: int) -> Metadata:
        try:
            info = pickle.loads(blob)
        except Exception as e:
            raise ckpt.CorruptError(-1004, f"job {self.ctx.job} step {step}: rank 0's blob is "
                                    f"not DCP metadata ({e})", step) from None
        if not isinstance(info, dict) or info.get("format") != FORMAT:
            raise CkptError(-errno.EINVAL, f"job {self.ctx.job} step {step}: rank 0's blob is "
                            f"not a {FORMAT} checkpoint (was it saved through ckpt.dcp?)", step)
        self._world_saved = int(info["world_size"])
        md: Metadata = info["metadata"]
        return md

    def read_metadata(self) -> Metadata:
        self.close()
        ctx = self.ctx
        # Rank 0's metadata as read before the restore: for that step it
        # need not be read again (which would take a second slot while the
        # restore holds one).
        known: tuple[int, Metadata] | None = None
        if ckpt.HAVE_READ_RANGES and self.reshard is not False:
            step = self.step if self.step is not None else ctx.latest()
            if step is None:
                raise ckpt.NoCheckpointError(-1003, f"job {ctx.job}: no committed step")
            md = self._decode(self._blob_of_rank0(step), step)
            if self.reshard or self._world_saved != ctx.world_size:
                self.loaded_step = step
                self._metadata = md
                return md
            known = (step, md)
        r = ctx.restore(self.step, agree=True)
        self._restore = r
        self.loaded_step = r.step
        self._own = r.tensors()
        broadcast = (not ckpt.HAVE_READ_RANGES and dist.is_available() and dist.is_initialized()
                     and dist.get_world_size() > 1)
        md: Any = None
        problem: str | None = None
        try:
            if ctx.rank == 0:
                md = self._decode(r.blob(), r.step)
                if self._world_saved != ctx.world_size:
                    problem = (f"job {ctx.job} step {r.step}: saved at world size "
                               f"{self._world_saved}, loading at {ctx.world_size}: resharding "
                               "needs a libckpt with ranged reads (ckpt_read_ranges)")
            elif known is not None and known[0] == r.step:
                md = known[1]
            elif ckpt.HAVE_READ_RANGES:
                md = self._decode(self._blob_of_rank0(r.step), r.step)
            elif not broadcast:
                problem = (f"job {ctx.job} step {r.step}: rank {ctx.rank} has no DCP metadata "
                           "(it is in rank 0's blob) and neither ranged reads nor "
                           "torch.distributed to fetch it")
        except CkptError as e:
            if not broadcast:
                raise
            problem = str(e)
        if broadcast:
            # Rank 0 sends the metadata or why there is none: no rank is left waiting.
            obj: list[Any] = [(md, problem) if ctx.rank == 0 else None]
            dist.broadcast_object_list(obj, src=0)
            md, problem = obj[0]
        if problem is not None:
            self.close()
            raise CkptError(-errno.EOPNOTSUPP, problem, r.step)
        self._metadata = md
        return md

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any,
                              **kwargs: Any) -> None:
        self._metadata = metadata

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    # -- reading --------------------------------------------------------------

    def _location(self, index: MetadataIndex) -> ItemLocation:
        assert self._metadata is not None
        sd = self._metadata.storage_data or {}
        loc = sd.get(index)
        if loc is None:
            raise ckpt.NotFoundError(-1007, f"job {self.ctx.job} step {self.loaded_step}: item "
                                     f"{index.fqn!r} at {list(index.offset or [])} is not in the "
                                     "checkpoint's metadata", self.loaded_step)
        return loc

    def _read(self, loc: ItemLocation, offset: int, length: int) -> bytearray:
        rq = self.ctx.read_ranges(int(self.loaded_step),  # type: ignore[arg-type]
                                  [ReadRequest(loc.rank, loc.name, loc.offset + offset, length)])[0]
        return rq.data

    def _bytes(self, index: MetadataIndex) -> bytes:
        name = item_name(index.fqn)
        if self._restore is not None and name in self._own:
            return bytes(self._restore.tensor(name, "memoryview"))
        loc = self._location(index)
        return bytes(self._read(loc, 0, loc.nbytes))

    def _chunk(self, index: MetadataIndex) -> tuple[Any, Any]:
        assert self._metadata is not None
        md = self._metadata.state_dict_metadata[index.fqn]
        chunks = md.chunks  # type: ignore[union-attr]
        want = tuple(index.offset or ())
        if index.index is not None and index.index < len(chunks) and \
                tuple(chunks[index.index].offsets) == want:
            return md, chunks[index.index]
        for c in chunks:
            if tuple(c.offsets) == want:
                return md, c
        raise ckpt.NotFoundError(-1007, f"step {self.loaded_step}: no chunk of {index.fqn!r} at "
                                 f"{list(want)}", self.loaded_step)

    def _source(self, item: ReadItem) -> torch.Tensor:
        """The stored chunk's part that item copies (a tensor of item.lengths)."""
        md, chunk = self._chunk(item.storage_index)
        dtype = md.properties.dtype
        sizes = tuple(int(s) for s in chunk.sizes)
        so = tuple(int(s) for s in item.storage_offsets)
        ln = tuple(int(s) for s in item.lengths)
        name = item_name(item.storage_index.fqn, chunk.offsets)
        if any(s == 0 for s in sizes):
            return torch.empty(ln, dtype=dtype)
        if self._restore is not None and name in self._own:
            t = self._restore.tensor(name, "torch").view(sizes)
            base = 0
        else:
            # Only the rows (along dim 0) this item needs.
            loc = self._location(item.storage_index)
            esz = torch._utils._element_size(dtype)
            row = esz
            for s in sizes[1:]:
                row *= s
            r0, r1 = (so[0], so[0] + ln[0]) if sizes else (0, 1)
            data = self._read(loc, r0 * row, (r1 - r0) * row)
            t = torch.frombuffer(data, dtype=dtype).view((r1 - r0,) + sizes[1:] if sizes else ())
            base = r0
        for d, (o, n) in enumerate(zip(so, ln)):
            t = t.narrow(d, o - (base if d == 0 else 0), n)
        return t

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        try:
            for item in plan.items:
                if item.type == LoadItemType.BYTE_IO:
                    planner.load_bytes(item, io.BytesIO(self._bytes(item.storage_index)))
                    continue
                src = self._source(item)
                target = planner.resolve_tensor(item).detach()
                if tuple(target.shape) != tuple(src.shape):
                    raise CkptError(-errno.EINVAL, f"step {self.loaded_step}: item "
                                    f"{item.storage_index.fqn!r}: stored {tuple(src.shape)}, "
                                    f"destination {tuple(target.shape)}", self.loaded_step)
                with torch.no_grad():
                    target.copy_(src)
                planner.commit_tensor(item, target)
        finally:
            self.close()
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut

    def close(self) -> None:
        """Release the restored slot (read_data does it when it is done)."""
        if self._restore is not None:
            self._restore.close()
            self._restore = None
            self._own = {}
