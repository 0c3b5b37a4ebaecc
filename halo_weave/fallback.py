"""Pruning when the server sends no attention (stock KoboldCPP).

Without attention every token keeps the brightness it started with, so brightness says
nothing about relevance.  The honest fallback is age: prune the oldest unpinned chunks
first, still respecting seed 001 §9's anchor protection (an S0 anchor leaves only with
its partner, and only as the last live chunk of its turn).  Qt-free.
"""

from __future__ import annotations

from .conversation import Chunk, Conversation


def prune_oldest_first(conv: Conversation, max_tokens: int | None = None) -> list[Chunk]:
    """Prune the oldest prunable chunks until the context fits ``max_tokens`` (0 = never).

    Returns every chunk pruned (content and the framing that went with it), in position
    order, like :meth:`Conversation.prune_to_fit`.
    """
    limit = conv.settings.max_context_tokens if max_tokens is None else max_tokens
    if limit <= 0:
        return []
    pruned: list[Chunk] = []
    while conv.live_token_count() > limit:
        group = _oldest_prunable_group(conv)
        if group is None:
            break
        for member in group:
            if member.live:
                pruned.extend(conv.delete_chunk(member.id))
    pruned.sort(key=lambda c: c.start)
    return pruned


def _oldest_prunable_group(conv: Conversation) -> list[Chunk] | None:
    open_turn = conv.open_turn
    for chunk in conv.live_chunks():
        if chunk.framing or (open_turn is not None and chunk.turn_id == open_turn.turn_id):
            continue
        group = conv.prunable_group(chunk)
        if group is not None:
            return group
    return None
