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
   highlighted tokens (the brightest share), left out of this layer, stay white so
   they stand out.

Token geometry (x range and line of each token) is cached per block, keyed by the
block's revision and the viewport width, so a brightness change costs only numpy work
plus the rectangle batches.

What a streamed token costs is kept to a few lines of painting: a frame asks Qt to
repaint only the lines where a token's colour key changed, and each rectangle of a
scattered update is painted on its own (:mod:`.heatmap_paint`); the growing paragraph is
cut into short blocks while it streams (:mod:`.heatmap_stream`).  The tooltip and the
context menu are :mod:`.heatmap_menu`; the line under a message that says what it
recalled, its links and the marks of recalled chunks, :mod:`.heatmap_recall`.
"""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
from PySide6.QtCore import QEvent, QMimeData, QPoint, QPointF, QRect, QRectF, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import (
    QColor,
    QContextMenuEvent,
    QDesktopServices,
    QGuiApplication,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QTextCursor,
    QTextOption,
)
from PySide6.QtWidgets import QMenu, QPlainTextEdit, QToolTip, QWidget

from ..conversation import Conversation
from . import colors
from .heatmap_frame import (
    BlockGeometry,
    Frame,
    colour_keys,
    collect_frame,
    token_index_at,
)
from . import heatmap_menu
from .code_blocks import CodeBlockHighlighter
from .markdown_overlay import Overlay, carry_marked, code_text, collect_overlay, hidden_tokens
from .markdown_overlay import link_at as markdown_link_at
from .markdown_view import MarkdownHighlighter
from .follow import Follower
from .heatmap_gutter import Gutter, pin_markers
from .heatmap_layout import DocumentPlan, build_plan
from .heatmap_paint import FramePainter, boxes_in, request_lines, update_rects
from .heatmap_recall import FLASH_MS, link_at, link_rects, recall_marks
from .heatmap_stream import append_pending_text, without_cuts
from .recall_line import MORE

#: Minimum milliseconds between two repaints (one frame at 60 Hz).
FRAME_MS = 16
#: Past this many lines a rebuild formats the Markdown on screen first, the rest soon
#: after (scroll positions can move a little while it does: shorter ones are done whole).
DEFER_MARKDOWN_LINES = 1500
#: Milliseconds after a streamed token before the Markdown off screen is formatted on.
STREAM_HOLD_MS = 250
#: Lines left above a chunk a recall link shows (its message's label, the line before).
SHOW_LINES_BEFORE = 2


class HeatmapView(QPlainTextEdit):
    """Read-only heatmap of a :class:`Conversation`'s live context.

    ``rebuild()`` after a prune, resurrection, merge or open; ``append_streamed()`` after
    tokens were appended to the open turn; ``refresh_brightness()`` after brightness
    alone changed; ``flush()`` does the pending frame now (tests, benchmarks);
    ``follower`` follows the answer ("Jump to latest").  Points are viewport points.

    A click on a link of the line under a message (what it recalled) shows that chunk:
    :meth:`show_chunk` when it is live, else ``graveyard_requested``.

    Signals (user intent, never acted on here): ``pin_requested(chunk_id, pinned)``,
    ``merge_requested(chunk_id)`` (with the next chunk of its turn),
    ``prune_requested(chunk_id)`` (prune by hand), ``graveyard_requested(chunk_id)`` (a
    recalled chunk pruned since: show it in the graveyard), ``edit_requested(turn_id)``
    (change a message of the user), ``regenerate_requested(turn_id)`` (answer again),
    ``branch_requested(turn_id, step)`` (the previous or next branch where branches part:
    the "‹ n / m ›" of a message header, :meth:`set_branch_marks`).
    """

    pin_requested = Signal(int, bool)
    merge_requested = Signal(int)
    prune_requested = Signal(int)
    graveyard_requested = Signal(int)
    edit_requested = Signal(int)
    regenerate_requested = Signal(int)
    branch_requested = Signal(int, int)
    #: A frame with streamed tokens was done (the window refreshes its stats with it).
    streamed_frame = Signal()
    #: A Copy button put text on the clipboard ("code" or "message").
    copied = Signal(str)

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
        self._keys: np.ndarray | None = None  # colour key per box of self._frame
        self._shown = np.zeros(0, np.int64)  # last painted colour key per plan token
        self._full_update = True
        self._gutter_signature: tuple = ()
        self._split_width = -1  # viewport width the soft breaks were cut at
        self._rejoin_timer = QTimer(self)
        self._rejoin_timer.setSingleShot(True)
        self._rejoin_timer.setInterval(120)
        self._rejoin_timer.timeout.connect(self.rebuild)
        #: The layers' brushes and the painting of an update (:mod:`.heatmap_paint`).
        self.painter = FramePainter()
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
        #: What colours the chunks and decides pruning, in words (the window sets it).
        self._scoring_note = ""
        #: Markdown rendered in place (:mod:`.markdown_view`), or, showing the raw text,
        #: fenced code in monospace; code backgrounds are painted in paintEvent.
        self._code: MarkdownHighlighter | CodeBlockHighlighter = self._new_highlighter(True)
        self.verticalScrollBar().valueChanged.connect(self._format_scrolled_in)
        #: The chunk a recall link jumped to, outlined for a moment (None: none).
        self.flashed_chunk: int | None = None
        self._flash_timer = QTimer(self)
        self._flash_timer.setSingleShot(True)
        self._flash_timer.setInterval(FLASH_MS)
        self._flash_timer.timeout.connect(self._end_flash)
        self._expanded: set[int] = set()  # messages whose recall line lists every chunk
        self._overlay: Overlay | None = None  # the rendered Markdown's part of the frame
        self._pressed_link: tuple[int, int] | None = None
        self._pressed_branch: tuple[int, int] | None = None
        self._branch_marks: dict[int, tuple[int, int]] = {}
        self._pressed_url: str | None = None

    # ------------------------------------------------------------------ public API
    def set_conversation(self, conv: Conversation | None) -> None:
        """Show ``conv`` (None clears the view)."""
        self._conv = conv
        self._expanded.clear()
        self.flashed_chunk = None
        self.rebuild()
        self.follower.jump_to_latest()  # a conversation opens at its newest text

    def set_branch_marks(self, marks: dict[int, tuple[int, int]]) -> None:
        """Turn id -> (number, count) of the messages where branches part, shown as
        "‹ number / count ›" in their headers from the next :meth:`rebuild`."""
        self._branch_marks = dict(marks)

    def branch_mark(self, turn_id: int) -> tuple[int, int] | None:
        """(number, count) of the branch that starts at ``turn_id``; None when none does."""
        return self._branch_marks.get(turn_id)

    def branch_arrow_rect(self, turn_id: int, step: int) -> QRect | None:
        """Viewport rectangle of a branch arrow of the message ``turn_id`` (None: no such arrow)."""
        link = next(((a, b) for a, b, t, s in self._plan.branch_links if (t, s) == (turn_id, step)), None)
        if link is None:
            return None
        cursor = QTextCursor(self.document())
        cursor.setPosition(link[0])
        first = self.cursorRect(cursor)
        cursor.setPosition(link[1])
        end = self.cursorRect(cursor)
        return QRect(first.left(), first.top(), max(end.left() - first.left(), 4), first.height())

    def branch_link_at(self, point: QPoint | QPointF) -> tuple[int, int] | None:
        """(turn id, step) of the branch arrow ("‹" -1, "›" +1) under a viewport point."""
        return heatmap_menu.branch_link_at(self, self._plan, point)

    def conversation(self) -> Conversation | None:
        return self._conv

    @property
    def markdown(self) -> bool:
        """Whether messages are shown rendered as Markdown (else as typed)."""
        return isinstance(self._code, MarkdownHighlighter)

    def set_markdown(self, on: bool) -> None:
        """Show messages rendered as Markdown, or as typed (the raw text)."""
        if on == self.markdown:
            return
        self._code.setDocument(None)
        self._code = self._new_highlighter(on)
        self.rebuild()

    def copy_button_at(self, point: QPoint | QPointF) -> tuple[str, object] | None:
        """("code", its text) or ("message", turn id) of the Copy button under a viewport
        point (code blocks and message labels carry one while Markdown is rendered)."""
        for rect, kind, target in self.copy_buttons():
            if rect.contains(QPointF(point)):
                if kind == "code":
                    return kind, code_text(self, target, self._plan.soft_breaks)
                return kind, target
        return None

    def copy_buttons(self) -> list[tuple[QRectF, str, object]]:
        """The Copy buttons on screen: (viewport rectangle, "code" or "message", the
        opening fence's block or the message's turn id)."""
        overlay = self.markdown_overlay()
        return overlay.buttons if overlay is not None else []

    def markdown_overlay(self) -> Overlay | None:
        """What the rendered Markdown adds to the current frame (None: shown as typed)."""
        frame = self._current_frame()
        if not self.markdown or frame is None:
            return None
        key = (frame.key, self._code.generation)
        if self._overlay is None or self._overlay.key != key:
            self._overlay = collect_overlay(self, self._plan, key)
        return self._overlay

    def link_at(self, point: QPoint | QPointF) -> str | None:
        """The address of the rendered Markdown link under a viewport point, or None."""
        return markdown_link_at(self, QPointF(point)) if self.markdown else None

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
            markdown = False
            self.setPlainText("")
        else:
            self._plan, text = build_plan(self._conv, frozenset(self._expanded), self._branch_marks)
            attached = self._code.follow(self.document(), text, replaced=True)
            # A long document: states only now; what is on screen is formatted below.
            markdown = self.markdown and text.count("\n") > DEFER_MARKDOWN_LINES
            with self._code.states_only() if markdown else nullcontext():
                self.setPlainText(text)
                if attached:
                    self._code.rehighlight()
        if self.follower.following:
            self.follower.scroll_to_end()
        else:
            bar.setValue(min(old_value, bar.maximum()))
            self.follower.content_changed(rebuilt=True)
        if self._conv is not None and markdown:
            self._format_on_screen()
        self._schedule()

    def append_streamed(self) -> None:
        """New tokens were appended to the open turn: show them, and the brightness their
        attention moved, with the next frame (``streamed_frame`` fires after it)."""
        self._pending_append = True
        if self.markdown:  # Markdown off screen waits while the answer streams
            self._code.hold(STREAM_HOLD_MS)
        self._schedule()

    def refresh_brightness(self) -> None:
        """Brightness changed: repaint with the next frame."""
        self._keys = None
        self._schedule()

    def flush(self) -> None:
        """Do the pending frame now: append streamed text, then ask Qt to repaint the
        boxes whose colour changed (the whole viewport when many did)."""
        self._frame_timer.stop()
        streamed = self._pending_append
        if streamed:
            self._pending_append = False
            if append_pending_text(self):
                self._split_width = self.viewport().width()
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
        changed = np.flatnonzero(self._current_keys(frame) != self._shown_keys(frame.token))
        request_lines(self.viewport(), frame, changed)
        signature = (tuple(frame.bodies), tuple(pin_markers(self, frame)), tuple(recall_marks(self, frame)))
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

    def show_chunk(self, chunk_id: int) -> bool:
        """Scroll to a live chunk and outline it for a moment (the view stops following
        the answer: the user went to read there).  False when it is not in the view."""
        if self._first_token_of(chunk_id) is None:
            return False
        self.follower.stop_following()
        self.scroll_to_chunk(chunk_id)
        bar = self.verticalScrollBar()
        bar.setValue(max(bar.value() - SHOW_LINES_BEFORE, 0))  # with the lines that lead to it
        self.flashed_chunk = chunk_id
        self._flash_timer.start()
        self.viewport().update()
        return True

    def recall_link_at(self, point: QPoint | QPointF) -> tuple[int, int] | None:
        """(message turn id, chunk id or ``recall_line.MORE``) of the link under a
        viewport point, on the line that says what a message recalled."""
        return link_at(self, self._plan, point)

    def recall_link_rect(self, turn_id: int, chunk_id: int) -> QRect | None:
        """Viewport rectangle of a recall link's first piece on screen (None: off screen)."""
        return next((rect.toAlignedRect() for t, c, rect in link_rects(self, self._plan)
                     if (t, c) == (turn_id, chunk_id)), None)

    def open_recall_link(self, turn_id: int, chunk_id: int) -> None:
        """What a click on a recall link does: the whole list (``MORE``), the chunk
        (:meth:`show_chunk`), or, pruned since, ``graveyard_requested``."""
        if chunk_id == MORE:
            self._expanded.add(turn_id)
            self.rebuild()
        elif not self.show_chunk(chunk_id):
            self.graveyard_requested.emit(chunk_id)

    def tooltip_for(self, chunk_id: int) -> str:
        """Turn, role, chunk id, token count and score of a chunk, and :attr:`scoring_note`."""
        return heatmap_menu.tooltip(self._conv, chunk_id, self._scoring_note)

    @property
    def scoring_note(self) -> str:
        """The rule in use in a few words: the last line of every chunk's tooltip."""
        return self._scoring_note

    def set_scoring_note(self, note: str) -> None:
        """Say ``note`` (the rule in use) in the chunks' tooltips."""
        self._scoring_note = note

    def context_menu_for(self, point: QPoint | QPointF) -> QMenu:
        """The context menu at a viewport point (chunk actions only over a chunk)."""
        return heatmap_menu.context_menu(self, point)

    def turn_at(self, point: QPoint | QPointF) -> int | None:
        """The turn (message) under a viewport point, its label line included; None elsewhere."""
        return heatmap_menu.turn_at(self, self._plan, point)

    def message_text(self, turn_id: int) -> str:
        """A message's text as shown: its live chunks, without the chat template."""
        return heatmap_menu.message_text(self._conv, turn_id)

    def chunk_rect(self, chunk_id: int) -> QRect | None:
        """Viewport rectangle covering the visible tokens of a chunk (None if off screen)."""
        frame = self._current_frame()
        if frame is None or not len(frame.token):
            return None
        mine = np.flatnonzero(self._box_chunks(frame) == chunk_id)
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
        rects = update_rects(event)
        inside = boxes_in(frame, rects)
        keys_in = self._current_keys(frame)[inside]
        if len(inside):
            self._shown_keys(frame.token)  # grows the array when tokens were added
            self._shown[frame.token[inside]] = keys_in
        self.painter.paint(self, event, rects, frame, inside, keys_in)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self._plan.soft_breaks and self.viewport().width() != self._split_width:
            self._rejoin_timer.start()  # the cuts no longer fall where lines wrap
        rect = self.contentsRect()
        self._gutter.setGeometry(QRect(rect.left(), rect.top(), self.gutter_width(), rect.height()))
        self._format_scrolled_in()  # a taller view shows more blocks

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
        mime = QMimeData()
        mime.setText(without_cuts(cursor.selection().toPlainText(), cursor.selectionStart(),
                                  cursor.selectionEnd(), self._plan.soft_breaks))
        return mime

    def mousePressEvent(self, event: QMouseEvent) -> None:
        left = event.button() == Qt.MouseButton.LeftButton
        button = self.copy_button_at(event.position()) if left else None
        if button is not None:
            kind, target = button
            text = target if kind == "code" else self.message_text(int(target))
            QGuiApplication.clipboard().setText(text)
            self.copied.emit(kind)
            return
        branch = self.branch_link_at(event.position()) if left else None
        self._pressed_branch = branch
        if branch is not None:
            return
        link = self.recall_link_at(event.position()) if left else None
        self._pressed_link = link
        # A Markdown link opens on release over it; a press may also start a selection.
        self._pressed_url = self.link_at(event.position()) if left and link is None else None
        if link is None:
            super().mousePressEvent(event)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        branch, self._pressed_branch = self._pressed_branch, None
        if branch is not None:
            if self.branch_link_at(event.position()) == branch:
                self.branch_requested.emit(*branch)
            return
        pressed, self._pressed_link = self._pressed_link, None
        url, self._pressed_url = self._pressed_url, None
        if pressed is None:
            super().mouseReleaseEvent(event)
            if url and self.link_at(event.position()) == url and not self.textCursor().hasSelection():
                QDesktopServices.openUrl(QUrl(url))
        elif self.recall_link_at(event.position()) == pressed:
            self.open_recall_link(*pressed)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        super().mouseMoveEvent(event)
        point = QPointF(event.position())
        over = ((self._plan.links and self.recall_link_at(point) is not None)
                or (self._plan.branch_links and self.branch_link_at(point) is not None)
                or any(rect.contains(point) for rect, _, _ in self.copy_buttons())
                or bool(self.link_at(point)))
        self.viewport().setCursor(Qt.CursorShape.PointingHandCursor if over else Qt.CursorShape.IBeamCursor)

    def viewportEvent(self, event: QEvent) -> bool:
        link = self.recall_link_at(event.pos()) if event.type() == QEvent.Type.ToolTip else None
        if link is not None:
            QToolTip.showText(event.globalPos(), heatmap_menu.link_tooltip(self._conv, *link), self.viewport())
            return True
        branch = self.branch_link_at(event.pos()) if event.type() == QEvent.Type.ToolTip else None
        if branch is not None:
            QToolTip.showText(event.globalPos(), heatmap_menu.branch_tooltip(self._plan, *branch), self.viewport())
            return True
        url = self.link_at(event.pos()) if event.type() == QEvent.Type.ToolTip else None
        if url:
            QToolTip.showText(event.globalPos(), url, self.viewport())
            return True
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
    def _new_highlighter(self, markdown: bool) -> MarkdownHighlighter | CodeBlockHighlighter:
        if not markdown:
            return CodeBlockHighlighter()
        highlighter = MarkdownHighlighter(lambda: self._plan, self._block_formatted)
        highlighter.attach(self.document())
        return highlighter

    def _format_scrolled_in(self) -> None:
        """Blocks that scrolled into view and still wait for their Markdown: now."""
        if self.markdown:
            first = self.firstVisibleBlock().blockNumber()
            lines = max(self.viewport().height() // max(self.fontMetrics().height(), 1), 1)
            self._code.format_range(first, first + lines + 1)

    def _format_on_screen(self) -> None:
        """Format the blocks on screen (and a screen's worth around them) now, the rest
        soon after: a long conversation opens without waiting for all of its Markdown."""
        first = self.firstVisibleBlock().blockNumber()
        lines = max(self.viewport().height() // max(self.fontMetrics().height(), 1), 1)
        self._code.format_around(max(first - lines, 0), 3 * lines)

    def _block_formatted(self, number: int) -> None:
        """A block's formats changed (its text may not have): measure its tokens again."""
        if self._geometry.pop(number, None) is not None:
            self._frame = None
            self._keys = None

    def _end_flash(self) -> None:
        self.flashed_chunk = None
        self.viewport().update()

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

    # -- frame
    def _invalidate(self, full: bool = False) -> None:
        self._frame = None
        self._keys = None
        if full:
            self._shown = np.zeros(0, np.int64)
            self._full_update = True

    def _current_frame(self) -> Frame | None:
        """The visible boxes, recollected when the view scrolled, resized or changed."""
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
            overlay = self.markdown_overlay()
            hidden = hidden_tokens(overlay) if overlay is not None else np.zeros(0, np.int64)
            if len(hidden):  # one pass for both: the ranking behind the highlight is costly
                hidden_rows = np.minimum(self._plan.rows[hidden], max(len(self._conv.table) - 1, 0))
                both = colour_keys(self._conv, np.concatenate((rows, hidden_rows)))
                self._keys = both[: len(rows)].copy()
                carry_marked(overlay, self._plan, frame, self._keys, both[len(rows):])
            else:
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

    def _box_chunks(self, frame: Frame) -> np.ndarray:
        rows = self._plan.rows[frame.token]
        table = self._conv.table
        chunk_ids = np.full(len(rows), -1, np.int64)
        valid = rows < len(table)
        chunk_ids[valid] = table.chunk_id[rows[valid]]
        return chunk_ids
