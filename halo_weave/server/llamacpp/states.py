"""Pruned spans of llama.cpp's sequence 0 saved to host memory and put back without a run.

**Save** (at a prune, before any cell of this sync is moved, so no K-shift is pending):
``seq_cp`` the span's positions from sequence 0 into the scratch sequence, copy that
sequence out with ``llama_state_seq_get_data`` (positions, keys and values of every
layer) and drop it.  The blob goes into a :class:`~halo_weave.server.span_store.SpanStore`;
the cells are freed with the prune, so the live cache (``n_kv``, what every decode
attends over) stays as wide as the live context.

**Restore**: ``llama_state_seq_set_data`` the blob into the scratch sequence (llama.cpp
picks free cells and writes keys and values there), ``seq_cp`` each wanted piece into a
helper sequence of its own and drop the scratch sequence, ``seq_add`` each helper to its
piece's new place (llama.cpp re-rotates the keys at the next decode), ``seq_cp`` it into
sequence 0 and drop the helpers.  Pieces of one entry share one ``set_data``.

llama.cpp does not say *which* cells ``set_data`` used, and the attention readout needs
each position's cell.  They are found by content: the blob holds every cell's layer-0
key row, and the layer-0 key tensor of the cache is read where it lies: through a NumPy
view of host memory (no copy), or, where the layer runs on a GPU (``--gpu-layers`` beyond
the model's layers), copied out through ggml's backend API before and after the
``set_data`` (a few MB; ``$HALO_WEAVE_KV_HOST_VIEW=0`` takes that path on the CPU too, to
test it).  Before the restore, free cells whose stale row equals one of the blob's
are zeroed (a free cell's content is never read: the mask hides it); after it, each blob
row is found in exactly one cell that sequence 0 does not hold.  Rows are looked up by a
key of two of their 8-byte words (reading 16 bytes of each free cell, not its whole row:
hashing every free row twice per piece was most of a restore's time, ~3 ms per piece at
3,000 free cells), and the cells found are then compared with the blob's rows whole.
Anything unexpected (a key found twice or not at all, a row that differs, a blob of an
unknown layout) makes the restore report failure and the caller runs the span instead.
"""

from __future__ import annotations

import ctypes
import logging
import os

import numpy as np

from ..span_files import states_of
from ..span_store import Piece, SpanStore

log = logging.getLogger("halo_weave.server")

#: llama.cpp's sequence-state magic (``io_magic`` in llama-context.cpp).
STATE_MAGIC = 0xAF143CD8
#: Bytes per cell in the blob's metadata: position, seq-id count, one seq id.
META_BYTES = 12
#: Odd multipliers of the row hash (any fixed values do).
_HASH_SEED = 0x9E3779B97F4A7C15
#: Set to 0 to copy layer 0's keys through ggml's backend API even where they lie in host
#: memory (the path a GPU's key cache takes).
HOST_VIEW_ENV = "HALO_WEAVE_KV_HOST_VIEW"


