"""Markdown rendered in the heatmap: a syntax highlighter over the messages' own text.

:mod:`.markdown_scan` says what each line's Markdown means; :class:`MarkdownHighlighter`
turns that into character formats (bold, headings, monospace, link underline, the code's
syntax colours) and *hides* the markup characters by drawing them at no width at all
(transparent, with a letter spacing of minus its advance): they keep
their document positions, so every token's position stays exact and the overlay,
which measures tokens from the layout, finds a hidden token's box empty.  Its brightness
goes to the span it marks instead (:func:`carry_marked`).

Bullets, rules, the "Copy" buttons of code blocks and messages are painted by the view
(:func:`paint_under_tint`, :func:`paint_over_tint`); :func:`copy_buttons` says where.
Only message bodies are rendered (labels, the system prompt and recall lines stay as
they are).  A paragraph the view cut while it streamed (``soft_breaks``) is read as one
line.
"""

from __future__ import annotations

import bisect
from typing import Callable

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt, QTimer
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QFontMetricsF,
    QPainter,
    QSyntaxHighlighter,
    QTextBlock,
    QTextBlockUserData,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
)

from . import markdown_scan as md
from .heatmap_layout import DocumentPlan

#: Heading sizes relative to the body text (h1 … h6).
HEADING_SCALE = (1.5, 1.3, 1.15, 1.05, 1.0, 1.0)
LINK_COLOR = QColor(140, 190, 255)
DIM_COLOR = QColor(140, 140, 150)
LABEL_COLOR = QColor(150, 150, 160)
BUTTON_TEXT = QColor(170, 170, 180)
BUTTON_FILL = QColor(52, 54, 64)
RULE_COLOR = QColor(90, 90, 100)
#: Syntax colours, light enough that the chunk tint (a per-channel minimum) still reads.
CODE_COLORS = {
    "c-keyword": QColor(200, 160, 255), "c-string": QColor(170, 230, 140), "c-number": QColor(250, 190, 120),
    "c-comment": QColor(150, 160, 150), "c-builtin": QColor(120, 210, 240), "c-function": QColor(130, 200, 255),
    "c-class": QColor(130, 220, 200), "c-decorator": QColor(240, 210, 120),
}
COPY_LABEL = "Copy"
#: Blocks formatted per batch after a whole document went in.
FORMAT_BATCH = 40
#: Milliseconds between two such batches (streamed tokens come first).
FORMAT_PAUSE_MS = 15
#: How far past the visible blocks a code block is followed to its closing fence.
FOLLOW_CODE_BLOCKS = 400


