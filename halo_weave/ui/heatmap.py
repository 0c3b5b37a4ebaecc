"""The heatmap: the live context as read-only text, coloured by brightness.

Text is inserted once (streamed tokens are appended in one batch per frame).  Colour is
never stored in the document: :meth:`HeatmapView.paintEvent` paints it for the visible
blocks only, straight from the numpy brightness column, one batch of rectangles per
colour, at most once per frame.  Three layers:

1. under the text, a yellow background (alpha 0.2–0.5 by rank) behind the brightest
   ``highlight_fraction`` of the tokens;
2. the text itself, drawn white by ``QPlainTextEdit``;
3. over the text, in *darken* mode (per channel minimum), the colour of each token's
   chunk (peak brightness on the dynamic olive → yellow → gold scale, cyan for tool
   results, grey for the system prompt).  White text becomes exactly that colour while
   the dark background, darker than every scale colour, is left as it is; the
   highlighted tokens, left out of this layer, stay white, as seed 001 §4 asks.

Token geometry (x range and line of each token) is cached per block, keyed by the
block's revision and the viewport width, so a brightness change costs only numpy work
plus the rectangle batches.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QEvent, QPoint, QPointF, QRect, QRectF, QSize, Qt, QTimer, Signal
from PySide6.QtGui import (
    QAction,
    QColor,
    QContextMenuEvent,
    QGuiApplication,
    QPainter,
    QPaintEvent,
    QPalette,
    QPen,
    QTextBlock,
    QTextCursor,
    QTextOption,
)
from PySide6.QtWidgets import QMenu, QPlainTextEdit, QToolTip, QWidget

from ..conversation import Chunk, Conversation
from . import colors
from .heatmap_layout import DocumentPlan, build_plan

#: Minimum milliseconds between two repaints (one frame at 60 Hz).
FRAME_MS = 16


@dataclass
class _BlockGeometry:
    """Token pieces of one laid-out block, relative to the block's top-left."""

    key: tuple
    kind: str
    role: str
    token: np.ndarray  # index into the plan's per-token arrays
    x0: np.ndarray
    x1: np.ndarray
    y: np.ndarray
    h: np.ndarray


class _Gutter(QWidget):
    """The strip left of the text: a role bar per turn and 📌 on pinned chunks."""

    def __init__(self, view: "HeatmapView") -> None:
        super().__init__(view)
        self._view = view

    def sizeHint(self) -> QSize:
        return QSize(self._view.gutter_width(), 0)

    def paintEvent(self, event: QPaintEvent) -> None:
        self._view._paint_gutter(self, event)


