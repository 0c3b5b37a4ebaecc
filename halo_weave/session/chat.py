"""The :class:`ChatSession`: a conversation, its file and its model server, and every
rule of a turn (see :mod:`halo_weave.session` for a turn's steps in order)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol

from ..conversation import Chunk, Conversation, Framing, Turn
from ..core.stream_clock import StreamClock
from ..errors import AttentionError
from ..events import TokenEvent
from ..memory import recall_note, room
from ..memory.resurrection_plan import budget as resurrection_budget
from ..rules import WITHOUT_BRIGHTNESS
from ..settings import Settings
from ..storage.capture import RoundCapture
from ..tools import notebook
from . import last_exchange, levers, read_ahead, resurrect, rounds, system_prompt
from .branches import Branches

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
    """A conversation, its file and its model server, and every rule of a turn."""

    def __init__(self, settings: Settings | None = None, *, report: Callable[[BaseException, str], None] = _raise,
                 indexer: Indexer | None = None):
        self.settings = settings or Settings()
        #: Called with (exception, what was being done) when a save or a step fails.
        self.report = report
        self.conv: Conversation | None = None
        self.store = None
        self.index = None  # the semantic index, when there is one
        self.indexer = indexer
        self.backend = None
        self.model_info = None
        self.framing: Framing | None = None
        #: False once a server answered without attention: prune oldest first then.
        self.attention_available = True
        #: True while the reader's attention (proxy attention) may rank chunks for pruning.
        self.proxy_ranks = False
        self.last_resurrected = 0
        self.tokens_per_s = 0.0
        #: Live speed of the answer: started when the user asks, ticked per token.
        self.clock = StreamClock()
        self.last_finish_reason = ""
        #: Tokens of the open answer (all rounds), and when it started streaming.
        self.streamed = 0
        self._started = 0.0
        self._attention_seen = False
        self._attention_errors = 0
        self._resumed = False  # the open answer is a Continue of the last one
        self._stop_ids: set[int] = set()
        #: The recall note the open answer's requests carry (:mod:`halo_weave.memory.recall_note`).
        self._note: recall_note.RecallNote | None = None
        self.round = 0
        self.capture = RoundCapture()  # "Record attention": one folder per round
        #: Edit or regenerate any earlier message; switch branches (:mod:`.branches`).
        self.branches = Branches(self)

    # ------------------------------------------------------------------ set-up
    def open(self, store) -> Conversation:
        """Rehydrate the conversation of ``store`` (an open :class:`~halo_weave.store.ConversationStore`)."""
        return self.adopt(store.load(self.settings, self.framing or Framing.none()), store)

    def reload(self) -> Conversation:
        """Read the conversation again from its file (after a branch switch changed the
        file under it); the semantic index and the server stay as they are."""
        conv = self.store.load(self.settings, self.framing or Framing.none())
        if self.framing is not None:
            conv.framing = self.framing
        self.conv = conv
        return conv

    def adopt(self, conv: Conversation, store=None) -> Conversation:
        """Run turns on ``conv``, saved to ``store`` (None: in memory only, e.g. a benchmark)."""
        if self.framing is not None:
            conv.framing = self.framing
        self.store, self.conv, self.index = store, conv, None
        self.last_resurrected = 0
        # The speed figures were the previous conversation's answer: not this one's.
        self.tokens_per_s = 0.0
        self.clock = StreamClock()
        self._name_conversation()
        return conv

    def connect(self, backend, info, framing: Framing) -> bool | None:
        """Adopt a connected server: its model info and the chat-template framing.

        Returns whether it streams attention: True or False when it says so (its
        ``capabilities``, or ``supports_attention`` declared), None when only its events
        will tell (the original fork declares nothing).
        """
        self.backend, self.model_info, self.framing = backend, info, framing
        # The answer's end token is dropped when streamed; only a control token (empty piece,
        # or the template's stop text itself): a Llama 3 suffix split by the bundled tokenizer
        # starts with "<", which the model may well write.
        stops = self.template.stops
        self._stop_ids = {ids[0] for ids, texts in [framing.suffix.get("assistant", ([], []))]
                          if ids and (texts[0] == "" or texts[0] in stops)}
        if self.conv is not None:
            self.conv.framing = framing
        self._name_conversation()
        declared = getattr(getattr(backend, "capabilities", None), "attention", None)
        if declared is None and getattr(info, "supports_attention", False):
            declared = True
        if declared is not None:
            self.attention_available = bool(declared)
        return declared

    def use_settings(self, settings: Settings) -> None:
        """Run on ``settings`` from now on (the conversation and its index too)."""
        self.settings = settings
        for holder in (self.conv, self.index):
            if holder is not None and hasattr(holder, "use_settings"):
                holder.use_settings(settings)

    def use_index(self, index) -> None:
        """Search and index the open conversation with ``index`` (loaded for it)."""
        self.index = index

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
        self.store, self.index = None, None
        if store is None:
            return
        try:
            if conv is not None and conv.open_turn is None and not store.read_only:
                store.save_brightness(conv)
        finally:
            store.close()

    # The chat template and the system prompt: see :mod:`.system_prompt`.
    template = property(system_prompt.template)

    def template_choice(self) -> str:
        return system_prompt.template_choice(self)

    def model_choice(self) -> str:
        """Which of the server's models this conversation uses (where it serves several):
        the one saved with it, else the settings' default ("" = the first the server lists)."""
        return self.saved_choice("model") or self.settings.served_model

    def saved_choice(self, key: str) -> str:
        """A choice saved in the conversation's file (meta ``key``); "" when there is none,
        no file, or the row cannot be read (the settings' default applies then)."""
        if self.store is None:
            return ""
        try:
            saved = self.store.get_meta(key)
        except Exception:  # noqa: BLE001 - an unreadable meta row falls back to settings
            return ""
        return saved if isinstance(saved, str) else ""

    @property
    def max_context(self) -> int:
        """The model's context size in tokens (0 when unknown)."""
        return int(getattr(self.model_info, "max_context", 0) or 0)

    def conversation_prompt(self) -> str:
        return system_prompt.conversation_prompt(self)

    def effective_prompt(self) -> str:
        return system_prompt.effective_prompt(self)

    def set_conversation_prompt(self, prompt: str) -> None:
        system_prompt.set_conversation_prompt(self, prompt)

    def system_prompt_text(self) -> str | None:
        return system_prompt.system_prompt_text(self)

    def system_prompt_pieces(self, prompt: str) -> list[tuple[int, str]]:
        return system_prompt.system_prompt_pieces(self, prompt)

    def set_system_prompt(self, prompt: str, pieces: list[tuple[int, str]]) -> None:
        system_prompt.set_system_prompt(self, prompt, pieces)

    # ------------------------------------------------------------------ the user's half
    def tokenize(self, text: str) -> list[tuple[int, str]]:
        """The backend's tokens of ``text`` as text (blocking): markup in it stays text."""
        return self.backend.tokenize(text, add_special_tokens=False) if text else []

    def can_resurrect(self) -> bool:
        """Whether a search for the next message could bring anything back."""
        index = self.index
        return bool(index is not None and index.available and index.entry_count > 0 and self.conv.graveyard())

    def resurrection_budget(self, user_tokens: int) -> int:
        """Seed 001's universal equation: room left after the message and the answer."""
        s = self.settings
        return resurrection_budget(self.conv, user_tokens, self.max_context, s.max_new_tokens, s.resurrection_budget_cap)

    def resurrect_for(self, index, matches, user_tokens: int) -> list[Chunk]:
        """Bring back what the search for the message found (see :mod:`.resurrect`),
        best match first."""
        return resurrect.resurrect_for(self, index, matches, user_tokens)

    @property
    def writes_notes(self) -> bool:
        """Whether answers get recall notes: the setting, and note words in the framing."""
        framing = self.conv.framing if self.conv is not None else self.framing
        return bool(self.settings.recall_note and framing is not None and framing.note)

    @property
    def note_reserve(self) -> int:
        """Tokens a message's recall plans keep free for its note (0 without notes)."""
        return recall_note.NOTE_TOKENS if self.writes_notes else 0

    def note_room(self, prompt_tokens: int) -> int:
        """Tokens a recall note may take beside a prompt of ``prompt_tokens`` (the
        model's window less the answer; the most a note takes when the window is unknown)."""
        limit = self.window_limit()
        return recall_note.NOTE_TOKENS if limit <= 0 else max(0, limit - prompt_tokens)

    def recall_note(self) -> recall_note.RecallNote | None:
        """The note the open answer's request carries: a copy of what its question
        recalled, before the question (:mod:`halo_weave.memory.recall_note`)."""
        conv = self.conv
        turn = conv.open_turn if conv is not None else None
        if turn is None or turn.role != "assistant" or not self.writes_notes:
            return None
        question = conv.turns.last("user")
        if question is None or question > turn.turn_id:
            return None
        return recall_note.for_message(conv, question, self.note_room(conv.live_token_count()))

    def _name_conversation(self) -> None:
        """Tell a server that saves caches per conversation which one its requests are for."""
        if self.backend is not None and hasattr(self.backend, "conversation"):
            self.backend.conversation = read_ahead.cache_key(self) if self.conv is not None else None

    @property
    def can_warm_up(self) -> bool:
        """Whether the server can be given the open conversation's context before a message:
        restored from the cache it saved (ours), or read ahead as a prefill."""
        backend = self.backend
        return self.conv is not None and (bool(getattr(backend, "restores", False)) or self.can_read_ahead)

    def warm_up_ids(self) -> list[int]:
        """The prompt a warm-up gives the server (:func:`.read_ahead.warm_up_ids`)."""
        return read_ahead.warm_up_ids(self)

    def cache_key(self) -> str | None:
        """The name the server saves the open conversation's cache under (:func:`.read_ahead.cache_key`)."""
        return read_ahead.cache_key(self)

    def warm_up(self, ids: list[int], key: str | None, request_id: str | None = None) -> dict:
        """Put ``ids`` (:meth:`warm_up_ids`) in the server's cache for the conversation
        ``key`` names (:meth:`cache_key`; both read on the conversation's thread: the
        user may open another one meanwhile); blocking, the restore or prefill may take
        minutes; ``request_id`` lets ``backend.abort`` stop it.  Returns the server's answer."""
        room = self.settings.max_new_tokens
        if getattr(self.backend, "restores", False) and key:
            return self.backend.restore(ids, max_length=room, conversation=key, request_id=request_id)
        if self.can_read_ahead:
            return self.backend.prepare(ids, max_length=room)
        return {}

    def save_server_cache(self) -> int:
        """Ask a server that keeps no cache per conversation itself to save this one's
        (llama-server's slot, :meth:`~halo_weave.backends.llama_server.LlamaServer.save_cache`);
        blocking.  Returns the tokens saved (0 where the server saves none)."""
        save = getattr(self.backend, "save_cache", None)
        return save() if callable(save) else 0

    @property
    def can_read_ahead(self) -> bool:
        """Whether the server takes the prompt of a message being typed (:mod:`.read_ahead`)."""
        return read_ahead.can_read_ahead(self)

    def draft_ids(self, index, matches, ids: list[int]) -> list[int]:
        """The prompt a message of ``ids`` would start with once sent, nothing changed
        (see :func:`.read_ahead.draft_ids`)."""
        return read_ahead.draft_ids(self, index, matches, ids)

    def add_user_message(self, ids: list[int], texts: list[str], created_at: float | None = None,
                         recalled: Iterable[Chunk] = ()) -> Turn:
        """Add the user's turn and save it before anything shows it (DB-first);
        ``recalled``: what :meth:`resurrect_for` brought back for it.

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
        (a recall note takes what room is left: :meth:`note_room`)."""
        limit = self.window_limit()
        return self.prune(limit) if self.conv.live_token_count() > limit > 0 else []

    def window_limit(self) -> int:
        """The prompt tokens the model's window leaves beside the answer (0 when unknown)."""
        if self.max_context <= 0:
            return 0
        frame = sum(len(ids) for ids, _ in [self.framing.prefix.get("assistant", ([], []))]) if self.framing else 0
        return self.max_context - self.settings.max_new_tokens - frame

    @property
    def prunes_for_room(self) -> bool:
        """``prune_when = "for_room"`` with a known window (:mod:`halo_weave.memory.room`)."""
        return self.settings.prune_when == "for_room" and self.window_limit() > 0

    @property
    def makes_room(self) -> bool:
        """Whether a message's resurrection prunes just enough to make its room
        (:mod:`halo_weave.memory.room`): pruning only for room, or a keep share below 1."""
        return self.prunes_for_room or (room.shares_room(self.settings) and self.window_limit() > 0)

    @property
    def prune_order(self) -> str | None:
        """The prune order in force: None (the settings'), or, while nothing measures
        brightness, one that needs none (unless the reader's attention is asked to rank
        chunks: :attr:`proxy_ranks`)."""
        return None if self.attention_available or self.proxy_ranks else WITHOUT_BRIGHTNESS

    # ------------------------------------------------------------------ the answer
    def begin_turn(self) -> None:
        """A message is on its way: the answer's token count starts at zero, its clock runs."""
        self.streamed = 0
        self.clock.start()

    def begin_answer(self, prefix: Iterable[tuple[int, str]] = (), *, role: str = "assistant",
                     created_at: float | None = None) -> None:
        """Open the assistant turn; ``prefix`` (a prefill) is put at its start.

        ``role="user"``: a turn whose tokens stream in like an answer (the memory
        benchmark scores user turns by their prefill attention that way).
        """
        self.conv.begin_turn(role, created_at)
        self._new_answer()
        for token_id, piece in prefix:
            self.conv.append_token(int(token_id), piece)
            self.streamed += 1

    def _new_answer(self) -> None:
        self._resumed = False  # resume_answer sets it after this
        self.streamed = 0
        self._started = time.monotonic()
        self._attention_seen = False
        self._attention_errors = 0
        self.round = 0

    def generation_request(self) -> dict:
        """The next round's request: the live context and the sampler settings."""
        self.round += 1
        s = self.settings
        ids = [int(i) for i in self.conv.live_input_ids()]
        self._note = self.recall_note()
        if self._note is not None:
            ids = self._note.insert(ids)
        return dict(
            input_ids=ids,
            max_length=s.max_new_tokens,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            rep_pen=s.rep_pen,
            sampler_seed=s.sampler_seed,
            stop_sequence=[*(self.template.stops or STOP_SEQUENCES), notebook.STOP_SEQUENCE],
            output_attentions=True,
            attention_format=s.attention_format,
            request_id=uuid.uuid4().hex,
        )

    def receive(self, event: TokenEvent) -> bool:
        """One streamed token: brightness moves, then the token joins; False if dropped.

        The attention covers the context as it was when this token was produced, so it
        is applied before the token is appended, and not kept afterwards.
        """
        conv = self.conv
        if conv is None or conv.open_turn is None or event.token_id in self._stop_ids:
            return False
        self.clock.token()
        attention = event.attention
        note = self._note
        if attention is not None and note is not None and attention.size == conv.live_token_count() + len(note):
            attention = note.remove(attention)
        if attention is not None:
            self._attention_seen = True
            try:
                conv.apply_attention(attention)
            except AttentionError as exc:
                self._attention_errors += 1
                if self._attention_errors == 1:
                    self.report(exc, "Brightness update")
        if self.capture.recording:
            try:
                self.capture.record(conv, event.token_id, event.text, attention)
            except Exception as exc:  # noqa: BLE001 - a full disk stops the recording, not the answer
                self.finish_capture("recording failed")
                self.report(exc, "Recording attention")
        conv.append_token(event.token_id, event.text)
        self.streamed += 1
        if self.streamed % STREAM_SAVE_EVERY == 0:
            self.save(lambda: self.store.save_stream_progress(conv), "Saving the answer")
        return True

    def finish_turn(self, reason: str, rate: float | None = None, *, prune: bool = True) -> TurnEnd:
        """Close the answer: save it and its brightness, queue indexing, prune, save.

        ``prune=False``: the exchange goes on (a turn the benchmark streams mid-exchange).
        """
        conv = self.conv
        elapsed = max(time.monotonic() - self._started, 1e-6)
        self.clock.stop()
        self.tokens_per_s = float(rate) if rate else (self.clock.tokens_per_s or self.streamed / elapsed)
        self.last_finish_reason = reason
        if conv is None or conv.open_turn is None:
            return TurnEnd(reason, None)
        turn = conv.end_turn()
        self._note = None
        before = self.attention_available
        if self.streamed and not self._attention_seen and self.attention_available:
            self.attention_available = False
        elif self._attention_seen and not self.attention_available:
            self.attention_available = True
        self.save(lambda: self.store.save_turn(conv, turn), "Saving the answer")
        self.save(lambda: self.store.save_brightness(conv), "Saving brightness")
        if self.indexer is not None:
            self.indexer.queue_pending(conv)  # the answer, and the question whose context now has it
        pruned = self.prune() if prune else []
        nothing_added = self._resumed and self.streamed == 0 and reason == "stop"
        return TurnEnd(reason, turn, pruned, self.attention_available != before, nothing_added)

    def prune(self, limit: int | None = None) -> list[Chunk]:
        """Prune to ``limit`` (default: the max-context setting, with hysteresis; pruning
        only for room, the model's window) and save.  Never the exchange the user just read;
        in :attr:`prune_order`."""
        conv = self.conv
        if limit is None and self.prunes_for_room:
            limit = self.window_limit()
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

    # ------------------------------------------------------------------ the last exchange
    # Continue, Regenerate, Edit and resend, answer versions: see :mod:`.last_exchange`.
    def last_exchange(self) -> tuple[Turn | None, Turn | None]:
        return last_exchange.last_exchange(self)

    def answer_versions(self):
        return last_exchange.answer_versions(self)

    def question_text(self) -> str:
        return last_exchange.question_text(self)

    def regenerate(self) -> list[Chunk]:
        return last_exchange.regenerate(self)

    def show_version(self, step: int) -> Turn:
        return last_exchange.show_version(self, step)

    def replace_question(self, ids: list[int], texts: list[str]) -> Turn:
        return last_exchange.replace_question(self, ids, texts)

    def resume_answer(self) -> Turn:
        """Continue: reopen the last answer; new tokens join its last chunk."""
        turn = last_exchange.resume_answer(self)
        self._new_answer()
        self._resumed = True
        return turn

    # ------------------------------------------------------------------ tool rounds, capture
    # See :mod:`.rounds`.
    def answer_text(self) -> str:
        return rounds.answer_text(self)

    def answer_has_tool_call(self) -> bool:
        return rounds.answer_has_tool_call(self)

    def apply_tool_step(self, step, prefix, result) -> bool:
        return rounds.apply_tool_step(self, step, prefix, result)

    def start_capture(self, capture_dir, params: dict, path: Any = None) -> None:
        rounds.start_capture(self, capture_dir, params, path)

    def finish_capture(self, reason: str):
        return rounds.finish_capture(self, reason)

    # ------------------------------------------------------------------ the user's levers
    # See :mod:`.levers`.
    def resurrect_chunk(self, chunk_id: int, *, pin: bool = True) -> list[Chunk]:
        return levers.resurrect_chunk(self, chunk_id, pin)

    def pin(self, chunk_id: int, pinned: bool = True) -> None:
        levers.pin(self, chunk_id, pinned)

    def merge_with_next(self, chunk_id: int) -> None:
        levers.merge_with_next(self, chunk_id)

    def prune_chunk(self, chunk_id: int) -> list[Chunk]:
        return levers.prune_chunk(self, chunk_id)

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
