"""The user's levers on chunks: resurrect from the graveyard, pin, merge, delete.

A mixin of :class:`~halo_weave.app.TurnController`; the mechanics live in
:class:`~halo_weave.conversation.Conversation`, this only persists and announces them.
"""

from __future__ import annotations

from ..settings import MAX_BRIGHTNESS


class Levers:
    """Intents from the heatmap's context menu and the graveyard, refused while busy."""

    def resurrect_chunk(self, chunk_id: int) -> bool:
        """Graveyard click: bring a chunk back with its anchors, pinned at 10000."""
        return self._lever(
            lambda conv: conv.resurrect([chunk_id], brightness=MAX_BRIGHTNESS, pin=True),
            lambda conv, changed: self.store.save_chunks(conv, changed + [conv.chunks[chunk_id]]),
            "Resurrecting",
        )

    def pin(self, chunk_id: int, pinned: bool = True) -> bool:
        """Pin (brightness 10000, never pruned) or unpin a chunk."""
        return self._lever(
            lambda conv: [conv.pin(chunk_id, pinned)],
            lambda conv, changed: self.store.save_chunks(conv, changed),
            "Pinning" if pinned else "Unpinning",
        )

    def merge_with_next(self, chunk_id: int) -> bool:
        """Merge a chunk with the next chunk of its turn (re-indexed as one)."""
        def act(conv):
            kept, absorbed = conv.merge_with_next(chunk_id)
            self.store.save_merge(conv, kept, absorbed)
            self._index_pending()  # re-embeds the merged chunk, drops the absorbed entry
            return [kept]

        return self._lever(act, None, "Merging")

    def delete_chunk(self, chunk_id: int) -> bool:
        """Prune a chunk by hand (it goes to the graveyard)."""
        return self._lever(
            lambda conv: conv.delete_chunk(chunk_id),
            lambda conv, changed: self.store.save_chunks(conv, changed),
            "Deleting",
        )

    def _lever(self, act, persist, context: str) -> bool:
        conv = self.conv
        if conv is None or self.store is None:
            return False
        if self.busy:
            self.info.emit("Wait for the answer to finish first.")
            return False
        try:
            changed = act(conv)
            if persist is not None:
                persist(conv, list(changed))
            self.store.save_brightness(conv)
        except Exception as exc:  # noqa: BLE001
            self.error.emit(exc, context)
            return False
        self.conversation_changed.emit()
        self.graveyard_changed.emit()
        self.stats_changed.emit()
        return True

