# SPDX-License-Identifier: MIT
"""ckpt: hand a training rank's state to the node's ckptd and get it back.

A save costs the caller one copy into shared memory that ckptd mapped for
this rank; ckptd writes it durably, copies it to partners and S3, and
commits the step once every rank of the job has its shard durable.

    import ckpt

    with ckpt.connect(job="llama", rank=0, world_size=4,
                      max_save_bytes=2 << 30) as ctx:
        with ctx.save(100) as s:            # finish() on leaving the block
            s.add("w", weights)             # a torch tensor, numpy array or buffer
            v = s.reserve("m", "f32", (1024,))  # a view of the slot: fill it
            v[:] = 1.0
            s.set_blob(b"rng state")
        st = ctx.wait(100)                  # Status: COMMITTED, or raises
        with ctx.restore() as r:            # the job-wide agreed step
            w = r.tensor("w")               # a view of the restored slot
            r.copy_into("w", weights)       # or straight into your tensor

Zero copies: reserve() and Restore.tensor() return views of ckptd's shared
memory (the buffer protocol: memoryview, numpy or torch, by the dtype given).
Such a view is valid until the save is finished or the restore closed.

Errors raise a subclass of CkptError carrying ckpt's own reason (what
ckptd or the library said, naming the step, rank and tensor) and the
negative error code (-errno or -CKPT_E_*).

The library: libckpt.so next to this file (a pip install puts it there),
else $CKPT_LIBRARY, else the system's libckpt.so.0. ckptd's socket is
`socket`, else $CKPT_SOCKET, else the default (as for the C library).
torch.distributed.checkpoint support is in ckpt.dcp.
"""

from __future__ import annotations

import ctypes
import enum
import errno as _errno
import os
from dataclasses import dataclass
from typing import Any, Iterator, Sequence, Union

from . import _lib
from ._lib import CKPT_STEP_MAX, lib as _c

__all__ = [
    "connect", "Context", "Save", "Restore", "Status", "State", "TensorInfo",
    "ReadRequest", "CkptError", "ProtocolError", "DisconnectedError", "SkippedError",
    "NoCheckpointError", "CorruptError", "TooBigError", "BadNameError", "NotFoundError",
    "StepOrderError", "StepExistsError", "RefusedError", "AbortedError", "BusyError",
    "VersionError", "CkptTimeoutError", "CkptOSError", "UnsupportedDtypeError",
    "DTYPES", "HAVE_READ_RANGES", "STEP_MAX",
]

STEP_MAX = CKPT_STEP_MAX
#: Whether the loaded libckpt can read byte ranges of any rank's items
#: (Context.read_ranges), which resharding needs.
HAVE_READ_RANGES: bool = _lib.HAVE_READ_RANGES

# ---- errors ---------------------------------------------------------------


class CkptError(Exception):
    """A ckpt failure. `code` is the negative return value (-errno or
    -CKPT_E_*), `reason` ckpt's own explanation, `step` the step concerned
    (None if none)."""

    def __init__(self, code: int, reason: str = "", step: int | None = None):
        self.code = code
        self.reason = reason or strerror(code)
        self.step = step
        super().__init__(self.reason)

    def __str__(self) -> str:
        name = strerror(self.code)
        if not self.reason:
            return name
        if name in self.reason:
            return self.reason
        return f"{self.reason} ({name})"


class ProtocolError(CkptError):
    """ckptd broke the wire protocol (CKPT_E_PROTOCOL)."""


class DisconnectedError(CkptError):
    """ckptd went away; reconnect and retry (CKPT_E_DISCONNECTED)."""


class SkippedError(CkptError):
    """Save skipped: no free slot under the "skip" policy (CKPT_E_SKIPPED)."""


class NoCheckpointError(CkptError):
    """No committed step (that verifies) (CKPT_E_NO_CHECKPOINT)."""


class CorruptError(CkptError):
    """A checksum or format check failed (CKPT_E_CORRUPT)."""


class TooBigError(CkptError):
    """The save is larger than the slot negotiated at connect (CKPT_E_TOO_BIG)."""


class BadNameError(CkptError):
    """A job or tensor name was refused (CKPT_E_BAD_NAME)."""


class NotFoundError(CkptError, KeyError):
    """No such tensor in the restored step (CKPT_E_NOT_FOUND)."""

    __str__ = CkptError.__str__


