"""Pruning when the server sends no attention (stock KoboldCPP).

Without attention every token keeps the brightness it started with, so brightness says
nothing about relevance.  The honest fallback is age: prune the oldest unpinned chunks
first, still respecting seed 001 §9's anchor protection (an S0 anchor leaves only with
its partner, and only as the last live chunk of its turn).  Qt-free.
"""

from __future__ import annotations

from .conversation import Chunk, Conversation


def prune_oldest_first(
    conv: Conversation, max_tokens: int | None = None, *, keep_latest_exchange: bool = False
) -> list[Chunk]:
    """Prune the oldest prunable chunks when the context is over ``max_tokens`` (0 = never).

    The same mechanism as :meth:`Conversation.prune_to_fit` (anchors, pins, hysteresis),
    ranked by age instead of brightness.
    """
    return conv.prune_to_fit(max_tokens, by_age=True, keep_latest_exchange=keep_latest_exchange)
