"""Growing the llama.cpp KV cache when a request needs more cells than it has.

llama.cpp re-rotates the keys of *every* cell of the cache after a position shift (its
K-shift, ``build_graph_shift`` in llama-kv-cache.cpp: one RoPE over all cells of each
layer, used or not), and the cache shifts after every prune.  So a cache sized to the
model's whole trained window (8,192 cells for the bundled model) pays for cells a chat
never fills, at every prune.  The engine can start smaller (``--initial-context``);
a request that does not fit then gets a new, larger context here.
"""

from __future__ import annotations

import logging
import time

import numpy as np

log = logging.getLogger("halo_weave.server")

#: llama.cpp pads the KV cache to this many cells.
CELL_PAD = 256


def reserve(cache, n_tokens: int, should_stop=lambda: False) -> bool:
    """Make room in ``cache`` (a :class:`.LlamaCache`) for ``n_tokens`` positions.

    With too few cells, a new context replaces the cache's: ``n_tokens`` and a quarter
    more (fewer growths if the chat keeps growing), padded, at most ``cache.max_cells``.
    The live context is re-run into it: one re-prefill, logged, and reported by the next
    ``sync`` as ``grown_to`` / ``regrown`` / ``grow_s``.  ``False`` if stopped meanwhile
    (the cache is then empty).
    """
    if n_tokens <= cache.n_cells or cache.n_cells >= cache.max_cells or cache.new_context is None:
        return True
    started = time.perf_counter()
    cells = min(cache.max_cells, -(-(n_tokens + n_tokens // 4) // CELL_PAD) * CELL_PAD)
    ctx = cache.new_context(cells)
    live = cache.ids
    cache.L.llama_free(cache.ctx)
    cache.bind(ctx, cells)
    cache.ids, cache.cells = [], np.zeros(0, np.int64)
    try:
        ran = cache.extend(live, should_stop)
    except BaseException:
        cache.reset()
        raise
    if not ran:
        cache.reset()
    seconds = time.perf_counter() - started
    cache.grown = (cells, len(live) if ran else 0, seconds)
    log.info("KV cache grown to %d cells for %d tokens: re-ran the %d live tokens in %.1f s",
             cells, n_tokens, len(live), seconds)
    return ran