class StepOrderError(CkptError):
    """Step not greater than the previous save (CKPT_E_STEP_ORDER)."""


class StepExistsError(CkptError):
    """The step is already committed (CKPT_E_EXISTS)."""


class RefusedError(CkptError):
    """ckptd refused the client: credentials, limits, world size (CKPT_E_REFUSED)."""


class AbortedError(CkptError):
    """Step abandoned: another rank failed or left (CKPT_E_ABORTED)."""


class BusyError(CkptError):
    """A slot or rank is in use (CKPT_E_BUSY)."""


class VersionError(CkptError):
    """Protocol or format version not understood (CKPT_E_VERSION)."""


class CkptTimeoutError(CkptError, TimeoutError):
    """A wait ran out of time (-ETIMEDOUT)."""

    __str__ = CkptError.__str__


class CkptOSError(CkptError, OSError):
    """A system error (-errno); `errno` is set."""

    def __init__(self, code: int, reason: str = "", step: int | None = None):
        CkptError.__init__(self, code, reason, step)
        self.errno = -code
        self.strerror = self.reason

    __str__ = CkptError.__str__


class UnsupportedDtypeError(CkptError, TypeError):
    """A tensor's element type has no ckpt dtype (-EINVAL)."""

    __str__ = CkptError.__str__


_SERVICE_ERRORS: dict[int, type[CkptError]] = {
    1000: ProtocolError, 1001: DisconnectedError, 1002: SkippedError,
    1003: NoCheckpointError, 1004: CorruptError, 1005: TooBigError,
    1006: BadNameError, 1007: NotFoundError, 1008: StepOrderError,
    1009: StepExistsError, 1010: RefusedError, 1011: AbortedError,
    1012: BusyError, 1013: VersionError,
}


def strerror(code: int) -> str:
    """ckpt_strerror(): the name of a negative return value."""
    return (_c.ckpt_strerror(int(code)) or b"").decode("utf-8", "replace")


def _error(code: int, reason: str = "", step: int | None = None) -> CkptError:
    code = int(code)
    if code == -_errno.ETIMEDOUT:
        cls: type[CkptError] = CkptTimeoutError
    else:
        cls = _SERVICE_ERRORS.get(-code, CkptOSError if -code < 1000 else CkptError)
    return cls(code, reason, step)


def _check(rc: int, reason: str = "", step: int | None = None) -> int:
    if rc < 0:
        raise _error(rc, reason, step)
    return rc


# ---- dtypes ---------------------------------------------------------------

#: ckpt dtype names (as ckpt-inspect prints them) and their pinned values.
DTYPES: dict[str, int] = {
    "u8": 1, "i8": 2, "u16": 3, "i16": 4, "u32": 5, "i32": 6, "u64": 7, "i64": 8,
    "f16": 9, "bf16": 10, "f32": 11, "f64": 12, "bool": 13, "f8e4m3": 14, "f8e5m2": 15,
}
_NUMPY_NAMES = {
    "uint8": "u8", "int8": "i8", "uint16": "u16", "int16": "i16", "uint32": "u32",
    "int32": "i32", "uint64": "u64", "int64": "i64", "float16": "f16",
    "float32": "f32", "float64": "f64", "bool": "bool",
}
_TORCH_NAMES = dict(_NUMPY_NAMES, bfloat16="bf16", float8_e4m3fn="f8e4m3",
                    float8_e5m2="f8e5m2")

DType = Union[str, int, Any]  # "f32", a ckpt value, a numpy or torch dtype


def _is_torch_dtype(dt: Any) -> bool:
    return type(dt).__module__ == "torch" and type(dt).__name__ == "dtype"


def dtype_code(dt: DType) -> int:
    """The ckpt dtype value of a ckpt name ("bf16"), numpy dtype or torch
    dtype; raises UnsupportedDtypeError for a type ckpt cannot store."""
    if isinstance(dt, int) and not isinstance(dt, bool):
        if _c.ckpt_dtype_size(dt) == 0:
            raise UnsupportedDtypeError(-_errno.EINVAL, f"unknown ckpt dtype {dt}")
        return dt
    if isinstance(dt, str) and dt in DTYPES:
        return DTYPES[dt]
    if _is_torch_dtype(dt):
        name = _TORCH_NAMES.get(str(dt).removeprefix("torch."))
    else:
        try:
            import numpy
            name = _NUMPY_NAMES.get(numpy.dtype(dt).name)
        except (ImportError, TypeError):
            name = None
    if name is None:
        raise UnsupportedDtypeError(
            -_errno.EINVAL, f"dtype {dt} has no ckpt dtype (supported: {', '.join(DTYPES)})")
    return DTYPES[name]


