"""Markdown rendered in the heatmap: a syntax highlighter over the messages' own text.

:mod:`.markdown_scan` says what each line's Markdown means; :class:`MarkdownHighlighter`
turns that into character formats (bold, headings, monospace, link underline, the code's
syntax colours) and *hides* the markup characters by drawing them at no width at all
(transparent, with a letter spacing of minus its advance): they keep
their document positions, so every token's position stays exact and the overlay,
which measures tokens from the layout, finds a hidden token's box empty.  Its brightness
goes to the span it marks instead (:func:`.markdown_overlay.carry_marked`).
Table columns are lined up the same way, by letter spacing on a few characters of each
row (:mod:`.markdown_table`), never by added spaces.  The formats themselves are
:mod:`.markdown_formats`'; what a formatted block keeps, and how a line cut into several
blocks maps to positions, is :mod:`.markdown_blocks`.

Bullets, rules, inline code's background and the "Copy" buttons are painted by the view
from :mod:`.markdown_overlay`, which also gives the hidden tokens' brightness to their
spans.
Only message bodies are rendered (labels, the system prompt and recall lines stay as
they are).  A paragraph the view cut while it streamed (``soft_breaks``) is read as one
line.
"""

from __future__ import annotations

import bisect
from contextlib import contextmanager
from typing import Callable

import time

from PySide6.QtCore import QTimer
from PySide6.QtGui import QFont, QSyntaxHighlighter, QTextBlock, QTextCharFormat, QTextDocument

from . import markdown_scan as md
from . import markdown_table as tables
from .heatmap_layout import DocumentPlan
from .markdown_blocks import (
    BlockMarkup,
    Placement,
    clipped,
    logical_line,
    markup_of,
    opening_fence,
    signature,
    table_blocks,
    utf16_offsets,
)
from .markdown_formats import MarkdownFormats

#: After a whole document went in, the blocks off screen are formatted this many
#: milliseconds at a time ...
FORMAT_SLICE_MS = 2.0
#: ... with this many milliseconds between two slices (streamed tokens come first).
FORMAT_PAUSE_MS = 5


