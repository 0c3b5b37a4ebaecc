"""Turn-by-turn replay of a LoCoMo dialogue through the app's own turn.

Per turn, the app's turn pipeline (:class:`~halo_weave.session.TurnPipeline`, the steps
the window runs) runs it on a :class:`~halo_weave.session.ChatSession` in memory (no
file) whose model's window is the bench's ``C``: a user turn is saved
(:meth:`~halo_weave.session.TurnPipeline.save`) and, where pruning waits for room, fitted
to the window (``saved``); a policy that prunes after each exchange prunes only then (P
after every exchange, not at the message: fifo's P is the prompt budget ``C -
max_new_tokens``, so a fit at the message would prune each exchange twice); an assistant turn is
streamed (:meth:`~halo_weave.session.TurnPipeline.answer`) from :class:`TeacherForced`, a
backend whose "answer" is the dialogue's own turn with its teacher-forced attention (one
magnitude-voting step per token, applied *before* the token is appended), and the
finish prunes as the app does after each exchange (the
policy's ``prune_to`` and ``hysteresis`` are the settings' ``max_context_tokens`` and
``prune_hysteresis``; the exchange just read is kept).  A policy with ``resurrect`` set
runs the app's semantic resurrection on every user message, before the message joins
(search; the app's plan, :meth:`~halo_weave.semantic_index.SemanticIndex.plan`, with
neighbours of the same sitting and anchors if room, under the universal equation for the
bench's ``C``; :meth:`Conversation.resurrect` with the policy's brightness rule);
the search sees only turns said before that message.  A policy that prunes only for room
(``prune_when = "for_room"``, the ``lazy-*`` methods) keeps the model's window live
between messages and prunes just enough for each message's plan, as the app's session
does (:mod:`halo_weave.memory.room`; ``prune_to`` is then P, the floor of that room).

A :class:`Policy` is what changes the attention the model pays (what stays live during
the replay), so each policy needs its own teacher-forced pass.  Every forced assistant
turn also records the log-likelihood of its real tokens and which tokens were live
(:class:`FidelityRecord`), for the continuation-fidelity figures (:mod:`.fidelity`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable, Protocol, Sequence

import numpy as np

from halo_weave.core import token_resurrection
from halo_weave.core import ties
from halo_weave.core.chat_template import build_framing, system_text
from halo_weave.conversation import Conversation, Framing
from halo_weave.events import TokenEvent
from halo_weave.memory.recall_plan import make_plan
from halo_weave.memory.room import plan_with_room
from halo_weave.rules import prune_order
from halo_weave.session import ChatSession, Message
from halo_weave.settings import Settings

from ..locomo import Dialogue


class AttentionSource(Protocol):
    """What the replay needs from a model (see :mod:`.attention`)."""

    def tokenize(self, text: str) -> list[tuple[int, str]]: ...

    def teacher_force(self, input_ids: Sequence[int], forced_ids: Sequence[int],
                      keys: Sequence | None = None) -> np.ndarray: ...


@dataclass(frozen=True)
class Policy:
    """How a replay prunes and scores.

    ``prune_to``: live-token target after each exchange (0: never prune).  With
    ``hysteresis`` h < 1, a context over ``prune_to`` is pruned to ``h * prune_to``
    (fewer, larger prunes: fewer re-prefills on the server).  ``score_user``: user turns
    are scored from their prefill attention too (teacher-forced like an answer).
    """

    name: str
    prune_to: int
    hysteresis: float = 1.0
    score_user: bool = False
    attention: bool = True  # False: no model at all (the "full" conversation)
    rank: str = "peak"  # "mean": an experiment, prune by mean chunk brightness (see below)
    #: Settings the policy changes (brightness_rule, chunk_rank, prune_order, ...).
    settings: tuple = ()
    #: Resurrect on every user message with this rule ("at_prune" / "mean"); "" = never.
    resurrect: str = ""

    @property
    def reads_attention(self) -> bool:
        """False when nothing reads the brightness (oldest-first pruning: the order, the
        resurrection plan and the fidelity figures do not depend on it)."""
        return prune_order(dict(self.settings).get("prune_order", "brightness")).needs_brightness


@dataclass
class TokenizedDialogue:
    """A dialogue's turns and questions, tokenized once with the model's tokenizer."""

    dialogue: Dialogue
    framing: Framing
    system: list[tuple[int, str]]
    turns: list[tuple[list[int], list[str]]]
    questions: list[tuple[list[int], list[str]]]

    def question_tokens(self, i: int) -> int:
        """Tokens question ``i`` adds as a user turn, framing included."""
        prefix, suffix = self.framing.prefix["user"][0], self.framing.suffix["user"][0]
        return len(self.questions[i][0]) + len(prefix) + len(suffix)


def tokenize_dialogue(dialogue: Dialogue, tokenize: Callable[[str], list[tuple[int, str]]],
                      settings: Settings) -> TokenizedDialogue:
    """Tokenize framing, system prompt, every turn and every question once."""

    def split(text: str) -> tuple[list[int], list[str]]:
        pieces = tokenize(text) or tokenize("…")
        return [int(i) for i, _ in pieces], [t for _, t in pieces]

    framing = build_framing(tokenize)
    system = list(tokenize(system_text(settings.chat.system_prompt)))
    return TokenizedDialogue(
        dialogue, framing, system,
        [split(t.text) for t in dialogue.turns],
        [split(q.question) for q in dialogue.questions],
    )


class MeanRankConversation(Conversation):
    """Experiment: prune by a chunk's *mean* token brightness instead of its peak.

    Peaks saturate: tokens start at the cap and one attended token (a newline, a name)
    keeps a whole chunk there, so peak ranking degenerates to oldest-first among ties.
    Only the ranking changes; anchors, pins and everything else are the app's.
    """

    def chunk_peaks(self):
        ids, starts = self.table.chunk_spans()
        if len(ids) == 0:
            return ids, np.zeros(0, np.int32)
        sums = np.add.reduceat(self.table.brightness.astype(np.int64), starts)
        counts = np.diff(np.append(starts, len(self.table)))
        return ids, (sums // counts).astype(np.int32)


def new_conversation(tok: TokenizedDialogue, settings: Settings, rank: str = "peak") -> Conversation:
    """An empty conversation with the dialogue's framing and system prompt."""
    conv = (MeanRankConversation if rank == "mean" else Conversation)(settings, tok.framing)
    conv.set_system_prompt(settings.chat.system_prompt, [i for i, _ in tok.system],
                           [t for _, t in tok.system])
    return conv


