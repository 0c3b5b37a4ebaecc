"""Whether the user may act now: busy (and why), quitting, and why input is closed.

QtCore only.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from .signals import ControlSignals


class Gate(QObject):
    """Busy or free, and the sentence the window shows when input is closed.

    Owns: :attr:`busy`, :attr:`busy_reason`, :attr:`closing` (quitting: no new work
    starts).  Reads the connection state, the system prompt's sync and the open
    conversation through the ``blocked_by`` callable given to it, which returns the
    reason input is closed when nothing is busy ('' when it is open).

    Signals: ``became_free()`` after ``busy_changed(False, …)`` was announced.
    """

    became_free = Signal()

    def __init__(self, signals: ControlSignals, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._signals = signals
        self._blocked_by = lambda: ""
        self.busy = False
        self.busy_reason = ""
        self.closing = False

    def consult(self, blocked_by) -> None:
        """Ask ``blocked_by()`` why input is closed while nothing is busy."""
        self._blocked_by = blocked_by

    def input_block_reason(self) -> str:
        """Why the user cannot send now ('' when they can)."""
        return self.busy_reason if self.busy else self._blocked_by()

    def set_busy(self, busy: bool, reason: str = "") -> None:
        """Busy with ``reason`` (shown next to the input), or free; announced either way."""
        self.busy = busy
        self.busy_reason = reason if busy else ""
        self._signals.busy_changed.emit(busy, self.busy_reason if busy else self.input_block_reason())
        if not busy:
            self.became_free.emit()  # work asked for while busy (a warm-up) may start now

    def refresh(self) -> None:
        """Announce the state again (what closes input changed)."""
        self.set_busy(self.busy, self.busy_reason)

    def announce_free(self) -> None:
        """Tell the window why input is closed (the connection changed) when not busy."""
        if not self.busy:
            self._signals.busy_changed.emit(False, self.input_block_reason())

    def close(self) -> None:
        """Quitting: no new work starts from now on."""
        self.closing = True
