"""The graveyard's list model: pruned chunks as rows, lazy previews, the text filter.

:class:`GraveyardModel` is a thin ``QAbstractListModel`` over the plain list from
``Conversation.graveyard()``; :class:`GraveRow` is one row as shown.  The panel and the
delegate that draws the rows are in :mod:`.graveyard`.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from PySide6.QtCore import QAbstractListModel, QModelIndex, QObject, QPersistentModelIndex, Qt, QTimer

from .chunk_words import chunk_title

#: Characters of text kept for a preview.
PREVIEW_CHARS = 160
#: Milliseconds of index building per slice between events.
INDEX_SLICE_MS = 8

Preview = Callable[[int], str]
#: Bulk preview loader: texts of many chunks in one query (chunk id -> text).
Previews = Callable[[Sequence[int]], dict[int, str]]


@dataclass(frozen=True)
class GraveRow:
    """One pruned chunk as the graveyard shows it."""

    chunk_id: int
    turn_id: int
    role: str
    chunk_index: int
    token_count: int
    brightness_at_prune: int | None
    tool_result: bool = False
    #: The message's number in the chat shown (None: not known).
    number: int | None = None

    @classmethod
    def from_chunk(cls, chunk, number: int | None = None) -> "GraveRow":
        return cls(
            chunk.id, chunk.turn_id, chunk.role, chunk.chunk_index, chunk.token_count,
            chunk.brightness_at_prune, bool(getattr(chunk, "tool_result", False)), number,
        )

    def title(self) -> str:
        """"Message 12 · Assistant · paragraph 3", as the heatmap's context menu says it."""
        return chunk_title(self.number, self.role, self.chunk_index, self.tool_result)

    def meta(self) -> str:
        """The row's first line: "Message 12 · Assistant · paragraph 3" (the pane is narrow:
        the figures are in :meth:`details`)."""
        return self.title()

    def details(self) -> str:
        """The row's tooltip lines above the preview: its size, and its brightness when
        it was pruned."""
        bright = "not measured" if self.brightness_at_prune is None else f"{self.brightness_at_prune:,}"
        tokens = f"{self.token_count:,} token{'s' if self.token_count != 1 else ''}"
        return f"{self.title()}\n{tokens} · brightness when pruned: {bright} (of 10,000)"


#: Characters of a chunk shown in the graveyard.
PREVIEW_CHARS = 160


def chunk_preview(conv, chunk) -> str:
    """The opening of a chunk (or chunk id) of ``conv`` as :func:`clean_preview` shows it;
    "(text unavailable)" where its text cannot be read."""
    chunk_id = chunk if isinstance(chunk, int) else chunk.id
    try:
        text = conv.chunk_text(chunk_id)
    except Exception:  # noqa: BLE001 - a preview is never worth an error dialog
        return "(text unavailable)"
    return clean_preview(text[: 4 * PREVIEW_CHARS])  # Markdown marks take room before they go


_FENCE = re.compile(r"^[ \t]*(```+|~~~+)[ \t]*([\w+#.-]*)[^\n]*$", re.M)
_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+", re.M)
_QUOTE = re.compile(r"^[ \t]{0,3}>[ \t]?", re.M)
_BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+", re.M)
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_EMPHASIS = re.compile(r"(?<![\w*_~`])(\*\*|__|~~|\*|`+)(?=\S)(.+?)(?<=\S)\1(?![\w*_~`])")


def plain_text(text: str) -> str:
    """Markdown read as a person reads it, for a one-line preview: fences become "code
    (python):", headings, quotes, emphasis and backticks lose their marks, a link keeps
    its words, a bullet becomes "•"."""
    fences = iter(range(1 << 30))

    def fence(match: re.Match) -> str:  # opening fences say "code", closing ones nothing
        if next(fences) % 2:
            return ""
        return f"code ({match.group(2)}):" if match.group(2) else "code:"

    text = _FENCE.sub(fence, text)
    text = _HEADING.sub("", text)
    text = _QUOTE.sub("", text)
    text = _BULLET.sub(r"\1• ", text)
    text = _LINK.sub(r"\1", text)
    for _ in range(2):  # **`nested`**
        text = _EMPHASIS.sub(r"\2", text)
    return text