class MarkdownHighlighter(QSyntaxHighlighter):
    """Formats the message bodies of a heatmap document as Markdown.

    ``plan`` returns the view's current :class:`DocumentPlan` (which blocks are message
    bodies, where the streaming cuts are).  ``follow`` and ``active`` have the meaning
    they have on :class:`.code_blocks.CodeBlockHighlighter` (this one stays attached).
    """

    def __init__(self, plan: Callable[[], DocumentPlan], formatted: Callable[[int], None]) -> None:
        super().__init__(None)
        self._plan = plan
        self._formatted = formatted
        self._pending = False
        self._deferred = False  # a whole document goes in: blocks get their states only
        #: Counts formatted blocks: what was measured from the layout before is stale.
        self.generation = 0
        self._quick = False  # code lines without colours where a lexer still has to load
        self._stale: list[int] = []  # parts of cut paragraphs to format again
        self._stale_timer = QTimer()
        self._stale_timer.setSingleShot(True)
        self._stale_timer.setInterval(0)
        self._stale_timer.timeout.connect(self._format_stale)
        self._recolour: list[int] = []  # blocks formatted so, to format again soon
        self._todo: list[int] = []  # block numbers still to format, nearest first
        self._waiting: set[int] = set()  # the same, for look-ups
        self._held_until = 0.0  # perf_counter() until which the rest waits (:meth:`hold`)
        self._timer = QTimer()
        self._timer.setSingleShot(True)
        self._timer.setInterval(FORMAT_PAUSE_MS)
        self._timer.timeout.connect(self._format_some)
        self.active = False
        self._styles = MarkdownFormats()

    def attach(self, document: QTextDocument) -> None:
        """Format ``document`` from now on.  Qt formats it whole on its next event loop
        turn and ignores edits until then (unless it is empty): :meth:`follow` asks for it
        sooner."""
        self.setDocument(document)
        self._pending = not document.isEmpty()  # Qt formats an empty one as text goes in

    def follow(self, document: QTextDocument, text: str, replaced: bool = False) -> bool:
        """True when the caller should :meth:`rehighlight` once ``text`` is in (just
        attached: Qt would format it only on its next event loop turn)."""
        if self.document() is not document:
            self.attach(document)
        pending, self._pending = self._pending, False
        return pending

    @staticmethod
    def is_code(state: int) -> bool:
        return md.in_code(state) or state == md.CLOSE

    def format_around(self, first: int, count: int) -> None:
        """After a deferred fill: format blocks ``first`` .. ``first + count`` now (what
        is on screen), and the rest a slice at a time, nearest first.  Code in a language whose
        lexer has not loaded yet is monospace now and gets its colours with the first
        batch."""
        document = self.document()
        if document is None:
            return
        total = document.blockCount()
        first = min(max(first, 0), max(total - 1, 0))
        last = min(total, first + count)
        block = document.findBlockByNumber(first)
        self._quick, self._recolour = True, []
        try:
            while block.isValid() and block.blockNumber() < last:
                self.rehighlightBlock(block)
                block = block.next()
        finally:
            self._quick = False
        self._todo = list(range(first - 1, -1, -1)) + list(range(last, total))
        self._todo.sort(key=lambda n: n - last if n >= last else first - n)
        self._todo.reverse()  # popped from the end
        self._todo += reversed(self._recolour)  # first of all: the code on screen's colours
        self._waiting = set(self._todo)
        if self._todo:
            self._timer.start()

    def hold(self, ms: float) -> None:
        """Leave the blocks off screen for ``ms`` milliseconds (an answer streams: its
        tokens come first; what scrolls into view is formatted by :meth:`format_range`)."""
        self._held_until = time.perf_counter() + ms / 1000

    def format_range(self, first: int, last: int) -> None:
        """Format blocks ``first`` .. ``last`` (they came on screen) if still waiting."""
        document = self.document()
        if document is None or not self._waiting:
            return
        for number in range(max(first, 0), last):
            if number in self._waiting:
                self._waiting.discard(number)
                block = document.findBlockByNumber(number)
                if block.isValid():
                    self.rehighlightBlock(block)

    def _format_some(self) -> None:
        document = self.document()
        if document is None:
            self._todo, self._waiting = [], set()
            return
        now = time.perf_counter()
        if now < self._held_until:
            self._timer.start(int((self._held_until - now) * 1000) + 1)
            return
        until = now + FORMAT_SLICE_MS / 1000
        while self._todo and time.perf_counter() < until:
            number = self._todo.pop()
            if number in self._waiting:
                self._waiting.discard(number)
                block = document.findBlockByNumber(number)
                if block.isValid():
                    self.rehighlightBlock(block)
        if self._todo:
            self._timer.start(FORMAT_PAUSE_MS)
        else:
            self._waiting.clear()

    @contextmanager
    def states_only(self):
        """While a whole document goes in, blocks get their states only; what is on screen
        is formatted afterwards."""
        self._deferred = True
        try:
            yield
        finally:
            self._deferred = False

    # ------------------------------------------------------------------ formatting
    def highlightBlock(self, text: str) -> None:  # noqa: N802 - Qt API
        block = self.currentBlock()
        if self._deferred:
            previous = max(self.previousBlockState(), md.NORMAL)
            self.setCurrentBlockState(md.state_after(text, previous))
            return
        self._formatted(block.blockNumber())  # its measured token boxes are stale now
        self.generation += 1
        plan = self._plan()
        position = block.position()
        i = bisect.bisect_right(plan.region_start, position) - 1
        if i < 0 or plan.region_kind[i] != "body":
            self.setCurrentBlockState(md.NORMAL)
            return
        blocks = logical_line(block, plan.soft_breaks)
        line = "".join(b.text() for b in blocks) if len(blocks) > 1 else text
        first = blocks[0]
        previous = max(first.previous().userState(), md.NORMAL) if first.previous().isValid() else md.NORMAL
        if previous == md.NORMAL and not md.MARKUP.search(line):
            self.setCurrentBlockState(md.NORMAL)
            if block.userData() is not None:
                self.setCurrentBlockUserData(None)
            return
        colours = True
        if self._quick and md.in_code(previous):
            fence = md.fence_of(previous)
            if fence is not None and not md.lexer_ready(fence[1]):
                colours = False
                self._recolour.append(block.blockNumber())
        markup = md.scan_line(line, previous, colours)
        self.setCurrentBlockState(markup.state)
        if markup.kind in ("fence_open", "code", "fence_close"):
            self.active = True
        length = len(text.encode("utf-16-le")) // 2 if not text.isascii() else len(text)
        self._styles.follow_font(self.document())
        if len(blocks) == 1:
            units = utf16_offsets(line)

            def local(a: int, b: int) -> tuple[int, int]:
                return units(a), units(b)
        else:
            place = Placement(blocks, line)

            def local(a: int, b: int) -> tuple[int, int]:
                return place.position(a) - position, place.position(b, end=True) - position

        data = BlockMarkup(markup.kind)
        data.language = markup.language
        data.bullet = local(markup.bullet, markup.bullet)[0] if markup.bullet >= 0 else -1
        data.signature = self._apply(markup, local, length, line)
        if markup.kind in ("table", "table_rule") and len(blocks) == 1:
            data.columns = self._align_row(block, line, markup, previous)
        if markup.kind != "code":
            data.code_spans = [(a, b) for a, b, style in clipped(markup.styles, local, length) if style == "code"]
        data.marks = [(tuple(local(a, b) for a, b in hidden), *local(s, e)) for hidden, s, e in markup.marks]
        data.links = [(*local(a, b), url) for a, b, url in markup.links]
        if markup.kind == "fence_close":
            opening = opening_fence(block)
            if opening is not None:
                start = opening.position() - position
                end = start + opening.length() - 1
                data.marks.append((((start, end), (0, length)), end + 1, -1))
        self.setCurrentBlockUserData(data)
        if len(blocks) > 1:
            # Text added to a cut paragraph can close what an earlier part opened (a
            # "**"): the other parts whose formats would change are formatted again.
            for other in blocks:
                if other == block:
                    continue
                old = markup_of(other)
                base = other.position() - position
                size = other.length() - 1
                wanted = signature(markup, lambda a, b: (local(a, b)[0] - base, local(a, b)[1] - base), size)
                if old is None or old.signature != wanted:
                    self._stale.append(other.blockNumber())
            if self._stale and not self._stale_timer.isActive():
                self._stale_timer.start()

    def _align_row(self, block: QTextBlock, line: str, markup: md.LineMarkup, previous: int) -> tuple:
        """Space this table row so that its pipes line up with its table's; returns the
        (widths, alignments) used.  Rows of the table spaced for other widths (a streamed
        row widened a column) are formatted again."""
        rows = table_blocks(block)
        measured = []
        aligns: list[str] = []
        for row in rows:
            text = row.text()
            if row == block:
                hidden, rule = markup.hidden, markup.kind == "table_rule"
            else:
                before = row.previous()
                state = md.TABLE if row != rows[0] else max(before.userState(), md.NORMAL) if before.isValid() else md.NORMAL
                hidden, rule = md.scan_line(text, state, False).hidden, tables.is_rule(text)
            if rule:
                if not aligns:
                    aligns = tables.alignments(text)
                continue
            measured.append(tables.cells(text, hidden))
        widths = tables.column_widths(measured)
        columns = (tuple(widths), tuple(aligns))
        rule = markup.kind == "table_rule"
        spacing = tables.row_spacing(line, tables.cells(line, () if rule else markup.hidden), widths, aligns, rule)
        if spacing:
            advance = self._styles.table_advance()
            for offset, extra in spacing.items():
                if not 0 <= offset < len(line):
                    continue
                at = utf16_offsets(line)(offset)
                fmt = QTextCharFormat(self.format(at))
                now = fmt.fontLetterSpacing() if fmt.fontLetterSpacingType() == QFont.SpacingType.AbsoluteSpacing else 0.0
                fmt.setFontLetterSpacingType(QFont.SpacingType.AbsoluteSpacing)
                fmt.setFontLetterSpacing(now + extra * advance)
                self.setFormat(at, 1, fmt)
        for row in rows:
            if row == block:
                continue
            old = markup_of(row)
            if old is not None and old.kind in ("table", "table_rule") and old.columns != columns:
                self._stale.append(row.blockNumber())
        if self._stale and not self._stale_timer.isActive():
            self._stale_timer.start()
        return columns

    def _format_stale(self) -> None:
        """Format again the parts of cut paragraphs that a later part changed."""
        document = self.document()
        stale, self._stale = sorted(set(self._stale)), []
        for number in stale if document is not None else ():
            block = document.findBlockByNumber(number)
            if block.isValid():
                self.rehighlightBlock(block)

    def _apply(self, markup: md.LineMarkup, local, length: int, line: str) -> tuple:
        """Set this block's formats (``local`` maps line offsets to block offsets);
        returns their signature (:func:`.markdown_blocks.signature`)."""
        spans = clipped(markup.styles, local, length)
        if spans:
            edges = sorted({0, length, *(a for a, _, _ in spans), *(b for _, b, _ in spans)})
            for x0, x1 in zip(edges, edges[1:]):
                active = frozenset(s for a, b, s in spans if a <= x0 and b >= x1)
                if active:
                    self.setFormat(x0, x1 - x0, self._styles.styled(active))
        fixed = markup.kind in ("fence_open", "fence_close")
        for a, b in markup.hidden:
            index = a
            while index < b:
                # A run of one character takes one format (the spacing applies per character).
                end = index + 1
                while end < b and line[end] == line[index]:
                    end += 1
                at = local(index, end)
                start, stop = max(at[0], 0), min(at[1], length)
                if stop > start:
                    self.setFormat(start, stop - start, self._styles.hidden(line[index], fixed))
                index = end
        if markup.bullet >= 0:
            at = local(markup.bullet, markup.bullet + 1)
            if 0 <= at[0] < length:
                self.setFormat(at[0], 1, self._styles.styled(frozenset({"bullet"})))
        return signature(markup, local, length)
