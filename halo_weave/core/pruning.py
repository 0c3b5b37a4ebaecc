"""Which chunks to prune when the context is over its limit.

Chunks are ranked by a prune order (:mod:`halo_weave.rules.prune_orders`): by their
score (dimmest first; an anchor pair leaves together, so it is ranked by its brighter
member and goes only once both have dimmed, :mod:`.anchors`) or by age (oldest first; a
resurrected chunk's age counts from its resurrection, so the chunk brought back for a
message is not the first to go once that message is answered).  The
selection, the taking out and the reading back of pruned tokens are functions of a
:class:`~halo_weave.conversation.Conversation` (``conv``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import ConversationError
from . import ties
from .anchors import anchor_partner, framing_of, live_content_count, prunable_group
from .records import Chunk, ChunkTokens


def select(conv, excess: int, *, order, spared: int | None = None,
           keep: frozenset[int] | set[int] = frozenset()) -> list[Chunk]:
    """Chunks whose pruning frees at least ``excess`` tokens (framing they free counted),
    or as many as the rules allow, taken in ``order`` (a
    :class:`~halo_weave.rules.PruneOrder`); ``spared``: no chunk of that turn or later;
    ``keep``: chunk ids left alone (the matches of a search that prunes to make room).
    A chunk resurrected for the spared turn is not spared outright (the limit comes
    first), but ranked by age it counts as new, so older chunks go before it.  Ranked by
    brightness, the chunks in the last ``prune_keep_recent`` live tokens go only after
    every older one (H2O's recent window; the limit still comes first).  Peaks are
    compared on the grid of :mod:`.ties` and ties go oldest first (by position), the same
    on every CPU."""
    ids, peaks = conv.chunk_peaks()
    ranking = Ranking(conv, ids, peaks)
    candidates = sorted(
        (c for c in map(conv.chunks.__getitem__, ranking.peak_of)
         if not c.framing and not c.pinned and c.id not in keep and (spared is None or c.turn_id < spared)),
        key=lambda chunk: order.key(chunk, ranking),
    )
    chosen: list[Chunk] = []
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
        chosen.extend(group)
        candidates = [c for c in candidates if c.live]
    for chunk in chosen:
        chunk.live = True
    return chosen


class Ranking:
    """What a prune order may rank the live chunks by (``ids`` and ``peaks`` in position
    order, from :meth:`Conversation.chunk_peaks`); each answer is worked out when asked."""

    def __init__(self, conv, ids: np.ndarray, peaks: np.ndarray) -> None:
        self.conv = conv
        self.ids = ids
        self.peak_of = dict(zip(ids.tolist(), peaks.tolist()))
        self._recent: set[int] | None = None

    def level(self, chunk: Chunk) -> int:
        """The chunk's score on the tie grid; an anchor pair is ranked by its brighter
        member, so it goes only once both have dimmed."""
        peak = self.peak_of[chunk.id]
        partner = anchor_partner(self.conv, chunk)
        if partner is not None and partner.live:
            peak = max(peak, self.peak_of[partner.id])
        return ties.level(peak)

    def recent(self, chunk: Chunk) -> bool:
        """Whether the chunk lies in the recent window (:func:`recent_chunks`)."""
        if self._recent is None:
            self._recent = recent_chunks(self.conv, self.ids)
        return chunk.id in self._recent


def recent_chunks(conv, ids: np.ndarray) -> set[int]:
    """The live chunks (``ids``, in position order) wholly inside the last
    ``prune_keep_recent`` live tokens: H2O's recent window, which pruning by brightness
    takes from last.  A resurrected chunk sits at its old place, so it is not in it."""
    window = conv.settings.pruning.prune_keep_recent
    if window <= 0 or len(ids) == 0:
        return set()
    counts = np.fromiter((conv.chunks[i].token_count for i in ids.tolist()), np.int64, len(ids))
    from_end = np.cumsum(counts[::-1])[::-1]  # tokens from each chunk's start to the end
    return set(ids[from_end <= window].tolist())


def kept_tokens(conv) -> int:
    """Live tokens that the prune after an answer never takes: the system prompt, pinned
    chunks and the latest exchange (the last user turn and what follows it)."""
    table = conv.table
    keep = np.zeros(len(table), bool)
    spared = conv.turns.last("user")
    if spared is not None:
        keep |= table.turn_id >= spared
    pinned = [c.id for c in conv.live_chunks() if c.pinned]
    if pinned:
        keep |= np.isin(table.chunk_id, pinned)
    return len(conv.system.ids) + int(keep.sum())


def take_out(conv, chunks: list[Chunk]) -> list[Chunk]:
    """Prune ``chunks``: move them (and the framing of turns left empty) out of the live
    table, keeping their tokens for a cheap resurrection and their peak as
    ``brightness_at_prune``.  Returns every chunk pruned, in position order."""
    gone = {c.id for c in chunks}
    open_turn = conv.open_turn
    for turn_id in {c.turn_id for c in chunks}:
        if open_turn is not None and turn_id == open_turn.turn_id:
            continue
        if not live_content_count(conv, turn_id, excluding=gone):
            gone.update(f.id for f in framing_of(conv, turn_id) if f.live)
    pruned = [conv.chunks[c] for c in gone]
    table = conv.table
    for chunk in pruned:
        rows = conv.chunk_rows(chunk)
        values = table.brightness[rows].copy()
        conv.held.keep_pruned(chunk.id, table.token_id[rows].copy(), values)
        chunk.brightness_at_prune = int(values.max()) if values.size else 0
    table.keep(~np.isin(table.chunk_id, np.fromiter(gone, np.int32, len(gone))))
    for chunk in pruned:
        chunk.live = False
        chunk.recalled_for = None  # a recall's mark lasts until the chunk is pruned
    pruned.sort(key=lambda c: c.start)
    return pruned


def load_pruned(conv, chunk_ids: Sequence[int]) -> dict[int, ChunkTokens]:
    """The tokens of pruned chunks: those pruned in this session are still held
    (:func:`take_out` kept them), the others come through ``conv.chunk_loader``."""
    held = {c: conv.held.pruned(c) for c in chunk_ids}
    found = {c: tokens for c, tokens in held.items() if tokens is not None}
    missing = [c for c in chunk_ids if c not in found]
    if missing:
        if conv.chunk_loader is None:
            raise ConversationError(f"no tokens for pruned chunks {missing}")
        found.update(conv.chunk_loader(missing))
    return found
