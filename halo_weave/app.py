"""Composition root (``halo-weave``) and the turn controller.

:class:`TurnController` builds the controller's collaborators
(:mod:`halo_weave.ui.control`, QtCore only, so tests drive it without widgets) and wires
them to each other; every rule of a turn (what to save when, score, prune, index,
resurrect) is a method of the Qt-free :class:`~halo_weave.session.ChatSession` it holds
as :attr:`~TurnController.session`.  :func:`main` hands the class to
:func:`halo_weave.ui.cli.run`, which parses the command line, builds the window and
starts it.

The collaborators, each owning its own state (see its docstring)::

    signals  ControlSignals     every announcement to the window
    gate     Gate               busy (and why), quitting, why input is closed
    calls    Calls              blocking calls on threads
    memory   Memory             the semantic index, the embedder, the indexing queue
    prompt   PromptUpkeep       the conversation's system prompt, in step with the settings
    levers   ChunkLevers        pin, merge, prune, resurrect a chunk; prune to the budget
    proxy    ProxyReading       the bundled reader's attention for a server without it
    ahead    ReadAhead          the draft read ahead to the server; the warm-up
    link     ServerLink         the model server connection (``link.connection``)
    files    ConversationFiles  which conversation is open; open, new, import, export
    message  MessageSend        the user's message, from Enter until it is saved
    turn     TurnFlow           the streamed answer, tool rounds, Stop
    actions  TurnActions        Continue, Regenerate, Edit, answer versions
    documents DocumentAttach    a file attached to the conversation (read, saved, indexed)
    collector WindowThreadCollector  cyclic garbage collected on the application's thread

A turn, as :class:`~halo_weave.ui.control.message.MessageSend` and
:class:`~halo_weave.ui.control.turn.TurnFlow` run the steps of ``session.pipeline``
(:class:`~halo_weave.session.TurnPipeline`, which the benchmarks run too; the thread of
each step on the right)::

    send(text)
      ├─ pipeline.read: tokenize once ................. CallWorker
      ├─ wait ≤ embed_wait_seconds for pending indexing, then
      │  search ....................................... EmbedderWorker (urgent job)
      │  pipeline.recall: within the budget; pipeline.keep: the most relevant part
      │    (its ranking ............................... EmbedderWorker)
      ├─ pipeline.save, pipeline.saved: saved, queued for indexing, fitted, then shown
      ├─ pipeline.open_answer, pipeline.request, stream  GenerationWorker
      │    per event: pipeline.receive (attention, record, append, save every 16)
      ├─ a round ending on </tool>: run the call, session.rounds.apply_tool_step, next round
      └─ pipeline.finish: save, queue indexing, prune, save; then announce
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QObject

from .core import pruning, recall
from . import settings as settings_mod
from .conversation import Conversation
from .session import ChatSession
from .settings import PRUNING_FIELDS, Settings, choice_words
from .ui.cli import build_parser, run  # noqa: F401 - build_parser: the options, for tests
from .ui.control.actions import TurnActions
from .ui.control.calls import Calls
from .ui.control.documents import DocumentAttach
from .ui.control.files import ConversationFiles
from .ui.control.gate import Gate
from .ui.control.chunk_levers import ChunkLevers
from .ui.control.collector import WindowThreadCollector
from .ui.control.link import ServerLink
from .ui.control.memory import Memory
from .ui.control.message import MessageSend
from .ui.control.prompt import PromptUpkeep
from .ui.control.proxy import ProxyReading
from .ui.control.ahead import ReadAhead
from .ui.control.signals import ControlSignals
from .ui.control.turn import TurnFlow

log = logging.getLogger("halo_weave.app")


class TurnController(QObject):
    """Runs the conversation: connection, turns, the user's levers, files.

    Owns the collaborators listed in :mod:`halo_weave.app` and the data directory; the
    window reads :attr:`conv` and :attr:`signals` and sends intents to the collaborators
    (``controller.message.send(text)``, ``controller.files.open_conversation(path)``).
    Between turns the UI equals the database.
    """

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
        settings = settings or Settings()
        self.data_dir = Path(data_dir) if data_dir else settings_mod.data_dir()
        self.signals = signals = ControlSignals(self)
        #: Cyclic garbage goes on the application's thread only (Qt objects die there).
        self.collector = WindowThreadCollector.install()
        #: The turn's rules and state (conversation, file, server); Qt-free.
        self.session = session = ChatSession(settings, report=lambda exc, context: signals.error.emit(exc, context),
                                             indexer=_IndexFeed(self))
        self.gate = gate = Gate(signals, self)
        self.calls = calls = Calls(self)
        self.memory = memory = Memory(session, signals, gate, embedder_factory, self)
        self.prompt = prompt = PromptUpkeep(session, signals, gate, calls, self)
        self.levers = levers = ChunkLevers(session, signals, gate)
        self.proxy = proxy = ProxyReading(session, signals, gate, calls, prune=levers.prune_to_budget, parent=self)
        self.ahead = ahead = ReadAhead(session, signals, gate, calls, memory, prompt,
                                       connected=lambda: self.link.state == "connected", parent=self)
        self.link = link = ServerLink(session, signals, gate, prompt, proxy, ahead, parent=self,
                                      autostart=settings.server.autostart_server if autostart is None else autostart)
        self.files = files = ConversationFiles(self.data_dir, session, signals, gate, calls, memory, prompt, link,
                                               ahead, self)
        self.message = message = MessageSend(session, signals, gate, calls, memory, link, self)
        self.turn = turn = TurnFlow(self.data_dir, session, signals, gate, calls, prompt, ahead, proxy, link, files,
                                    message, self)
        self.actions = TurnActions(session, signals, gate, calls, turn, message, files, ahead)
        self.documents = DocumentAttach(session, signals, gate, calls, memory, self)
        gate.consult(lambda: _input_closed_because(session, link, prompt))

    @property
    def conv(self) -> Conversation | None:
        """The open conversation (read it; change it through the collaborators)."""
        return self.session.conv

    @property
    def settings(self) -> Settings:
        """The settings in use (:meth:`apply_settings` changes them)."""
        return self.session.settings

    def start(self, conversation: Path | None = None) -> None:
        """Open a conversation (the given one, the last one, or a new one), then connect."""
        self.files.open_conversation(conversation or self.files.last_conversation())
        self.link.connect_server()

    def apply_settings(self, new: Settings) -> None:
        """Adopt changed settings: reconnect on a new URL, re-frame a new system prompt."""
        session, signals = self.session, self.signals
        old = session.settings
        session.use_settings(new)
        store, conv = session.store, session.conv
        if new.server.chat_template != old.server.chat_template and store is not None:
            # A template chosen here belongs to this conversation (and is the default for new ones).
            session.save(lambda: store.set_meta("chat_template", new.server.chat_template), "Saving the chat template")
        if (new.chat.system_prompt != old.chat.system_prompt and conv is not None and store is not None
                and not conv.turns and not getattr(store, "read_only", False)
                and session.prompt.own() == old.chat.system_prompt):
            # The default is for new conversations: an empty one still on it takes the new one.
            session.prompt.set_own(new.chat.system_prompt)
        if new.server.server_url != old.server.server_url or new.server.chat_template != old.server.chat_template or (
                new.server.server_context_tokens != old.server.server_context_tokens
                or new.server.server_api != old.server.server_api):
            self.link.connect_server(new.server.server_url)
        elif new.effective_system_prompt != old.effective_system_prompt:
            self.prompt.sync()  # the notebook's instructions, or the default just taken
        self.prompt.settings_changed(new.effective_system_prompt != old.effective_system_prompt)  # the open one is kept
        if (new.server.proxy_attention, new.server.proxy_pruning) != (
                old.server.proxy_attention, old.server.proxy_pruning):
            self.proxy.sync_ranks()
            signals.attention_changed.emit(session.attention_available)
        rescored = any(new.value(f) != old.value(f) for f, _, _ in PRUNING_FIELDS)
        words = choice_words(new, "brightness_rule")
        if words != choice_words(old, "brightness_rule") and session.attention_available:
            signals.info.emit(f"Brightness: {words}, from the next generated token on "
                              "(the brightness earned so far carries over; past attention is not stored).")
        budget_changed = new.pruning.max_context_tokens != old.pruning.max_context_tokens
        if (rescored or budget_changed) and conv is not None and not self.gate.busy:
            self.levers.prune_to_budget()  # a smaller budget takes effect now, not after the next answer
            signals.conversation_changed.emit()  # and the colours follow the score in use
        elif new.chat.highlight_fraction != old.chat.highlight_fraction and conv is not None:
            signals.conversation_changed.emit()  # the highlight follows at once
        signals.stats_changed.emit()

    def stats(self) -> dict:
        """Figures for the stats bar: the limit is the one pruning keeps to (the model's
        window when pruning only for room), what recalls brought back is counted apart."""
        conv, session = self.conv, self.session
        if conv is None:
            return {}
        server = session.server
        limit = server.window_limit() if server.prunes_for_room else session.settings.pruning.max_context_tokens
        return dict(
            live_tokens=conv.live_token_count(),
            max_tokens=limit or int(getattr(session.model_info, "max_context", 0) or 0),
            total_tokens=conv.total_token_count(),
            pruned_chunks=len(conv.graveyard()),
            mean_brightness=conv.mean_brightness(),
            brightness_source=self.proxy.brightness_source(),
            tokens_per_s=session.answer.clock.tokens_per_s if session.answer.clock.running else session.answer.tokens_per_s,
            first_token_s=session.answer.clock.first_token_s,
            recalled_tokens=recall.recalled_tokens(conv),
            kept_tokens=pruning.kept_tokens(conv),
            # Ranked by the reader, the prune waits for its read of the exchange.
            exchange_open=self.gate.busy or (session.proxy_ranks and self.proxy.reading),
        )

    def shutdown(self) -> None:
        """Stop generation, finish indexing briefly, close the file, stop our server."""
        if self.gate.closing:
            return
        self.gate.close()
        self.turn.shutdown()
        self.message.shutdown()
        # Nothing reaches the (closing) window from here on; late thread results are dropped.
        self.signals.blockSignals(True)
        self.session.close_open_turn()  # quitting mid-answer keeps the partial answer
        self.memory.shutdown()
        self.ahead.stop_for_quit()  # the server, free sooner, saves the cache as it stops
        self.calls.wait_all(3000)
        self.proxy.close()
        try:
            self.session.close()
        except Exception as exc:  # noqa: BLE001
            log.warning("closing the conversation file failed: %s", exc)
        self.turn.close_tools()
        try:
            self.link.shutdown()
        except Exception as exc:  # noqa: BLE001
            log.warning("stopping the built-in server failed: %s", exc)


def _input_closed_because(session: ChatSession, link: ServerLink, prompt: PromptUpkeep) -> str:
    """Why the user cannot send while nothing is busy ('' when they can)."""
    if getattr(session.store, "read_only", False):
        return "This conversation is read-only (see the message) — open another or start a new one"
    if link.state == "loading":
        return "The model is loading…"
    if link.state == "connecting":
        return "Connecting to the model server…"
    if link.state == "stopped":
        return "The built-in model server stopped — Help → Restart the built-in model server"
    if session.backend is None or link.state != "connected":
        return "No model server — see File → Settings"
    if session.conv is None:
        return "No conversation open"
    if prompt.syncing:
        return "Preparing the system prompt…"
    return ""


class _IndexFeed:
    """The session's indexer: the controller's memory, which queues for the index open now."""

    def __init__(self, controller: TurnController) -> None:
        self._controller = controller

    def queue_pending(self, conv: Conversation) -> None:
        self._controller.memory.queue_pending(conv)

    def queue(self, conv: Conversation, chunk_ids: list[int], label: str = "") -> None:
        self._controller.memory.queue(conv, chunk_ids, label)


def main(argv: list[str] | None = None) -> int:
    """The ``halo-weave`` console script."""
    return run(argv, TurnController)
