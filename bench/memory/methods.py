"""Question time: each method's context for one question, and its evidence recall.

Every question starts from its method's end-of-conversation state as the replay left it,
so questions never change each other: a method resurrects in a copy of that state, or reads
its figures off the plan (:func:`answer_halo_dry`), or makes the plan in the state itself,
reads it and undoes it exactly (:func:`answer_halo_in_place`, the ``lazy-*`` methods).
The prompt budget is ``C - max_new_tokens`` (the room the universal equation leaves for
the prompt); every method but ``full`` stays within it.

* ``full``: everything (reported, not bounded).
* ``fifo``: the most recent whole turns that fit with the question.
* ``rag``: the most recent turns that fit ``P``, then the best-scoring chunks (plain
  cosine, no anchors, as SillyTavern's vector storage) resurrected until the budget is spent.
* ``brightness``: the replay pruned to the budget; at question time pruned again to make
  room for the question; no resurrection.
* ``halo``: the replay pruned to ``P``; the question runs the app's resurrection (search,
  :func:`halo_weave.memory.recall_plan.make_plan` under the universal equation,
  :meth:`Conversation.resurrect`), then joins the context.
* ``lazy-*`` (``prune_when = "for_room"``): the replay keeps the window (``C -
  max_new_tokens``) live; the question's plan gets the room ``halo``'s would
  (:func:`halo_weave.memory.room.room`, the context counted as ``P``) and just enough is
  pruned to make it (:func:`~halo_weave.memory.room.plan_with_room`), as the app does.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from halo_weave.core.anchors import anchors_of
from halo_weave.core import token_resurrection
from halo_weave.conversation import Conversation
from halo_weave.core import ties
from halo_weave.memory import relevance
from halo_weave.memory.recall_note import best_first
from halo_weave.memory.recall_plan import budget, make_plan
from halo_weave.memory.room import plan_with_room

from ..locomo import Question


@dataclass
class Outcome:
    """One method's answer to one question."""

    recall: float
    tokens: int
    live_evidence: list[str]
    missing: dict[str, str] = field(default_factory=dict)  # dia id -> why it is not live
    recalled: int | None = None  # tokens the question's plan brought back (None: not read)


def evidence_recall(conv: Conversation, evidence: list[str], turn_of: dict[str, int]) -> tuple[float, list[str]]:
    """Fraction of evidence turns with at least one live content chunk."""
    if not evidence:
        return float("nan"), []
    live = [d for d in evidence if any(c.live for c in conv.content_chunks(turn_of[d]))]
    return len(live) / len(evidence), live


def turn_tokens(conv: Conversation, turn_id: int) -> int:
    """Every token of a turn, framing included."""
    return sum(conv.chunks[c].token_count for c in conv.turns[turn_id].chunk_ids)


def keep_recent(conv: Conversation, limit: int) -> Conversation:
    """A copy of ``conv`` holding only the most recent whole turns that fit ``limit``."""
    conv = copy.deepcopy(conv)
    used = len(conv.system.ids)
    turn_ids = sorted(conv.turns, reverse=True)
    cut = len(turn_ids)
    for n, turn_id in enumerate(turn_ids):
        used += turn_tokens(conv, turn_id)
        if used > limit:
            cut = n
            break
    for turn_id in turn_ids[cut:]:
        for chunk in conv.content_chunks(turn_id):
            if chunk.live:
                conv.prune_chunk(chunk.id)
    return conv


def add_question(conv: Conversation, ids: list[int], texts: list[str]) -> None:
    conv.add_turn("user", ids, texts)


class QuestionContext:
    """What every method needs for one question."""

    def __init__(self, question: Question, ids: list[int], texts: list[str],
                 turn_of: dict[str, int], budget: int, model_context: int, max_new_tokens: int):
        self.question = question
        self.ids, self.texts = ids, texts
        self.turn_of = turn_of
        self.budget = budget  # prompt tokens allowed (C - max_new_tokens)
        self.model_context = model_context
        self.max_new_tokens = max_new_tokens
        self.framed_tokens = 0  # filled by the caller

    def finish(self, conv: Conversation, missing_reason=None) -> Outcome:
        add_question(conv, self.ids, self.texts)
        recall, live = evidence_recall(conv, self.question.evidence, self.turn_of)
        missing = {}
        for dia_id in self.question.evidence:
            if dia_id not in live:
                missing[dia_id] = missing_reason(dia_id) if missing_reason else "pruned"
        return Outcome(recall, conv.live_token_count(), live, missing)


def answer_full(base: Conversation, q: QuestionContext) -> Outcome:
    """Everything in ``base`` plus the question (``base`` is not changed or copied:
    adding a user turn changes no evidence turn's liveness, only the token count)."""
    recall, live = evidence_recall(base, q.question.evidence, q.turn_of)
    missing = {d: "pruned" for d in q.question.evidence if d not in live}
    return Outcome(recall, base.live_token_count() + q.framed_tokens, live, missing)