class BlockMarkup(QTextBlockUserData):
    """What a block's Markdown holds, offsets relative to the block's start (a mark of a
    closing fence reaches back to its opening one)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.marks: list[tuple[tuple[tuple[int, int], ...], int, int]] = []
        self.links: list[tuple[int, int, str]] = []
        self.bullet = -1
        self.language = ""


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
        #: While True (a whole document goes in), blocks get their states only.
        self.deferred = False
        self._todo: list[int] = []  # block numbers still to format, nearest first
        self._timer = QTimer()
        self._timer.setSingleShot(True)
        self._timer.setInterval(FORMAT_PAUSE_MS)
        self._timer.timeout.connect(self._format_some)
        self.active = False
        self._formats: dict[tuple, QTextCharFormat] = {}
        self._hidden: dict[tuple, QTextCharFormat] = {}
        self._font_key: tuple = ()

    def attach(self, document: QTextDocument) -> None:
        """Format ``document`` from now on.  Qt formats it whole on its next event loop
        turn and ignores edits until then: :meth:`follow` asks for it sooner."""
        self.setDocument(document)
        self._pending = True

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
        is on screen), and the rest a batch per event loop turn, nearest first."""
        document = self.document()
        if document is None:
            return
        total = document.blockCount()
        first = min(max(first, 0), max(total - 1, 0))
        last = min(total, first + count)
        block = document.findBlockByNumber(first)
        while block.isValid() and block.blockNumber() < last:
            self.rehighlightBlock(block)
            block = block.next()
        self._todo = list(range(first - 1, -1, -1)) + list(range(last, total))
        self._todo.sort(key=lambda n: n - last if n >= last else first - n)
        self._todo.reverse()  # popped from the end
        if self._todo:
            self._timer.start()

    def _format_some(self) -> None:
        document = self.document()
        if document is None:
            self._todo = []
            return
        for _ in range(FORMAT_BATCH):
            if not self._todo:
                return
            block = document.findBlockByNumber(self._todo.pop())
            if block.isValid():
                self.rehighlightBlock(block)
        self._timer.start()

    # ------------------------------------------------------------------ formatting
    def highlightBlock(self, text: str) -> None:  # noqa: N802 - Qt API
        block = self.currentBlock()
        if self.deferred:
            previous = max(self.previousBlockState(), md.NORMAL)
            self.setCurrentBlockState(md.state_after(text, previous))
            return
        self._formatted(block.blockNumber())  # its measured token boxes are stale now
        plan = self._plan()
        position = block.position()
        i = bisect.bisect_right(plan.region_start, position) - 1
        if i < 0 or plan.region_kind[i] != "body":
            self.setCurrentBlockState(md.NORMAL)
            return
        first, prefix = block, ""
        if plan.soft_breaks:
            cuts = set(plan.soft_breaks)
            while first.position() - 1 in cuts and first.previous().isValid():
                first = first.previous()
                prefix = first.text() + prefix
        line = prefix + text if prefix else text
        previous = max(first.previous().userState(), md.NORMAL) if first.previous().isValid() else md.NORMAL
        if previous == md.NORMAL and not md.MARKUP.search(line):
            self.setCurrentBlockState(md.NORMAL)
            if block.userData() is not None:
                self.setCurrentBlockUserData(None)
            return
        markup = md.scan_line(line, previous)
        self.setCurrentBlockState(markup.state)
        if markup.kind in ("fence_open", "code", "fence_close"):
            self.active = True
        units = _utf16_offsets(line)
        skip = units(len(prefix)) if prefix else 0
        length = units(len(line)) - skip
        data = BlockMarkup(markup.kind)
        data.language = markup.language
        data.bullet = units(markup.bullet) - skip if markup.bullet >= 0 else -1

        def local(a: int, b: int) -> tuple[int, int]:
            return units(a) - skip, units(b) - skip

        self._apply(markup, local, length, line, prefix)
        data.marks = [(tuple(local(a, b) for a, b in hidden), *local(s, e)) for hidden, s, e in markup.marks]
        data.links = [(*local(a, b), url) for a, b, url in markup.links]
        if markup.kind == "fence_close":
            opening = _opening_fence(block)
            if opening is not None:
                start = opening.position() - position
                end = start + opening.length() - 1
                data.marks.append((((start, end), (0, length)), end + 1, -1))
        self.setCurrentBlockUserData(data)

    def _apply(self, markup: md.LineMarkup, local, length: int, line: str, prefix: str) -> None:
        styles = [(a, b, style) for a, b, style in markup.styles if b > a]
        if styles:
            points = {0, length}
            spans = []
            for a, b, style in styles:
                a, b = local(a, b)
                a, b = max(a, 0), min(b, length)
                if b > a:
                    points.update((a, b))
                    spans.append((a, b, style))
            edges = sorted(points)
            for x0, x1 in zip(edges, edges[1:]):
                active = frozenset(s for a, b, s in spans if a <= x0 and b >= x1)
                if active:
                    self.setFormat(x0, x1 - x0, self._format(active))
        fixed = markup.kind in ("fence_open", "fence_close")
        for a, b in markup.hidden:
            for index in range(a, b):
                at = local(index, index + 1)
                if at[0] >= 0 and at[1] <= length and at[1] > at[0]:
                    self.setFormat(at[0], at[1] - at[0], self._hide(line[index], fixed))
        if markup.bullet >= 0:
            at = local(markup.bullet, markup.bullet + 1)
            if at[0] >= 0:
                self.setFormat(at[0], 1, self._format(frozenset({"bullet"})))

    def _base(self) -> QFont:
        document = self.document()
        font = document.defaultFont() if document is not None else QFont()
        key = (font.key(),)
        if key != self._font_key:
            self._font_key = key
            self._formats.clear()
            self._hidden.clear()
        return font

    def _format(self, styles: frozenset) -> QTextCharFormat:
        base = self._base()
        cached = self._formats.get(styles)
        if cached is not None:
            return cached
        fmt = QTextCharFormat()
        size = base.pointSizeF() if base.pointSizeF() > 0 else 10.0
        for style in sorted(styles):
            if style in ("bold",):
                fmt.setFontWeight(QFont.Weight.Bold)
            elif style == "italic" or style == "quote":
                fmt.setFontItalic(True)
            elif style == "strike":
                fmt.setFontStrikeOut(True)
            elif style.startswith("h") and style[1:].isdigit():
                fmt.setFontWeight(QFont.Weight.Bold)
                fmt.setFontPointSize(size * HEADING_SCALE[int(style[1:]) - 1])
            elif style in ("code", "table", "label"):
                fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
                fmt.setFontFamilies(fixed.families())
                fmt.setFontFixedPitch(True)
                if style == "label":
                    fmt.setForeground(LABEL_COLOR)
                    fmt.setFontPointSize(size * 0.85)
            elif style == "link":
                fmt.setFontUnderline(True)
                fmt.setForeground(LINK_COLOR)
            elif style == "dim":
                fmt.setForeground(DIM_COLOR)
            elif style == "bullet":
                fmt.setForeground(QColor(0, 0, 0, 0))  # the view paints a bullet there
            elif style in CODE_COLORS:
                fmt.setForeground(CODE_COLORS[style])
        self._formats[styles] = fmt
        return fmt

    def _hide(self, char: str, fixed: bool = False) -> QTextCharFormat:
        """A format that draws ``char`` at no width, transparent: the text font with a
        letter spacing of minus the character's advance (measured per character, as
        advances differ; the line keeps its height).  ``fixed``: in the monospace font
        (a fence line keeps the height of the code lines it borders)."""
        base = self._base()
        cached = self._hidden.get((char, fixed))
        if cached is not None:
            return cached
        font = QFont(base)
        if fixed:
            font.setFamilies(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).families())
            font.setFixedPitch(True)
        advance = QFontMetricsF(font).horizontalAdvance(char)
        font.setLetterSpacing(QFont.SpacingType.AbsoluteSpacing, -advance)
        fmt = QTextCharFormat()
        fmt.setFont(font)
        fmt.setForeground(QColor(0, 0, 0, 0))
        self._hidden[(char, fixed)] = fmt
        return fmt


