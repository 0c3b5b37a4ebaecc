"""The main window: heatmap, input, stats bar, graveyard, conversation list, notes.

Widgets only display and forward intent; every action goes through the collaborators
of the :class:`~halo_weave.app.TurnController`.  Streamed tokens repaint at most once
per frame (the heatmap's frame timer).  The menus are :mod:`.window_menus`; the message box and
the bar under the chat are :mod:`.answer_bar`, what they do :mod:`.input_actions`.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QSettings, Qt, QTimer
from PySide6.QtGui import QCloseEvent, QIcon
from PySide6.QtWidgets import (
    QHBoxLayout, QLabel, QMainWindow, QPushButton, QSplitter, QVBoxLayout, QWidget,
)

from .answer_bar import AnswerBar, MessageInput
from .input_actions import IDLE_PLACEHOLDER, InputActions
from .messages import MessageCenter
from .status_widgets import TaskProgress
from .window_guide import WindowGuide
from .window_menus import WindowMenus


def app_qsettings(folder: Path | None = None) -> QSettings:
    """The settings file in ``folder``; by default the user's, in the config directory
    (:func:`halo_weave.settings.settings_file`, which moves one left in the data directory)."""
    from ..settings import SETTINGS_FILE, settings_file

    path = Path(folder) / SETTINGS_FILE if folder is not None else settings_file()
    return QSettings(str(path), QSettings.Format.IniFormat)


def app_icon() -> QIcon:
    """Halo Weave's icon (the SVG shipped in ``resources/``)."""
    from .desktop_entry import icon_path

    return QIcon(str(icon_path()))


#: The window's size at a first start (later starts restore the last one).
DEFAULT_SIZE = (1180, 780)


