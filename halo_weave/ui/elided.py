"""A one-line label that never holds the window wider than the screen."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPaintEvent, QPainter, QResizeEvent
from PySide6.QtWidgets import QLabel, QWidget

#: Characters an elided label keeps at its narrowest (besides the "…").
MIN_CHARS = 4


class ElidedLabel(QLabel):
    """A one-line label that shrinks with the window, its text elided ("…").

    Its minimum width is a few characters whatever the text, so no text sets the
    window's minimum width.  While the text is cut, the tooltip starts with the whole
    text (then the label's own explanation, set with :meth:`setToolTip`).
    """

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._about = ""
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt API
        super().setText(text)
        self._sync_tip()

    def setToolTip(self, tip: str) -> None:  # noqa: N802 - Qt API
        self._about = tip
        self._sync_tip()

    def displayed_text(self) -> str:
        """The text as painted now (elided to the label's width)."""
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width())

    def is_elided(self) -> bool:
        return self.displayed_text() != self.text()

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt API
        metrics = self.fontMetrics()
        width = metrics.horizontalAdvance("…") + metrics.averageCharWidth() * MIN_CHARS
        margins = self.contentsMargins()
        return QSize(width + margins.left() + margins.right(), super().minimumSizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        self._sync_tip()

    def _sync_tip(self) -> None:
        text, about = self.text(), self._about
        if not self.is_elided() or (text.rstrip("…") and text.rstrip("…") in about):
            tip = about  # the explanation already holds the whole text
        else:
            tip = f"{text}\n{about}" if about else text
        QLabel.setToolTip(self, tip)

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt API
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.drawText(self.contentsRect(), int(Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft),
                         self.displayed_text())
        painter.end()
