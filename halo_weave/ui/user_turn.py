"""The user's half of a turn: tokenize, wait briefly for indexing, resurrect, add, answer.

A mixin of :class:`~halo_weave.app.TurnController`; the answer itself is
:class:`~halo_weave.ui.generation_round.GenerationRounds`.  Order (DESIGN.md): tokenize
once on a thread → let pending embeddings land (≤ ``embed_wait_seconds``) → search on the
embedder thread → the session resurrects within the budget, saves and queues the user
turn before it is shown, makes room in the model's window → stream the answer.
"""

from __future__ import annotations


class UserTurns:
    """From the send button to the first streamed token."""

    _answer_prefix: tuple | list = ()

    def send(self, text: str, answer_prefix: str = "") -> bool:
        """Start a turn with the user's message; False when it cannot start now.

        ``answer_prefix`` is put at the start of the answer before the model goes on
        (a prefill; a tool call in it runs first), e.g. for scripted demos and tests.
        """
        text = text.strip()
        reason = self.input_block_reason()
        if not text or reason:
            if reason:
                self.info.emit(reason)
            return False
        self._set_busy(True, "Reading your message…")
        self._stop_pending = False
        self.session.streamed = 0
        session = self.session

        def tokenize():
            return session.tokenize(text), session.tokenize(answer_prefix)

        self._call(
            tokenize,
            on_ok=lambda pieces: self._after_tokenize(text, *pieces),
            on_fail=lambda exc: self._turn_failed_early(exc, "Tokenizing your message"),
        )
        return True

    def _after_tokenize(self, text: str, pieces, prefix=()) -> None:
        ids = [int(i) for i, _ in pieces]
        texts = [t for _, t in pieces]
        self._answer_prefix = list(prefix)
        self._pending_send = lambda: self._resurrect_then_add(text, ids, texts)
        if self.index is not None and self._indexer.pending > 0:
            # Let the previous exchange's embeddings land, but not for long.
            self._set_busy(True, "Finishing memory indexing…")
            self._wait_timer.start(int(self.settings.embed_wait_seconds * 1000))
        else:
            self._run_pending_send()

    def _on_embed_idle(self) -> None:
        if self._wait_timer.isActive():
            self._wait_timer.stop()
            self._run_pending_send()

    def _run_pending_send(self) -> None:
        action, self._pending_send = self._pending_send, None
        if action is not None:
            action()

    def _resurrect_then_add(self, text: str, ids: list[int], texts: list[str]) -> None:
        index = self.index  # loaded on first use
        if not self.session.can_resurrect():
            self.session.last_resurrected = 0
            self._add_user_turn(ids, texts)
            return
        self._set_busy(True, "Searching memory…")
        # The query embedding is the slow part: it runs on the embedder thread, ahead of
        # queued indexing; planning and resurrecting touch the conversation, so they run here.
        self._indexer.search(text, lambda matches, exc: self._resurrect(index, matches, ids, texts))

    def _resurrect(self, index, matches, ids, texts) -> None:
        if self.session.resurrect_for(index, matches, len(ids)):
            self.graveyard_changed.emit()
        self._add_user_turn(ids, texts)

    def _add_user_turn(self, ids: list[int], texts: list[str]) -> None:
        try:
            self.session.add_user_message(ids, texts)
        except Exception as exc:  # noqa: BLE001
            # Not on disk, so not shown and not answered; the user can send it again.
            self._turn_failed_early(exc, "Saving your message")
            return
        if self.session.fit_model_window():
            self.graveyard_changed.emit()
        self._start_generation()  # shows the message (and any resurrection) with the answer
