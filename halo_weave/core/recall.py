"""Recall, the conversation's part: what each user message recalled, the pruned chunks
its search brought back (the session's step is :mod:`halo_weave.session.recall`; the
other pieces are listed in docs/architecture.md, "Recall").

A *recall* is what one user message brings back by the search of its text, within the
budget; each chunk comes back by :meth:`~halo_weave.conversation.Conversation.resurrect`
(:mod:`.token_resurrection`), the same operation as the user's lever that resurrects a
chunk by hand from the graveyard, which is not a recall.  :class:`RecallLog` keeps, per user turn, the content chunks that left the graveyard for it
(anchors that came along included), best match first (the order the session gives:
:func:`~halo_weave.memory.recall_note.best_first`), for as long as the conversation
exists: the window says under each message what it recalled, even once those chunks are
pruned again.

A chunk recalled for a message is *marked* (``Chunk.recalled_for``, the user turn's id)
until it is pruned: the heatmap shows the mark, and the live tokens it accounts for
(:func:`recalled_tokens`) are counted apart from the rest of the context.

Functions of a :class:`~halo_weave.conversation.Conversation` (``conv``), which calls them.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from .anchors import framing_of


class RecallLog:
    """User turn id -> the chunk ids recalled for that message, best match first."""

    def __init__(self) -> None:
        self._by_turn: dict[int, tuple[int, ...]] = {}

    def __len__(self) -> int:
        return len(self._by_turn)

    def __iter__(self) -> Iterator[int]:
        return iter(self._by_turn)

    def of(self, turn_id: int) -> tuple[int, ...]:
        """The chunks recalled for the message ``turn_id`` (empty when none, or unknown)."""
        return self._by_turn.get(turn_id, ())

    def items(self) -> Iterator[tuple[int, tuple[int, ...]]]:
        return iter(self._by_turn.items())

    def put(self, turn_id: int, chunk_ids: Iterable[int]) -> None:
        """Set what the message ``turn_id`` recalled (nothing: it is forgotten)."""
        ids = tuple(dict.fromkeys(int(c) for c in chunk_ids))
        if ids:
            self._by_turn[turn_id] = ids
        else:
            self._by_turn.pop(turn_id, None)

    def forget(self, turn_id: int) -> None:
        self._by_turn.pop(turn_id, None)

    def clear(self) -> None:
        self._by_turn.clear()

    def turns_of(self, chunk_id: int) -> list[int]:
        """The messages that recalled ``chunk_id``."""
        return [t for t, ids in self._by_turn.items() if chunk_id in ids]


def record(conv, turn_id: int, chunk_ids: Iterable[int]) -> None:
    """The message ``turn_id`` recalled ``chunk_ids`` (in that order): remember them, and
    mark those live."""
    ids = [c for c in chunk_ids if c in conv.chunks and not conv.chunks[c].framing]
    conv.recalls.put(turn_id, ids)
    for chunk_id in ids:
        chunk = conv.chunks[chunk_id]
        if chunk.live:
            chunk.recalled_for = turn_id


def take_stored(conv, rows_by_turn: dict[int, list[tuple[int, bool]]]) -> None:
    """What the file says each message recalled: ``turn_id -> [(chunk_id, marked), ...]``
    in the recall's order.  A list is taken only for a user turn, of the chunks that
    exist, and a mark only on a live chunk; pruned chunks stay columns (no object is
    made for them)."""
    for turn_id, rows in rows_by_turn.items():
        turn = conv.turns.get(turn_id)
        if turn is None or turn.role != "user":
            continue
        kept = [(c, marked) for c, marked in rows if c in conv.chunks]
        conv.recalls.put(turn_id, [c for c, _ in kept])
        for chunk_id, marked in kept:
            if marked and conv.chunks[chunk_id].live:
                conv.chunks[chunk_id].recalled_for = turn_id


def move(conv, old_turn: int, new_turn: int, chunk_ids: Iterable[int]) -> None:
    """The message ``old_turn``, which recalled ``chunk_ids``, was replaced by ``new_turn``
    (edited and sent again): what it recalled, and the marks it left, go to the new one."""
    ids = list(chunk_ids)
    conv.recalls.forget(old_turn)
    conv.recalls.put(new_turn, ids)
    for chunk_id in ids:
        chunk = conv.chunks.get(chunk_id)
        if chunk is not None and chunk.recalled_for == old_turn:
            chunk.recalled_for = new_turn


def merged(conv, kept, absorbed) -> None:
    """``absorbed`` became part of ``kept``: it stands in every list it was in, and its
    mark carries over."""
    for turn_id in conv.recalls.turns_of(absorbed.id):
        conv.recalls.put(turn_id, [kept.id if c == absorbed.id else c for c in conv.recalls.of(turn_id)])
    if kept.recalled_for is None:
        kept.recalled_for = absorbed.recalled_for


def recalled_tokens(conv) -> int:
    """Live tokens that recalls brought back and no prune has taken since: the marked
    chunks, and the framing of turns whose live content is all marked (it came back
    with them)."""
    marked = [c for c in conv.live_chunks() if c.recalled_for is not None and not c.framing]
    tokens = sum(c.token_count for c in marked)
    for turn_id in {c.turn_id for c in marked}:
        if all(c.recalled_for is not None for c in conv.content_chunks(turn_id) if c.live):
            tokens += sum(f.token_count for f in framing_of(conv, turn_id) if f.live)
    return tokens
