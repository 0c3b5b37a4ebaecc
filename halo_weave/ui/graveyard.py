"""The graveyard sidebar: pruned chunks, newest first; a click brings one back.

:class:`GraveyardModel` is a thin ``QAbstractListModel`` over a plain list of
:class:`GraveRow` made from ``Conversation.graveyard()``.  Previews are asked for only
when a row is drawn (or when the filter needs them) and cached, so 10k rows open
instantly; the list view uses uniform item sizes and a two-line delegate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from PySide6.QtCore import (
    QAbstractListModel,
    QEvent,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QRect,
    QSize,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QColor, QFontMetrics, QKeyEvent, QPainter, QPalette
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
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

#: Characters of text kept for a preview.
PREVIEW_CHARS = 160
#: Milliseconds the filter waits for typing to pause.
FILTER_DELAY_MS = 200

Preview = Callable[[int], str]


@dataclass(frozen=True)
class GraveRow:
    """One pruned chunk as the graveyard shows it."""

    chunk_id: int
    turn_id: int
    role: str
    sentence_id: int
    token_count: int
    brightness_at_deletion: int | None
    tool_result: bool = False

    @classmethod
    def from_chunk(cls, chunk) -> "GraveRow":
        return cls(
            chunk.id, chunk.turn_id, chunk.role, chunk.sentence_id, chunk.token_count,
            chunk.brightness_at_deletion, bool(getattr(chunk, "tool_result", False)),
        )

    def meta(self) -> str:
        """"T12 · assistant · S3 · 45 tok · ☀ 812"."""
        role = "tool result" if self.tool_result else self.role
        bright = "?" if self.brightness_at_deletion is None else f"{self.brightness_at_deletion:,}"
        return f"T{self.turn_id} · {role} · S{self.sentence_id} · {self.token_count:,} tok · ☀ {bright}"


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
        self._all: list[GraveRow] = []
        self._shown: list[GraveRow] = []
        self._preview: Preview | None = None
        self._previews: dict[int, str] = {}
        self._filter = ""

    # -- content
    def set_rows(self, rows: Iterable, preview: Preview | None = None) -> None:
        """Replace the rows (``Chunk`` objects or :class:`GraveRow`, newest first)."""
        self.beginResetModel()
        self._all = [r if isinstance(r, GraveRow) else GraveRow.from_chunk(r) for r in rows]
        self._preview = preview
        self._previews = {}
        self._shown = self._apply_filter(self._all)
        self.endResetModel()

    def set_filter(self, text: str) -> None:
        """Show only rows whose meta line or preview contains every word of ``text``."""
        self.beginResetModel()
        self._filter = text.strip().lower()
        self._shown = self._apply_filter(self._all)
        self.endResetModel()

    def total_count(self) -> int:
        return len(self._all)

    def row_at(self, row: int) -> GraveRow:
        return self._shown[row]

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

    def _apply_filter(self, rows: list[GraveRow]) -> list[GraveRow]:
        words = self._filter.split()
        if not words:
            return list(rows)
        kept = []
        for row in rows:
            haystack = f"{row.meta()} {self.preview(row.chunk_id)}".lower()
            if all(w in haystack for w in words):
                kept.append(row)
        return kept

    # -- Qt model API
    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._shown)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or not 0 <= index.row() < len(self._shown):
            return None
        row = self._shown[index.row()]
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

    def _line_height(self, option: QStyleOptionViewItem) -> int:
        return QFontMetrics(option.font).height()

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex) -> QSize:
        line = self._line_height(option)
        return QSize(option.rect.width() or 200, 2 * line + line // 2)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        painter.save()
        palette = option.palette
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        hovered = bool(option.state & QStyle.StateFlag.State_MouseOver)
        if selected:
            painter.fillRect(option.rect, palette.color(QPalette.ColorRole.Highlight))
        elif hovered:
            painter.fillRect(option.rect, palette.color(QPalette.ColorRole.AlternateBase))
        row: GraveRow = index.data(GraveyardModel.RowRole)
        line = self._line_height(option)
        pad = line // 4
        rect = option.rect.adjusted(pad * 2, pad, -pad * 2, -pad)
        metrics = QFontMetrics(option.font)
        top = QRect(rect.left(), rect.top(), rect.width(), line)
        bottom = QRect(rect.left(), rect.top() + line, rect.width(), line)
        rgb = colors.TOOL_CYAN if row.tool_result else colors.ROLE_COLORS.get(row.role, colors.UNSCORED_GREY)
        painter.setPen(QColor(*rgb))
        painter.drawText(top, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                         metrics.elidedText(row.meta(), Qt.TextElideMode.ElideRight, top.width()))
        preview = index.data(GraveyardModel.PreviewRole) or ""
        text = palette.color(QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.PlaceholderText)
        painter.setPen(text)
        painter.drawText(bottom, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                         metrics.elidedText(preview, Qt.TextElideMode.ElideRight, bottom.width()))
        painter.restore()


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

    Methods: ``set_rows(chunks, preview)`` (``chunks`` from ``conv.graveyard()``, newest
    first; ``preview(chunk_id) -> str`` is called lazily), ``set_filter(text)``,
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
        self.count_label = QLabel()
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

    def set_rows(self, chunks: Iterable, preview: Preview | None = None) -> None:
        """Show these pruned chunks (newest first)."""
        self._model.set_rows(chunks, preview)
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
