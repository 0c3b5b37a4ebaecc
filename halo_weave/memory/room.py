"""Pruning only for room (setting ``prune_when = "for_room"``).

Pruning after every exchange down to ``max_context_tokens`` (P) keeps the model's window
half empty between messages, only so that the next message has room for what it brings
back; what the model needs to go on from is mostly the recent context, and that is what
goes.  Pruned only for room, the context keeps everything the window holds (pruned down to
the window, not to P, once it is over it) and at a user message whose search found chunks
to resurrect, just enough is pruned to make room for them: oldest first or dimmest first
(``prune_order``), never a pinned chunk, the latest exchange or a match of this search that
is live already (nor its anchors).

The room resurrection may take is the universal equation with the live context counted as
at most a *floor* (:func:`room`): P, what pruning after every exchange would leave, or less
with ``resurrection_keep_share`` < 1 (the newest share of P).  The share applies pruned
after every exchange too: a message whose plan does not fit the window then prunes just
enough older context for it, by the same rule (on LoCoMo the room of
P = 1,024 in C = 2,048 held too few matches for questions whose evidence lies in many
sittings).  With KV surgery a prune costs no re-prefill, so pruning in small
steps is cheap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..core.anchors import anchors_of
from ..conversation import Chunk, Conversation
from ..core import pruning
from ..rules import prune_order
from ..settings import Settings
from .recall_plan import Match, RecallPlan
from .recall_plan import budget as equation_budget

#: ``planner(conv, matches, budget)``: the index's plan (neighbours, anchors) or make_plan.
Planner = Callable[[Conversation, Sequence[Match], int], RecallPlan]


def floor(settings: Settings) -> int:
    """The live tokens a message's room counts at most: the newest
    ``resurrection_keep_share`` of ``max_context_tokens`` (P itself at share 1)."""
    return int(settings.pruning.max_context_tokens * min(max(settings.recall.resurrection_keep_share, 0.0), 1.0))


def shares_room(settings: Settings) -> bool:
    """Whether the keep share lowers the floor below P, so that a message pruned after
    every exchange makes its room too."""
    return settings.recall.resurrection_keep_share < 1 and settings.pruning.max_context_tokens > 0


def room(conv: Conversation, user_tokens: int, max_context: int, max_new_tokens: int,
         floor: int, cap: int = 0) -> int:
    """The room resurrection may take: the universal equation with the live context counted
    as at most ``floor`` tokens (P, what pruning after the exchange would have left)."""
    live = conv.live_token_count()
    if floor > 0:
        live = min(live, floor)
    left = max_context - live - user_tokens - max_new_tokens
    if cap > 0:
        left = min(left, cap)
    return max(left, 0)


@dataclass
class RoomPlan:
    """The plan to apply and the chunks pruned to make room for it (already out)."""

    plan: RecallPlan
    pruned: list[Chunk] = field(default_factory=list)


def room_choice(conv: Conversation, matches: Sequence[Match], planner: Planner, *,
                user_tokens: int, max_context: int, max_new_tokens: int, floor: int,
                cap: int = 0, order: str | None = None) -> tuple[RecallPlan, list[Chunk], set[int]]:
    """The plan within :func:`room`, the live chunks that pruning would take to make it
    fit ``max_context`` with the message and the answer, and the chunk ids that pruning
    spares (the plan's live matches and anchors).  Pruning goes in ``order`` (a prune
    order's name; None: the settings').  Nothing is changed: a draft prompt
    (read-ahead) reads the same choice that :func:`plan_with_room` then makes."""
    allowed = room(conv, user_tokens, max_context, max_new_tokens, floor, cap)
    plan = planner(conv, matches, allowed)
    if not plan.taken:
        return plan, [], set()
    limit = max_context - user_tokens - max_new_tokens - plan.tokens
    if conv.live_token_count() <= limit:
        return plan, [], set()
    keep: set[int] = set()
    for planned in plan.taken:
        chunk = conv.chunks.get(planned.match.chunk_id)
        if chunk is not None:
            keep.update(c.id for c in [chunk, *anchors_of(conv, chunk)] if c.live)
    chosen = pruning.select(conv, conv.live_token_count() - max(limit, 0),
                            order=prune_order(order or conv.settings.pruning.prune_order),
                            spared=conv.turns.last("user"), keep=keep)
    return plan, chosen, keep


def plan_with_room(conv: Conversation, matches: Sequence[Match], planner: Planner, *,
                   user_tokens: int, max_context: int, max_new_tokens: int, floor: int,
                   cap: int = 0, order: str | None = None) -> RoomPlan:
    """Plan the matches within :func:`room`, then prune just enough that the plan, the
    message and the answer fit ``max_context`` (:func:`room_choice`); re-planned within
    what is then left (a prune can take a turn's framing, which the plan then pays for
    again).  The prune spares the latest exchange, pinned chunks, and the plan's live
    matches and anchors."""
    allowed = room(conv, user_tokens, max_context, max_new_tokens, floor, cap)
    plan, _, keep = room_choice(conv, matches, planner, user_tokens=user_tokens, max_context=max_context,
                                max_new_tokens=max_new_tokens, floor=floor, cap=cap, order=order)
    limit = max_context - user_tokens - max_new_tokens - plan.tokens
    if not plan.taken or conv.live_token_count() <= limit:
        return RoomPlan(plan)
    # Pruned, or nothing could be (all spared): either way re-planned within what is left.
    pruned = conv.prune_to_fit(max(limit, 0), order=order, keep_latest_exchange=True, keep=keep)
    left = equation_budget(conv, user_tokens, max_context, max_new_tokens, cap)
    return RoomPlan(planner(conv, matches, min(allowed, left)), pruned)