def dtype_name(code: int) -> str:
    """ckpt_dtype_name(): "f32", "bf16", ..."""
    n = _c.ckpt_dtype_name(int(code))
    if not n:
        raise UnsupportedDtypeError(-_errno.EINVAL, f"unknown ckpt dtype {code}")
    return n.decode()


def _torch_dtype(code: int) -> Any:
    import torch
    for tname, cname in _TORCH_NAMES.items():
        if DTYPES[cname] == code:
            return getattr(torch, tname)
    raise UnsupportedDtypeError(-_errno.EINVAL, f"ckpt dtype {code} has no torch dtype")


def _numpy_dtype(code: int) -> Any:
    import numpy
    for nname, cname in _NUMPY_NAMES.items():
        if DTYPES[cname] == code:
            return numpy.dtype(nname)
    raise UnsupportedDtypeError(
        -_errno.EINVAL, f"ckpt dtype {dtype_name(code)} has no numpy dtype; ask for a torch view")


def _memory(ptr: int, nbytes: int, writable: bool = True) -> memoryview:
    if nbytes == 0:
        return memoryview(bytearray(0))
    mv = memoryview((ctypes.c_char * nbytes).from_address(ptr)).cast("B")
    return mv if writable else mv.toreadonly()


def _view(mv: memoryview, code: int, shape: Sequence[int], like: Any) -> Any:
    """A view of mv as `like` asks: "torch", "numpy" or "memoryview"."""
    if like == "torch":
        import torch
        dt = _torch_dtype(code)
        if len(mv) == 0:
            return torch.empty(tuple(shape), dtype=dt)
        import warnings
        with warnings.catch_warnings():
            # Read-only restore views: torch warns that it cannot protect them.
            warnings.simplefilter("ignore", UserWarning)
            return torch.frombuffer(mv, dtype=dt).view(tuple(shape))
    if like == "numpy":
        import numpy
        return numpy.frombuffer(mv, dtype=_numpy_dtype(code)).reshape(tuple(shape))
    return mv


def _like_of(dt: DType) -> str:
    if _is_torch_dtype(dt):
        return "torch"
    if isinstance(dt, str) or isinstance(dt, int):
        return "memoryview"
    return "numpy"


# ---- tensors and statuses ---------------------------------------------------


@dataclass(frozen=True)
class TensorInfo:
    """A tensor of a restored shard: this rank's slice [offset, offset+shape)
    of a tensor of global_shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    global_shape: tuple[int, ...]
    offset: tuple[int, ...]
    nbytes: int


class State(enum.IntEnum):
    """A step's state as this context knows it (enum ckpt_state)."""

    UNKNOWN = 0
    PENDING = 1
    DURABLE = 2
    COMMITTED = 3
    SKIPPED = 4
    FAILED = 5


@dataclass(frozen=True)
class Status:
    """What is known of a step: state, error (0 or negative) and ckpt's reason."""

    step: int
    state: State
    error: int
    reason: str

    @property
    def done(self) -> bool:
        """COMMITTED, SKIPPED or FAILED: nothing more will happen."""
        return self.state in (State.COMMITTED, State.SKIPPED, State.FAILED)

    def check(self) -> "Status":
        """Return self if the step committed (or is still on its way); raise
        the CkptError subclass of its error, with ckpt's reason, if it was
        skipped or failed."""
        if self.state in (State.SKIPPED, State.FAILED):
            raise _error(self.error or -_errno.EIO,
                         self.reason or f"step {self.step}: {self.state.name.lower()}", self.step)
        return self

    @staticmethod
    def _of(st: _lib.Status) -> "Status":
        try:
            state = State(st.state)
        except ValueError:
            state = State.UNKNOWN
        return Status(int(st.step), state, int(st.error),
                      st.reason.decode("utf-8", "replace"))


