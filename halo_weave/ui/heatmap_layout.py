"""The heatmap's document plan: its plain text and where every live token sits in it.

Qt-free.  :func:`build_plan` lays out the system prompt and the live context grouped by
turns (role label, user-turn timestamp, "pruned here" markers) and records, for every
displayed token, its table row and its ``[start, end)`` character range in the
document (UTF-16 code units, which is how Qt counts).  :meth:`DocumentPlan.extend`
appends the tokens streamed since the last call.  Framing tokens (chat-template
markers) are never shown.

The text is split into *regions* that each start a block: ``system`` (the prompt),
``header`` (a turn's label), ``body`` (its tokens), ``gap`` (chunks pruned here) and
``recall`` (under a user message: what it recalled, :mod:`.recall_line`, whose links are
in ``links``).  The header of a message where branches part carries "‹ 2 / 3 ›"
(``branch_marks``); its arrows are in ``branch_links``.

While an answer streams, the view may cut its growing paragraph into blocks where a
line wraps anyway (:meth:`DocumentPlan.soft_break`), so Qt re-lays out and repaints a
few lines per token instead of the whole paragraph; ``soft_breaks`` lists those extra
separators, and the next :func:`build_plan` (at the end of the turn) has none.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..conversation import Conversation
from .recall_line import recall_line

SYSTEM_LABEL = "System prompt"
ROLE_LABELS = {"user": "User", "assistant": "Assistant", "system": "System", "document": "Document"}


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units (QTextDocument positions)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le")) // 2


def turn_label(role: str, created_at: float | None, now: float | None = None,
               names: dict[str, str] | None = None) -> str:
    """"User · 14:32" (date added when not today); assistant turns carry no time.
    ``names``: the conversation's own names for its roles (an imported character's)."""
    label = (names or {}).get(role) or ROLE_LABELS.get(role, role.title())
    if role != "user" or created_at is None:
        return label
    when = time.localtime(created_at)
    today = time.localtime(now if now is not None else time.time())
    if (when.tm_year, when.tm_yday) == (today.tm_year, today.tm_yday):
        stamp = time.strftime("%H:%M", when)
    elif when.tm_year == today.tm_year:
        stamp = time.strftime("%a %d %b %H:%M", when)
    else:
        stamp = time.strftime("%d %b %Y %H:%M", when)
    return f"{label} · {stamp}"


def branch_mark(number: int, count: int) -> tuple[str, list[tuple[int, int, int]]]:
    """The header's "  ‹ 2 / 3 ›" and its arrows: (start, end, step) in UTF-16 units
    from the mark's start (an arrow with nowhere to go is no link)."""
    text = f"  ‹ {number} / {count} ›"
    links = []
    if number > 1:
        links.append((2, 3, -1))
    if number < count:
        links.append((len(text) - 1, len(text), 1))
    return text, links


def displayable(text: str) -> str:
    """``text`` as the document will hold it, one position per UTF-16 unit.

    Qt turns ``"\\r\\n"`` into one paragraph separator, and a lone ``"\\r"`` into one, so a
    carriage return would shift every later token by a position once a CRLF is inserted
    whole (a rebuild) but not when its halves stream in separately: drop them.
    """
    return text.replace("\r", "") if "\r" in text else text


def gap_label(count: int) -> str:
    return f"⋯ {count} chunk{'s' if count != 1 else ''} pruned here"


class _Column:
    """A growable int64 numpy column."""

    def __init__(self) -> None:
        self._data = np.zeros(1024, np.int64)
        self.n = 0

    def extend(self, values: np.ndarray) -> None:
        need = self.n + len(values)
        if need > len(self._data):
            grown = np.zeros(max(need, 2 * len(self._data)), np.int64)
            grown[: self.n] = self._data[: self.n]
            self._data = grown
        self._data[self.n : need] = values
        self.n = need

    @property
    def values(self) -> np.ndarray:
        return self._data[: self.n]


