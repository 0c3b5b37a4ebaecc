"""Recall, the memory layer's part: the plan of what a message brings back, within a
budget (the universal equation: the model's window less the live tokens, the message and
the answer's room), and its application.  The session's step that runs it is
:mod:`halo_weave.session.recall`; the other pieces are listed in docs/architecture.md,
"Recall".

For each search match, best first, the cost is the tokens that would become live: the
target and the anchors it comes back with (the question's user S0 and the answer's
assistant S0), counting only pruned chunks, never a chunk already planned (so S0 is paid
once), plus the framing of turns that come back from fully pruned.  A match is taken when
its cost fits in what is left of the budget and skipped otherwise (a later, cheaper
match may still fit).  Already-live chunks cost nothing.

With ``anchors="if_room"`` (setting ``resurrection_anchors``) the anchors are paid for
only from what the matches leave: every match is first planned alone (its chunk and its
turn's framing), then each taken match's anchors, in the same order, while they fit.
An anchor adds context the match's text does not carry, but it costs as much as a match
of its own; this way it never keeps out a match that was found.

The plan is applied with :meth:`Conversation.resurrect` (chunks return at their original
positions) and persisted — ``store.save_chunks`` and each taken entry's
``reference_count`` + 1 — in one transaction; if that transaction fails, the conversation
goes back to its snapshot from before (:meth:`Conversation.restore`): the chunks are in
the graveyard in memory as well, exactly as they were.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Sequence

from ..core.anchors import anchors_of
from ..conversation import Chunk, Conversation
from ..rules import resurrection_anchors
from ..storage import index_tables
from ..storage.sql import transaction


@dataclass(frozen=True)
class Match:
    """One search hit: an index entry and how well it matched."""

    chunk_id: int
    turn_id: int
    chunk_index: int
    role: str
    text: str
    token_count: int
    reference_count: int
    similarity: float  # raw cosine
    score: float  # what the ranking used (boosted, blended)
    bm25: float | None = None  # normalised BM25 when hybrid search is on

    @property
    def key(self) -> tuple[int, int, str]:
        return (self.turn_id, self.chunk_index, self.role)


@dataclass(frozen=True)
class PlannedMatch:
    """A match with the tokens taking it costs (given what was taken before it)."""

    match: Match
    cost: int


@dataclass
class RecallPlan:
    """What fits: ``taken`` in score order, ``skipped`` (too expensive), and the budget."""

    budget: int
    taken: list[PlannedMatch] = field(default_factory=list)
    skipped: list[PlannedMatch] = field(default_factory=list)
    #: False: the anchors are not implied; those that fit are listed in ``anchors``.
    with_anchors: bool = True
    anchors: list[int] = field(default_factory=list)
    anchor_tokens: int = 0

    @property
    def tokens(self) -> int:
        return sum(p.cost for p in self.taken) + self.anchor_tokens

    @property
    def chunk_ids(self) -> list[int]:
        """The chunks to resurrect (with ``with_anchors``: their anchors come too)."""
        return [p.match.chunk_id for p in self.taken] + self.anchors

    def apply(self, conv: Conversation, brightness: str | int) -> list[Chunk]:
        """``conv.resurrect`` of this plan's chunks (anchors as planned)."""
        if not self.taken:
            return []
        return conv.resurrect(self.chunk_ids, brightness=brightness, with_anchors=self.with_anchors)


@dataclass
class RecallResult:
    """What the user's message brought back, for the UI to show."""

    budget: int
    tokens_used: int = 0
    chunks: list[Chunk] = field(default_factory=list)  # every chunk made live (with framing)
    plan: RecallPlan | None = None
    reason: str | None = None  # why nothing was tried (index unavailable)

    @property
    def resurrected(self) -> list[Chunk]:
        """Resurrected content chunks, i.e. what left the graveyard (framing left out)."""
        return [c for c in self.chunks if not c.framing]


def budget(conv: Conversation, user_tokens: int, max_context: int, max_new_tokens: int, cap: int = 0) -> int:
    """The universal equation: room left after the message and the answer (``cap`` > 0 caps it)."""
    room = max_context - conv.live_token_count() - user_tokens - max_new_tokens
    if cap > 0:
        room = min(room, cap)
    return max(room, 0)