@dataclass
class ReadRequest:
    """One ranged read (struct ckpt_read): `length` bytes from `offset` of
    `rank`'s tensor `tensor` (None: that rank's blob) into `dst` (a writable
    buffer of at least `length` bytes, or None to read into a new bytearray).
    length 0 only asks for the size. After the call: `result` (0 or a
    negative error), `total` (the item's full size) and `data` (what was read)."""

    rank: int
    tensor: str | None
    offset: int = 0
    length: int = 0
    dst: Any = None
    result: int = 0
    total: int = 0
    data: Any = None


# ---- saving -----------------------------------------------------------------


def _desc(name: str, code: int, shape: Sequence[int],
          global_shape: Sequence[int] | None, offset: Sequence[int] | None) -> _lib.TensorDesc:
    shape = tuple(int(s) for s in shape)
    if len(shape) > _lib.CKPT_MAX_DIMS:
        raise CkptError(-_errno.EINVAL, f"tensor {name!r}: {len(shape)} dims, ckpt stores at most "
                        f"{_lib.CKPT_MAX_DIMS}")
    g = tuple(int(s) for s in (global_shape if global_shape is not None else shape))
    o = tuple(int(s) for s in (offset if offset is not None else (0,) * len(shape)))
    if len(g) != len(shape) or len(o) != len(shape):
        raise CkptError(-_errno.EINVAL, f"tensor {name!r}: shape, global_shape and offset "
                        "differ in length")
    d = _lib.TensorDesc()
    d.name = name.encode("utf-8", "surrogateescape")
    d.dtype = code
    d.ndim = len(shape)
    for i in range(len(shape)):
        d.shape[i], d.global_shape[i], d.offset[i] = shape[i], g[i], o[i]
    return d


class Save:
    """A save of one step being filled: add() or reserve() every tensor,
    optionally set_blob(), then finish() (or abort()). As a context manager
    it finishes on a clean exit and aborts on an exception. Views that
    reserve() returned must not be written after finish()."""

    def __init__(self, ctx: "Context", step: int, handle: int):
        self._ctx = ctx
        self.step = step
        self._h: int | None = handle
        self._keep: list[Any] = []

    def _handle(self) -> int:
        if self._h is None:
            raise CkptError(-_errno.EINVAL, f"step {self.step}: the save was already "
                            "finished or aborted")
        return self._h

    def _fail(self, rc: int, what: str) -> CkptError:
        why = (_c.ckpt_save_error(self._h) or b"").decode("utf-8", "replace")
        if not why.startswith("step "):
            why = f"step {self.step}: {what}: {why or strerror(rc)}"
        return _error(rc, why, self.step)

    def reserve(self, name: str, dtype: DType, shape: Sequence[int], *,
                global_shape: Sequence[int] | None = None,
                offset: Sequence[int] | None = None, like: str | None = None) -> Any:
        """Reserve room for tensor `name` in the slot and return a writable
        view of it (zero copy: fill it, e.g. view.copy_(tensor)). The view is
        a torch tensor for a torch dtype, a numpy array for a numpy dtype,
        else a memoryview of bytes; `like` ("torch", "numpy", "memoryview")
        overrides. `global_shape`/`offset` describe a slice of a larger tensor."""
        h = self._handle()
        try:
            code = dtype_code(dtype)
        except UnsupportedDtypeError as e:
            raise UnsupportedDtypeError(e.code, f"step {self.step}: tensor {name!r}: {e.reason}",
                                        self.step) from None
        d = _desc(name, code, shape, global_shape, offset)
        nbytes = int(_c.ckpt_tensor_bytes(ctypes.byref(d)))
        dst = ctypes.c_void_p()
        rc = _c.ckpt_save_reserve(h, ctypes.byref(d), ctypes.byref(dst))
        if rc < 0:
            raise self._fail(rc, f"reserving tensor {name!r}")
        return _view(_memory(dst.value or 0, nbytes), code, d.shape[:d.ndim] if d.ndim else (),
                     like or _like_of(dtype))

    def add(self, name: str, data: Any, *, global_shape: Sequence[int] | None = None,
            offset: Sequence[int] | None = None) -> None:
        """Copy `data` into the slot as tensor `name`: a torch tensor (any
        device, any strides: copied straight into the slot, with no
        intermediate contiguous copy), a numpy array, or any bytes-like
        object (stored as u8). An element type ckpt cannot store raises
        UnsupportedDtypeError."""
        mod = type(data).__module__
        if mod.startswith("torch"):
            view = self.reserve(name, data.dtype, tuple(data.shape), global_shape=global_shape,
                                offset=offset, like="torch")
            if data.numel():
                view.copy_(data.detach())
            return
        if mod.startswith("numpy"):
            import numpy
            view = self.reserve(name, data.dtype, data.shape, global_shape=global_shape,
                                offset=offset, like="numpy")
            numpy.copyto(view, data, casting="no")
            return
        mv = memoryview(data)
        if not mv.c_contiguous:
            mv = memoryview(mv.tobytes())
        mv = mv.cast("B")
        h = self._handle()
        d = _desc(name, DTYPES["u8"], (len(mv),), global_shape, offset)
        buf = (ctypes.c_char * len(mv)).from_buffer_copy(mv) if mv.readonly else \
            (ctypes.c_char * len(mv)).from_buffer(mv)
        rc = _c.ckpt_save_add(h, ctypes.byref(d), buf)
        if rc < 0:
            raise self._fail(rc, f"adding tensor {name!r}")

    def set_blob(self, blob: Any) -> None:
        """Attach this rank's opaque blob (bytes-like; copied). A second
        call replaces the first."""
        h = self._handle()
        b = bytes(blob)
        rc = _c.ckpt_save_set_blob(h, b, len(b))
        if rc < 0:
            raise self._fail(rc, "setting the blob")

    def finish(self) -> None:
        """Hand the save to ckptd: returns once ckptd accepted it. The
        outcome comes later: Context.wait(), poll(), events()."""
        h = self._handle()
        self._h = None
        rc = _c.ckpt_save_finish(h)
        if rc < 0:
            raise _error(rc, f"step {self.step}: ckptd did not accept the save: {strerror(rc)}",
                         self.step)

    def abort(self) -> None:
        """Drop the save; its slot is free again. No-op once finished."""
        if self._h is not None:
            h, self._h = self._h, None
            _c.ckpt_save_abort(h)

    def __enter__(self) -> "Save":
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        if et is None and self._h is not None:
            self.finish()
        else:
            self.abort()

    def __del__(self) -> None:
        if getattr(self, "_h", None) is not None and not self._ctx.closed:
            self.abort()