def clean_preview(text: str) -> str:
    """Markdown marks gone (:func:`plain_text`), whitespace collapsed, cut to
    :data:`PREVIEW_CHARS`."""
    text = " ".join(plain_text(text).split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


class GraveyardModel(QAbstractListModel):
    """List model over graveyard rows (newest first), with an optional text filter.

    Roles: ``DisplayRole`` (meta line), ``PreviewRole`` (text preview, loaded lazily),
    ``ChunkIdRole``, ``RowRole`` (the :class:`GraveRow`), ``ToolTipRole``.
    """

    ChunkIdRole = Qt.ItemDataRole.UserRole + 1
    PreviewRole = Qt.ItemDataRole.UserRole + 2
    RowRole = Qt.ItemDataRole.UserRole + 3

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._source: list = []  # Chunk or GraveRow, newest first
        self._rows: list[GraveRow | None] = []  # made on first use
        self._shown: list[int] | None = None  # indices into _source; None = all
        self._preview: Preview | None = None
        self._bulk: Previews | None = None
        self._previews: dict[int, str] = {}
        self._index: list[str] = []  # lowercase "meta preview" of _source[:len(_index)]
        self._index_timer = QTimer(self)
        self._index_timer.setInterval(0)
        self._index_timer.timeout.connect(self._index_slice)
        self._filter = ""
        self._numbers: dict[int, int] = {}

    # -- content
    def set_rows(self, rows: Iterable, preview: Preview | None = None, previews: Previews | None = None,
                 numbers: dict[int, int] | None = None) -> None:
        """Replace the rows (``Chunk`` objects or :class:`GraveRow`, newest first).

        ``preview(chunk_id)`` is called for rows as they are drawn; ``previews(ids)``,
        when given, loads the filter index in one call instead; ``numbers``: turn id ->
        the message's number in the chat shown (the rows say "Message 12")."""
        self.beginResetModel()
        self._numbers = dict(numbers or {})
        # A sequence (conv.graveyard()'s) is kept as is: its rows are made as they are read.
        self._source = rows if isinstance(rows, Sequence) else list(rows)
        self._rows = [None] * len(self._source)
        self._preview = preview
        self._bulk = previews
        self._previews = {}
        self._index = []
        self._index_timer.stop()
        self._shown = self._apply_filter()
        self.endResetModel()

    def set_filter(self, text: str) -> None:
        """Show only rows whose meta line or preview contains every word of ``text``."""
        self.beginResetModel()
        self._filter = text.strip().lower()
        self._shown = self._apply_filter()
        self.endResetModel()

    def total_count(self) -> int:
        return len(self._source)

    def row_of(self, chunk_id: int) -> int | None:
        """The row that shows ``chunk_id`` now (None: not in the graveyard, or filtered out)."""
        ids = getattr(self._source, "ids", None)  # conv.graveyard()'s ids: no row is made
        if ids is None:
            ids = [self._row(i).chunk_id for i in range(len(self._source))]
        try:
            index = ids.index(chunk_id)
        except ValueError:
            return None
        if self._shown is None:
            return index
        return self._shown.index(index) if index in self._shown else None

    def row_at(self, row: int) -> GraveRow:
        return self._row(row if self._shown is None else self._shown[row])

    def preview(self, chunk_id: int) -> str:
        """The cached preview of a chunk (asked for once)."""
        text = self._previews.get(chunk_id)
        if text is None:
            try:
                text = clean_preview(self._preview(chunk_id)) if self._preview else ""
            except Exception:  # noqa: BLE001 - a missing preview must not break the list
                text = "(text unavailable)"
            self._previews[chunk_id] = text
        return text

    def prepare_filter(self) -> None:
        """Start building the filter index between events (the filter box was focused)."""
        if len(self._index) < len(self._source) and not self._index_timer.isActive():
            self._index_timer.start()

    def _row(self, i: int) -> GraveRow:
        row = self._rows[i]
        if row is None:
            source = self._source[i]
            row = (source if isinstance(source, GraveRow)
                   else GraveRow.from_chunk(source, self._numbers.get(source.turn_id)))
            self._rows[i] = row
        return row

    def _index_slice(self, budget_s: float | None = INDEX_SLICE_MS / 1000) -> None:
        """Add rows to the filter index for about ``budget_s`` (None: until complete)."""
        total = len(self._source)
        if self._bulk is not None and len(self._index) < total:
            missing = [self._row(i).chunk_id for i in range(len(self._index), total)]
            missing = [c for c in missing if c not in self._previews]
            try:
                loaded = self._bulk(missing) if missing else {}
            except Exception:  # noqa: BLE001 - fall back to one preview per row
                loaded = {}
            for chunk_id, text in loaded.items():
                self._previews[chunk_id] = clean_preview(text)
        deadline = None if budget_s is None else time.perf_counter() + budget_s
        index, row_of, preview = self._index, self._row, self.preview
        while len(index) < total:
            row = row_of(len(index))
            index.append(f"{row.meta()} {preview(row.chunk_id)}".lower())
            if deadline is not None and len(index) % 64 == 0 and time.perf_counter() > deadline:
                return
        self._index_timer.stop()

    def _apply_filter(self) -> list[int] | None:
        words = self._filter.split()
        if not words:
            return None
        self._index_slice(None)
        return [i for i, haystack in enumerate(self._index) if all(w in haystack for w in words)]

    # -- Qt model API
    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        if parent.isValid():
            return 0
        return len(self._source) if self._shown is None else len(self._shown)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or not 0 <= index.row() < self.rowCount():
            return None
        row = self.row_at(index.row())
        if role == Qt.ItemDataRole.DisplayRole:
            return row.meta()
        if role == self.PreviewRole:
            return self.preview(row.chunk_id)
        if role == self.ChunkIdRole:
            return row.chunk_id
        if role == self.RowRole:
            return row
        if role == Qt.ItemDataRole.ToolTipRole:
            return f"{row.details()}\n{self.preview(row.chunk_id)}\n\nClick or press Enter to bring it back (pinned)."
        return None
