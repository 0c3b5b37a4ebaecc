"""Rehydration: a conversation takes the records the store read from its file.

Both functions fill a :class:`~halo_weave.conversation.Conversation` (``conv``) that is
still empty of turns; the store calls them through the conversation's methods.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConversationError
from .records import Chunk, ChunkTokens
from .registry import ChunkColumns, TurnColumns


def add_chunk(conv, chunk: Chunk, tokens: ChunkTokens | None) -> None:
    """Re-register one chunk read from storage; ``tokens`` are given for live chunks.

    Chunks must come in position order.
    """
    conv.chunks[chunk.id] = chunk
    conv.turns[chunk.turn_id].chunk_ids.append(chunk.id)
    if chunk.live:
        if tokens is None:
            raise ConversationError(f"live chunk {chunk.key} has no tokens")
        conv.held.put(chunk.id, tokens.texts)
        conv.table.append_chunks([chunk.start], [chunk.token_count], [chunk.id], [chunk.turn_id],
                                 [chunk.framing], tokens.token_ids, tokens.brightness)


def take_records(conv, turns: TurnColumns, chunks: ChunkColumns, live_ids: np.ndarray,
                 counts: np.ndarray, tokens: ChunkTokens) -> None:
    """Take a stored conversation's records in one step.

    Turns and chunks stay columns until they are used (see :mod:`.registry`); ``chunks``
    are in position order.  ``tokens`` are the live chunks' tokens, concatenated in
    position order, ``counts`` tokens for each chunk of ``live_ids``; they go to the
    table in one step (the conversation takes ownership of them).
    """
    conv.turns.load(turns)
    conv.chunks.load(chunks)
    ids = chunks.id[chunks.live]
    if not np.array_equal(ids, live_ids):
        missing = sorted(set(ids.tolist()) - set(np.asarray(live_ids).tolist()))
        raise ConversationError(f"live chunks {missing[:3]} have no tokens")
    held = chunks.token_count[chunks.live]
    if not np.array_equal(held, counts) or int(held.sum()) != len(tokens.token_ids):
        raise ConversationError("stored tokens disagree with their chunks' token counts")
    ends = np.cumsum(held).tolist()
    texts = tokens.texts
    conv.held.put_many(zip(ids.tolist(), map(texts.__getitem__, map(slice, [0, *ends[:-1]], ends))))
    live = chunks.take(np.flatnonzero(chunks.live))
    conv.table.append_chunks(live.start, held, ids, live.turn_id, live.chunk_index < 0,
                             tokens.token_ids, tokens.brightness)