class MainWindow(QMainWindow, InputActions):
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
        self.setWindowIcon(app_icon())
        self.resize(*DEFAULT_SIZE)
        self.messages = MessageCenter(self)

        self.heatmap = HeatmapView()
        self.graveyard = GraveyardPanel()
        self.stats_bar = StatsBar()
        self.input = MessageInput()
        self.input.setPlaceholderText(IDLE_PLACEHOLDER)
        self.input.setFixedHeight(84)
        self.send_button = QPushButton("Send")
        self.send_button.setToolTip("Send (Enter)")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop generating (Esc); the partial answer is kept")
        self.stop_button.setEnabled(False)
        self.reason = QLabel("")
        self.reason.setObjectName("inputReason")
        self.reason.setWordWrap(True)
        progress_bar = TaskProgress()
        controller.signals.progress.connect(progress_bar.show_progress)
        # What colours the paragraphs and decides pruning, whole (the stats line has no room).
        self.statusBar().addPermanentWidget(self.stats_bar.scoring_label)
        self.statusBar().addPermanentWidget(progress_bar)

        self.answer_bar = AnswerBar()
        from .pending_turn import PendingTurn

        self.pending_turn = PendingTurn()
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
        from .find_bar import FindBar

        #: Find in the chat (Ctrl+F), over the heatmap; hidden until asked for.
        self.find_bar = FindBar(self.heatmap)
        column.addWidget(self.find_bar)
        column.addWidget(self.heatmap, 1)
        column.addWidget(self.pending_turn)
        column.addWidget(self.answer_bar)
        column.addWidget(self.reason)
        column.addLayout(row)
        self.library = Library(controller.data_dir)
        self.conversation_list = ConversationList(self.library)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.conversation_list)
        splitter.addWidget(left)
        splitter.addWidget(self.graveyard)
        splitter.setStretchFactor(0, 1)
        splitter.setStretchFactor(1, 3)
        splitter.setStretchFactor(2, 1)
        splitter.setSizes([230, 800, 300])
        # The stats bar spans the window, over the list and the graveyard too: at the
        # default size its figures and the model's name fit on one line.
        central = QWidget()
        page = QVBoxLayout(central)
        page.setContentsMargins(4, 4, 4, 0)
        page.setSpacing(0)
        page.addWidget(self.stats_bar)
        page.addWidget(splitter, 1)
        self.setCentralWidget(central)
        self.setAcceptDrops(True)  # a file dropped on the window is attached as a document
        self.notes_panel = NotesPanel(self)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.notes_panel)
        self.notes_panel.hide()

        self._start_input_actions()
        #: The first-start hint over the heatmap and the legend (:mod:`.window_guide`).
        self.guide = WindowGuide(self, self.heatmap, lambda: self.stats_bar.scoring)
        self.heatmap.viewport().installEventFilter(self)
        self._painted = False  # the conversation has been painted once
        self.menus = WindowMenus(self)
        self._closed = False
        self._shown = None  # the conversation the heatmap shows
        self._wire()
        self._restore_geometry()
        self._sync_input()

    def _wire(self) -> None:
        c = self.controller
        c.signals.conversation_changed.connect(self._on_conversation_changed)
        c.signals.tokens_streamed.connect(self._on_tokens_streamed)
        self.heatmap.streamed_frame.connect(self.refresh_stats)
        c.signals.graveyard_changed.connect(lambda: c.conv is not None and self.graveyard.show_graveyard_of(c.conv))
        c.signals.stats_changed.connect(self.refresh_stats)
        c.signals.busy_changed.connect(self._on_busy)
        c.signals.connection_changed.connect(self._on_connection)
        c.signals.models_changed.connect(self.stats_bar.set_models)
        c.signals.template_changed.connect(self.stats_bar.set_template_words)
        self.stats_bar.model_picked.connect(self.pick_model)
        c.signals.attention_changed.connect(
            lambda _available: self.stats_bar.set_brightness_source(*c.proxy.reader_status()))
        c.signals.error.connect(lambda exc, context: self.messages.error(exc, context))
        c.signals.info.connect(self.messages.info)
        c.signals.turn_finished.connect(self._on_turn_finished)
        c.signals.message_returned.connect(self._on_message_returned)
        c.signals.turn_phase.connect(self.pending_turn.show_phase)
        c.signals.conversation_opened.connect(self._on_opened)
        c.signals.notes_changed.connect(self.refresh_notes)
        self.notes_panel.visibilityChanged.connect(lambda visible: visible and self.refresh_notes())
        self.input.submitted.connect(self.send)
        self.input.stop_requested.connect(self._on_escape)
        # What is typed is read ahead to the server (not while editing the last message:
        # its resend replaces the exchange, another prompt).
        self.input.textChanged.connect(
            lambda: c.ahead.draft_changed("" if self._editing_turn is not None else self.input.toPlainText()))
        self.answer_bar.version_requested.connect(c.actions.show_answer_version)
        self.answer_bar.continue_requested.connect(self.continue_answer)
        self.answer_bar.regenerate_requested.connect(self.regenerate)
        self.answer_bar.edit_requested.connect(self.edit_last_message)
        self.send_button.clicked.connect(self.send)
        self.stop_button.clicked.connect(c.turn.stop)
        self.heatmap.pin_requested.connect(c.levers.pin)
        self.heatmap.merge_requested.connect(c.levers.merge_with_next)
        self.heatmap.prune_requested.connect(c.levers.prune_chunk)
        self.heatmap.graveyard_requested.connect(self.show_in_graveyard)
        self.heatmap.edit_requested.connect(self.edit_message)
        self.heatmap.regenerate_requested.connect(self.regenerate_answer)
        self.heatmap.branch_requested.connect(self.switch_branch)
        self.graveyard.resurrect_requested.connect(c.levers.resurrect_chunk)
        self.find_bar.resurrect_requested.connect(c.levers.resurrect_chunk)
        self.find_bar.graveyard_requested.connect(self.show_graveyard_filtered)
        self.stats_bar.graveyard_toggled.connect(self.set_graveyard_visible)
        self.stats_bar.scoring_changed.connect(self._on_scoring_changed)
        self._on_scoring_changed()
        self.graveyard.close_requested.connect(lambda: self.set_graveyard_visible(False))
        self.stats_bar.set_graveyard_open(True)
        self.conversation_list.open_requested.connect(c.files.open_conversation)
        self.conversation_list.new_requested.connect(self.new_conversation)
        self.conversation_list.delete_requested.connect(self.delete_conversation)
        c.signals.turn_finished.connect(lambda _: self.conversation_list.refresh())

    # ------------------------------------------------------------------ conversation view
    def _on_opened(self, path: str) -> None:
        self.setWindowTitle(f"Halo Weave — {Path(path).stem}")
        self.library.mark_opened(Path(path))
        self.conversation_list.set_current(Path(path))

    # ------------------------------------------------------------------ conversation list
    def toggle_list(self) -> None:
        self.conversation_list.setVisible(not self.conversation_list.isVisible())
        self.menus.list_action.setChecked(self.conversation_list.isVisible())

    def delete_conversation(self, path: Path, title: str = "") -> bool:
        """Move a conversation to the trash (Undo in the list); the open one is closed first."""
        path = Path(path)
        c = self.controller
        if c.files.path is not None and path == Path(c.files.path):
            if c.gate.busy:
                self.messages.info("Wait for the answer to finish (or press Esc) before deleting this conversation.")
                return False
            others = [e.path for e in self.library.entries() if e.path != path and e.error is None]
            if not (c.files.open_conversation(others[0]) if others else c.files.new_conversation()):
                return False
            if not path.exists():  # it was empty and never used: switching away dropped it
                self.conversation_list.refresh()
                return True
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
        self._sync_turn_actions()
        self.heatmap.branches.set_marks(self.controller.actions.branch_marks())
        if self._shown is not conv:
            self._shown = conv
            self.heatmap.set_conversation(conv)
        else:
            self.heatmap.rebuild()
        self.guide.sync_hint(conv)  # after the rebuild: it sits below the text shown
        self.find_bar.refresh()
        self.refresh_stats()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt API
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            # The theme changed (View → Theme, or the desktop's): restyle once Qt has
            # finished handing the new palette down (a palette set during that is lost).
            QTimer.singleShot(0, self, self._follow_theme)  # dropped with the window

    def _follow_theme(self) -> None:
        if self._closed:  # a closed window waits to be deleted: nothing to restyle
            return
        self.heatmap.follow_theme()
        self.stats_bar.restyle()

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 - Qt API
        if watched is self.heatmap.viewport() and event.type() == QEvent.Type.Paint and not self._painted:
            self._painted = True
            # After this paint has reached the screen: the memory loads on its thread then.
            QTimer.singleShot(0, self.controller.memory.window_painted)
        return False

    def _on_tokens_streamed(self) -> None:
        if self.guide.hint.isVisible():
            self.guide.sync_hint(self.controller.conv)
        # The heatmap's one frame timer batches appends, colours and (streamed_frame) the stats.
        self.heatmap.append_streamed()

    def refresh_notes(self) -> None:
        """Show the open conversation's notes in the Notes panel."""
        self.notes_panel.set_notes(self.controller.files.notes())

    def refresh_stats(self) -> None:
        self.stats_bar.set_settings(self.controller.settings)
        stats = self.controller.stats()
        if stats:
            self.stats_bar.update_stats(**stats)

    def _on_scoring_changed(self) -> None:
        """The rule in use changed: the heatmap's tooltips and the legend say the new one."""
        self.heatmap.tips.set_note(self.stats_bar.scoring.short)
        self.guide.scoring_changed()

    def _on_turn_finished(self, reason: str) -> None:
        self.heatmap.flush()
        self.refresh_stats()
        if reason == "aborted":
            self.messages.info("Stopped — the partial answer was kept.")
        elif reason == "length":
            self.messages.info("The answer reached the maximum new tokens (Settings) — "
                               "→ Continue (Ctrl+Shift+Enter) lets it go on.")
        self._sync_turn_actions()

    def _on_connection(self, state: str, detail: str) -> None:
        self.stats_bar.show_connection(state, detail)
        if state == "loading":
            self.statusBar().showMessage(self.stats_bar.connection_detail)
        elif state == "connected":
            self.statusBar().showMessage(f"Connected: {self.stats_bar.connection_detail}", 5000)

    def pick_model(self, name: str) -> None:
        """Use the server's model ``name`` in this conversation (and for new ones)."""
        if self.controller.gate.busy:
            self.messages.info("Wait for the answer to finish (or press Esc) before switching models.")
            client = self.controller.session.backend
            if client is not None:
                self.stats_bar.set_models(list(client.models), str(client.model_id or ""))
            return
        if name != self.controller.settings.server.served_model:  # the default for new conversations
            self.apply_settings(self.controller.settings.replace(served_model=name))
        self.controller.link.choose_model(name)

    # ------------------------------------------------------------------ graveyard
    def show_in_graveyard(self, chunk_id: int) -> None:
        """A recalled chunk pruned since: open the graveyard at its row."""
        self.set_graveyard_visible(True)
        if not self.graveyard.show_chunk(chunk_id):
            self.messages.info("That chunk is no longer in the graveyard.")

    def show_graveyard_filtered(self, words: str) -> None:
        """Open the graveyard listing the pruned chunks that hold ``words`` (find in the chat)."""
        self.set_graveyard_visible(True)
        self.graveyard.set_filter(words)

    def set_graveyard_visible(self, visible: bool) -> None:
        self.graveyard.setVisible(visible)
        self.menus.graveyard_action.setChecked(visible)
        self.stats_bar.set_graveyard_open(visible)

    # ------------------------------------------------------------------ file menu
    def new_conversation(self) -> None:
        self.controller.files.new_conversation()

    def apply_settings(self, new) -> None:
        """Adopt settings from the dialog: persist them, then let the controller react."""
        from .settings_io import save_settings

        save_settings(new, self.qsettings)
        self.controller.apply_settings(new)
        record = self.menus.record_action
        record.blockSignals(True)
        record.setChecked(new.server.record_attention)
        record.blockSignals(False)
        markdown = self.menus.markdown_action
        markdown.blockSignals(True)
        markdown.setChecked(new.chat.render_markdown)
        markdown.blockSignals(False)
        self.heatmap.set_markdown(new.chat.render_markdown)
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

    def dragEnterEvent(self, event) -> None:  # noqa: N802 - Qt API
        if any(url.isLocalFile() for url in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:  # noqa: N802 - Qt API
        """A dropped file is attached to the memory (the first, when several are dropped)."""
        files = [Path(url.toLocalFile()) for url in event.mimeData().urls() if url.isLocalFile()]
        if files:
            event.acceptProposedAction()
            self.controller.documents.attach(files[0])
            if len(files) > 1:
                self.messages.info(f"Attaching {files[0].name}; drop the other files one at a time.")

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt API
        if self.qsettings is not None:
            self.qsettings.setValue("window/geometry", self.saveGeometry())
            self.qsettings.setValue("window/state", self.saveState())
            self.qsettings.sync()
        self._closed = True
        self.hide()  # shutting down may wait for a running embedding job
        self.controller.shutdown()
        super().closeEvent(event)
