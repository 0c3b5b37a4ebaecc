"""The File → Open dialog: the conversations in the data directory, newest first."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog, QDialogButtonBox, QFileDialog, QLabel, QListWidget, QListWidgetItem, QVBoxLayout,
)

PATH_ROLE = Qt.ItemDataRole.UserRole


def _when(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp))


class ConversationPicker(QDialog):
    """Lists the conversation files; :meth:`selected_path` is the one chosen."""

    def __init__(self, data_dir: Path, current: Path | None = None, parent=None) -> None:
        super().__init__(parent)
        from ..store import list_conversations

        self.setWindowTitle("Open conversation")
        self.resize(560, 420)
        self._chosen: Path | None = None
        self.list = QListWidget(self)
        self.list.setAlternatingRowColors(True)
        summaries = list_conversations(data_dir)
        for summary in summaries:
            label = f"{summary.title}\n{_when(summary.updated_at)} · {summary.turn_count} turns · {summary.token_count} tokens"
            if summary.error:
                label = f"{summary.path.name}\n⚠ {summary.error}"
            if current is not None and Path(summary.path) == Path(current):
                label += "  (open now)"
            item = QListWidgetItem(label)
            item.setData(PATH_ROLE, str(summary.path))
            item.setToolTip(str(summary.path))
            self.list.addItem(item)
        if self.list.count():
            self.list.setCurrentRow(0)
        self.list.itemActivated.connect(lambda _: self.accept())
        self.list.itemDoubleClicked.connect(lambda _: self.accept())
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Cancel)
        browse = buttons.addButton("Other file…", QDialogButtonBox.ButtonRole.ActionRole)
        browse.clicked.connect(self._browse)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        hint = "No conversations yet." if not summaries else f"{len(summaries)} conversations in {data_dir}"
        layout.addWidget(QLabel(hint, self))
        layout.addWidget(self.list)
        layout.addWidget(buttons)

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open conversation file", "", "Halo Weave conversations (*.db);;All files (*)")
        if path:
            self._chosen = Path(path)
            super().accept()

    def accept(self) -> None:
        item = self.list.currentItem()
        if self._chosen is None and item is not None:
            self._chosen = Path(item.data(PATH_ROLE))
        super().accept()

    def selected_path(self) -> Path | None:
        return self._chosen
