# SPDX-License-Identifier: MIT
"""ctypes declarations of libckpt (include/ckpt.h) and where the library is found."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

CKPT_MAX_DIMS = 8
CKPT_STEP_LATEST = 2**64 - 1
CKPT_STEP_MAX = 9999999999
CKPT_RESTORE_EXACT = 1 << 0
CKPT_RESTORE_AGREE = 1 << 1

_u64 = ctypes.c_uint64
_u32 = ctypes.c_uint32


class TensorDesc(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", _u32),
        ("ndim", _u32),
        ("global_shape", _u64 * CKPT_MAX_DIMS),
        ("offset", _u64 * CKPT_MAX_DIMS),
        ("shape", _u64 * CKPT_MAX_DIMS),
        # Since libckpt 0.2: the size of this struct, so that it can grow
        # (ckpt.h). Set by __init__; 0 would mean the 0.1 layout.
        ("struct_size", _u32),
    ]

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.struct_size = ctypes.sizeof(TensorDesc)


class Options(ctypes.Structure):
    _fields_ = [
        ("struct_size", _u32),
        ("socket_path", ctypes.c_char_p),
        ("job", ctypes.c_char_p),
        ("rank", _u32),
        ("world_size", _u32),
        ("local_rank", _u32),
        ("max_save_bytes", _u64),
        ("connect_timeout_ms", _u32),
        ("handshake_timeout_ms", _u32),
        ("error", ctypes.c_void_p),
        ("error_bytes", ctypes.c_size_t),
    ]


class Status(ctypes.Structure):
    _fields_ = [
        ("step", _u64),
        ("state", ctypes.c_int),
        ("error", ctypes.c_int),
        ("reason", ctypes.c_char * 256),
    ]


class Read(ctypes.Structure):
    """struct ckpt_read: one ranged read of ckpt_read_ranges()."""

    _fields_ = [
        ("rank", _u32),
        ("tensor", ctypes.c_char_p),
        ("offset", _u64),
        ("length", _u64),
        ("dst", ctypes.c_void_p),
        ("result", ctypes.c_int),
        ("total", _u64),
    ]


def _candidates() -> list[str]:
    here = Path(__file__).resolve().parent
    out = [str(p) for p in sorted(here.glob("libckpt.so*"))]
    env = os.environ.get("CKPT_LIBRARY")
    if env:
        out.append(env)
    out.append("libckpt.so.0")
    return out


def _load() -> ctypes.CDLL:
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError(
        "ckpt: cannot load libckpt (tried the package directory, $CKPT_LIBRARY, "
        "then the system's libckpt.so.0): " + "; ".join(errors)
    )


def _declare(lib: ctypes.CDLL) -> None:
    P = ctypes.c_void_p
    pp = ctypes.POINTER(ctypes.c_void_p)
    c_int, c_size = ctypes.c_int, ctypes.c_size_t
    sigs = {
        "ckpt_strerror": (ctypes.c_char_p, [c_int]),
        "ckpt_dtype_size": (c_size, [c_int]),
        "ckpt_dtype_name": (ctypes.c_char_p, [c_int]),
        "ckpt_tensor_bytes": (_u64, [ctypes.POINTER(TensorDesc)]),
        "ckpt_connect": (c_int, [ctypes.POINTER(Options), pp]),
        "ckpt_close": (None, [P]),
        "ckpt_reconnect": (c_int, [P]),
        "ckpt_slot_bytes": (_u64, [P]),
        "ckpt_slot_count": (_u32, [P]),
        "ckpt_arena": (P, [P, ctypes.POINTER(c_size)]),
        "ckpt_save_begin": (c_int, [P, _u64, pp]),
        "ckpt_save_add": (c_int, [P, ctypes.POINTER(TensorDesc), P]),
        "ckpt_save_reserve": (c_int, [P, ctypes.POINTER(TensorDesc), pp]),
        "ckpt_save_error": (ctypes.c_char_p, [P]),
        "ckpt_save_set_blob": (c_int, [P, P, c_size]),
        "ckpt_save_finish": (c_int, [P]),
        "ckpt_save_abort": (None, [P]),
        "ckpt_state_name": (ctypes.c_char_p, [c_int]),
        "ckpt_poll": (c_int, [P, _u64, ctypes.POINTER(Status)]),
        "ckpt_wait": (c_int, [P, _u64, c_int, ctypes.POINTER(Status)]),
        "ckpt_next_event": (c_int, [P, ctypes.POINTER(Status)]),
        "ckpt_fd": (c_int, [P]),
        "ckpt_latest": (c_int, [P, ctypes.POINTER(_u64)]),
        "ckpt_list": (c_int, [P, ctypes.POINTER(_u64), c_size]),
        "ckpt_restore_open": (c_int, [P, _u64, ctypes.c_uint, pp]),
        "ckpt_restore_step": (_u64, [P]),
        "ckpt_restore_warning": (ctypes.c_char_p, [P]),
        "ckpt_restore_tensor_count": (c_int, [P]),
        "ckpt_restore_tensor_at": (c_int, [P, c_int, ctypes.POINTER(TensorDesc)]),
        "ckpt_restore_tensor": (c_int, [P, ctypes.c_char_p, P, c_size]),
        "ckpt_restore_tensor_ptr": (c_int, [P, ctypes.c_char_p, pp, ctypes.POINTER(c_size)]),
        "ckpt_restore_blob": (c_int, [P, P, c_size]),
        "ckpt_restore_close": (None, [P]),
        # Ranged reads of any rank's items (resharding); newer libraries only.
        "ckpt_read_ranges": (c_int, [P, _u64, ctypes.POINTER(Read), c_size]),
        "ckpt_read_error": (c_int, [P, ctypes.c_char_p, c_size]),
        "ckpt_restore_blob_ptr": (c_int, [P, pp, ctypes.POINTER(c_size)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name, None)
        if fn is None:
            continue
        fn.restype = res
        fn.argtypes = args


lib = _load()
_declare(lib)
HAVE_READ_RANGES: bool = hasattr(lib, "ckpt_read_ranges")
