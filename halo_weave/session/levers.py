"""The user's levers on chunks: resurrect from the graveyard, pin, merge, prune by hand."""

from __future__ import annotations

from ..conversation import Chunk
from ..settings import MAX_BRIGHTNESS


class Levers:
    """The user's levers on chunks (``session.levers``).

    Each changes the conversation, then saves what changed and the brightness; a save's
    errors go to the caller (the app shows them).  Owns no state of its own: the chunks
    are the conversation's.
    """

    def __init__(self, session) -> None:
        self._session = session

    def resurrect(self, chunk_id: int, *, pin: bool = True) -> list[Chunk]:
        """Graveyard click: bring a chunk back with its anchors, at 10000 (pinned)."""
        conv, store = self._session.conv, self._session.store
        changed = conv.resurrect([chunk_id], brightness=MAX_BRIGHTNESS, pin=pin)
        if store is not None:
            store.save_chunks(conv, changed + [conv.chunks[chunk_id]])
            store.save_brightness(conv)
        return changed

    def pin(self, chunk_id: int, pinned: bool = True) -> None:
        """Pin (brightness 10000, never pruned) or unpin a chunk."""
        conv, store = self._session.conv, self._session.store
        chunk = conv.pin(chunk_id, pinned)
        if store is not None:
            store.save_chunks(conv, [chunk])
            store.save_brightness(conv)

    def merge_with_next(self, chunk_id: int) -> None:
        """Merge a chunk with the next chunk of its turn (re-indexed as one)."""
        session = self._session
        conv, store = session.conv, session.store
        kept, absorbed = conv.merge_with_next(chunk_id)
        if store is not None:
            store.save_merge(conv, kept, absorbed)
        if session.indexer is not None:
            session.indexer.queue_pending(conv)  # re-embeds the merged chunk, drops the absorbed entry
        if store is not None:
            store.save_brightness(conv)

    def prune(self, chunk_id: int) -> list[Chunk]:
        """Prune a chunk by hand (it goes to the graveyard)."""
        conv, store = self._session.conv, self._session.store
        pruned = conv.prune_chunk(chunk_id)
        if store is not None:
            store.save_chunks(conv, list(pruned))
            store.save_brightness(conv)
        return pruned