# ---- restoring ----------------------------------------------------------------


class Restore:
    """A restored shard held in a slot until close(): tensors() lists it,
    tensor() gives zero-copy read-only views, copy_into() copies into your
    tensors, blob() returns the blob."""

    def __init__(self, ctx: "Context", handle: int):
        self._ctx = ctx
        self._h: int | None = handle
        self.step: int = int(_c.ckpt_restore_step(handle))
        w = _c.ckpt_restore_warning(handle)
        #: Why the requested step was not the one restored (None if it was).
        self.warning: str | None = w.decode("utf-8", "replace") if w else None
        self._infos: dict[str, TensorInfo] | None = None

    def _handle(self) -> int:
        if self._h is None:
            raise CkptError(-_errno.EINVAL, f"step {self.step}: the restore is closed")
        return self._h

    def tensors(self) -> dict[str, TensorInfo]:
        """The shard's tensors by name."""
        if self._infos is None:
            h = self._handle()
            n = _check(_c.ckpt_restore_tensor_count(h), step=self.step)
            out = {}
            for i in range(n):
                d = _lib.TensorDesc()
                _check(_c.ckpt_restore_tensor_at(h, i, ctypes.byref(d)), step=self.step)
                name = d.name.decode("utf-8", "surrogateescape")
                k = d.ndim
                out[name] = TensorInfo(name, dtype_name(d.dtype), tuple(d.shape[:k]),
                                       tuple(d.global_shape[:k]), tuple(d.offset[:k]),
                                       int(_c.ckpt_tensor_bytes(ctypes.byref(d))))
            self._infos = out
        return self._infos

    def _ptr(self, name: str) -> tuple[int, int]:
        h = self._handle()
        p = ctypes.c_void_p()
        n = ctypes.c_size_t()
        rc = _c.ckpt_restore_tensor_ptr(h, name.encode("utf-8", "surrogateescape"),
                                        ctypes.byref(p), ctypes.byref(n))
        if rc < 0:
            raise _error(rc, f"step {self.step}: tensor {name!r}: {strerror(rc)}", self.step)
        return p.value or 0, n.value

    def tensor(self, name: str, like: str = "torch") -> Any:
        """A zero-copy view of tensor `name` (valid until close; never write
        to it: the slot is ckptd's): like="torch" (default), "numpy" (a
        read-only array) or "memoryview" (read-only raw bytes)."""
        info = self.tensors().get(name)
        if info is None:
            raise NotFoundError(-1007, f"step {self.step}: no tensor {name!r} in this rank's shard",
                                self.step)
        ptr, n = self._ptr(name)
        return _view(_memory(ptr, n, writable=False), DTYPES[info.dtype], info.shape, like)

    def copy_into(self, name: str, dst: Any) -> Any:
        """Copy tensor `name` into `dst` (a torch tensor of the same element
        count and dtype, any device or strides; or a writable buffer of its
        size) and return dst."""
        if type(dst).__module__.startswith("torch"):
            src = self.tensor(name, "torch")
            if src.dtype != dst.dtype or src.numel() != dst.numel():
                raise CkptError(-_errno.EINVAL, f"step {self.step}: tensor {name!r} is "
                                f"{src.dtype} x {tuple(src.shape)}, the destination "
                                f"{dst.dtype} x {tuple(dst.shape)}", self.step)
            with _no_grad():
                dst.copy_(src.view(dst.shape))
            return dst
        mv = memoryview(dst).cast("B")
        buf = (ctypes.c_char * len(mv)).from_buffer(mv)
        rc = _c.ckpt_restore_tensor(self._handle(), name.encode("utf-8", "surrogateescape"),
                                    buf, len(mv))
        if rc < 0:
            raise _error(rc, f"step {self.step}: tensor {name!r} into {len(mv)} bytes: "
                         f"{strerror(rc)}", self.step)
        return dst

    def blob(self) -> bytes:
        """This rank's blob (b"" if the save set none)."""
        h = self._handle()
        if hasattr(_c, "ckpt_restore_blob_ptr"):
            # Any length (ckpt_restore_blob stops at INT_MAX), one copy.
            p, size = ctypes.c_void_p(), ctypes.c_size_t()
            _check(_c.ckpt_restore_blob_ptr(h, ctypes.byref(p), ctypes.byref(size)),
                   step=self.step)
            return ctypes.string_at(p.value, size.value) if size.value else b""
        n = _check(_c.ckpt_restore_blob(h, None, 0), step=self.step)
        if n == 0:
            return b""
        buf = ctypes.create_string_buffer(n)
        _check(_c.ckpt_restore_blob(h, buf, n), step=self.step)
        return buf.raw[:n]

    def close(self) -> None:
        """Release the slot; views of it must not be used after this."""
        if self._h is not None:
            h, self._h = self._h, None
            _c.ckpt_restore_close(h)

    def __enter__(self) -> "Restore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_h", None) is not None and not self._ctx.closed:
            self.close()


