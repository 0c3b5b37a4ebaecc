"""What the colours, the graveyard and the numbers mean: the first-start hint and the legend.

:class:`FirstStartHint` floats over an empty conversation (three lines); the heatmap
shows it while the conversation has no turn.  :class:`LegendDialog` (View → Heatmap
legend) draws every colour the heatmap uses from the same constants the heatmap paints
with (:mod:`halo_weave.ui.colors`), so the legend cannot drift from the picture.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QLinearGradient, QPainter, QPaintEvent
from PySide6.QtWidgets import (
    QDialog, QDialogButtonBox, QGridLayout, QLabel, QPlainTextEdit, QVBoxLayout, QWidget,
)

from ..settings import Scoring, Settings, scoring_words
from . import colors

#: The three lines of the first start (rich text).
FIRST_START_LINES = (
    "<b>Colours</b> show what the model reads: each paragraph goes from olive (ignored "
    "lately) to gold (read a lot); the words it attends to most get a yellow background.",
    "<b>The graveyard</b> (right) holds paragraphs pruned when the context is full; a later "
    "question brings the right ones back in place, or click one to resurrect it.",
    "<b>The numbers</b> above: <i>Live</i> tokens the model sees / the limit (and, beside it, what "
    "your messages recalled), <i>Total</i> ever written, ☀ mean brightness, speed. View → Heatmap "
    "legend explains every colour.",
)


class FirstStartHint(QLabel):
    """Three lines over an empty conversation; see the module docstring."""

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self.setObjectName("firstStartHint")
        self.setWordWrap(True)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setText("<p style='margin-bottom:0.6em'><b style='font-size:large'>A new conversation</b></p>"
                     + "".join(f"<p style='margin-bottom:0.5em'>{line}</p>" for line in FIRST_START_LINES)
                     + "<p>Type a message below and press Enter.</p>")
        self.setStyleSheet("QLabel#firstStartHint { color: #c9c7c0; background: rgba(38, 39, 44, 230); "
                           "border: 1px solid #44464d; border-radius: 0.5em; padding: 1em; }")
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents, True)
        self.hide()

    def place(self, area: QRectF, content_bottom: float | None = None) -> None:
        """Centre in ``area`` (the heatmap's viewport), at most 34 em wide, below
        ``content_bottom`` (where the text already shown, the system prompt, ends) so it
        covers none of it; only where that leaves no room does it sit at the bottom."""
        width = int(min(area.width() - 40, self.fontMetrics().averageCharWidth() * 68))
        height = self.heightForWidth(width)
        top = area.top() + max(24, area.height() * 0.12)
        if content_bottom is not None:
            top = max(top, content_bottom + self.fontMetrics().height())
            top = max(area.top(), min(top, area.bottom() - height - 12))
        self.setGeometry(int(area.center().x() - width / 2), int(top), width, height)

    def place_in(self, view: QPlainTextEdit) -> None:
        """:meth:`place` over ``view`` (its parent), below the text it shows."""
        area = view.viewport().geometry()
        last = view.blockBoundingGeometry(view.document().lastBlock()).translated(view.contentOffset())
        self.place(area, area.top() + last.bottom() if view.document().toPlainText().strip() else None)


class _Swatch(QWidget):
    """A small painted sample: a colour, the scale as a gradient, or text on a highlight."""

    def __init__(self, paint, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._paint = paint
        self.setMinimumSize(QSize(120, 22))

    def sizeHint(self) -> QSize:
        return QSize(140, 22)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor(22, 22, 26))
        self._paint(painter, QRectF(self.rect()).adjusted(2, 3, -2, -3))
        painter.end()


def _scale(painter: QPainter, rect: QRectF) -> None:
    gradient = QLinearGradient(rect.topLeft(), rect.topRight())
    for t, (r, g, b) in zip(np.linspace(0, 1, 9), colors.scale_rgb(np.linspace(0, 1, 9))):
        gradient.setColorAt(float(t), QColor(int(r), int(g), int(b)))
    painter.fillRect(rect, gradient)


def _recall(painter: QPainter, rect: QRectF) -> None:
    """The mark beside a recalled chunk and the start of the line under its message."""
    painter.fillRect(QRectF(rect.left(), rect.top(), 4, rect.height()), QColor(*colors.scheme().recall))
    painter.setPen(QColor(*colors.scheme().recall))
    painter.drawText(rect.adjusted(10, 0, 0, 0), Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                     "Recalled for…")


def _fill(rgb: tuple[int, int, int]):
    return lambda painter, rect: painter.fillRect(rect, QColor(*rgb))


def _text(rgb: tuple[int, int, int], text: str, background: QColor | None = None):
    def paint(painter: QPainter, rect: QRectF) -> None:
        if background is not None:
            painter.fillRect(rect, background)
        painter.setPen(QColor(*rgb))
        painter.drawText(rect, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft, text)
    return paint


class LegendDialog(QDialog):
    """Every colour of the heatmap with what it means, and which score colours the
    paragraphs and decides pruning (:meth:`set_scoring`; ``scoring_text`` holds it)."""

    def __init__(self, parent: QWidget | None = None, scoring: Scoring | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Heatmap legend")
        highlight = colors.highlight_colors()[-1]
        pin = colors.emoji_or(self.font(), "📌", "pin")
        rows = [
            (_scale, ""),  # what decides the colour and pruning: set_scoring
            (_text((255, 255, 255), " brightest words", highlight),
             f"The brightest share of all tokens (Settings → Context & memory → {colors.HIGHLIGHT_LABEL}) "
             "stays white on a yellow "
             "background, stronger for the very brightest."),
            (_text(colors.scheme().tool, " tool result"), "What the model's notebook tool returned."),
            (_text(colors.scheme().unscored, " System prompt"), "The system prompt and “⋯ pruned here” "
             "markers: never scored, never pruned."),
            (_fill(colors.scheme().roles["user"]), "Bar in the left margin and label of your messages."),
            (_fill(colors.scheme().roles["assistant"]), "Bar and label of the model's answers."),
            (_recall, "Recalled: brought back from the graveyard by the search for one of your messages. "
             "A violet bar in the left margin marks it until it is pruned; the violet line under the "
             "message lists what it recalled (click one to jump to it)."),
            (_text((255, 255, 255), f" {pin}"), "Pinned: never pruned (right-click a paragraph to pin; "
             "resurrecting from the graveyard pins too)."),
        ]
        grid = QGridLayout()
        grid.setColumnStretch(1, 1)
        self.descriptions: list[str] = []
        self._labels: list[QLabel] = []
        for i, (paint, words) in enumerate(rows):
            grid.addWidget(_Swatch(paint, self), i, 0, Qt.AlignmentFlag.AlignTop)
            label = QLabel(words)
            label.setWordWrap(True)
            grid.addWidget(label, i, 1)
            self.descriptions.append(words)
            self._labels.append(label)
        self._note = note = QLabel()
        note.setWordWrap(True)
        note.setStyleSheet("color: #8c8c91;")
        self.scoring_text = ""
        self.set_scoring(scoring or scoring_words(Settings()))
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(grid)
        layout.addWidget(note)
        layout.addWidget(buttons)
        self.resize(620, 460)

    def set_scoring(self, scoring: Scoring) -> None:
        """Say which score colours the paragraphs and decides pruning (the rule in use)."""
        self.descriptions[0] = scoring.colour
        self._labels[0].setText(scoring.colour)
        self.scoring_text = f"{scoring.sentence} {scoring.rule}".strip()
        self._note.setText(self.scoring_text)
