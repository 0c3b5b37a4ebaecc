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

What a streamed token costs is kept to a few lines of painting:

* a frame asks Qt to repaint only the lines where a token's colour key changed (one
  rectangle per line, spanning the changed tokens), and :meth:`HeatmapView.paintEvent`
  paints each rectangle of a scattered update on its own, so Qt draws the text of
  those lines only rather than of everything between them;
* the growing paragraph is cut into blocks where its lines wrap anyway
  (:data:`STREAM_BLOCK_LINES`), so Qt's re-layout and repaint of the changed block
  stay a few lines long; :meth:`HeatmapView.rebuild` at the end of the turn (or
  after a width change) joins them again, and copied text never contains the cuts.
"""

from __future__ import annotations

import bisect

import numpy as np
from PySide6.QtCore import QEvent, QMimeData, QPoint, QPointF, QRect, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import (
    QColor,
    QContextMenuEvent,
    QGuiApplication,
    QPainter,
    QPaintEvent,
    QPalette,
    QTextCursor,
    QTextOption,
)
from PySide6.QtWidgets import QMenu, QPlainTextEdit, QToolTip, QWidget

from ..conversation import Chunk, Conversation
from . import colors
from .heatmap_frame import (
    KEY_STRIDE,
    TOOL_TINT,
    BlockGeometry,
    Frame,
    colour_keys,
    collect_frame,
    region_of,
    token_index_at,
)
from .code_blocks import CodeBlockHighlighter, paint_code_backgrounds
from .follow import Follower
from .heatmap_gutter import Gutter, pin_markers
from .heatmap_layout import DocumentPlan, build_plan

#: Minimum milliseconds between two repaints (one frame at 60 Hz).
FRAME_MS = 16
#: Beyond this many recoloured lines a frame repaints the whole viewport at once.
MAX_DIRTY_LINES = 24
#: A streamed paragraph is cut into a new block once its last block has this many lines.
STREAM_BLOCK_LINES = 4
#: An update region of at most this many rectangles is painted rectangle by rectangle.
MAX_SEPARATE_RECTS = 32


class HeatmapView(QPlainTextEdit):
    """Read-only heatmap of a :class:`Conversation`'s live context.

    Methods: ``set_conversation(conv)``; ``rebuild()`` after a prune, resurrection,
    merge or open; ``append_streamed()`` after tokens were appended to the open turn
    (their attention moved brightness too); ``refresh_brightness()`` after brightness
    alone changed; ``flush()`` does the pending frame now (tests, benchmarks); ``chunk_at(viewport_point)``;
    ``scroll_to_chunk(chunk_id)``; ``context_menu_for(viewport_point) -> QMenu``;
    ``turn_at(viewport_point)`` and ``message_text(turn_id)`` (the context menu's "Copy
    message"); ``follower`` (follows the answer, "Jump to latest");
    ``tooltip_for(chunk_id) -> str``; ``chunk_rect(chunk_id) -> QRect | None`` (viewport
    rectangle of the chunk's visible part); ``pinned_marker_chunks() -> list[int]``
    (pinned chunks whose 📌 is on screen).

    Signals (user intent, never acted on here): ``pin_requested(chunk_id, pinned)``,
    ``merge_requested(chunk_id)`` (with the next chunk of its turn),
    ``prune_requested(chunk_id)`` (prune by hand).
    """

    pin_requested = Signal(int, bool)
    merge_requested = Signal(int)
    prune_requested = Signal(int)
    #: A frame with streamed tokens was done (the window refreshes its stats with it).
    streamed_frame = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setUndoRedoEnabled(False)
        self.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        self.setMouseTracking(True)
        self.setCursorWidth(0)  # selectable by keyboard, but no caret in a read-only view
        palette = self.palette()
        # White text is what the darken layer tints; see the module docstring.
        palette.setColor(QPalette.ColorRole.Text, QColor(255, 255, 255))
        palette.setColor(QPalette.ColorRole.Base, QColor(22, 22, 26))
        self.setPalette(palette)
        self._conv: Conversation | None = None
        self._plan = DocumentPlan()
        self._geometry: dict[int, BlockGeometry] = {}
        self._pending_append = False
        self._frame_timer = QTimer(self)
        self._frame_timer.setSingleShot(True)
        self._frame_timer.setInterval(FRAME_MS)
        self._frame_timer.timeout.connect(self.flush)
        self._frame: Frame | None = None
        self._keys: np.ndarray | None = None  # colour key per piece of self._frame
        self._shown = np.zeros(0, np.int64)  # last painted colour key per plan token
        self._full_update = True
        self._gutter_signature: tuple = ()
        self._split_width = -1  # viewport width the soft breaks were cut at
        self._rejoin_timer = QTimer(self)
        self._rejoin_timer.setSingleShot(True)
        self._rejoin_timer.setInterval(120)
        self._rejoin_timer.timeout.connect(self.rebuild)
        self._level_brushes = colors.level_colors()
        self._highlight_brushes = colors.highlight_colors()
        self._tool_color = colors.qcolor(colors.TOOL_CYAN)
        self._kind_colors = {
            "system": colors.qcolor(colors.UNSCORED_GREY),
            "gap": colors.qcolor(colors.UNSCORED_GREY),
        }
        self._role_colors = {r: colors.qcolor(c) for r, c in colors.ROLE_COLORS.items()}
        self._pin_text = colors.emoji_or(self.font(), "📌", "")
        # The view fills its own background (paintEvent), which lets Qt scroll the
        # viewport by moving pixels when a streamed line is added at the bottom.
        self.viewport().setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent, True)
        self._gutter = Gutter(self)
        self.updateRequest.connect(self._on_update_request)
        self._update_margins()
        #: Keeps the newest text in view unless the user scrolled up (``follower.button``
        #: jumps back).
        self.follower = Follower(self)
        #: Fenced code in monospace (its background is painted in paintEvent).
        self._code = CodeBlockHighlighter()

    # ------------------------------------------------------------------ public API
    def set_conversation(self, conv: Conversation | None) -> None:
        """Show ``conv`` (None clears the view)."""
        self._conv = conv
        self.rebuild()
        self.follower.jump_to_latest()  # a conversation opens at its newest text

    def conversation(self) -> Conversation | None:
        return self._conv

    def rebuild(self) -> None:
        """Lay out the whole live context again (after prune/resurrect/merge/open)."""
        bar = self.verticalScrollBar()
        old_value = bar.value()
        self._rejoin_timer.stop()
        self._geometry.clear()
        self._pending_append = False
        self._invalidate(full=True)
        if self._conv is None:
            self._plan = DocumentPlan()
            self.setPlainText("")
        else:
            self._plan, text = build_plan(self._conv)
            attached = self._code.follow(self.document(), text, replaced=True)
            self.setPlainText(text)
            if attached:
                self._code.rehighlight()
        if self.follower.following:
            self.follower.scroll_to_end()
        else:
            bar.setValue(min(old_value, bar.maximum()))
            self.follower.content_changed(rebuilt=True)
        self._schedule()

    def append_streamed(self) -> None:
        """New tokens were appended to the open turn: show them, and the brightness their
        attention moved, with the next frame (``streamed_frame`` fires after it)."""
        self._pending_append = True
        self._schedule()

    def refresh_brightness(self) -> None:
        """Brightness changed: repaint with the next frame."""
        self._keys = None
        self._schedule()

    def flush(self) -> None:
        """Do the pending frame now: append streamed text, then ask Qt to repaint the
        pieces whose colour changed (the whole viewport when many did)."""
        self._frame_timer.stop()
        streamed = self._pending_append
        if streamed:
            self._pending_append = False
            self._append_pending_text()
        self._keys = None  # brightness moves with every token: colours are computed once per frame
        self._request_repaint()
        if streamed:
            self.streamed_frame.emit()

    def _request_repaint(self) -> None:
        frame = self._current_frame()
        if frame is None or self._full_update:
            self._full_update = False
            self.viewport().update()
            self._gutter.update()
            return
        keys = self._current_keys(frame)
        changed = np.flatnonzero(keys != self._shown_keys(frame.token))
        viewport = self.viewport()
        if len(changed):
            # One rectangle per line with a changed piece.
            order = changed[np.argsort(frame.y[changed], kind="stable")]
            ys = frame.y[order]
            starts = np.flatnonzero(np.concatenate(([True], ys[1:] != ys[:-1])))
            if len(starts) > MAX_DIRTY_LINES:
                viewport.update()
            else:
                # Whole lines: Qt draws a line's text whole anyway, and adjacent lines
                # merge into one rectangle of the update region.
                width = viewport.width()
                for y, h in zip(ys[starts].tolist(), frame.h[order][starts].tolist()):
                    viewport.update(QRectF(0, y, width, h).toAlignedRect())
        signature = (tuple(frame.bodies), tuple(pin_markers(self, frame)))
        if signature != self._gutter_signature:
            self._gutter_signature = signature
            self._gutter.update()

    def chunk_at(self, point: QPoint | QPointF) -> int | None:
        """The chunk under a viewport point, or None (system prompt, labels, margins)."""
        index = token_index_at(self, self._plan, QPoint(int(point.x()), int(point.y())))
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
        anchor = ", anchor" if chunk.anchor else ""
        lines = [
            f"Turn {chunk.turn_id} · {kind} · chunk {chunk.id} (S{chunk.chunk_index} of its turn{anchor})",
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
            prune = menu.addAction("Prune now")
            prune.setEnabled(not self._in_open_turn(chunk))
            prune.triggered.connect(lambda: self.prune_requested.emit(chunk.id))
            menu.addSeparator()
            copy_chunk = menu.addAction("Copy chunk text")
            copy_chunk.triggered.connect(lambda: self._copy_chunk(chunk.id))
        turn_id = self.turn_at(point)
        if turn_id is not None:
            role = self._conv.turns[turn_id].role
            copy_message = menu.addAction("Copy your message" if role == "user" else "Copy the answer")
            copy_message.setToolTip("The whole message as shown (its pruned paragraphs left out)")
            copy_message.triggered.connect(lambda: QGuiApplication.clipboard().setText(self.message_text(turn_id)))
        copy = menu.addAction("Copy selection")
        copy.setShortcut("Ctrl+C")
        copy.setEnabled(self.textCursor().hasSelection())
        copy.triggered.connect(self.copy)
        select_all = menu.addAction("Select all")
        select_all.triggered.connect(self.selectAll)
        return menu

    def turn_at(self, point: QPoint | QPointF) -> int | None:
        """The turn (message) under a viewport point, its label line included; None elsewhere."""
        if self._conv is None or not self._plan.region_start:
            return None
        position = self.cursorForPosition(QPoint(int(point.x()), int(point.y()))).position()
        i = bisect.bisect_right(self._plan.region_start, position) - 1
        turn_id = self._plan.region_turn[i] if i >= 0 else -1
        return turn_id if turn_id >= 0 and turn_id in self._conv.turns else None

    def message_text(self, turn_id: int) -> str:
        """A message's text as shown: its live chunks, without the chat template."""
        conv = self._conv
        return "".join(conv.chunk_text(c.id) for c in conv.content_chunks(turn_id) if c.live)

    def chunk_rect(self, chunk_id: int) -> QRect | None:
        """Viewport rectangle covering the visible tokens of a chunk (None if off screen)."""
        frame = self._current_frame()
        if frame is None or not len(frame.token):
            return None
        mine = np.flatnonzero(self._piece_chunks(frame) == chunk_id)
        if not len(mine):
            return None
        left, right = frame.x0[mine].min(), frame.x1[mine].max()
        top, bottom = frame.y[mine].min(), (frame.y[mine] + frame.h[mine]).max()
        return QRectF(left, top, right - left, bottom - top).toAlignedRect()

    def pinned_marker_chunks(self) -> list[int]:
        """Pinned chunks whose 📌 is on screen now."""
        frame = self._current_frame()
        return [chunk_id for chunk_id, _, _ in pin_markers(self, frame)] if frame else []

    def gutter_width(self) -> int:
        return int(self.fontMetrics().height() * 1.6)

    # ------------------------------------------------------------------ Qt overrides
    def paintEvent(self, event: QPaintEvent) -> None:
        frame = self._current_frame()
        if frame is None:
            viewport = self.viewport()
            painter = QPainter(viewport)
            painter.fillRect(event.rect(), viewport.palette().brush(viewport.backgroundRole()))
            painter.end()
            super().paintEvent(event)
            return
        region, bounds = event.region(), event.rect()
        rects = [bounds]
        if 1 < region.rectCount() <= MAX_SEPARATE_RECTS:
            parts = list(region)
            if sum(r.width() * r.height() for r in parts) * 2 < bounds.width() * bounds.height():
                rects = parts
        keys = self._current_keys(frame)
        hit = np.zeros(len(frame.token), bool)
        for rect in rects:
            hit |= ((frame.y + frame.h >= rect.top()) & (frame.y <= rect.bottom())
                    & (frame.x1 >= rect.left()) & (frame.x0 <= rect.right()))
        inside = np.flatnonzero(hit)
        keys_in = keys[inside]
        if len(inside):
            self._shown_keys(frame.token)  # grows the array when tokens were added
            self._shown[frame.token[inside]] = keys_in
        lit = keys_in >= KEY_STRIDE
        # The system clip is the update region: nothing outside it is touched.
        viewport = self.viewport()
        painter = QPainter(viewport)
        painter.fillRect(bounds, viewport.palette().brush(viewport.backgroundRole()))
        if self._code.active:
            paint_code_backgrounds(self, painter, QRectF(bounds))
        painter.setPen(Qt.PenStyle.NoPen)
        for step, batch in self._batches(frame, inside[lit], keys_in[lit] // KEY_STRIDE):
            painter.setBrush(self._highlight_brushes[step - 1])
            painter.drawRects(batch)
        painter.end()
        if len(rects) == 1:
            super().paintEvent(event)
        else:
            # Scattered lines: QPlainTextEdit draws every block that meets the bounding
            # rectangle of an update, so let it draw each rectangle on its own.
            for rect in rects:
                super().paintEvent(QPaintEvent(rect))
        painter = QPainter(self.viewport())
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setCompositionMode(QPainter.CompositionMode.CompositionMode_Darken)
        for tint, batch in self._batches(frame, inside[~lit], keys_in[~lit]):
            painter.setBrush(self._tool_color if tint == TOOL_TINT else self._level_brushes[tint])
            painter.drawRects(batch)
        for kind, role, x, y, w, h in frame.lines:
            if y + h >= bounds.top() and y <= bounds.bottom():
                color = self._kind_colors.get(kind) or self._role_colors.get(role)
                if color is not None:
                    painter.setBrush(color)
                    painter.drawRect(QRectF(x, y, w, h))
        painter.end()

    @staticmethod
    def _batches(frame: Frame, pieces: np.ndarray, keys: np.ndarray) -> list[tuple[int, list[QRectF]]]:
        """(key, rectangles) per distinct key of these pieces; adjacent pieces of one key
        on one line are merged into one rectangle."""
        if not len(pieces):
            return []
        order = np.lexsort((pieces, keys))
        pieces, keys = pieces[order], keys[order]
        x0, x1, y, h = frame.x0[pieces], frame.x1[pieces], frame.y[pieces], frame.h[pieces]
        # A run continues while the next piece has the same key, is on the same line and
        # touches this one.
        joins = ((keys[1:] == keys[:-1]) & (y[1:] == y[:-1]) & (np.abs(x0[1:] - x1[:-1]) < 0.5)
                 & (np.diff(pieces) == 1))
        starts = np.flatnonzero(np.concatenate(([True], ~joins)))
        ends = np.concatenate((starts[1:], [len(pieces)])) - 1
        rects = [
            QRectF(a, b, c, d)
            for a, b, c, d in zip(x0[starts].tolist(), y[starts].tolist(),
                                  (x1[ends] - x0[starts]).tolist(), h[starts].tolist())
        ]
        run_keys = keys[starts]
        groups = np.flatnonzero(np.concatenate(([True], run_keys[1:] != run_keys[:-1]))).tolist()
        bounds = groups[1:] + [len(rects)]
        return [(int(run_keys[g]), rects[g:e]) for g, e in zip(groups, bounds)]

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self._plan.soft_breaks and self.viewport().width() != self._split_width:
            self._rejoin_timer.start()  # the cuts no longer fall where lines wrap
        rect = self.contentsRect()
        self._gutter.setGeometry(QRect(rect.left(), rect.top(), self.gutter_width(), rect.height()))

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:
            self._geometry.clear()
            self._invalidate(full=True)
            self._pin_text = colors.emoji_or(self.font(), "📌", "")
            self._update_margins()

    def createMimeDataFromSelection(self) -> QMimeData:
        """The selected text as the context has it (without the streaming cuts)."""
        cursor = self.textCursor()
        text = cursor.selection().toPlainText()
        first, last = cursor.selectionStart(), cursor.selectionEnd()
        cuts = [p - first for p in self._plan.soft_breaks if first <= p < last]
        if cuts:
            units = bytearray(text.encode("utf-16-le"))
            for offset in reversed(cuts):
                del units[2 * offset : 2 * offset + 2]
            text = units.decode("utf-16-le")
        mime = QMimeData()
        mime.setText(text)
        return mime

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
        if not self._frame_timer.isActive():
            self._frame_timer.start()

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
        if not self._plan.extend(self._conv):
            self.rebuild()
            return
        text = self._plan.take_text()
        if text:
            document = self.document()
            layout = document.documentLayout()
            top = self.blockBoundingGeometry(document.lastBlock()).translated(self.contentOffset()).top()
            # QPlainTextDocumentLayout asks for a repaint of the whole viewport whenever
            # a block changes height (a streamed line wraps); only the last block(s)
            # changed, so hold its signals and repaint from that block down ourselves.
            layout.blockSignals(True)
            try:
                cursor = QTextCursor(document)
                cursor.movePosition(QTextCursor.MoveOperation.End)
                attached = self._code.follow(document, text)
                cursor.insertText(text)
                if attached:
                    self._code.rehighlight()  # the first fence: format it before it is measured
                self._cut_streamed_block()
            finally:
                layout.blockSignals(False)
            layout.documentSizeChanged.emit(layout.documentSize())
            viewport = self.viewport()
            top = max(int(top), 0)
            viewport.update(0, top, viewport.width(), viewport.height() - top)
            self._gutter.update(0, top, self._gutter.width(), viewport.height() - top)
            self.follower.content_changed()

    def _cut_streamed_block(self) -> None:
        """Start a new block at the last line of a long last block (see module docstring).

        Wrapping is greedy, so the lines before the cut stay where they are and the
        last line starts a block of its own exactly where it already was."""
        block = self.document().lastBlock()
        layout = block.layout()
        if layout is None or layout.lineCount() < STREAM_BLOCK_LINES:
            return
        if region_of(self._plan, block.position())[0] != "body":
            return
        position = block.position() + layout.lineAt(layout.lineCount() - 1).textStart()
        cursor = QTextCursor(self.document())
        cursor.setPosition(position)
        cursor.insertBlock()
        self._plan.soft_break(position)
        self._split_width = self.viewport().width()

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

    # -- frame
    def _invalidate(self, full: bool = False) -> None:
        self._frame = None
        self._keys = None
        if full:
            self._shown = np.zeros(0, np.int64)
            self._full_update = True

    def _current_frame(self) -> Frame | None:
        """The visible pieces, recollected when the view scrolled, resized or changed."""
        if self._conv is None or self._plan.length == 0:
            return None
        offset = self.contentOffset()
        # contentOffset() is relative to the first visible block (often 0, 0): the block
        # itself and the scroll position belong in the key, or a frame collected at one
        # scroll position is painted at another (boxes beside their words, or over empty
        # lines below the last paragraph).
        key = (self.firstVisibleBlock().blockNumber(), self.verticalScrollBar().value(),
               offset.x(), offset.y(), self.document().revision(), self.viewport().width(),
               self.viewport().height(), id(self._plan), len(self._plan.rows))
        if self._frame is None or self._frame.key != key:
            self._frame = collect_frame(self, self._plan, self._geometry, key)
            self._keys = None
        return self._frame

    def _current_keys(self, frame: Frame) -> np.ndarray:
        if self._keys is None or len(self._keys) != len(frame.token):
            rows = self._plan.rows[frame.token]
            rows = np.minimum(rows, max(len(self._conv.table) - 1, 0))
            self._keys = colour_keys(self._conv, rows) if len(rows) else np.zeros(0, np.int64)
        return self._keys

    def _shown_keys(self, tokens: np.ndarray) -> np.ndarray:
        """Last painted key of these plan tokens (-1 = never painted)."""
        need = len(self._plan.rows)
        if len(self._shown) < need:
            grown = np.full(max(need, 2 * len(self._shown), 1024), -1, np.int64)
            grown[: len(self._shown)] = self._shown
            self._shown = grown
        return self._shown[tokens]

    def _piece_chunks(self, frame: Frame) -> np.ndarray:
        rows = self._plan.rows[frame.token]
        table = self._conv.table
        chunk_ids = np.full(len(rows), -1, np.int64)
        valid = rows < len(table)
        chunk_ids[valid] = table.chunk_id[rows[valid]]
        return chunk_ids