def live_keys(conv: Conversation) -> list[int]:
    """One identity per input cell: negative for the system prompt, else the position."""
    n = len(conv.system.ids)
    return list(range(-n, 0)) + conv.table.position.tolist()


@dataclass
class Trace:
    """Peak brightness of every live content turn after each exchange."""

    steps: list[int] = field(default_factory=list)  # voting steps (forced tokens) so far
    peaks: list[dict[int, int]] = field(default_factory=list)  # turn id -> peak brightness

    def record(self, conv: Conversation, step: int) -> None:
        ids, peaks = conv.chunk_peaks()
        per_turn: dict[int, int] = {}
        for chunk_id, peak in zip(ids.tolist(), peaks.tolist()):
            chunk = conv.chunks[chunk_id]
            if not chunk.framing:
                per_turn[chunk.turn_id] = max(per_turn.get(chunk.turn_id, -10**9), int(peak))
        self.steps.append(step)
        self.peaks.append(per_turn)


@dataclass
class Replay:
    """The end-of-conversation state of one policy, and what it cost."""

    policy: Policy
    conv: Conversation
    seconds: float
    votes: int
    pruned_chunks: int
    prune_events: int
    trace: Trace
    fidelity: list[FidelityRecord] = field(default_factory=list)
    resurrected_chunks: int = 0
    resurrected_tokens: int = 0
    cpu_seconds: float = 0.0  # this process's CPU time (what the load does not inflate)


@dataclass
class FidelityRecord:
    """One forced assistant turn: its mean NLL (nats/token) and what was live for it."""

    turn_index: int
    nll: float
    live_positions: np.ndarray  # positions of the live content tokens before the turn


def force(source, input_ids, forced_ids, keys, rows: bool = True):
    """``(rows, logprobs)`` from a source with ``force`` (llama.cpp: one decode, log-probs
    too) or with ``teacher_force`` only (log-probs unknown: NaN).  ``rows=False``: the
    source may skip reading attention; the rows are then a uniform placeholder."""
    if hasattr(source, "force"):
        out = source.force(input_ids, forced_ids, keys, rows=rows)
        if out.rows is None:
            n0, m = len(input_ids), len(forced_ids)
            widths = n0 + np.arange(m)
            uniform = (np.arange(n0 + m - 1)[None, :] < widths[:, None]) / widths[:, None]
            return uniform.astype(np.float32), out.logprobs
        return out.rows, out.logprobs
    rows = source.teacher_force(input_ids, forced_ids, keys)
    return rows, np.full(len(forced_ids), np.nan)


class TeacherForced:
    """The backend interface over an :class:`AttentionSource`: it "answers" ``conv``'s
    open turn with the dialogue's own turn (``forced``), each token carrying its
    teacher-forced attention."""

    capabilities = type("Capabilities", (), {"attention": True, "token_ids": True})()

    def __init__(self, source: AttentionSource, conv: Conversation, rows: bool = True) -> None:
        self.source = source
        self.conv = conv
        self.rows = rows  # False: nothing reads the brightness, skip the attention readout
        self.logprobs = np.zeros(0)

    def tokenize(self, text: str, add_special_tokens: bool = False) -> list[tuple[int, str]]:
        return self.source.tokenize(text)

    def stream(self, *, input_ids, forced: tuple[list[int], list[str]], **params):
        ids, texts = forced
        # One identity per cell: the live context's, then the forced tokens' positions to come.
        start = self.conv.next_position
        keys = live_keys(self.conv) + list(range(start, start + len(ids)))
        rows, self.logprobs = force(self.source, input_ids, ids, keys, self.rows)
        n0 = len(input_ids)
        for j, (token_id, text) in enumerate(zip(ids, texts)):
            yield TokenEvent(token_id, text, rows[j, : n0 + j])

    def abort(self) -> bool:
        return False


