"""Chat → Presets…: pick a preset (a system prompt with its sampling) for this conversation
and for new ones, save the prompt and sampling in use as a preset, delete one of yours."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ..errors import PresetError
from ..settings import Settings
from ..settings.presets import Preset, PresetBook

#: The list's marker of the preset whose prompt and sampling are the ones in use.
IN_USE = "  ✓ in use"


class PresetDialog(QDialog):
    """The presets of ``book``, one chosen; :meth:`chosen` and the two boxes
    (:attr:`for_conversation`, :attr:`for_new`) after ``exec()``.

    ``prompt`` and ``settings`` are what "Save current as preset…" keeps: the open
    conversation's system prompt (or the default one when none is open) and the sampling.
    """

    def __init__(self, book: PresetBook, prompt: str, settings: Settings, has_conversation: bool = True,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Presets")
        self._book, self._prompt, self._settings = book, prompt, settings
        self.list = QListWidget()
        self.list.setObjectName("presetList")
        self.list.currentRowChanged.connect(self._show_selected)
        self.list.itemDoubleClicked.connect(lambda _: self.accept())
        self.prompt_view = QPlainTextEdit()
        self.prompt_view.setReadOnly(True)
        self.prompt_view.setObjectName("presetPrompt")
        self.sampling_label = QLabel()
        self.sampling_label.setWordWrap(True)
        self.for_conversation = QCheckBox("Use for this conversation (its system prompt)")
        self.for_conversation.setChecked(has_conversation)
        self.for_conversation.setEnabled(has_conversation)
        self.for_new = QCheckBox("Use for new conversations (the default system prompt)")
        self.for_new.setChecked(not has_conversation)
        note = QLabel("Sampling (temperature, top-p, top-k, repetition penalty, answer length) is the "
                      "app's, for every conversation: File → Settings → Generation.")
        note.setWordWrap(True)
        note.setEnabled(False)  # drawn dim: a remark, not a control
        self.status_label = QLabel()
        self.status_label.setWordWrap(True)
        self.status_label.setObjectName("presetStatus")
        self.save_button = QPushButton("Save current as preset…")
        self.save_button.setToolTip("Keep the system prompt and sampling in use now as a preset of yours")
        self.save_button.clicked.connect(lambda: self.save_current())
        self.delete_button = QPushButton("Delete")
        self.delete_button.setToolTip("Delete the selected preset of yours (built-in ones stay)")
        self.delete_button.clicked.connect(self.delete_selected)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Use preset")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        self.ok_button = buttons.button(QDialogButtonBox.StandardButton.Ok)

        side = QVBoxLayout()
        side.addWidget(QLabel("System prompt:"))
        side.addWidget(self.prompt_view, 1)
        side.addWidget(self.sampling_label)
        names = QVBoxLayout()
        names.addWidget(QLabel("Presets:"))
        names.addWidget(self.list, 1)
        row = QHBoxLayout()
        row.addLayout(names, 1)
        row.addLayout(side, 2)
        edits = QHBoxLayout()
        edits.addWidget(self.save_button)
        edits.addWidget(self.delete_button)
        edits.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addLayout(row, 1)
        layout.addWidget(self.for_conversation)
        layout.addWidget(self.for_new)
        layout.addWidget(note)
        layout.addWidget(self.status_label)
        layout.addLayout(edits)
        layout.addWidget(buttons)
        self.resize(760, 440)
        self._fill()
        self._say(book.problem or "", problem=book.problem is not None)

    # ------------------------------------------------------------------ the list
    def _fill(self, select: str | None = None) -> None:
        self.list.clear()
        current = 0
        for row, preset in enumerate(self._book.presets):
            in_use = preset.matches(self._prompt, self._settings)
            label = f"{preset.name}{'  (built in)' if preset.built_in else ''}{IN_USE if in_use else ''}"
            item = QListWidgetItem(label)
            item.setData(Qt.ItemDataRole.UserRole, preset.name)
            item.setToolTip(preset.summary())
            self.list.addItem(item)
            if (select is not None and preset.name == select) or (select is None and in_use):
                current = row
        self.list.setCurrentRow(current)

    def _show_selected(self, row: int) -> None:
        preset = self.chosen()
        self.prompt_view.setPlainText(preset.system_prompt if preset else "")
        self.sampling_label.setText(preset.summary() if preset else "")
        self.delete_button.setEnabled(preset is not None and not preset.built_in)
        self.ok_button.setEnabled(preset is not None)

    def chosen(self) -> Preset | None:
        """The preset selected in the list."""
        item = self.list.currentItem()
        return self._book.find(item.data(Qt.ItemDataRole.UserRole)) if item is not None else None

    def select(self, name: str) -> None:
        """Select the preset called ``name``."""
        self._fill(select=name)

    # ------------------------------------------------------------------ changes
    def save_current(self, name: str | None = None) -> bool:
        """Keep the prompt and sampling in use as a preset called ``name`` (asked for when
        None); the result, or why not, shows under the list."""
        if name is None:
            name, ok = QInputDialog.getText(self, "Save as preset", "Name of the new preset:")
            if not ok:
                return False
        try:
            words = self._book.save(Preset.of(name, self._prompt, self._settings))
        except PresetError as exc:
            self._say(str(exc), problem=True)
            return False
        self._fill(select=name.strip())
        self._say(words)
        return True

    def delete_selected(self) -> bool:
        """Delete the selected preset (one of the user's)."""
        preset = self.chosen()
        if preset is None:
            return False
        try:
            self._book.delete(preset.name)
        except PresetError as exc:
            self._say(str(exc), problem=True)
            return False
        self._fill()
        self._say(f"Preset {preset.name!r} deleted.")
        return True

    def _say(self, text: str, problem: bool = False) -> None:
        self.status_label.setText(text)
        self.status_label.setStyleSheet("color: #e0823d;" if problem else "")
        self.status_label.setVisible(bool(text))


def apply_preset(window, preset: Preset, conversation: bool, new: bool) -> bool:
    """Use ``preset`` in ``window``: its sampling always (the app's), its system prompt for
    the open conversation (``conversation``) and as the default for new ones (``new``).
    False, with a note, while an answer is being written."""
    controller = window.controller
    if controller.gate.busy:
        window.messages.info("Wait for the answer to finish (or press Esc) before changing the preset.")
        return False
    settings = preset.settings(controller.settings)
    if new:
        settings = settings.replace(system_prompt=preset.system_prompt)
    window.apply_settings(settings)
    # A read-only conversation keeps its prompt (set_conversation_prompt says why).
    here = conversation and controller.conv is not None and controller.prompt.set_conversation_prompt(
        preset.system_prompt)
    where = [w for w, on in (("this conversation", here), ("new conversations", new)) if on]
    window.messages.info(f"Preset {preset.name!r}: its sampling is in use"
                         + (f", and its system prompt for {' and '.join(where)}." if where else "."))
    return True
