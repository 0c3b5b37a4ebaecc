"""The open turn of a conversation: its framing, its streamed tokens and their chunks.

A :class:`~halo_weave.conversation.Conversation` owns one :class:`TurnWriter`; every turn
is written through it, whole (a user message) or token by token (an answer).  It keeps
what only the open turn needs: the turn itself and the paragraph-boundary detector that
decides where the next chunk starts (:mod:`.chunking`), and the counters every new turn,
chunk and token takes its id or position from.
"""

from __future__ import annotations

import copy
import time
from typing import Sequence

import numpy as np

from ..errors import ConversationError
from ..rules import new_token_brightness
from .chunking import BoundaryDetector
from .records import PREFIX_INDEX, SUFFIX_INDEX, Chunk, Turn


class TurnWriter:
    """Opens, extends and closes the conversation's one open turn.

    ``conv`` is the owning conversation (not imported here: it sits a layer above).
    """

    def __init__(self, conv) -> None:
        self.conv = conv
        self.turn: Turn | None = None
        self._detector = BoundaryDetector()
        self._boundary_pending = False
        #: Brightness the open turn's tokens start with (:meth:`_start_brightness`).
        self.start = conv.settings.brightness.initial_brightness
        #: The next token's position and the next turn's and chunk's ids (never reused).
        self.next_position = 0
        self.next_turn_id = 0
        self.next_chunk_id = 0

    def snapshot(self) -> tuple:
        """The open turn, where its text stands and the counters (for :meth:`restore`)."""
        return (self.turn, copy.copy(self._detector), self._boundary_pending, self.start,
                self.next_position, self.next_turn_id, self.next_chunk_id)

    def restore(self, snapshot: tuple) -> None:
        """Back to what :meth:`snapshot` saw (the snapshot stays usable)."""
        (self.turn, detector, self._boundary_pending, self.start,
         self.next_position, self.next_turn_id, self.next_chunk_id) = snapshot
        self._detector = copy.copy(detector)

    def take_counters(self, position: int, turn_id: int, chunk_id: int) -> None:
        """Go on from counters read back from storage (a conversation reopened)."""
        self.next_position, self.next_turn_id, self.next_chunk_id = position, turn_id, chunk_id

    def _start_brightness(self) -> int:
        """Where a new turn's tokens start: the cap ("fail bright") or the live median of
        the scored tokens (``new_token_brightness``)."""
        s, table = self.conv.settings.brightness, self.conv.table
        return new_token_brightness(s.new_token_brightness).start(table.brightness[~table.framing],
                                                                  s.initial_brightness)

    def _open(self, turn: Turn) -> Turn:
        self.turn = turn
        self._detector = BoundaryDetector()
        self._boundary_pending = False
        return turn

    def begin(self, role: str, created_at: float | None = None) -> Turn:
        """Open a turn (its prefix framing is added); tokens then stream in."""
        conv = self.conv
        if role not in ("user", "assistant", "document"):
            raise ConversationError(f"cannot add a {role!r} turn")
        if self.turn is not None:
            raise ConversationError("the previous turn is still open")
        turn = Turn(self.next_turn_id, role, created_at if created_at is not None else time.time())
        self.next_turn_id += 1
        conv.turns[turn.turn_id] = turn
        self._open(turn)
        self.start = self._start_brightness()
        (ids, texts), _ = conv.framing.around(role)
        self._add_framing(turn, PREFIX_INDEX, ids, texts)
        return turn

    def append(self, token_id: int, text: str, *, tool_result: bool = False) -> Chunk:
        """Append one content token to the open turn; returns the chunk it joined."""
        turn = self.turn
        if turn is None:
            raise ConversationError("no open turn to append to")
        chunk = self._last_content_chunk(turn)
        if chunk is None or self._boundary_pending or chunk.tool_result != tool_result:
            chunk = self._new_chunk(turn, self._next_chunk_index(turn), tool_result=tool_result)
            self._boundary_pending = False
        self._append_row(chunk, token_id, text, framing=False)
        if self._detector.feed(text) and chunk.token_count >= self.conv.settings.pruning.min_chunk_tokens:
            self._boundary_pending = True
        return chunk

    def break_chunk(self) -> None:
        """The next content token starts a new chunk, whatever its size (an attached
        document's paragraphs are cut where the document's pages and paragraphs are)."""
        self._boundary_pending = True

    def end(self) -> Turn:
        """Close the open turn (its suffix framing is added)."""
        turn = self.turn
        if turn is None:
            raise ConversationError("no open turn to end")
        _, (ids, texts) = self.conv.framing.around(turn.role)
        self._add_framing(turn, SUFFIX_INDEX, ids, texts)
        turn.complete = True
        self.turn = None
        return turn

    def resume(self, turn_id: int) -> Turn:
        """Reopen the last turn (rehydrated incomplete after a crash) to close or extend it."""
        conv = self.conv
        if self.turn is not None:
            raise ConversationError("another turn is still open")
        if turn_id != conv.turns.last():
            raise ConversationError("only the last turn can be resumed")
        turn = conv.turns[turn_id]
        turn.complete = False
        return self._open(turn)

    def reopen_answer(self) -> tuple[Turn, list[Chunk]]:
        """Reopen the last turn, an answer, to extend it (Continue).

        Its closing framing is taken away (the model goes on from the last token) and is
        added again by :meth:`end`; new tokens join its last chunk as if the answer had
        never stopped, at the positions the framing held (chunks stay contiguous).
        Returns the turn and the removed framing chunks.
        """
        conv = self.conv
        if self.turn is not None:
            raise ConversationError("a turn is still open")
        last_id = conv.turns.last()
        if last_id is None or conv.turns[last_id].role != "assistant":
            raise ConversationError("the last message is not an answer")
        turn = conv.turns[last_id]
        last = self._last_content_chunk(turn)
        if last is None or not last.live:
            raise ConversationError("the answer's last paragraph is not in the context")
        closing = [conv.chunks[c] for c in turn.chunk_ids
                   if conv.chunks[c].framing and conv.chunks[c].start > last.start]
        ids = np.fromiter((c.id for c in closing), np.int32, len(closing))
        conv.table.keep(~np.isin(conv.table.chunk_id, ids))
        for chunk in closing:
            turn.chunk_ids.remove(chunk.id)
            del conv.chunks[chunk.id]
            conv.held.forget(chunk.id)
        if closing:
            # The closing framing held the last positions; the answer's last chunk must stay
            # contiguous (start + token_count), so the new tokens take them over.
            self.next_position = min(c.start for c in closing)
        turn.complete = False
        self._open(turn)
        hit = False
        for text in conv.held.texts(last.id)[-8:]:  # the line state the answer stopped in
            hit = self._detector.feed(text)
        self._boundary_pending = hit and last.token_count >= conv.settings.pruning.min_chunk_tokens
        return turn, closing

    def _last_content_chunk(self, turn: Turn) -> Chunk | None:
        chunks = self.conv.chunks
        for chunk_id in reversed(turn.chunk_ids):
            chunk = chunks[chunk_id]
            if not chunk.framing:
                return chunk
        return None

    def _next_chunk_index(self, turn: Turn) -> int:
        chunks = self.conv.chunks
        content = [chunks[c].chunk_index for c in turn.chunk_ids if not chunks[c].framing]
        return max(content) + 1 if content else 0

    def _new_chunk(self, turn: Turn, chunk_index: int, *, tool_result: bool = False) -> Chunk:
        conv = self.conv
        chunk = Chunk(id=self.next_chunk_id, turn_id=turn.turn_id, chunk_index=chunk_index,
                      role=turn.role, start=self.next_position, tool_result=tool_result)
        self.next_chunk_id += 1
        conv.chunks[chunk.id] = chunk
        conv.held.start(chunk.id)
        turn.chunk_ids.append(chunk.id)
        return chunk

    def _add_framing(self, turn: Turn, chunk_index: int, ids: Sequence[int], texts: Sequence[str]) -> None:
        if not ids:
            return
        chunk = self._new_chunk(turn, chunk_index)
        for token_id, text in zip(ids, texts, strict=True):
            self._append_row(chunk, token_id, text, framing=True)

    def _append_row(self, chunk: Chunk, token_id: int, text: str, *, framing: bool) -> None:
        conv = self.conv
        conv.table.append_one(self.next_position, token_id, self.start,
                              chunk.id, chunk.turn_id, framing)
        conv.held.append(chunk.id, text)
        chunk.token_count += 1
        self.next_position += 1
