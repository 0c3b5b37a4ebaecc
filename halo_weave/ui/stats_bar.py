"""The stats bar: context budget, totals, brightness, speed, connection, graveyard toggle."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QHBoxLayout, QToolButton, QVBoxLayout, QWidget

from ..settings import Scoring, Settings
from . import colors
from .elided import ElidedLabel
from .stats_figures import (  # noqa: F401 - the constants are also imported from here
    CONNECTION_DETAIL_PX,
    CONNECTION_STATES,
    NO_ATTENTION_DETAIL,
    NO_ATTENTION_TEXT,
    NO_BRIGHTNESS_TEXT,
    BrightnessFigure,
    ConnectionStatus,
    ModelPicker,
)
from .status_widgets import ConnectionLight, TaskProgress  # noqa: F401 - also imported from here

#: Characters of room beyond its texts a two-line bar needs before it goes back to one line.
ONE_LINE_SLACK_CHARS = 8

RECALLED_DETAIL = ("Tokens the search for your messages brought back from the graveyard, not pruned "
                   "since: a violet bar marks them in the heatmap, and the line under each message "
                   "says what it recalled. After an answer they are pruned like the rest of the "
                   "context when it is over the limit.")


def budget_words(live: int, limit: int, recalled: int, kept: int, exchange_open: bool) -> str:
    """The budget's tooltip: what is live, what was recalled, and why it is over the limit."""
    rest = live - recalled
    lines = [f"{live:,} tokens live: what the model reads now, system prompt included."]
    if recalled:
        lines.append(f"{recalled:,} of them recalled for your messages (violet in the heatmap), "
                     f"{rest:,} the rest of the conversation.")
    if limit <= 0:
        lines.append("No context target: nothing is pruned (Settings → Context & memory).")
        return "\n".join(lines)
    lines.append(f"After each answer the context is pruned back under {limit:,} tokens, recalled chunks "
                 "included (Settings → Context & memory → Context target).")
    if rest > limit and exchange_open:
        lines.append(f"{rest - limit:,} over while this exchange goes on: pruned when the answer ends.")
    elif rest > limit and kept > limit:
        lines.append(f"Over the limit: the system prompt, pinned chunks and your last exchange hold "
                     f"{kept:,} tokens, and pruning never takes those.")
    elif rest > limit:
        lines.append("Over the limit: pruned back under it after the next answer.")
    return "\n".join(lines)