def make_plan(conv: Conversation, matches: Sequence[Match], budget: int,
              anchors: str = "always", max_chunks: int = 0) -> RecallPlan:
    """Take matches in order while their cost fits (see the module docstring).

    ``anchors``: a name in :data:`halo_weave.rules.RESURRECTION_ANCHORS` (``"always"``:
    each match with its anchors; ``"if_room"``: anchors from what the matches leave).
    ``max_chunks`` > 0: at most that many pruned chunks come back (matches and anchors
    counted; a match already live costs nothing and is not counted).
    """
    plan = RecallPlan(budget, with_anchors=resurrection_anchors(anchors).with_match)
    cost_of = _Costs(conv)
    for match in matches:
        chunk = conv.chunks.get(match.chunk_id)
        if chunk is None or chunk.framing:
            continue  # an entry whose chunk is gone (merged away) cannot come back
        group = [chunk] + (anchors_of(conv, chunk) if plan.with_anchors else [])
        cost, new, turns = cost_of(group)
        if max_chunks > 0 and len(cost_of.planned) + len(new) > max_chunks:
            if new:
                plan.skipped.append(PlannedMatch(match, cost))
            continue
        if cost <= budget - plan.tokens:
            plan.taken.append(PlannedMatch(match, cost))
            cost_of.take(new, turns)
        else:
            plan.skipped.append(PlannedMatch(match, cost))
    if not plan.with_anchors:
        for planned in list(plan.taken):
            for anchor in anchors_of(conv, conv.chunks[planned.match.chunk_id]):
                cost, new, turns = cost_of([anchor])
                if max_chunks > 0 and len(cost_of.planned) + len(new) > max_chunks:
                    break
                if new and cost <= budget - plan.tokens:
                    plan.anchors.append(anchor.id)
                    plan.anchor_tokens += cost
                    cost_of.take(new, turns)
    return plan


class _Costs:
    """Tokens a group of chunks would add, given what the plan already holds."""

    def __init__(self, conv: Conversation) -> None:
        self.conv = conv
        self.planned: set[int] = set()
        self.framed_turns: set[int] = set()  # turns whose framing is live or already paid for

    def __call__(self, group: list[Chunk]) -> tuple[int, list[Chunk], set[int]]:
        conv = self.conv
        new = [c for c in group if not c.live and c.id not in self.planned]
        cost = sum(c.token_count for c in new)
        turns = {c.turn_id for c in new} - self.framed_turns
        pruned_turns = {t for t in turns if not any(c.live for c in conv.content_chunks(t))}
        cost += sum(conv.chunks[f].token_count for t in pruned_turns
                    for f in conv.turns[t].chunk_ids if conv.chunks[f].framing)
        return cost, new, turns

    def take(self, new: list[Chunk], turns: set[int]) -> None:
        self.planned.update(c.id for c in new)
        self.framed_turns.update(turns)


def apply_plan(conv: Conversation, plan: RecallPlan, conn: sqlite3.Connection,
               brightness: str | int, store=None) -> RecallResult:
    """Resurrect the plan's chunks and persist it all in one transaction.

    With a ``store`` the chunks and the ``reference_count`` increments are written in one
    of its transactions; without one only the counts are written (through ``conn``).
    When writing fails the resurrection is undone in memory too and the error raised:
    the conversation never shows chunks as live that the file holds as pruned.
    """
    before = conv.live_token_count()
    saved = conv.snapshot()
    resurrected = plan.apply(conv, brightness)
    counts = [p.match.chunk_id for p in plan.taken]
    try:
        if store is not None:
            with store.transaction() as db:
                if resurrected:
                    store.save_chunks(conv, resurrected)
                index_tables.count_references(db, counts)
        elif counts:
            with transaction(conn):
                index_tables.count_references(conn, counts)
    except BaseException:
        conv.restore(saved)
        raise
    return RecallResult(plan.budget, conv.live_token_count() - before, resurrected, plan)