class StateSpill:
    """Saves pruned spans of sequence ``live`` and restores them (see the module docstring)."""

    def __init__(self, lib, ctx, mem, store: SpanStore, live: int, scratch: int,
                 helpers: tuple[int, ...] = ()) -> None:
        self.lib, self.L = lib, lib.llama
        self.ctx, self.mem = ctx, mem
        self.store = store
        self.live, self.scratch = live, scratch
        #: Free sequences a group restore gives one piece each (at least one).
        self.helpers = tuple(helpers) or (scratch + 1,)
        self.k_tensor: int | None = None  # layer 0's key cache, seen by the evaluation callback
        self._k_rows: np.ndarray | None = None
        #: Whether host keys are read through a view (else copied, as a GPU's are).
        self._host_view = os.environ.get(HOST_VIEW_ENV, "1").strip() != "0"
        self._k_copied = False  # the keys are copies: read again after a change, written back
        self.saved_tokens = 0

    # ------------------------------------------------------------ layer-0 keys

    def see_key_tensor(self, tensor: int | None) -> None:
        """Called with the cache's layer-0 key tensor (the destination of its SET_ROWS)."""
        if tensor and tensor != self.k_tensor:
            self.k_tensor, self._k_rows = tensor, None

    def key_rows(self) -> np.ndarray | None:
        """Layer 0's key cache as ``[cells, row_bytes]`` uint8, or None: a view of host
        memory, or (a GPU's) a copy made now, which :meth:`zero_rows` writes back."""
        if self.k_tensor and (self._k_rows is None or self._k_copied):
            lib = self.lib
            data, row_bytes, n_cells = lib.tensor_host_rows(self.k_tensor)
            if row_bytes <= 0 or row_bytes % 8 != 0:
                return None
            if data and self._host_view:
                buf = (ctypes.c_uint8 * (row_bytes * n_cells)).from_address(data)
                self._k_rows, self._k_copied = np.frombuffer(buf, dtype=np.uint8).reshape(n_cells, row_bytes), False
            else:
                rows = np.empty((n_cells, row_bytes), dtype=np.uint8)
                lib.read(self.k_tensor, rows)
                self._k_rows, self._k_copied = rows, True
        return self._k_rows

    def zero_rows(self, rows: np.ndarray, cells: np.ndarray) -> None:
        """Zero the key rows of ``cells`` (``rows``: :meth:`key_rows`), in the cache itself."""
        rows[cells] = 0
        if self._k_copied and len(cells):
            zero = np.zeros(rows.shape[1], dtype=np.uint8)
            for cell in cells:
                self.lib.write_part(self.k_tensor, zero, int(cell) * rows.shape[1])

    # ------------------------------------------------------------ save

    def save(self, ids: list[int], start: int, end: int, before: list[int] | None = None) -> int:
        """Store positions ``[start, end)`` of the live sequence (``ids`` their tokens),
        what the store does not hold yet (:meth:`.SpanStore.save`; ``before``: the cached
        tokens before the span); returns the tokens of the span it holds."""
        if self.store.max_bytes <= 0 or self.key_rows() is None:
            return 0

        def copy_out(a: int, b: int):
            blob = self._copy_out(a, b)
            return None if blob is None else (blob, len(blob))

        saved = self.store.save(ids, start, copy_out, before)
        self.saved_tokens += saved
        return saved

    def _copy_out(self, a: int, b: int) -> bytes | None:
        L, mem, s = self.L, self.mem, self.scratch
        L.llama_memory_seq_rm(mem, s, -1, -1)
        L.llama_memory_seq_cp(mem, self.live, s, a, b)
        try:
            size = L.llama_state_seq_get_size(self.ctx, s)
            buf = (ctypes.c_uint8 * size)()
            n = L.llama_state_seq_get_data(self.ctx, buf, size, s)
        finally:
            L.llama_memory_seq_rm(mem, s, -1, -1)
        if n == 0:
            return None
        return bytes(memoryview(buf)[:n])

    # ------------------------------------------------------------ restore

    def restore_group(self, group: list[tuple[Piece, int]], in_use: np.ndarray) -> list[np.ndarray | None]:
        """Put each ``(piece, at)`` (pieces of one stored entry, at most ``len(helpers)``,
        disjoint) at live positions ``at..``, the entry written into the cache once;
        ``in_use``: a boolean per cell, true where the live sequence holds it.  A
        resurrection often brings back several paragraphs of one pruned span, and each
        ``set_data`` writes the whole entry (up to 512 tokens, ~12 MB here).  Each piece is first given a helper sequence of its
        own, so that moving one never moves another (a cell has one position, and a moved
        piece may land on positions another still holds in the scratch sequence).
        Returns each piece's cells, or all None (nothing changed in the live sequence)."""
        entry = group[0][0].entry
        failed = [None] * len(group)
        blob = states_of(entry.payload)  # read from its span file when it came from one
        if blob is None:
            return failed
        rows = self.key_rows()
        layout = _blob_layout(blob, rows.shape[1] if rows is not None else 0)
        if rows is None or layout is None or len(group) > len(self.helpers) or any(
                p.entry is not entry for p, _ in group):
            return failed
        positions, blob_rows = layout
        if len(positions) != len(entry.ids):
            return failed
        want = _row_keys(blob_rows)
        if len(np.unique(want)) != len(want) or not want.all():  # a zeroed cell's key is 0
            return failed
        free_idx = np.flatnonzero(~in_use[:len(rows)])
        stale = free_idx[np.isin(_row_keys(rows, free_idx), want)]
        self.zero_rows(rows, stale)  # a free cell's content is masked out: make it unmistakable
        L, mem, s = self.L, self.mem, self.scratch
        helpers = self.helpers[:len(group)]
        # ``blob``: bytes, alive through the call, read where they lie, not copied.
        src = ctypes.cast(ctypes.c_char_p(blob), ctypes.POINTER(ctypes.c_uint8))
        try:
            if L.llama_state_seq_set_data(self.ctx, src, len(blob), s) == 0:
                return failed
            rows = self.key_rows()  # a copy (a GPU's keys) is read again; a view already shows them
            found = _row_keys(rows, free_idx)
            order = np.argsort(found)
            where = np.searchsorted(found[order], want)
            where = np.minimum(where, len(order) - 1)
            cells = free_idx[order[where]]
            if not np.array_equal(found[order][where], want) or not np.array_equal(rows[cells], blob_rows):
                log.warning("restored states not found in the cache; running the span instead")
                return failed
            for (piece, _at), helper in zip(group, helpers):  # by the stored positions
                first = entry.pos + piece.offset
                L.llama_memory_seq_rm(mem, helper, -1, -1)
                L.llama_memory_seq_cp(mem, s, helper, first, first + len(piece))
            L.llama_memory_seq_rm(mem, s, -1, -1)  # the rest of the entry: freed
            for (piece, at), helper in zip(group, helpers):
                delta = at - (entry.pos + piece.offset)
                if delta:
                    L.llama_memory_seq_add(mem, helper, -1, -1, delta)
                L.llama_memory_seq_cp(mem, helper, self.live, at, at + len(piece))
        finally:
            L.llama_memory_seq_rm(mem, s, -1, -1)
            for helper in helpers:
                L.llama_memory_seq_rm(mem, helper, -1, -1)
        self.store.touch(entry)
        by_pos = np.empty(len(positions), dtype=np.int64)
        by_pos[positions - entry.pos] = cells
        return [by_pos[piece.offset:piece.offset + len(piece)] for piece, _ in group]


