"""What the controller announces to the window: one object holding every signal.

The collaborators of :mod:`halo_weave.ui.control` emit here; the window (and tests)
connect here (``controller.signals.turn_finished.connect(...)``).  QtCore only.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal


class ControlSignals(QObject):
    """The controller's announcements.  Owns nothing but the signals below."""

    conversation_changed = Signal()  # structure changed: rebuild the view
    tokens_streamed = Signal()  # tokens appended to the open answer
    graveyard_changed = Signal()
    stats_changed = Signal()
    busy_changed = Signal(bool, str)  # busy, the reason shown next to the input
    connection_changed = Signal(str, str)  # state, detail (model name, what is happening)
    models_changed = Signal(list, str)  # the server's models (where it lists them), the one in use
    template_changed = Signal(str)  # which chat template frames the turns, and where it came from
    attention_changed = Signal(bool)
    progress = Signal(str, int, int)  # what, done, total (total 0 = indeterminate; done>=total = finished)
    error = Signal(object, str)  # exception, what we were doing
    info = Signal(str)
    turn_finished = Signal(str)  # finish reason ("stop", "length", "aborted", "error")
    conversation_opened = Signal(str)  # path of the conversation file
    notes_changed = Signal()  # the model's notes were saved (or another conversation opened)
    capture_saved = Signal(str)  # folder of a finished attention recording
    message_returned = Signal(str)  # a message that could not be sent, back to the input box
    warm_up_changed = Signal(int)  # tokens of the context the server is reading (0: done)
    turn_phase = Signal(str, str)  # the message not shown yet ("" once it is), what the turn waits for

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.turn_finished.connect(lambda _reason: self.turn_phase.emit("", ""))
