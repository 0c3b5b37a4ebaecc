"""Settings → Server, "Built-in model": which model the built-in server runs.

The bundled models (:func:`halo_weave.server.bundled.offered`), each saying what it is good
for; one that is not installed is listed greyed out, its tooltip the command that installs
it.  "Open a GGUF file…" adds a file of the user's own.  The value is the server's
``--model`` (``server_model``): ``""`` for the default, a bundled model's name, or a path.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QFileDialog, QHBoxLayout, QPushButton, QWidget

from ..server import bundled


class ModelChoice(QWidget):
    """A combo box of the built-in server's models and a button to open a GGUF file.

    Owns: the combo box (``combo``: its current item's data is the ``server_model``
    value) and the button.
    """

    def __init__(self, current: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.combo = QComboBox()
        self.combo.setObjectName("serverModel")
        offered = bundled.offered()
        self._bundled = len(offered)
        for model in offered:
            label = f"{model.title} — {model.what}" + ("" if model.missing is None else " (not installed)")
            self.combo.addItem(label, model.name)
            row = self.combo.count() - 1
            self.combo.setItemData(row, model.missing or label, Qt.ItemDataRole.ToolTipRole)
            if model.missing is not None:
                self.combo.model().item(row).setEnabled(False)
        self.open_button = QPushButton("Open a GGUF file…")
        self.open_button.setToolTip("Run a GGUF model file of your own on the built-in server")
        self.open_button.clicked.connect(self._open_file)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.combo, 1)
        row.addWidget(self.open_button)
        self.select(current)

    def value(self) -> str:
        return str(self.combo.currentData() or "")

    def select(self, value: str) -> None:
        """Show ``value``: a bundled model by any of its names, or a file (added when new)."""
        value = value.strip()
        name = bundled.canonical(value) if value else ""
        wanted = "" if name == bundled.QWEN else (name if name is not None else value)
        index = self.combo.findData(wanted)
        if index < 0:
            self.combo.addItem(Path(wanted).name, wanted)
            index = self.combo.count() - 1
            self.combo.setItemData(index, wanted, Qt.ItemDataRole.ToolTipRole)
        self.combo.setCurrentIndex(index)

    def _open_file(self) -> None:
        start = self.value() if self.combo.currentIndex() >= self._bundled else str(Path.home())
        path, _ = QFileDialog.getOpenFileName(self, "Open a model", start, "GGUF models (*.gguf);;All files (*)")
        if path:
            self.select(path)
