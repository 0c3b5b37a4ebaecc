"""Under the chat: the message box, and the bar that changes the last exchange
(‹ version › · Continue · Regenerate · Edit; the Chat menu has the same actions)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPlainTextEdit, QToolButton, QWidget


class MessageInput(QPlainTextEdit):
    """The message box: Enter sends, Shift+Enter starts a new line, Esc stops."""

    submitted = Signal()
    stop_requested = Signal()

    def setPlaceholderText(self, text: str) -> None:  # noqa: N802 - Qt API
        # Qt repaints only when the placeholder appears or disappears, so one shown
        # placeholder replaced by another stayed on screen (the busy one after an answer).
        if text != self.placeholderText():
            super().setPlaceholderText(text)
            self.viewport().update()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt API
        key = event.key()
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
            else:
                self.submitted.emit()
            return
        if key == Qt.Key.Key_Escape:
            self.stop_requested.emit()
            return
        super().keyPressEvent(event)


def _button(text: str, tip: str) -> QToolButton:
    button = QToolButton()
    button.setText(text)
    button.setToolTip(tip)
    return button


class AnswerBar(QWidget):
    """‹ version › · Continue · Regenerate · Edit.  Signals: ``version_requested(step)``,
    ``continue_requested()``, ``regenerate_requested()``, ``edit_requested()``."""

    version_requested = Signal(int)
    continue_requested = Signal()
    regenerate_requested = Signal()
    edit_requested = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("answerBar")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 2, 0, 2)
        self.previous_version_button = _button("‹", "Previous version of the answer (Alt+Left)")
        self.version_label = QLabel()
        self.version_label.setToolTip("Versions of the last answer (Regenerate keeps every one)")
        self.next_version_button = _button("›", "Next version of the answer (Alt+Right)")
        self.continue_button = _button("→ Continue", "Let the model go on with its last answer (Ctrl+Shift+Enter)")
        self.regenerate_button = _button(
            "↻ Regenerate", "Answer your last message again; this answer stays as a version (Ctrl+R)")
        self.edit_button = _button("✎ Edit", "Change your last message and send it again (Ctrl+Up)")
        layout.addStretch(1)
        for widget in (self.previous_version_button, self.version_label, self.next_version_button):
            layout.addWidget(widget)
        layout.addSpacing(12)
        for widget in (self.continue_button, self.regenerate_button, self.edit_button):
            layout.addWidget(widget)
        self.previous_version_button.clicked.connect(lambda: self.version_requested.emit(-1))
        self.next_version_button.clicked.connect(lambda: self.version_requested.emit(1))
        self.continue_button.clicked.connect(self.continue_requested)
        self.regenerate_button.clicked.connect(self.regenerate_requested)
        self.edit_button.clicked.connect(self.edit_requested)

    def sync(self, enabled: dict[str, bool], versions: str) -> None:
        """Enable each button by name (``continue``, ``regenerate``, ``edit``,
        ``previous``, ``next``); ``versions`` ("2 / 3", or "" to hide the versions)."""
        for name, widget in (("continue", self.continue_button), ("regenerate", self.regenerate_button),
                             ("edit", self.edit_button), ("previous", self.previous_version_button),
                             ("next", self.next_version_button)):
            widget.setEnabled(enabled[name])
        for widget in (self.previous_version_button, self.version_label, self.next_version_button):
            widget.setVisible(bool(versions))
        self.version_label.setText(versions)
