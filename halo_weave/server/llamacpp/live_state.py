"""The live sequence of a llama.cpp cache as one blob: copied out to be saved, read back in.

``llama_state_seq_get_data`` copies sequence 0 out (every cell's position, keys and
values of every layer, in cell order); ``llama_state_seq_set_data`` into an emptied cache
writes the cells back in one contiguous slot from cell 0, in the blob's order, so cell
*i* then holds the blob's *i*-th position.  That gives the readout its position → cell map
without a search.  A blob whose positions are not exactly ``0..len(ids)-1`` (a different
conversation's, or a cache saved with a shift pending) is refused, and so is one that
llama.cpp refuses (another model, another cache type).
"""

from __future__ import annotations

import ctypes
import logging

import numpy as np

from .states import STATE_MAGIC

log = logging.getLogger("halo_weave.server")

LIVE_SEQ = 0


def export_live(cache) -> bytes | None:
    """The live sequence of ``cache`` (a :class:`.LlamaCache`) as a blob; None when it is
    empty.  A position shift still pending is applied first (the keys must be rotated for
    their positions)."""
    if not cache.ids or not cache.settle():
        return None
    L = cache.L
    size = L.llama_state_seq_get_size(cache.ctx, LIVE_SEQ)
    buf = (ctypes.c_uint8 * size)()
    n = L.llama_state_seq_get_data(cache.ctx, buf, size, LIVE_SEQ)
    return bytes(memoryview(buf)[:n]) if n > 0 else None


def blob_positions(blob: bytes) -> np.ndarray | None:
    """Each cell's position in a one-stream sequence-state blob, in cell order (None: not one)."""
    if len(blob) < 16:
        return None
    magic, _seq, n_stream, count = np.frombuffer(blob, dtype=np.uint32, count=4)
    if magic != STATE_MAGIC or n_stream != 1 or len(blob) < 16 + 12 * int(count):
        return None
    meta = np.frombuffer(blob, dtype=np.int32, count=3 * int(count), offset=16).reshape(-1, 3)
    if not (meta[:, 1] == 1).all():
        return None
    return meta[:, 0].astype(np.int64)


def import_live(cache, ids: list[int], blob: bytes) -> bool:
    """Make ``cache`` hold ``ids`` from ``blob`` (saved by :func:`export_live`) without a
    model run; False (and the cache emptied when it was touched) when the blob does not fit."""
    positions = blob_positions(blob)
    n = len(ids)
    if positions is None or len(positions) != n or n == 0 or n > cache.n_cells:
        return False
    if not np.array_equal(np.sort(positions), np.arange(n)):
        return False
    L = cache.L
    cache.reset()
    src = ctypes.cast(ctypes.c_char_p(blob), ctypes.POINTER(ctypes.c_uint8))
    if L.llama_state_seq_set_data(cache.ctx, src, len(blob), LIVE_SEQ) == 0:
        log.warning("llama.cpp refused a saved KV cache: prefilling instead")
        cache.reset()
        return False
    cells = np.empty(n, dtype=np.int64)
    cells[positions] = np.arange(n, dtype=np.int64)
    cache.ids, cache.cells = [int(i) for i in ids], cells  # reset() left no shift pending
    if cache.spill.k_tensor is None:
        # Saving pruned spans needs the key cache the readout sees at a decode: none ran yet.
        cache.probe()
    return True