class HeatmapView(QPlainTextEdit):
    """Read-only heatmap of a :class:`Conversation`'s live context.

    Methods: ``set_conversation(conv)``; ``rebuild()`` after a prune, resurrection,
    merge or open; ``append_streamed()`` after tokens were appended to the open turn;
    ``refresh_brightness()`` after brightness changed; ``flush()`` does the pending
    frame now (tests, benchmarks); ``chunk_at(viewport_point)``;
    ``scroll_to_chunk(chunk_id)``; ``context_menu_for(viewport_point) -> QMenu``;
    ``tooltip_for(chunk_id) -> str``; ``chunk_rect(chunk_id) -> QRect | None`` (viewport
    rectangle of the chunk's visible part); ``pinned_marker_chunks() -> list[int]``
    (pinned chunks whose 📌 is on screen).

    Signals (user intent, never acted on here): ``pin_requested(chunk_id, pinned)``,
    ``merge_requested(chunk_id)`` (with the next chunk of its turn),
    ``delete_requested(chunk_id)`` (prune by hand).
    """

    pin_requested = Signal(int, bool)
    merge_requested = Signal(int)
    delete_requested = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setUndoRedoEnabled(False)
        self.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        self.setMouseTracking(True)
        palette = self.palette()
        # White text is what the darken layer tints; see the module docstring.
        palette.setColor(QPalette.ColorRole.Text, QColor(255, 255, 255))
        palette.setColor(QPalette.ColorRole.Base, QColor(22, 22, 26))
        self.setPalette(palette)
        self._conv: Conversation | None = None
        self._plan = DocumentPlan()
        self._geometry: dict[int, _BlockGeometry] = {}
        self._pending_append = False
        self._frame = QTimer(self)
        self._frame.setSingleShot(True)
        self._frame.setInterval(FRAME_MS)
        self._frame.timeout.connect(self.flush)
        self._level_brushes = colors.level_colors()
        self._highlight_brushes = colors.highlight_colors()
        self._tool_color = colors.qcolor(colors.TOOL_CYAN)
        self._kind_colors = {
            "system": colors.qcolor(colors.UNSCORED_GREY),
            "gap": colors.qcolor(colors.UNSCORED_GREY),
        }
        self._role_colors = {r: colors.qcolor(c) for r, c in colors.ROLE_COLORS.items()}
        self._pin_text = colors.emoji_or(self.font(), "📌", "")
        self._gutter = _Gutter(self)
        self.updateRequest.connect(self._on_update_request)
        self._update_margins()

    # ------------------------------------------------------------------ public API
    def set_conversation(self, conv: Conversation | None) -> None:
        """Show ``conv`` (None clears the view)."""
        self._conv = conv
        self.rebuild()

    def conversation(self) -> Conversation | None:
        return self._conv

    def rebuild(self) -> None:
        """Lay out the whole live context again (after prune/resurrect/merge/open)."""
        bar = self.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 1
        old_value = bar.value()
        self._geometry.clear()
        self._pending_append = False
        if self._conv is None:
            self._plan = DocumentPlan()
            self.setPlainText("")
        else:
            self._plan, text = build_plan(self._conv)
            self.setPlainText(text)
        bar.setValue(bar.maximum() if at_bottom else min(old_value, bar.maximum()))
        self._schedule()

    def append_streamed(self) -> None:
        """New tokens were appended to the open turn: show them with the next frame."""
        self._pending_append = True
        self._schedule()

    def refresh_brightness(self) -> None:
        """Brightness changed: repaint with the next frame."""
        self._schedule()

    def flush(self) -> None:
        """Do the pending frame now: append streamed text, then request one repaint."""
        self._frame.stop()
        if self._pending_append:
            self._pending_append = False
            self._append_pending_text()
        self.viewport().update()
        self._gutter.update()

    def chunk_at(self, point: QPoint | QPointF) -> int | None:
        """The chunk under a viewport point, or None (system prompt, labels, margins)."""
        index = self._token_index_at(QPoint(int(point.x()), int(point.y())))
        if index is None or self._conv is None:
            return None
        row = int(self._plan.rows[index])
        if row >= len(self._conv.table):
            return None
        return int(self._conv.table.chunk_id[row])

    def scroll_to_chunk(self, chunk_id: int) -> None:
        """Scroll so the chunk's first line is near the top of the view."""
        index = self._first_token_of(chunk_id)
        if index is None:
            return
        position = int(self._plan.starts[index])
        block = self.document().findBlock(position)
        layout = block.layout()
        line = 0
        if layout is not None and layout.lineCount():
            line = layout.lineForTextPosition(position - block.position()).lineNumber()
        # QPlainTextEdit scrolls in lines: a block's first line number plus the line in it.
        self.verticalScrollBar().setValue(block.firstLineNumber() + max(line, 0))
        self._schedule()

    def tooltip_for(self, chunk_id: int) -> str:
        """Turn, role, chunk id, token count and peak brightness of a chunk."""
        conv = self._conv
        chunk = conv.chunks.get(chunk_id) if conv else None
        if chunk is None:
            return ""
        kind = "tool result" if chunk.tool_result else chunk.role
        anchor = " (anchor)" if chunk.anchor else ""
        lines = [
            f"Turn {chunk.turn_id} · {kind} · chunk {chunk.id} (sentence {chunk.sentence_id}{anchor})",
            f"{chunk.token_count:,} tokens · peak brightness {conv.chunk_peak(chunk_id):,}",
        ]
        if chunk.pinned:
            lines.append("📌 pinned: never pruned")
        return "\n".join(lines)

    def context_menu_for(self, point: QPoint | QPointF) -> QMenu:
        """The context menu at a viewport point (chunk actions only over a chunk)."""
        menu = QMenu(self)
        chunk_id = self.chunk_at(point)
        chunk = self._conv.chunks.get(chunk_id) if (self._conv and chunk_id is not None) else None
        if chunk is not None:
            title = menu.addAction(f"Chunk {chunk.id} · turn {chunk.turn_id} · {chunk.role}")
            title.setEnabled(False)
            pin = menu.addAction("Unpin" if chunk.pinned else "📌 Pin (never prune)")
            pin.triggered.connect(lambda: self.pin_requested.emit(chunk.id, not chunk.pinned))
            merge = menu.addAction("Merge with next chunk")
            merge.setEnabled(self._can_merge(chunk))
            merge.triggered.connect(lambda: self.merge_requested.emit(chunk.id))
            delete = menu.addAction("Delete (prune now)")
            delete.setEnabled(not self._in_open_turn(chunk))
            delete.triggered.connect(lambda: self.delete_requested.emit(chunk.id))
            menu.addSeparator()
            copy_chunk = menu.addAction("Copy chunk text")
            copy_chunk.triggered.connect(lambda: self._copy_chunk(chunk.id))
        copy = menu.addAction("Copy selection")
        copy.setShortcut("Ctrl+C")
        copy.setEnabled(self.textCursor().hasSelection())
        copy.triggered.connect(self.copy)
        select_all = menu.addAction("Select all")
        select_all.triggered.connect(self.selectAll)
        return menu

    def chunk_rect(self, chunk_id: int) -> QRect | None:
        """Viewport rectangle covering the visible tokens of a chunk (None if off screen)."""
        rect = QRectF()
        for index, piece in self._visible_pieces():
            if self._chunk_of_token(index) == chunk_id:
                rect = rect.united(piece)
        return rect.toAlignedRect() if not rect.isNull() else None

    def pinned_marker_chunks(self) -> list[int]:
        """Pinned chunks whose marker is on screen now."""
        return [chunk_id for chunk_id, _, _ in self._pin_markers()]

    def gutter_width(self) -> int:
        return int(self.fontMetrics().height() * 1.6)

    # ------------------------------------------------------------------ Qt overrides
    def paintEvent(self, event: QPaintEvent) -> None:
        layers = self._frame_layers()
        if layers is not None:
            highlight, tint = layers
            painter = QPainter(self.viewport())
            painter.setPen(Qt.PenStyle.NoPen)
            for color, rects in highlight:
                painter.setBrush(color)
                painter.drawRects(rects)
            painter.end()
        super().paintEvent(event)
        if layers is not None:
            painter = QPainter(self.viewport())
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setCompositionMode(QPainter.CompositionMode.CompositionMode_Darken)
            for color, rects in tint:
                painter.setBrush(color)
                painter.drawRects(rects)
            painter.end()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        rect = self.contentsRect()
        self._gutter.setGeometry(QRect(rect.left(), rect.top(), self.gutter_width(), rect.height()))

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:
            self._geometry.clear()
            self._pin_text = colors.emoji_or(self.font(), "📌", "")
            self._update_margins()

    def viewportEvent(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            chunk_id = self.chunk_at(event.pos())
            if chunk_id is None:
                QToolTip.hideText()
            else:
                QToolTip.showText(event.globalPos(), self.tooltip_for(chunk_id), self.viewport())
            return True
        return super().viewportEvent(event)

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:
        menu = self.context_menu_for(event.pos())
        menu.exec(event.globalPos())
        menu.deleteLater()

    # ------------------------------------------------------------------ internals
    def _schedule(self) -> None:
        if not self._frame.isActive():
            self._frame.start()

    def _update_margins(self) -> None:
        self.setViewportMargins(self.gutter_width(), 0, 0, 0)

    def _on_update_request(self, rect: QRect, dy: int) -> None:
        if dy:
            self._gutter.scroll(0, dy)
        else:
            self._gutter.update(0, rect.y(), self._gutter.width(), rect.height())

    def _append_pending_text(self) -> None:
        if self._conv is None:
            return
        bar = self.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 1
        if not self._plan.extend(self._conv):
            self.rebuild()
            return
        text = self._plan.take_text()
        if text:
            cursor = QTextCursor(self.document())
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.insertText(text)
        if at_bottom:
            bar.setValue(bar.maximum())

    def _in_open_turn(self, chunk: Chunk) -> bool:
        turn = self._conv.open_turn if self._conv else None
        return turn is not None and turn.turn_id == chunk.turn_id

    def _can_merge(self, chunk: Chunk) -> bool:
        """Whether "merge with next" can apply (the core has the final word)."""
        if self._in_open_turn(chunk):
            return False
        content = self._conv.content_chunks(chunk.turn_id)
        index = next((i for i, c in enumerate(content) if c.id == chunk.id), None)
        if index is None or index + 1 >= len(content):
            return False
        nxt = content[index + 1]
        return nxt.live and nxt.start == chunk.end

    def _copy_chunk(self, chunk_id: int) -> None:
        if self._conv is not None:
            QGuiApplication.clipboard().setText(self._conv.chunk_text(chunk_id))

    def _token_index_at(self, point: QPoint) -> int | None:
        """Index (into the plan's token arrays) of the token under a viewport point."""
        plan = self._plan
        if not plan.rows.size:
            return None
        cursor = self.cursorForPosition(point)
        block = cursor.block()
        layout = block.layout()
        geo = self.blockBoundingGeometry(block).translated(self.contentOffset())
        if layout is None or not geo.contains(QPointF(point)):
            return None
        local = QPointF(point) - geo.topLeft()
        for i in range(layout.lineCount()):
            line = layout.lineAt(i)
            if line.y() <= local.y() < line.y() + line.height():
                if local.x() > line.x() + line.naturalTextWidth():
                    return None
                rel = line.xToCursor(local.x(), line.CursorPosition.CursorOnCharacter)
                position = block.position() + rel
                index = int(np.searchsorted(plan.starts, position, "right")) - 1
                if index >= 0 and position < plan.ends[index]:
                    return index
                return None
        return None

    def _first_token_of(self, chunk_id: int) -> int | None:
        conv = self._conv
        chunk = conv.chunks.get(chunk_id) if conv else None
        if chunk is None or not chunk.live:
            return None
        row = conv.chunk_rows(chunk).start
        index = int(np.searchsorted(self._plan.rows, row))
        if index >= len(self._plan.rows):
            return None
        found = int(self._plan.rows[index])
        if found >= len(conv.table) or int(conv.table.chunk_id[found]) != chunk_id:
            return None
        return index

    def _chunk_of_token(self, index: int) -> int:
        return int(self._conv.table.chunk_id[int(self._plan.rows[index])])

    # -- geometry
    def _region_of(self, position: int) -> tuple[str, str]:
        plan = self._plan
        i = bisect.bisect_right(plan.region_start, position) - 1
        if i < 0:
            return "none", ""
        return plan.region_kind[i], plan.region_role[i]

    def _block_geometry(self, block: QTextBlock) -> _BlockGeometry | None:
        layout = block.layout()
        if layout is None or layout.lineCount() == 0:
            return None
        key = (block.revision(), block.position(), block.length(), self.viewport().width())
        cached = self._geometry.get(block.blockNumber())
        if cached is not None and cached.key == key:
            return cached
        kind, role = self._region_of(block.position())
        token, x0, x1, y, h = [], [], [], [], []
        if kind == "body":
            plan = self._plan
            bpos = block.position()
            bend = bpos + block.length() - 1  # the block separator is not drawn
            lo = int(np.searchsorted(plan.ends, bpos, "right"))
            hi = int(np.searchsorted(plan.starts, bend, "left"))
            starts = plan.starts[lo:hi].tolist()
            ends = plan.ends[lo:hi].tolist()
            line = layout.lineAt(0)
            line_end = line.textStart() + line.textLength()
            for offset, (s, e) in enumerate(zip(starts, ends)):
                s = max(s, bpos) - bpos
                e = min(e, bend) - bpos
                while s < e:
                    if not (line.textStart() <= s < line_end):
                        line = layout.lineForTextPosition(s)
                        line_end = line.textStart() + line.textLength()
                    piece_end = min(e, line_end)
                    left = line.cursorToX(s)[0]
                    right = line.cursorToX(piece_end)[0]
                    if right > left:
                        token.append(lo + offset)
                        x0.append(left)
                        x1.append(right)
                        y.append(line.y())
                        h.append(line.height())
                    if piece_end <= s:
                        break
                    s = piece_end
        else:
            for i in range(layout.lineCount()):
                line = layout.lineAt(i)
                if line.naturalTextWidth() > 0:
                    token.append(-1)
                    x0.append(line.x())
                    x1.append(line.x() + line.naturalTextWidth())
                    y.append(line.y())
                    h.append(line.height())
        geometry = _BlockGeometry(
            key, kind, role, np.array(token, np.int64), np.array(x0), np.array(x1),
            np.array(y), np.array(h),
        )
        self._geometry[block.blockNumber()] = geometry
        return geometry

    def _visible_blocks(self, with_rect: bool = False):
        """(block, top-left offset, geometry) for the blocks on screen."""
        offset = self.contentOffset()
        height = self.viewport().height()
        block = self.firstVisibleBlock()
        while block.isValid():
            geo = self.blockBoundingGeometry(block).translated(offset)
            if geo.top() > height:
                break
            if block.isVisible() and geo.bottom() >= 0:
                geometry = self._block_geometry(block)
                if geometry is not None:
                    yield block, (geo if with_rect else geo.topLeft()), geometry
            block = block.next()

    def _visible_pieces(self):
        for _, top_left, geometry in self._visible_blocks():
            for i in range(len(geometry.token)):
                if geometry.token[i] >= 0:
                    yield int(geometry.token[i]), QRectF(
                        top_left.x() + geometry.x0[i], top_left.y() + geometry.y[i],
                        geometry.x1[i] - geometry.x0[i], geometry.h[i],
                    )

    # -- colour
    def _frame_layers(self):
        """(highlight batches, tint batches): lists of (QColor, [QRectF])."""
        conv = self._conv
        if conv is None or self._plan.length == 0:
            return None
        tokens, x0, x1, y, h = [], [], [], [], []
        other: list[tuple[QColor, list[QRectF]]] = []
        for _, top_left, g in self._visible_blocks():
            ox, oy = top_left.x(), top_left.y()
            if g.kind == "body":
                if len(g.token):
                    tokens.append(g.token)
                    x0.append(g.x0 + ox)
                    x1.append(g.x1 + ox)
                    y.append(g.y + oy)
                    h.append(g.h)
            elif len(g.token):
                color = self._kind_colors.get(g.kind) or self._role_colors.get(g.role)
                if color is not None:
                    other.append((color, _rects(g.x0 + ox, g.y + oy, g.x1 - g.x0, g.h)))
        if not tokens:
            return [], other
        token = np.concatenate(tokens)
        x0, x1, y, h = (np.concatenate(a) for a in (x0, x1, y, h))
        rows = self._plan.rows[token]
        table = conv.table
        valid = rows < len(table)
        if not valid.all():
            token, rows, x0, x1, y, h = (a[valid] for a in (token, rows, x0, x1, y, h))
        level, tool, highlight_level = self._token_colours(rows)
        width = x1 - x0
        highlight: list[tuple[QColor, list[QRectF]]] = []
        lit = highlight_level >= 0
        for step in np.unique(highlight_level[lit]):
            sel = highlight_level == step
            highlight.append((self._highlight_brushes[int(step)], _rects(x0[sel], y[sel], width[sel], h[sel])))
        tint = other
        unlit = ~lit
        sel = unlit & tool
        if sel.any():
            tint.append((self._tool_color, _rects(x0[sel], y[sel], width[sel], h[sel])))
        unlit &= ~tool
        for step in np.unique(level[unlit]):
            sel = unlit & (level == step)
            tint.append((self._level_brushes[int(step)], _rects(x0[sel], y[sel], width[sel], h[sel])))
        return highlight, tint

    def _token_colours(self, rows: np.ndarray):
        """For table rows: chunk scale step, tool-result flag, highlight step (-1 = none)."""
        conv = self._conv
        table = conv.table
        brightness = table.brightness
        ids, starts = table.segments()
        peaks = np.maximum.reduceat(brightness, starts)
        content = ~table.framing[starts]
        lo = float(peaks[content].min()) if content.any() else 0.0
        hi = float(peaks[content].max()) if content.any() else 0.0
        segment = np.searchsorted(starts, rows, "right") - 1
        level = colors.peak_levels(peaks[segment], lo, hi)
        tool_ids = [c for c in ids[np.unique(segment)].tolist() if conv.chunks[c].tool_result]
        tool = np.isin(table.chunk_id[rows], tool_ids) if tool_ids else np.zeros(len(rows), bool)
        highlight_level = np.full(len(rows), -1, np.int64)
        scored = brightness[~table.framing]
        fraction = conv.settings.highlight_fraction
        count = int(round(len(scored) * fraction))
        if count > 0 and scored.size and scored.max() > scored.min():
            kth = len(scored) - count
            threshold = np.partition(scored, kth)[kth]
            if threshold <= scored.min():
                top = np.sort(scored[scored > threshold])
                lit = brightness[rows] > threshold
            else:
                top = np.sort(scored[scored >= threshold])
                lit = brightness[rows] >= threshold
            lit &= ~table.framing[rows]
            if top.size and lit.any():
                rank = np.searchsorted(top, brightness[rows][lit], "left") / max(len(top) - 1, 1)
                steps = np.clip(np.rint(rank * (colors.HIGHLIGHT_LEVELS - 1)), 0, colors.HIGHLIGHT_LEVELS - 1)
                highlight_level[lit] = steps.astype(np.int64)
        return level, tool, highlight_level

    # -- gutter
    def _pin_markers(self):
        """(chunk id, viewport y, line height) of pinned chunks starting on screen."""
        conv = self._conv
        if conv is None:
            return []
        markers = []
        offset = self.contentOffset()
        height = self.viewport().height()
        document = self.document()
        for chunk in conv.chunks.values():
            if not (chunk.pinned and chunk.live):
                continue
            index = self._first_token_of(chunk.id)
            if index is None:
                continue
            position = int(self._plan.starts[index])
            block = document.findBlock(position)
            layout = block.layout()
            if layout is None or layout.lineCount() == 0:
                continue
            top = self.blockBoundingGeometry(block).translated(offset).top()
            if top > height:
                continue
            line = layout.lineForTextPosition(position - block.position())
            y = top + line.y()
            if -line.height() <= y <= height:
                markers.append((chunk.id, y, line.height()))
        return markers

    def _paint_gutter(self, gutter: QWidget, event: QPaintEvent) -> None:
        painter = QPainter(gutter)
        painter.fillRect(event.rect(), self.palette().color(QPalette.ColorRole.Base).darker(115))
        bar = max(2, gutter.width() // 8)
        for _, rect, g in self._visible_blocks(with_rect=True):
            color = self._role_colors.get(g.role) if g.kind == "body" else None
            if color is not None:
                painter.fillRect(QRectF(gutter.width() - bar - 2, rect.top(), bar, rect.height()), color.darker(170))
        for _, y, line_height in self._pin_markers():
            rect = QRectF(0, y, gutter.width() - bar - 2, line_height)
            if self._pin_text:
                painter.setPen(QColor(255, 255, 255))
                painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, self._pin_text)
            else:
                _draw_pin(painter, rect)
        painter.end()


def _rects(x: np.ndarray, y: np.ndarray, w: np.ndarray, h: np.ndarray) -> list[QRectF]:
    return [QRectF(a, b, c, d) for a, b, c, d in zip(x.tolist(), y.tolist(), w.tolist(), h.tolist())]


def _draw_pin(painter: QPainter, rect: QRectF) -> None:
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