def answer_fifo(base: Conversation, q: QuestionContext) -> Outcome:
    return q.finish(keep_recent(base, q.budget - q.framed_tokens))


def answer_brightness(base: Conversation, q: QuestionContext) -> Outcome:
    conv = copy.deepcopy(base)
    conv.prune_to_fit(q.budget - q.framed_tokens)
    return q.finish(conv)


def answer_rag(recent: Conversation, matches, q: QuestionContext) -> Outcome:
    """``recent``: the conversation cut to the most recent ``P`` tokens (shared)."""
    conv = copy.deepcopy(recent)
    left = q.budget - q.framed_tokens - conv.live_token_count()
    taken = []
    for match in sorted(matches, key=lambda m: ties.rank_key(m.similarity, m.chunk_id)):
        chunk = conv.chunks.get(match.chunk_id)
        if chunk is None or chunk.live or chunk.id in taken:
            continue
        cost = token_resurrection.cost(conv, chunk, with_anchors=False)
        if cost <= left:
            conv.resurrect([chunk.id], with_anchors=False)
            taken.append(chunk.id)
            left -= cost
    return q.finish(conv)


def answer_halo(base: Conversation, matches, q: QuestionContext, rule: str,
                budget_cap: int = 0, planner=make_plan, floor: int | None = None) -> Outcome:
    """The app's resurrection for the question, then the question itself.

    ``planner(conv, matches, budget)``: the index's :meth:`SemanticIndex.plan` (its
    settings: neighbours, anchors) or the plain :func:`make_plan`.  ``floor``: the room's
    floor when pruning for room (default ``P``; lower with ``resurrection_keep_share``).
    """
    conv = copy.deepcopy(base)
    if conv.settings.pruning.prune_when == "for_room":
        plan = _for_room(conv, matches, q, rule, budget_cap, planner, floor)
    else:
        plan = planner(conv, matches, budget(conv, q.framed_tokens, q.model_context, q.max_new_tokens, budget_cap))
        plan.apply(conv, rule)
    return q.finish(conv, _why(plan, matches, q))


def answer_halo_in_place(base: Conversation, matches, q: QuestionContext, rule: str,
                         budget_cap: int = 0, planner=make_plan, floor: int | None = None) -> Outcome:
    """:func:`answer_halo` for ``prune_when = "for_room"`` without copying ``base`` (42
    questions on conv-30's first 200 turns: 0.35 s instead of 2.08).  The room's prune,
    the resurrection and the fit are made in ``base``, read, and taken back
    (:meth:`Conversation.trial`), so ``base`` is exactly as it was afterwards.  The
    question itself never joins: its tokens are counted, as :func:`answer_full` does."""
    if base.settings.pruning.prune_when != "for_room":
        raise ValueError("answer_halo_in_place is for prune_when = 'for_room'")
    with base.trial():
        plan = _for_room(base, matches, q, rule, budget_cap, planner, floor)
        recall, live = evidence_recall(base, q.question.evidence, q.turn_of)
        why = _why(plan, matches, q)
        missing = {d: why(d) for d in q.question.evidence if d not in live}
        return Outcome(recall, base.live_token_count() + q.framed_tokens, live, missing)


def _for_room(conv: Conversation, matches, q: QuestionContext, rule: str, budget_cap: int, planner,
              floor: int | None):
    """The question's plan pruned just enough for (memory/room.py), applied, and the
    context then fitted to the prompt budget; returns the plan."""
    plan = plan_with_room(conv, matches, planner, user_tokens=q.framed_tokens, max_context=q.model_context,
                          max_new_tokens=q.max_new_tokens,
                          floor=conv.settings.pruning.max_context_tokens if floor is None else floor,
                          cap=budget_cap).plan
    plan.apply(conv, rule)
    conv.prune_to_fit(q.budget - q.framed_tokens, keep_latest_exchange=True)  # nothing came back: fit anyway
    return plan


def _why(plan, matches, q: QuestionContext):
    """Why an evidence turn is not live after ``plan``."""
    searched = {m.turn_id for m in matches}
    skipped = {p.match.turn_id for p in plan.skipped}

    def why(dia_id: str) -> str:
        turn_id = q.turn_of[dia_id]
        if turn_id in skipped:
            return "over budget"
        if turn_id in searched:
            return "retrieved, not resurrected"
        return "never retrieved"

    return why


