"""The stats bar: context budget, totals, brightness, speed, connection, graveyard toggle."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QResizeEvent
from PySide6.QtWidgets import QHBoxLayout, QToolButton, QVBoxLayout, QWidget

from ..settings import Scoring, Settings, scoring_words
from . import colors
from .elided import ElidedLabel  # noqa: F401 - also imported from here
from .status_widgets import ConnectionLight, TaskProgress  # noqa: F401 - TaskProgress: also imported from here

#: Widest the connection detail (model name, loading progress) may get, in pixels.
CONNECTION_DETAIL_PX = 400

#: Characters of room beyond its texts a two-line bar needs before it goes back to one line.
ONE_LINE_SLACK_CHARS = 8

#: Connection state -> (light colour, words for the tooltip).
CONNECTION_STATES: dict[str, tuple[tuple[int, int, int], str]] = {
    "connecting": ((230, 180, 60), "Connecting"),
    "loading": ((230, 180, 60), "Loading the model"),
    "ready": ((90, 200, 110), "Ready"),
    "connected": ((90, 200, 110), "Ready"),
    "generating": ((90, 160, 255), "Generating"),
    "error": ((235, 80, 80), "Error"),
    "offline": ((130, 130, 135), "Offline"),
    "stopped": ((235, 80, 80), "The built-in model server stopped"),
}

#: Short (the line is crowded: at 1,360 px the longer "no attention from this server —
#: pruning oldest-first" was cut); the tooltip says it whole.
NO_ATTENTION_TEXT = "no attention · oldest-first"
NO_ATTENTION_DETAIL = ("This server sends no attention, so brightness is not measured: the oldest "
                       "paragraphs are pruned first, and a later message still brings a pruned one "
                       "back when it needs it.")
#: The brightness figure when nothing measures brightness (every token stays at 10,000).
NO_BRIGHTNESS_TEXT = "☀ not measured"
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


class StatsBar(QWidget):
    """The figures above the heatmap: one line where the bar is wide enough for every
    text whole, else two (the context's figures and the graveyard toggle, then the speed
    and the connection), each label elided by importance only where even that is short.

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

    Signals: ``graveyard_toggled(bool)`` when the ⚰️ button is toggled by the user;
    ``scoring_changed()`` when :attr:`scoring` (the words for the score in use) changed.
    """

    graveyard_toggled = Signal(bool)
    scoring_changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        #: The connection's detail as shown (elided), and whole (in the tooltip).
        self.connection_detail = ""
        self._connection_full = ""
        self.setObjectName("statsBar")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.budget_label = ElidedLabel()
        #: What recalls brought back, beside the budget (hidden when nothing is recalled).
        self.recalled_label = ElidedLabel()
        self.recalled_label.setObjectName("recalledTokens")
        self.recalled_label.setStyleSheet("color: #%02x%02x%02x;" % colors.RECALL_VIOLET)
        self.recalled_label.setToolTip(RECALLED_DETAIL)
        self.totals_label = ElidedLabel()
        self.totals_label.setToolTip("Tokens ever written in this conversation · chunks in the graveyard")
        self.brightness_label = ElidedLabel()
        self.brightness_label.setToolTip("Mean brightness of the live tokens")
        #: What colours the chunks and decides pruning (the rule in use, in words).  Not in
        #: this crowded line: the window puts it in its status bar, where it fits whole.
        self.scoring_label = ElidedLabel()
        self.scoring_label.setObjectName("scoringRule")
        self._settings = Settings()
        self.scoring: Scoring | None = None  # set by the first update below
        self.speed_label = ElidedLabel()
        self.speed_label.setToolTip("Generation speed of the answer (live while it streams) and the wait from "
                                    "sending to its first token")
        self.attention_label = ElidedLabel(NO_ATTENTION_TEXT)
        self.attention_label.setObjectName("attentionWarning")
        self.attention_label.setStyleSheet("color: #e6b450;")
        self.attention_label.hide()
        self.connection_light = ConnectionLight()
        self.connection_label = ElidedLabel()
        self.connection_label.setObjectName("connectionDetail")
        self.graveyard_button = QToolButton()
        self.graveyard_button.setCheckable(True)
        self.graveyard_button.setText(f"{colors.emoji_or(self.font(), '⚰️', '')} Graveyard".strip())
        self.graveyard_button.setToolTip("Show or hide the graveyard of pruned chunks")
        self.graveyard_button.toggled.connect(self.graveyard_toggled)

        #: The context's figures (first line) and the answer's and server's (second line when
        #: the bar is too narrow for one: the window's default width is).
        self._context_row = (self.budget_label, self.recalled_label, self.totals_label, self.brightness_label)
        self._server_row = (self.speed_label, self.attention_label)
        self._rows = QVBoxLayout(self)
        self._rows.setContentsMargins(6, 2, 6, 2)
        self._rows.setSpacing(2)
        self._two_lines: bool | None = None  # None until the first arrangement
        self._source = "server"
        self._mean = 0.0
        #: When a line is too narrow for every text, the first of these keep theirs longest.
        self._by_importance = (self.budget_label, self.recalled_label, self.totals_label, self.brightness_label,
                               self.speed_label, self.attention_label, self.connection_label)
        self._arrange(False)
        self.update_stats(0, 0, 0, 0, 0.0, None)
        # Until the controller says otherwise it is starting: "Offline" would flash at every start.
        self.set_connection("connecting", "Starting…")

    # ------------------------------------------------------------------ layout
    def _gap(self) -> int:
        return self.fontMetrics().horizontalAdvance("  ")

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
            top.addWidget(self.graveyard_button)
            bottom = QHBoxLayout()
            bottom.setSpacing(0)
        for widget in self._server_row:
            bottom.addWidget(widget)
            bottom.addSpacing(self._gap())
        bottom.addStretch(1)
        bottom.addWidget(self.connection_light)
        bottom.addWidget(self.connection_label)
        if not two_lines:
            top.addSpacing(self._gap())
            top.addWidget(self.graveyard_button)
        self._rows.addLayout(top)
        if two_lines:
            self._rows.addLayout(bottom)

    def _lines(self) -> list[tuple[QWidget, ...]]:
        """The widgets of each line as arranged now, left to right."""
        server = self._server_row + (self.connection_light, self.connection_label)
        if self._two_lines:
            return [self._context_row + (self.graveyard_button,), server]
        return [self._context_row + server + (self.graveyard_button,)]

    def _width_for(self, widgets, hint) -> int:
        """Width of one line of ``widgets`` at each shown one's ``hint`` width (the gaps
        after hidden ones stay in the layout, so they count)."""
        margins = self._rows.contentsMargins()
        return (sum(hint(w).width() for w in widgets if not w.isHidden()) + self._gap() * len(widgets)
                + margins.left() + margins.right())

    def one_line_width(self) -> int:
        """Width the bar needs to show every text whole on one line."""
        return self._width_for(self._context_row + self._server_row
                               + (self.connection_light, self.connection_label, self.graveyard_button),
                               lambda w: w.sizeHint())

    def is_two_lines(self) -> bool:
        """Whether the bar is too narrow for one line and shows two."""
        return bool(self._two_lines)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        self._fit_labels()

    def _fit_labels(self) -> None:
        """One line where every text fits whole, else two; then on each line share the
        width beyond its minimum out by importance: each label in turn gets the room for
        its whole text while there is some, the rest elide."""
        needed = self.one_line_width()
        if self._two_lines:
            # Back to one line only with room to spare: a speed that gains a digit while an
            # answer streams must not make the heatmap jump a line up and down.
            needed += self.fontMetrics().averageCharWidth() * ONE_LINE_SLACK_CHARS
        self._arrange(self.width() < needed)
        for line in self._lines():
            spare = self.width() - self._width_for(line, lambda w: w.minimumSizeHint())
            for label in self._by_importance:
                if label not in line or label.isHidden():
                    continue
                least = label.minimumSizeHint().width()
                extra = max(0, min(spare, label.sizeHint().width() - least))
                spare -= extra
                label.setMaximumWidth(least + extra)

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
        self._mean = mean_brightness
        if brightness_source is not None:
            self._source = brightness_source
        self._show_brightness()
        rate = f"{tokens_per_s:.1f} tok/s" if tokens_per_s else "– tok/s"
        if first_token_s is not None:
            rate += f" · first token {first_token_s:.1f} s"
        self.speed_label.setText(rate)
        self._fit_labels()

    def set_connection(self, state: str, detail: str) -> None:
        """Light colour by state; ``detail`` (model name or message) next to it."""
        rgb, words = CONNECTION_STATES.get(state, CONNECTION_STATES["error"])
        self.connection_light.set_color(QColor(*rgb))
        self.connection_label.setText(detail or words)
        tip = f"{words}: {detail}" if detail else words
        self.connection_light.setToolTip(tip)
        self.connection_label.setToolTip(tip)
        self._state = state
        self._fit_labels()

    def show_connection(self, state: str, detail: str | None = None) -> None:
        """:meth:`set_connection` with a new ``detail`` elided to fit (a loader log line must
        not widen the bar, and so the window) and whole in the tooltip; without ``detail``
        the last one stays."""
        if detail is not None:
            self._connection_full = detail
            self.connection_detail = self.connection_label.fontMetrics().elidedText(
                detail, Qt.TextElideMode.ElideRight, CONNECTION_DETAIL_PX)
        self.set_connection(state, self.connection_detail)
        if self._connection_full:
            self.connection_label.setToolTip(self._connection_full)

    def connection_state(self) -> str:
        return self._state

    def set_attention_available(self, available: bool) -> None:
        """Warn when the server sends no attention (pruning falls back to oldest-first)."""
        self.set_brightness_source("server" if available else "none")

    def set_brightness_source(self, source: str, words: str = "", detail: str = "") -> None:
        """Who measures brightness; ``words`` replace the no-attention warning (see the
        class), ``detail`` is its tooltip (kept short: this line sets the window's width)."""
        self._source = source
        self.attention_label.setText(words or NO_ATTENTION_TEXT)
        self.attention_label.setToolTip(detail or words or NO_ATTENTION_DETAIL)
        self.attention_label.setVisible(source != "server")
        self._show_brightness()
        self._fit_labels()

    def set_settings(self, settings: Settings) -> None:
        """The settings in use: the scoring words follow their brightness rule and prune order."""
        if settings != self._settings:
            self._settings = settings
            self._show_brightness()
            self._fit_labels()

    def _show_scoring(self) -> None:
        scoring = scoring_words(self._settings, self._source)
        # Without attention the warning beside it already says "pruning oldest-first".
        self.scoring_label.setVisible(self._source != "none")
        if scoring != self.scoring:  # once per change, not per streamed frame
            self.scoring = scoring
            self.scoring_label.setText(scoring.short)
            self.scoring_label.setToolTip(f"{scoring.sentence}\n\n{scoring.rule}".strip()
                                          + "\n\nSettings → What decides pruning changes it.")
            self.scoring_changed.emit()

    def _show_brightness(self) -> None:
        self._show_scoring()
        label = self.brightness_label
        if self._source == "none":
            # Nothing votes: a mean of 10,000 would read as "everything is relevant".
            label.setText(NO_BRIGHTNESS_TEXT)
            label.setToolTip("This server sends no attention, so brightness is not measured: every token "
                             "keeps its starting value and the oldest chunks are pruned first.")
        elif self._source == "waiting":
            label.setText("☀ — (reader)")
            label.setToolTip("The bundled reader model has not read an exchange of this conversation yet: "
                             "brightness is measured from the next answer on.")
        elif self._source == "reader":
            label.setText(f"Mean ☀ {self._mean:,.0f} (reader)")
            label.setToolTip("Mean brightness of the live tokens, from the bundled reader model's attention "
                             f"over each finished exchange (not the attention of the server's model). "
                             f"{self.scoring.sentence}")
        else:
            label.setText(f"Mean ☀ {self._mean:,.0f}")
            label.setToolTip(f"Mean brightness of the live tokens. {self.scoring.sentence}")

    def set_graveyard_open(self, open_: bool) -> None:
        """Check or uncheck the ⚰️ toggle without emitting ``graveyard_toggled``."""
        self.graveyard_button.blockSignals(True)
        self.graveyard_button.setChecked(open_)
        self.graveyard_button.blockSignals(False)
