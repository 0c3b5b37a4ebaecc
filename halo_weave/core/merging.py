"""Merging a chunk with the next one of its turn: the user's lever for a paragraph that
was cut in two.  A function of a :class:`~halo_weave.conversation.Conversation` (``conv``).
"""

from __future__ import annotations

from ..errors import ConversationError
from . import recall
from .records import Chunk


def merge_with_next(conv, chunk_id: int) -> tuple[Chunk, Chunk]:
    """Merge a live chunk with the next content chunk of its turn.

    Returns ``(kept, absorbed)``; the absorbed chunk's tokens now belong to the kept
    one (its identity disappears, so its index entry must be dropped).
    """
    chunk = conv.chunks[chunk_id]
    turn = conv.turns[chunk.turn_id]
    content = conv.content_chunks(turn.turn_id)
    index = next(i for i, c in enumerate(content) if c.id == chunk_id)
    if chunk.framing or index + 1 >= len(content):
        raise ConversationError("there is no next chunk in this turn to merge with")
    if turn is conv.open_turn:
        raise ConversationError("cannot merge while the turn is being generated")
    nxt = content[index + 1]
    if not (chunk.live and nxt.live) or nxt.start != chunk.end:
        raise ConversationError("only two adjacent live chunks can be merged")
    rows = conv.chunk_rows(nxt)
    conv.table.chunk_id[rows] = chunk.id
    conv.held.join(chunk.id, nxt.id)
    chunk.token_count += nxt.token_count
    chunk.pinned = chunk.pinned or nxt.pinned
    recall.merged(conv, chunk, nxt)
    turn.chunk_ids.remove(nxt.id)
    del conv.chunks[nxt.id]
    return chunk, nxt