class BarLines:
    """The stats bar's arrangement: one line where the bar is wide enough for every text
    whole, else two (the context's figures and the graveyard toggle, then the speed and
    the connection), each label elided by importance only where even that is short.

    Owns: the bar's layout, whether it shows two lines, and the order of the widgets on
    each line and by importance.
    """

    def __init__(self, bar: QWidget, context_row: tuple[QWidget, ...], server_row: tuple[QWidget, ...],
                 connection: tuple[QWidget, ...], picker: QWidget, toggle: QWidget,
                 by_importance: tuple[QWidget, ...]) -> None:
        self._bar = bar
        self._context_row = context_row
        self._server_row = server_row
        self._connection = connection
        self._picker_widget = picker
        self._toggle = toggle
        #: When a line is too narrow for every text, the first of these keep theirs longest.
        self._by_importance = by_importance
        self._rows = QVBoxLayout(bar)
        self._rows.setContentsMargins(4, 2, 4, 2)
        self._rows.setSpacing(2)
        self._two_lines: bool | None = None  # None until the first arrangement
        self._arrange(False)

    def _gap(self) -> int:
        return self._bar.fontMetrics().horizontalAdvance("  ")

    def _arrange(self, two_lines: bool) -> None:
        """Lay the widgets out on one line, or on two: the context's figures and the
        graveyard toggle above, the speed and the connection below."""
        if two_lines == self._two_lines:
            return
        self._two_lines = two_lines
        while self._rows.count():
            row = self._rows.takeAt(0).layout()
            while row is not None and row.count():
                row.takeAt(0)
            if row is not None:
                row.deleteLater()
        top = QHBoxLayout()
        top.setSpacing(0)
        for widget in self._context_row:
            top.addWidget(widget)
            top.addSpacing(self._gap())
        bottom = top
        if two_lines:
            top.addStretch(1)
            top.addWidget(self._toggle)
            bottom = QHBoxLayout()
            bottom.setSpacing(0)
        for widget in self._server_row:
            bottom.addWidget(widget)
            bottom.addSpacing(self._gap())
        bottom.addStretch(1)
        for widget in self._connection + (self._picker_widget,):
            bottom.addWidget(widget)
        if not two_lines:
            top.addSpacing(self._gap())
            top.addWidget(self._toggle)
        self._rows.addLayout(top)
        if two_lines:
            self._rows.addLayout(bottom)

    def _picker(self) -> tuple[QWidget, ...]:
        """The model picker where it shows (a hidden one takes no room, not even a gap)."""
        return () if self._picker_widget.isHidden() else (self._picker_widget,)

    def _lines(self) -> list[tuple[QWidget, ...]]:
        """The widgets of each line as arranged now, left to right."""
        server = self._server_row + self._connection + self._picker()
        if self._two_lines:
            return [self._context_row + (self._toggle,), server]
        return [self._context_row + server + (self._toggle,)]

    def _width_for(self, widgets: tuple[QWidget, ...], hint: Callable[[QWidget], QSize]) -> int:
        """Width of one line of ``widgets`` at each shown one's ``hint`` width (the gaps
        after hidden ones stay in the layout, so they count)."""
        margins = self._rows.contentsMargins()
        return (sum(hint(w).width() for w in widgets if not w.isHidden()) + self._gap() * len(widgets)
                + margins.left() + margins.right())

    def one_line_width(self) -> int:
        """Width the bar needs to show every text whole on one line."""
        return self._width_for(self._context_row + self._server_row + self._connection + self._picker()
                               + (self._toggle,), lambda w: w.sizeHint())

    def is_two_lines(self) -> bool:
        """Whether the bar is too narrow for one line and shows two."""
        return bool(self._two_lines)

    def fit(self) -> None:
        """One line where every text fits whole, else two; then on each line share the
        width beyond its minimum out by importance: each label in turn gets the room for
        its whole text while there is some, the rest elide."""
        width = self._bar.width()
        needed = self.one_line_width()
        if self._two_lines:
            # Back to one line only with room to spare: a speed that gains a digit while an
            # answer streams must not make the heatmap jump a line up and down.
            needed += self._bar.fontMetrics().averageCharWidth() * ONE_LINE_SLACK_CHARS
        self._arrange(width < needed)
        for line in self._lines():
            spare = width - self._width_for(line, lambda w: w.minimumSizeHint())
            for label in self._by_importance:
                if label not in line or label.isHidden():
                    continue
                least = label.minimumSizeHint().width()
                extra = max(0, min(spare, label.sizeHint().width() - least))
                spare -= extra
                label.setMaximumWidth(least + extra)


