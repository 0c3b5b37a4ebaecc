"""Growing the llama.cpp KV cache when a request needs more cells than it has.

llama.cpp re-rotates the keys of *every* cell of the cache after a position shift (its
K-shift, ``build_graph_shift`` in llama-kv-cache.cpp: one RoPE over all cells of each
layer, used or not), and the cache shifts after every prune.  So a cache sized to the
model's whole trained window (8,192 cells for the bundled model) pays for cells a chat
never fills, at every prune.  The engine can start smaller (``--initial-context``);
a request that does not fit then gets a new, larger context here, with the live
context's states copied over (0.09 s for 107 tokens in a quick test, against 1.6 s
re-running them, load ~9).
"""

from __future__ import annotations

import ctypes
import logging
import time

import numpy as np

log = logging.getLogger("halo_weave.server")

#: The live sequence (as in :mod:`.cache`).
LIVE_SEQ = 0

#: llama.cpp pads the KV cache to this many cells.
CELL_PAD = 256

#: Compact the live context once its cells spread over this many more than it needs
#: (two of llama.cpp's pads): below that a decode attends over little extra.
COMPACT_MIN_CELLS = 2 * CELL_PAD


class Growth:
    """When and how far the cache grows, and when it is packed.

    Owns: ``max_cells`` (the most cells :meth:`reserve` grows to), ``new_context``
    (``new_context(n_cells)`` makes such a context; None: the cache never grows),
    ``compact_min_cells`` (:meth:`compact` packs the cache once it spreads over this
    many extra cells) and the last growth not reported yet (:meth:`take_report`).
    """

    def __init__(self, max_cells: int, new_context=None, compact_min_cells: int = COMPACT_MIN_CELLS) -> None:
        self.max_cells = max_cells
        self.new_context = new_context
        self.compact_min_cells = compact_min_cells
        self._grown: tuple[int, int, int, float] | None = None  # cells, copied, re-run, seconds

    def take_report(self) -> tuple[int, int, int, float] | None:
        """The last growth, ``(cells, copied, re-run, seconds)``, once (None: none since)."""
        grown, self._grown = self._grown, None
        return grown

    def reserve(self, cache, n_tokens: int, should_stop=lambda: False) -> bool:
        """Grow ``cache`` if needed (see :func:`reserve`)."""
        return reserve(cache, self, n_tokens, should_stop)

    def note(self, grown: tuple[int, int, int, float]) -> None:
        """A growth to report with the next sync."""
        self._grown = grown

    def compact(self, cache) -> bool:
        """Pack ``cache`` when prunes and restores have spread it over at least
        ``compact_min_cells`` extra cells (see :func:`compact`)."""
        if spread(cache.cells) < self.compact_min_cells:
            return False
        return compact(cache)


def spread(cells: np.ndarray) -> int:
    """Cells a decode attends over beyond the live context's own (``cells``: each
    position's cell): llama.cpp attends up to the highest used cell (padded), holes included."""
    if not len(cells):
        return 0
    return padded(int(cells.max()) + 1) - padded(len(cells))


