"""The settings dialog's "What decides pruning" page.

Built from :data:`halo_weave.settings.PRUNING_FIELDS` and :data:`~halo_weave.settings.CHOICES`:
a rule another module declares there appears here without an edit.  Each choice's
explanation is its tooltip and is shown under its combo box, a numeric setting's under
its box; a numeric setting (the half-life, k) is enabled only while a chosen value uses it.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QFormLayout, QFrame, QGroupBox, QLabel, QScrollArea, QVBoxLayout, QWidget

from ..settings import CHOICES, PRUNING_FIELDS, Settings, choice

#: When each kind of change takes effect (shown on the page, so the UI says it plainly).
WHEN_IT_APPLIES = (
    "OK applies these to the open conversation, no restart. A new brightness rule counts from "
    "the next generated token: every word keeps the brightness it earned so far as its starting "
    "point (the attention behind it is not stored, so it cannot be recomputed). The paragraph "
    "score and the pruning order apply at once, to the heatmap's colours and the next prune; "
    "where new text starts, from the next message."
)


def explanation_label() -> QLabel:
    label = QLabel()
    label.setWordWrap(True)
    label.setStyleSheet("color: #8c8c91;")
    return label


class PruningPage(QWidget):
    """The page; its editors are registered in the dialog's ``editors`` by field name.

    ``explanations[field]`` is the label under each editor (a combo box's: the chosen
    value in words).
    """

    def __init__(self, dialog, settings: Settings) -> None:
        super().__init__()
        self._dialog = dialog
        self.explanations: dict[str, QLabel] = {}
        group = QGroupBox("What decides pruning")
        form = QFormLayout(group)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        for name, label, tip in PRUNING_FIELDS:
            words = self.explanations[name] = explanation_label()
            editor = dialog.editor(name, settings.value(name))
            field = QWidget()  # the editor with its explanation right below it
            column = QVBoxLayout(field)
            column.setContentsMargins(0, 0, 0, 6)
            column.setSpacing(2)
            column.addWidget(editor)
            column.addWidget(words)
            form.addRow(label, field)
            if name in CHOICES:
                editor.currentIndexChanged.connect(self._sync)
            else:
                words.setText(tip)
                editor.setToolTip(tip)
        note = explanation_label()
        note.setText(WHEN_IT_APPLIES)
        note.setObjectName("whenItApplies")
        # Scrolled: the wrapped explanations take their whole height however short the dialog.
        inner = QWidget()
        column = QVBoxLayout(inner)
        column.addWidget(group)
        column.addWidget(note)
        column.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(inner)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(scroll)
        self._sync()

    def _sync(self) -> None:
        """Explain each chosen value; enable a numeric field only while a choice uses it."""
        editors = self._dialog.editors
        used: set[str] = set()
        dependent: set[str] = set()
        for name, words in self.explanations.items():
            if name not in CHOICES:
                continue
            box: QComboBox = editors[name]
            chosen = choice(name, box.currentData())
            words.setText(chosen.explanation if chosen else "")
            box.setToolTip(chosen.explanation if chosen else "")
            used.update(chosen.uses if chosen else ())
            dependent.update(u for c in CHOICES[name] for u in c.uses)
        for name in dependent:
            if name in editors:
                editors[name].setEnabled(name in used)
                editors[name].setToolTip(editors[name].toolTip().split("\n")[0] + (
                    "" if name in used else "\n(Used only with the choice that names it above.)"))


def set_item_tooltips(box: QComboBox, name: str) -> None:
    """Each entry's explanation as its tooltip (the list shows it on hover)."""
    for i, option in enumerate(CHOICES[name]):
        box.setItemData(i, option.explanation, Qt.ItemDataRole.ToolTipRole)