class StatsBar(QWidget):
    """The figures above the heatmap, arranged on one line or two by :class:`BarLines`.

    Methods: ``update_stats(live_tokens, max_tokens, total_tokens, pruned_chunks,
    mean_brightness, tokens_per_s, recalled_tokens=0, first_token_s=None,
    brightness_source=None, kept_tokens=0, exchange_open=False)`` (``max_tokens`` 0 = no
    pruning; the speed is live while an answer streams; see :meth:`update_stats` for the
    budget's words);
    ``set_connection(state, detail)`` with state one of ``connecting``, ``loading``,
    ``ready`` (alias ``connected``), ``generating``, ``error``, ``offline``;
    ``set_attention_available(bool)``; ``set_brightness_source(source, words)`` (who
    measures brightness: ``"server"``, ``"reader"`` (proxy attention, ``words`` say whose)
    or ``"none"``); ``set_graveyard_open(bool)`` (syncs the toggle
    without emitting); ``set_settings(settings)`` (what colours the chunks and decides
    pruning: ``scoring_label``, shown by the window in its status bar, and :attr:`scoring`).
    Widgets: ``budget_label``, ``recalled_label``,
    ``totals_label``, ``brightness_label``, ``scoring_label``, ``speed_label``,
    ``connection_light``, ``connection_label``,
    ``attention_label``, ``graveyard_button``.

    ``set_models(models, current)``: the server's models in ``model_picker`` (shown
    where it serves more than one); ``set_template_words(words)``: which chat template
    frames the turns, in the connection's tooltip.

    Signals: ``graveyard_toggled(bool)`` when the ⚰️ button is toggled by the user;
    ``scoring_changed()`` when :attr:`scoring` (the words for the score in use) changed;
    ``model_picked(str)`` when the user picks another of the server's models.

    Owns the budget, totals and speed labels and the graveyard toggle; the connection
    (:class:`ConnectionStatus`), the model picker, the brightness figure
    (:class:`BrightnessFigure`) and the arrangement (:class:`BarLines`) own theirs.
    """

    graveyard_toggled = Signal(bool)
    scoring_changed = Signal()
    model_picked = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("statsBar")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.budget_label = ElidedLabel()
        #: What recalls brought back, beside the budget (hidden when nothing is recalled).
        self.recalled_label = ElidedLabel()
        self.recalled_label.setObjectName("recalledTokens")
        self.recalled_label.setStyleSheet("color: #%02x%02x%02x;" % colors.scheme().recall)
        self.recalled_label.setToolTip(RECALLED_DETAIL)
        self.totals_label = ElidedLabel()
        self.totals_label.setToolTip("Tokens of every message in this conversation (the branch shown), live or "
                                     "pruned: pruning, recalls and reopening never change it · chunks in the graveyard")
        self.brightness = BrightnessFigure(self)
        self.brightness.scoring_changed.connect(self.scoring_changed)
        #: The brightness figure's widgets, reached from the bar as well (the window puts
        #: ``scoring_label`` in its status bar).
        self.brightness_label = self.brightness.label
        self.scoring_label = self.brightness.scoring_label
        self.attention_label = self.brightness.attention_label
        self.speed_label = ElidedLabel()
        self.speed_label.setToolTip("Generation speed of the answer (live while it streams) and the wait from "
                                    "sending to its first token")
        self.connection = ConnectionStatus()
        self.connection_light = self.connection.light
        self.connection_label = self.connection.label
        self.model_picker = ModelPicker()
        self.model_picker.model_picked.connect(self.model_picked)
        self.graveyard_button = QToolButton()
        self.graveyard_button.setCheckable(True)
        self.graveyard_button.setText(f"{colors.emoji_or(self.font(), '⚰️', '')} Graveyard".strip())
        self.graveyard_button.setToolTip("Show or hide the graveyard of pruned chunks")
        self.graveyard_button.toggled.connect(self.graveyard_toggled)
        #: The context's figures (first line) and the answer's and server's (second line when
        #: the bar is too narrow for one: the window's default width is).
        context_row = (self.budget_label, self.recalled_label, self.totals_label, self.brightness_label)
        server_row = (self.speed_label, self.attention_label)
        self.lines = BarLines(self, context_row, server_row, (self.connection_light, self.connection_label),
                              self.model_picker, self.graveyard_button,
                              context_row + server_row + (self.connection_label,))
        self.update_stats(0, 0, 0, 0, 0.0, None)
        # Until the controller says otherwise it is starting: "Offline" would flash at every start.
        self.set_connection("connecting", "Starting…")

    @property
    def scoring(self) -> Scoring | None:
        """The words for the score in use (what colours the chunks and decides pruning)."""
        return self.brightness.scoring

    @property
    def connection_detail(self) -> str:
        """The connection's detail as shown (elided)."""
        return self.connection.detail

    def one_line_width(self) -> int:
        """Width the bar needs to show every text whole on one line."""
        return self.lines.one_line_width()

    def is_two_lines(self) -> bool:
        """Whether the bar is too narrow for one line and shows two."""
        return self.lines.is_two_lines()

    def restyle(self) -> None:
        """The theme changed: the recalled figure in its violet."""
        self.recalled_label.setStyleSheet("color: #%02x%02x%02x;" % colors.scheme().recall)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        self.lines.fit()

    def update_stats(
        self,
        live_tokens: int,
        max_tokens: int,
        total_tokens: int,
        pruned_chunks: int,
        mean_brightness: float,
        tokens_per_s: float | None,
        recalled_tokens: int = 0,
        first_token_s: float | None = None,
        brightness_source: str | None = None,
        kept_tokens: int = 0,
        exchange_open: bool = False,
    ) -> None:
        """Show the figures (see the class docstring).

        The budget counts what recalls brought back apart: "Live 700 / 700" and "+ 1,334
        recalled" beside it (``recalled_tokens`` of the ``live_tokens``), so the limit is
        compared with the rest of the context.  That rest shows in orange only when it is
        over the limit with no exchange going on (``exchange_open``: the prune after the
        answer brings it back under); the tooltip says why, e.g. ``kept_tokens`` (the
        system prompt, pinned chunks and the last exchange) that pruning never takes.
        """
        rest = live_tokens - recalled_tokens
        limit = f"{max_tokens:,}" if max_tokens > 0 else "no limit"
        self.budget_label.setText(f"Live {rest:,} / {limit}")
        over = max_tokens > 0 and rest > max_tokens and not exchange_open
        self.budget_label.setStyleSheet("color: #e6b450;" if over else "")
        self.budget_label.setToolTip(budget_words(live_tokens, max_tokens, recalled_tokens, kept_tokens,
                                                  exchange_open))
        self.recalled_label.setText(f"+ {recalled_tokens:,} recalled")
        self.recalled_label.setVisible(recalled_tokens > 0)
        self.totals_label.setText(f"Total {total_tokens:,} · Pruned {pruned_chunks:,}")
        self.brightness.show_mean(mean_brightness, brightness_source)
        rate = f"{tokens_per_s:.1f} tok/s" if tokens_per_s else "– tok/s"
        if first_token_s is not None:
            rate += f" · first token {first_token_s:.1f} s"
        self.speed_label.setText(rate)
        self.lines.fit()

    def set_connection(self, state: str, detail: str) -> None:
        """Light colour by state; ``detail`` (model name or message) next to it."""
        self.connection.set(state, detail)
        self.lines.fit()

    def show_connection(self, state: str, detail: str | None = None) -> None:
        """:meth:`set_connection` with a new ``detail`` elided to fit (a loader log line must
        not widen the bar, and so the window) and whole in the tooltip; without ``detail``
        the last one stays."""
        self.connection.show(state, detail)
        self.lines.fit()

    def connection_state(self) -> str:
        """The connection's state last set."""
        return self.connection.state()

    def set_models(self, models: list[str], current: str) -> None:
        """The server's models, ``current`` selected; the picker shows only where there is a choice."""
        self.model_picker.set_models(models, current, self.connection.template_words)
        self.lines.fit()

    def set_template_words(self, words: str) -> None:
        """Which template frames the turns and where it came from (connection tooltip)."""
        self.connection.set_template_words(words)
        self.lines.fit()
        self.model_picker.set_template_words(words)

    def set_attention_available(self, available: bool) -> None:
        """Warn when the server sends no attention (pruning falls back to oldest-first)."""
        self.set_brightness_source("server" if available else "none")

    def set_brightness_source(self, source: str, words: str = "", detail: str = "") -> None:
        """Who measures brightness; ``words`` replace the no-attention warning (see the
        class), ``detail`` is its tooltip (kept short: this line sets the window's width)."""
        self.brightness.set_source(source, words, detail)
        self.lines.fit()

    def set_settings(self, settings: Settings) -> None:
        """The settings in use: the scoring words follow their brightness rule and prune order."""
        if self.brightness.set_settings(settings):
            self.lines.fit()

    def set_graveyard_open(self, open_: bool) -> None:
        """Check or uncheck the ⚰️ toggle without emitting ``graveyard_toggled``."""
        self.graveyard_button.blockSignals(True)
        self.graveyard_button.setChecked(open_)
        self.graveyard_button.blockSignals(False)
