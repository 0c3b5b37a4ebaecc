"""The :class:`ChatSession`: a conversation, its file and its model server, and every
rule of a turn (see :mod:`halo_weave.session` for a turn's steps in order)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from ..conversation import Chunk, Conversation, Framing, Turn
from ..errors import AttentionError
from ..events import TokenEvent
from ..rules import WITHOUT_BRIGHTNESS
from ..settings import Settings
from ..tools import notebook
from .answer import OpenAnswer
from .branches import Branches
from .documents import Documents
from .last_exchange import LastExchange
from .levers import Levers
from .messages import live_messages
from .pipeline import TurnPipeline
from .recall import Recall
from .rounds import Rounds
from .server_use import ServerUse
from .system_prompt import SystemPrompt

if TYPE_CHECKING:  # the backends' modules import httpx, which the window's first paint need not wait for
    from ..backends.interface import Backend

#: Where an answer ends (ChatML); the tool tag is added per request.
STOP_SEQUENCES = ("<|im_end|>", "<|im_start|>")

#: Streamed tokens written to the database per batch (no per-token commit).
STREAM_SAVE_EVERY = 16


class Indexer(Protocol):
    """Where finished chunks go to be embedded (the app's queue runs it on a thread)."""

    def queue_pending(self, conv: Conversation) -> None: ...

    def queue(self, conv: Conversation, chunk_ids: list[int], label: str = "") -> None: ...


def _raise(exc: BaseException, context: str) -> None:
    raise exc


@dataclass
class TurnEnd:
    """What :meth:`ChatSession.finish_turn` did (the app announces it)."""

    reason: str
    turn: Turn | None
    pruned: list[Chunk] = field(default_factory=list)
    attention_changed: bool = False
    #: A Continue to which the model added nothing: the answer had ended by itself.
    nothing_added: bool = False


class ChatSession:
    """A conversation, its file and its model server, and every rule of a turn.

    Owns: the open conversation (``conv``), its file (``store``), its ``indexer``, the
    connected ``backend`` with its ``model_info`` and ``framing``, whether the server
    streams attention (``attention_available``) and whether the reader's attention may
    rank chunks (``proxy_ranks``); the turn itself (open, stream, finish, prune) and the
    one saver, :meth:`save`.  Its parts own the rest: ``answer``, ``rounds``, ``recall``
    (with the semantic index), ``prompt``, ``server``, ``exchange``, ``branches``,
    ``levers``, ``documents``; ``pipeline`` runs a turn's steps in order (see
    :mod:`halo_weave.session`).
    """

    def __init__(self, settings: Settings | None = None, *, report: Callable[[BaseException, str], None] = _raise,
                 indexer: Indexer | None = None):
        self.settings = settings or Settings()
        #: Called with (exception, what was being done) when a save or a step fails.
        self.report = report
        self.conv: Conversation | None = None
        self.store = None
        self.indexer = indexer
        self.backend: Backend | None = None
        self.model_info = None
        self.framing: Framing | None = None
        #: False once a server answered without attention: prune oldest first then.
        self.attention_available = True
        #: True while the reader's attention (proxy attention) may rank chunks for pruning.
        self.proxy_ranks = False
        # The parts, each owning its own state (see their docstrings).
        self.answer = OpenAnswer()
        self.rounds = Rounds(self)
        self.recall = Recall(self)
        self.prompt = SystemPrompt(self)
        self.server = ServerUse(self)
        self.exchange = LastExchange(self)
        self.branches = Branches(self)
        self.levers = Levers(self)
        self.documents = Documents(self)
        self.pipeline = TurnPipeline(self)

    # ------------------------------------------------------------------ set-up
    def open(self, store) -> Conversation:
        """Rehydrate the conversation of ``store`` (an open :class:`~halo_weave.store.ConversationStore`)."""
        return self.adopt(store.load(self.settings, self.framing or Framing.none()), store)

    def reload(self) -> Conversation:
        """Read the conversation again from its file (after a branch switch changed the
        file under it); the semantic index and the server stay as they are."""
        conv = self.store.load(self.settings, self.framing or Framing.none())
        if self.framing is not None:
            conv.use_framing(self.framing)
        self.conv = conv
        return conv

    def adopt(self, conv: Conversation, store=None) -> Conversation:
        """Run turns on ``conv``, saved to ``store`` (None: in memory only, e.g. a benchmark)."""
        if self.framing is not None:
            conv.use_framing(self.framing)
        self.store, self.conv = store, conv
        self.recall.use_index(None)
        self.recall.skip()
        self.answer.forget_speed()
        self.server.name_conversation()
        return conv

    def connect(self, backend: Backend, info, framing: Framing) -> bool | None:
        """Adopt a connected server: its model info and the chat-template framing.

        Returns whether it streams attention: True or False when it says so (its
        ``capabilities``, or ``supports_attention`` declared), None when only its events
        will tell (the original fork declares nothing).
        """
        self.backend, self.model_info, self.framing = backend, info, framing
        # The answer's end token is dropped when streamed; only a control token (empty piece,
        # or the template's stop text itself): a Llama 3 suffix split by the bundled tokenizer
        # starts with "<", which the model may well write.
        stops = self.server.template.stops
        self.answer.stop_ids = {ids[0] for ids, texts in [framing.suffix.get("assistant", ([], []))]
                                if ids and (texts[0] == "" or texts[0] in stops)}
        if self.conv is not None:
            self.conv.use_framing(framing)
        self.server.name_conversation()
        declared = backend.capabilities.attention
        if declared is None and info.supports_attention:
            declared = True
        if declared is not None:
            self.attention_available = bool(declared)
        return declared

    def use_settings(self, settings: Settings) -> None:
        """Run on ``settings`` from now on (the conversation and its index too)."""
        self.settings = settings
        for holder in (self.conv, self.recall.index):
            if holder is not None and hasattr(holder, "use_settings"):
                holder.use_settings(settings)

    def set_proxy_ranks(self, ranks: bool) -> None:
        """Whether the reader's attention (proxy attention) ranks chunks for pruning."""
        self.proxy_ranks = ranks

    def disconnect(self) -> None:
        """The server went away: no backend until the next :meth:`connect`."""
        self.backend = None

    def close(self) -> None:
        """Quitting: save the brightness (between turns) and close the file; the session
        forgets the file and the index even when closing fails (which raises)."""
        store, conv = self.store, self.conv
        self.store = None
        self.recall.use_index(None)
        if store is None:
            return
        try:
            if conv is not None and conv.open_turn is None and not store.read_only:
                store.save_brightness(conv)
        finally:
            store.close()

    # ------------------------------------------------------------------ the user's half
    def add_user_message(self, ids: list[int], texts: list[str], created_at: float | None = None,
                         recalled: Iterable[Chunk] = ()) -> Turn:
        """Add the user's turn and save it before anything shows it (DB-first);
        ``recalled``: what ``recall.recall_for`` brought back for it.

        Raises when the save fails: not on disk, so not shown and not answered.
        """
        turn = self.save_user_message(ids, texts, created_at, recalled)
        self.index_user_message(turn)
        return turn

    def save_user_message(self, ids: list[int], texts: list[str], created_at: float | None = None,
                          recalled: Iterable[Chunk] = ()) -> Turn:
        """The saving half of :meth:`add_user_message` (safe on a worker thread); the
        message's recall (``conv.recalls``) is saved with it.

        When the save fails, the conversation in memory goes back to what it was (the
        unsaved turn is not left behind to be shown or sent later), then it raises.
        """
        conv, store = self.conv, self.store
        saved = conv.snapshot() if store is not None else None
        turn = conv.add_turn("user", ids, texts, created_at)
        conv.record_recall(turn.turn_id, [c.id for c in recalled])
        if store is not None:
            try:
                store.save_turn(conv, turn)
            except BaseException:
                conv.restore(saved)
                raise
        return turn

    def index_user_message(self, turn: Turn) -> None:
        """The indexing half of :meth:`add_user_message` (on the thread that owns the queue)."""
        if self.indexer is not None:
            conv = self.conv
            self.indexer.queue(conv, [c.id for c in conv.content_chunks(turn.turn_id)])

    def fit_model_window(self) -> list[Chunk]:
        """Never send more than the model can read: prompt + answer within its context
        (a recall note takes what room is left: ``recall.note_room``)."""
        limit = self.server.window_limit()
        return self.prune(limit) if self.conv.live_token_count() > limit > 0 else []

    @property
    def prune_order(self) -> str | None:
        """The prune order in force: None (the settings'), or, while nothing measures
        brightness, one that needs none (unless the reader's attention is asked to rank
        chunks: :attr:`proxy_ranks`)."""
        return None if self.attention_available or self.proxy_ranks else WITHOUT_BRIGHTNESS

    # ------------------------------------------------------------------ the answer
    def begin_answer(self, prefix: Iterable[tuple[int, str]] = (), *, role: str = "assistant",
                     created_at: float | None = None) -> None:
        """Open the assistant turn; ``prefix`` (a prefill) is put at its start.

        ``role="user"``: a turn whose tokens stream in like an answer (the memory
        benchmark scores user turns by their prefill attention that way).
        """
        self.conv.begin_turn(role, created_at)
        self.answer.start()
        self.rounds.reset()
        for token_id, piece in prefix:
            self.conv.append_token(int(token_id), piece)
            self.answer.added()

    def resume_answer(self) -> Turn:
        """Continue: reopen the last answer (file first); new tokens join its last chunk."""
        turn = self.exchange.reopen_answer()
        self.answer.start(resumed=True)
        self.rounds.reset()
        return turn

    def generation_request(self) -> dict:
        """The next round's request: the live context and the sampler settings."""
        self.rounds.next()
        s = self.settings
        ids = self.recall.with_note([int(i) for i in self.conv.live_input_ids()])
        # A chat-completions server frames the context itself: it is sent as messages too.
        chat = dict(messages=live_messages(self.conv, self.recall.open_note)) if (
            self.backend is not None and self.backend.takes_messages) else {}
        return dict(
            **chat,
            input_ids=ids,
            max_length=s.sampling.max_new_tokens,
            temperature=s.sampling.temperature,
            top_p=s.sampling.top_p,
            top_k=s.sampling.top_k,
            rep_pen=s.sampling.rep_pen,
            sampler_seed=s.sampling.sampler_seed,
            stop_sequence=[*(self.server.template.stops or STOP_SEQUENCES), notebook.STOP_SEQUENCE],
            output_attentions=True,
            attention_format=s.server.attention_format,
            request_id=uuid.uuid4().hex,
        )

    def receive(self, event: TokenEvent) -> bool:
        """One streamed token: brightness moves, then the token joins; False if dropped.

        The attention covers the context as it was when this token was produced, so it
        is applied before the token is appended, and not kept afterwards.
        """
        conv, answer = self.conv, self.answer
        if conv is None or conv.open_turn is None or event.token_id in answer.stop_ids:
            return False
        answer.clock.token()
        attention = self.recall.without_note(event.attention, conv.live_token_count())
        if attention is not None:
            answer.attention_seen = True
            try:
                conv.apply_attention(attention)
            except AttentionError as exc:
                answer.attention_errors += 1
                if answer.attention_errors == 1:
                    self.report(exc, "Brightness update")
        self.rounds.record(event.token_id, event.text, attention)
        conv.append_token(event.token_id, event.text)
        answer.added()
        if answer.streamed % STREAM_SAVE_EVERY == 0:
            self.save(lambda: self.store.save_stream_progress(conv), "Saving the answer")
        return True

    def finish_turn(self, reason: str, rate: float | None = None, *, prune: bool = True) -> TurnEnd:
        """Close the answer: save it and its brightness, queue indexing, prune, save.

        ``prune=False``: the exchange goes on (a turn the benchmark streams mid-exchange).
        """
        conv, answer = self.conv, self.answer
        answer.finish(reason, rate)
        if conv is None or conv.open_turn is None:
            return TurnEnd(reason, None)
        turn = conv.end_turn()
        self.recall.end_note()
        before = self.attention_available
        if answer.streamed and not answer.attention_seen and self.attention_available:
            self.attention_available = False
        elif answer.attention_seen and not self.attention_available:
            self.attention_available = True
        self.save(lambda: self.store.save_turn(conv, turn), "Saving the answer")
        self.save(lambda: self.store.save_brightness(conv), "Saving brightness")
        if self.indexer is not None:
            self.indexer.queue_pending(conv)  # the answer, and the question whose context now has it
        pruned = self.prune() if prune else []
        return TurnEnd(reason, turn, pruned, self.attention_available != before, answer.added_nothing)

    def prune(self, limit: int | None = None) -> list[Chunk]:
        """Prune to ``limit`` (default: the max-context setting, with hysteresis; pruning
        only for room, the model's window) and save.  Never the exchange the user just read;
        in :attr:`prune_order`."""
        conv = self.conv
        if limit is None and self.server.prunes_for_room:
            limit = self.server.window_limit()
        pruned = conv.prune_to_fit(limit, order=self.prune_order, keep_latest_exchange=True)
        if pruned:
            self.save(lambda: self.store.save_chunks(conv, pruned), "Saving pruned chunks")
        return pruned

    def close_open_turn(self) -> None:
        """Quitting mid-answer keeps the partial answer."""
        conv, store = self.conv, self.store
        if conv is not None and store is not None and conv.open_turn is not None:
            turn = conv.end_turn()
            self.save(lambda: store.save_turn(conv, turn), "Saving the answer")

    # ------------------------------------------------------------------ plumbing
    def save(self, action: Callable[[], Any], context: str) -> bool:
        """Run ``action`` (a write to the conversation's file); a failure is reported with
        ``context`` (what was being saved) and the turn goes on.  False when it failed;
        True, doing nothing, without a file."""
        if self.store is None:
            return True
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - reported; the turn goes on
            self.report(exc, context)
            return False
        return True
