"""Composition root (``halo-weave``) and the turn controller.

:class:`TurnController` sequences DESIGN.md's turn lifecycle and moves slow work onto
threads; every decision (what to score, prune, embed, resurrect) stays in the core
modules.  It uses QtCore only, so tests drive it without widgets.  :func:`main` parses
the command line, builds the window and starts the controller.

A turn, as the controller runs it::

    send(text)
      ├─ tokenize once ................................ CallWorker
      ├─ wait ≤ embed_wait_seconds for pending indexing, then
      │  search + resurrect within the budget ......... EmbedderWorker (urgent job)
      ├─ add the user turn, persist, queue indexing, show
      ├─ open the assistant turn, stream ............. GenerationWorker
      │    per token: apply attention (context as it was), append, persist every 16
      └─ end: close turn, persist brightness, queue indexing, prune, persist, graveyard
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QObject, QTimer, Signal

from . import settings as settings_mod
from .brightness import AttentionError
from .chat_template import detect_template, system_text
from .conversation import Chunk, Conversation, ConversationError, Framing
from . import tools
from .fallback import prune_oldest_first
from .settings import MAX_BRIGHTNESS, Settings
from .ui.indexing import IndexQueue
from .ui.connection import DEFAULT_SERVER_URL, ServerConnection
from .ui.workers import CallWorker, GenerationWorker

log = logging.getLogger("halo_weave.app")

#: Where an answer ends (ChatML); the tool tag is added per request.
STOP_SEQUENCES = ("<|im_end|>", "<|im_start|>")

#: Streamed tokens written to the database per batch (no per-token commit).
STREAM_SAVE_EVERY = 16

#: Milliseconds after opening a conversation before catch-up indexing starts.
INDEX_CATCH_UP_DELAY_MS = 1500

#: File in the data dir naming the conversation to reopen at start-up.
LAST_CONVERSATION_FILE = "last_conversation"


class TurnController(QObject):
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
    attention_changed = Signal(bool)
    progress = Signal(str, int, int)  # what, done, total (total 0 = indeterminate; done>=total = finished)
    error = Signal(object, str)  # exception, what we were doing
    info = Signal(str)
    turn_finished = Signal(str)  # finish reason ("stop", "length", "aborted", "error")
    conversation_opened = Signal(str)  # path of the conversation file

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
        self.conv: Conversation | None = None
        self.store = None
        self._index = None
        self._index_tried = False
        self.path: Path | None = None
        self.client = None
        self.model_info = None
        self.framing: Framing | None = None
        self.connection_state = "offline"
        self.attention_available = True
        self.busy = False
        self.busy_reason = ""
        self.tokens_per_s = 0.0
        self.last_resurrected = 0
        self.last_finish_reason = ""
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
        self._pending_send: Callable[[], None] | None = None
        self._wait_timer = QTimer(self)
        self._wait_timer.setSingleShot(True)
        self._wait_timer.timeout.connect(self._run_pending_send)
        self._stream_count = 0
        self._stream_started = 0.0
        self._attention_seen = False
        self._attention_errors = 0
        self._stop_ids: set[int] = set()
        self._shutting_down = False
        self._tool_runner = None
        self._system_syncing = 0  # system prompt tokenizations in flight
        self._system_dirty = False  # settings changed it during a turn
        self._stop_pending = False  # Esc before the answer started

    # ------------------------------------------------------------------ start-up
    def start(self, conversation: Path | None = None) -> None:
        """Open a conversation (the given one, the last one, or a new one), then connect."""
        self.open_conversation(conversation or self._last_conversation())
        self.connect_server()

    def _last_conversation(self) -> Path | None:
        marker = self.data_dir / LAST_CONVERSATION_FILE
        try:
            path = Path(marker.read_text(encoding="utf-8").strip())
        except OSError:
            return None
        return path if path.is_file() else None

    def _remember(self, path: Path) -> None:
        try:
            (self.data_dir / LAST_CONVERSATION_FILE).write_text(str(path), encoding="utf-8")
        except OSError as exc:
            log.warning("cannot remember the last conversation: %s", exc)

    # ------------------------------------------------------------------ conversations
    def open_conversation(self, path: Path | None = None) -> bool:
        """Open ``path`` (a new conversation when None); False when it was refused."""
        from .store import ConversationStore, new_conversation_path

        if self.busy:
            self.info.emit("Wait for the answer to finish (or press Esc) before switching.")
            return False
        target = Path(path) if path else new_conversation_path(self.data_dir)
        try:
            store = ConversationStore.open(target)
            conv = store.load(self.settings, self.framing or Framing.none())
        except Exception as exc:  # noqa: BLE001
            self.error.emit(exc, f"Opening {target.name}")
            if self.conv is None and path is not None:
                return self.open_conversation(None)
            return False
        self._close_store()
        self.store, self.conv, self.path = store, conv, target
        if self.framing is not None:
            conv.framing = self.framing
        self._index, self._index_tried = None, False  # opened on first use, after the first paint
        self._remember(target)
        self.last_resurrected = 0
        self.conversation_opened.emit(str(target))
        self.conversation_changed.emit()
        self.graveyard_changed.emit()
        self.stats_changed.emit()
        if self.model_info is not None:
            self._sync_system_prompt()
        # Catch-up indexing waits until the window has painted the conversation.
        QTimer.singleShot(INDEX_CATCH_UP_DELAY_MS, lambda: self._index_pending() if self.conv is conv else None)
        return True

    def new_conversation(self) -> bool:
        return self.open_conversation(None)

    def _close_store(self) -> None:
        if self.store is not None:
            # Jobs still queued for it check `index is self.index` and drop their result.
            try:
                self.store.close()
            except Exception as exc:  # noqa: BLE001
                log.warning("closing the conversation file failed: %s", exc)
        self.store = self._index = self._indexer.index = None
        self._index_tried = False

    @property
    def index(self):
        """The open conversation's semantic index (loaded on first use; None if unusable)."""
        if self._index is None and not self._index_tried and self.store is not None:
            self._index_tried = True
            self._index = self._make_index(self.store)
        return self._index

    def _make_index(self, store):
        try:
            from .semantic_index import SemanticIndex

            index = SemanticIndex(store.conn, self.settings, self._get_embedder())
            index.load()
            return index
        except Exception as exc:  # noqa: BLE001
            self.error.emit(exc, "Loading the semantic index")
            return None

    def _get_embedder(self):
        if self._embedder is None:
            if self._embedder_factory is not None:
                self._embedder = self._embedder_factory()
            else:
                from .embedder import Embedder

                self._embedder = Embedder()
        return self._embedder

    def export_json(self, path: Path) -> bool:
        """Write the open conversation to a JSON file."""
        from . import transfer

        if self.store is None:
            return False
        try:
            transfer.export_conversation(self.store, Path(path))
        except Exception as exc:  # noqa: BLE001
            self.error.emit(exc, "Export")
            return False
        self.info.emit(f"Exported to {path}")
        return True

    def import_json(self, path: Path) -> None:
        """Import a JSON export as a new conversation (on a thread), open it, re-index."""
        from . import transfer

        if self.busy:
            self.info.emit("Wait for the answer to finish before importing.")
            return
        self._set_busy(True, "Importing…")
        self.progress.emit("Importing conversation", 0, 0)

        def done(new_path) -> None:
            self.progress.emit("Importing conversation", 1, 1)
            self._set_busy(False)
            if self.open_conversation(Path(new_path)):
                self.reindex_all()

        def failed(exc) -> None:
            self.progress.emit("Importing conversation", 1, 1)
            self._set_busy(False)
            self.error.emit(exc, f"Importing {Path(path).name}")

        self._call(transfer.import_conversation, Path(path), self.data_dir, on_ok=done, on_fail=failed)

    def reindex_all(self) -> None:
        """Embed every chunk without a current entry (after an import), with progress."""
        index, conv = self.index, self.conv
        if index is None or conv is None or not index.available:
            return
        self._indexer.index = index
        try:
            index.remove(index.orphans(conv))
            pending = index.pending(conv)
        except Exception as exc:  # noqa: BLE001
            self.error.emit(exc, "Re-indexing")
            return
        self._queue_indexing(pending, label="Re-indexing")

    # ------------------------------------------------------------------ connection
    @property
    def server(self):
        """The bundled server process this app started, if any."""
        return self.connection.server

    def connect_server(self, url: str | None = None) -> None:
        """Connect to ``url`` (the settings' server by default), on a thread."""
        self.connection.connect_to(url or self.settings.server_url)

    def _on_connected(self, client, info, framing: Framing) -> None:
        self.client, self.model_info, self.framing = client, info, framing
        self._stop_ids = {ids[0] for ids, _ in [framing.suffix.get("assistant", ([], []))] if ids}
        if self.conv is not None:
            self.conv.framing = framing
        if getattr(info, "supports_attention", False):
            # A server that does not declare it (the original fork) is judged by its events.
            self._set_attention(True)
        name = str(getattr(info, "name", "model")).rsplit("/", 1)[-1]
        self.connection_state = "connected"
        self._sync_system_prompt()  # before input opens: the prefix is part of every turn
        self._set_connection("connected", f"{name} · {getattr(info, 'max_context', '?')} ctx")
        self.stats_changed.emit()

    def _set_connection(self, state: str, detail: str) -> None:
        self.connection_state = state
        if state != "connected":
            self.client = None if state == "offline" else self.client
        self.connection_changed.emit(state, detail)
        if not self.busy:
            self.busy_changed.emit(False, self.input_block_reason())

    def _set_attention(self, available: bool) -> None:
        if available != self.attention_available:
            self.attention_available = available
            if not available:
                self.info.emit(
                    "This server sends no attention: chatting works, but brightness cannot "
                    "be measured, so the oldest chunks are pruned first."
                )
        self.attention_changed.emit(available)

    def _sync_system_prompt(self) -> None:
        """Make the conversation's system prefix match the settings (tokenized on a thread).

        Input waits while this runs, and it never runs during a turn (the prefix is part
        of the context the streamed attention covers).
        """
        conv, client = self.conv, self.client
        if conv is None or client is None:
            return
        if self.busy:
            self._system_dirty = True
            return
        prompt = self.settings.system_prompt
        if conv.system_prompt == prompt and (len(conv.system_ids) > 0 or not prompt.strip()):
            return
        text = system_text(prompt, detect_template(getattr(self.model_info, "chat_template", None)))

        def tokenize():
            return client.tokenize(text, add_special_tokens=False) if text else []

        def ok(pieces) -> None:
            self._system_syncing -= 1
            if self.conv is conv:
                conv.set_system_prompt(prompt, [i for i, _ in pieces], [t for _, t in pieces])
                self._guard(lambda: self.store.save_system_prompt(conv), "Saving the system prompt")
                self.conversation_changed.emit()
                self.stats_changed.emit()
            self._set_busy(self.busy, self.busy_reason)

        def fail(exc) -> None:
            self._system_syncing -= 1
            self.error.emit(exc, "System prompt")
            self._set_busy(self.busy, self.busy_reason)

        self._system_syncing += 1
        self._set_busy(self.busy, self.busy_reason)
        self._call(tokenize, on_ok=ok, on_fail=fail)

    # ------------------------------------------------------------------ the turn
    def input_block_reason(self) -> str:
        """Why the user cannot send now ('' when they can)."""
        if self.busy:
            return self.busy_reason
        if self.connection_state == "loading":
            return "The model is loading…"
        if self.connection_state == "connecting":
            return "Connecting to the model server…"
        if self.client is None or self.connection_state != "connected":
            return "No model server — see File → Settings"
        if self.conv is None:
            return "No conversation open"
        if self._system_syncing:
            return "Preparing the system prompt…"
        return ""

    @property
    def generating(self) -> bool:
        """True while an answer streams (Stop applies)."""
        return self._gen is not None

    def send(self, text: str) -> bool:
        """Start a turn with the user's message; False when it cannot start now."""
        text = text.strip()
        reason = self.input_block_reason()
        if not text or reason:
            if reason:
                self.info.emit(reason)
            return False
        self._set_busy(True, "Reading your message…")
        self._stop_pending = False
        self._stream_count = 0
        client = self.client
        self._call(
            lambda: client.tokenize(text, add_special_tokens=False),
            on_ok=lambda pieces: self._after_tokenize(text, pieces),
            on_fail=lambda exc: self._turn_failed_early(exc, "Tokenizing your message"),
        )
        return True

    def _after_tokenize(self, text: str, pieces) -> None:
        ids = [int(i) for i, _ in pieces]
        texts = [t for _, t in pieces]
        self._pending_send = lambda: self._resurrect_then_add(text, ids, texts)
        if self.index is not None and self._indexer.pending > 0:
            # Let the previous exchange's embeddings land, but not for long.
            self._set_busy(True, "Finishing memory indexing…")
            self._wait_timer.start(int(self.settings.embed_wait_seconds * 1000))
        else:
            self._run_pending_send()

    def _on_embed_idle(self) -> None:
        if self._wait_timer.isActive():
            self._wait_timer.stop()
            self._run_pending_send()

    def _run_pending_send(self) -> None:
        action, self._pending_send = self._pending_send, None
        if action is not None:
            action()

    def _resurrect_then_add(self, text: str, ids: list[int], texts: list[str]) -> None:
        index = self.index
        if index is None or not index.available or index.entry_count == 0 or not self.conv.graveyard():
            self.last_resurrected = 0
            self._add_user_turn(ids, texts)
            return
        self._set_busy(True, "Searching memory…")
        # The query embedding is the slow part: it runs on the embedder thread, ahead of
        # queued indexing; planning and resurrecting touch the conversation, so they run here.
        self._indexer.search(text, lambda matches, exc: self._resurrect(index, matches, ids, texts))

    def _resurrect(self, index, matches, ids, texts) -> None:
        from .resurrection import apply_plan

        conv = self.conv
        self.last_resurrected = 0
        if index is self._index and self.store is not None and matches:
            try:
                plan = index.plan(conv, matches, self.resurrection_budget(len(ids)))
                result = apply_plan(conv, plan, index.conn, self.settings.resurrection_brightness, self.store)
            except Exception as err:  # noqa: BLE001
                self.error.emit(err, "Resurrecting from memory")
            else:
                revived = [c for c in result.revived if not c.framing]
                self.last_resurrected = len(revived)
                if revived:
                    self.graveyard_changed.emit()
        self._add_user_turn(ids, texts)

    def resurrection_budget(self, user_tokens: int) -> int:
        """Seed 001's universal equation: room left after the message and the answer."""
        max_context = int(getattr(self.model_info, "max_context", 0) or 0)
        budget = max_context - self.conv.live_token_count() - user_tokens - self.settings.max_new_tokens
        if self.settings.resurrection_budget_cap > 0:
            budget = min(budget, self.settings.resurrection_budget_cap)
        return max(budget, 0)

    def _add_user_turn(self, ids: list[int], texts: list[str]) -> None:
        conv = self.conv
        turn = conv.add_turn("user", ids, texts)
        try:
            self.store.save_turn(conv, turn)  # DB-first: persisted before it is shown
        except Exception as exc:  # noqa: BLE001
            # Not on disk, so not shown and not answered; the user can send it again.
            self._turn_failed_early(exc, "Saving your message")
            return
        self._queue_indexing([c.id for c in conv.content_chunks(turn.turn_id)])
        self._fit_model_window()
        self._start_generation()  # shows the message (and any resurrection) with the answer

    def _fit_model_window(self) -> None:
        """Never send more than the model can read: prompt + answer within its context."""
        max_context = int(getattr(self.model_info, "max_context", 0) or 0)
        if max_context <= 0:
            return
        frame = sum(len(ids) for ids, _ in [self.framing.prefix.get("assistant", ([], []))]) if self.framing else 0
        limit = max_context - self.settings.max_new_tokens - frame
        if self.conv.live_token_count() > limit > 0:
            self._prune(limit)

    def _start_generation(self, continuation: bool = False) -> None:
        """Open the answer (or continue it after a tool call) and stream from the server."""
        conv = self.conv
        if not continuation:
            conv.begin_turn("assistant")
            self._stream_count = 0
            self._stream_started = time.monotonic()
            self._attention_seen = False
            self._attention_errors = 0
        input_ids = conv.live_input_ids()
        s = self.settings
        params = dict(
            max_length=s.max_new_tokens,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            rep_pen=s.rep_pen,
            sampler_seed=s.sampler_seed,
            stop_sequence=[*STOP_SEQUENCES, tools.STOP_SEQUENCE],
            output_attentions=True,
            attention_format=s.attention_format,
            request_id=uuid.uuid4().hex,
        )
        worker = GenerationWorker(self.client, input_ids, params, parent=self)
        worker.token.connect(self._on_token)
        worker.completed.connect(self._on_stream_completed)
        worker.failed.connect(self._on_stream_failed)
        self._gen = worker
        self._set_busy(True, "The model is answering — Esc stops")
        # The view appends new rows and rebuilds by itself when rows came back or left.
        self.tokens_streamed.emit()
        worker.start()
        if self._stop_pending:  # Esc pressed while the message was being prepared
            self.stop()

    def _on_token(self, token_id: int, text: str, attention) -> None:
        conv = self.conv
        if conv is None or conv.open_turn is None:
            return
        if token_id in self._stop_ids:
            return
        if attention is not None:
            self._attention_seen = True
            try:
                # The vector covers the context as it was when this token was produced,
                # so brightness moves before the token joins the table.
                conv.apply_attention(attention)
            except AttentionError as exc:
                self._attention_errors += 1
                if self._attention_errors == 1:
                    self.error.emit(exc, "Brightness update")
        conv.append_token(token_id, text)
        self._stream_count += 1
        if self._stream_count % STREAM_SAVE_EVERY == 0:
            self._guard(lambda: self.store.save_stream_progress(conv), "Saving the answer")
        self.tokens_streamed.emit()

    def stop(self) -> None:
        """Abort the answer being generated; what arrived so far is kept."""
        if self._gen is not None:
            self._set_busy(True, "Stopping…")
            self._gen.stop()
        elif self.busy:
            self._stop_pending = True

    def _on_stream_completed(self, done) -> None:
        reason = getattr(done, "finish_reason", "stop") or "stop"
        if reason == "abort" or (self._gen is not None and self._gen.stopping):
            reason = "aborted"
        rate = getattr(done, "tokens_per_s", None)
        if reason != "aborted" and self._answer_has_tool_call():
            self._run_tools(reason, rate)
            return
        self._finish_turn(reason, rate)

    # ------------------------------------------------------------------ tools (seed 001 §12)
    def _answer_text(self) -> str:
        conv = self.conv
        return "".join(conv.chunk_text(c.id) for c in conv.content_chunks(conv.open_turn.turn_id))

    def _answer_has_tool_call(self) -> bool:
        conv = self.conv
        return conv is not None and conv.open_turn is not None and tools.OPEN_TAG in self._answer_text()

    def _run_tools(self, reason: str, rate) -> None:
        """Run the answer's tool calls on a thread, append the results, maybe go on."""
        worker, self._gen = self._gen, None
        if worker is not None:
            worker.wait(5000)
            worker.deleteLater()
        self._set_busy(True, "Running the model's notebook tool…")
        text, client, store = self._answer_text(), self.client, self.store
        if self._tool_runner is None:
            self._tool_runner = tools.ToolRunner()
        runner = self._tool_runner

        def job():
            step = runner.process_answer(text, store.load_tool_data(tools.NOTES_NAME), hit_stop=reason == "stop")
            prefix = client.tokenize(step.prefix_text, add_special_tokens=False) if step.prefix_text else []
            result = client.tokenize(step.result_text, add_special_tokens=False) if step.result_text else []
            return step, prefix, result

        def ok(outcome) -> None:
            step, prefix, result = outcome
            conv = self.conv
            for token_id, piece in prefix:
                conv.append_token(int(token_id), piece)
            for token_id, piece in result:
                conv.append_token(int(token_id), piece, tool_result=True)
            self._stream_count += len(prefix) + len(result)
            if step.new_notes is not None:
                self._guard(lambda: store.save_tool_data(tools.NOTES_NAME, step.new_notes), "Saving notes")
            self._guard(lambda: store.save_stream_progress(conv), "Saving the answer")
            self.tokens_streamed.emit()
            if step.continue_generation and self.client is not None:
                self._start_generation(continuation=True)
            else:
                self._finish_turn(reason, rate)

        def fail(exc) -> None:
            self.error.emit(exc, "Running a tool call")
            self._finish_turn(reason, rate)

        self._call(job, on_ok=ok, on_fail=fail)

    def _on_stream_failed(self, exc) -> None:
        names = {c.__name__ for c in type(exc).__mro__}
        if "GenerationAborted" in names or (self._gen is not None and self._gen.stopping):
            self._finish_turn("aborted", None)
            return
        self._finish_turn("error", None)
        self.error.emit(exc, "Generating the answer")
        if names & {"BackendUnavailable", "StreamInterrupted", "BackendTimeout"}:
            self.connection.lost()

    def _finish_turn(self, reason: str, rate) -> None:
        worker, self._gen = self._gen, None
        if worker is not None:
            worker.wait(5000)
            worker.deleteLater()
        conv = self.conv
        elapsed = max(time.monotonic() - self._stream_started, 1e-6)
        self.tokens_per_s = float(rate) if rate else self._stream_count / elapsed
        self.last_finish_reason = reason
        if conv.open_turn is None:
            self._set_busy(False)
            return
        turn = conv.end_turn()
        if self._stream_count and not self._attention_seen and self.attention_available:
            self._set_attention(False)
        elif self._attention_seen and not self.attention_available:
            self._set_attention(True)
        self._guard(lambda: self.store.save_turn(conv, turn), "Saving the answer")
        self._guard(lambda: self.store.save_brightness(conv), "Saving brightness")
        self._index_pending()  # the answer, and the question whose context now has it
        pruned = self._prune()
        self._set_busy(False)
        if self._system_dirty:
            self._system_dirty = False
            self._sync_system_prompt()
        (self.conversation_changed if pruned else self.tokens_streamed).emit()
        self.stats_changed.emit()
        self.turn_finished.emit(reason)

    def _prune(self, limit: int | None = None) -> list[Chunk]:
        """Prune to ``limit`` (default: the max-context setting); persist; update the graveyard."""
        conv = self.conv
        if self.attention_available:
            pruned = conv.prune_to_fit(limit)
        else:
            pruned = prune_oldest_first(conv, limit)
        if pruned:
            self._guard(lambda: self.store.save_chunks(conv, pruned), "Saving pruned chunks")
            self.graveyard_changed.emit()
        return pruned

    def _turn_failed_early(self, exc, context: str) -> None:
        self._set_busy(False)
        self.error.emit(exc, context)
        self.turn_finished.emit("error")

    def _set_busy(self, busy: bool, reason: str = "") -> None:
        self.busy = busy
        self.busy_reason = reason if busy else ""
        self.busy_changed.emit(busy, self.busy_reason if busy else self.input_block_reason())

    # ------------------------------------------------------------------ the user's levers
    def resurrect_chunk(self, chunk_id: int) -> bool:
        """Graveyard click: bring a chunk back with its anchors, pinned at 10000."""
        return self._lever(
            lambda conv: conv.resurrect([chunk_id], brightness=MAX_BRIGHTNESS, pin=True),
            lambda conv, changed: self.store.save_chunks(conv, changed + [conv.chunks[chunk_id]]),
            "Resurrecting",
        )

    def pin(self, chunk_id: int, pinned: bool = True) -> bool:
        """Pin (brightness 10000, never pruned) or unpin a chunk."""
        return self._lever(
            lambda conv: [conv.pin(chunk_id, pinned)],
            lambda conv, changed: self.store.save_chunks(conv, changed),
            "Pinning" if pinned else "Unpinning",
        )

    def merge_with_next(self, chunk_id: int) -> bool:
        """Merge a chunk with the next chunk of its turn (re-indexed as one)."""
        def act(conv):
            kept, absorbed = conv.merge_with_next(chunk_id)
            self.store.save_merge(conv, kept, absorbed)
            self._index_pending()  # re-embeds the merged chunk, drops the absorbed entry
            return [kept]

        return self._lever(act, None, "Merging")

    def delete_chunk(self, chunk_id: int) -> bool:
        """Prune a chunk by hand (it goes to the graveyard)."""
        return self._lever(
            lambda conv: conv.delete_chunk(chunk_id),
            lambda conv, changed: self.store.save_chunks(conv, changed),
            "Deleting",
        )

    def _lever(self, act, persist, context: str) -> bool:
        conv = self.conv
        if conv is None or self.store is None:
            return False
        if self.busy:
            self.info.emit("Wait for the answer to finish first.")
            return False
        try:
            changed = act(conv)
            if persist is not None:
                persist(conv, list(changed))
            self.store.save_brightness(conv)
        except Exception as exc:  # noqa: BLE001
            self.error.emit(exc, context)
            return False
        self.conversation_changed.emit()
        self.graveyard_changed.emit()
        self.stats_changed.emit()
        return True

    # ------------------------------------------------------------------ settings
    def apply_settings(self, new: Settings) -> None:
        """Adopt changed settings: reconnect on a new URL, re-frame a new system prompt."""
        old = self.settings
        self.settings = new
        for holder in (self.conv, self.index):
            if holder is not None and hasattr(holder, "settings"):
                holder.settings = new
        if new.server_url != old.server_url:
            self.connect_server(new.server_url)
        elif new.system_prompt != old.system_prompt:
            self._sync_system_prompt()
        if new.max_context_tokens != old.max_context_tokens and self.conv is not None and not self.busy:
            self._prune()  # a smaller budget takes effect now, not after the next answer
            self.conversation_changed.emit()
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

    def _guard(self, action: Callable[[], Any], context: str) -> bool:
        try:
            action()
        except Exception as exc:  # noqa: BLE001
            self.error.emit(exc, context)
            return False
        return True

    def stats(self) -> dict:
        """Figures for the stats bar."""
        conv = self.conv
        if conv is None:
            return {}
        return dict(
            live_tokens=conv.live_token_count(),
            max_tokens=self.settings.max_context_tokens
            or int(getattr(self.model_info, "max_context", 0) or 0),
            total_tokens=conv.next_position + len(conv.system_ids),
            pruned_chunks=len(conv.graveyard()),
            mean_brightness=conv.mean_brightness(),
            tokens_per_s=self.tokens_per_s,
            last_resurrected=self.last_resurrected,
        )

    def shutdown(self) -> None:
        """Stop generation, finish indexing briefly, close the file, stop our server."""
        if self._shutting_down:
            return
        self._shutting_down = True
        if self._gen is not None:
            self._gen.stop()
            self._gen.wait(5000)
        # Nothing reaches the (closing) window from here on; late thread results are dropped.
        self.blockSignals(True)
        self._wait_timer.stop()
        conv, store = self.conv, self.store
        if conv is not None and store is not None and conv.open_turn is not None:
            turn = conv.end_turn()  # quitting mid-answer keeps the partial answer
            self._guard(lambda: store.save_turn(conv, turn), "Saving the answer")
        self._indexer.wait_idle(5.0)
        # A job in flight (the embedder loading torch) cannot be interrupted; wait for it.
        self._indexer.shutdown(timeout_ms=60_000)
        for worker in list(self._calls):
            worker.wait(3000)
        if self.store is not None:
            try:
                if self.conv is not None and self.conv.open_turn is None:
                    self.store.save_brightness(self.conv)
                self.store.close()
            except Exception as exc:  # noqa: BLE001
                log.warning("closing the conversation file failed: %s", exc)
            self.store = None
        self._index, self._index_tried = None, True
        if self._tool_runner is not None:
            self._tool_runner.close()
        try:
            self.connection.shutdown()
        except Exception as exc:  # noqa: BLE001
            log.warning("stopping the built-in server failed: %s", exc)


