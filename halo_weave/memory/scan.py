"""The compiled first pass of a long index's search: int8 codes dotted with a query.

At 100k entries the first pass of a search reads every row (:meth:`.VectorMatrix.shortlist`).
numpy has no BLAS path for int8, so that pass reads float32 columns: 32 axes, 12.8 MB.
``scan.c`` reads each row's 64 coarse axes as int8 codes instead (6.4 MB: twice the
axes in half the bytes) and sums ``code * query`` in int32, exact, so every CPU and
every build gives the same numbers.  The source ships in this package and is compiled on
first use with the system C compiler (``$CC``, else ``cc`` or ``gcc``) into the user
cache directory, under a name holding a hash of the source; it is written to a
temporary file and renamed, so two processes compiling at once never load half a
library.  On x86-64 the compiler builds the loop for AVX-512, AVX2 and plain x86-64 and
the loader picks the one this CPU runs.  Where no compiler exists or anything fails,
:func:`kernel` logs one line and returns ``None`` and the search reads the float32
columns as before (slower, the same kind of shortlist).  ``HALO_WEAVE_C_SCAN=0`` asks
for that path.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from importlib import resources
from pathlib import Path

import numpy as np

from .. import native, settings

log = logging.getLogger("halo_weave.memory")

#: Set to 0 to read the float32 columns with numpy instead.
ENV_SWITCH = "HALO_WEAVE_C_SCAN"
SOURCE = "scan.c"

_lock = threading.Lock()
_loaded: dict[str, Kernel | None] = {}


class Kernel:
    """The compiled library's functions, with their arguments checked."""

    def __init__(self, library: ctypes.CDLL) -> None:
        pointer, size = ctypes.c_void_p, ctypes.c_int64
        self._every, self._chosen = library.halo_weave_scan, library.halo_weave_scan_rows
        self._at_least = library.halo_weave_at_least
        self._every.restype = self._chosen.restype = None
        self._every.argtypes = [pointer, size, size, pointer, pointer]
        self._chosen.argtypes = [pointer, pointer, size, size, pointer, pointer]
        self._at_least.restype = size
        self._at_least.argtypes = [pointer, size, ctypes.c_int32, pointer]

    def scan(self, codes: np.ndarray, query: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """int32 ``codes @ query`` (``codes[rows] @ query`` for the row numbers ``rows``)
        for C-contiguous int8 ``codes`` ``(n, width)`` and an int16 ``query``."""
        if (codes.dtype != np.int8 or query.dtype != np.int16 or codes.ndim != 2
                or not codes.flags.c_contiguous or query.shape != (codes.shape[1],)):
            raise ValueError("scan needs C-contiguous int8 codes (n, width) and an int16 query (width,)")
        query = np.ascontiguousarray(query)
        width = codes.shape[1]
        if rows is None:
            out = np.empty(len(codes), np.int32)
            self._every(codes.ctypes.data, len(codes), width, query.ctypes.data, out.ctypes.data)
            return out
        rows = np.ascontiguousarray(rows, np.int64)
        if len(rows) and (rows.min() < 0 or rows.max() >= len(codes)):
            raise IndexError("scan: a row number outside the codes")
        out = np.empty(len(rows), np.int32)
        self._chosen(codes.ctypes.data, rows.ctypes.data, len(rows), width, query.ctypes.data, out.ctypes.data)
        return out

    def at_least(self, scores: np.ndarray, threshold: int) -> np.ndarray:
        """``np.flatnonzero(scores >= threshold)`` for int32 ``scores``, in one pass."""
        scores = np.ascontiguousarray(scores, np.int32)
        out = np.empty(len(scores), np.int64)
        kept = self._at_least(scores.ctypes.data, len(scores), int(threshold), out.ctypes.data)
        return out[:kept].copy()


def kernel() -> Kernel | None:
    """The compiled scan; None where the library cannot be compiled or loaded here
    (logged once) or ``HALO_WEAVE_C_SCAN=0``."""
    if os.environ.get(ENV_SWITCH, "1").strip() == "0":
        return None
    with _lock:
        if SOURCE not in _loaded:
            _loaded[SOURCE] = _load()
        return _loaded[SOURCE]


def _load() -> Kernel | None:
    try:
        return Kernel(ctypes.CDLL(str(compiled())))
    except Exception as exc:  # noqa: BLE001 - any failure means the numpy path, never no search
        log.warning("search: no compiled first pass (%s); long indexes are searched with numpy, "
                    "slower", " ".join(f"{type(exc).__name__}: {exc}".split())[:300])
        return None


def compiled() -> Path:
    """The scan's shared library, compiled now if the cache does not hold this source's."""
    source = resources.files(__package__).joinpath(SOURCE).read_bytes()
    return native.compiled(source, SOURCE, settings.cache_dir() / "kernels", "scan", "-O3")