def replay(tok: TokenizedDialogue, policy: Policy, settings: Settings,
           source: AttentionSource | None, progress: Callable[[int, int], None] | None = None,
           *, search: Callable[[str, int], list] | None = None, model_context: int = 2048,
           max_new_tokens: int = 200) -> Replay:
    """Replay every turn of ``tok`` under ``policy`` (see the module docstring).

    ``search(text, before_turn)`` returns the index's matches among turns before
    ``before_turn`` (needed when the policy resurrects); ``model_context`` and
    ``max_new_tokens`` size the universal equation of that resurrection.
    """
    started, cpu = time.perf_counter(), time.process_time()
    session = ChatSession(settings.replace(max_context_tokens=policy.prune_to, prune_hysteresis=policy.hysteresis,
                                           max_new_tokens=max_new_tokens, **dict(policy.settings)))
    if policy.attention:  # the replayed model's window: C (the "full" reference has none)
        session.model_info = SimpleNamespace(max_context=model_context)
    conv = session.adopt(new_conversation(tok, session.settings, policy.rank))
    pipeline = session.pipeline
    fits_at_message = session.server.prunes_for_room  # the others prune after each exchange only
    backend = TeacherForced(source, conv, policy.reads_attention) if policy.attention else None
    trace = Trace()
    fidelity: list[FidelityRecord] = []
    votes = pruned = events = resurrected = resurrected_tokens = 0
    turns = tok.dialogue.turns
    if policy.attention and hasattr(source, "reset"):
        source.reset(keep_pruned=bool(policy.resurrect))  # kept cells only where they return
    for i, turn in enumerate(turns):
        ids, texts = tok.turns[i]
        exchange_end = turn.role == "assistant" or i == len(turns) - 1
        gone: list = []
        if policy.resurrect and turn.role == "user" and search is not None and conv.graveyard():
            before = conv.live_token_count()
            room = session.recall.budget(len(ids))  # the universal equation, for the model's window C
            matches = search(turn.text, conv.next_turn_id)
            if policy.resurrect == "plain":  # rag: by similarity, no anchors
                back = conv.resurrect(plain_plan(conv, matches, room), with_anchors=False)
            else:
                planner = getattr(search, "plan", None) or make_plan  # the app's (past_search), else the default plan
                if session.recall.makes_room:  # prune just enough for the plan, as the app's session does
                    made = plan_with_room(conv, matches, planner, **session.recall.room_terms(len(ids)))
                    plan, gone = made.plan, made.pruned
                    before -= sum(c.token_count for c in gone)
                else:
                    plan = planner(conv, matches, room)
                back = plan.apply(conv, policy.resurrect)  # anchors as planned (if room: only those that fit)
            resurrected += sum(1 for c in back if not c.framing)
            resurrected_tokens += conv.live_token_count() - before
        if policy.attention and (turn.role == "assistant" or policy.score_user):
            live = conv.table.position[~conv.table.framing].copy()
            answered = pipeline.answer(backend, role=turn.role, created_at=turn.created_at, prune=exchange_end,
                                       forced=(ids, texts))
            if turn.role == "assistant":
                fidelity.append(FidelityRecord(i, float(-backend.logprobs.mean()), live))
            votes += len(ids)
            gone = answered.end.pruned
        elif turn.role == "user":
            message = Message(turn.text, ids, texts, created_at=turn.created_at)
            pipeline.save(message)
            if fits_at_message:  # the app's prompt + answer within the model's window
                gone = gone + pipeline.saved(message)
            if exchange_end:
                gone = session.prune()
        else:
            conv.add_turn(turn.role, ids, texts, turn.created_at)  # "full": no model, never pruned
        if gone:
            pruned += sum(1 for c in gone if not c.framing)
            events += 1
        if exchange_end and policy.attention:
            trace.record(conv, votes)
        if progress is not None:
            progress(i + 1, len(turns))
    return Replay(policy, conv, time.perf_counter() - started, votes, pruned, events, trace,
                  fidelity, resurrected, resurrected_tokens, time.process_time() - cpu)


def plain_plan(conv: Conversation, matches, room: int) -> list[int]:
    """SillyTavern-style vector storage: chunks by similarity, no anchors, within ``room``."""
    taken: list[int] = []
    for match in sorted(matches, key=lambda m: ties.rank_key(m.similarity, m.chunk_id)):
        chunk = conv.chunks.get(match.chunk_id)
        if chunk is None or chunk.live or chunk.framing or chunk.id in taken:
            continue
        cost = token_resurrection.cost(conv, chunk, with_anchors=False)
        if cost <= room:
            taken.append(chunk.id)
            room -= cost
    return taken
