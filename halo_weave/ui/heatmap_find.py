"""Where things are in the heatmap, and going there.

The chunk under a point, a chunk's first token in the document, scrolling to a chunk and
outlining it for a moment, and the links of the line under a message that says what it
recalled: a press on one opens it on release over the same link (:class:`Finder`).

Find in the chat (:class:`TextSearch`, Ctrl+F): every place the words occur in the text
shown, case-insensitive, the one gone to outlined, and the pruned paragraphs that hold
them (the heatmap does not show those; the find bar offers to bring them back).
"""

from __future__ import annotations

import bisect

import numpy as np
from PySide6.QtCore import QPoint, QPointF, QRect, QRectF, QTimer
from PySide6.QtGui import QTextCursor

from ..core import pruning
from .heatmap_frame import token_index_at
from .heatmap_recall import FLASH_MS, link_at, link_rects, range_pieces
from .recall_line import MORE

#: The most places one search lists in the text shown (the count says "1,000+").
MAX_MATCHES = 1000
#: Pruned paragraphs whose text is read from the file in one query.
PRUNED_BATCH = 256

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


class TextSearch:
    """Find in the chat: the places the words occur in the heatmap's text, and the pruned
    paragraphs that hold them.

    Owns the words looked for, the matches (document ranges, in order, at most
    :data:`MAX_MATCHES`), which one is current, the pruned chunks that match, and the
    pruned paragraphs' text read so far (a paragraph's text never changes while it is
    pruned).  The view calls :meth:`refresh` after each rebuild (positions move).
    """

    def __init__(self, view) -> None:
        self._view = view
        self._query = ""
        self._matches: list[tuple[int, int]] = []
        self._current = -1
        self._pruned: list[int] = []
        self._pruned_text: dict[int, str] = {}
        self._conv = None

    @property
    def query(self) -> str:
        return self._query

    @property
    def matches(self) -> list[tuple[int, int]]:
        """(start, end) document positions of every match in the text shown."""
        return list(self._matches)

    @property
    def current(self) -> int:
        """Index of the match gone to (-1: none)."""
        return self._current

    @property
    def pruned(self) -> list[int]:
        """Pruned chunks whose text holds the words, newest first."""
        return list(self._pruned)

    def set_query(self, text: str) -> None:
        """Look for ``text`` (case-insensitive; empty: nothing); the current match is the
        first at or after the top of the view."""
        self._query = text
        self._find()
        self._current = self._first_on_screen() if self._matches else -1
        self._view.viewport().update()

    def refresh(self) -> None:
        """The text changed (a rebuild): find again, keeping the current match's place."""
        if not self._query:
            return
        before = self._matches[self._current][0] if 0 <= self._current < len(self._matches) else None
        self._find()
        if not self._matches:
            self._current = -1
        elif before is not None:
            self._current = min(bisect.bisect_left(self._matches, (before, -1)), len(self._matches) - 1)
        else:
            self._current = 0

    def step(self, direction: int) -> bool:
        """Go to the next (``direction`` > 0) or previous match, round the end; False when
        there is none."""
        if not self._matches:
            return False
        if self._current < 0:
            self._current = 0 if direction > 0 else len(self._matches) - 1
        else:
            self._current = (self._current + (1 if direction > 0 else -1)) % len(self._matches)
        self.show_current()
        return True

    def go_to_chunk(self, chunk_id: int) -> bool:
        """Make the first match inside a live chunk the current one and show it."""
        view = self._view
        index = view.finder.first_token_of(chunk_id)
        if index is None or not self._matches:
            return False
        start = int(view.plan.starts[index])
        self._current = min(bisect.bisect_left(self._matches, (start, -1)), len(self._matches) - 1)
        self.show_current()
        return True

    def show_current(self) -> None:
        """Scroll the current match to the middle of the view (the view stops following)."""
        if not 0 <= self._current < len(self._matches):
            return
        view = self._view
        view.follower.stop_following()
        cursor = QTextCursor(view.document())
        cursor.setPosition(self._matches[self._current][0])
        view.setTextCursor(cursor)
        view.centerCursor()
        view.canvas.schedule()
        view.viewport().update()

    def pieces(self) -> list[tuple[bool, QRectF]]:
        """(is current, viewport rectangle) of each visible piece of a match."""
        if not self._matches:
            return []
        view = self._view
        found: list[tuple[bool, QRectF]] = []
        offset, height = view.contentOffset(), view.viewport().height()
        block = view.firstVisibleBlock()
        while block.isValid():
            geo = view.blockBoundingGeometry(block).translated(offset)
            if geo.top() > height:
                break
            layout = block.layout()
            first, end = block.position(), block.position() + block.length() - 1
            if geo.bottom() >= 0 and layout is not None and layout.lineCount():
                i = bisect.bisect_left(self._matches, (first, -1))
                while i < len(self._matches) and self._matches[i][0] < end:
                    a, b = self._matches[i]
                    found += [(i == self._current, rect)
                              for rect in range_pieces(layout, a - first, min(b, end) - first, geo)]
                    i += 1
            block = block.next()
        return found

    def _find(self) -> None:
        self._matches = []
        self._pruned = []
        words = self._query.strip()
        if not words:
            return
        document = self._view.document()
        cursor = document.find(words, 0)
        while not cursor.isNull() and len(self._matches) < MAX_MATCHES:
            self._matches.append((cursor.selectionStart(), cursor.selectionEnd()))
            cursor = document.find(words, cursor)
        self._pruned = self._pruned_matches(words.casefold())

    def _pruned_matches(self, needle: str) -> list[int]:
        conv = self._view.conversation()
        if conv is not self._conv:
            self._conv, self._pruned_text = conv, {}
        if conv is None:
            return []
        ids = list(getattr(conv.graveyard(), "ids", ()))
        missing = [c for c in ids if c not in self._pruned_text]
        for i in range(0, len(missing), PRUNED_BATCH):
            batch = missing[i:i + PRUNED_BATCH]
            try:
                loaded = pruning.load_pruned(conv, batch)
            except Exception:  # noqa: BLE001 - an unreadable paragraph is left out of the search
                loaded = {}
            for chunk_id in batch:
                tokens = loaded.get(chunk_id)
                self._pruned_text[chunk_id] = "".join(tokens.texts).casefold() if tokens is not None else ""
        return [c for c in ids if needle in self._pruned_text.get(c, "")]

    def _first_on_screen(self) -> int:
        view = self._view
        top = view.cursorForPosition(QPoint(0, 0)).position()
        return min(bisect.bisect_left(self._matches, (top, -1)), len(self._matches) - 1)
