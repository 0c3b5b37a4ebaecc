"""The Notes panel: the model's notebook (``notes.json``) of the open conversation.

Read-only: the model changes its notes with jq tool calls
(:mod:`halo_weave.tools.notebook`); the user watches them here.  A dock widget so it can
sit beside the heatmap, float, or close.
"""

from __future__ import annotations

import json

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QDockWidget, QLabel, QPlainTextEdit, QVBoxLayout, QWidget

#: Narrowest the panel gets: a nested JSON line stays readable.
MIN_WIDTH_PX = 300

#: Shown while the conversation has no notes yet.
EMPTY_TEXT = "No notes yet. The model writes them with jq tool calls on notes.json."


class NotesPanel(QDockWidget):
    """Shows one notes document pretty-printed; :meth:`set_notes` replaces it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Notes", parent)
        self.setObjectName("notesPanel")
        self.setAllowedAreas(Qt.DockWidgetArea.LeftDockWidgetArea | Qt.DockWidgetArea.RightDockWidgetArea)
        self.caption = QLabel("The model's notebook (notes.json) — read-only")
        self.caption.setObjectName("notesCaption")
        self.caption.setWordWrap(True)
        self.view = QPlainTextEdit()
        self.view.setReadOnly(True)
        # Long values wrap: a notebook is read top to bottom, not scrolled sideways.
        self.view.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.view.setPlaceholderText(EMPTY_TEXT)
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.caption)
        layout.addWidget(self.view, 1)
        self.setWidget(body)
        self.setMinimumWidth(MIN_WIDTH_PX)

    def set_notes(self, notes: dict | None) -> None:
        """Show ``notes`` (None: the conversation has none yet), keeping the scroll place."""
        text = "" if notes is None else json.dumps(notes, indent=2, ensure_ascii=False)
        if text == self.view.toPlainText():
            return
        bar = self.view.verticalScrollBar()
        at = bar.value()
        self.view.setPlainText(text)
        bar.setValue(min(at, bar.maximum()))
        modified = (notes or {}).get("_metadata", {}) if isinstance(notes, dict) else {}
        stamp = modified.get("last_modified") if isinstance(modified, dict) else None
        self.caption.setText(
            "The model's notebook (notes.json) — read-only"
            + (f"\nLast changed {stamp}" if stamp else "")
        )

    def text(self) -> str:
        """The notes as shown ('' when there are none)."""
        return self.view.toPlainText()
