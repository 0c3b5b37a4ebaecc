"""The user's levers on chunks: resurrect from the graveyard, pin, merge, prune.

A mixin of :class:`~halo_weave.app.TurnController`; each lever is a method of the
session's part ``session.levers`` (:class:`~halo_weave.session.levers.Levers`: change,
save); this refuses them while busy and announces what changed.
"""

from __future__ import annotations


class Levers:
    """Intents from the heatmap's context menu and the graveyard, refused while busy."""

    def resurrect_chunk(self, chunk_id: int) -> bool:
        """Graveyard click: bring a chunk back with its anchors, pinned at 10000."""
        return self._lever(lambda s: s.levers.resurrect(chunk_id), "Resurrecting")

    def pin(self, chunk_id: int, pinned: bool = True) -> bool:
        """Pin (brightness 10000, never pruned) or unpin a chunk."""
        return self._lever(lambda s: s.levers.pin(chunk_id, pinned), "Pinning" if pinned else "Unpinning")

    def merge_with_next(self, chunk_id: int) -> bool:
        """Merge a chunk with the next chunk of its turn (re-indexed as one)."""
        return self._lever(lambda s: s.levers.merge_with_next(chunk_id), "Merging")

    def prune_chunk(self, chunk_id: int) -> bool:
        """Prune a chunk by hand (it goes to the graveyard)."""
        return self._lever(lambda s: s.levers.prune(chunk_id), "Pruning")

    def _lever(self, act, context: str) -> bool:
        if self.conv is None or self.store is None:
            return False
        if self.busy:
            self.info.emit("Wait for the answer to finish first.")
            return False
        try:
            act(self.session)
        except Exception as exc:  # noqa: BLE001
            self.error.emit(exc, context)
            return False
        self.conversation_changed.emit()
        self.graveyard_changed.emit()
        self.stats_changed.emit()
        return True
