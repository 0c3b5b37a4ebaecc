"""Putting pruned chunks back into the live table: the mechanics of resurrection, the
counterpart of :mod:`.pruning`, behind :meth:`~halo_weave.conversation.Conversation.resurrect`.

Which chunks deserve to come back is decided elsewhere: the user's lever that resurrects
a chunk by hand, or a message's recall (:mod:`halo_weave.memory.recall_plan`, run by
:mod:`halo_weave.session.recall`).  Here: what comes back with a chunk (its
anchors and its turn's framing, :mod:`.anchors`), what that costs in live tokens, and the
re-insertion of a chunk's tokens at their original positions.  Like :mod:`.pruning`,
these are functions of a :class:`~halo_weave.conversation.Conversation` (``conv``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .anchors import anchors_of, with_framing
from .records import Chunk, ChunkTokens


def cost(conv, chunk: Chunk, with_anchors: bool = True) -> int:
    """Live tokens that bringing ``chunk`` back (with its anchors) would add."""
    group = [chunk] + (anchors_of(conv, chunk) if with_anchors else [])
    return sum(c.token_count for c in with_framing(conv, group).values() if not c.live)


def returning(conv, chunk_ids: Sequence[int], with_anchors: bool = True) -> list[Chunk]:
    """The pruned chunks that bringing ``chunk_ids`` back makes live (anchors and framing
    included), in position order."""
    group = [c for chunk in map(conv.chunks.__getitem__, chunk_ids)
             for c in [chunk] + (anchors_of(conv, chunk) if with_anchors else [])]
    wanted = with_framing(conv, group)
    return sorted((c for c in wanted.values() if not c.live), key=lambda c: c.start)


def put_back(conv, chunk: Chunk, data: ChunkTokens, brightness: np.ndarray) -> None:
    """Insert a pruned chunk's tokens at their original positions with ``brightness``."""
    conv.table.insert_rows(
        position=np.arange(chunk.start, chunk.end, dtype=np.int64),
        token_id=data.token_ids,
        brightness=brightness,
        chunk_id=chunk.id,
        turn_id=chunk.turn_id,
        framing=chunk.framing,
    )
    conv.held.revive(chunk.id, data.texts)
    chunk.live = True
    chunk.resurrected_at = conv.next_position
