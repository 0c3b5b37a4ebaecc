"""Painting one update of the heatmap: the three layers of :mod:`.heatmap` (highlight
under the text, the text, the chunk colours over it in *darken* mode, *lighten* on the
light theme), one batch of
rectangles per colour, for the visible token boxes only."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import QPlainTextEdit

from . import colors
from .code_blocks import paint_code_backgrounds
from .markdown_overlay import paint_code_spans, paint_over_tint, paint_under_tint
from .heatmap_recall import paint_flash, paint_links
from .heatmap_frame import KEY_STRIDE, TOOL_TINT, Frame

#: An update region of at most this many rectangles is painted rectangle by rectangle.
MAX_SEPARATE_RECTS = 32
#: Beyond this many recoloured lines a frame repaints the whole viewport at once.
MAX_DIRTY_LINES = 24


def request_lines(viewport, frame: Frame, changed: np.ndarray) -> None:
    """Ask Qt to repaint the lines of the ``changed`` boxes: one rectangle per line
    (whole lines: Qt draws a line's text whole anyway, and adjacent lines merge into one
    rectangle of the update region), or the whole viewport past :data:`MAX_DIRTY_LINES`."""
    if not len(changed):
        return
    order = changed[np.argsort(frame.y[changed], kind="stable")]
    ys = frame.y[order]
    starts = np.flatnonzero(np.concatenate(([True], ys[1:] != ys[:-1])))
    if len(starts) > MAX_DIRTY_LINES:
        viewport.update()
        return
    width = viewport.width()
    for y, h in zip(ys[starts].tolist(), frame.h[order][starts].tolist()):
        viewport.update(QRectF(0, y, width, h).toAlignedRect())


def update_rects(event: QPaintEvent) -> list:
    """The rectangles to paint: the region's own when it is a few scattered ones (Qt draws
    every block that meets the bounding rectangle of an update), else its bounds."""
    region, bounds = event.region(), event.rect()
    if 1 < region.rectCount() <= MAX_SEPARATE_RECTS:
        parts = list(region)
        if sum(r.width() * r.height() for r in parts) * 2 < bounds.width() * bounds.height():
            return parts
    return [bounds]


def boxes_in(frame: Frame, rects: list) -> np.ndarray:
    """Indices of the frame's boxes that meet any of ``rects``."""
    hit = np.zeros(len(frame.token), bool)
    for rect in rects:
        hit |= ((frame.y + frame.h >= rect.top()) & (frame.y <= rect.bottom())
                & (frame.x1 >= rect.left()) & (frame.x0 <= rect.right()))
    return np.flatnonzero(hit)


