"""The message just sent, and what its answer waits for, under the chat.

From Enter until the answer's first token the window shows the user's message at once
(it joins the heatmap once it is saved, DB-first) and a quiet line saying what the turn
waits for: "searching memory…", "reading 1,234 tokens…" (the server reading the prompt).
The controller's ``turn_phase(message, line)`` drives it; both empty hide it.
"""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from .elided import ElidedLabel


class PendingTurn(QWidget):
    """The sent message not in the heatmap yet, and the turn's quiet waiting line."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.message = ElidedLabel()
        self.message.setObjectName("pendingMessage")
        self.line = QLabel()
        self.line.setObjectName("pendingLine")
        self.line.setStyleSheet("color: palette(placeholder-text); font-style: italic;")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 0, 4, 0)
        layout.setSpacing(0)
        layout.addWidget(self.message)
        layout.addWidget(self.line)
        self.show_phase("", "")

    def show_phase(self, message: str, line: str) -> None:
        """Show ``message`` (the user's, not shown elsewhere yet; "" for none) and ``line``."""
        first = message.strip().splitlines()[0] if message.strip() else ""
        self.message.setText(f"You: {first}" if first else "")
        self.message.setVisible(bool(first))
        self.line.setText(line)
        self.line.setVisible(bool(line))
        self.setVisible(bool(first or line))
