"""Continue, Regenerate, Edit and resend, answer versions, and editing or regenerating
any earlier message with branches: *when*, for the controller.

The rules are methods of
:class:`~halo_weave.session.ChatSession` (each change one transaction of
:mod:`halo_weave.storage.turn_edits`, or of :mod:`halo_weave.storage.branches` through
``session.branches``); this checks that the user may change the conversation now,
tokenizes an edited message on a thread, announces the change and streams the new
tokens with the same rounds as any answer.
"""

from __future__ import annotations

from ...errors import ConversationError
from .ahead import ReadAhead
from .calls import Calls
from .files import ConversationFiles
from .gate import Gate
from .message import MessageSend
from .signals import ControlSignals
from .turn import TurnFlow


class TurnActions:
    """Intents on the last exchange and on any earlier message; each returns False (or
    None) with a message when refused.

    Owns nothing: it changes the session, then the turn streams the new answer; after
    an unexpected failure the conversation is reopened from its file.  A change that
    shows other text without an answer (a branch switched, a version flipped) has the
    server's cache warmed for it (``ahead.warm_up``), so that the cache the server saves,
    and the next start reads back, is the one of what is shown.
    """

    def __init__(self, session, signals: ControlSignals, gate: Gate, calls: Calls, turn: TurnFlow,
                 message: MessageSend, files: ConversationFiles, ahead: ReadAhead) -> None:
        self._session, self._signals, self._gate, self._calls = session, signals, gate, calls
        self._turn, self._message, self._files, self._ahead = turn, message, files, ahead

    def can_change_last_exchange(self) -> str:
        """Why the last exchange cannot be changed now ('' when it can)."""
        reason = self._gate.input_block_reason()
        if reason:
            return reason
        question, answer = self._session.exchange.last_exchange()
        return "" if question is not None or answer is not None else "Nothing to change yet."

    def answer_versions(self):
        """Where the last answer stands among its versions (None without one)."""
        try:
            return self._session.exchange.answer_versions()
        except Exception:  # noqa: BLE001 - a display figure is never worth an error dialog
            return None

    def last_question_text(self) -> str:
        """The words of the last question (for Edit), '' when there is none."""
        try:
            return self._session.exchange.question_text()
        except ConversationError:  # turn_edits.TurnEditError: no question to edit
            return ""

    def regenerate(self) -> bool:
        """Answer the last question again; the answer shown so far becomes a version."""
        if self._change(self._session.exchange.regenerate, "Regenerating"):
            self._turn.answer_again()
            return True
        return False

    def continue_answer(self) -> bool:
        """Let the model go on with the last answer (same turn, same chunking)."""
        if self._change(self._session.resume_answer, "Continuing the answer"):
            self._turn.go_on()
            return True
        return False

    def show_answer_version(self, step: int) -> bool:
        """Flip to the previous (``step`` < 0) or next version of the last answer."""
        if self._change(lambda: self._session.exchange.show_version(step), "Showing another version"):
            self._ahead.warm_up()
            return True
        return False

    def edit_last(self, text: str) -> bool:
        """Replace the last question by ``text`` and answer it (its answer becomes a version)."""
        return self._resend(text, self._session.exchange.replace_question)

    # ------------------------------------------------------------------ any message: branches
    def branch_marks(self) -> dict[int, tuple[int, int]]:
        """Turn id -> (number, count) of each message where branches part ("‹ 2 / 3 ›")."""
        try:
            return {turn_id: (s.number, s.count) for turn_id, s in self._session.branches.states().items()}
        except Exception:  # noqa: BLE001 - a display figure is never worth an error dialog
            return {}

    def message_text(self, turn_id: int) -> str:
        """The words of a message (to edit them), '' when it is not shown."""
        try:
            return self._session.branches.message_text(turn_id)
        except ConversationError:
            return ""

    def edit_message(self, turn_id: int, text: str) -> bool:
        """Send ``text`` in place of the message ``turn_id`` and answer it: the last question
        is edited and resent (its answer becomes a version), an earlier one starts a new
        branch there (the old branch is kept)."""
        branches = self._session.branches
        if branches.is_last_exchange(turn_id):
            return self.edit_last(text)
        return self._resend(text, lambda ids, texts: branches.edit_message(turn_id, ids, texts))

    def regenerate_answer(self, turn_id: int) -> bool:
        """Answer again: the last answer becomes a version; an earlier one starts a new
        branch there (the old branch is kept)."""
        branches = self._session.branches
        if branches.is_last_exchange(turn_id):
            return self.regenerate()
        if self._change(lambda: branches.regenerate_answer(turn_id), "Regenerating"):
            self._turn.answer_again()
            return True
        return False

    def switch_branch(self, turn_id: int, step: int) -> int | None:
        """Show the previous (``step`` < 0) or next branch where the branch shown from
        ``turn_id`` parts; returns the first message of the branch now shown (None when
        refused)."""
        shown: list[int] = []
        if self._change(lambda: shown.append(self._session.branches.switch(turn_id, step)), "Switching branches"):
            self._ahead.warm_up()
            return shown[0]
        return None

    # ------------------------------------------------------------------ internals
    def _resend(self, text: str, replace_with) -> bool:
        """Tokenize ``text`` on a thread, ``replace_with(ids, texts)`` (one session change),
        then answer it."""
        text = text.strip()
        if not text or not self._may_change():
            return False
        self._gate.set_busy(True, "Reading your message…")
        self._session.answer.clock.start()
        session = self._session

        def replace(pieces) -> None:
            ids, texts = [int(i) for i, _ in pieces], [t for _, t in pieces]
            self._gate.set_busy(False)
            if self._change(lambda: replace_with(ids, texts), "Saving your edited message"):
                self._turn.answer_again()
            else:
                self._signals.turn_finished.emit("error")

        self._calls.run(lambda: session.server.tokenize(text), on_ok=replace,
                        on_fail=lambda exc: self._message.failed_early(exc, "Tokenizing your message"))
        return True

    def _may_change(self) -> bool:
        reason = self.can_change_last_exchange()
        if reason:
            self._signals.info.emit(reason)
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
            self._signals.info.emit(str(exc))
            return False
        except Exception as exc:  # noqa: BLE001 - the file is the truth: show it again
            self._signals.error.emit(exc, context)
            if self._files.path is not None:
                self._files.open_conversation(self._files.path)
            return False
        self._signals.conversation_changed.emit()
        self._signals.graveyard_changed.emit()
        self._signals.stats_changed.emit()
        return True
