"""The user's levers on chunks: resurrect from the graveyard, pin, merge, prune.

Each lever is a method of the session's part ``session.levers``
(:class:`halo_weave.session.levers.Levers`: change, save); the :class:`ChunkLevers` here
refuses them while busy and announces what changed.
"""

from __future__ import annotations

from .gate import Gate
from .signals import ControlSignals


class ChunkLevers:
    """Intents from the heatmap's context menu and the graveyard, refused while busy;
    and pruning to the budget when a setting or the reader's votes change it.

    Owns nothing: it changes the session and announces the change.
    """

    def __init__(self, session, signals: ControlSignals, gate: Gate) -> None:
        self._session, self._signals, self._gate = session, signals, gate

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

    def prune_to_budget(self, limit: int | None = None) -> list:
        """Prune to ``limit`` (default: the max-context setting) now, saved; the graveyard
        hears of it.  The pruned chunks."""
        pruned = self._session.prune(limit)
        if pruned:
            self._signals.graveyard_changed.emit()
        return pruned

    def _lever(self, act, context: str) -> bool:
        session, signals = self._session, self._signals
        if session.conv is None or session.store is None:
            return False
        if self._gate.busy:
            signals.info.emit("Wait for the answer to finish first.")
            return False
        try:
            act(session)
        except Exception as exc:  # noqa: BLE001
            signals.error.emit(exc, context)
            return False
        signals.conversation_changed.emit()
        signals.graveyard_changed.emit()
        signals.stats_changed.emit()
        return True
