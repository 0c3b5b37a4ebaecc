"""Where things are in the heatmap, and going there.

The chunk under a point, a chunk's first token in the document, scrolling to a chunk and
outlining it for a moment, and the links of the line under a message that says what it
recalled: a press on one opens it on release over the same link.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPoint, QPointF, QRect, QTimer

from .heatmap_frame import token_index_at
from .heatmap_recall import FLASH_MS, link_at, link_rects
from .recall_line import MORE

#: Lines left above a chunk a recall link shows (its message's label, the line before).
SHOW_LINES_BEFORE = 2


class Finder:
    """Hit-testing and navigation over the heatmap's plan.

    Owns the chunk outlined after a jump (and the timer that ends the outline), the
    messages whose recall line lists every chunk, and what the last press was over (a
    recall link, or a Markdown link's address).
    """

    def __init__(self, view) -> None:
        self._view = view
        self._flashed: int | None = None
        self._flash_timer = QTimer(view)
        self._flash_timer.setSingleShot(True)
        self._flash_timer.setInterval(FLASH_MS)
        self._flash_timer.timeout.connect(self._end_flash)
        self._expanded: set[int] = set()
        self._pressed_link: tuple[int, int] | None = None
        self._pressed_url: str | None = None

    @property
    def flashed_chunk(self) -> int | None:
        """The chunk a recall link jumped to, outlined for a moment (None: none)."""
        return self._flashed

    @property
    def expanded(self) -> frozenset[int]:
        """Messages whose recall line lists every chunk (a click on "more")."""
        return frozenset(self._expanded)

    def reset(self) -> None:
        """Another conversation: no outline, every recall line short."""
        self._expanded.clear()
        self._flashed = None

    def first_token_of(self, chunk_id: int) -> int | None:
        """The plan index of a live chunk's first token (None: not in the view)."""
        conv, plan = self._view.conversation(), self._view.plan
        chunk = conv.chunks.get(chunk_id) if conv else None
        if chunk is None or not chunk.live:
            return None
        row = conv.chunk_rows(chunk).start
        index = int(np.searchsorted(plan.rows, row))
        if index >= len(plan.rows):
            return None
        found = int(plan.rows[index])
        if found >= len(conv.table) or int(conv.table.chunk_id[found]) != chunk_id:
            return None
        return index

    def chunk_at(self, point: QPoint | QPointF) -> int | None:
        """The chunk under a viewport point, or None (system prompt, labels, margins)."""
        conv, plan = self._view.conversation(), self._view.plan
        index = token_index_at(self._view, plan, QPoint(int(point.x()), int(point.y())))
        if index is None or conv is None:
            return None
        row = int(plan.rows[index])
        if row >= len(conv.table):
            return None
        return int(conv.table.chunk_id[row])

    def scroll_to_chunk(self, chunk_id: int) -> None:
        """Scroll so the chunk's first line is near the top of the view."""
        index = self.first_token_of(chunk_id)
        if index is None:
            return
        view = self._view
        position = int(view.plan.starts[index])
        block = view.document().findBlock(position)
        layout = block.layout()
        line = 0
        if layout is not None and layout.lineCount():
            line = layout.lineForTextPosition(position - block.position()).lineNumber()
        # QPlainTextEdit scrolls in lines: a block's first line number plus the line in it.
        view.verticalScrollBar().setValue(block.firstLineNumber() + max(line, 0))

    def show_chunk(self, chunk_id: int) -> bool:
        """Scroll to a live chunk and outline it for a moment (the view stops following
        the answer: the user went to read there).  False when it is not in the view."""
        if self.first_token_of(chunk_id) is None:
            return False
        view = self._view
        view.follower.stop_following()
        view.scroll_to_chunk(chunk_id)
        bar = view.verticalScrollBar()
        bar.setValue(max(bar.value() - SHOW_LINES_BEFORE, 0))  # with the lines that lead to it
        self._flashed = chunk_id
        self._flash_timer.start()
        view.viewport().update()
        return True

    def recall_link_at(self, point: QPoint | QPointF) -> tuple[int, int] | None:
        """(message turn id, chunk id or ``recall_line.MORE``) of the link under a
        viewport point, on the line that says what a message recalled."""
        return link_at(self._view, self._view.plan, point)

    def recall_link_rect(self, turn_id: int, chunk_id: int) -> QRect | None:
        """Viewport rectangle of a recall link's first piece on screen (None: off screen)."""
        return next((rect.toAlignedRect() for t, c, rect in link_rects(self._view, self._view.plan)
                     if (t, c) == (turn_id, chunk_id)), None)

    def open_recall_link(self, turn_id: int, chunk_id: int) -> None:
        """What a click on a recall link does: the whole list (``MORE``), the chunk
        (:meth:`show_chunk`), or, pruned since, the view's ``graveyard_requested``."""
        if chunk_id == MORE:
            self._expanded.add(turn_id)
            self._view.rebuild()
        elif not self.show_chunk(chunk_id):
            self._view.graveyard_requested.emit(chunk_id)

    def press(self, point: QPoint | QPointF) -> bool:
        """A left press: remember the recall link or Markdown link under it.  True when it
        is a recall link (the press starts no selection)."""
        self._pressed_link = self.recall_link_at(point)
        # A Markdown link opens on release over it; a press may also start a selection.
        self._pressed_url = self._view.markdown_layer.link_at(point) if self._pressed_link is None else None
        return self._pressed_link is not None

    def release(self, point: QPoint | QPointF) -> tuple[bool, str | None]:
        """The press is over: (whether it was on a recall link, opened if the release is
        over the same one; the Markdown link's address the press was over, or None)."""
        pressed, self._pressed_link = self._pressed_link, None
        url, self._pressed_url = self._pressed_url, None
        if pressed is None:
            return False, url
        if self.recall_link_at(point) == pressed:
            self.open_recall_link(*pressed)
        return True, None

    def forget_press(self) -> None:
        """A press that was not a left one: nothing to open on release."""
        self._pressed_link = None
        self._pressed_url = None

    def _end_flash(self) -> None:
        self._flashed = None
        self._view.viewport().update()
