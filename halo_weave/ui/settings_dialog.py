"""The settings dialog: generation, context budget, memory, what decides pruning, server,
system prompt."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from ..settings import CHOICES, DEFAULT_SYSTEM_PROMPT, Settings
from .colors import HIGHLIGHT_LABEL
from .pruning_settings import PruningPage, set_item_tooltips
from .settings_io import RANGES, settings_problems


class SettingsDialog(QDialog):
    """Edit a copy of :class:`Settings`; ``result_settings()`` after ``exec()``.

    OK is refused while :meth:`problems` is not empty; the reasons are shown in
    ``error_label``.  Editors are reachable as ``editors[field_name]`` (tests).
    """

    def __init__(self, settings: Settings, parent: QWidget | None = None, *, api_key: str | None = None,
                 keyring: bool = True) -> None:
        super().__init__(parent)
        self._api_key, self._keyring = api_key, keyring
        self.server_fields = None
        self.setWindowTitle("Settings")
        self._original = settings
        self.editors: dict[str, QWidget] = {}
        self.tabs = tabs = QTabWidget()
        tabs.addTab(self._generation_page(settings), "Generation")
        tabs.addTab(self._context_page(settings), "Context && memory")
        self.pruning_page = PruningPage(self, settings)
        tabs.addTab(self.pruning_page, "What decides pruning")
        tabs.addTab(self._server_page(settings), "Server")
        tabs.addTab(self._prompt_page(settings), "System prompt")
        self.error_label = QLabel()
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #ff7b72;")
        self.error_label.hide()
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(tabs)
        layout.addWidget(self.error_label)
        layout.addWidget(buttons)

    # ------------------------------------------------------------------ pages
    def _form(self) -> tuple[QWidget, QFormLayout]:
        page = QWidget()
        return page, QFormLayout(page)

    def _double(self, name: str, value: float, step: float, decimals: int = 2) -> QDoubleSpinBox:
        box = QDoubleSpinBox()
        low, high = RANGES[name]
        box.setRange(low, high)
        box.setDecimals(decimals)
        box.setSingleStep(step)
        box.setValue(value)
        self.editors[name] = box
        return box

    def _int(self, name: str, value: int, special: str | None = None) -> QSpinBox:
        box = QSpinBox()
        low, high = RANGES[name]
        box.setRange(int(low), int(min(high, 2**31 - 1)))
        box.setGroupSeparatorShown(True)
        if special:
            box.setSpecialValueText(special)
        box.setValue(value)
        self.editors[name] = box
        return box

    def _check(self, name: str, value: bool, text: str) -> QCheckBox:
        box = QCheckBox(text)
        box.setChecked(value)
        self.editors[name] = box
        return box

    def _combo(self, name: str, value: str) -> QComboBox:
        """A combo box of the field's declared choices (halo_weave.settings.CHOICES)."""
        box = QComboBox()
        for option in CHOICES[name]:
            box.addItem(option.label, option.value)
        set_item_tooltips(box, name)
        box.setCurrentIndex(max(0, box.findData(value)))
        self.editors[name] = box
        return box

    def _generation_page(self, s: Settings) -> QWidget:
        page, form = self._form()
        form.addRow("Temperature", self._double("temperature", s.temperature, 0.05))
        form.addRow("Top-p", self._double("top_p", s.top_p, 0.05))
        form.addRow("Top-k", self._int("top_k", s.top_k, "Off"))
        form.addRow("Repetition penalty", self._double("rep_pen", s.rep_pen, 0.05))
        form.addRow("Max new tokens", self._int("max_new_tokens", s.max_new_tokens))
        form.addRow("Sampler seed", self._int("sampler_seed", s.sampler_seed, "Random"))
        return page

    def _context_page(self, s: Settings) -> QWidget:
        page, form = self._form()
        form.addRow("Max context tokens", self._int("max_context_tokens", s.max_context_tokens, "No pruning"))
        form.addRow("Min chunk tokens", self._int("min_chunk_tokens", s.min_chunk_tokens))
        form.addRow("Resurrection budget cap", self._int("resurrection_budget_cap", s.resurrection_budget_cap, "No cap"))
        keep = self._double("resurrection_keep_share", s.resurrection_keep_share, 0.05)
        keep.setToolTip("When the model's window is too small for what your message brings back from memory, "
                        "older context is pruned to make room, beyond this share of the max context tokens "
                        "(the newest part always stays, and the exchange you just read). 1.00: never; the "
                        "room is only what pruning after the last answer left.")
        form.addRow("Recall may replace context beyond the newest (share)", keep)
        form.addRow("Semantic resurrection brightness",
                    self._combo("resurrection_brightness", s.resurrection_brightness))
        share = self._double("highlight_fraction", s.highlight_fraction, 0.05)
        share.setToolTip("The brightest share of all words the heatmap highlights in yellow "
                         "(0.20: the brightest fifth; 0: none).")
        form.addRow(HIGHLIGHT_LABEL, share)
        form.addRow("", self._check("score_current_turn", s.score_current_turn,
                                    "Score the turn being generated (its own tokens gain brightness)"))
        form.addRow("", self._check("hybrid_search", s.hybrid_search,
                                    "Hybrid search (keywords + meaning; helps with names and numbers)"))
        form.addRow("", self._check("recall_note", s.recall_note,
                                    "Repeat what a message recalled just before it (the model uses it more)"))
        form.addRow("Servers without attention", self._check(
            "proxy_attention", s.proxy_attention,
            "Let the bundled SmolLM2-135M read each exchange and light the heatmap (its attention, not your model's)"))
        form.addRow("", self._check(
            "proxy_pruning", s.proxy_pruning,
            "…and prune by its attention (off: oldest-first; in our memory benchmark it kept no more than oldest-first)"))
        return page

    def _server_page(self, s: Settings) -> QWidget:
        page, form = self._form()
        url = QLineEdit(s.server_url)
        url.setPlaceholderText("http://127.0.0.1:5001")
        self.editors["server_url"] = url
        form.addRow("Server URL", url)
        from .server_settings import ServerFields

        self.server_fields = ServerFields(self, form, url, s, self._api_key, self._keyring)
        form.addRow("Model context", self._int("server_context_tokens", s.server_context_tokens,
                                               "As the server says (2048 if it does not)"))
        form.addRow("Attention format", self._combo("attention_format", s.attention_format))
        form.addRow("", self._check("autostart_server", s.autostart_server,
                                    "Start the built-in server when none answers at this URL"))
        saved = self._int("saved_caches_mb", s.saved_caches_mb, "None: reopening reads the context again")
        saved.setSuffix(" MiB")
        saved.setToolTip("The built-in server saves each conversation's model cache to disk, so that "
                         "reopening it answers at once instead of reading the whole context again; "
                         "the least recently saved go first beyond this size (applies when it starts).")
        form.addRow("Saved model caches", saved)
        form.addRow("Debugging", self._check("record_attention", s.record_attention,
                                             "Record attention of every answer to the captures folder"))
        return page

    def _prompt_page(self, s: Settings) -> QWidget:
        page, form = self._form()
        prompt = QPlainTextEdit(s.system_prompt)
        prompt.setTabChangesFocus(True)
        self.editors["system_prompt"] = prompt
        form.addRow(QLabel("Sent before every conversation turn; never scored or pruned."))
        form.addRow(prompt)
        restore = QPushButton("Restore default prompt")
        restore.setToolTip(f"The default prompt: “{DEFAULT_SYSTEM_PROMPT}”")
        restore.clicked.connect(lambda: prompt.setPlainText(DEFAULT_SYSTEM_PROMPT))
        form.addRow("", restore)
        tool = self._check("notes_tool", s.notes_tool, "Give the model a notebook (notes.json)")
        tool.setToolTip("The model may keep notes that last the whole conversation, written with jq "
                        "commands in tool tags (View → Show notes). Its instructions (about 190 tokens) "
                        "follow the prompt while this is on; small models may repeat them instead of "
                        "answering.")
        form.addRow("Tools", tool)
        return page

    # ------------------------------------------------------------------ result
    def current_settings(self) -> Settings:
        """The settings as the editors show them now."""
        values = {}
        for name, editor in self.editors.items():
            if isinstance(editor, (QSpinBox, QDoubleSpinBox)):
                values[name] = editor.value()
            elif isinstance(editor, QCheckBox):
                values[name] = editor.isChecked()
            elif isinstance(editor, QComboBox):
                values[name] = editor.currentData()
            elif isinstance(editor, QLineEdit):
                values[name] = editor.text().strip()
            elif isinstance(editor, QPlainTextEdit):
                values[name] = editor.toPlainText()
        return self._original.replace(**values)

    def problems(self) -> list[str]:
        """What is wrong with the current input (empty when OK may close the dialog)."""
        return settings_problems(self.current_settings())

    def result_settings(self) -> Settings:
        """The accepted settings (the original ones when the dialog was cancelled)."""
        return self.current_settings() if self.result() == QDialog.DialogCode.Accepted else self._original

    def accept(self) -> None:
        problems = self.problems()
        if problems:
            self.error_label.setText("\n".join(problems))
            self.error_label.show()
            return
        self.error_label.hide()
        super().accept()
