"""Which chunks to prune when the context is over its limit.

Chunks are ranked by peak brightness; an anchor pair leaves together, so it is ranked by
its brighter member and goes only once both have dimmed (:mod:`.anchors`).  Ranked by age
instead, the oldest go first (a server that sends no attention gives brightness no
meaning); a resurrected chunk's age counts from its resurrection, so the chunk brought
back for a message is not the first to go once that message is answered.  The selection
is a function of a
:class:`~halo_weave.conversation.Conversation` (``conv``); pruning itself is the
conversation's.
"""

from __future__ import annotations

from .anchors import anchor_partner, framing_of, live_content_count, prunable_group
from .records import Chunk


def select(conv, excess: int, *, by_age: bool = False, spared: int | None = None,
           spared_from: int | None = None) -> list[Chunk]:
    """Chunks whose pruning frees at least ``excess`` tokens (framing they free counted),
    or as many as the rules allow; ``spared``: no chunk of that turn or later;
    ``spared_from``: no chunk resurrected at that position or later (for that turn)."""
    ids, peaks = conv.chunk_peaks()
    peak_of = dict(zip(ids.tolist(), peaks.tolist()))

    def rank(chunk: Chunk) -> tuple[int, int]:
        if by_age:
            return 0, chunk.age_key
        partner = anchor_partner(conv, chunk)
        peak = peak_of[chunk.id]
        if partner is not None and partner.live:
            peak = max(peak, peak_of[partner.id])
        return peak, chunk.start

    candidates = sorted(
        (c for c in map(conv.chunks.__getitem__, peak_of)
         if not c.framing and not c.pinned and (spared is None or c.turn_id < spared)
         and (spared_from is None or c.resurrected_at is None or c.resurrected_at < spared_from)),
        key=rank,
    )
    doomed: list[Chunk] = []
    while excess > 0:
        group = next(filter(None, (prunable_group(conv, c) for c in candidates)), None)
        if group is None:
            break
        for member in group:
            member.live = False  # provisional, so later checks see it gone
            excess -= member.token_count
        for turn_id in {m.turn_id for m in group}:
            if not live_content_count(conv, turn_id):
                excess -= sum(f.token_count for f in framing_of(conv, turn_id))
        doomed.extend(group)
        candidates = [c for c in candidates if c.live]
    for chunk in doomed:
        chunk.live = True
    return doomed
