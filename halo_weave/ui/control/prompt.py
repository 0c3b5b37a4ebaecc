"""The open conversation's system prompt, kept in step with the settings.

QtCore only: the tokenizing runs on a thread (:class:`~.calls.Calls`).
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from .calls import Calls
from .gate import Gate
from .signals import ControlSignals


class PromptUpkeep(QObject):
    """Frames the system prompt of the open conversation (the settings' for new ones,
    its own where it has one) and lets the user give a conversation its own.

    Owns: how many tokenizations are in flight (:attr:`syncing`), whether the settings
    changed it during a turn (synced when the turn ends), and whether it was edited
    while this conversation was open (:attr:`edited`).

    Signals: ``synced()`` when a sync ended (set or failed): the server may read the
    context now.
    """

    synced = Signal()

    def __init__(self, session, signals: ControlSignals, gate: Gate, calls: Calls,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._session, self._signals, self._gate, self._calls = session, signals, gate, calls
        self._syncing = 0  # tokenizations in flight
        self._dirty = False  # the settings changed it during a turn
        self._edited = False

    @property
    def syncing(self) -> bool:
        """A new system prompt is being tokenized (input waits for it)."""
        return self._syncing > 0

    @property
    def edited(self) -> bool:
        """The prompt changed while this conversation was open (the file is the user's then)."""
        return self._edited

    def opened(self) -> None:
        """Another conversation opened: nothing of it has been edited yet."""
        self._edited = False

    def settings_changed(self, changed: bool) -> None:
        """The settings' prompt changed (``changed``): it counts as an edit of the open one."""
        self._edited |= changed

    def sync(self) -> None:
        """Make the conversation's system prefix match the settings (tokenized on a thread).

        Input waits while this runs, and it never runs during a turn (the prefix is part
        of the context the streamed attention covers).
        """
        session = self._session
        conv, client = session.conv, session.backend
        if conv is None or client is None:
            return
        if self._gate.busy:
            self._dirty = True
            return
        prompt = session.prompt.effective()
        if session.prompt.framed_text() is None:
            return

        def tokenize():
            return session.prompt.pieces(prompt)

        def ok(pieces) -> None:
            self._syncing -= 1
            if session.conv is conv:
                session.prompt.apply(prompt, pieces)
                self._signals.conversation_changed.emit()
                self._signals.stats_changed.emit()
            self._gate.refresh()
            self.synced.emit()  # the context starts with the prompt: warmed once it is set

        def fail(exc) -> None:
            self._syncing -= 1
            self._signals.error.emit(exc, "System prompt")
            self._gate.refresh()
            self.synced.emit()

        self._syncing += 1
        self._gate.refresh()
        self._calls.run(tokenize, on_ok=ok, on_fail=fail)

    def sync_after_turn(self) -> None:
        """The turn ended: apply a change the settings made during it."""
        if self._dirty:
            self._dirty = False
            self.sync()

    def set_conversation_prompt(self, prompt: str) -> bool:
        """Give the open conversation a system prompt of its own (kept in its file; the
        model reads it from the next message on).  False when it cannot change now."""
        session = self._session
        if session.conv is None or session.store is None:
            return False
        if self._gate.busy:
            self._signals.info.emit("Wait for the answer to finish (or press Esc) before changing the system prompt.")
            return False
        if getattr(session.store, "read_only", False):
            self._signals.info.emit("This conversation is read-only: its system prompt cannot change.")
            return False
        if prompt == session.prompt.own():
            return True
        session.prompt.set_own(prompt)
        self._edited = True
        self.sync()
        return True
