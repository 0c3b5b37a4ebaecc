"""What one heatmap frame paints: token geometry on screen and each token's colour key.

:func:`collect_frame` walks the visible blocks of a ``QPlainTextEdit`` once and returns
numpy arrays of token boxes (a token split at line wraps gives several boxes) in
viewport coordinates; per-block box geometry is cached by the caller in a dict keyed
by block number and checked against the block's revision and the viewport width.  A
block that only grew at its end (the streamed answer) keeps the boxes of its settled
lines and measures only from its last old line on, so a token costs O(one line).
:func:`colour_keys` turns brightness into one small integer per box: the overlay
repaints only boxes whose key changed since they were last painted.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np
from PySide6.QtCore import QPoint, QPointF
from PySide6.QtGui import QTextBlock
from PySide6.QtWidgets import QPlainTextEdit

from ..conversation import Conversation
from . import colors
from .heatmap_layout import DocumentPlan

#: Colour key layout: ``highlight_step * KEY_STRIDE + tint`` where tint is the chunk's
#: scale step (0 .. LEVELS-1) or TOOL_TINT; highlight_step is 0 when not highlighted.
TOOL_TINT = colors.LEVELS
KEY_STRIDE = colors.LEVELS + 1


@dataclass
class BlockGeometry:
    """Boxes of one laid-out block, relative to the block's top-left."""

    key: tuple
    kind: str
    role: str
    token: np.ndarray  # index into the plan's per-token arrays; -1 for a whole line
    x0: np.ndarray
    x1: np.ndarray
    y: np.ndarray
    h: np.ndarray
    #: Line number of each box inside the block.
    line: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    line_count: int = 0


@dataclass
class Frame:
    """The visible part of the document, in viewport coordinates."""

    key: tuple
    token: np.ndarray
    x0: np.ndarray
    x1: np.ndarray
    y: np.ndarray
    h: np.ndarray
    #: Non-token lines (labels, system prompt, gap markers): (kind, role, x0, y, w, h).
    lines: list[tuple[str, str, float, float, float, float]] = field(default_factory=list)
    #: Body blocks for the gutter's role bar: (role, top, height).
    bodies: list[tuple[str, float, float]] = field(default_factory=list)


def region_of(plan: DocumentPlan, position: int) -> tuple[str, str]:
    i = bisect.bisect_right(plan.region_start, position) - 1
    if i < 0:
        return "none", ""
    return plan.region_kind[i], plan.region_role[i]


def block_geometry(view: QPlainTextEdit, block: QTextBlock, plan: DocumentPlan,
                   cache: dict[int, BlockGeometry]) -> BlockGeometry | None:
    """Token boxes of a laid-out block (cached), or None when it is not laid out."""
    layout = block.layout()
    if layout is None or layout.lineCount() == 0:
        return None
    bpos, blen, width = block.position(), block.length(), view.viewport().width()
    key = (block.revision(), bpos, blen, width)
    cached = cache.get(block.blockNumber())
    if cached is not None and cached.key == key:
        return cached
    kind, role = region_of(plan, bpos)
    if kind != "body":
        geometry = _line_geometry(key, kind, role, layout)
    elif (cached is not None and cached.kind == "body" and cached.key[1:2] == (bpos,)
          and cached.key[3] == width and blen > cached.key[2] and not block.next().isValid()):
        # The last block grew (streamed text appended): lines before its old last line
        # cannot have moved, because wrapping is greedy from the start of the block.
        settled = max(cached.line_count - 1, 0)
        keep = cached.line < settled
        start = layout.lineAt(settled).textStart() if settled < layout.lineCount() else blen - 1
        fresh = _body_boxes(layout, plan, bpos, bpos + blen - 1, start)
        geometry = BlockGeometry(
            key, kind, role,
            *(np.concatenate((getattr(cached, name)[keep], part))
              for name, part in zip(("token", "x0", "x1", "y", "h", "line"), fresh)),
            line_count=layout.lineCount(),
        )
    else:
        geometry = BlockGeometry(key, kind, role, *_body_boxes(layout, plan, bpos, bpos + blen - 1, 0),
                                 line_count=layout.lineCount())
    cache[block.blockNumber()] = geometry
    return geometry


