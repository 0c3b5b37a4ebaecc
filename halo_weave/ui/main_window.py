"""The main window: heatmap, input, stats bar, graveyard, menus.

Widgets only display and forward intent; every action goes through the
:class:`~halo_weave.app.TurnController`.  Streamed tokens repaint at most once per frame.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QSettings, Qt, QUrl, Signal
from PySide6.QtGui import QAction, QCloseEvent, QDesktopServices, QKeyEvent, QKeySequence, QTextCursor
from PySide6.QtWidgets import (
    QFileDialog, QHBoxLayout, QLabel, QMainWindow, QPlainTextEdit, QProgressBar, QPushButton,
    QSplitter, QToolButton, QVBoxLayout, QWidget,
)

from .messages import MessageCenter

#: Repaint throttle while streaming (one frame at 60 Hz).

#: Widest the connection detail (model name, loading progress) may get, in pixels.
CONNECTION_DETAIL_PX = 280

#: Characters of a chunk shown in the graveyard.
PREVIEW_CHARS = 160


def app_qsettings(data_dir: Path) -> QSettings:
    """The settings file of a data directory (so HALO_WEAVE_HOME isolates everything)."""
    return QSettings(str(Path(data_dir) / "settings.ini"), QSettings.Format.IniFormat)


class MessageInput(QPlainTextEdit):
    """The message box: Enter sends, Shift+Enter starts a new line, Esc stops."""

    submitted = Signal()
    stop_requested = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt API
        key = event.key()
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
            else:
                self.submitted.emit()
            return
        if key == Qt.Key.Key_Escape:
            self.stop_requested.emit()
            return
        super().keyPressEvent(event)


class MainWindow(QMainWindow):
    """The Halo Weave window around one :class:`TurnController`."""

    def __init__(self, controller, qsettings: QSettings | None = None, parent=None) -> None:
        super().__init__(parent)
        from ..storage.library import Library
        from .conversation_list import ConversationList
        from .graveyard import GraveyardPanel
        from .heatmap import HeatmapView
        from .notes_panel import NotesPanel
        from .stats_bar import StatsBar

        self.controller = controller
        self.qsettings = qsettings
        self.setWindowTitle("Halo Weave")
        self.resize(1180, 780)
        self.messages = MessageCenter(self)

        self.heatmap = HeatmapView()
        self.graveyard = GraveyardPanel()
        self.stats_bar = StatsBar()
        self.input = MessageInput()
        self.input.setPlaceholderText("Message — Enter sends, Shift+Enter new line, Esc stops")
        self.input.setFixedHeight(84)
        self.send_button = QPushButton("Send")
        self.send_button.setToolTip("Send (Enter)")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop generating (Esc); the partial answer is kept")
        self.stop_button.setEnabled(False)
        self.reason = QLabel("")
        self.reason.setObjectName("inputReason")
        self.reason.setWordWrap(True)
        self.progress_bar = QProgressBar()
        self.progress_bar.setMaximumWidth(220)
        self.progress_bar.setTextVisible(True)
        self.progress_bar.hide()
        self.statusBar().addPermanentWidget(self.progress_bar)

        self.answer_bar = self._build_answer_bar()
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch(1)
        row = QHBoxLayout()
        row.addWidget(self.input, 1)
        row.addLayout(buttons)
        left = QWidget()
        column = QVBoxLayout(left)
        column.setContentsMargins(6, 6, 6, 6)
        column.addWidget(self.stats_bar)
        column.addWidget(self.heatmap, 1)
        column.addWidget(self.answer_bar)
        column.addWidget(self.reason)
        column.addLayout(row)
        self.library = Library(controller.data_dir)
        self.conversation_list = ConversationList(self.library)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.conversation_list)
        self.splitter.addWidget(left)
        self.splitter.addWidget(self.graveyard)
        self.splitter.setStretchFactor(0, 1)
        self.splitter.setStretchFactor(1, 3)
        self.splitter.setStretchFactor(2, 1)
        self.splitter.setSizes([230, 800, 300])
        self.setCentralWidget(self.splitter)
        self.notes_panel = NotesPanel(self)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.notes_panel)
        self.notes_panel.hide()

        from .legend import FirstStartHint

        self._editing = False  # the input holds the last message being edited
        self.first_start = FirstStartHint(self.heatmap)
        self.heatmap.installEventFilter(self)
        self._legend = None
        self._build_menus()
        self._closed = False
        self._shown = None  # the conversation the heatmap shows
        self._connection_detail = ""
        self._wire()
        self._restore_geometry()
        self._on_busy(False, controller.input_block_reason())

    # ------------------------------------------------------------------ building
    def _build_answer_bar(self) -> QWidget:
        """Under the chat: ‹ version › · Continue · Regenerate · Edit (the Chat menu's actions)."""
        bar = QWidget()
        bar.setObjectName("answerBar")
        layout = QHBoxLayout(bar)
        layout.setContentsMargins(0, 2, 0, 2)
        self.previous_version_button = QToolButton()
        self.previous_version_button.setText("‹")
        self.previous_version_button.setToolTip("Previous version of the answer (Alt+Left)")
        self.version_label = QLabel()
        self.version_label.setToolTip("Versions of the last answer (Regenerate keeps every one)")
        self.next_version_button = QToolButton()
        self.next_version_button.setText("›")
        self.next_version_button.setToolTip("Next version of the answer (Alt+Right)")
        self.continue_button = QToolButton()
        self.continue_button.setText("→ Continue")
        self.continue_button.setToolTip("Let the model go on with its last answer (Ctrl+Shift+Enter)")
        self.regenerate_button = QToolButton()
        self.regenerate_button.setText("↻ Regenerate")
        self.regenerate_button.setToolTip("Answer your last message again; this answer stays as a version (Ctrl+R)")
        self.edit_button = QToolButton()
        self.edit_button.setText("✎ Edit")
        self.edit_button.setToolTip("Change your last message and send it again (Ctrl+Up)")
        layout.addStretch(1)
        for widget in (self.previous_version_button, self.version_label, self.next_version_button):
            layout.addWidget(widget)
        layout.addSpacing(12)
        for widget in (self.continue_button, self.regenerate_button, self.edit_button):
            layout.addWidget(widget)
        self.previous_version_button.clicked.connect(lambda: self.controller.show_answer_version(-1))
        self.next_version_button.clicked.connect(lambda: self.controller.show_answer_version(1))
        self.continue_button.clicked.connect(self.continue_answer)
        self.regenerate_button.clicked.connect(self.regenerate)
        self.edit_button.clicked.connect(self.edit_last_message)
        return bar

    def _action(self, menu, text: str, slot, shortcut=None, tip: str = "") -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
            action.setShortcutVisibleInContextMenu(True)
        if tip:
            action.setStatusTip(tip)
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self.new_action = self._action(file_menu, "&New conversation", self.new_conversation,
                                       QKeySequence.StandardKey.New, "Start a new, empty conversation")
        self.open_action = self._action(file_menu, "&Open conversation…", self.open_conversation,
                                        QKeySequence.StandardKey.Open, "Open a conversation from the data folder")
        file_menu.addSeparator()
        self.export_action = self._action(file_menu, "&Export JSON…", self.export_json, "Ctrl+E",
                                          "Save the whole conversation as a JSON file")
        self.import_action = self._action(file_menu, "&Import…", self.import_json, "Ctrl+I",
                                          "Open a JSON export, a SillyTavern chat (.jsonl) or a KoboldAI "
                                          "Lite save (.json) as a new conversation")
        file_menu.addSeparator()
        self.settings_action = self._action(file_menu, "&Settings…", self.open_settings, "Ctrl+,",
                                            "Generation, pruning, memory and server settings")
        file_menu.addSeparator()
        self._action(file_menu, "&Quit", self.close, QKeySequence.StandardKey.Quit)

        chat = self.menuBar().addMenu("&Chat")
        self.send_action = self._action(chat, "&Send message", self.send, "Return",
                                        "Send the message (Shift+Enter for a new line)")
        # Enter belongs to the message box; the menu only shows the key.
        self.send_action.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)
        self.stop_action = self._action(chat, "S&top generating", self.controller.stop, "Esc",
                                        "Stop the answer; what arrived so far is kept")
        chat.addSeparator()
        self.continue_action = self._action(chat, "&Continue the answer", self.continue_answer,
                                            "Ctrl+Shift+Return", "Let the model go on with its last answer")
        self.regenerate_action = self._action(chat, "&Regenerate the answer", self.regenerate, "Ctrl+R",
                                              "Answer the last message again; this answer stays as a version")
        self.edit_action = self._action(chat, "&Edit your last message…", self.edit_last_message, "Ctrl+Up",
                                        "Change your last message and send it again")
        self.previous_version_action = self._action(chat, "&Previous version of the answer",
                                                    lambda: self.controller.show_answer_version(-1), "Alt+Left")
        self.next_version_action = self._action(chat, "&Next version of the answer",
                                                lambda: self.controller.show_answer_version(1), "Alt+Right")
        chat.addSeparator()
        self.graveyard_action = self._action(chat, "Show &graveyard", self._toggle_graveyard, "Ctrl+G")
        self.graveyard_action.setCheckable(True)
        self.graveyard_action.setChecked(True)

        view = self.menuBar().addMenu("&View")
        self.legend_action = self._action(view, "Heatmap &legend…", self.show_legend, "F1",
                                          "What the colours, the graveyard and the numbers mean")
        self.list_action = self._action(view, "Show conversation &list", self._toggle_list, "Ctrl+Shift+L",
                                        "The conversations beside the chat: search, rename, delete")
        self.list_action.setCheckable(True)
        self.list_action.setChecked(True)
        self.notes_action = self.notes_panel.toggleViewAction()
        self.notes_action.setText("Show &notes")
        self.notes_action.setShortcut(QKeySequence("Ctrl+Shift+N"))
        self.notes_action.setStatusTip("The model's notebook (notes.json) of this conversation, read-only")
        view.addAction(self.notes_action)
        view.addSeparator()
        self.record_action = self._action(view, "&Record attention", self._toggle_recording, None,
                                          "Write every token's attention to the captures folder "
                                          "(for scripts/analyze_capture.py)")
        self.record_action.setCheckable(True)
        self.record_action.setChecked(self.controller.settings.record_attention)
        self.captures_action = self._action(view, "Open &captures folder", self.open_captures_folder, None,
                                            f"Open {self.controller.capture_dir}")

    def _wire(self) -> None:
        c = self.controller
        c.conversation_changed.connect(self._on_conversation_changed)
        c.tokens_streamed.connect(self._on_tokens_streamed)
        self.heatmap.streamed_frame.connect(self.refresh_stats)
        c.graveyard_changed.connect(self.refresh_graveyard)
        c.stats_changed.connect(self.refresh_stats)
        c.busy_changed.connect(self._on_busy)
        c.connection_changed.connect(self._on_connection)
        c.attention_changed.connect(lambda _available: self.stats_bar.set_brightness_source(*c.reader_status()))
        c.progress.connect(self._on_progress)
        c.error.connect(lambda exc, context: self.messages.error(exc, context))
        c.info.connect(self.messages.info)
        c.turn_finished.connect(self._on_turn_finished)
        c.message_returned.connect(self._on_message_returned)
        c.conversation_opened.connect(self._on_opened)
        c.notes_changed.connect(self.refresh_notes)
        c.capture_saved.connect(self._on_capture_saved)
        self.notes_panel.visibilityChanged.connect(lambda visible: visible and self.refresh_notes())
        self.input.submitted.connect(self.send)
        self.input.stop_requested.connect(self._on_escape)
        self.send_button.clicked.connect(self.send)
        self.stop_button.clicked.connect(c.stop)
        self.heatmap.pin_requested.connect(c.pin)
        self.heatmap.merge_requested.connect(c.merge_with_next)
        self.heatmap.prune_requested.connect(c.prune_chunk)
        self.graveyard.resurrect_requested.connect(c.resurrect_chunk)
        self.stats_bar.graveyard_toggled.connect(self._set_graveyard_visible)
        self.graveyard.close_requested.connect(lambda: self._set_graveyard_visible(False))
        self.stats_bar.set_graveyard_open(True)
        self.conversation_list.open_requested.connect(c.open_conversation)
        self.conversation_list.new_requested.connect(self.new_conversation)
        self.conversation_list.delete_requested.connect(self.delete_conversation)
        c.turn_finished.connect(lambda _: self.conversation_list.refresh())

    # ------------------------------------------------------------------ conversation view
    def _on_opened(self, path: str) -> None:
        self.setWindowTitle(f"Halo Weave — {Path(path).stem}")
        self.library.mark_opened(Path(path))
        self.conversation_list.set_current(Path(path))

    # ------------------------------------------------------------------ conversation list
    def _toggle_list(self) -> None:
        self.conversation_list.setVisible(not self.conversation_list.isVisible())
        self.list_action.setChecked(self.conversation_list.isVisible())

    def delete_conversation(self, path: Path, title: str = "") -> bool:
        """Move a conversation to the trash (Undo in the list); the open one is closed first."""
        path = Path(path)
        c = self.controller
        if c.path is not None and path == Path(c.path):
            if c.busy:
                self.messages.info("Wait for the answer to finish (or press Esc) before deleting this conversation.")
                return False
            others = [e.path for e in self.library.entries() if e.path != path and e.error is None]
            if not (c.open_conversation(others[0]) if others else c.new_conversation()):
                return False
        try:
            trashed = self.library.delete(path, title)
        except OSError as exc:
            self.messages.error(exc, f"Deleting {path.name}")
            return False
        self.conversation_list.offer_undo(trashed)
        return True

    def _on_conversation_changed(self) -> None:
        conv = self.controller.conv
        if conv is None:
            return
        self._sync_first_start()
        self._sync_turn_actions()
        if self._shown is not conv:
            self._shown = conv
            self.heatmap.set_conversation(conv)
        else:
            self.heatmap.rebuild()
        self.refresh_stats()

    def _sync_first_start(self) -> None:
        """The three-line explanation shows while the conversation has no message."""
        conv = self.controller.conv
        empty = conv is not None and not conv.turns
        if empty:
            self.first_start.place(self.heatmap.viewport().geometry())
            self.first_start.raise_()
        self.first_start.setVisible(empty)

    def show_legend(self) -> None:
        """View → Heatmap legend (non-modal: it can stay open beside the chat)."""
        from .legend import LegendDialog

        if self._legend is None:
            self._legend = LegendDialog(self)
        self._legend.show()
        self._legend.raise_()

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 - Qt API
        if watched is self.heatmap and event.type() == QEvent.Type.Resize and self.first_start.isVisible():
            self.first_start.place(self.heatmap.viewport().geometry())
        return False

    def _on_tokens_streamed(self) -> None:
        if self.first_start.isVisible():
            self._sync_first_start()
        # The heatmap's one frame timer batches appends, colours and (streamed_frame) the stats.
        self.heatmap.append_streamed()

    def refresh_graveyard(self) -> None:
        conv = self.controller.conv
        if conv is None:
            return
        self.graveyard.set_rows(conv.graveyard(), self._preview)

    def _preview(self, chunk) -> str:
        conv = self.controller.conv
        chunk_id = chunk if isinstance(chunk, int) else chunk.id
        try:
            text = conv.chunk_text(chunk_id)
        except Exception:  # noqa: BLE001 - a preview is never worth an error dialog
            return "(text unavailable)"
        text = " ".join(text.split())
        return text[:PREVIEW_CHARS] + ("…" if len(text) > PREVIEW_CHARS else "")

    def refresh_notes(self) -> None:
        """Show the open conversation's notes in the Notes panel."""
        self.notes_panel.set_notes(self.controller.notes())

    def refresh_stats(self) -> None:
        stats = self.controller.stats()
        if stats:
            self.stats_bar.update_stats(**stats)

    # ------------------------------------------------------------------ input
    def send(self) -> None:
        text = self.input.toPlainText()
        if not text.strip():
            return
        if self._editing:
            sent = self.controller.edit_last(text)
        else:
            sent = self.controller.send(text)
        if sent:
            self._editing = False
            self.input.clear()
            self.heatmap.follower.jump_to_latest()  # the user wants to see the answer

    def _on_escape(self) -> None:
        if self._editing:
            self._editing = False
            self.input.clear()
            self._on_busy(self.controller.busy, self.controller.input_block_reason())
        else:
            self.controller.stop()

    # ------------------------------------------------------------------ the last exchange
    def continue_answer(self) -> None:
        if self.controller.continue_answer():
            self.heatmap.follower.jump_to_latest()

    def regenerate(self) -> None:
        if self.controller.regenerate():
            self.heatmap.follower.jump_to_latest()

    def edit_last_message(self) -> None:
        """Put the last message into the box to change it; Enter resends, Esc cancels."""
        reason = self.controller.can_change_last_exchange()
        text = self.controller.last_question_text() if not reason else ""
        if not text:
            self.messages.info(reason or "There is no message of yours to edit.")
            return
        self._editing = True
        self.input.setPlainText(text)
        self.input.moveCursor(QTextCursor.MoveOperation.End)
        self.input.setFocus()
        self._on_busy(self.controller.busy, self.controller.input_block_reason())

    def _sync_turn_actions(self) -> None:
        """Enable Continue / Regenerate / Edit / versions for what the conversation ends with."""
        c = self.controller
        free = not c.busy and not c.input_block_reason()
        question, answer = c.session.last_exchange()
        state = c.answer_versions() if answer is not None else None
        for widget in (self.continue_action, self.continue_button):
            widget.setEnabled(free and answer is not None)
        for widget in (self.regenerate_action, self.regenerate_button):
            widget.setEnabled(free and question is not None and answer is not None)
        for widget in (self.edit_action, self.edit_button):
            widget.setEnabled(free and question is not None)
        has_versions = state is not None and state.count > 1
        for widget in (self.previous_version_action, self.previous_version_button):
            widget.setEnabled(free and has_versions and state.previous is not None)
        for widget in (self.next_version_action, self.next_version_button):
            widget.setEnabled(free and has_versions and state.next is not None)
        for widget in (self.previous_version_button, self.version_label, self.next_version_button):
            widget.setVisible(has_versions)
        self.version_label.setText(f"{state.number} / {state.count}" if has_versions else "")
        self.answer_bar.setVisible(question is not None or answer is not None)

    def _on_message_returned(self, text: str) -> None:
        """A message that could not be sent goes back into the input box (unless the
        user has started typing another one)."""
        if not self.input.toPlainText().strip():
            self.input.setPlainText(text)

    def _on_busy(self, busy: bool, reason: str) -> None:
        ready = not busy and not reason
        self.input.setReadOnly(not ready)
        self.send_button.setEnabled(ready)
        self.stop_button.setEnabled(self.controller.generating)
        self.stop_action.setEnabled(self.controller.generating)
        for action in (self.new_action, self.open_action, self.import_action):
            action.setEnabled(not busy)
        if self.controller.generating:
            self.stats_bar.set_connection("generating", self._connection_detail)
            self._full_connection_tooltip()
        elif self.stats_bar.connection_state() == "generating":
            self.stats_bar.set_connection(self.controller.connection_state, self._connection_detail)
            self._full_connection_tooltip()
        if self._editing and ready:
            reason = "Editing your last message — Enter sends it again (its answer stays as a version), Esc cancels"
            self.reason.setText(reason)
        else:
            self.reason.setText(reason)
        self.reason.setVisible(bool(reason))
        self.input.setPlaceholderText(
            (reason if not ready else "") or "Message — Enter sends, Shift+Enter new line, Esc stops"
        )
        self._sync_turn_actions()
        if ready and not self._closed:
            self.input.setFocus()

    def _on_turn_finished(self, reason: str) -> None:
        self.heatmap.flush()
        self.refresh_stats()
        if reason == "aborted":
            self.messages.info("Stopped — the partial answer was kept.")
        elif reason == "length":
            self.messages.info("The answer reached the maximum new tokens (Settings) — "
                               "→ Continue (Ctrl+Shift+Enter) lets it go on.")
        self._sync_turn_actions()

    def _full_connection_tooltip(self) -> None:
        """The whole connection line (the label may be elided), e.g. with the model's name."""
        full = getattr(self, "_connection_full", "")
        if full:
            self.stats_bar.connection_label.setToolTip(full)

    def _on_connection(self, state: str, detail: str) -> None:
        # A long detail (a loader log line) must not widen the stats bar, and so the window.
        metrics = self.stats_bar.connection_label.fontMetrics()
        self._connection_full = detail
        detail = metrics.elidedText(detail, Qt.TextElideMode.ElideRight, CONNECTION_DETAIL_PX)
        self._connection_detail = detail
        self.stats_bar.set_connection(state, detail)
        self._full_connection_tooltip()
        if state == "loading":
            self.statusBar().showMessage(detail)
        elif state == "connected":
            self.statusBar().showMessage(f"Connected: {detail}", 5000)

    def _on_progress(self, what: str, done: int, total: int) -> None:
        if total <= 0:
            self.progress_bar.setRange(0, 0)
            self.progress_bar.setFormat(what)
            self.progress_bar.show()
        elif done >= total:
            self.progress_bar.hide()
        else:
            self.progress_bar.setRange(0, total)
            self.progress_bar.setValue(done)
            self.progress_bar.setFormat(f"{what} %v/%m")
            self.progress_bar.show()

    # ------------------------------------------------------------------ graveyard
    def _toggle_graveyard(self) -> None:
        self._set_graveyard_visible(not self.graveyard.isVisible())

    def _set_graveyard_visible(self, visible: bool) -> None:
        self.graveyard.setVisible(visible)
        self.graveyard_action.setChecked(visible)
        self.stats_bar.set_graveyard_open(visible)

    # ------------------------------------------------------------------ attention capture
    def _toggle_recording(self, on: bool) -> None:
        self.apply_settings(self.controller.settings.replace(record_attention=bool(on)))
        if on:
            self.statusBar().showMessage(
                f"Recording attention of every answer to {self.controller.capture_dir} "
                "(View → Open captures folder)"
            )
        else:
            self.statusBar().showMessage("Attention recording off.", 5000)

    def _on_capture_saved(self, path: str) -> None:
        self.record_action.setToolTip(f"Last capture: {path}")
        self.statusBar().showMessage(f"Attention recorded to {path}", 10000)

    def open_captures_folder(self) -> None:
        folder = Path(self.controller.capture_dir)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self.messages.error(exc, "Opening the captures folder")
            return
        if not QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))):
            self.messages.info(f"Captures are in {folder}")

    # ------------------------------------------------------------------ file menu
    def new_conversation(self) -> None:
        self.controller.new_conversation()

    def open_conversation(self) -> None:
        from .conversation_picker import ConversationPicker

        picker = ConversationPicker(self.controller.data_dir, self.controller.path, self)
        if picker.exec() and picker.selected_path() is not None:
            self.controller.open_conversation(picker.selected_path())

    def export_json(self) -> None:
        start = str(Path.home() / f"{self.controller.path.stem if self.controller.path else 'conversation'}.json")
        path, _ = QFileDialog.getSaveFileName(self, "Export conversation", start, "JSON (*.json)")
        if path:
            self.controller.export_json(Path(path))

    def import_json(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Import conversation", str(Path.home()),
            "Conversations (*.json *.jsonl);;Halo Weave export (*.json);;SillyTavern chat (*.jsonl);;"
            "KoboldAI Lite save (*.json);;All files (*)")
        if path:
            self.controller.import_json(Path(path))

    def open_settings(self) -> None:
        from .settings_dialog import SettingsDialog

        from ..backends.api_keys import get_key, keyring_available, set_key

        url = self.controller.settings.server_url
        old_key = get_key(url) or ""
        dialog = SettingsDialog(self.controller.settings, self, api_key=old_key, keyring=keyring_available())
        if dialog.exec():
            new = dialog.result_settings()
            fields = dialog.server_fields
            if fields is not None and (fields.api_key() != old_key or new.server_url != url):
                if fields.api_key() or old_key:
                    self.messages.info(set_key(new.server_url, fields.api_key(), to_file=fields.key_to_file.isChecked()))
                if new.server_url == url:
                    self.controller.connect_server()  # the new key takes effect now
            self.apply_settings(new)

    def apply_settings(self, new) -> None:
        """Adopt settings from the dialog: persist them, then let the controller react."""
        from .settings_io import save_settings

        save_settings(new, self.qsettings)
        self.controller.apply_settings(new)
        self.record_action.blockSignals(True)
        self.record_action.setChecked(new.record_attention)
        self.record_action.blockSignals(False)
        self.refresh_stats()

    # ------------------------------------------------------------------ lifetime
    def _restore_geometry(self) -> None:
        if self.qsettings is None:
            return
        geometry = self.qsettings.value("window/geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        state = self.qsettings.value("window/state")
        if state is not None:
            self.restoreState(state)  # the Notes panel's place and visibility

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt API
        if self.qsettings is not None:
            self.qsettings.setValue("window/geometry", self.saveGeometry())
            self.qsettings.setValue("window/state", self.saveState())
            self.qsettings.sync()
        self._closed = True
        self.hide()  # shutting down may wait for a running embedding job
        self.controller.shutdown()
        super().closeEvent(event)