def answer_halo_dry(base: Conversation, matches, q: QuestionContext, planner=make_plan,
                    budget_cap: int = 0, floor: int | None = None, order: str | None = None) -> Outcome:
    """:func:`answer_halo` without copying ``base`` (the copy was two thirds of a
    question-time run): recall and tokens read off the plan, which names exactly the
    chunks resurrection makes live (matches, their anchors as planned, their framing).
    Not for ``prune_when = "for_room"``, whose plan also prunes.

    With ``floor`` the plan makes its room as the app's session does when
    ``resurrection_keep_share`` < 1 (:func:`~halo_weave.memory.room.plan_with_room`, the
    context counted as at most ``floor`` tokens): the prune is made in ``base``, read, and
    taken back (:meth:`Conversation.trial`) before this returns."""
    if base.settings.pruning.prune_when == "for_room":
        raise ValueError("a for_room plan prunes: use answer_halo")
    if floor is None:
        plan = planner(base, matches, budget(base, q.framed_tokens, q.model_context, q.max_new_tokens, budget_cap))
        return _read_plan(base, plan, matches, q)
    with base.trial():
        made = plan_with_room(base, matches, planner, user_tokens=q.framed_tokens, max_context=q.model_context,
                              max_new_tokens=q.max_new_tokens, floor=floor, cap=budget_cap, order=order)
        return _read_plan(base, made.plan, matches, q)


def keep_relevant(conv, base_live: set[int], plan, message: str, embedder, share: float) -> list[int] | None:
    """What the app keeps of the recall (the live content chunks of ``conv`` not in
    ``base_live``): the most relevant to ``message`` first (:mod:`halo_weave.memory.relevance`,
    from ``plan``'s order), as :meth:`halo_weave.session.recall.Recall.keep_relevant`
    does; the rest are pruned.  None when there is nothing to choose from (fewer than two
    chunks came back)."""
    back = [c for c in conv.live_chunks() if c.id not in base_live and not c.framing]
    if len(back) < 2:
        return None
    order = relevance.rank_with(embedder, best_first(plan, back),
                                {c.id: conv.chunk_text(c.id) for c in back}, message)
    keep, given_back = relevance.choose(conv, order, share)
    for chunk_id in given_back:
        conv.prune_chunk(chunk_id)
    return keep


def answer_halo_kept(base: Conversation, matches, q: QuestionContext, planner, budget_cap: int, floor: int,
                     order: str | None, embedder, share: float, message: str, *, extra_room: int = 0,
                     record=None) -> Outcome:
    """:func:`answer_halo_dry`'s plan applied, then what the app keeps of it: the
    recalled paragraphs ranked by their relevance to ``message`` (the question as searched,
    :mod:`halo_weave.memory.relevance`), the least relevant pruned until ``share`` of
    the recalled tokens is left.  Made in ``base`` and taken back
    (:meth:`Conversation.trial`).

    ``extra_room``: tokens the plan may fill beyond the prompt's room (a wider pool to
    choose from; the result may then overrun the budget).  ``record(conv, before, plan)``
    is called with the plan applied, before the choice (:mod:`.recall_dump`)."""
    if base.settings.pruning.prune_when == "for_room":
        raise ValueError("a for_room plan prunes: use answer_halo")
    with base.trial():
        made = plan_with_room(base, matches, planner, user_tokens=q.framed_tokens,
                              max_context=q.model_context + extra_room,
                              max_new_tokens=q.max_new_tokens, floor=floor, cap=budget_cap, order=order)
        before = {c.id for c in base.live_chunks()}
        base_tokens = base.live_token_count()
        made.plan.apply(base, base.settings.recall.resurrection_brightness)
        if record is not None:
            record(base, before, made.plan)
        keep_relevant(base, before, made.plan, message, embedder, share)
        recall, live = evidence_recall(base, q.question.evidence, q.turn_of)
        why = _why(made.plan, matches, q)
        missing = {d: why(d) for d in q.question.evidence if d not in live}
        tokens = base.live_token_count()
        return Outcome(recall, tokens + q.framed_tokens, live, missing, tokens - base_tokens)


def _read_plan(base: Conversation, plan, matches, q: QuestionContext) -> Outcome:
    """Recall and tokens of ``base`` with ``plan`` applied, read without applying it."""
    coming = set(plan.chunk_ids)
    if plan.with_anchors:
        coming.update(a.id for p in plan.taken for a in anchors_of(base, base.chunks[p.match.chunk_id]))
    live = [d for d in q.question.evidence
            if any(c.live or c.id in coming for c in base.content_chunks(q.turn_of[d]))]
    searched = {m.turn_id for m in matches}
    skipped = {p.match.turn_id for p in plan.skipped}
    missing = {}
    for dia_id in q.question.evidence:
        if dia_id not in live:
            turn_id = q.turn_of[dia_id]
            missing[dia_id] = ("over budget" if turn_id in skipped else
                               "retrieved, not resurrected" if turn_id in searched else "never retrieved")
    recall = len(live) / len(q.question.evidence) if q.question.evidence else float("nan")
    return Outcome(recall, base.live_token_count() + plan.tokens + q.framed_tokens, live, missing, plan.tokens)
