"""Small widgets of the window's status lines: the connection light (in the stats bar)
and the progress of a long task (in the window's status bar)."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent
from PySide6.QtWidgets import QProgressBar, QWidget


class ConnectionLight(QWidget):
    """A small round light in the colour of the connection state."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._color = QColor(Qt.GlobalColor.gray)  # until the stats bar sets the state

    def set_color(self, color: QColor) -> None:
        self._color = QColor(color)
        self.update()

    def color(self) -> QColor:
        return QColor(self._color)

    def sizeHint(self) -> QSize:
        side = self.fontMetrics().height()
        return QSize(side, side)

    def minimumSizeHint(self) -> QSize:
        return self.sizeHint()  # counted in the bar's minimum, so the labels' share is right

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        side = min(self.width(), self.height()) * 0.6
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(self._color)
        painter.drawEllipse(self.rect().center().toPointF(), side / 2, side / 2)
        painter.end()


class TaskProgress(QProgressBar):
    """The status bar's progress of a long task (loading, re-indexing)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMaximumWidth(220)
        self.setTextVisible(True)
        self.hide()

    def show_progress(self, what: str, done: int, total: int) -> None:
        """``total`` 0: indeterminate; ``done`` >= ``total``: finished (hidden)."""
        if total <= 0:
            self.setRange(0, 0)
            self.setFormat(what)
            self.show()
        elif done >= total:
            self.hide()
        else:
            self.setRange(0, total)
            self.setValue(done)
            self.setFormat(f"{what} %v/%m")
            self.show()