class _no_grad:
    def __enter__(self) -> None:
        import torch
        self._g = torch.no_grad()
        self._g.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._g.__exit__(*exc)


# ---- the connection -----------------------------------------------------------


class Context:
    """A connection to the node's ckptd (ckpt_ctx). Safe to share between
    threads; a Save or Restore belongs to one thread at a time. Use as a
    context manager, or close()."""

    def __init__(self, handle: int, job: str, rank: int, world_size: int):
        self._h: int | None = handle
        self.job = job
        self.rank = rank
        self.world_size = world_size

    @property
    def closed(self) -> bool:
        return self._h is None

    def _handle(self) -> int:
        if self._h is None:
            raise CkptError(-_errno.EINVAL, f"job {self.job} rank {self.rank}: context is closed")
        return self._h

    @property
    def slot_bytes(self) -> int:
        """Bytes of one shared-memory slot (the largest save)."""
        return int(_c.ckpt_slot_bytes(self._handle()))

    @property
    def slot_count(self) -> int:
        """Slots this rank has: saves that can be in flight at once."""
        return int(_c.ckpt_slot_count(self._handle()))

    def arena(self) -> tuple[int, int]:
        """(address, bytes) of the whole shared arena, e.g. for
        torch.cuda.cudart().cudaHostRegister(). Changes on a reconnect."""
        n = ctypes.c_size_t()
        p = _c.ckpt_arena(self._handle(), ctypes.byref(n))
        return int(p or 0), n.value

    def fileno(self) -> int:
        """A descriptor that becomes readable when ckptd has news (select/poll)."""
        return int(_c.ckpt_fd(self._handle()))

    def reconnect(self) -> None:
        """Reconnect after ckptd went away; unreported saves are reported failed."""
        _check(_c.ckpt_reconnect(self._handle()), f"job {self.job} rank {self.rank}: reconnect")

    def save(self, step: int) -> Save:
        """Begin a save of `step` (greater than this context's previous
        save). Takes a slot; with none free ckptd's policy blocks or raises
        SkippedError."""
        h = self._handle()
        out = ctypes.c_void_p()
        rc = _c.ckpt_save_begin(h, int(step), ctypes.byref(out))
        if rc < 0:
            raise _error(rc, f"job {self.job} rank {self.rank} step {step}: cannot begin the "
                         f"save: {strerror(rc)}", int(step))
        return Save(self, int(step), out.value or 0)

    def poll(self, step: int) -> Status:
        """What is known of `step` now, without blocking."""
        st = _lib.Status()
        _check(_c.ckpt_poll(self._handle(), int(step), ctypes.byref(st)), step=int(step))
        return Status._of(st)

    def wait(self, step: int, timeout: float | None = None, *, check: bool = True) -> Status:
        """Wait until `step` is committed, skipped or failed (timeout in
        seconds, None: no limit; CkptTimeoutError past it). With check (the
        default) a skipped or failed step raises its CkptError with ckpt's
        reason; otherwise the Status is returned as it is."""
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        st = _lib.Status()
        rc = _c.ckpt_wait(self._handle(), int(step), ms, ctypes.byref(st))
        if rc < 0:
            raise _error(rc, f"job {self.job} rank {self.rank}: step {step} not done after "
                         f"{timeout} s" if rc == -_errno.ETIMEDOUT else "", int(step))
        s = Status._of(st)
        return s.check() if check else s

    def events(self) -> Iterator[Status]:
        """Changes of state reported so far, in arrival order, without blocking."""
        while True:
            st = _lib.Status()
            if _check(_c.ckpt_next_event(self._handle(), ctypes.byref(st))) == 0:
                return
            yield Status._of(st)

    def latest(self) -> int | None:
        """The newest committed step of the job, or None if there is none."""
        s = ctypes.c_uint64()
        rc = _c.ckpt_latest(self._handle(), ctypes.byref(s))
        if rc == -1003:
            return None
        _check(rc, f"job {self.job}: listing steps: {strerror(rc)}")
        return int(s.value)

    def list(self) -> list[int]:
        """The job's committed steps, oldest first."""
        cap = 64
        while True:
            arr = (ctypes.c_uint64 * cap)()
            n = _check(_c.ckpt_list(self._handle(), arr, cap),
                       f"job {self.job}: listing steps")
            if n <= cap:
                return [int(arr[i]) for i in range(n)]
            cap = n

    def restore(self, step: int | None = None, agree: bool = True, exact: bool = False) -> Restore:
        """Restore this rank's shard of `step` (None: the newest). With agree
        (the default; every rank calls it alike) the whole job gets the same
        step, the newest every rank can read and verify. exact: fail rather
        than fall back to an older step."""
        flags = (_lib.CKPT_RESTORE_AGREE if agree else 0) | (_lib.CKPT_RESTORE_EXACT if exact else 0)
        s = _lib.CKPT_STEP_LATEST if step is None else int(step)
        out = ctypes.c_void_p()
        rc = _c.ckpt_restore_open(self._handle(), s, flags, ctypes.byref(out))
        if rc < 0:
            raise _error(rc, f"job {self.job} rank {self.rank}: restore of "
                         f"{'the newest step' if step is None else f'step {step}'}: {strerror(rc)}",
                         step)
        return Restore(self, out.value or 0)

    def read_ranges(self, step: int, reads: Sequence[ReadRequest]) -> list[ReadRequest]:
        """Read byte ranges of any rank's tensors or blobs of committed
        `step` (for resharding): fills each request's result, total and data.
        Raises the first error (after filling every request). Needs a
        libckpt with ckpt_read_ranges (HAVE_READ_RANGES)."""
        if not HAVE_READ_RANGES:
            raise CkptError(-_errno.EOPNOTSUPP, "this libckpt has no ckpt_read_ranges: "
                            "ranged reads (resharding) need a newer libckpt")
        arr = (_lib.Read * len(reads))()
        keep = []
        for i, rq in enumerate(reads):
            a = arr[i]
            a.rank = rq.rank
            a.tensor = rq.tensor.encode("utf-8", "surrogateescape") if rq.tensor is not None else None
            a.offset, a.length = rq.offset, rq.length
            if rq.length:
                dst = rq.dst if rq.dst is not None else bytearray(rq.length)
                mv = memoryview(dst).cast("B")
                if len(mv) < rq.length:
                    raise CkptError(-_errno.EINVAL, f"read {i}: destination has {len(mv)} bytes, "
                                    f"{rq.length} asked")
                cbuf = (ctypes.c_char * len(mv)).from_buffer(mv)
                keep.append(cbuf)
                a.dst = ctypes.addressof(cbuf)
                rq.data = dst
        rc = _c.ckpt_read_ranges(self._handle(), int(step), arr, len(reads))
        for i, rq in enumerate(reads):
            rq.result, rq.total = int(arr[i].result), int(arr[i].total)
        if rc < 0:
            bad = next((r for r in reads if r.result < 0), None)
            what = (f"rank {bad.rank} {'blob' if bad.tensor is None else repr(bad.tensor)} "
                    f"[{bad.offset}, +{bad.length})") if bad else "ranged read"
            why = strerror(rc)
            if hasattr(_c, "ckpt_read_error"):
                buf = ctypes.create_string_buffer(1024)
                if _c.ckpt_read_error(self._handle(), buf, len(buf)) > 0:
                    why = buf.value.decode("utf-8", "replace")
            raise _error(rc, f"job {self.job} step {step}: {what}: {why}", int(step))
        return list(reads)

    def close(self) -> None:
        """Close the connection and unmap the arena (views of it die too)."""
        if self._h is not None:
            h, self._h = self._h, None
            _c.ckpt_close(h)

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<ckpt.Context job={self.job!r} rank={self.rank}/{self.world_size}"
                f"{' closed' if self.closed else ''}>")


