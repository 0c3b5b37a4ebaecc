"""Aligned GFM table columns, without changing the text.

Qt-free.  A table's rows keep their characters (every one is a token's), so columns are
lined up by *spacing*: :func:`row_spacing` says how many character advances of extra
room (positive or negative) each of a few characters of a row takes so that every ``|``
of a column sits at the same x in a monospace font.  Cells are measured by what is drawn
(:func:`cells`: trimmed, hidden markup such as ``**`` left out), each column is as wide
as its widest cell (:func:`column_widths`), and the delimiter row's ``:---:`` / ``---:``
centre or right-align a column (:func:`alignments`).

A row is laid out as ``| cell | cell |``: the pipe, one space, the cell padded to its
column's width, one space, the next pipe.  A row without a leading pipe starts its first
cell at the line's start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

_RULE_CELL = re.compile(r"^:?-+:?$")


@dataclass(frozen=True)
class Cell:
    """One cell of a row: ``start``..``end`` is its trimmed text, ``left``..``right`` the
    room between its pipes (``left`` is after the opening pipe or the line's start)."""

    left: int
    start: int
    end: int
    right: int
    #: Characters of the trimmed text that are drawn (hidden markup left out).
    width: int


def pipes(text: str) -> list[int]:
    """Offsets of the ``|`` that separate cells (an escaped ``\\|`` does not)."""
    return [i for i, c in enumerate(text) if c == "|" and (i == 0 or text[i - 1] != "\\")]


def cells(text: str, hidden: list[tuple[int, int]] | tuple = ()) -> list[Cell]:
    """The cells of a table row; ``hidden``: ranges the rendering draws at no width."""
    return list(_cells(text, tuple(hidden)))


@lru_cache(maxsize=4096)
def _cells(text: str, hidden: tuple[tuple[int, int], ...]) -> tuple[Cell, ...]:
    # Every row of a table is measured again whenever one of its rows is formatted.
    bars = pipes(text)
    if not bars:
        return []
    lead = text[: bars[0]].strip() == ""
    bounds = ([bars[0] + 1] if lead else [0]) + [b + 1 for b in (bars[1:] if lead else bars)]
    ends = (bars[1:] if lead else bars) + [len(text)]
    out = []
    for left, right in zip(bounds, ends):
        if left > right:
            continue
        segment = text[left:right]
        if right == len(text) and not segment.strip() and out:
            break  # the trailing pipe closes the row
        start = left + len(segment) - len(segment.lstrip())
        end = right - (len(segment) - len(segment.rstrip()))
        end = max(end, start)
        shown = end - start - sum(max(0, min(b, end) - max(a, start)) for a, b in hidden)
        out.append(Cell(left, start, end, right, max(shown, 0)))
    return tuple(out)


def is_rule(text: str) -> bool:
    """Whether ``text`` is a delimiter row (``|---|:--:|``)."""
    row = cells(text)
    return bool(row) and all(_RULE_CELL.match(text[c.start:c.end]) for c in row)


def alignments(rule: str) -> list[str]:
    """``left``, ``center`` or ``right`` per column of a delimiter row."""
    out = []
    for cell in cells(rule):
        spec = rule[cell.start:cell.end]
        if spec.startswith(":") and spec.endswith(":") and len(spec) > 1:
            out.append("center")
        elif spec.endswith(":"):
            out.append("right")
        else:
            out.append("left")
    return out


def column_widths(rows: list[list[Cell]]) -> list[int]:
    """Each column's width: its widest cell's drawn characters."""
    widths: list[int] = []
    for row in rows:
        for i, cell in enumerate(row):
            if i == len(widths):
                widths.append(0)
            widths[i] = max(widths[i], cell.width)
    return widths


def row_spacing(text: str, row: list[Cell], widths: list[int], aligns: list[str],
                rule: bool = False) -> dict[int, float]:
    """Extra advances per character offset of ``text`` that line its pipes up with the
    table's (``widths``, ``aligns`` from the whole table).  A delimiter row (``rule``)
    spreads its room over its dashes, so it stays one line."""
    spacing: dict[int, float] = {}
    if not row:
        return spacing
    leading = row[0].left > 0
    for i, cell in enumerate(row):
        if i >= len(widths):
            break
        margin = 1 if (i > 0 or leading) else 0
        # Room from ``left`` to the next pipe wanted, and what the text gives.
        wanted = margin + widths[i] + 1
        if rule and cell.end > cell.start:
            extra = wanted - (cell.right - cell.left)
            share = extra / (cell.end - cell.start)
            for offset in range(cell.start, cell.end):
                spacing[offset] = spacing.get(offset, 0.0) + share
            continue
        pad = widths[i] - cell.width
        align = aligns[i] if i < len(aligns) else "left"
        before = 0.0 if align == "left" else (pad if align == "right" else pad / 2)
        lead_room = cell.start - cell.left
        # The cell's text starts ``margin + before`` advances after ``left``.
        shift = margin + before - lead_room
        if shift and cell.start > 0 and (cell.start - 1 >= cell.left or margin):
            spacing[cell.start - 1] = spacing.get(cell.start - 1, 0.0) + shift
        else:
            shift = 0.0
        if cell.right >= len(text):
            continue  # nothing after the last cell to line up
        drawn = (cell.right - cell.left) - (cell.end - cell.start - cell.width) + shift
        rest = wanted - drawn
        last = cell.right - 1
        if rest and last >= 0:
            spacing[last] = spacing.get(last, 0.0) + rest
    return {k: v for k, v in spacing.items() if v}