def _utf16_offsets(line: str):
    """A function from ``line``'s Python string offsets to UTF-16 offsets (Qt's)."""
    if line.isascii() or all(ord(c) < 0x10000 for c in line):
        return lambda i: i
    table = np.concatenate(([0], np.cumsum([2 if ord(c) > 0xFFFF else 1 for c in line])))
    return lambda i: int(table[min(max(i, 0), len(line))])


def _opening_fence(block: QTextBlock) -> QTextBlock | None:
    """The block opening the code block that ``block`` (a closing fence) ends."""
    opening = block.previous()
    if not opening.isValid() or not md.in_code(opening.userState()):
        return None
    while opening.previous().isValid() and md.in_code(opening.previous().userState()):
        opening = opening.previous()
    return opening


def markup_of(block: QTextBlock) -> BlockMarkup | None:
    data = block.userData()
    return data if isinstance(data, BlockMarkup) else None


# ---------------------------------------------------------------------- brightness
def _marked_blocks(view):
    """Blocks on screen, then on through an open code block to its closing fence."""
    height = view.viewport().height()
    offset = view.contentOffset()
    block = view.firstVisibleBlock()
    while block.isValid():
        if view.blockBoundingGeometry(block).translated(offset).top() > height:
            break
        yield block
        block = block.next()
    for _ in range(FOLLOW_CODE_BLOCKS):
        if not block.isValid() or not md.in_code(block.previous().userState()):
            return
        yield block
        block = block.next()


def carry_marked(view, plan: DocumentPlan, frame, keys: np.ndarray, key_rows: Callable[[np.ndarray], np.ndarray]) -> None:
    """Give the boxes of every rendered span on screen at least the colour key of the
    hidden tokens that mark it (a ``**``, a heading's ``#``, a fence): the brighter of
    the two shows.  ``key_rows`` gives table rows their colour keys."""
    if not len(frame.token) or not len(plan.starts):
        return
    groups: list[tuple[np.ndarray, int, int]] = []
    for block in _marked_blocks(view):
        data = markup_of(block)
        if data is None or not data.marks:
            continue
        base = block.position()
        for hidden, start, end in data.marks:
            end = base + end if end >= 0 else base - 1  # -1: up to this block (a closing fence)
            indices = []
            for a, b in hidden:
                lo = int(np.searchsorted(plan.ends, base + a, "right"))
                hi = int(np.searchsorted(plan.starts, base + b, "left"))
                if hi > lo:
                    indices.append(np.arange(lo, hi))
            if indices:
                groups.append((np.concatenate(indices), base + start, end))
    if not groups:
        return
    every = np.concatenate([g[0] for g in groups])
    hidden_keys = key_rows(plan.rows[every])
    box_starts, box_ends = plan.starts[frame.token], plan.ends[frame.token]
    at = 0
    for indices, start, end in groups:
        strongest = int(hidden_keys[at : at + len(indices)].max())
        at += len(indices)
        inside = (box_starts < end) & (box_ends > start)
        if inside.any():
            keys[inside] = np.maximum(keys[inside], strongest)


# ---------------------------------------------------------------------- painting
def _visible(view):
    offset = view.contentOffset()
    height = view.viewport().height()
    block = view.firstVisibleBlock()
    while block.isValid():
        rect = view.blockBoundingGeometry(block).translated(offset)
        if rect.top() > height:
            break
        yield block, rect
        block = block.next()


