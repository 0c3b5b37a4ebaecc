"""The user's levers on chunks: resurrect from the graveyard, pin, merge, prune by hand.

Each changes the conversation, then saves (a lever's errors go to its caller: the app
shows them).  Every function takes the :class:`~halo_weave.session.ChatSession`
(``session``), whose methods of the same names call them.
"""

from __future__ import annotations

from typing import Any, Callable

from ..conversation import Chunk
from ..settings import MAX_BRIGHTNESS


def resurrect_chunk(session, chunk_id: int, pin: bool = True) -> list[Chunk]:
    """Graveyard click: bring a chunk back with its anchors, at 10000 (pinned)."""
    conv = session.conv
    changed = conv.resurrect([chunk_id], brightness=MAX_BRIGHTNESS, pin=pin)
    _persist(session, lambda store: store.save_chunks(conv, changed + [conv.chunks[chunk_id]]))
    return changed


def pin(session, chunk_id: int, pinned: bool = True) -> None:
    """Pin (brightness 10000, never pruned) or unpin a chunk."""
    conv = session.conv
    chunk = conv.pin(chunk_id, pinned)
    _persist(session, lambda store: store.save_chunks(conv, [chunk]))


def merge_with_next(session, chunk_id: int) -> None:
    """Merge a chunk with the next chunk of its turn (re-indexed as one)."""
    conv = session.conv
    kept, absorbed = conv.merge_with_next(chunk_id)
    _persist(session, lambda store: store.save_merge(conv, kept, absorbed), brightness=False)
    if session.indexer is not None:
        session.indexer.queue_pending(conv)  # re-embeds the merged chunk, drops the absorbed entry
    _persist(session, lambda store: None)


def prune_chunk(session, chunk_id: int) -> list[Chunk]:
    """Prune a chunk by hand (it goes to the graveyard)."""
    conv = session.conv
    pruned = conv.prune_chunk(chunk_id)
    _persist(session, lambda store: store.save_chunks(conv, list(pruned)))
    return pruned


def _persist(session, save: Callable[[Any], None], brightness: bool = True) -> None:
    """A lever's save, then brightness."""
    if session.store is not None:
        save(session.store)
        if brightness:
            session.store.save_brightness(session.conv)
