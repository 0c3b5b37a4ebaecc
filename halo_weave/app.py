"""Composition root (``halo-weave``) and the turn controller.

:class:`TurnController` moves slow work onto threads and announces changes with signals;
every rule of a turn (what to save when, score, prune, index, resurrect) is a method of
the Qt-free :class:`~halo_weave.session.ChatSession` it holds as :attr:`session`.  It
uses QtCore only, so tests drive it without widgets.  :func:`main` hands it to
:func:`halo_weave.ui.cli.run`, which parses the command line, builds the window and
starts it.

A turn, as the controller runs it (:mod:`halo_weave.ui.turn_flow`; the thread of each
step on the right)::

    send(text)
      ├─ tokenize once ................................ CallWorker
      ├─ wait ≤ embed_wait_seconds for pending indexing, then
      │  search ....................................... EmbedderWorker (urgent job)
      │  session.recall.resurrect_for: within the budget
      ├─ session.add_user_message: saved, queued for indexing, then shown
      ├─ session.begin_answer, stream ................ GenerationWorker
      │    per event: session.receive (attention, record, append, save every 16)
      ├─ a round ending on </tool>: run the call, session.rounds.apply_tool_step, next round
      └─ session.finish_turn: save, queue indexing, prune, save; then announce

Here: the system prompt (each conversation's own, the settings' for new ones), settings,
indexing, shutdown.  Conversation files are
:mod:`halo_weave.ui.conversation_files`, the model server connection
:mod:`halo_weave.ui.server_link`, the chunk levers :mod:`halo_weave.ui.levers`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QObject, QTimer, Signal

from . import settings as settings_mod
from .conversation import Chunk, Conversation
from .session import ChatSession
from .settings import PRUNING_FIELDS, Settings, choice_words
from .ui.cli import build_parser, run  # noqa: F401 - build_parser: the options, for tests
from .ui.connection import ServerConnection
from .ui.conversation_files import ConversationFiles
from .ui.indexing import IndexQueue
from .ui.levers import Levers
from .ui.proxy_reading import ProxyReading
from .ui.read_ahead import ReadAhead
from .ui.server_link import ServerLink
from .ui.turn_actions import TurnActions
from .ui.turn_flow import TurnFlow
from .ui.workers import CallWorker, GenerationWorker

log = logging.getLogger("halo_weave.app")


class TurnController(QObject, ConversationFiles, ServerLink, TurnFlow, ReadAhead, Levers, TurnActions, ProxyReading):
    """Runs the conversation: connection, turns, the user's levers, files.

    The UI reads :attr:`conv` and the signals below and sends intents back through the
    public methods.  Between turns the UI equals the database.
    """

    conversation_changed = Signal()  # structure changed: rebuild the view
    tokens_streamed = Signal()  # tokens appended to the open answer
    graveyard_changed = Signal()
    stats_changed = Signal()
    busy_changed = Signal(bool, str)  # busy, the reason shown next to the input
    connection_changed = Signal(str, str)  # state, detail (model name, what is happening)
    models_changed = Signal(list, str)  # the server's models (where it lists them), the one in use
    template_changed = Signal(str)  # which chat template frames the turns, and where it came from
    attention_changed = Signal(bool)
    progress = Signal(str, int, int)  # what, done, total (total 0 = indeterminate; done>=total = finished)
    error = Signal(object, str)  # exception, what we were doing
    info = Signal(str)
    turn_finished = Signal(str)  # finish reason ("stop", "length", "aborted", "error")
    conversation_opened = Signal(str)  # path of the conversation file
    notes_changed = Signal()  # the model's notes were saved (or another conversation opened)
    capture_saved = Signal(str)  # folder of a finished attention recording
    message_returned = Signal(str)  # a message that could not be sent, back to the input box
    warm_up_changed = Signal(int)  # tokens of the context the server is reading (0: done)
    turn_phase = Signal(str, str)  # the message not shown yet ("" once it is), what the turn waits for

    def __init__(
        self,
        settings: Settings | None = None,
        data_dir: Path | None = None,
        *,
        autostart: bool | None = None,
        embedder_factory: Callable[[], Any] | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.settings = settings or Settings()
        self.data_dir = Path(data_dir) if data_dir else settings_mod.data_dir()
        self.autostart = self.settings.autostart_server if autostart is None else autostart
        #: The turn's rules and state (conversation, file, server); Qt-free.
        self.session = ChatSession(self.settings, report=lambda exc, context: self.error.emit(exc, context))
        self.session.indexer = _IndexFeed(self)
        self._index_tried = False
        self._memory_loading = False  # the embedder and index load on the embedder thread
        self._reindex_when_loaded = False  # an import asked to re-index while they loaded
        self._painted = False  # the window has painted once (see window_painted)
        self.path: Path | None = None
        self.connection_state = "connecting"  # start() connects; "offline" only once that fails
        self.busy = False
        self.busy_reason = ""
        self._embedder_factory = embedder_factory
        self._embedder = None
        self._indexer = IndexQueue(self)
        self._indexer.failed.connect(self.error)
        self._indexer.progress.connect(self.progress)
        self._indexer.idle.connect(self._on_embed_idle)
        self._calls: set[CallWorker] = set()
        self._gen: GenerationWorker | None = None
        self.connection = ServerConnection(self.autostart, self)
        self.connection.state_changed.connect(self._set_connection)
        self.connection.connected.connect(self._on_connected)
        self.connection.failed.connect(self.error)
        self.connection.progress.connect(self.progress)
        self.connection.options = self._connection_options
        self.connection.server_args = lambda: self.settings.server_args()
        self._pending_send: Callable[[], None] | None = None
        self._wait_timer = QTimer(self)
        self._wait_timer.setSingleShot(True)
        self._wait_timer.timeout.connect(self._run_pending_send)
        self._shutting_down = False
        self._tool_runner = None
        self._system_syncing = 0  # system prompt tokenizations in flight
        self._system_dirty = False  # settings changed it during a turn
        self._stop_pending = False  # Esc before the answer started
        self._unsent = ""  # the message being sent, until it is saved
        self._turn_seq = 0  # numbers each message sent: a step of one Stop gave back is dropped
        self._saving_turn = False  # a long message is being saved on a thread
        self._prompt_edited = False  # the system prompt changed while this conversation was open
        self._answer_prefix = ()  # tokens the next answer starts with (see send())
        self._template_problems: set[str] = set()  # template fallbacks already explained
        self._init_proxy()
        self._init_read_ahead()
        self.turn_finished.connect(lambda _reason: self.turn_phase.emit("", ""))

    # ------------------------------------------------------------------ the session's state
    # Read-only views for the window and tests; the session owns the state.
    conv = property(lambda self: self.session.conv)
    store = property(lambda self: self.session.store)
    model_info = property(lambda self: self.session.model_info)
    framing = property(lambda self: self.session.framing)
    attention_available = property(lambda self: self.session.attention_available)
    last_resurrected = property(lambda self: self.session.recall.resurrected)
    tokens_per_s = property(lambda self: self.session.answer.tokens_per_s)
    clock = property(lambda self: self.session.answer.clock)  # the answer's live speed
    last_finish_reason = property(lambda self: self.session.answer.finish_reason)

    @property
    def client(self):
        """The connected model server (None while offline)."""
        return self.session.backend

    @client.setter
    def client(self, backend) -> None:
        self.session.backend = backend

    # ------------------------------------------------------------------ start-up
    def start(self, conversation: Path | None = None) -> None:
        """Open a conversation (the given one, the last one, or a new one), then connect."""
        self.open_conversation(conversation or self._last_conversation())
        self.connect_server()

    # ------------------------------------------------------------------ system prompt
    def _sync_system_prompt(self) -> None:
        """Make the conversation's system prefix match the settings (tokenized on a thread).

        Input waits while this runs, and it never runs during a turn (the prefix is part
        of the context the streamed attention covers).
        """
        conv, client, session = self.conv, self.client, self.session
        if conv is None or client is None:
            return
        if self.busy:
            self._system_dirty = True
            return
        prompt = session.prompt.effective()
        if session.prompt.framed_text() is None:
            return

        def tokenize():
            return session.prompt.pieces(prompt)

        def ok(pieces) -> None:
            self._system_syncing -= 1
            if self.conv is conv:
                self.session.prompt.apply(prompt, pieces)
                self.conversation_changed.emit()
                self.stats_changed.emit()
            self._set_busy(self.busy, self.busy_reason)
            self._try_warm_up()  # the context starts with the prompt: warmed once it is set

        def fail(exc) -> None:
            self._system_syncing -= 1
            self.error.emit(exc, "System prompt")
            self._set_busy(self.busy, self.busy_reason)
            self._try_warm_up()

        self._system_syncing += 1
        self._set_busy(self.busy, self.busy_reason)
        self._call(tokenize, on_ok=ok, on_fail=fail)

    def set_conversation_prompt(self, prompt: str) -> bool:
        """Give the open conversation a system prompt of its own (kept in its file; the
        model reads it from the next message on).  False when it cannot change now."""
        if self.conv is None or self.store is None:
            return False
        if self.busy:
            self.info.emit("Wait for the answer to finish (or press Esc) before changing the system prompt.")
            return False
        if getattr(self.store, "read_only", False):
            self.info.emit("This conversation is read-only: its system prompt cannot change.")
            return False
        if prompt == self.session.prompt.own():
            return True
        self.session.prompt.set_own(prompt)
        self._prompt_edited = True
        self._sync_system_prompt()
        return True

    # ------------------------------------------------------------------ the turn
    def input_block_reason(self) -> str:
        """Why the user cannot send now ('' when they can)."""
        if self.busy:
            return self.busy_reason
        if getattr(self.store, "read_only", False):
            return "This conversation is read-only (see the message) — open another or start a new one"
        if self.connection_state == "loading":
            return "The model is loading…"
        if self.connection_state == "connecting":
            return "Connecting to the model server…"
        if self.connection_state == "stopped":
            return "The built-in model server stopped — Help → Restart the built-in model server"
        if self.client is None or self.connection_state != "connected":
            return "No model server — see File → Settings"
        if self.conv is None:
            return "No conversation open"
        if self._system_syncing:
            return "Preparing the system prompt…"
        return ""

    def _prune(self, limit: int | None = None) -> list[Chunk]:
        """Prune to ``limit`` (default: the max-context setting); persist; update the graveyard."""
        pruned = self.session.prune(limit)
        if pruned:
            self.graveyard_changed.emit()
        return pruned

    def _set_busy(self, busy: bool, reason: str = "") -> None:
        self.busy = busy
        self.busy_reason = reason if busy else ""
        self.busy_changed.emit(busy, self.busy_reason if busy else self.input_block_reason())
        if not busy:
            self._try_warm_up()  # one asked for while busy (an import, a turn)

    # ------------------------------------------------------------------ settings
    def apply_settings(self, new: Settings) -> None:
        """Adopt changed settings: reconnect on a new URL, re-frame a new system prompt."""
        old = self.settings
        self.settings = new
        self.session.settings = new
        for holder in (self.conv, self.index):
            if holder is not None and hasattr(holder, "settings"):
                holder.settings = new
        if new.chat_template != old.chat_template and self.store is not None:
            # A template chosen here belongs to this conversation (and is the default for new ones).
            self.session.save(lambda: self.store.set_meta("chat_template", new.chat_template), "Saving the chat template")
        if (new.system_prompt != old.system_prompt and self.conv is not None and self.store is not None
                and not self.conv.turns and not getattr(self.store, "read_only", False)
                and self.session.prompt.own() == old.system_prompt):
            # The default is for new conversations: an empty one still on it takes the new one.
            self.session.prompt.set_own(new.system_prompt)
        if new.server_url != old.server_url or new.chat_template != old.chat_template or (
                new.server_context_tokens != old.server_context_tokens):
            self.connect_server(new.server_url)
        elif new.effective_system_prompt != old.effective_system_prompt:
            self._sync_system_prompt()  # the notebook's instructions, or the default just taken
        self._prompt_edited |= new.effective_system_prompt != old.effective_system_prompt  # the open one is kept
        if (new.proxy_attention, new.proxy_pruning) != (old.proxy_attention, old.proxy_pruning):
            self._sync_proxy_ranks()
            self.attention_changed.emit(self.session.attention_available)
        rescored = any(getattr(new, f) != getattr(old, f) for f, _, _ in PRUNING_FIELDS)
        words = choice_words(new, "brightness_rule")
        if words != choice_words(old, "brightness_rule") and self.session.attention_available:
            self.info.emit(f"Brightness: {words}, from the next generated token on "
                           "(the brightness earned so far carries over; past attention is not stored).")
        if (rescored or new.max_context_tokens != old.max_context_tokens) and self.conv is not None and not self.busy:
            self._prune()  # a smaller budget takes effect now, not after the next answer
            self.conversation_changed.emit()  # and the colours follow the score in use
        elif new.highlight_fraction != old.highlight_fraction and self.conv is not None:
            self.conversation_changed.emit()  # the highlight follows at once
        self.stats_changed.emit()

    # ------------------------------------------------------------------ indexing
    def _index_pending(self) -> None:
        """Queue every chunk whose index entry is missing or out of date."""
        if self._shutting_down:
            return
        self._indexer.index = self.index
        self._indexer.queue_pending(self.conv)

    def _queue_indexing(self, chunk_ids: list[int], label: str = "") -> None:
        if self._shutting_down:
            return
        self._indexer.index = self.index
        self._indexer.queue(self.conv, chunk_ids, label)

    def wait_for_indexing(self, timeout: float = 60.0) -> bool:
        """Block until queued embedding jobs finish (scripts and tests)."""
        return self._indexer.wait_idle(timeout)

    # ------------------------------------------------------------------ plumbing
    def _call(self, fn, *args, on_ok=None, on_fail=None) -> CallWorker:
        worker = CallWorker(fn, *args, parent=self)
        self._calls.add(worker)

        def finished() -> None:
            self._calls.discard(worker)
            worker.deleteLater()

        if on_ok is not None:
            worker.succeeded.connect(on_ok)
        if on_fail is not None:
            worker.failed.connect(on_fail)
        worker.finished.connect(finished)
        worker.start()
        return worker

    def stats(self) -> dict:
        """Figures for the stats bar: the limit is the one pruning keeps to (the model's
        window when pruning only for room), what recalls brought back is counted apart."""
        conv, session = self.conv, self.session
        if conv is None:
            return {}
        limit = session.window_limit() if session.prunes_for_room else self.settings.max_context_tokens
        return dict(
            live_tokens=conv.live_token_count(),
            max_tokens=limit or int(getattr(self.model_info, "max_context", 0) or 0),
            total_tokens=conv.total_token_count(),
            pruned_chunks=len(conv.graveyard()),
            mean_brightness=conv.mean_brightness(),
            brightness_source=self.brightness_source(),
            tokens_per_s=session.answer.clock.tokens_per_s if session.answer.clock.running else self.tokens_per_s,
            first_token_s=session.answer.clock.first_token_s,
            recalled_tokens=conv.recalled_tokens(),
            kept_tokens=conv.kept_tokens(),
            # Ranked by the reader, the prune waits for its read of the exchange.
            exchange_open=self.busy or (session.proxy_ranks and self._reading is not None),
        )

    def shutdown(self) -> None:
        """Stop generation, finish indexing briefly, close the file, stop our server."""
        if self._shutting_down:
            return
        self._shutting_down = True
        if self._gen is not None:
            self._gen.stop()
            self._gen.wait(5000)
        self._finish_capture("closed")
        # Nothing reaches the (closing) window from here on; late thread results are dropped.
        self.blockSignals(True)
        self._wait_timer.stop()
        self.session.close_open_turn()  # quitting mid-answer keeps the partial answer
        self._indexer.wait_idle(5.0)
        # A job in flight (the embedder loading torch) cannot be interrupted; wait for it.
        self._indexer.shutdown(timeout_ms=60_000)
        for worker in list(self._calls):
            worker.wait(3000)
        self._close_reader()
        if self.store is not None:
            try:
                if self.conv is not None and self.conv.open_turn is None and not self.store.read_only:
                    self.store.save_brightness(self.conv)
                self.store.close()
            except Exception as exc:  # noqa: BLE001
                log.warning("closing the conversation file failed: %s", exc)
            self.session.store = None
        self.session.index, self._index_tried = None, True
        if self._tool_runner is not None:
            self._tool_runner.close()
        try:
            self.connection.shutdown()
        except Exception as exc:  # noqa: BLE001
            log.warning("stopping the built-in server failed: %s", exc)


class _IndexFeed:
    """The session's indexer: the controller's queue, aimed at the index open now."""

    def __init__(self, controller: TurnController) -> None:
        self._controller = controller

    def queue_pending(self, conv: Conversation) -> None:
        self._controller._index_pending()

    def queue(self, conv: Conversation, chunk_ids: list[int], label: str = "") -> None:
        self._controller._queue_indexing(chunk_ids, label)


def main(argv: list[str] | None = None) -> int:
    """The ``halo-weave`` console script."""
    return run(argv, TurnController)
