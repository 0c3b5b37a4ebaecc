"""Continue, Regenerate, Edit and resend, answer versions: *when*, for the controller.

A mixin of :class:`~halo_weave.app.TurnController`.  The rules are methods of
:class:`~halo_weave.session.ChatSession` (each change one transaction of
:mod:`halo_weave.storage.turn_edits`); this checks that the user may change the last
exchange now, tokenizes an edited message on a thread, announces the change and streams
the new tokens with the same rounds as any answer.
"""

from __future__ import annotations

from ..errors import ConversationError


class TurnActions:
    """Intents on the last exchange; each returns False (with a message) when refused."""

    def can_change_last_exchange(self) -> str:
        """Why the last exchange cannot be changed now ('' when it can)."""
        reason = self.input_block_reason()
        if reason:
            return reason
        question, answer = self.session.exchange.last_exchange()
        return "" if question is not None or answer is not None else "Nothing to change yet."

    def answer_versions(self):
        """Where the last answer stands among its versions (None without one)."""
        try:
            return self.session.exchange.answer_versions()
        except Exception:  # noqa: BLE001 - a display figure is never worth an error dialog
            return None

    def last_question_text(self) -> str:
        """The words of the last question (for Edit), '' when there is none."""
        try:
            return self.session.exchange.question_text()
        except ConversationError:  # turn_edits.TurnEditError: no question to edit
            return ""

    def regenerate(self) -> bool:
        """Answer the last question again; the answer shown so far becomes a version."""
        if self._change(self.session.exchange.regenerate, "Regenerating"):
            self._answer_again()
            return True
        return False

    def continue_answer(self) -> bool:
        """Let the model go on with the last answer (same turn, same chunking)."""
        if self._change(self.session.resume_answer, "Continuing the answer"):
            self._stop_pending = False
            self.session.answer.clock.start()
            self._start_generation(continuation=True)
            return True
        return False

    def show_answer_version(self, step: int) -> bool:
        """Flip to the previous (``step`` < 0) or next version of the last answer."""
        return self._change(lambda: self.session.exchange.show_version(step), "Showing another version")

    def edit_last(self, text: str) -> bool:
        """Replace the last question by ``text`` and answer it (its answer becomes a version)."""
        text = text.strip()
        if not text or not self._may_change():
            return False
        self._set_busy(True, "Reading your message…")
        self.session.answer.clock.start()
        session = self.session

        def replace(pieces) -> None:
            ids, texts = [int(i) for i, _ in pieces], [t for _, t in pieces]
            self._set_busy(False)
            if self._change(lambda: session.exchange.replace_question(ids, texts), "Saving your edited message"):
                self._answer_again()
            else:
                self.turn_finished.emit("error")

        self._call(lambda: session.tokenize(text), on_ok=replace,
                   on_fail=lambda exc: self._turn_failed_early(exc, "Tokenizing your message"))
        return True

    # ------------------------------------------------------------------ internals
    def _may_change(self) -> bool:
        reason = self.can_change_last_exchange()
        if reason:
            self.info.emit(reason)
            return False
        return True

    def _change(self, act, context: str) -> bool:
        """Run one session change and announce it; on an unexpected failure the file is
        reopened so the view equals it."""
        if not self._may_change():
            return False
        try:
            act()
        except ConversationError as exc:  # turn_edits.TurnEditError: not applicable now
            self.info.emit(str(exc))
            return False
        except Exception as exc:  # noqa: BLE001 - the file is the truth: show it again
            self.error.emit(exc, context)
            if self.path is not None:
                self.open_conversation(self.path)
            return False
        self.conversation_changed.emit()
        self.graveyard_changed.emit()
        self.stats_changed.emit()
        return True

    def _answer_again(self) -> None:
        """Stream a new answer to the question the conversation now ends with."""
        self._stop_pending = False
        if not self.session.answer.clock.running:
            self.session.answer.clock.start()
        self._answer_prefix = ()
        if self.session.fit_model_window():
            self.graveyard_changed.emit()
        self._start_generation()
