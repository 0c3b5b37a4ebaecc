"""What the rendered Markdown adds to a frame of the heatmap, and painting it.

:func:`collect_overlay` walks the blocks on screen once per frame (and on through a code
block to its closing fence) and gathers, in viewport coordinates, the bullets, thematic
breaks, inline code backgrounds and "Copy" buttons, and the hidden tokens of every
rendered span with the span's document range; :func:`carry_marked` gives each span the
colour key of its hidden tokens when theirs is the brighter.  The ``paint_*`` functions
draw the overlay in the heatmap's layers (:mod:`.heatmap_paint`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFontMetricsF, QPainter, QTextBlock, QTextCursor

from . import markdown_scan as md
from .heatmap_layout import DocumentPlan
from .markdown_blocks import markup_of
from . import colors

# Buttons, rules and inline code's background (the code blocks') come from colors.scheme().
COPY_LABEL = "Copy"
#: How far past the visible blocks a code block is followed to its closing fence.
FOLLOW_CODE_BLOCKS = 400


@dataclass
class Overlay:
    """What the Markdown adds to one frame of the view, in viewport coordinates: bullet
    cells, thematic-break lines, Copy buttons, and the hidden tokens of each rendered
    span on screen (plan token indices, the span's document range)."""

    key: tuple
    bullets: list[QRectF] = field(default_factory=list)
    rules: list[QRectF] = field(default_factory=list)
    #: (rectangle, "code" or "message", the opening fence's block or the turn id).
    buttons: list[tuple[QRectF, str, object]] = field(default_factory=list)
    marks: list[tuple[np.ndarray, int, int]] = field(default_factory=list)
    #: Backgrounds of inline code, one rectangle per line it spans.
    code_spans: list[QRectF] = field(default_factory=list)


def collect_overlay(view, plan: DocumentPlan, key: tuple) -> Overlay:
    """One walk over the blocks on screen (and on through a code block that goes on
    below, to reach its closing fence's mark)."""
    overlay = Overlay(key)
    metrics = QFontMetricsF(view.font())
    width = metrics.horizontalAdvance(COPY_LABEL) + metrics.height() * 0.8
    viewport_width = view.viewport().width()
    right = viewport_width - metrics.height() * 0.4
    height = view.viewport().height()
    offset = view.contentOffset()
    block = view.firstVisibleBlock()
    rect = view.blockBoundingGeometry(block).translated(offset) if block.isValid() else QRectF()
    follow = FOLLOW_CODE_BLOCKS
    while block.isValid():
        on_screen = rect.top() <= height
        if not on_screen:
            if follow <= 0 or not md.in_code(block.previous().userState()):
                break
            follow -= 1
        data = markup_of(block)
        if data is not None and data.marks:
            base = block.position()
            for hidden, start, end in data.marks:
                parts = []
                for a, b in hidden:
                    lo = int(np.searchsorted(plan.ends, base + a, "right"))
                    hi = int(np.searchsorted(plan.starts, base + b, "left"))
                    if hi > lo:
                        parts.append(np.arange(lo, hi))
                if parts:
                    # end -1: up to this block (a closing fence's mark)
                    overlay.marks.append((np.concatenate(parts), base + start, base + end if end >= 0 else base - 1))
        if on_screen:
            layout = block.layout()
            if layout is not None and layout.lineCount():
                line = layout.lineAt(0)
                top, line_height = rect.top() + line.y(), line.height()
                if data is not None:
                    if data.kind == "fence_open":
                        overlay.buttons.append((QRectF(right - width, top + 1, width, line_height - 2), "code", block))
                    elif data.kind == "rule":
                        overlay.rules.append(QRectF(rect.left() + 4, top + line_height / 2,
                                                    viewport_width - rect.left() - 12, 1))
                    for a, b in data.code_spans:
                        overlay.code_spans += _span_rects(layout, rect, a, b)
                    if data.bullet >= 0:
                        at = layout.lineForTextPosition(data.bullet)
                        x0, x1 = at.cursorToX(data.bullet)[0], at.cursorToX(data.bullet + 1)[0]
                        overlay.bullets.append(QRectF(rect.left() + x0, rect.top() + at.y(), max(x1 - x0, 1.0),
                                                      at.height()))
                else:
                    i = bisect.bisect_right(plan.region_start, block.position()) - 1
                    if i >= 0 and plan.region_kind[i] == "header" and plan.region_start[i] == block.position():
                        # The first line's own height: a block's rectangle is taller while it is the last.
                        overlay.buttons.append((QRectF(right - width, top, width, line_height), "message",
                                                plan.region_turn[i]))
        block = block.next()
        if block.isValid():
            rect = QRectF(rect.left(), rect.bottom(), rect.width(), view.blockBoundingRect(block).height())
    return overlay


def _span_rects(layout, rect: QRectF, start: int, end: int) -> list[QRectF]:
    """Rectangles (viewport coordinates) covering block offsets ``start`` .. ``end``, one per line."""
    rects = []
    position = start
    while position < end:
        line = layout.lineForTextPosition(position)
        if not line.isValid():
            break
        stop = min(end, line.textStart() + line.textLength())
        x0, x1 = line.cursorToX(position)[0], line.cursorToX(stop)[0]
        if x1 > x0:
            rects.append(QRectF(rect.left() + x0 - 2, rect.top() + line.y(), x1 - x0 + 4, line.height()))
        if stop <= position:
            break
        position = stop
    return rects


def carry_marked(overlay: Overlay, plan: DocumentPlan, frame, keys: np.ndarray, hidden_keys: np.ndarray) -> None:
    """Give the boxes of every rendered span on screen at least the colour key of the
    hidden tokens that mark it (a ``**``, a heading's ``#``, a fence): the brighter of
    the two shows.  ``hidden_keys``: the colour keys of ``hidden_tokens(overlay)``."""
    if not len(frame.token) or not overlay.marks:
        return
    # Boxes come in document order, so each span's boxes are one slice.
    box_starts, box_ends = plan.starts[frame.token], plan.ends[frame.token]
    at = 0
    for indices, start, end in overlay.marks:
        strongest = int(hidden_keys[at : at + len(indices)].max())
        at += len(indices)
        lo = int(np.searchsorted(box_ends, start, "right"))
        hi = int(np.searchsorted(box_starts, end, "left"))
        if hi > lo:
            np.maximum(keys[lo:hi], strongest, out=keys[lo:hi])


def hidden_tokens(overlay: Overlay) -> np.ndarray:
    """Plan token indices of every hidden token of the overlay's marks, in mark order."""
    if not overlay.marks:
        return np.zeros(0, np.int64)
    return np.concatenate([indices for indices, _, _ in overlay.marks])


# ---------------------------------------------------------------------- painting
def code_text(view, opening: QTextBlock, soft_breaks) -> str:
    """The code of the block ``opening`` opens (up to its closing fence, or the end)."""
    from .heatmap_stream import without_cuts

    first = opening.next()
    block = first
    while block.isValid():
        data = markup_of(block)
        if data is not None and data.kind == "fence_close":
            break
        block = block.next()
    start = first.position()
    end = block.position() - 1 if block.isValid() else view.document().characterCount() - 1
    if not first.isValid() or end <= start:
        return ""
    cursor = QTextCursor(view.document())
    cursor.setPosition(start)
    cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
    text = cursor.selection().toPlainText().replace("\u2029", "\n")
    return without_cuts(text, start, end, soft_breaks)


def link_at(view, point: QPointF) -> str | None:
    """The address of the Markdown link under a viewport point, or None."""
    cursor = view.cursorForPosition(point.toPoint())
    block = cursor.block()
    data = markup_of(block)
    if data is None or not data.links:
        return None
    layout = block.layout()
    geo = view.blockBoundingGeometry(block).translated(view.contentOffset())
    if layout is None or not geo.contains(point):
        return None
    local = point - geo.topLeft()
    for i in range(layout.lineCount()):
        line = layout.lineAt(i)
        if line.y() <= local.y() < line.y() + line.height():
            if local.x() > line.x() + line.naturalTextWidth():
                return None
            offset = line.xToCursor(local.x(), line.CursorPosition.CursorOnCharacter)
            for start, end, url in data.links:
                if start <= offset < end:
                    return url
    return None


def paint_code_spans(overlay: Overlay, painter: QPainter, bounds: QRectF) -> None:
    """The backgrounds of inline code (under the highlight layer, as code blocks')."""
    for rect in overlay.code_spans:
        if rect.bottom() >= bounds.top() and rect.top() <= bounds.bottom():
            painter.fillRect(rect, QColor(*colors.scheme().code_background))


def paint_under_tint(overlay: Overlay, painter: QPainter, bounds: QRectF) -> None:
    """Bullets (tinted like the text, so drawn before the chunk colours)."""
    painter.setPen(QColor(*colors.scheme().text))
    for cell in overlay.bullets:
        if cell.bottom() >= bounds.top() and cell.top() <= bounds.bottom():
            painter.drawText(cell, Qt.AlignmentFlag.AlignCenter, "•")


def paint_over_tint(view, overlay: Overlay, painter: QPainter, bounds: QRectF) -> None:
    """Thematic breaks and the "Copy" buttons, in fixed greys."""
    for line in overlay.rules:
        if line.bottom() >= bounds.top() and line.top() <= bounds.bottom():
            painter.fillRect(line, QColor(*colors.scheme().rule))
    painter.setFont(view.font())
    for rect, kind, _ in overlay.buttons:
        if rect.bottom() < bounds.top() or rect.top() > bounds.bottom():
            continue
        if kind == "code":
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(*colors.scheme().button_fill))
            painter.drawRoundedRect(rect, 3, 3)
        painter.setPen(QColor(*(colors.scheme().button_text if kind == "code" else colors.scheme().dim)))
        painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, COPY_LABEL)
    painter.setPen(Qt.PenStyle.NoPen)
