"""Recall, the window's part: what the heatmap draws and does for recalls
(:mod:`halo_weave.core.recall`; the session's step is :mod:`halo_weave.session.recall`).

* The line under a user message lists what it recalled (:mod:`.recall_line`); its links
  are underlined, and :func:`link_at` finds the one under the mouse.
* Each chunk a message recalled carries a violet bar in the gutter, beside its lines,
  until it is pruned (:func:`recall_marks`).
* The chunk a link jumped to is outlined for :data:`FLASH_MS` (:func:`paint_flash`).

Functions of a :class:`~halo_weave.ui.heatmap.HeatmapView` (``view``) and the plan it shows.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPoint, QPointF, QRectF, Qt
from PySide6.QtGui import QPainter, QPainterPath, QPen

from . import colors
from .heatmap_frame import Frame, character_at, region_of
from .heatmap_layout import DocumentPlan

#: How long the chunk a link jumped to stays outlined (milliseconds).
FLASH_MS = 2000


def link_at(view, plan: DocumentPlan, point: QPoint | QPointF) -> tuple[int, int] | None:
    """(user turn id, chunk id) of the recall link under a viewport point, or None."""
    if not plan.links:
        return None
    found = character_at(view, QPoint(int(point.x()), int(point.y())))
    if found is None or region_of(plan, found[0].position())[0] != "recall":
        return None
    return next(((t, c) for a, b, t, c in plan.links if a <= found[1] < b), None)


def link_rects(view, plan: DocumentPlan) -> list[tuple[int, int, QRectF]]:
    """(user turn id, chunk id, viewport rectangle) of each visible piece of a recall
    link (a link that wraps has one per line)."""
    if not plan.links:
        return []
    found = []
    offset, height = view.contentOffset(), view.viewport().height()
    block = view.firstVisibleBlock()
    while block.isValid():
        geo = view.blockBoundingGeometry(block).translated(offset)
        if geo.top() > height:
            break
        layout = block.layout()
        if (geo.bottom() >= 0 and layout is not None and layout.lineCount()
                and region_of(plan, block.position())[0] == "recall"):
            first, end = block.position(), block.position() + block.length() - 1
            for a, b, turn_id, chunk_id in plan.links:
                if first <= a < end:
                    found += [(turn_id, chunk_id, rect)
                              for rect in range_pieces(layout, a - first, min(b, end) - first, geo)]
        block = block.next()
    return found


def range_pieces(layout, start: int, end: int, geo: QRectF) -> list[QRectF]:
    """Viewport rectangles of the text ``[start, end)`` of a block (positions in the block,
    one rectangle per line it wraps onto); ``geo``: the block's viewport geometry."""
    pieces = []
    while start < end:
        line = layout.lineForTextPosition(start)
        stop = min(end, line.textStart() + line.textLength())
        left, right = line.cursorToX(start)[0], line.cursorToX(stop)[0]
        if right > left:
            pieces.append(QRectF(geo.left() + left, geo.top() + line.y(), right - left, line.height()))
        if stop <= start:
            break
        start = stop
    return pieces


def paint_links(view, plan: DocumentPlan, painter: QPainter) -> None:
    """Underline the visible recall links."""
    painter.setPen(QPen(colors.qcolor(colors.scheme().recall), 1))
    for _, _, rect in link_rects(view, plan):
        y = rect.bottom() - 2
        painter.drawLine(QPointF(rect.left(), y), QPointF(rect.right(), y))


def recall_marks(view, frame: Frame | None) -> list[tuple[int, float, float]]:
    """(chunk id, top, bottom) in viewport coordinates of each visible chunk that a
    message recalled and no prune has taken since."""
    conv = view.conversation()
    if frame is None or conv is None or not len(frame.token):
        return []
    box_chunks = view.canvas.box_chunks(frame)
    marks = []
    for chunk_id in np.unique(box_chunks).tolist():
        chunk = conv.chunks.get(chunk_id)
        if chunk is None or chunk.recalled_for is None:
            continue
        mine = box_chunks == chunk_id
        marks.append((chunk_id, float(frame.y[mine].min()), float((frame.y[mine] + frame.h[mine]).max())))
    return marks


def paint_marks(gutter, marks: list[tuple[int, float, float]]) -> None:
    """The violet bars at the gutter's left edge (the role bars are at its right)."""
    if not marks:
        return
    painter = QPainter(gutter)
    width = max(3, gutter.width() // 8)
    color = colors.qcolor(colors.scheme().recall)
    for _, top, bottom in marks:
        painter.fillRect(QRectF(1, top + 1, width, bottom - top - 2), color)
    painter.end()


def paint_flash(view, painter: QPainter, frame: Frame, chunk_id: int | None) -> None:
    """Outline the lines of ``chunk_id`` (the chunk a link jumped to)."""
    if chunk_id is None or not len(frame.token):
        return
    mine = view.canvas.box_chunks(frame) == chunk_id
    if not mine.any():
        return
    x0, x1, y, h = frame.x0[mine], frame.x1[mine], frame.y[mine], frame.h[mine]
    path = QPainterPath()
    for line in np.unique(y).tolist():
        on = y == line
        path.addRect(QRectF(float(x0[on].min()) - 3, line, float(x1[on].max() - x0[on].min()) + 6, float(h[on].max())))
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    painter.setPen(QPen(colors.qcolor(colors.scheme().recall), 2))
    painter.setBrush(Qt.BrushStyle.NoBrush)  # a fill over the text would dim its colour
    painter.drawPath(path.simplified())
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