@dataclass
class DocumentPlan:
    """What the heatmap document holds; see the module docstring.

    ``rows``/``starts``/``ends`` are aligned per displayed token: table row, first and
    one-past-last document position.  ``region_*`` are aligned per region.
    """

    length: int = 0
    ends_with_newline: bool = True
    rows_seen: int = 0  # table rows consumed, hidden framing included
    last_position: int = -1
    last_turn_id: int | None = None
    region_start: list[int] = field(default_factory=list)
    region_kind: list[str] = field(default_factory=list)
    region_role: list[str] = field(default_factory=list)
    region_turn: list[int] = field(default_factory=list)
    #: Document positions of paragraph separators the view inserted (see module docstring).
    soft_breaks: list[int] = field(default_factory=list)
    #: The recall lines' links: (start, end, user turn id, chunk id or recall_line.MORE).
    links: list[tuple[int, int, int, int]] = field(default_factory=list)
    #: User turns whose recall line lists every chunk (the others stop at recall_line.SHOWN).
    expanded: frozenset[int] = frozenset()
    #: Turn id -> (number, count): the first message of a branch, shown "‹ number / count ›".
    branch_marks: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: The header arrows: (start, end, turn id, step -1 or +1).
    branch_links: list[tuple[int, int, int, int]] = field(default_factory=list)
    _recall_done: set[int] = field(default_factory=set)
    _rows: _Column = field(default_factory=_Column)
    _starts: _Column = field(default_factory=_Column)
    _ends: _Column = field(default_factory=_Column)
    _parts: list[str] = field(default_factory=list)

    @property
    def rows(self) -> np.ndarray:
        return self._rows.values

    @property
    def starts(self) -> np.ndarray:
        return self._starts.values

    @property
    def ends(self) -> np.ndarray:
        return self._ends.values

    def take_text(self) -> str:
        """The text added since the last call."""
        text = "".join(self._parts)
        self._parts = []
        return text

    def soft_break(self, position: int) -> None:
        """A paragraph separator was inserted into the document at ``position``: what
        follows moves one place on (a token it falls inside just grows by one)."""
        starts, ends = self._starts.values, self._ends.values
        first = int(np.searchsorted(ends, position, "right"))
        tail = starts[first:]
        tail[tail >= position] += 1
        ends[first:] += 1
        self.region_start = [r + 1 if r > position else r for r in self.region_start]
        self.links = [(a + 1, b + 1, t, c) if a > position else (a, b, t, c) for a, b, t, c in self.links]
        self.branch_links = [(a + 1, b + 1, t, c) if a > position else (a, b, t, c)
                             for a, b, t, c in self.branch_links]
        self.soft_breaks.append(position)
        self.length += 1

    # ------------------------------------------------------------------ emitting
    def _emit(self, text: str, length: int | None = None) -> None:
        if not text:
            return
        self._parts.append(text)
        self.length += utf16_len(text) if length is None else length
        self.ends_with_newline = text[-1] in "\n\r\u2029"

    def _newline(self) -> None:
        if not self.ends_with_newline:
            self._emit("\n")

    def _region(self, kind: str, role: str = "", turn_id: int = -1) -> None:
        self.region_start.append(self.length)
        self.region_kind.append(kind)
        self.region_role.append(role)
        self.region_turn.append(turn_id)

    def _block(self, kind: str, text: str, role: str = "", turn_id: int = -1) -> None:
        """A region of its own lines (system prompt, header, gap marker)."""
        self._newline()
        self._region(kind, role, turn_id)
        self._emit(text)
        self._newline()

    def _tokens(self, row0: int, texts: list[str]) -> None:
        """Emit the texts of consecutive table rows starting at ``row0``."""
        text = "".join(texts)
        if "\r" in text:
            texts = [displayable(t) for t in texts]
            text = "".join(texts)
        if text.isascii():
            lengths = np.fromiter((len(t) for t in texts), np.int64, len(texts))
        else:
            lengths = np.fromiter((utf16_len(t) for t in texts), np.int64, len(texts))
        ends = self.length + np.cumsum(lengths)
        self._rows.extend(np.arange(row0, row0 + len(texts), dtype=np.int64))
        self._starts.extend(ends - lengths)
        self._ends.extend(ends)
        self._emit(text, int(lengths.sum()))

    # ------------------------------------------------------------------ building
    def add_system(self, text: str) -> None:
        if not text:
            return
        self._block("system", f"{SYSTEM_LABEL}\n{displayable(text).rstrip()}", "system")

    def extend(self, conv: Conversation, pruned_starts: np.ndarray | None = None) -> bool:
        """Lay out table rows from ``rows_seen`` on.  False when the table no longer
        matches the plan (a prune, resurrection or merge happened): rebuild instead."""
        table = conv.table
        n = len(table)
        if n < self.rows_seen or (
            self.rows_seen and int(table.position[self.rows_seen - 1]) != self.last_position
        ):
            return False
        if n == self.rows_seen:
            return True
        chunk_ids = table.chunk_id
        positions = table.position
        row = self.rows_seen
        while row < n:
            chunk = conv.chunks[int(chunk_ids[row])]
            run_end = min(n, row + (chunk.end - int(positions[row])))
            if run_end <= row:  # a chunk whose positions are not contiguous: lay out anew
                return False
            if chunk.turn_id != self.last_turn_id:
                if self.last_turn_id is not None:
                    self._recall(conv, self.last_turn_id)
                if pruned_starts is not None:
                    self._gap_before(chunk.start, pruned_starts, "", -1)
                turn = conv.turns[chunk.turn_id]
                if self.length:
                    self._newline()
                    self._region("blank")
                    self._emit("\n")
                self._header(turn.role, turn_label(turn.role, turn.created_at, names=conv.role_names),
                             chunk.turn_id)
                self._region("body", turn.role, chunk.turn_id)
                self.last_turn_id = chunk.turn_id
            elif pruned_starts is not None and not chunk.framing:
                self._gap_before(chunk.start, pruned_starts, chunk.role, chunk.turn_id)
            if not chunk.framing:
                texts = conv.chunk_texts(chunk.id)
                first = int(positions[row]) - chunk.start
                self._tokens(row, texts[first : first + (run_end - row)])
            row = run_end
            self.last_position = int(positions[run_end - 1])
        self.rows_seen = n
        last = conv.turns.get(self.last_turn_id) if self.last_turn_id is not None else None
        if last is not None and last.complete:  # a message is added whole: its line goes under it
            self._recall(conv, last.turn_id)
        return True

    def _header(self, role: str, label: str, turn_id: int) -> None:
        """A message's label line, with its branch mark where branches part."""
        mark = self.branch_marks.get(turn_id)
        text, links = branch_mark(*mark) if mark else ("", [])
        self._newline()
        start = self.length + utf16_len(label)
        self._block("header", label + text, role, turn_id)
        self.branch_links += [(start + a, start + b, turn_id, step) for a, b, step in links]

    def _recall(self, conv: Conversation, turn_id: int) -> None:
        """The line under a user message that says what it recalled (once)."""
        if turn_id in self._recall_done:
            return
        self._recall_done.add(turn_id)
        turn = conv.turns.get(turn_id)
        if turn is None or turn.role != "user":
            return
        text, links = recall_line(conv, turn_id, turn_id in self.expanded)
        if not text:
            return
        self._newline()
        start = self.length
        self._block("recall", text, "user", turn_id)
        self.links += [(start + link.start, start + link.end, turn_id, link.chunk_id) for link in links]

    def _gap_before(self, start: int, pruned_starts: np.ndarray, role: str, turn_id: int) -> None:
        """A marker where pruned chunks lay between the previous live token and ``start``."""
        if not len(pruned_starts):
            return
        lo = np.searchsorted(pruned_starts, self.last_position, "right") if self.last_position >= 0 else 0
        hi = np.searchsorted(pruned_starts, start, "left")
        if hi > lo:
            self._block("gap", gap_label(int(hi - lo)), role, turn_id)
            if turn_id >= 0:
                self._region("body", role, turn_id)


def build_plan(conv: Conversation, expanded: frozenset[int] = frozenset(),
               branch_marks: dict[int, tuple[int, int]] | None = None) -> tuple[DocumentPlan, str]:
    """Lay out the whole live context: returns the plan and the document text.
    ``expanded``: user turns whose recall line lists every chunk; ``branch_marks``: turn
    id -> (number, count) of the messages where branches part."""
    plan = DocumentPlan(expanded=expanded, branch_marks=dict(branch_marks or {}))
    plan.add_system(conv.system.text or "".join(conv.system.texts))
    _, pruned_starts = conv.chunks.pruned_content()
    plan.extend(conv, pruned_starts)
    return plan, plan.take_text()