class FramePainter:
    """The layers' brushes, and :meth:`paint` for one update of a view."""

    def __init__(self) -> None:
        self.level_brushes = colors.level_colors()
        self.highlight_brushes = colors.highlight_colors()
        self.tool_color = colors.qcolor(colors.scheme().tool)
        scheme = colors.scheme()
        self.kind_colors = {"system": colors.qcolor(scheme.unscored), "gap": colors.qcolor(scheme.unscored),
                            "recall": colors.qcolor(scheme.recall)}
        self.role_colors = {r: colors.qcolor(c) for r, c in colors.scheme().roles.items()}
        # White text darkened to the chunk's colour (dark theme), black text lightened to it (light).
        self.tint_mode = (QPainter.CompositionMode.CompositionMode_Lighten if colors.scheme().tint_mode == "lighten"
                          else QPainter.CompositionMode.CompositionMode_Darken)

    def paint(self, view: QPlainTextEdit, event: QPaintEvent, rects: list, frame: Frame,
              inside: np.ndarray, keys_in: np.ndarray) -> None:
        """Paint ``event`` on ``view``: the boxes ``inside`` with their colour keys."""
        bounds = event.rect()
        lit = keys_in >= KEY_STRIDE
        # The system clip is the update region: nothing outside it is touched.
        viewport = view.viewport()
        painter = QPainter(viewport)
        painter.fillRect(bounds, viewport.palette().brush(viewport.backgroundRole()))
        if view.markdown_layer.highlighter.active:
            paint_code_backgrounds(view, painter, QRectF(bounds))
        overlay = view.markdown_layer.overlay()
        if overlay is not None:
            paint_code_spans(overlay, painter, QRectF(bounds))
        painter.setPen(Qt.PenStyle.NoPen)
        for step, batch in batches(frame, inside[lit], keys_in[lit] // KEY_STRIDE):
            painter.setBrush(self.highlight_brushes[step - 1])
            painter.drawRects(batch)
        painter.end()
        if len(rects) == 1:
            QPlainTextEdit.paintEvent(view, event)
        else:
            # Scattered lines: QPlainTextEdit draws every block that meets the bounding
            # rectangle of an update, so let it draw each rectangle on its own.
            for rect in rects:
                QPlainTextEdit.paintEvent(view, QPaintEvent(rect))
        painter = QPainter(viewport)
        if overlay is not None:
            paint_under_tint(overlay, painter, QRectF(bounds))
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setCompositionMode(self.tint_mode)
        for tint, batch in batches(frame, inside[~lit], keys_in[~lit]):
            painter.setBrush(self.tool_color if tint == TOOL_TINT else self.level_brushes[tint])
            painter.drawRects(batch)
        for kind, role, x, y, w, h in frame.lines:
            if y + h >= bounds.top() and y <= bounds.bottom():
                color = self.kind_colors.get(kind) or self.role_colors.get(role)
                if color is not None:
                    painter.setBrush(color)
                    painter.drawRect(QRectF(x, y, w, h))
        painter.setCompositionMode(QPainter.CompositionMode.CompositionMode_SourceOver)
        if overlay is not None:
            paint_over_tint(view, overlay, painter, QRectF(bounds))
        paint_links(view, view.plan, painter)
        paint_flash(view, painter, frame, view.finder.flashed_chunk)
        paint_matches(painter, view.search.pieces())
        painter.end()


def paint_matches(painter: QPainter, pieces: list[tuple[bool, QRectF]]) -> None:
    """Find in the chat: a translucent box around each match, the one gone to filled
    stronger and outlined thicker (over the chunk colours: a match reads in any chunk)."""
    if not pieces:
        return
    for current, rect in pieces:
        fill = colors.qcolor(colors.scheme().find)
        fill.setAlphaF(colors.scheme().find_alpha[1] if current else colors.scheme().find_alpha[0])
        painter.setBrush(fill)
        painter.setPen(QPen(colors.qcolor(colors.scheme().find), 2.0 if current else 1.0))
        painter.drawRoundedRect(rect.adjusted(-1, 0, 1, 0), 2, 2)
    painter.setPen(Qt.PenStyle.NoPen)


def batches(frame: Frame, boxes: np.ndarray, keys: np.ndarray) -> list[tuple[int, list[QRectF]]]:
    """(key, rectangles) per distinct key of these boxes; adjacent boxes of one key on
    one line are merged into one rectangle."""
    if not len(boxes):
        return []
    order = np.lexsort((boxes, keys))
    boxes, keys = boxes[order], keys[order]
    x0, x1, y, h = frame.x0[boxes], frame.x1[boxes], frame.y[boxes], frame.h[boxes]
    # A run continues while the next box has the same key, is on the same line and
    # touches this one.
    joins = ((keys[1:] == keys[:-1]) & (y[1:] == y[:-1]) & (np.abs(x0[1:] - x1[:-1]) < 0.5)
             & (np.diff(boxes) == 1))
    starts = np.flatnonzero(np.concatenate(([True], ~joins)))
    ends = np.concatenate((starts[1:], [len(boxes)])) - 1
    rects = [
        QRectF(a, b, c, d)
        for a, b, c, d in zip(x0[starts].tolist(), y[starts].tolist(),
                              (x1[ends] - x0[starts]).tolist(), h[starts].tolist())
    ]
    run_keys = keys[starts]
    groups = np.flatnonzero(np.concatenate(([True], run_keys[1:] != run_keys[:-1]))).tolist()
    bounds = groups[1:] + [len(rects)]
    return [(int(run_keys[g]), rects[g:e]) for g, e in zip(groups, bounds)]