def _env_int(name: str) -> int | None:
    v = os.environ.get(name)
    return int(v) if v not in (None, "") else None


def connect(job: str, rank: int | None = None, world_size: int | None = None,
            max_save_bytes: int = 0, socket: str | os.PathLike[str] | None = None, *,
            local_rank: int | None = None, connect_timeout: float = 0,
            handshake_timeout: float = 0) -> Context:
    """Connect to the node's ckptd (ckpt_connect) and map its arena.

    job: 1..128 of [A-Za-z0-9._-]. rank / world_size / local_rank: default
    to $RANK / $WORLD_SIZE / $LOCAL_RANK (as torchrun sets them).
    max_save_bytes: the largest save (tensor bytes plus blob) this rank
    will make; ckptd sizes the slots from it. socket: ckptd's socket, else
    $CKPT_SOCKET, else the default. Timeouts in seconds (0: libckpt's
    defaults, 10 s to connect, 120 s for the handshake). Raises a
    CkptError with ckptd's reason when it refuses."""
    rank = rank if rank is not None else _env_int("RANK")
    world_size = world_size if world_size is not None else _env_int("WORLD_SIZE")
    if rank is None or world_size is None:
        raise CkptError(-_errno.EINVAL, f"job {job}: rank and world_size are needed "
                        "(arguments, or $RANK and $WORLD_SIZE)")
    if local_rank is None:
        local_rank = _env_int("LOCAL_RANK") or 0
    err = ctypes.create_string_buffer(512)
    o = _lib.Options()
    o.struct_size = ctypes.sizeof(_lib.Options)
    o.socket_path = os.fsencode(socket) if socket is not None else None
    o.job = job.encode()
    o.rank, o.world_size, o.local_rank = rank, world_size, local_rank
    o.max_save_bytes = int(max_save_bytes)
    o.connect_timeout_ms = int(connect_timeout * 1000)
    o.handshake_timeout_ms = int(handshake_timeout * 1000)
    o.error = ctypes.cast(err, ctypes.c_void_p)
    o.error_bytes = len(err)
    out = ctypes.c_void_p()
    rc = _c.ckpt_connect(ctypes.byref(o), ctypes.byref(out))
    if rc < 0:
        raise _error(rc, f"job {job} rank {rank}: connect: "
                     f"{err.value.decode('utf-8', 'replace') or strerror(rc)}")
    return Context(out.value or 0, job, rank, world_size)
