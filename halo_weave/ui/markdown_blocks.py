"""What a heatmap document's blocks hold for Markdown, and where a line's offsets fall.

A message body's line may span several blocks (the view cuts a streaming paragraph:
``soft_breaks``); :func:`logical_line` finds them and :class:`Placement` maps the joined
line's offsets to document positions.  :class:`BlockMarkup` is what a formatted block
keeps (its marks, links, code spans, table columns), read back by the overlay.
"""

from __future__ import annotations

import bisect

import numpy as np
from PySide6.QtGui import QTextBlock, QTextBlockUserData

from . import markdown_scan as md


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
        #: The formats it was given (:func:`signature`), to tell when they change.
        self.signature: tuple = ()
        #: (start, end) of its inline code spans (drawn on a background of their own).
        self.code_spans: list[tuple[int, int]] = []
        #: A table row's column widths and alignments it was spaced for.
        self.columns: tuple = ()



def table_blocks(block: QTextBlock) -> list[QTextBlock]:
    """The rows of the table ``block`` is a row of: the rows before it (their state says
    so) and the lines after it that continue it."""
    rows = [block]
    before = block.previous()
    while before.isValid() and before.userState() == md.TABLE:
        rows.insert(0, before)
        before = before.previous()
    after = block.next()
    while after.isValid() and md.state_after(after.text(), md.TABLE) == md.TABLE:
        rows.append(after)
        after = after.next()
    return rows


def clipped(styles, local, length: int) -> list[tuple[int, int, str]]:
    spans = []
    for a, b, style in styles:
        if b > a:
            a, b = local(a, b)
            a, b = max(a, 0), min(b, length)
            if b > a:
                spans.append((a, b, style))
    return spans


def signature(markup: md.LineMarkup, local, length: int) -> tuple:
    """What a block of ``length`` units gets from a line's markup: its styles and hidden
    ranges clipped to it (equal signatures: equal formats)."""
    hidden = []
    for a, b in markup.hidden:
        x, y = local(a, b)
        x, y = max(x, 0), min(y, length)
        if y > x:
            hidden.append((x, y))
    return tuple(clipped(markup.styles, local, length)), tuple(hidden)


def logical_line(block: QTextBlock, soft_breaks) -> list[QTextBlock]:
    """The blocks of the paragraph line ``block`` belongs to: the view may have cut a
    streaming paragraph into several (``soft_breaks``: the cuts' positions)."""
    if not soft_breaks:
        return [block]
    cuts = set(soft_breaks)
    blocks = [block]
    while blocks[0].position() - 1 in cuts and blocks[0].previous().isValid():
        blocks.insert(0, blocks[0].previous())
    following = block.next()
    while following.isValid() and following.position() - 1 in cuts:
        blocks.append(following)
        following = following.next()
    return blocks


class Placement:
    """Document positions of a logical line's offsets (Python string offsets of the
    joined text; each cut between its blocks takes one position)."""

    def __init__(self, blocks: list[QTextBlock], line: str) -> None:
        self.units = utf16_offsets(line)
        self.starts = []
        at = 0
        for block in blocks:
            self.starts.append(at)
            at += len(block.text())
        self.positions = [block.position() for block in blocks]

    def position(self, offset: int, end: bool = False) -> int:
        """The document position of ``offset``; ``end``: as the end of a range (an end at
        a cut stays in the block before it)."""
        j = bisect.bisect_left(self.starts, offset) - 1 if end else bisect.bisect_right(self.starts, offset) - 1
        j = max(j, 0)
        return self.positions[j] + self.units(offset) - self.units(self.starts[j])


def utf16_offsets(line: str):
    """A function from ``line``'s Python string offsets to UTF-16 offsets (Qt's)."""
    if line.isascii() or all(ord(c) < 0x10000 for c in line):
        return lambda i: i
    table = np.concatenate(([0], np.cumsum([2 if ord(c) > 0xFFFF else 1 for c in line])))
    return lambda i: int(table[min(max(i, 0), len(line))])


def opening_fence(block: QTextBlock) -> QTextBlock | None:
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