def reserve(cache, growth: Growth, n_tokens: int, should_stop=lambda: False) -> bool:
    """Make room in ``cache`` (a :class:`.LlamaCache`) for ``n_tokens`` positions.

    With too few cells, a new context replaces the cache's: ``n_tokens`` and a quarter
    more (fewer growths if the chat keeps growing), padded, at most ``growth.max_cells``.
    The live context's states are copied into it (``llama_state_seq_get_data`` /
    ``set_data``: no model run; a position shift still pending is applied first,
    :meth:`.LlamaCache.settle`); where a copy is refused it is re-run instead, one re-prefill.  Logged, and reported
    by the next ``sync`` as ``grown_to`` / ``carried`` / ``regrown`` / ``grow_s``.
    ``False`` if stopped meanwhile (the cache is then empty).
    """
    if n_tokens <= cache.n_cells or cache.n_cells >= growth.max_cells or growth.new_context is None:
        return True
    started = time.perf_counter()
    cells = min(growth.max_cells, -(-(n_tokens + n_tokens // 4) // CELL_PAD) * CELL_PAD)
    ctx = growth.new_context(cells)
    live, old_cells = cache.ids, cache.cells
    copied = bool(live) and cache.settle() and _copy_live(cache.L, cache.ctx, ctx)
    cache.L.llama_free(cache.ctx)
    cache.bind(ctx, cells)
    ran = True
    if copied:
        # An empty cache takes a sequence's cells in the blob's order, which is the old
        # cells' order: position p lands in the rank of its old cell.
        cache.ids, cache.cells = live, np.argsort(np.argsort(old_cells)).astype(np.int64)
        # Nothing has run in the new context, so the readout has not seen its key cache,
        # which saving pruned spans and restoring stored ones need (without this the
        # spans removed by the request that grew it were lost, and restores ran instead).
        cache.probe()
    else:
        cache.reset()
        try:
            ran = cache.extend(live, should_stop)
        except BaseException:
            cache.reset()
            raise
        if not ran:
            cache.reset()
    seconds = time.perf_counter() - started
    carried, rerun = (len(live), 0) if copied else (0, len(live) if ran else 0)
    growth.note((cells, carried, rerun, seconds))
    log.info("KV cache grown to %d cells for %d tokens: %d live tokens copied, %d re-run, in %.2f s",
             cells, n_tokens, carried, rerun, seconds)
    return ran


def padded(n: int) -> int:
    """``n`` cells rounded up to llama.cpp's pad."""
    return -(-n // CELL_PAD) * CELL_PAD


def compact(cache) -> bool:
    """Move the live context of ``cache`` into its first cells, in position order.

    Prunes leave holes, and restored spans and new tokens land wherever llama.cpp finds
    room, so over a chat the live context spreads over the whole cache; a decode attends
    over every cell up to the highest one used (measured: 50 new tokens after 5,000 live
    ones took 623 ms spread over 8,000 cells against 459 ms packed; a decode 38 against
    27 ms).  Copying the live sequence out and back into the emptied cache packs it
    (``llama_state_seq_set_data`` takes one contiguous slot from the first cell).  A
    position shift still pending is applied first (the copy holds keys as last rotated);
    ``False`` if not done.  Should the copy be refused, the cache is emptied and the next request
    re-runs its prompt: slower, never wrong.
    """
    if not cache.ids or not cache.settle():
        return False
    started = time.perf_counter()
    L = cache.L
    size = L.llama_state_seq_get_size(cache.ctx, LIVE_SEQ)
    buf = (ctypes.c_uint8 * size)()
    n = L.llama_state_seq_get_data(cache.ctx, buf, size, LIVE_SEQ)
    if n <= 0:
        return False
    old_cells = cache.cells
    L.llama_memory_clear(cache.mem, False)
    if L.llama_state_seq_set_data(cache.ctx, buf, n, LIVE_SEQ) == 0:
        log.warning("compacting the KV cache failed: the next request re-runs its prompt")
        cache.reset()
        return False
    # Written back in the old cells' order, from cell 0: position p lands in its old rank.
    cache.cells = np.argsort(np.argsort(old_cells)).astype(np.int64)
    log.info("KV cache compacted: %d live tokens from %d cells into %d, in %.3f s",
             len(cache.ids), int(old_cells.max()) + 1, len(cache.ids), time.perf_counter() - started)
    return True


def _copy_live(L, old, new) -> bool:
    """Copy sequence 0 (positions, keys, values) from context ``old`` into the empty ``new``."""
    size = L.llama_state_seq_get_size(old, LIVE_SEQ)
    buf = (ctypes.c_uint8 * size)()
    n = L.llama_state_seq_get_data(old, buf, size, LIVE_SEQ)
    return n > 0 and L.llama_state_seq_set_data(new, buf, n, LIVE_SEQ) != 0
