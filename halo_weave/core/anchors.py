"""Which chunks leave the context and come back together.

* The opening chunk (S0) of a user turn and of the answer to it form an anchor pair: it
  is pruned only together, and only when each is the last live chunk of its turn.
* A chunk comes back with its anchors: the question's S0 and the answer's S0.
* An attached document's paragraphs have no anchors: each leaves and comes back alone.
* A turn's framing is live exactly while some content chunk of the turn is: it leaves
  with the last one and comes back with the first.

Functions of a :class:`~halo_weave.conversation.Conversation` (``conv``), which calls them.
"""

from __future__ import annotations

from typing import Iterable

from .records import Chunk


def anchor_partner(conv, chunk: Chunk) -> Chunk | None:
    """The S0 paired with an S0 anchor: the question's or the answer's opening."""
    if not chunk.anchor or chunk.role == "document":
        return None
    other_turn = chunk.turn_id + 1 if chunk.role == "user" else chunk.turn_id - 1
    other_role = "assistant" if chunk.role == "user" else "user"
    return conv.chunk_by_key(other_turn, 0, other_role)


def anchors_of(conv, chunk: Chunk) -> list[Chunk]:
    """The anchors a chunk comes back with: question S0 and answer S0 (not itself)."""
    if chunk.framing or chunk.role in ("system", "document"):
        return []
    own_s0 = conv.chunk_by_key(chunk.turn_id, 0, chunk.role)
    if chunk.role == "assistant":
        anchors = [conv.chunk_by_key(chunk.turn_id - 1, 0, "user"), own_s0]
    else:
        anchors = [own_s0, conv.chunk_by_key(chunk.turn_id + 1, 0, "assistant")]
    return [a for a in anchors if a is not None and a.id != chunk.id]


def live_content_count(conv, turn_id: int, *, excluding: Iterable[int] = ()) -> int:
    """Live content chunks of a turn (not counting the ids ``excluding``)."""
    gone = set(excluding)
    return sum(1 for c in conv.content_chunks(turn_id) if c.live and c.id not in gone)


def framing_of(conv, turn_id: int) -> list[Chunk]:
    """The framing chunks of a turn (before and after its content)."""
    return [c for c in map(conv.chunks.__getitem__, conv.turns[turn_id].chunk_ids) if c.framing]


def prunable_group(conv, chunk: Chunk) -> list[Chunk] | None:
    """What pruning ``chunk`` takes with it, or None when it is protected.

    An S0 anchor goes only when it is the last live chunk of its turn and its partner
    anchor is too (or is gone); the two then leave together.
    """
    if not chunk.live or chunk.pinned or chunk.framing:
        return None
    if not chunk.anchor or chunk.role == "document":
        return [chunk]
    if live_content_count(conv, chunk.turn_id) != 1:
        return None
    partner = anchor_partner(conv, chunk)
    if partner is None or not partner.live:
        return [chunk]
    if partner.pinned or live_content_count(conv, partner.turn_id) != 1:
        return None
    return [chunk, partner]


def with_framing(conv, chunks: Iterable[Chunk]) -> dict[int, Chunk]:
    """``chunks`` and, for each turn with no live content, the turn's framing (by id)."""
    wanted = {c.id: c for c in chunks}
    for turn_id in {c.turn_id for c in wanted.values()}:
        if not live_content_count(conv, turn_id):
            wanted.update((f.id, f) for f in framing_of(conv, turn_id))
    return wanted
