"""The conversation: turns, chunks and the live token table.

Everything that decides what the model sees lives here, Qt-free and without I/O:

* Turns are added whole (a user message, tokenized once) or streamed token by token (an
  answer) through :meth:`Conversation.begin_turn`, :meth:`~Conversation.append_token` and
  :meth:`~Conversation.end_turn` (its writer, :mod:`.core.turn_writer`, also hands out
  positions and ids).  Each turn is wrapped in chat-template framing tokens that belong
  to the turn: they are never scored and never pruned on their own; they are live exactly
  while some content chunk of their turn is live.  The system prompt
  (:attr:`Conversation.system`) is a fixed prefix of the input, never scored and never
  pruned.
* Content is cut into chunks at paragraph / code boundaries (see :mod:`.core.chunking`).  A
  chunk is identified by ``(turn_id, chunk_index, role)``; chunk 0 is the turn's anchor.
* :meth:`Conversation.apply_attention` runs one step of the settings' brightness rule per
  generated token (:mod:`.rules.brightness_rules`).
* :meth:`Conversation.prune_to_fit` drops unpinned chunks in the settings' prune order
  (:mod:`.rules.prune_orders`: dimmest or oldest first) until the context fits
  (:mod:`.core.pruning`), with anchor protection (:mod:`.core.anchors`: what leaves
  and comes back together).
* :meth:`Conversation.resurrect` (:mod:`.core.token_resurrection`), :meth:`pin`, :meth:`merge_with_next`,
  :meth:`prune_chunk` are the user's and the semantic index's levers.
* :attr:`Conversation.recalls` says what each user message's search brought back
  (:mod:`.core.recall`); those chunks stay marked until they are pruned.

:meth:`Conversation.trial` (or :meth:`~Conversation.snapshot` and
:meth:`~Conversation.restore`) tries a change and takes it back exactly: a save that
failed, a question the memory benchmark asks without keeping its answer.

Only live tokens are held in the columnar :class:`TokenTable`; a pruned chunk's tokens
move to a per-chunk record (:class:`~.core.held_tokens.HeldTokens`), and chunks that were
already pruned when the conversation was opened are fetched through ``chunk_loader`` (the
store) when they come back.  A conversation read from storage is built by
:meth:`Conversation.from_records`; its turns and chunks stay numpy columns until they are
used (:mod:`.core.registry`).

The conversation owns all of this: its parts are private and read through read-only
properties (:attr:`~Conversation.table`, :attr:`~Conversation.chunks`, ...), and only its
methods change them (with the :mod:`.core` modules they hand themselves to);
``tests/test_conversation_parts.py`` checks that no other module writes through a part.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterable, Iterator, Mapping, Sequence

import numpy as np

from . import brightness as bright
from .core import merging, pruning, recall, table_from_records, token_resurrection
from .core.framing import Framing, SystemPrompt
from .core.recall import RecallLog
from .core.records import Chunk, ChunkLoader, ChunkTokens, Turn  # noqa: F401 - importable from here too
from .core.registry import ChunkColumns, ChunkList, ChunkRegistry, TurnColumns, TurnRegistry
from .core.token_table import TokenTable
from .core.held_tokens import HeldTokens
from .core.turn_writer import TurnWriter
from .errors import ConversationError
from .rules import brightness_rule, prune_order
from .settings import MAX_BRIGHTNESS, Settings


@dataclass(frozen=True)
class Snapshot:
    """A conversation's state at one moment (:meth:`Conversation.snapshot`); opaque."""

    table: dict
    chunks: tuple
    turns: tuple
    held: tuple
    recalls: dict
    writer: tuple
    system: tuple
    role_names: dict