def _region(plan: DocumentPlan, position: int) -> int:
    return bisect.bisect_right(plan.region_start, position) - 1


def copy_buttons(view, plan: DocumentPlan) -> list[tuple[QRectF, str, object]]:
    """The "Copy" buttons on screen: (viewport rectangle, "code" or "message", the
    opening fence's block or the message's turn id)."""
    metrics = QFontMetricsF(view.font())
    width = metrics.horizontalAdvance(COPY_LABEL) + metrics.height() * 0.8
    right = view.viewport().width() - metrics.height() * 0.4
    buttons = []
    for block, rect in _visible(view):
        data = markup_of(block)
        layout = block.layout()
        if layout is None or not layout.lineCount():
            continue
        # The first line's own height: a block's rectangle is taller while it is the last.
        line = layout.lineAt(0)
        top, height = rect.top() + line.y(), line.height()
        if data is not None and data.kind == "fence_open":
            buttons.append((QRectF(right - width, top + 1, width, height - 2), "code", block))
            continue
        i = _region(plan, block.position())
        if i >= 0 and plan.region_kind[i] == "header" and plan.region_start[i] == block.position():
            buttons.append((QRectF(right - width, top, width, height), "message", plan.region_turn[i]))
    return buttons


def code_text(view, opening: QTextBlock, soft_breaks) -> str:
    """The code of the block ``opening`` opens (up to its closing fence, or the end)."""
    from .heatmap_stream import without_cuts

    first = opening.next()
    block = first
    while block.isValid():
        data = markup_of(block)
        if data is not None and data.kind == "fence_close":
            break
        block = block.next()
    start = first.position()
    end = block.position() - 1 if block.isValid() else view.document().characterCount() - 1
    if not first.isValid() or end <= start:
        return ""
    cursor = QTextCursor(view.document())
    cursor.setPosition(start)
    cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
    text = cursor.selection().toPlainText().replace("\u2029", "\n")
    return without_cuts(text, start, end, soft_breaks)


def link_at(view, point: QPointF) -> str | None:
    """The address of the Markdown link under a viewport point, or None."""
    cursor = view.cursorForPosition(point.toPoint())
    block = cursor.block()
    data = markup_of(block)
    if data is None or not data.links:
        return None
    layout = block.layout()
    geo = view.blockBoundingGeometry(block).translated(view.contentOffset())
    if layout is None or not geo.contains(point):
        return None
    local = point - geo.topLeft()
    for i in range(layout.lineCount()):
        line = layout.lineAt(i)
        if line.y() <= local.y() < line.y() + line.height():
            if local.x() > line.x() + line.naturalTextWidth():
                return None
            offset = line.xToCursor(local.x(), line.CursorPosition.CursorOnCharacter)
            for start, end, url in data.links:
                if start <= offset < end:
                    return url
    return None


def paint_under_tint(view, painter: QPainter, bounds: QRectF) -> None:
    """Bullets (tinted like the text, so drawn before the chunk colours)."""
    painter.setPen(QColor(255, 255, 255))
    for block, rect in _visible(view):
        if rect.bottom() < bounds.top() or rect.top() > bounds.bottom():
            continue
        data = markup_of(block)
        if data is None or data.bullet < 0:
            continue
        layout = block.layout()
        if layout is None or not layout.lineCount():
            continue
        line = layout.lineForTextPosition(data.bullet)
        x0 = line.cursorToX(data.bullet)[0]
        x1 = line.cursorToX(data.bullet + 1)[0]
        cell = QRectF(rect.left() + x0, rect.top() + line.y(), max(x1 - x0, 1.0), line.height())
        painter.drawText(cell, Qt.AlignmentFlag.AlignCenter, "•")


def paint_over_tint(view, plan: DocumentPlan, painter: QPainter, bounds: QRectF) -> None:
    """Thematic breaks and the "Copy" buttons, in fixed greys."""
    for block, rect in _visible(view):
        if rect.bottom() < bounds.top() or rect.top() > bounds.bottom():
            continue
        data = markup_of(block)
        if data is not None and data.kind == "rule":
            y = rect.top() + rect.height() / 2
            painter.fillRect(QRectF(rect.left() + 4, y, view.viewport().width() - rect.left() - 12, 1), RULE_COLOR)
    painter.setFont(view.font())
    for rect, kind, _ in copy_buttons(view, plan):
        if rect.bottom() < bounds.top() or rect.top() > bounds.bottom():
            continue
        if kind == "code":
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(BUTTON_FILL)
            painter.drawRoundedRect(rect, 3, 3)
        painter.setPen(BUTTON_TEXT if kind == "code" else DIM_COLOR)
        painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, COPY_LABEL)
    painter.setPen(Qt.PenStyle.NoPen)
