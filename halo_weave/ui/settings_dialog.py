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

from ..settings import CHOICES, DEFAULT_SYSTEM_PROMPT, Settings, choice
from .pruning_settings import PruningPage, explanation_label, set_item_tooltips
from .settings_help import explanation, label as help_label
from .settings_io import RANGES, settings_problems


class SettingsDialog(QDialog):
    """Edit a copy of :class:`Settings`; ``result_settings()`` after ``exec()``.

    OK is refused while :meth:`problems` is not empty; the reasons are shown in
    ``error_label``.  Editors are reachable as ``editors[field_name]`` (tests), the line
    under each that explains it as ``explanations[field_name]``.  With
    ``conversation_prompt`` (the open conversation's system prompt) the System prompt
    page edits it too: :meth:`conversation_prompt` after ``exec()``.
    """

    def __init__(self, settings: Settings, parent: QWidget | None = None, *, api_key: str | None = None,
                 keyring: bool = True, conversation_prompt: str | None = None) -> None:
        super().__init__(parent)
        self._conversation_prompt = conversation_prompt
        self._api_key, self._keyring = api_key, keyring
        self.server_fields = None
        self.setWindowTitle("Settings")
        self._original = settings
        self.editors: dict[str, QWidget] = {}
        #: The line under each field that says what it does (by field name).
        self.explanations: dict[str, QLabel] = {}
        self.tabs = tabs = QTabWidget()
        tabs.addTab(self._generation_page(settings), "Generation")
        tabs.addTab(self._context_page(settings), "Context && memory")
        self.pruning_page = PruningPage(self, settings)
        self.explanations.update(self.pruning_page.explanations)
        tabs.addTab(self.pruning_page, "What decides pruning")
        tabs.addTab(self._server_page(settings), "Server")
        self.prompt_tab = tabs.addTab(self._prompt_page(settings, conversation_prompt), "System prompt")
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

    def editor(self, name: str, value) -> QWidget:
        """The editor of field ``name`` showing ``value``, kept in :attr:`editors`: a combo
        box of a multiple-choice field's values, else a spin box in the field's range."""
        return self._combo(name, value) if name in CHOICES else self._int(name, value)

    def _explained(self, form: QFormLayout, name: str, editor: QWidget, **values: str) -> QLabel:
        """A row: the field's label, its editor and, right under it, its explanation
        (:mod:`.settings_help`; a multiple-choice field's explains the chosen value)."""
        words = explanation_label()
        words.setWordWrap(False)  # one line: the dialog is as wide as the longest
        words.setObjectName(f"explain_{name}")
        field = QWidget()
        column = QVBoxLayout(field)
        column.setContentsMargins(0, 0, 0, 4)
        column.setSpacing(1)
        column.addWidget(editor)
        column.addWidget(words)
        form.addRow(help_label(name), field)
        self.explanations[name] = words
        if isinstance(editor, QComboBox) and name in CHOICES:
            def show() -> None:
                chosen = choice(name, editor.currentData())
                words.setText(chosen.explanation if chosen else "")
            editor.currentIndexChanged.connect(show)
            show()
        else:
            words.setText(explanation(name, **values))
            editor.setToolTip(words.text())
        return words

    def _generation_page(self, s: Settings) -> QWidget:
        page, form = self._form()
        self._explained(form, "temperature", self._double("temperature", s.sampling.temperature, 0.05))
        self._explained(form, "top_p", self._double("top_p", s.sampling.top_p, 0.05))
        self._explained(form, "top_k", self._int("top_k", s.sampling.top_k, "Off"))
        self._explained(form, "rep_pen", self._double("rep_pen", s.sampling.rep_pen, 0.05))
        longest = self._int("max_new_tokens", s.sampling.max_new_tokens)
        longest.setSuffix(" tokens")
        self._explained(form, "max_new_tokens", longest)
        self._explained(form, "sampler_seed", self._int("sampler_seed", s.sampling.sampler_seed, "Random"))
        return page

    def _context_page(self, s: Settings) -> QWidget:
        page, form = self._form()
        target = self._int("max_context_tokens", s.pruning.max_context_tokens, "No pruning")
        target.setSuffix(" tokens")
        self._explained(form, "max_context_tokens", target, hysteresis=f"{s.pruning.prune_hysteresis:.0%}")
        chunk = self._int("min_chunk_tokens", s.pruning.min_chunk_tokens)
        chunk.setSuffix(" tokens")
        self._explained(form, "min_chunk_tokens", chunk)
        cap = self._int("resurrection_budget_cap", s.recall.resurrection_budget_cap, "No cap")
        cap.setSuffix(" tokens")
        self._explained(form, "resurrection_budget_cap", cap)
        self._explained(form, "resurrection_keep_share",
                        self._double("resurrection_keep_share", s.recall.resurrection_keep_share, 0.05))
        self._explained(form, "resurrection_brightness",
                        self._combo("resurrection_brightness", s.recall.resurrection_brightness))
        self._explained(form, "highlight_fraction", self._double("highlight_fraction", s.chat.highlight_fraction, 0.05))
        self._explained(form, "score_current_turn", self._check("score_current_turn", s.brightness.score_current_turn,
                                                                "Score the answer being written"))
        self._explained(form, "hybrid_search", self._check("hybrid_search", s.search.hybrid_search,
                                                           "Hybrid search: keywords as well as meaning"))
        self._explained(form, "recall_note", self._check("recall_note", s.recall.recall_note,
                                                         "Repeat what a message recalled just before it"))
        self._explained(form, "recall_keep_share",
                        self._double("recall_keep_share", s.recall.recall_keep_share, 0.05))
        self._explained(form, "proxy_attention", self._check(
            "proxy_attention", s.server.proxy_attention, "Let the bundled reader light the heatmap"))
        self._explained(form, "proxy_pruning", self._check("proxy_pruning", s.server.proxy_pruning,
                                                           "…and prune by its attention"))
        return page

    def _server_page(self, s: Settings) -> QWidget:
        page, form = self._form()
        url = QLineEdit(s.server.server_url)
        url.setPlaceholderText("http://127.0.0.1:5001")
        self.editors["server_url"] = url
        self._explained(form, "server_url", url)
        self._explained(form, "server_api", self._combo("server_api", s.server.server_api))
        from .server_settings import ServerFields

        self.server_fields = ServerFields(self, form, url, s, self._api_key, self._keyring)
        self.explanations["chat_template"] = self.server_fields.template_note
        from .model_choice import ModelChoice

        self.model_choice = ModelChoice(s.server.server_model)
        self.editors["server_model"] = self.model_choice.combo
        self._explained(form, "server_model", self.model_choice)
        gpu = self._int("server_gpu_layers", s.server.server_gpu_layers, "All layers")
        gpu.setSuffix(" layers")
        self._explained(form, "server_gpu_layers", gpu)
        window = self._int("server_context_tokens", s.server.server_context_tokens, "As the server says")
        window.setSuffix(" tokens")
        self._explained(form, "server_context_tokens", window)
        self._explained(form, "attention_format", self._combo("attention_format", s.server.attention_format))
        self._explained(form, "autostart_server", self._check("autostart_server", s.server.autostart_server,
                                                              "Start the built-in server when none answers"))
        saved = self._int("saved_caches_mb", s.server.saved_caches_mb, "None: reopening reads the context again")
        saved.setSuffix(" MiB")
        self._explained(form, "saved_caches_mb", saved)
        self._explained(form, "record_attention", self._check("record_attention", s.server.record_attention,
                                                              "Record attention of every answer"))
        return page

    def _prompt_page(self, s: Settings, conversation_prompt: str | None) -> QWidget:
        page, form = self._form()
        self.conversation_prompt_edit: QPlainTextEdit | None = None
        if conversation_prompt is not None:
            own = QPlainTextEdit(conversation_prompt)
            own.setTabChangesFocus(True)
            own.setObjectName("conversationPrompt")
            self.conversation_prompt_edit = own
            self._explained(form, "conversation_prompt", own)
        prompt = QPlainTextEdit(s.chat.system_prompt)
        prompt.setTabChangesFocus(True)
        self.editors["system_prompt"] = prompt
        self._explained(form, "system_prompt", prompt)
        restore = QPushButton("Restore the default prompt")
        restore.setToolTip(f"The default prompt: “{DEFAULT_SYSTEM_PROMPT}”")
        restore.clicked.connect(lambda: prompt.setPlainText(DEFAULT_SYSTEM_PROMPT))
        form.addRow("", restore)
        self._explained(form, "notes_tool", self._check("notes_tool", s.chat.notes_tool,
                                                        "Give the model a notebook (notes.json)"))
        return page

    def conversation_prompt(self) -> str | None:
        """The open conversation's system prompt as edited, or None when the dialog was
        cancelled, shows no conversation's, or it was left as it was."""
        edit = self.conversation_prompt_edit
        if edit is None or self.result() != QDialog.DialogCode.Accepted:
            return None
        text = edit.toPlainText()
        return None if text == self._conversation_prompt else text

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