class Conversation:
    """One endless conversation: see the module docstring."""

    def __init__(self, settings: Settings | None = None, framing: Framing | None = None, *,
                 role_names: dict[str, str] | None = None) -> None:
        self._settings = settings or Settings()
        self._framing = framing or Framing.none()
        #: Every chunk / turn by id; those read from storage stay columns until used.
        self._chunks = ChunkRegistry()
        self._turns = TurnRegistry(self._chunks.ids_of_turn)
        self._table = TokenTable()
        #: The system prompt: its text and the prefix the model reads before every turn.
        self._system = SystemPrompt()
        #: Names shown for a role instead of "User" / "Assistant" (an imported character's).
        self._role_names: dict[str, str] = dict(role_names or {})
        #: Token texts of the live chunks (and of those pruned in this session), and the
        #: tokens of the chunks pruned in this session, kept for a cheap resurrection.
        self._held = HeldTokens()
        self._chunk_loader: ChunkLoader | None = None
        #: What each user message recalled (:mod:`.core.recall`).
        self._recalls = RecallLog()
        #: The turn being written (begin / append / end, resume, reopen_answer) and the
        #: counters it allocates positions and ids from; written through this class only.
        self._writer = TurnWriter(self)

    # ------------------------------------------------------------------ its parts, to read
    # Each part is changed only by this class's methods (and the core modules they call);
    # tests/test_conversation_parts.py checks that nothing else writes through them.
    @property
    def settings(self) -> Settings:
        """The settings it scores and prunes by (:meth:`use_settings`)."""
        return self._settings

    @property
    def framing(self) -> Framing:
        """The chat-template framing of new turns (:meth:`use_framing`)."""
        return self._framing

    @property
    def chunks(self) -> ChunkRegistry:
        """Every chunk by id; those read from storage stay columns until used."""
        return self._chunks

    @property
    def turns(self) -> TurnRegistry:
        """Every turn by id."""
        return self._turns

    @property
    def table(self) -> TokenTable:
        """The live tokens, one column each (id, position, brightness, chunk, turn, framing)."""
        return self._table

    @property
    def system(self) -> SystemPrompt:
        """The system prompt (:meth:`set_system_prompt`)."""
        return self._system

    @property
    def role_names(self) -> Mapping[str, str]:
        """Names shown for a role instead of "User" / "Assistant" (read-only)."""
        return MappingProxyType(self._role_names)

    @property
    def held(self) -> HeldTokens:
        """The token texts of the live chunks and the tokens of those pruned this session."""
        return self._held

    @property
    def chunk_loader(self) -> ChunkLoader | None:
        """Fetches the tokens of chunks pruned before this session (the store's)."""
        return self._chunk_loader

    @property
    def recalls(self) -> RecallLog:
        """What each user message recalled (:meth:`record_recall`)."""
        return self._recalls

    @classmethod
    def from_records(
        cls,
        turns: TurnColumns,
        chunks: ChunkColumns,
        live_tokens: tuple[np.ndarray, np.ndarray, ChunkTokens],
        *,
        settings: Settings | None = None,
        framing: Framing | None = None,
        system: tuple[str, Sequence[int], Sequence[str]] = ("", (), ()),
        role_names: dict[str, str] | None = None,
        counters: tuple[int, int, int] = (0, 0, 0),
        recalls: dict[int, list[tuple[int, bool]]] | None = None,
        chunk_loader: ChunkLoader | None = None,
    ) -> Conversation:
        """A conversation read back from storage (rehydration).

        ``turns`` and ``chunks``: every turn and chunk record, chunks in position order
        (they stay columns until used, :mod:`.core.registry`); ``live_tokens``: the live
        chunks' ids, their token counts and their tokens concatenated in position order
        (:func:`.core.table_from_records.take_records`).  ``system``: the system prompt's
        text, ids and token texts; ``role_names``: names shown for the roles;
        ``counters``: the stored next position, turn id and chunk id (the records' own
        ends win when larger); ``recalls``: what each message recalled,
        ``turn_id -> [(chunk_id, marked), ...]`` (:func:`.core.recall.take_stored`);
        ``chunk_loader``: fetches the tokens of chunks pruned before opening.  A turn left
        open by a crash stays open: :meth:`close_crashed_turns`.
        """
        conv = cls(settings, framing, role_names=role_names)
        conv.set_system_prompt(*system)
        table_from_records.take_records(conv, turns, chunks, *live_tokens)
        last = len(chunks) - 1
        end = int(chunks.start[last] + chunks.token_count[last]) if len(chunks) else 0
        chunk_end = int(chunks.id.max()) + 1 if len(chunks) else 0
        turn_end = int(turns.turn_id[-1]) + 1 if len(turns) else 0
        position, turn_id, chunk_id = counters
        conv.continue_counters(max(position, end), max(turn_id, turn_end), max(chunk_id, chunk_end))
        conv.use_chunk_loader(chunk_loader)
        if recalls:
            recall.take_stored(conv, recalls)
        return conv

    def close_crashed_turns(self) -> list[Turn]:
        """Close the turns read back incomplete (an answer a crash interrupted): the last
        one gets its suffix framing as if it had ended; returns them (to be saved)."""
        incomplete = [self._turns[t] for t in self._turns.incomplete()]
        last = self._turns.last()
        for turn in incomplete:
            if turn.turn_id == last:
                self._writer.resume(last)
                self._writer.end()
            else:  # cannot happen through this API; closing it keeps positions ordered
                turn.complete = True
        return incomplete

    def add_stored_chunk(self, turn: Turn, chunk: Chunk, tokens: ChunkTokens | None) -> None:
        """Re-register one chunk read from storage, its turn the first time it is seen;
        ``tokens`` for a live chunk.  Chunks come in position order (a forecast rebuilt
        from stored rows, :mod:`.storage.prune_forecast`)."""
        if turn.turn_id not in self._turns:
            self._turns[turn.turn_id] = turn
        table_from_records.add_chunk(self, chunk, tokens)

    # ------------------------------------------------------------------ building

    def use_settings(self, settings: Settings) -> None:
        """Score and prune by ``settings`` from the next token on."""
        self._settings = settings

    def continue_counters(self, position: int, turn_id: int, chunk_id: int) -> None:
        """The next token position, turn id and chunk id to hand out (a file's stored
        counters, read back)."""
        self._writer.take_counters(position, turn_id, chunk_id)

    def use_chunk_loader(self, loader: ChunkLoader | None) -> None:
        """Fetch the tokens of chunks pruned before this session through ``loader``."""
        self._chunk_loader = loader

    def use_framing(self, framing: Framing) -> None:
        """Frame the turns written from now on with ``framing`` (a connected model's chat
        template); turns already written keep theirs."""
        self._framing = framing

    def set_system_prompt(self, text: str, token_ids: Sequence[int], texts: Sequence[str]) -> None:
        """The system prompt: its text and its tokens, the fixed prefix of every input."""
        self._system.set(text, token_ids, texts)

    def record_recall(self, turn_id: int, chunk_ids: Iterable[int]) -> None:
        """The message ``turn_id`` recalled ``chunk_ids`` (in that order); the live ones
        are marked as recalled for it (:func:`.core.recall.record`)."""
        recall.record(self, turn_id, chunk_ids)

    def move_recall(self, old_turn: int, new_turn: int, chunk_ids: Iterable[int]) -> None:
        """The message ``old_turn`` was replaced by ``new_turn`` (edited and sent again):
        what it recalled, ``chunk_ids``, and its marks go to the new one."""
        recall.move(self, old_turn, new_turn, chunk_ids)

    # ------------------------------------------------------------------ the open turn
    @property
    def open_turn(self) -> Turn | None:
        """The turn being written (an answer streaming in), None between turns."""
        return self._writer.turn

    @property
    def next_position(self) -> int:
        """The position the next token takes (positions are never reused)."""
        return self._writer.next_position

    @property
    def next_turn_id(self) -> int:
        """The id the next turn takes."""
        return self._writer.next_turn_id

    @property
    def next_chunk_id(self) -> int:
        """The id the next chunk takes."""
        return self._writer.next_chunk_id

    def begin_turn(self, role: str, created_at: float | None = None) -> Turn:
        """Open a turn (``user``, ``assistant`` or ``document``; its prefix framing is
        added); its tokens then come through :meth:`append_token`."""
        return self._writer.begin(role, created_at)

    def append_token(self, token_id: int, text: str, *, tool_result: bool = False) -> Chunk:
        """Append one content token to the open turn; returns the chunk it joined (a new
        one at a paragraph boundary, or where a tool result starts or ends)."""
        return self._writer.append(token_id, text, tool_result=tool_result)

    def end_turn(self) -> Turn:
        """Close the open turn (its suffix framing is added)."""
        return self._writer.end()

    def resume_turn(self, turn_id: int) -> Turn:
        """Reopen the last turn (read back incomplete after a crash) to extend or close it."""
        return self._writer.resume(turn_id)

    def reopen_answer(self) -> tuple[Turn, list[Chunk]]:
        """Reopen the last turn, an answer, to extend it (Continue): its closing framing
        is taken away until :meth:`end_turn`.  Returns the turn and the removed framing
        chunks (see :meth:`.core.turn_writer.TurnWriter.reopen_answer`)."""
        return self._writer.reopen_answer()

    def add_turn(
        self,
        role: str,
        token_ids: Sequence[int],
        texts: Sequence[str],
        created_at: float | None = None,
    ) -> Turn:
        """Add a complete message (already tokenized once) with its framing."""
        turn = self._writer.begin(role, created_at)
        for token_id, text in zip(token_ids, texts, strict=True):
            self._writer.append(token_id, text)
        self._writer.end()
        return turn

    def add_document(
        self,
        paragraphs: Iterable[tuple[Sequence[int], Sequence[str]]],
        created_at: float | None = None,
    ) -> Turn:
        """Add an attached document as one ``document`` turn, live: each of ``paragraphs``
        (its tokens, label first: :mod:`.core.documents`) one chunk, cut where it is."""
        turn = self._writer.begin("document", created_at)
        for token_ids, texts in paragraphs:
            self._writer.break_chunk()
            for token_id, text in zip(token_ids, texts, strict=True):
                self._writer.append(int(token_id), text)
        self._writer.end()
        return turn

    def prune_turn(self, turn_id: int) -> list[Chunk]:
        """Prune every live content chunk of a closed turn at once (an attached document
        put straight into the memory); anchors do not hold them.  Returns what was pruned."""
        if self._writer.turn is not None and self._writer.turn.turn_id == turn_id:
            raise ConversationError("cannot prune the turn being written")
        live = [c for c in self.content_chunks(turn_id) if c.live]
        for chunk in live:
            chunk.pinned = False
        return self._prune_chunks(live) if live else []

    def remove_turns_from(self, turn_id: int | None = None) -> list[Chunk]:
        """Take every (closed) turn from ``turn_id`` on out of the conversation entirely:
        the last turn when ``turn_id`` is None (regenerate, edit), a whole tail when a
        branch is stashed.

        Returns their chunks; positions and ids are not reused.  The caller deletes them
        from the store and the semantic index.
        """
        if self._writer.turn is not None:
            raise ConversationError("a turn is still open")
        if turn_id is None:
            if not self._turns:
                raise ConversationError("no turn to remove")
            turn_id = self._turns.last()
        turn_ids = [t for t in self._turns if t >= turn_id]
        chunks = [self._chunks[c] for t in turn_ids for c in self._turns[t].chunk_ids]
        ids = np.fromiter((c.id for c in chunks), np.int32, len(chunks))
        self._table.keep(~np.isin(self._table.chunk_id, ids))
        for chunk in chunks:
            del self._chunks[chunk.id]
            self._held.forget(chunk.id)
        for tid in turn_ids:
            del self._turns[tid]
            self._recalls.forget(tid)
        return chunks

    # ------------------------------------------------------------------ trials
    def snapshot(self) -> Snapshot:
        """Everything this conversation holds, copied, for :meth:`restore`: the token
        table, every turn and chunk with its fields (live, pinned, brightness at prune,
        ``resurrected_at``, ``recalled_for``, ...), the held texts and pruned tokens, the
        recalls, the open turn, the id counters and the system prompt.  Settings, framing and the chunk loader
        are not the conversation's state and are left out."""
        return Snapshot(
            table=self._table.snapshot(), chunks=self._chunks.snapshot(), turns=self._turns.snapshot(),
            held=self._held.snapshot(), recalls=dict(self._recalls.items()), writer=self._writer.snapshot(),
            system=self._system.snapshot(),
            role_names=dict(self._role_names),
        )

    def restore(self, snapshot: Snapshot) -> None:
        """Go back exactly to ``snapshot`` (taken of this conversation): whatever was
        changed since — a prune, a resurrection, brightness, a pin, a merge, a turn — is
        taken back.  The chunk and turn objects are the same ones, with their old fields;
        the snapshot stays usable."""
        self._table.restore(snapshot.table)
        self._chunks.restore(snapshot.chunks)
        self._turns.restore(snapshot.turns)
        self._held.restore(snapshot.held)
        self._recalls.clear()
        for turn_id, chunk_ids in snapshot.recalls.items():
            self._recalls.put(turn_id, chunk_ids)
        self._writer.restore(snapshot.writer)
        self._system.restore(snapshot.system)
        self._role_names = dict(snapshot.role_names)

    @contextmanager
    def trial(self) -> Iterator[Conversation]:
        """Try changes and take them back: inside the block the conversation may be
        pruned, resurrected, scored and read; when the block ends (normally or by an
        error) it is as it was before (:meth:`restore`).

        >>> with conv.trial():  # doctest: +SKIP
        ...     conv.prune_to_fit(500)
        ...     fits = conv.live_token_count()
        """
        saved = self.snapshot()
        try:
            yield self
        finally:
            self.restore(saved)

    # ------------------------------------------------------------------ reading
    def live_input_ids(self) -> np.ndarray:
        """The ids sent to the model: system prefix + live tokens in position order."""
        return np.concatenate((self._system.ids, self._table.token_id)).astype(np.int32)

    def live_token_count(self) -> int:
        """Tokens the model sees now, system prompt included."""
        return len(self._system.ids) + len(self._table)

    def total_token_count(self) -> int:
        """Tokens of every message of the conversation (the branch shown), live or
        pruned: the words written, without the system prompt or the chat template around
        each message, so pruning, recalling and reopening never change it (other versions
        of an answer are not part of it)."""
        live = len(self._table) - self._chunks.live_framing_tokens()
        return live + self._chunks.pruned_content_tokens()

    def chunk_by_key(self, turn_id: int, chunk_index: int, role: str) -> Chunk | None:
        turn = self._turns.get(turn_id)
        if turn is None or turn.role != role:
            return None
        return next((c for c in map(self._chunks.__getitem__, turn.chunk_ids)
                     if c.chunk_index == chunk_index), None)

    def content_chunks(self, turn_id: int) -> list[Chunk]:
        """The non-framing chunks of a turn, in order."""
        return [self._chunks[c] for c in self._turns[turn_id].chunk_ids if not self._chunks[c].framing]

    def live_chunks(self) -> list[Chunk]:
        """Live chunks in position order (framing included)."""
        ids, _ = self._table.chunk_spans()
        return [self._chunks[int(c)] for c in ids]

    def chunk_rows(self, chunk: Chunk) -> slice:
        """Rows of a live chunk in the token table."""
        if not chunk.live:
            raise ConversationError(f"chunk {chunk.key} is not live")
        return self._table.rows_of_chunk(chunk.id, chunk.start, chunk.token_count)

    def chunk_texts(self, chunk_id: int) -> list[str]:
        """Token texts of a chunk (loading a long-pruned chunk through the store)."""
        texts = self._held.texts(chunk_id)
        if texts is None:
            texts = pruning.load_pruned(self, [chunk_id])[chunk_id].texts
            self._held.put(chunk_id, texts)
            texts = self._held.texts(chunk_id)
        return texts

    def chunk_text(self, chunk_id: int) -> str:
        return "".join(self.chunk_texts(chunk_id))

    def chunk_tokens(self, chunk_id: int) -> ChunkTokens:
        """A copy of a chunk's tokens, live or pruned."""
        chunk = self._chunks[chunk_id]
        if chunk.live:
            rows = self.chunk_rows(chunk)
            return ChunkTokens(
                self._table.token_id[rows].copy(), list(self._held.texts(chunk_id)),
                self._table.brightness[rows].copy(),
            )
        return pruning.load_pruned(self, [chunk_id])[chunk_id]

    def tokens_in_memory(self, chunk_id: int) -> ChunkTokens | None:
        """A chunk's tokens when held in memory (live, or pruned this session), else None."""
        chunk = self._chunks[chunk_id]
        if chunk.live:
            return self.chunk_tokens(chunk_id)
        return self._held.pruned(chunk_id)

    def chunk_peaks(self) -> tuple[np.ndarray, np.ndarray]:
        """(chunk ids, score) of the live chunks, in position order: the score pruning
        ranks by and the heatmap colours by (peak or top-k mean, ``chunk_rank``)."""
        ids, starts = self._table.chunk_spans()
        if len(ids) == 0:
            return ids, np.zeros(0, np.int32)
        s = self._settings.brightness
        return ids, bright.chunk_scores(self._table.brightness, starts, s.chunk_rank, s.chunk_rank_k)

    def chunk_peak(self, chunk_id: int) -> int:
        """A chunk's score (see :meth:`chunk_peaks`); a pruned one's peak when pruned."""
        chunk = self._chunks[chunk_id]
        if chunk.live:
            values = self._table.brightness[self.chunk_rows(chunk)]
            s = self._settings.brightness
            return int(bright.chunk_scores(values, np.zeros(1, np.int64), s.chunk_rank, s.chunk_rank_k)[0])
        return int(chunk.brightness_at_prune or 0)

    def mean_brightness(self) -> float:
        """Mean brightness of the live content tokens (shown; may seed resurrection)."""
        content = self._table.brightness[~self._table.framing]
        return float(content.mean()) if content.size else float(self._settings.brightness.initial_brightness)

    def graveyard(self) -> ChunkList:
        """Pruned content chunks, newest first (each made an object when first read)."""
        ids, _ = self._chunks.pruned_content()
        return ChunkList(self._chunks, ids[::-1].tolist())

    # ------------------------------------------------------------------ brightness
    def apply_attention(self, attention: np.ndarray) -> None:
        """One brightness step from one generated token's attention, by the settings'
        ``brightness_rule`` (:mod:`.rules.brightness_rules`).

        ``attention`` covers the whole input (system prefix + live tokens) as sent; its
        length must equal :meth:`live_token_count` at the time the token was produced.
        """
        n_system = len(self._system.ids)
        if attention.shape != (n_system + len(self._table),):
            raise bright.AttentionError(
                f"attention has {attention.size} cells, context has {self.live_token_count()}"
            )
        # Attention votes on content tokens (and not on the open turn's, if so set).
        mask = ~self._table.framing
        if not self._settings.brightness.score_current_turn and self._writer.turn is not None:
            mask &= self._table.turn_id != self._writer.turn.turn_id
        rule = brightness_rule(self._settings.brightness.brightness_rule)
        rule.step(self._table.brightness, attention[n_system:], bright.vote_threshold(attention),
                  self._settings.brightness, mask=mask)

    def set_brightness(self, values: Sequence[int] | np.ndarray) -> None:
        """Give the live tokens these brightness values, one per token in position order
        (a benchmark staging a long-used conversation); the system prompt has none."""
        if len(values) != len(self._table):
            raise ConversationError(f"{len(values)} brightness values for {len(self._table)} live tokens")
        self._table.brightness[:] = values

    # ------------------------------------------------------------------ pruning
    def prune_to_fit(
        self,
        max_tokens: int | None = None,
        *,
        target: int | None = None,
        order: str | None = None,
        keep_latest_exchange: bool = False,
        keep: frozenset[int] | set[int] = frozenset(),
    ) -> list[Chunk]:
        """Prune the dimmest chunks when the context is over ``max_tokens`` (0 = never).

        Pruning goes down to ``target``.  Without explicit numbers (the app's path) the
        limit is ``max_context_tokens`` and the target ``prune_hysteresis`` times it, so
        pruning happens in fewer, larger steps: each prune costs the server a re-prefill
        of everything after the cut.  Chunks go in the settings' ``prune_order``, or in
        ``order`` when given (a name in :data:`.rules.PRUNE_ORDERS`: the session names
        one that needs no brightness while nothing measures it); an anchor pair leaves
        together (:mod:`.core.pruning`).  ``keep_latest_exchange`` spares the last
        user turn and its answer (the app's automatic pruning: what the user just read
        stays, with what was resurrected for that message); ``keep``: chunk ids that stay.
        Returns every chunk pruned (framing included).
        """
        if max_tokens is None:
            limit = self._settings.pruning.max_context_tokens
            goal = int(limit * self._settings.pruning.prune_hysteresis) if target is None else target
        else:
            limit = max_tokens
            goal = limit if target is None else target
        if limit <= 0 or self.live_token_count() <= limit:
            return []
        rank = prune_order(order or self._settings.pruning.prune_order)
        spared = self._turns.last("user") if keep_latest_exchange else None
        chosen = pruning.select(self, self.live_token_count() - goal, order=rank, spared=spared, keep=keep)
        return self._prune_chunks(chosen) if chosen else []

    def prune_chunk(self, chunk_id: int) -> list[Chunk]:
        """Prune one chunk by hand (the user's decision overrides anchor protection)."""
        chunk = self._chunks[chunk_id]
        if chunk.framing or not chunk.live:
            raise ConversationError(f"chunk {chunk.key} cannot be pruned")
        if self._writer.turn is not None and chunk.turn_id == self._writer.turn.turn_id:
            raise ConversationError("cannot prune from the turn being generated")
        chunk.pinned = False
        return self._prune_chunks([chunk])

    def _prune_chunks(self, chunks: list[Chunk]) -> list[Chunk]:
        """Move chunks (and framing of turns left empty) out of the live table."""
        return pruning.take_out(self, chunks)

    # ------------------------------------------------------------------ resurrection
    def resurrect(
        self,
        chunk_ids: Iterable[int],
        *,
        brightness: str | int = "at_prune",
        pin: bool = False,
        with_anchors: bool = True,
    ) -> list[Chunk]:
        """Bring pruned chunks back at their original place.

        ``brightness`` is ``"at_prune"`` (no gifts), ``"mean"`` (mean live
        brightness) or a number (manual resurrection uses 10000 with ``pin=True``).
        Returns the chunks that came back (anchors and framing included).
        """
        chunk_ids = list(chunk_ids)
        resurrected = token_resurrection.returning(self, chunk_ids, with_anchors)
        if pin:
            for chunk_id in chunk_ids:
                self._chunks[chunk_id].pinned = True
        if not resurrected:
            return []
        mean = int(round(self.mean_brightness()))
        tokens = pruning.load_pruned(self, [c.id for c in resurrected])
        for chunk in resurrected:
            data = tokens[chunk.id]
            values = (np.full(chunk.token_count, self._settings.brightness.initial_brightness, np.int32) if chunk.framing
                      else bright.resurrected(brightness, data.brightness, mean))
            token_resurrection.put_back(self, chunk, data, values)
        return resurrected

    # ------------------------------------------------------------------ user levers
    def pin(self, chunk_id: int, pinned: bool = True) -> Chunk:
        """Pin (brightness 10000, never pruned) or unpin a live chunk."""
        chunk = self._chunks[chunk_id]
        if chunk.framing:
            raise ConversationError("framing tokens cannot be pinned")
        if pinned and not chunk.live:
            self.resurrect([chunk_id], brightness=MAX_BRIGHTNESS, pin=True)
            return chunk
        chunk.pinned = pinned
        if pinned:
            self._table.brightness[self.chunk_rows(chunk)] = MAX_BRIGHTNESS
        return chunk

    def merge_with_next(self, chunk_id: int) -> tuple[Chunk, Chunk]:
        """Merge a live chunk with the next content chunk of its turn; ``(kept, absorbed)``
        (see :func:`.core.merging.merge_with_next`)."""
        return merging.merge_with_next(self, chunk_id)
