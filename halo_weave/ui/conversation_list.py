"""The conversation list beside the chat: search, last used first, the open one highlighted.

Displays :class:`~halo_weave.storage.library.Library` entries and forwards intent:
``open_requested(path)``, ``new_requested()``, ``delete_requested(path, title)`` (the
window decides, since the open conversation must be closed first).  Renaming is the
library's alone (a title in the file), so the list does it itself and refreshes.
After a delete the window calls :meth:`ConversationList.offer_undo`; the Undo bar stays
until the next delete or :data:`UNDO_SECONDS`.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QPoint, Qt, QTimer, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QHBoxLayout, QInputDialog, QLabel, QLineEdit, QListWidget, QListWidgetItem, QMenu, QPushButton,
    QToolButton, QVBoxLayout, QWidget,
)

from ..storage.library import Entry, Library, Trashed

PATH_ROLE = Qt.ItemDataRole.UserRole
#: Milliseconds the search waits after the last keystroke.
SEARCH_DELAY_MS = 250
#: How long "Undo" stays offered after a delete.
UNDO_SECONDS = 30


#: The Rename dialog is at least this wide, and wider for a long title (up to 900 px).
RENAME_MIN_WIDTH_PX = 420

def when(stamp: float, now: float | None = None) -> str:
    """"14:32" today, "Mon 14:32" this week, else the date."""
    now = time.time() if now is None else now
    local, today = time.localtime(stamp), time.localtime(now)
    if (local.tm_year, local.tm_yday) == (today.tm_year, today.tm_yday):
        return time.strftime("%H:%M", local)
    if now - stamp < 6 * 86400:
        return time.strftime("%a %H:%M", local)
    return time.strftime("%d %b %Y", local)


class ConversationList(QWidget):
    """See the module docstring.  ``refresh()`` re-reads the data directory."""

    open_requested = Signal(Path)
    new_requested = Signal()
    delete_requested = Signal(Path, str)

    def __init__(self, library: Library, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("conversationList")
        self.library = library
        self._current: Path | None = None
        self._trashed: Trashed | None = None
        self._requested: Path | None = None  # asked to open, not open yet (click + activate)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search…")
        self.search.setToolTip("Find conversations by title or by any text in them")
        self.search.setClearButtonEnabled(True)
        self.new_button = QToolButton()
        self.new_button.setText("+ New")
        self.new_button.setToolTip("Start a new conversation (Ctrl+N)")
        self.new_button.clicked.connect(self.new_requested)
        self.list = QListWidget()
        # Long titles are elided, never scrolled sideways; the column keeps a usable width.
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.setMinimumWidth(self.fontMetrics().averageCharWidth() * 26)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._menu_at)
        self.list.itemActivated.connect(self._activate)
        self.list.itemClicked.connect(self._activate)
        self.empty_label = QLabel("No conversations match.")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.hide()
        self.undo_label = QLabel()
        self.undo_label.setWordWrap(True)
        self.undo_button = QPushButton("Undo")
        self.undo_button.setToolTip("Bring the deleted conversation back")
        self.undo_button.clicked.connect(self.undo_delete)
        undo_row = QWidget()
        undo_row.setObjectName("undoBar")
        row = QHBoxLayout(undo_row)
        row.setContentsMargins(4, 2, 4, 2)
        row.addWidget(self.undo_label, 1)
        row.addWidget(self.undo_button)
        self.undo_bar = undo_row
        self.undo_bar.hide()
        self._undo_timer = QTimer(self)
        self._undo_timer.setSingleShot(True)
        self._undo_timer.setInterval(UNDO_SECONDS * 1000)
        self._undo_timer.timeout.connect(self._forget_undo)
        self._search_timer = QTimer(self)
        self._search_timer.setSingleShot(True)
        self._search_timer.setInterval(SEARCH_DELAY_MS)
        self._search_timer.timeout.connect(self.refresh)
        self.search.textChanged.connect(lambda _: self._search_timer.start())

        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.search, 1)
        top.addWidget(self.new_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.empty_label)
        layout.addWidget(self.undo_bar)

    # ------------------------------------------------------------------ public API
    def set_current(self, path: Path | None) -> None:
        """Highlight the open conversation (and list it first when it is new)."""
        self._current = Path(path) if path else None
        self._requested = None
        self.refresh()

    def refresh(self) -> None:
        """Re-read the conversations, keeping the search."""
        self._search_timer.stop()
        try:
            entries = self.library.entries(self.search.text())
        except OSError:
            entries = []
        self.list.clear()
        for entry in entries:
            self.list.addItem(self._item(entry))
        row = self.current_row()
        if row >= 0:
            self.list.setCurrentRow(row)
        self.empty_label.setVisible(not entries and bool(self.search.text().strip()))

    def titles(self) -> list[str]:
        """The titles shown, top to bottom."""
        return [self.list.item(i).data(Qt.ItemDataRole.UserRole + 1) for i in range(self.list.count())]

    def current_row(self) -> int:
        """Row of the highlighted (open) conversation, -1 when not listed."""
        for i in range(self.list.count()):
            if self._is_current(Path(self.list.item(i).data(PATH_ROLE))):
                return i
        return -1

    def rename(self, path: Path, title: str) -> None:
        """Give a conversation a title (empty: back to its first message)."""
        self.library.rename(path, title)
        self.refresh()

    def offer_undo(self, trashed: Trashed) -> None:
        """A conversation was deleted: offer to bring it back."""
        self._trashed = trashed
        self.undo_label.setText(f"Deleted “{trashed.title}”")
        self.undo_bar.show()
        self._undo_timer.start()
        self.refresh()

    def undo_delete(self) -> Path | None:
        """Restore the last deleted conversation (it is listed again)."""
        item, self._trashed = self._trashed, None
        self._forget_undo()
        if item is None:
            return None
        try:
            path = self.library.restore(item)
        except OSError as exc:
            self.undo_label.setText(str(exc))
            self.undo_bar.show()
            return None
        self.refresh()
        return path

    # ------------------------------------------------------------------ internals
    def _is_current(self, path: Path) -> bool:
        return self._current is not None and path == self._current

    def _item(self, entry: Entry) -> QListWidgetItem:
        # Every branch's turns: the entry reads the same whichever branch is shown.
        detail = f"{when(entry.updated_at)} · {entry.turn_count} turns"
        if entry.stashed_branches:
            detail += f" · {entry.stashed_branches + 1} branches"
        if entry.error:
            detail = f"⚠ {entry.error}"
        item = QListWidgetItem(f"{entry.title}\n{detail}")
        item.setData(PATH_ROLE, str(entry.path))
        item.setData(Qt.ItemDataRole.UserRole + 1, entry.title)
        item.setToolTip(f"{entry.title}\n{detail}\n{entry.path}")
        if self._is_current(entry.path):
            font = QFont(item.font())
            font.setBold(True)
            item.setFont(font)
        return item

    def _activate(self, item: QListWidgetItem) -> None:
        path = Path(item.data(PATH_ROLE))
        if not self._is_current(path) and path != self._requested:
            self._requested = path
            self.open_requested.emit(path)

    def _menu_at(self, point: QPoint) -> None:
        item = self.list.itemAt(point)
        if item is None:
            return
        menu = self.menu_for(item)
        menu.exec(self.list.viewport().mapToGlobal(point))
        menu.deleteLater()

    def menu_for(self, item: QListWidgetItem) -> QMenu:
        """The context menu of a row: Open, Rename…, Delete."""
        path, title = Path(item.data(PATH_ROLE)), item.data(Qt.ItemDataRole.UserRole + 1)
        menu = QMenu(self)
        menu.addAction("Open").triggered.connect(lambda: self.open_requested.emit(path))
        menu.addAction("Rename…").triggered.connect(lambda: self._ask_rename(path, title))
        menu.addSeparator()
        menu.addAction("Delete").triggered.connect(lambda: self.delete_requested.emit(path, title))
        return menu

    def rename_dialog(self, title: str) -> QInputDialog:
        """The Rename dialog, wide enough for a long title (Qt's default cut the field)."""
        dialog = QInputDialog(self)
        dialog.setWindowTitle("Rename conversation")
        dialog.setLabelText("Title (empty: its first message):")
        dialog.setTextEchoMode(QLineEdit.EchoMode.Normal)
        dialog.setTextValue(title)
        metrics = dialog.fontMetrics()
        dialog.resize(max(RENAME_MIN_WIDTH_PX, min(metrics.horizontalAdvance(title) + 80, 900)),
                      dialog.sizeHint().height())
        return dialog

    def _ask_rename(self, path: Path, title: str) -> None:
        dialog = self.rename_dialog(title)
        if dialog.exec() == QInputDialog.DialogCode.Accepted:
            self.rename(path, dialog.textValue())

    def _forget_undo(self) -> None:
        self._undo_timer.stop()
        self.undo_bar.hide()