def _blob_layout(blob: bytes, row_bytes: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Each cell's position and layer-0 key row in a one-stream sequence-state blob."""
    if row_bytes <= 0 or len(blob) < 16:
        return None
    magic, _seq, n_stream, count = np.frombuffer(blob, dtype=np.uint32, count=4)
    if magic != STATE_MAGIC or n_stream != 1 or count == 0:
        return None
    meta = np.frombuffer(blob, dtype=np.int32, count=3 * count, offset=16).reshape(count, 3)
    if not (meta[:, 1] == 1).all():  # one sequence id per cell, no extension fields
        return None
    at = 16 + META_BYTES * count
    _v_trans, _n_layer, _k_type = np.frombuffer(blob, dtype=np.int32, count=3, offset=at)
    (k_row,) = np.frombuffer(blob, dtype=np.uint64, count=1, offset=at + 12)
    if k_row != row_bytes:
        return None
    start = at + 20
    if len(blob) < start + count * row_bytes:
        return None
    rows = np.frombuffer(blob, dtype=np.uint8, count=count * row_bytes, offset=start).reshape(count, row_bytes)
    return meta[:, 0].astype(np.int64), rows


def _row_keys(rows: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
    """A 64-bit key per row (rows of a multiple of 8 bytes; ``index``: those rows only),
    from its first and middle 8-byte words: the key's first values of two heads, rotated
    by the token's position, so rows of one span differ.  Not a hash of the whole row:
    a caller compares the rows it finds in full."""
    words = rows.view(np.uint64)
    mid = words.shape[1] // 2
    first, middle = (words[:, 0], words[:, mid]) if index is None else (words[index, 0], words[index, mid])
    with np.errstate(over="ignore"):
        return first ^ (middle * np.uint64(_HASH_SEED))
