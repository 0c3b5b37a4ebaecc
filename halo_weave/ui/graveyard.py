"""The graveyard sidebar: pruned chunks, newest first; a click brings one back.

:class:`GraveyardModel` is a thin ``QAbstractListModel`` over the plain list from
``Conversation.graveyard()``; a row's :class:`GraveRow` is made when the row is first
shown.  Previews are asked for only when a row is drawn, so 10k rows open at once.  The
filter works on a lowercase index of every row's meta line and preview, built when the
filter box is first used: in one call where a bulk ``previews(ids)`` loader is given,
else in slices of a few milliseconds between events; a filter applied before it is
complete finishes it first.  The list view uses uniform item sizes; the delegate
caches each row's elided lines per width, so a scroll frame draws cached strings.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from PySide6.QtCore import (
    QAbstractListModel,
    QEvent,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QPointF,
    QSize,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QColor, QFontMetrics, QKeyEvent, QPainter, QPalette, QStaticText
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLineEdit,
    QListView,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from . import colors
from .elided import ElidedLabel

#: Characters of text kept for a preview.
PREVIEW_CHARS = 160
#: Milliseconds the filter waits for typing to pause.
FILTER_DELAY_MS = 200
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

    @classmethod
    def from_chunk(cls, chunk) -> "GraveRow":
        return cls(
            chunk.id, chunk.turn_id, chunk.role, chunk.chunk_index, chunk.token_count,
            chunk.brightness_at_prune, bool(getattr(chunk, "tool_result", False)),
        )

    def meta(self) -> str:
        """"T12 · assistant · S3 · 45 tok · ☀ 812"."""
        role = "tool result" if self.tool_result else self.role
        bright = "?" if self.brightness_at_prune is None else f"{self.brightness_at_prune:,}"
        return f"T{self.turn_id} · {role} · S{self.chunk_index} · {self.token_count:,} tok · ☀ {bright}"


def clean_preview(text: str) -> str:
    """Whitespace collapsed, cut to :data:`PREVIEW_CHARS`."""
    text = " ".join(text.split())
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

    # -- content
    def set_rows(self, rows: Iterable, preview: Preview | None = None, previews: Previews | None = None) -> None:
        """Replace the rows (``Chunk`` objects or :class:`GraveRow`, newest first).

        ``preview(chunk_id)`` is called for rows as they are drawn; ``previews(ids)``,
        when given, loads the filter index in one call instead."""
        self.beginResetModel()
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

    def index_ready(self) -> bool:
        return len(self._index) == len(self._source)

    def _row(self, i: int) -> GraveRow:
        row = self._rows[i]
        if row is None:
            source = self._source[i]
            row = source if isinstance(source, GraveRow) else GraveRow.from_chunk(source)
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
            return f"{row.meta()}\n{self.preview(row.chunk_id)}\n\nClick or press Enter to resurrect it (pinned)."
        return None


class GraveyardDelegate(QStyledItemDelegate):
    """Two compact lines: the meta line in the role's colour, the preview dimmed."""

    #: Cached rows (elided lines per width) kept before the cache starts again.
    CACHE_ROWS = 4096

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._lines: dict[tuple[int, int], tuple[QStaticText, QStaticText]] = {}

    def _line_height(self, option: QStyleOptionViewItem) -> int:
        return QFontMetrics(option.font).height()

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex) -> QSize:
        line = self._line_height(option)
        return QSize(option.rect.width() or 200, 2 * line + line // 2)

    def _elided(self, row: GraveRow, index: QModelIndex, metrics: QFontMetrics,
                width: int) -> tuple[QStaticText, QStaticText]:
        """The row's two lines elided to ``width``, shaped once (cached per row and width)."""
        key = (row.chunk_id, width)
        lines = self._lines.get(key)
        if lines is None:
            preview = index.data(GraveyardModel.PreviewRole) or ""
            # Shaping costs per character: measure at most about twice what fits.
            fits = 2 * width // max(metrics.averageCharWidth(), 1) + 2
            if len(preview) > fits:
                preview = preview[:fits] + "…"
            elide = Qt.TextElideMode.ElideRight
            lines = tuple(_static(metrics.elidedText(text, elide, width)) for text in (row.meta(), preview))
            if len(self._lines) >= self.CACHE_ROWS:
                self._lines.clear()
            self._lines[key] = lines
        return lines

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        painter.save()
        palette = option.palette
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        hovered = bool(option.state & QStyle.StateFlag.State_MouseOver)
        if selected:
            painter.fillRect(option.rect, palette.color(QPalette.ColorRole.Highlight))
        elif hovered:
            painter.fillRect(option.rect, palette.color(QPalette.ColorRole.AlternateBase))
        model = index.model()
        row: GraveRow = (model.row_at(index.row()) if isinstance(model, GraveyardModel)
                         else index.data(GraveyardModel.RowRole))
        metrics = QFontMetrics(option.font)
        line = metrics.height()
        pad = line // 4
        rect = option.rect.adjusted(pad * 2, pad, -pad * 2, -pad)
        meta, preview = self._elided(row, index, metrics, rect.width())
        rgb = colors.TOOL_CYAN if row.tool_result else colors.ROLE_COLORS.get(row.role, colors.UNSCORED_GREY)
        painter.setPen(QColor(*rgb))
        painter.drawStaticText(QPointF(rect.left(), rect.top()), meta)
        text = palette.color(QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.PlaceholderText)
        painter.setPen(text)
        painter.drawStaticText(QPointF(rect.left(), rect.top() + line), preview)
        painter.restore()


def _static(text: str) -> QStaticText:
    static = QStaticText(text)
    static.setTextFormat(Qt.TextFormat.PlainText)
    return static


class _GraveList(QListView):
    """The list, with Enter/Return forwarded as an activation of the current row."""

    enter_pressed = Signal(QModelIndex)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and self.currentIndex().isValid():
            self.enter_pressed.emit(self.currentIndex())
            event.accept()
            return
        super().keyPressEvent(event)


class GraveyardPanel(QWidget):
    """Collapsible sidebar of pruned chunks.

    Methods: ``set_rows(chunks, preview, previews=None)`` (``chunks`` from
    ``conv.graveyard()``, newest first; ``preview(chunk_id) -> str`` is called lazily;
    the optional ``previews(ids) -> {id: text}`` loads the filter index in one query),
    ``set_filter(text)``,
    ``model()``, ``list_view()``.  Widgets: ``filter_edit``, ``count_label``,
    ``close_button``.

    Signals: ``resurrect_requested(chunk_id)`` on a click or Enter;
    ``close_requested()`` from the header's collapse button (the window hides the
    panel and unchecks its toggle).
    """

    resurrect_requested = Signal(int)
    close_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._model = GraveyardModel(self)
        self.count_label = ElidedLabel()
        self.count_label.setObjectName("graveyardCount")
        self.close_button = QToolButton()
        self.close_button.setText("»")
        self.close_button.setToolTip("Hide the graveyard")
        self.close_button.setAutoRaise(True)
        self.close_button.clicked.connect(self.close_requested)
        self.filter_edit = QLineEdit()
        self.filter_edit.setPlaceholderText("Filter: words, role, T12, S0…")
        self.filter_edit.setClearButtonEnabled(True)
        self._view = _GraveList()
        self._view.setModel(self._model)
        self._view.setItemDelegate(GraveyardDelegate(self._view))
        self._view.setUniformItemSizes(True)
        self._view.setMouseTracking(True)
        self._view.setVerticalScrollMode(QListView.ScrollMode.ScrollPerPixel)
        self._view.setSelectionMode(QListView.SelectionMode.SingleSelection)
        self._view.clicked.connect(self._resurrect)
        self._view.enter_pressed.connect(self._resurrect)
        self._filter_timer = QTimer(self)
        self._filter_timer.setSingleShot(True)
        self._filter_timer.setInterval(FILTER_DELAY_MS)
        self._filter_timer.timeout.connect(lambda: self.set_filter(self.filter_edit.text()))
        self.filter_edit.textChanged.connect(lambda _: self._filter_timer.start())
        self.filter_edit.textChanged.connect(lambda _: self._model.prepare_filter())
        self.filter_edit.installEventFilter(self)

        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.addWidget(self.count_label, 1)
        header.addWidget(self.close_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(header)
        layout.addWidget(self.filter_edit)
        layout.addWidget(self._view, 1)
        self._update_count()

    def model(self) -> GraveyardModel:
        return self._model

    def list_view(self) -> QListView:
        return self._view

    def set_rows(self, chunks: Iterable, preview: Preview | None = None, previews: Previews | None = None) -> None:
        """Show these pruned chunks (newest first); ``previews(ids) -> {id: text}``, when
        given, loads the filter index in one query."""
        self._model.set_rows(chunks, preview, previews)
        self._update_count()

    def set_filter(self, text: str) -> None:
        """Filter now (typing in the filter box does this after a short pause)."""
        self._filter_timer.stop()
        if self.filter_edit.text() != text:
            self.filter_edit.blockSignals(True)
            self.filter_edit.setText(text)
            self.filter_edit.blockSignals(False)
        self._model.set_filter(text)
        self._update_count()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        # Down arrow from the filter box moves into the list; Enter resurrects the first match.
        if watched is self.filter_edit and event.type() == QEvent.Type.FocusIn:
            self._model.prepare_filter()  # the index is likely ready before the first word
        if watched is self.filter_edit and event.type() == QEvent.Type.KeyPress:
            if event.key() == Qt.Key.Key_Down and self._model.rowCount():
                self._view.setFocus()
                self._view.setCurrentIndex(self._model.index(0))
                return True
        return super().eventFilter(watched, event)

    def _resurrect(self, index: QModelIndex) -> None:
        chunk_id = index.data(GraveyardModel.ChunkIdRole)
        if chunk_id is not None:
            self.resurrect_requested.emit(int(chunk_id))

    def _update_count(self) -> None:
        total = self._model.total_count()
        shown = self._model.rowCount()
        coffin = colors.emoji_or(self.font(), "⚰️", "")
        label = f"{coffin} Graveyard — {total:,} chunk{'s' if total != 1 else ''}".strip()
        if shown != total:
            label += f" ({shown:,} shown)"
        self.count_label.setText(label)
