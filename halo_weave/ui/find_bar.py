"""The find bar over the chat (Ctrl+F): words to find, where they are, and the pruned
paragraphs that hold them, offered to bring back.

Enter or F3 goes to the next match, Shift+Enter or Shift+F3 to the previous one, Esc
closes the bar.  The matches are the heatmap's :class:`~.heatmap_find.TextSearch`; the
bar only shows them and forwards intent: ``resurrect_requested(chunk_id)`` (bring a
pruned paragraph back; the bar then goes to it once it is shown) and
``graveyard_requested(words)`` (list them in the graveyard, filtered by the words).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QMenu, QToolButton, QWidget

from .chunk_words import message_numbers, chunk_title
from .graveyard_model import chunk_preview
from .heatmap_find import MAX_MATCHES

#: Milliseconds the search waits for typing to pause.
FIND_DELAY_MS = 150
#: Pruned paragraphs listed in the menu of the graveyard button (the graveyard lists all).
MENU_ROWS = 12


class _FindEdit(QLineEdit):
    """The words: Enter / Shift+Enter step, Esc closes (before the window's Esc = Stop)."""

    step = Signal(int)
    closed = Signal()

    def event(self, event: QEvent) -> bool:
        # The window's shortcuts (Esc stops an answer, Enter sends) must not take these keys.
        if event.type() == QEvent.Type.ShortcutOverride and event.key() in (
                Qt.Key.Key_Escape, Qt.Key.Key_Return, Qt.Key.Key_Enter):
            event.accept()
            return True
        return super().event(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            self.step.emit(-1 if event.modifiers() & Qt.KeyboardModifier.ShiftModifier else 1)
        elif event.key() == Qt.Key.Key_Escape:
            self.closed.emit()
        else:
            super().keyPressEvent(event)


class FindBar(QWidget):
    """See the module docstring.  ``open()`` shows it with the words selected; ``step(±1)``;
    ``refresh()`` after the conversation changed.  Widgets: ``edit``, ``count_label``,
    ``previous_button``, ``next_button``, ``pruned_button``, ``close_button``."""

    resurrect_requested = Signal(int)
    graveyard_requested = Signal(str)

    def __init__(self, heatmap, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("findBar")
        self._heatmap = heatmap
        self._bring_to: int | None = None  # a chunk asked back: go to it once it is shown
        self.edit = _FindEdit()
        self.edit.setPlaceholderText("Find in the chat")
        self.edit.setClearButtonEnabled(True)
        self.edit.setToolTip("Words to find in the chat, pruned paragraphs included "
                             "(Enter: next, Shift+Enter: previous, Esc: close)")
        self.count_label = QLabel()
        self.count_label.setObjectName("findCount")
        self.previous_button = self._button("‹", "Previous match (Shift+Enter, Shift+F3)", lambda: self.step(-1))
        self.next_button = self._button("›", "Next match (Enter, F3)", lambda: self.step(1))
        self.pruned_button = QToolButton()
        self.pruned_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.pruned_button.setToolTip("Pruned paragraphs that hold the words: the model no longer reads "
                                      "them; bring one back into the context")
        self.pruned_button.hide()
        self.close_button = self._button("×", "Close (Esc)", self.close_bar)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(FIND_DELAY_MS)
        self._timer.timeout.connect(self._search)
        self.edit.textChanged.connect(lambda _: self._timer.start())
        self.edit.step.connect(self.step)
        self.edit.closed.connect(self.close_bar)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 4)
        row.addWidget(self.edit, 1)
        for widget in (self.count_label, self.previous_button, self.next_button, self.pruned_button,
                       self.close_button):
            row.addWidget(widget)
        self.hide()
        self._show_counts()

    def _button(self, text: str, tip: str, slot) -> QToolButton:
        button = QToolButton()
        button.setText(text)
        button.setToolTip(tip)
        button.setAutoRaise(True)
        button.clicked.connect(slot)
        return button

    # ------------------------------------------------------------------ intent
    def open(self) -> None:
        """Show the bar, the words selected to type over."""
        self.show()
        self.edit.setFocus()
        self.edit.selectAll()

    def close_bar(self) -> None:
        """Hide the bar and its outlines; the heatmap gets the focus back."""
        self._timer.stop()
        self._heatmap.search.set_query("")
        self.hide()
        self._heatmap.setFocus()

    def step(self, direction: int) -> None:
        """Go to the next (+1) or previous (-1) match (F3 with the bar closed opens it)."""
        if not self.isVisible():
            self.open()
            return
        if self._timer.isActive():  # the words just typed first
            self._timer.stop()
            self._search()
        if not self._heatmap.search.step(direction) and self._heatmap.search.pruned:
            self.pruned_button.showMenu()  # only pruned paragraphs hold the words
        self._show_counts()

    def refresh(self) -> None:
        """The conversation changed: count again, and go to a paragraph just brought back."""
        if not self.isVisible() or not self.edit.text().strip():
            return
        search = self._heatmap.search
        search.refresh()  # the heatmap found again on its rebuild; a prune elsewhere too
        if self._bring_to is not None and search.go_to_chunk(self._bring_to):
            self._bring_to = None
        self._show_counts()

    # ------------------------------------------------------------------ showing
    def _search(self) -> None:
        search = self._heatmap.search
        search.set_query(self.edit.text())
        if search.matches:
            search.show_current()
        self._show_counts()

    def _show_counts(self) -> None:
        search = self._heatmap.search
        found, words = len(search.matches), self.edit.text().strip()
        if not words:
            text = ""
        elif not found:
            text = "not in the chat shown"
        else:
            total = f"{found:,}+" if found >= MAX_MATCHES else f"{found:,}"
            text = f"{search.current + 1:,} of {total}" if search.current >= 0 else f"{total} found"
        self.count_label.setText(text)
        self.previous_button.setEnabled(found > 0)
        self.next_button.setEnabled(found > 0)
        pruned = search.pruned if words else []
        self.pruned_button.setVisible(bool(pruned))
        if pruned:
            count = len(pruned)
            self.pruned_button.setText(f"+ {count:,} pruned paragraph{'s' if count != 1 else ''}…")
            self.pruned_button.setMenu(self._pruned_menu(pruned, words))

    def _pruned_menu(self, pruned: list[int], words: str) -> QMenu:
        menu = QMenu(self)
        conv = self._heatmap.conversation()
        numbers = message_numbers(conv)
        head = menu.addAction("Bring back into the context (pinned):")
        head.setEnabled(False)
        for chunk_id in pruned[:MENU_ROWS]:
            chunk = conv.chunks[chunk_id]
            title = chunk_title(numbers.get(chunk.turn_id), chunk.role, chunk.chunk_index, chunk.tool_result)
            preview = chunk_preview(conv, chunk_id)
            action = menu.addAction(f"{title} — {preview[:60]}{'…' if len(preview) > 60 else ''}")
            action.setToolTip(preview)
            action.triggered.connect(lambda _=False, c=chunk_id: self._bring_back(c))
        menu.addSeparator()
        every = menu.addAction(f"Show all {len(pruned):,} in the graveyard")
        every.triggered.connect(lambda: self.graveyard_requested.emit(words))
        return menu

    def _bring_back(self, chunk_id: int) -> None:
        self._bring_to = chunk_id
        self.resurrect_requested.emit(chunk_id)
