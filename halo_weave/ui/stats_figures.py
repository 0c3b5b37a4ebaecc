"""Parts of the stats bar that own their state: the connection, the model picker and
the brightness figure (with the scoring words and the no-attention warning)."""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QComboBox

from ..settings import Scoring, Settings, scoring_words
from .elided import ElidedLabel
from .status_widgets import ConnectionLight

#: Widest the connection detail (model name first, then the server's words, or loading
#: progress) may get, in pixels: room for a long GGUF file name, and the bar still fits one
#: line at the window's default size.
CONNECTION_DETAIL_PX = 330

#: Widest the model picker may get, in pixels (model ids can be long paths), and the
#: characters it shows at least (the line is crowded; its list shows names whole).
MODEL_PICKER_PX = 260
MODEL_PICKER_CHARS = 14

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

#: States in which the tooltips also say which chat template frames the turns.
TEMPLATE_STATES = ("connected", "ready", "generating")

#: Short (the line is crowded: at 1,360 px the longer "no attention from this server —
#: pruning oldest-first" was cut); the tooltip says it whole.
NO_ATTENTION_TEXT = "no attention · oldest-first"
NO_ATTENTION_DETAIL = ("This server sends no attention, so brightness is not measured: the oldest "
                       "paragraphs are pruned first, and a later message still brings a pruned one "
                       "back when it needs it.")
#: The brightness figure when nothing measures brightness (every token stays at 10,000).
NO_BRIGHTNESS_TEXT = "☀ not measured"


class ConnectionStatus:
    """The connection's light and words.

    Owns: ``light`` and ``label`` (the widgets), the state (:meth:`state`), ``detail``
    (the detail as shown, elided), the whole detail (in the tooltip) and
    ``template_words`` (which chat template frames the turns, in the tooltip).
    """

    def __init__(self) -> None:
        self.light = ConnectionLight()
        self.label = ElidedLabel()
        self.label.setObjectName("connectionDetail")
        self.detail = ""
        self._full = ""
        self.template_words = ""
        self._state = "connecting"

    def state(self) -> str:
        """The state last set (``connecting`` until one is)."""
        return self._state

    def set(self, state: str, detail: str) -> None:
        """Light colour by state; ``detail`` (model name or message) next to it."""
        rgb, words = CONNECTION_STATES.get(state, CONNECTION_STATES["error"])
        self.light.set_color(QColor(*rgb))
        self.label.setText(detail or words)
        tip = f"{words}: {detail}" if detail else words
        if self.template_words and state in TEMPLATE_STATES:
            tip += f"\n{self.template_words}"
        self.light.setToolTip(tip)
        self.label.setToolTip(tip)
        self._state = state

    def show(self, state: str, detail: str | None = None) -> None:
        """:meth:`set` with a new ``detail`` elided to fit (a loader log line must not
        widen the bar, and so the window) and whole in the tooltip; without ``detail``
        the last one stays."""
        if detail is not None:
            self._full = detail
            self.detail = self.label.fontMetrics().elidedText(detail, Qt.TextElideMode.ElideRight,
                                                              CONNECTION_DETAIL_PX)
        self.set(state, self.detail)
        if self._full:
            self.label.setToolTip(self._full + (
                f"\n{self.template_words}" if self.template_words and state in TEMPLATE_STATES else ""))

    def set_template_words(self, words: str) -> None:
        """Which template frames the turns and where it came from (in the tooltip)."""
        self.template_words = words
        self.show(self._state)


class ModelPicker(QComboBox):
    """The server's models, shown where it serves more than one.

    Signals: ``model_picked(str)`` when the user picks another model.
    """

    model_picked = Signal(str)

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("modelPicker")
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.setMinimumContentsLength(MODEL_PICKER_CHARS)
        self.setMaximumWidth(MODEL_PICKER_PX)
        self.setToolTip("The server's model that answers in this conversation")
        self.hide()
        self.activated.connect(self._on_activated)

    def set_models(self, models: list[str], current: str, template_words: str = "") -> None:
        """The server's models, ``current`` selected; shown only where there is a choice."""
        self.blockSignals(True)
        self.clear()
        for name in models:
            self.addItem(name.replace("\\", "/").rsplit("/", 1)[-1], name)
            self.setItemData(self.count() - 1, name, Qt.ItemDataRole.ToolTipRole)
        self.setCurrentIndex(max(0, self.findData(current)))
        self.blockSignals(False)
        view = self.view()
        view.setMinimumWidth(view.sizeHintForColumn(0) + 2 * view.frameWidth() + 8)  # the list shows names whole
        self.setVisible(len(models) > 1)
        self.setToolTip(f"The server's model that answers in this conversation: {current}"
                        + (f"\n{template_words}" if template_words else ""))

    def set_template_words(self, words: str) -> None:
        """Which template frames the turns, under the tooltip's first line."""
        self.setToolTip(self.toolTip().split("\n")[0] + (f"\n{words}" if words else ""))

    def _on_activated(self, index: int) -> None:
        name = self.itemData(index)
        if isinstance(name, str):
            self.model_picked.emit(name)


class BrightnessFigure(QObject):
    """The mean brightness, who measures it, and what decides pruning.

    Owns: ``label`` (the mean), ``scoring_label`` (the rule in use, in words: the window
    puts it in its status bar, where it fits whole), ``attention_label`` (the warning
    when the server sends no attention, or whose attention is read instead),
    :attr:`scoring`, the settings in use, the source and the last mean.

    Signals: ``scoring_changed()`` when :attr:`scoring` changed.
    """

    scoring_changed = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.label = ElidedLabel()
        self.label.setToolTip("Mean brightness of the live tokens")
        self.scoring_label = ElidedLabel()
        self.scoring_label.setObjectName("scoringRule")
        self.attention_label = ElidedLabel(NO_ATTENTION_TEXT)
        self.attention_label.setObjectName("attentionWarning")
        self.attention_label.setStyleSheet("color: #e6b450;")
        self.attention_label.hide()
        self._settings = Settings()
        self.scoring: Scoring | None = None  # set by the first show_mean
        self._source = "server"
        self._mean = 0.0

    def show_mean(self, mean: float, source: str | None = None) -> None:
        """The mean brightness of the live tokens; ``source`` (when given) who measured it."""
        self._mean = mean
        if source is not None:
            self._source = source
        self._show()

    def set_source(self, source: str, words: str = "", detail: str = "") -> None:
        """Who measures brightness: ``"server"``, ``"reader"`` (proxy attention, ``words``
        say whose), ``"waiting"`` or ``"none"``; ``words`` replace the no-attention
        warning, ``detail`` is its tooltip."""
        self._source = source
        self.attention_label.setText(words or NO_ATTENTION_TEXT)
        self.attention_label.setToolTip(detail or words or NO_ATTENTION_DETAIL)
        self.attention_label.setVisible(source != "server")
        self._show()

    def set_settings(self, settings: Settings) -> bool:
        """The settings in use (the scoring words follow their brightness rule and prune
        order); whether they differ from the last ones."""
        if settings == self._settings:
            return False
        self._settings = settings
        self._show()
        return True

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

    def _show(self) -> None:
        self._show_scoring()
        label = self.label
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
