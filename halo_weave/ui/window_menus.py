"""The main window's menus (File, Chat, View) and what the File menu and the attention
recording open: dialogs, the captures folder.  Every action goes through the
:class:`~halo_weave.app.TurnController`; the window owns one :class:`WindowMenus`."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QAction, QDesktopServices, QKeySequence
from PySide6.QtWidgets import QFileDialog


class WindowMenus:
    """Builds the menu bar of ``window`` (a :class:`~halo_weave.ui.main_window.MainWindow`);
    its actions are attributes (``new_action``, ``record_action``, …)."""

    def __init__(self, window) -> None:
        self.window = window
        self.controller = c = window.controller
        bar = window.menuBar()
        add = self._action

        file_menu = bar.addMenu("&File")
        self.new_action = add(file_menu, "&New conversation", window.new_conversation,
                              QKeySequence.StandardKey.New, "Start a new, empty conversation")
        self.open_action = add(file_menu, "&Open conversation…", self.open_conversation,
                               QKeySequence.StandardKey.Open, "Open a conversation from the data folder")
        file_menu.addSeparator()
        self.export_action = add(file_menu, "&Export JSON…", self.export_json, "Ctrl+E",
                                 "Save the whole conversation as a JSON file")
        self.markdown_export_action = add(file_menu, "Export &Markdown…", self.export_markdown, "Ctrl+Shift+E",
                                          "Save the conversation shown as Markdown to read or share "
                                          "(pruned paragraphs included, marked)")
        self.import_action = add(file_menu, "&Import…", self.import_json, "Ctrl+I",
                                 "Open a JSON export, a SillyTavern chat (.jsonl) or a KoboldAI "
                                 "Lite save (.json) or a character card as a new conversation")
        self.card_action = add(file_menu, "Import &character card…", self.import_card, None,
                               "Start a conversation with a SillyTavern character card (PNG or JSON)")
        file_menu.addSeparator()
        self.settings_action = add(file_menu, "&Settings…", self.open_settings, "Ctrl+,",
                                   "Generation, pruning, memory and server settings")
        file_menu.addSeparator()
        add(file_menu, "&Quit", window.close, QKeySequence.StandardKey.Quit)

        chat = bar.addMenu("&Chat")
        self.send_action = add(chat, "&Send message", window.send, "Return",
                               "Send the message (Shift+Enter for a new line)")
        # Enter belongs to the message box; the menu only shows the key.
        self.send_action.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)
        self.stop_action = add(chat, "S&top generating", c.turn.stop, "Esc",
                               "Stop the answer; what arrived so far is kept")
        chat.addSeparator()
        self.continue_action = add(chat, "&Continue the answer", window.continue_answer,
                                   "Ctrl+Shift+Return", "Let the model go on with its last answer")
        self.regenerate_action = add(chat, "&Regenerate the answer", window.regenerate, "Ctrl+R",
                                     "Answer the last message again; this answer stays as a version")
        self.edit_action = add(chat, "&Edit your last message…", window.edit_last_message, "Ctrl+Up",
                               "Change your last message and send it again")
        self.previous_version_action = add(chat, "&Previous version of the answer",
                                           lambda: c.actions.show_answer_version(-1), "Alt+Left")
        self.next_version_action = add(chat, "&Next version of the answer",
                                       lambda: c.actions.show_answer_version(1), "Alt+Right")
        self.prompt_action = add(chat, "System &prompt…", lambda: self.open_settings("prompt"), None,
                                 "This conversation's system prompt, and the one new conversations start with")
        self.presets_action = add(chat, "Pre&sets…", self.open_presets, None,
                                  "Pick a system prompt with its sampling (Assistant, Coder, Writer, yours); "
                                  "save the ones in use as a preset")
        chat.addSeparator()
        self.find_action = add(chat, "&Find in the chat…", window.find_bar.open, QKeySequence.StandardKey.Find,
                               "Find words in the chat, pruned paragraphs included")
        self.find_next_action = add(chat, "Find ne&xt", lambda: window.find_bar.step(1), "F3")
        self.find_previous_action = add(chat, "Find pre&vious", lambda: window.find_bar.step(-1), "Shift+F3")
        chat.addSeparator()
        self.attach_action = add(chat, "&Attach a document…", self.attach_document, "Ctrl+Shift+A",
                                 "Add a text, Markdown, code or PDF file to the memory: its paragraphs "
                                 "wait in the graveyard and come back when a message needs them "
                                 "(or drop the file on the window)")
        self.attach_live_action = add(chat, "Attach a document to the &context…",
                                      lambda: self.attach_document(live=True), None,
                                      "The same, but kept in the context when it fits (else in the memory)")
        chat.addSeparator()
        self.graveyard_action = add(chat, "Show &graveyard",
                                    lambda: window.set_graveyard_visible(not window.graveyard.isVisible()), "Ctrl+G")
        self.graveyard_action.setCheckable(True)
        self.graveyard_action.setChecked(True)

        view = bar.addMenu("&View")
        self.legend_action = add(view, "Heatmap &legend…", window.guide.show_legend, "F1",
                                 "What the colours, the graveyard and the numbers mean")
        self.list_action = add(view, "Show conversation &list", window.toggle_list, "Ctrl+Shift+L",
                               "The conversations beside the chat: search, rename, delete")
        self.list_action.setCheckable(True)
        self.list_action.setChecked(True)
        self.notes_action = window.notes_panel.toggleViewAction()
        self.notes_action.setText("Show &notes")
        self.notes_action.setShortcut(QKeySequence("Ctrl+Shift+N"))
        self.notes_action.setStatusTip("The model's notebook (notes.json) of this conversation, read-only")
        view.addAction(self.notes_action)
        self.markdown_action = add(view, "Render &Markdown", self.toggle_markdown, "Ctrl+Shift+M",
                                   "Show messages rendered (headings, bold, code with colours); "
                                   "off: as typed, Markdown marks included")
        self.markdown_action.setCheckable(True)
        self.markdown_action.setChecked(c.settings.chat.render_markdown)
        window.heatmap.set_markdown(c.settings.chat.render_markdown)
        self.theme_actions = self._theme_menu(view.addMenu("&Theme"))
        view.addSeparator()
        self.record_action = add(view, "&Record attention", self.toggle_recording, None,
                                 "Write every token's attention to the captures folder "
                                 "(for scripts/analyze_capture.py)")
        self.record_action.setCheckable(True)
        self.record_action.setChecked(c.settings.server.record_attention)
        self.captures_action = add(view, "Open &captures folder", self.open_captures_folder, None,
                                   f"Open {c.turn.capture_dir}")
        c.signals.capture_saved.connect(self._on_capture_saved)

        help_menu = bar.addMenu("&Help")
        self.log_action = add(help_menu, "Open &log folder", self.open_log_folder, None,
                              "The app's and the built-in model server's log files, to read or to send")
        self.restart_action = add(help_menu, "&Restart the built-in model server", self.restart_server, None,
                                  "Stop and start the model server that came with the app")

    def _theme_menu(self, menu) -> dict[str, QAction]:
        """View → Theme: follow the system, dark or light (kept in the settings file)."""
        from PySide6.QtGui import QActionGroup

        from .theme import THEME_KEY

        qsettings = self.window.qsettings
        chosen = str(qsettings.value(THEME_KEY, "system")) if qsettings is not None else "system"
        group = QActionGroup(self.window)
        actions = {}
        for key, text, tip in (("system", "Follow the &system", "Light or dark as the desktop is set"),
                               ("dark", "&Dark", "The dark theme, whatever the desktop's"),
                               ("light", "&Light", "The light theme, whatever the desktop's")):
            action = self._action(menu, text, lambda _=False, k=key: self.choose_theme(k), None, tip)
            action.setCheckable(True)
            action.setChecked(key == chosen)
            group.addAction(action)
            actions[key] = action
        return actions

    def choose_theme(self, key: str) -> None:
        """Use a theme now and at the next start."""
        from PySide6.QtWidgets import QApplication

        from .theme import THEME_KEY, apply_theme

        if self.window.qsettings is not None:
            self.window.qsettings.setValue(THEME_KEY, key)
        self.theme_actions[key].setChecked(True)
        apply_theme(QApplication.instance(), key)

    def _action(self, menu, text: str, slot, shortcut=None, tip: str = "") -> QAction:
        action = QAction(text, self.window)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
            action.setShortcutVisibleInContextMenu(True)
        if tip:
            action.setStatusTip(tip)
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    # ------------------------------------------------------------------ file menu
    def open_conversation(self) -> None:
        from .conversation_picker import ConversationPicker

        picker = ConversationPicker(self.controller.data_dir, self.controller.files.path, self.window)
        if picker.exec() and picker.selected_path() is not None:
            self.controller.files.open_conversation(picker.selected_path())

    def export_title(self) -> str:
        """The open conversation's title, as the list shows it ("" when none is open)."""
        open_path = self.controller.files.path
        return self.window.library.title_of(open_path) if open_path else ""

    def export_start(self, suffix: str) -> str:
        """Where an export dialog starts: the home folder, a file named after the title."""
        from ..storage.transfer_markdown import file_name_for

        return str(Path.home() / file_name_for(self.export_title(), suffix))

    def export_json(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self.window, "Export conversation", self.export_start(".json"),
                                              "JSON (*.json)")
        if path:
            self.controller.files.export_json(Path(path))

    def export_markdown(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self.window, "Export conversation as Markdown",
                                              self.export_start(".md"), "Markdown (*.md)")
        if path:
            self.controller.files.export_markdown(Path(path), self.export_title())

    def import_json(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self.window, "Import conversation", str(Path.home()),
            "Conversations and character cards (*.json *.jsonl *.png);;Halo Weave export (*.json);;"
            "SillyTavern chat (*.jsonl);;KoboldAI Lite save (*.json);;Character card (*.png *.json);;All files (*)")
        if path:
            self.controller.files.import_json(Path(path))

    def import_card(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self.window, "Import character card", str(Path.home()),
            "Character cards (*.png *.json);;All files (*)")
        if path:
            self.controller.files.import_card(Path(path))

    def open_presets(self) -> None:
        """Chat → Presets…: pick one for this conversation and new ones, or save one."""
        from ..settings.presets import PresetBook
        from .preset_dialog import PresetDialog, apply_preset

        c = self.controller
        open_one = c.conv is not None
        prompt = c.session.prompt.own() if open_one else c.settings.chat.system_prompt
        dialog = PresetDialog(PresetBook(), prompt, c.settings, open_one, self.window)
        if dialog.exec() and dialog.chosen() is not None:
            apply_preset(self.window, dialog.chosen(), dialog.for_conversation.isChecked(),
                         dialog.for_new.isChecked())

    def attach_document(self, live: bool = False) -> None:
        """Chat → Attach a document: pick a file; it is read, saved and indexed on threads."""
        path, _ = QFileDialog.getOpenFileName(
            self.window, "Attach a document", str(Path.home()),
            "Documents (*.pdf *.txt *.md *.markdown *.rst *.py *.js *.ts *.c *.h *.cpp *.rs *.go *.java "
            "*.json *.yaml *.yml *.toml *.csv *.html *.css *.sh *.tex);;All files (*)")
        if path:
            self.controller.documents.attach(Path(path), live=live)

    def open_settings(self, page: str = "") -> None:
        """File → Settings; ``page="prompt"`` opens it at the system prompts."""
        from ..backends.api_keys import get_key, keyring_available, set_key
        from .settings_dialog import SettingsDialog

        window, controller = self.window, self.controller
        url = controller.settings.server.server_url
        model = controller.settings.server.server_model
        gpu_layers = controller.settings.server.server_gpu_layers
        old_key = get_key(url) or ""
        own = controller.session.prompt.own() if controller.conv is not None else None
        dialog = SettingsDialog(controller.settings, window, api_key=old_key, keyring=keyring_available(),
                                conversation_prompt=own)
        if page == "prompt":
            dialog.tabs.setCurrentIndex(dialog.prompt_tab)
        if dialog.server_fields is not None:
            backend = controller.session.backend
            dialog.server_fields.show_in_use(backend.template_in_use if backend is not None else None)
        if dialog.exec():
            new = dialog.result_settings()
            fields = dialog.server_fields
            if fields is not None and (fields.api_key() != old_key or new.server.server_url != url):
                if fields.api_key() or old_key:
                    window.messages.info(set_key(new.server.server_url, fields.api_key(),
                                                 to_file=fields.key_to_file.isChecked()))
                if new.server.server_url == url:
                    controller.link.connect_server()  # the new key takes effect now
            window.apply_settings(new)
            if new.server.server_model != model or new.server.server_gpu_layers != gpu_layers:
                self._server_model_changed(new.server.server_model, new.server.server_gpu_layers)
            prompt = dialog.conversation_prompt()
            if prompt is not None:
                controller.prompt.set_conversation_prompt(prompt)

    # ------------------------------------------------------------------ attention capture
    def toggle_markdown(self, on: bool) -> None:
        self.window.apply_settings(self.controller.settings.replace(render_markdown=bool(on)))

    def toggle_recording(self, on: bool) -> None:
        window = self.window
        window.apply_settings(self.controller.settings.replace(record_attention=bool(on)))
        if on:
            window.statusBar().showMessage(
                f"Recording attention of every answer to {self.controller.turn.capture_dir} "
                "(View → Open captures folder)"
            )
        else:
            window.statusBar().showMessage("Attention recording off.", 5000)

    def _on_capture_saved(self, path: str) -> None:
        self.record_action.setToolTip(f"Last capture: {path}")
        self.window.statusBar().showMessage(f"Attention recorded to {path}", 10000)

    def open_captures_folder(self) -> None:
        folder = Path(self.controller.turn.capture_dir)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self.window.messages.error(exc, "Opening the captures folder")
            return
        if not QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))):
            self.window.messages.info(f"Captures are in {folder}")

    # ------------------------------------------------------------------ help menu
    def open_log_folder(self) -> None:
        from ..settings import log_dir
        from .messages import open_path

        folder = log_dir()
        if not open_path(str(folder)):
            self.window.messages.info(f"The logs are in {folder}")

    def restart_server(self) -> None:
        connection = self.controller.link.connection
        if connection.autostart or connection.server is not None:
            connection.restart_bundled_server()
        else:
            self.window.messages.info("The built-in model server is off (File → Settings → Server); "
                                      f"the app uses the server at {connection.url}")

    def _server_model_changed(self, model: str, gpu_layers: int = 0) -> None:
        """The built-in server this app runs starts again with ``model`` on ``gpu_layers``
        GPU layers; one it does not run takes them when it next starts."""
        connection = self.controller.link.connection
        if connection.server is not None:
            connection.restart_bundled_server()
        else:
            where = "" if not gpu_layers else (" with every layer on the GPU" if gpu_layers < 0
                                               else f" with {gpu_layers} layers on the GPU")
            self.window.messages.info(f"The built-in model server will run {model or 'the default model'}"
                                      f"{where} when it next starts.")