def _line_geometry(key: tuple, kind: str, role: str, layout) -> BlockGeometry:
    """One box (token -1) per non-empty line of a label, prompt or gap block."""
    x0, x1, y, h = [], [], [], []
    for i in range(layout.lineCount()):
        line = layout.lineAt(i)
        if line.naturalTextWidth() > 0:
            x0.append(line.x())
            x1.append(line.x() + line.naturalTextWidth())
            y.append(line.y())
            h.append(line.height())
    n = len(x0)
    return BlockGeometry(key, kind, role, np.full(n, -1, np.int64), np.array(x0, float), np.array(x1, float),
                         np.array(y, float), np.array(h, float), np.zeros(n, np.int64), layout.lineCount())


def _body_boxes(layout, plan: DocumentPlan, bpos: int, bend: int, first: int) -> tuple[np.ndarray, ...]:
    """(token, x0, x1, y, h, line) of the token boxes from block offset ``first`` on;
    ``bend`` is the block's last document position (its separator is not drawn)."""
    token, x0, x1, y, h, number = [], [], [], [], [], []
    lo = int(np.searchsorted(plan.ends, bpos + first, "right"))
    hi = int(np.searchsorted(plan.starts, bend, "left"))
    line, line_start, line_end = None, 0, -1
    for offset, (s, e) in enumerate(zip(plan.starts[lo:hi].tolist(), plan.ends[lo:hi].tolist())):
        s = max(s - bpos, first)
        e = min(e, bend) - bpos
        while s < e:
            if not (line_start <= s < line_end):
                line = layout.lineForTextPosition(s)
                line_start = line.textStart()
                line_end = line_start + line.textLength()
            box_end = min(e, line_end)
            left = line.cursorToX(s)[0]
            right = line.cursorToX(box_end)[0]
            if right > left:
                token.append(lo + offset)
                x0.append(left)
                x1.append(right)
                y.append(line.y())
                h.append(line.height())
                number.append(line.lineNumber())
            if box_end <= s:
                break
            s = box_end
    return (np.array(token, np.int64), np.array(x0, float), np.array(x1, float), np.array(y, float),
            np.array(h, float), np.array(number, np.int64))


def visible_blocks(view: QPlainTextEdit, plan: DocumentPlan, cache: dict[int, BlockGeometry]):
    """(block, its viewport rect, geometry) for each block on screen."""
    offset = view.contentOffset()
    height = view.viewport().height()
    block = view.firstVisibleBlock()
    while block.isValid():
        rect = view.blockBoundingGeometry(block).translated(offset)
        if rect.top() > height:
            break
        if block.isVisible() and rect.bottom() >= 0:
            geometry = block_geometry(view, block, plan, cache)
            if geometry is not None:
                yield block, rect, geometry
        block = block.next()


def collect_frame(view: QPlainTextEdit, plan: DocumentPlan, cache: dict[int, BlockGeometry],
                  key: tuple) -> Frame:
    """Every box on screen, in viewport coordinates."""
    tokens, x0, x1, y, h = [], [], [], [], []
    lines, bodies = [], []
    for _, rect, g in visible_blocks(view, plan, cache):
        ox, oy = rect.left(), rect.top()
        if g.kind == "body":
            bodies.append((g.role, oy, rect.height()))
            if len(g.token):
                tokens.append(g.token)
                x0.append(g.x0 + ox)
                x1.append(g.x1 + ox)
                y.append(g.y + oy)
                h.append(g.h)
        else:
            for i in range(len(g.token)):
                lines.append((g.kind, g.role, float(g.x0[i] + ox), float(g.y[i] + oy),
                              float(g.x1[i] - g.x0[i]), float(g.h[i])))
    if tokens:
        arrays = [np.concatenate(a) for a in (tokens, x0, x1, y, h)]
    else:
        arrays = [np.zeros(0, np.int64)] + [np.zeros(0, float) for _ in range(4)]
    return Frame(key, *arrays, lines=lines, bodies=bodies)


