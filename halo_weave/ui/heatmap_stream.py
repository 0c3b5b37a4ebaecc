"""Streamed text into the heatmap's document, at a cost of a few lines per frame.

The growing paragraph is cut into blocks where its lines wrap anyway
(:data:`STREAM_BLOCK_LINES`), so Qt's re-layout and repaint of the changed block stay a
few lines long; :meth:`~halo_weave.ui.heatmap.HeatmapView.rebuild` at the end of the
turn (or after a width change) joins them again, and copied text never contains the
cuts (the plan's ``soft_breaks``).
"""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtGui import QTextCursor

from .heatmap_frame import region_of

#: A streamed paragraph is cut into a new block once its last block has this many lines.
STREAM_BLOCK_LINES = 4
#: Milliseconds after a width change before the text is laid out again (cuts joined).
REJOIN_MS = 120


class StreamedText:
    """The heatmap's streamed text on its way into the document.

    Owns whether tokens wait for the next frame, the viewport width the streamed
    paragraph was cut at, and the timer that lays the text out again (joining the cuts)
    once the width changed.
    """

    def __init__(self, view) -> None:
        self._view = view
        self._pending = False
        self._split_width = -1  # viewport width the soft breaks were cut at
        self._rejoin_timer = QTimer(view)
        self._rejoin_timer.setSingleShot(True)
        self._rejoin_timer.setInterval(REJOIN_MS)
        self._rejoin_timer.timeout.connect(view.rebuild)

    def mark(self) -> None:
        """Tokens were appended to the open turn: their text goes in with the next frame."""
        self._pending = True

    def reset(self) -> None:
        """The whole text is laid out again: nothing pending, no cut to join."""
        self._rejoin_timer.stop()
        self._pending = False

    def resized(self, width: int) -> None:
        """The viewport is ``width`` wide: cuts made at another width no longer fall where
        lines wrap, so the text is laid out again shortly."""
        if self._view.plan.soft_breaks and width != self._split_width:
            self._rejoin_timer.start()

    def append_pending(self) -> bool:
        """Add the tokens streamed since the last frame to the document (a plan that
        cannot be extended is rebuilt instead); whether any were pending."""
        if not self._pending:
            return False
        self._pending = False
        view = self._view
        conv, plan = view.conversation(), view.plan
        if conv is None:
            return True
        if not plan.extend(conv):
            view.rebuild()
            return True
        text = plan.take_text()
        if text:
            self._insert(text)
        return True

    def _insert(self, text: str) -> None:
        view = self._view
        document = view.document()
        layout = document.documentLayout()
        grown = document.lastBlock()
        top = view.blockBoundingGeometry(grown).translated(view.contentOffset()).top()
        # QPlainTextDocumentLayout asks for a repaint of the whole viewport whenever a block
        # changes height (a streamed line wraps); only the last block(s) changed, so hold its
        # signals and repaint from that block down here.
        layout.blockSignals(True)
        try:
            cursor = QTextCursor(document)
            cursor.movePosition(QTextCursor.MoveOperation.End)
            highlighter = view.markdown_layer.highlighter
            attached = highlighter.follow(document, text)
            cursor.insertText(text)
            if attached:
                highlighter.rehighlight()  # the first fence: format it before it is measured
            self._cut_streamed_block()
        finally:
            layout.blockSignals(False)
        layout.documentSizeChanged.emit(layout.documentSize())
        viewport, gutter = view.viewport(), view.gutter
        top = max(int(top), 0)
        viewport.update(0, top, viewport.width(), viewport.height() - top)
        gutter.update(0, top, gutter.width(), viewport.height() - top)
        view.follower.content_changed()
        # Following the answer scrolls the old pixels up, the grown block's with them: its
        # rectangle was taller while it was the last (Qt adds the document margin there), so
        # repaint it where it now is.
        moved = int(view.blockBoundingGeometry(grown).translated(view.contentOffset()).top())
        if moved < top:
            viewport.update(0, max(moved, 0), viewport.width(), top - max(moved, 0))

    def _cut_streamed_block(self) -> None:
        """Start a new block at the last line of a long last block.

        Wrapping is greedy, so the lines before the cut stay where they are and the last
        line starts a block of its own exactly where it already was."""
        view = self._view
        block = view.document().lastBlock()
        layout = block.layout()
        if layout is None or layout.lineCount() < STREAM_BLOCK_LINES:
            return
        if region_of(view.plan, block.position())[0] != "body":
            return
        position = block.position() + layout.lineAt(layout.lineCount() - 1).textStart()
        # The plan learns of the cut first: the Markdown highlighter, which formats the new
        # block as it is inserted, reads the cut paragraph as one line.
        view.plan.soft_break(position)
        cursor = QTextCursor(view.document())
        cursor.setPosition(position)
        cursor.insertBlock()
        self._split_width = view.viewport().width()


def without_cuts(text: str, first: int, last: int, soft_breaks) -> str:
    """``text``, the document from position ``first`` to ``last``, without the cuts made
    while streaming (positions in ``soft_breaks``; Qt's positions count UTF-16 units)."""
    cuts = [p - first for p in soft_breaks if first <= p < last]
    if not cuts:
        return text
    units = bytearray(text.encode("utf-16-le"))
    for offset in reversed(cuts):
        del units[2 * offset : 2 * offset + 2]
    return units.decode("utf-16-le")
