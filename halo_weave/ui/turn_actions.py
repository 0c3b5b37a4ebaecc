"""Continue, Regenerate, Edit and resend, answer versions: the controller's side.

A mixin of :class:`~halo_weave.app.TurnController`.  Each change to the last exchange is
one transaction in :mod:`halo_weave.storage.turn_edits` (file first, then memory); this
only checks that it may happen now, keeps the semantic index in step, and streams the
new tokens with the same generation rounds as any answer.  (Meant to become methods of
the Qt-free ``ChatSession`` once the turn moves there.)
"""

from __future__ import annotations

import time

from ..storage import turn_edits


class TurnActions:
    """Intents on the last exchange; each returns False (with a message) when refused."""

    def can_change_last_exchange(self) -> str:
        """Why the last exchange cannot be changed now ('' when it can)."""
        reason = self.input_block_reason()
        if reason:
            return reason
        question, answer = turn_edits.last_exchange(self.conv)
        return "" if question is not None or answer is not None else "Nothing to change yet."

    def answer_versions(self) -> turn_edits.VersionState | None:
        """Where the last answer stands among its versions (None without one)."""
        if self.conv is None or self.store is None or self.conv.open_turn is not None:
            return None
        try:
            return turn_edits.version_state(self.conv, self.store)
        except Exception:  # noqa: BLE001 - a display figure is never worth an error dialog
            return None

    def regenerate(self) -> bool:
        """Answer the last question again; the answer shown so far becomes a version."""
        if not self._may_change():
            return False
        return self._change(lambda: turn_edits.retire_answer(self.conv, self.store), "Regenerating",
                            then=self._answer_again)

    def continue_answer(self) -> bool:
        """Let the model go on with the last answer (same turn, same chunking)."""
        if not self._may_change():
            return False

        def reopen():
            turn_edits.begin_continue(self.conv, self.store)
            return []

        return self._change(reopen, "Continuing the answer", then=self._stream_on)

    def show_answer_version(self, step: int) -> bool:
        """Flip to the previous (``step`` < 0) or next version of the last answer."""
        if not self._may_change():
            return False
        state = self.answer_versions()
        target = state and (state.previous if step < 0 else state.next)
        if not target:
            self.info.emit("No other version of this answer.")
            return False

        def flip():
            return turn_edits.show_version(self.conv, self.store, target)[1]

        return self._change(flip, "Showing another version", then=None)

    def last_question_text(self) -> str:
        """The words of the last question (for Edit)."""
        try:
            return turn_edits.question_text(self.conv, self.store)
        except turn_edits.TurnEditError:
            return ""

    def edit_last(self, text: str) -> bool:
        """Replace the last question by ``text`` and answer it (the old answer becomes a version)."""
        text = text.strip()
        if not text or not self._may_change():
            return False
        self._set_busy(True, "Reading your message…")
        self.clock.start()
        client = self.client

        def replace(pieces) -> None:
            ids, texts = [int(i) for i, _ in pieces], [t for _, t in pieces]
            ok = self._change(lambda: turn_edits.replace_question(self.conv, self.store, ids, texts)[1],
                              "Saving your edited message", then=self._answer_again, busy_already=True)
            if ok:
                question, _ = turn_edits.last_exchange(self.conv)
                self._queue_indexing([c.id for c in self.conv.content_chunks(question.turn_id)])

        self._call(lambda: client.tokenize(text, add_special_tokens=False), on_ok=replace,
                   on_fail=lambda exc: self._turn_failed_early(exc, "Tokenizing your message"))
        return True

    # ------------------------------------------------------------------ internals
    def _may_change(self) -> bool:
        reason = self.can_change_last_exchange()
        if reason:
            self.info.emit(reason)
            return False
        return True

    def _change(self, act, context: str, then, busy_already: bool = False) -> bool:
        """Run one turn_edits change; on failure reload the file so the view equals it."""
        try:
            removed = act()
        except turn_edits.TurnEditError as exc:
            if busy_already:
                self._set_busy(False)
            self.info.emit(str(exc))
            return False
        except Exception as exc:  # noqa: BLE001 - the file is the truth: show it again
            if busy_already:
                self._set_busy(False)
            self.error.emit(exc, context)
            if self.path is not None:
                self.open_conversation(self.path)
            return False
        index = self.index
        if removed and index is not None:
            self._guard(lambda: index.remove([c.id for c in removed]), "Updating the memory index")
        self._index_pending()  # the question's entry includes its answer's opening
        self.conversation_changed.emit()
        self.graveyard_changed.emit()
        self.stats_changed.emit()
        if then is not None:
            then()
        return True

    def _answer_again(self) -> None:
        """Stream a new answer to the question the conversation now ends with."""
        self._stop_pending = False
        if not self.clock.running:
            self.clock.start()
        self._answer_prefix = ()
        self._fit_model_window()
        self._start_generation()

    def _stream_on(self) -> None:
        """Stream more tokens into the reopened answer."""
        self._stop_pending = False
        self.clock.start()
        self._stream_count = 0
        self._stream_started = time.monotonic()
        self._attention_seen = False
        self._attention_errors = 0
        self._round = 0
        self._fit_model_window()
        self._start_generation(continuation=True)