def colour_keys(conv: Conversation, rows: np.ndarray) -> np.ndarray:
    """One colour key per table row (see :data:`KEY_STRIDE`)."""
    table = conv.table
    framing = table.framing
    ids, starts = table.chunk_spans()
    if not len(ids):
        return np.zeros(len(rows), np.int64)
    peaks = conv.chunk_peaks()[1]  # the score pruning ranks by (peak or top-k mean)
    content = ~framing[starts]
    lo = float(peaks[content].min()) if content.any() else 0.0
    hi = float(peaks[content].max()) if content.any() else 0.0
    span = np.searchsorted(starts, rows, "right") - 1
    tint = colors.peak_levels(peaks[span], lo, hi)
    visible_ids = ids[np.unique(span)].tolist()
    tool_ids = [c for c in visible_ids if conv.chunks[c].tool_result]
    if tool_ids:
        tint[np.isin(table.chunk_id[rows], tool_ids)] = TOOL_TINT
    return tint + KEY_STRIDE * highlight_steps(conv, rows)


def highlight_steps(conv: Conversation, rows: np.ndarray) -> np.ndarray:
    """1 .. HIGHLIGHT_LEVELS for rows among the brightest ``highlight_fraction`` of the
    scored tokens (by rank within that top share), 0 for the rest.  Nothing is lit
    when every token has the same brightness (a fresh, fail-bright context)."""
    table = conv.table
    brightness = table.brightness
    steps = np.zeros(len(rows), np.int64)
    scored = brightness[~table.framing]
    count = int(round(len(scored) * conv.settings.chat.highlight_fraction))
    if count <= 0 or not scored.size:
        return steps
    low, high = scored.min(), scored.max()
    if high <= low:
        return steps
    kth = len(scored) - count
    threshold = np.partition(scored, kth)[kth]
    values = brightness[rows]
    if threshold <= low:  # most tokens tie at the bottom: light only those above it
        top = np.sort(scored[scored > threshold])
        lit = values > threshold
    else:
        top = np.sort(scored[scored >= threshold])
        lit = values >= threshold
    lit &= ~table.framing[rows]
    if top.size and lit.any():
        rank = np.searchsorted(top, values[lit], "left") / max(len(top) - 1, 1)
        levels = colors.HIGHLIGHT_LEVELS
        steps[lit] = 1 + np.clip(np.rint(rank * (levels - 1)), 0, levels - 1).astype(np.int64)
    return steps


def character_at(view, point: QPoint) -> tuple[QTextBlock, int] | None:
    """The block under a viewport point and the document position of the character
    there; None past the end of a line or outside the text."""
    block = view.cursorForPosition(point).block()
    layout = block.layout()
    geo = view.blockBoundingGeometry(block).translated(view.contentOffset())
    if layout is None or not geo.contains(QPointF(point)):
        return None
    local = QPointF(point) - geo.topLeft()
    for i in range(layout.lineCount()):
        line = layout.lineAt(i)
        if line.y() <= local.y() < line.y() + line.height():
            if local.x() > line.x() + line.naturalTextWidth():
                return None
            return block, block.position() + line.xToCursor(local.x(), line.CursorPosition.CursorOnCharacter)
    return None


def token_index_at(view, plan, point: QPoint) -> int | None:
    """Index (into the plan's token arrays) of the token under a viewport point."""
    if not plan.rows.size:
        return None
    found = character_at(view, point)
    if found is None:
        return None
    position = found[1]
    index = int(np.searchsorted(plan.starts, position, "right")) - 1
    return index if index >= 0 and position < plan.ends[index] else None
