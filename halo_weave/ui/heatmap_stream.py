"""Streamed text into the heatmap's document, at a cost of a few lines per frame.

The growing paragraph is cut into blocks where its lines wrap anyway
(:data:`STREAM_BLOCK_LINES`), so Qt's re-layout and repaint of the changed block stay a
few lines long; :meth:`~halo_weave.ui.heatmap.HeatmapView.rebuild` at the end of the
turn (or after a width change) joins them again, and copied text never contains the
cuts (the plan's ``soft_breaks``).
"""

from __future__ import annotations

from PySide6.QtGui import QTextCursor

from .heatmap_frame import region_of

#: A streamed paragraph is cut into a new block once its last block has this many lines.
STREAM_BLOCK_LINES = 4


def append_pending_text(view) -> bool:
    """Add the plan's new text (the tokens streamed since the last frame) to ``view``'s
    document; a plan that cannot be extended is rebuilt instead.  True when a long last
    block was cut (at the viewport's width now)."""
    conv, plan = view.conversation(), view._plan
    if conv is None:
        return False
    if not plan.extend(conv):
        view.rebuild()
        return False
    text = plan.take_text()
    if not text:
        return False
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
        attached = view._code.follow(document, text)
        cursor.insertText(text)
        if attached:
            view._code.rehighlight()  # the first fence: format it before it is measured
        cut = _cut_streamed_block(view)
    finally:
        layout.blockSignals(False)
    layout.documentSizeChanged.emit(layout.documentSize())
    viewport, gutter = view.viewport(), view._gutter
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
    return cut


def _cut_streamed_block(view) -> bool:
    """Start a new block at the last line of a long last block.

    Wrapping is greedy, so the lines before the cut stay where they are and the last
    line starts a block of its own exactly where it already was."""
    block = view.document().lastBlock()
    layout = block.layout()
    if layout is None or layout.lineCount() < STREAM_BLOCK_LINES:
        return False
    if region_of(view._plan, block.position())[0] != "body":
        return False
    position = block.position() + layout.lineAt(layout.lineCount() - 1).textStart()
    # The plan learns of the cut first: the Markdown highlighter, which formats the new
    # block as it is inserted, reads the cut paragraph as one line.
    view._plan.soft_break(position)
    cursor = QTextCursor(view.document())
    cursor.setPosition(position)
    cursor.insertBlock()
    return True


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
