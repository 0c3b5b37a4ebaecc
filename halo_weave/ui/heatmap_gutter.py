"""The heatmap's gutter: a role bar beside each turn, 📌 on pinned chunks and a violet
bar beside each recalled chunk (:mod:`.heatmap_recall`)."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF, QRect, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette, QPen
from PySide6.QtWidgets import QWidget

from . import colors
from .heatmap_frame import Frame
from .heatmap_recall import paint_marks, recall_marks


class Gutter(QWidget):
    """The strip left of the text: a role bar per turn, 📌 on pinned chunks, a violet bar
    beside recalled ones.

    Owns the 📌 it draws (the emoji, or a drawn pin where the font has none) and its own
    width, which follows the view's font; it follows the view's scrolling.
    """

    def __init__(self, view) -> None:
        super().__init__(view)
        self._view = view
        self._pin_text = colors.emoji_or(view.font(), "📌", "")
        view.updateRequest.connect(self._follow)

    def preferred_width(self) -> int:
        """The gutter's width at the view's font."""
        return int(self._view.fontMetrics().height() * 1.6)

    def font_changed(self) -> None:
        """The view's font changed: the 📌 is looked up again."""
        self._pin_text = colors.emoji_or(self._view.font(), "📌", "")

    def sizeHint(self) -> QSize:
        return QSize(self.preferred_width(), 0)

    def paintEvent(self, event: QPaintEvent) -> None:
        view, gutter = self._view, self
        painter = QPainter(self)
        painter.fillRect(event.rect(), view.palette().color(QPalette.ColorRole.Base).darker(115))
        frame = view.canvas.frame()
        if frame is not None:
            bar = max(2, gutter.width() // 8)
            for role, top, height in frame.bodies:
                color = view.canvas.painter.role_colors.get(role)
                if color is not None:
                    painter.fillRect(QRectF(gutter.width() - bar - 2, top, bar, height), color.darker(170))
            for _, y, line_height in pin_markers(view, frame):
                rect = QRectF(0, y, gutter.width() - bar - 2, line_height)
                if self._pin_text:
                    painter.setPen(QColor(*colors.scheme().text))
                    painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, self._pin_text)
                else:
                    draw_pin(painter, rect)
        painter.end()
        paint_marks(self, recall_marks(view, frame))

    def pinned_marker_chunks(self) -> list[int]:
        """Pinned chunks whose 📌 is on screen now."""
        frame = self._view.canvas.frame()
        return [chunk_id for chunk_id, _, _ in pin_markers(self._view, frame)] if frame else []

    def _follow(self, rect: QRect, dy: int) -> None:
        """The view scrolled by ``dy`` or repainted ``rect``: the same here."""
        if dy:
            self.scroll(0, dy)
        else:
            self.update(0, rect.y(), self.width(), rect.height())


def pin_markers(view, frame: Frame | None) -> list[tuple[int, float, float]]:
    """(chunk id, viewport y, line height) of pinned chunks whose start is on screen."""
    if frame is None or not len(frame.token):
        return []
    chunks = view.conversation().chunks
    box_chunks = view.canvas.box_chunks(frame)
    markers = []
    for chunk_id in np.unique(box_chunks).tolist():
        chunk = chunks.get(chunk_id)
        if chunk is None or not chunk.pinned:
            continue
        first = view.finder.first_token_of(chunk_id)
        boxes = np.flatnonzero(frame.token == first) if first is not None else []
        if len(boxes):
            i = int(boxes[0])
            markers.append((chunk_id, float(frame.y[i]), float(frame.h[i])))
    return markers


def draw_pin(painter: QPainter, rect: QRectF) -> None:
    """A drawn push-pin where no emoji font is installed."""
    size = min(rect.width(), rect.height())
    cx, cy = rect.center().x(), rect.center().y()
    head = size * 0.28
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    painter.setPen(QPen(QColor(200, 200, 200), max(1.0, size * 0.08)))
    painter.drawLine(QPointF(cx, cy), QPointF(cx - size * 0.25, cy + size * 0.4))
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(QColor(230, 70, 70))
    painter.drawEllipse(QPointF(cx + size * 0.05, cy - size * 0.1), head, head)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
