"""The graveyard sidebar: pruned chunks, newest first; a click brings one back.

:class:`GraveyardModel` is a thin ``QAbstractListModel`` over the plain list from
``Conversation.graveyard()``; a row's :class:`GraveRow` is made when the row is first
shown.  Previews are asked for only when a row is drawn, so 10k rows open at once.  The
filter works on a lowercase index of every row's meta line and preview, built when the
filter box is first used: in one call where a bulk ``previews(ids)`` loader is given,
else in slices of a few milliseconds between events; a filter applied before it is
complete finishes it first.  The list view uses uniform item sizes; the delegate
caches each row's elided lines per width, so a scroll frame draws cached strings (until
the rows are set again).  The
model and its rows live in :mod:`.graveyard_model` (importable from here too).
"""

from __future__ import annotations

from typing import Iterable

from PySide6.QtCore import QEvent, QModelIndex, QObject, QPointF, QSize, Qt, QTimer, Signal
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
from .chunk_words import message_numbers
from .elided import ElidedLabel
from .graveyard_model import GraveRow, GraveyardModel, Preview, Previews, chunk_preview, clean_preview  # noqa: F401 - importable from here too

#: Milliseconds the filter waits for typing to pause.
FILTER_DELAY_MS = 200


class GraveyardDelegate(QStyledItemDelegate):
    """Two compact lines: the meta line in the role's colour, the preview dimmed."""

    #: Cached rows (elided lines per width) kept before the cache starts again.
    CACHE_ROWS = 4096

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._lines: dict[tuple[int, int], tuple[QStaticText, QStaticText]] = {}

    def forget(self) -> None:
        """Drop the cached lines: the rows changed (a chunk id may now stand for another
        chunk, or the same chunk with another brightness)."""
        self._lines.clear()

    def _line_height(self, option: QStyleOptionViewItem) -> int:
        return QFontMetrics(option.font).height()

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex) -> QSize:
        # Two whole lines and the padding paint() leaves above and below them.  The width
        # is the least a row needs: the view never scrolls sideways (lines are elided).
        line = self._line_height(option)
        return QSize(1, 2 * line + 2 * (line // 4) + 2)

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
        rgb = colors.scheme().tool if row.tool_result else colors.scheme().roles.get(row.role, colors.scheme().unscored)
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
    ``set_filter(text)``, ``show_chunk(chunk_id)``,
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
        self.filter_edit.setPlaceholderText("Filter: words, “answer”, “message 12”…")
        self.filter_edit.setClearButtonEnabled(True)
        self._view = _GraveList()
        self._view.setModel(self._model)
        delegate = GraveyardDelegate(self._view)
        self._view.setItemDelegate(delegate)
        self._model.modelReset.connect(delegate.forget)
        self._view.setUniformItemSizes(True)
        # Rows are elided to the pane's width: never a sideways scroll bar.
        self._view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._view.setResizeMode(QListView.ResizeMode.Adjust)
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

    def set_rows(self, chunks: Iterable, preview: Preview | None = None, previews: Previews | None = None,
                 numbers: dict[int, int] | None = None) -> None:
        """Show these pruned chunks (newest first); ``previews(ids) -> {id: text}``, when
        given, loads the filter index in one query; ``numbers``: turn id -> message number."""
        self._model.set_rows(chunks, preview, previews, numbers)
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

    def show_graveyard_of(self, conv) -> None:
        """Show the pruned chunks of ``conv`` (a :class:`~halo_weave.conversation.Conversation`),
        their previews read from it as they are needed."""
        self.set_rows(conv.graveyard(), lambda chunk: chunk_preview(conv, chunk), numbers=message_numbers(conv))

    def show_chunk(self, chunk_id: int) -> bool:
        """Scroll to a pruned chunk's row and select it (clearing a filter that hides it);
        False when it is not in the graveyard."""
        if self._model.row_of(chunk_id) is None and self._model.total_count():
            self.set_filter("")
        row = self._model.row_of(chunk_id)
        if row is None:
            return False
        index = self._model.index(row)
        self._view.setCurrentIndex(index)
        self._view.scrollTo(index, QListView.ScrollHint.PositionAtCenter)
        return True

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
