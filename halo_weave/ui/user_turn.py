"""The user's half of a turn: tokenize, wait briefly for indexing, resurrect, add, answer.

A mixin of :class:`~halo_weave.app.TurnController`; the answer itself is
:class:`~halo_weave.ui.generation_round.GenerationRounds`.  Order (DESIGN.md): tokenize
once on a thread → let pending embeddings land (≤ ``embed_wait_seconds``) → search on the
embedder thread → the session resurrects within the budget, saves and queues the user
turn before it is shown, makes room in the model's window → stream the answer.
"""

from __future__ import annotations

from PySide6.QtCore import QTimer

#: A step that may take longer than this shows progress (milliseconds).
PROGRESS_AFTER_MS = 1000

#: A user turn with more tokens than this is saved on a thread (a 1M-token paste took
#: 14 s to save on the UI thread, with the window frozen).
SAVE_ON_THREAD_TOKENS = 20_000


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
        self._unsent = text
        session = self.session

        def tokenize():
            return session.tokenize(text), session.tokenize(answer_prefix)

        what = f"Reading your message ({len(text):,} characters)"
        finish = self._progress_after_a_second(what)
        self._call(
            tokenize,
            on_ok=lambda pieces: (finish(), self._after_tokenize(text, *pieces)),
            on_fail=lambda exc: (finish(), self._turn_failed_early(exc, "Tokenizing your message")),
        )
        return True

    def _progress_after_a_second(self, what: str):
        """Show indeterminate progress for ``what`` if it is still going after a second;
        returns the function that ends it."""
        state = {"shown": False, "done": False}

        def show() -> None:
            if not state["done"]:
                state["shown"] = True
                self.progress.emit(what, 0, 0)

        def finish() -> None:
            state["done"] = True
            if state["shown"]:
                self.progress.emit(what, 1, 1)

        QTimer.singleShot(PROGRESS_AFTER_MS, show)
        return finish

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
        session = self.session
        if len(ids) > SAVE_ON_THREAD_TOKENS:
            self._set_busy(True, f"Saving your message ({len(ids):,} tokens)…")
            finish = self._progress_after_a_second(f"Saving your message ({len(ids):,} tokens)")
            self._call(
                session.save_user_message, ids, texts,
                on_ok=lambda turn: (finish(), self._user_turn_saved(turn)),
                on_fail=lambda exc: (finish(), self._user_turn_not_saved(exc)),
            )
            return
        try:
            turn = session.save_user_message(ids, texts)  # DB-first: persisted before it is shown
        except BaseException as exc:  # noqa: BLE001 - MemoryError too: the message goes back
            self._user_turn_not_saved(exc)
            return
        self._user_turn_saved(turn)

    def _user_turn_not_saved(self, exc) -> None:
        # Not on disk, so not shown and not answered: the message goes back to the input
        # box; the session has put the conversation back to what the file holds.
        for changed in (self.conversation_changed, self.graveyard_changed, self.stats_changed):
            changed.emit()
        self._turn_failed_early(exc, "Saving your message")

    def _user_turn_saved(self, turn) -> None:
        self._unsent = ""
        self.session.index_user_message(turn)
        if self.session.fit_model_window():
            self.graveyard_changed.emit()
        self._start_generation()  # shows the message (and any resurrection) with the answer
