"""The heatmap: the live context as read-only text, coloured by brightness.

Text is inserted once (streamed tokens are appended in one batch per frame).  Colour is
never stored in the document: :meth:`HeatmapView.paintEvent` paints it for the visible
blocks only, straight from the numpy brightness column, one batch of rectangles per
colour, at most once per frame.  Three layers:

1. under the text, a yellow background (alpha by rank, up to 0.45 on the dark theme) behind the brightest
   ``highlight_fraction`` of the tokens;
2. the text itself, drawn white by ``QPlainTextEdit``;
3. over the text, in *darken* mode (per channel minimum), the colour of each token's
   chunk (peak brightness on the dynamic olive → yellow → gold scale, cyan for tool
   results, grey for the system prompt).  White text becomes exactly that colour while
   the dark background, darker than every scale colour, is left as it is; the
   highlighted tokens (the brightest share), left out of this layer, stay white so
   they stand out.  On the light theme the text is black and the layer is painted in
   *lighten* mode (per channel maximum) instead: the same effect on a light background
   (:class:`.colors.Scheme`).

Token geometry (x range and line of each token) is cached per block, keyed by the
block's revision and the viewport width, so a brightness change costs only numpy work
plus the rectangle batches.

What a streamed token costs is kept to a few lines of painting: a frame asks Qt to
repaint only the lines where a token's colour key changed, and each rectangle of a
scattered update is painted on its own (:mod:`.heatmap_paint`); the growing paragraph is
cut into short blocks while it streams (:mod:`.heatmap_stream`).  The tooltip and the
context menu are :mod:`.heatmap_menu`; the line under a message that says what it
recalled, its links and the marks of recalled chunks, :mod:`.heatmap_recall`.

The view is the widget and its public interface; its parts own their state: the frame
and what was painted (:class:`.heatmap_canvas.Canvas`), the Markdown rendering
(:class:`.heatmap_markdown.MarkdownLayer`), hit-testing and jumps
(:class:`.heatmap_find.Finder`), find in the chat (:class:`.heatmap_find.TextSearch`),
the streamed text (:class:`.heatmap_stream.StreamedText`),
the gutter (:class:`.heatmap_gutter.Gutter`), the branch marks
(:class:`.branch_marks.BranchMarks`) and the tooltips' scoring note
(:class:`.heatmap_menu.ChunkTips`).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QMimeData, QPoint, QPointF, QRect, Qt, QUrl, Signal
from PySide6.QtGui import (
    QColor,
    QContextMenuEvent,
    QDesktopServices,
    QGuiApplication,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QTextOption,
)
from PySide6.QtWidgets import QMenu, QPlainTextEdit, QToolTip, QWidget

from ..conversation import Conversation
from . import colors, heatmap_menu
from .follow import Follower
from .branch_marks import BranchMarks
from .heatmap_find import Finder, TextSearch
from .heatmap_gutter import Gutter
from .heatmap_layout import DocumentPlan, build_plan
from .heatmap_markdown import MarkdownLayer
from .heatmap_paint import boxes_in, update_rects
from .heatmap_canvas import Canvas
from .heatmap_stream import StreamedText, without_cuts
#: Past this many lines a rebuild formats the Markdown on screen first, the rest soon
#: after (scroll positions can move a little while it does: shorter ones are done whole).
DEFER_MARKDOWN_LINES = 1500
#: Milliseconds after a streamed token before the Markdown off screen is formatted on.
STREAM_HOLD_MS = 250


class HeatmapView(QPlainTextEdit):
    """Read-only heatmap of a :class:`Conversation`'s live context.

    ``rebuild()`` after a prune, resurrection, merge or open; ``append_streamed()`` after
    tokens were appended to the open turn; ``refresh_brightness()`` after brightness
    alone changed; ``flush()`` does the pending frame now (tests, benchmarks);
    ``follower`` follows the answer ("Jump to latest").  Points are viewport points.

    A click on a link of the line under a message (what it recalled) shows that chunk:
    ``finder.show_chunk`` when it is live, else ``graveyard_requested``.

    Owns the conversation shown and the document plan of its text (:attr:`plan`); its
    parts (see the module docstring) own the rest: ``canvas`` (frame, frame timer,
    brushes), ``markdown_layer`` (rendering, links, Copy buttons), ``finder`` (the chunk
    or link under a point, jumps), ``stream``, ``gutter`` (📌 marks), ``branches`` (the
    "‹ n / m ›" marks) and ``tips`` (the chunks' tooltips and their scoring note).

    Signals (user intent, never acted on here): ``pin_requested(chunk_id, pinned)``,
    ``merge_requested(chunk_id)`` (with the next chunk of its turn),
    ``prune_requested(chunk_id)`` (prune by hand), ``graveyard_requested(chunk_id)`` (a
    recalled chunk pruned since: show it in the graveyard), ``edit_requested(turn_id)``
    (change a message of the user), ``regenerate_requested(turn_id)`` (answer again),
    ``branch_requested(turn_id, step)`` (the previous or next branch where branches part:
    the "‹ n / m ›" of a message header, ``branches.set_marks``).
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
        self._set_palette()
        self._conv: Conversation | None = None
        self._plan = DocumentPlan()
        #: The visible boxes, their colours, what was painted and when the next frame is
        #: done (:mod:`.heatmap_canvas`).
        self.canvas = Canvas(self)
        # The view fills its own background (paintEvent), which lets Qt scroll the
        # viewport by moving pixels when a streamed line is added at the bottom.
        self.viewport().setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent, True)
        #: The role bars, 📌 and recall marks left of the text (:mod:`.heatmap_gutter`).
        self.gutter = Gutter(self)
        self.setViewportMargins(self.gutter.preferred_width(), 0, 0, 0)
        #: Keeps the newest text in view unless the user scrolled up (``follower.button``
        #: jumps back).
        self.follower = Follower(self)
        #: The chunks' tooltips and the scoring note they end with (the window sets it).
        self.tips = heatmap_menu.ChunkTips(self)
        #: Markdown rendered in place (:mod:`.markdown_view`), or, showing the raw text,
        #: fenced code in monospace; code backgrounds are painted in paintEvent.
        self.markdown_layer = MarkdownLayer(self, self.canvas.forget_block)
        self.verticalScrollBar().valueChanged.connect(self.markdown_layer.format_scrolled_in)
        #: The chunk, turn or link under a point, and jumps to a chunk (:mod:`.heatmap_find`).
        self.finder = Finder(self)
        #: Streamed tokens on their way into the document (:mod:`.heatmap_stream`).
        self.stream = StreamedText(self)
        #: The "‹ n / m ›" marks of messages where branches part (:mod:`.branch_marks`).
        self.branches = BranchMarks(self)
        #: Find in the chat: the matches of the find bar's words, outlined (:mod:`.heatmap_find`).
        self.search = TextSearch(self)

    def _set_palette(self) -> None:
        # The text is what the tint layer colours (white under darken, black under
        # lighten); see the module docstring and colors.Scheme.
        scheme = self._scheme = colors.scheme()
        palette = self.palette()
        palette.setColor(QPalette.ColorRole.Text, QColor(*scheme.text))
        palette.setColor(QPalette.ColorRole.Base, QColor(*scheme.base))
        self.setPalette(palette)
        # A stylesheet's polish gives the viewport a palette of its own: set it there too.
        self.viewport().setPalette(palette)

    # ------------------------------------------------------------------ public API
    def restyle(self) -> None:
        """The theme changed (:func:`.theme.apply_theme`): paint with its colours."""
        self._set_palette()
        self.canvas.restyle()
        self.markdown_layer.switch(self.markdown_layer.rendered)  # formats of the new colours
        self.rebuild()

    def follow_theme(self) -> None:
        """Restyle when the theme in use is not the one this view paints with."""
        if colors.scheme() is not self._scheme:
            self.restyle()

    def set_conversation(self, conv: Conversation | None) -> None:
        """Show ``conv`` (None clears the view)."""
        self._conv = conv
        self.finder.reset()
        self.rebuild()
        self.follower.jump_to_latest()  # a conversation opens at its newest text

    def conversation(self) -> Conversation | None:
        """The conversation shown (None: none)."""
        return self._conv

    @property
    def plan(self) -> DocumentPlan:
        """Where each shown token is in the document (rebuilt with the text)."""
        return self._plan

    def set_markdown(self, on: bool) -> None:
        """Show messages rendered as Markdown, or as typed (the raw text); whether they
        are is ``markdown_layer.rendered``."""
        if on == self.markdown_layer.rendered:
            return
        self.markdown_layer.switch(on)
        self.rebuild()

    def rebuild(self) -> None:
        """Lay out the whole live context again (after prune/resurrect/merge/open)."""
        bar = self.verticalScrollBar()
        old_value = bar.value()
        self.stream.reset()
        self.canvas.forget_layout()
        deferred = False
        if self._conv is None:
            self._plan = DocumentPlan()
            self.setPlainText("")
        else:
            self._plan, text = build_plan(self._conv, self.finder.expanded, self.branches.marks())
            # A long document: states only now; what is on screen is formatted below.
            deferred = self.markdown_layer.set_text(text, text.count("\n") > DEFER_MARKDOWN_LINES)
        if self.follower.following:
            self.follower.scroll_to_end()
        else:
            bar.setValue(min(old_value, bar.maximum()))
            self.follower.content_changed(rebuilt=True)
        if deferred:
            self.markdown_layer.format_on_screen()
        self.search.refresh()
        self.canvas.schedule()

    def append_streamed(self) -> None:
        """New tokens were appended to the open turn: show them, and the brightness their
        attention moved, with the next frame (``streamed_frame`` fires after it)."""
        self.stream.mark()
        self.markdown_layer.hold(STREAM_HOLD_MS)  # Markdown off screen waits while the answer streams
        self.canvas.schedule()

    def refresh_brightness(self) -> None:
        """Brightness changed: repaint with the next frame."""
        self.canvas.colours_changed()
        self.canvas.schedule()

    def flush(self) -> None:
        """Do the pending frame now: append streamed text, then ask Qt to repaint the
        boxes whose colour changed (the whole viewport when many did)."""
        self.canvas.frame_started()
        streamed = self.stream.append_pending()
        self.canvas.colours_changed()  # brightness moves with every token: once per frame
        self.canvas.request_repaint()
        if streamed:
            self.streamed_frame.emit()

    def chunk_rect(self, chunk_id: int) -> QRect | None:
        """Viewport rectangle covering the visible tokens of a chunk (None if off screen)."""
        return self.canvas.chunk_rect(chunk_id)

    def scroll_to_chunk(self, chunk_id: int) -> None:
        """Scroll so the chunk's first line is near the top of the view."""
        self.finder.scroll_to_chunk(chunk_id)
        self.canvas.schedule()

    def context_menu_for(self, point: QPoint | QPointF) -> QMenu:
        """The context menu at a viewport point (chunk actions only over a chunk)."""
        return heatmap_menu.context_menu(self, point)

    # ------------------------------------------------------------------ Qt overrides
    def paintEvent(self, event: QPaintEvent) -> None:
        frame = self.canvas.frame()
        if frame is None:
            viewport = self.viewport()
            painter = QPainter(viewport)
            painter.fillRect(event.rect(), viewport.palette().brush(viewport.backgroundRole()))
            painter.end()
            super().paintEvent(event)
            return
        rects = update_rects(event)
        inside = boxes_in(frame, rects)
        keys_in = self.canvas.painted(frame, inside)
        self.canvas.painter.paint(self, event, rects, frame, inside, keys_in)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.stream.resized(self.viewport().width())
        rect = self.contentsRect()
        self.gutter.setGeometry(QRect(rect.left(), rect.top(), self.gutter.preferred_width(), rect.height()))
        self.markdown_layer.format_scrolled_in()  # a taller view shows more blocks

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:
            self.canvas.forget_layout()
            self.gutter.font_changed()
            self.setViewportMargins(self.gutter.preferred_width(), 0, 0, 0)

    def createMimeDataFromSelection(self) -> QMimeData:
        """The selected text as the context has it (without the streaming cuts)."""
        cursor = self.textCursor()
        mime = QMimeData()
        mime.setText(without_cuts(cursor.selection().toPlainText(), cursor.selectionStart(),
                                  cursor.selectionEnd(), self._plan.soft_breaks))
        return mime

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            self.finder.forget_press()
            super().mousePressEvent(event)
            return
        button = self.markdown_layer.copy_button_at(event.position())
        if button is not None:
            kind, target = button
            text = target if kind == "code" else heatmap_menu.message_text(self._conv, int(target))
            QGuiApplication.clipboard().setText(text)
            self.copied.emit(kind)
            return
        if not self.branches.press(event.position()) and not self.finder.press(event.position()):
            super().mousePressEvent(event)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if self.branches.release(event.position()):
            return
        on_recall_link, url = self.finder.release(event.position())
        if not on_recall_link:
            super().mouseReleaseEvent(event)
            if url and self.markdown_layer.link_at(event.position()) == url and not self.textCursor().hasSelection():
                QDesktopServices.openUrl(QUrl(url))

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        super().mouseMoveEvent(event)
        point = QPointF(event.position())
        over = ((self._plan.links and self.finder.recall_link_at(point) is not None)
                or (self._plan.branch_links and self.branches.link_at(point) is not None)
                or any(rect.contains(point) for rect, _, _ in self.markdown_layer.copy_buttons())
                or bool(self.markdown_layer.link_at(point)))
        self.viewport().setCursor(Qt.CursorShape.PointingHandCursor if over else Qt.CursorShape.IBeamCursor)

    def viewportEvent(self, event: QEvent) -> bool:
        if event.type() != QEvent.Type.ToolTip:
            return super().viewportEvent(event)
        branch_tip = self.branches.tooltip_at(event.pos())
        if branch_tip is not None:
            QToolTip.showText(event.globalPos(), branch_tip, self.viewport())
            return True
        link = self.finder.recall_link_at(event.pos())
        if link is not None:
            QToolTip.showText(event.globalPos(), heatmap_menu.link_tooltip(self._conv, *link), self.viewport())
            return True
        url = self.markdown_layer.link_at(event.pos())
        if url:
            QToolTip.showText(event.globalPos(), url, self.viewport())
            return True
        chunk_id = self.finder.chunk_at(event.pos())
        if chunk_id is None:
            QToolTip.hideText()
        else:
            QToolTip.showText(event.globalPos(), self.tips.for_chunk(chunk_id), self.viewport())
        return True

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:
        menu = self.context_menu_for(event.pos())
        menu.exec(event.globalPos())
        menu.deleteLater()