# ---------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="halo-weave",
        description=(
            "Halo Weave: an endless conversation with your own LLM inside a fixed context "
            "window. The model's attention decides what stays; pruned chunks wait in the "
            "graveyard and come back when a later message needs them."
        ),
        epilog=(
            "Without a server at the configured URL the built-in model server starts "
            "automatically on a free loopback port and stops when the window closes. "
            "Conversations are SQLite files in the data directory ($HALO_WEAVE_HOME)."
        ),
    )
    parser.add_argument(
        "--server-url", metavar="URL",
        help="attention-capable KoboldCPP-compatible server (default: the saved setting, "
             f"initially {DEFAULT_SERVER_URL}); kept in the settings",
    )
    parser.add_argument(
        "--data-dir", metavar="DIR", type=Path,
        help="where conversations and settings live (default: $HALO_WEAVE_HOME or the "
             "platform's user data directory)",
    )
    parser.add_argument(
        "--conversation", metavar="FILE", type=Path,
        help="open this conversation file instead of the last one",
    )
    parser.add_argument(
        "--no-autostart", action="store_true",
        help="never start the built-in model server; wait for the configured one",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """The ``halo-weave`` console script."""
    args = build_parser().parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per token otherwise
    if args.data_dir:
        os.environ["HALO_WEAVE_HOME"] = str(args.data_dir.expanduser())

    from PySide6.QtWidgets import QApplication

    from .ui.main_window import MainWindow, app_qsettings

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Halo Weave")
    app.setOrganizationName("halo-weave")
    try:
        from .ui.theme import apply_dark_theme

        apply_dark_theme(app)
    except ImportError:
        pass
    data_dir = settings_mod.data_dir()
    qsettings = app_qsettings(data_dir)
    settings = _load_settings(qsettings)
    if args.server_url:
        settings = settings.replace(server_url=args.server_url)
        _save_settings(settings, qsettings)
    controller = TurnController(settings, data_dir, autostart=settings.autostart_server and not args.no_autostart)
    window = MainWindow(controller, qsettings)
    window.show()
    app.processEvents()
    controller.start(args.conversation)
    _quit_on_signals(app)
    code = app.exec()
    controller.shutdown()  # also stops the bundled server we started
    return code


def _quit_on_signals(app) -> None:
    """Ctrl+C or SIGTERM closes the window cleanly (so the bundled server stops too)."""
    import signal

    from PySide6.QtCore import QTimer as _Timer

    def quit_app(*_) -> None:
        for widget in app.topLevelWidgets():
            widget.close()
        app.quit()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, quit_app)
    # Python runs signal handlers only between bytecodes: wake it up now and then.
    timer = _Timer(app)
    timer.timeout.connect(lambda: None)
    timer.start(250)


def _load_settings(qsettings) -> Settings:
    try:
        from .ui.settings_io import load_settings
    except ImportError:
        return Settings()
    return load_settings(qsettings)


def _save_settings(settings: Settings, qsettings) -> None:
    try:
        from .ui.settings_io import save_settings
    except ImportError:
        return
    save_settings(settings, qsettings)


if __name__ == "__main__":
    sys.exit(main())
