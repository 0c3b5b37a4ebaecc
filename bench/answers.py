"""Does the model answer from its memory?  Answer F1 on LoCoMo from each method's context.

The memory benchmark (scripts/bench_memory.py) measures whether a question's evidence is
live; this one measures what the model then answers.  For every question of a subset
(stratified by category, fixed by ``--seed``), each method builds the context the model
would get, with the app's own code (conversation, pruning, the semantic index over a real
store, the resurrection plan and the room it makes); the prompt is that context's token
ids exactly as the app sends them (system prompt, every live chunk with its turn's chat
framing, the question as the user's message, the assistant's opening), and the model
answers greedily (at most ``--answer-tokens`` new tokens) on the app's llama.cpp engine.
Answers are scored with LoCoMo's answer F1 and a containment score
(bench/answer_scoring.py).  Per method it also reports the tokens brought back per
question, the share of them that belong to evidence turns (precision), and evidence
recall.  See docs/answers.md.

    python scripts/bench_answers.py --quick --json
    python scripts/bench_answers.py --json                       # the documented subset
    python scripts/bench_answers.py --per-category 0 --json      # the whole dev set

The last line with ``--json`` is one JSON object of figures.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from halo_weave.core import recall as recall_core
from halo_weave.core import token_resurrection
from halo_weave.core.framing import DATE_WORDS
from halo_weave.server import omp  # noqa: E402

omp.configure()  # llama.cpp's threads wait as the server's do (a bounded spin), before it loads
from halo_weave.memory import attended, recall_note  # noqa: E402
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from . import answer_scoring as scoring  # noqa: E402
from . import locomo  # noqa: E402
from .memory import retrieval  # noqa: E402
from .memory.methods import keep_relevant  # noqa: E402
from .memory.replay import Policy, new_conversation, replay, tokenize_dialogue  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "locomo" / "locomo_dev.json"
RAG_CANDIDATES = 200
#: What the user adds to a question: LoCoMo's gold answers are short phrases.
ASK = " Answer in a few words."

#: name -> (kind, index settings changed from the app's defaults, the recall note before
#: the question: :mod:`halo_weave.memory.recall_note`, the app's ``recall_note`` setting;
#: a :class:`~halo_weave.memory.recall_note.NoteShape` is a note of that shape).
#: The recall settings before the floors and the cap (what "before" runs, the base of the
#: variants below, so that their names keep their meaning when a default moves).
BEFORE = {"min_similarity": 0.0, "recall_relative_floor": 0.0, "recall_max_chunks": 0, "recall_keep_share": 1.0}
#: The app's recall before the chat model's attention chose among it.
ALL = {"recall_keep_share": 1.0}

METHODS: dict[str, tuple[str, dict, bool | str | recall_note.NoteShape]] = {
    "oracle": ("oracle", {}, False),  # the evidence turns only: the ceiling
    # ... with the app's recall note of them (its lines and answer-type cue before the
    # question): the ceiling of the app's own prompt shape, no distractor in it.
    "oracle-note": ("oracle", {}, True),
    # The whole conversation in the model's own window (the most recent turns that fit it,
    # when it does not): what "why not give my model the whole chat?" would answer.
    "full": ("full", {}, False),
    # The app's prompt with a perfect recall: the most recent P tokens, the evidence turns
    # brought back in place and nothing else, and their recall note.  What any recall at
    # P could reach; the oracle has no recent context around the evidence.
    "recent-evidence": ("recent-evidence", {}, True),
    "fifo": ("fifo", {}, False),  # the most recent whole turns that fit
    "rag": ("rag", {}, False),  # recent P, then plain cosine until the budget is spent
    "default": ("halo", {}, True),  # the app's defaults, recall note included
    "default-nonote": ("halo", {}, False),  # ... without the recall note
    "default-notelive": ("halo", {}, "live"),  # ... the note also copying matches that were live
    # The app's recall, all of it kept (recall_keep_share 1): the default before the
    # chat model's attention chose among what came back.
    "default-all": ("halo", ALL, True),
    "default-all-nonote": ("halo", ALL, False),
    "before": ("halo", BEFORE, False),
    "before-note": ("halo", BEFORE, True),
    # What one message may bring back (settings recall_relative_floor, recall_max_chunks,
    # min_similarity), measured for recall in bench_memory's recent-* rows of the same names.
    "floor60": ("halo", {**BEFORE, "recall_relative_floor": 0.6}, False),
    "floor70": ("halo", {**BEFORE, "recall_relative_floor": 0.7}, False),
    "floor80": ("halo", {**BEFORE, "recall_relative_floor": 0.8}, False),
    "min30-floor55-cap24": ("halo", {**ALL, "min_similarity": 0.3, "recall_relative_floor": 0.55,
                                     "recall_max_chunks": 24}, False),
    "min30-floor60": ("halo", {**BEFORE, "min_similarity": 0.3, "recall_relative_floor": 0.6}, False),
    "cap8": ("halo", {**BEFORE, "recall_max_chunks": 8}, False),
    "cap12": ("halo", {**BEFORE, "recall_max_chunks": 12}, False),
    "floor80-cap8": ("halo", {**BEFORE, "recall_relative_floor": 0.8, "recall_max_chunks": 8}, False),
    "floor80-cap8-note": ("halo", {**BEFORE, "recall_relative_floor": 0.8, "recall_max_chunks": 8}, True),
    "keep100": ("halo", {**BEFORE, "resurrection_keep_share": 1.0}, False),  # room: what pruning left
    # The chat model chooses among what came back (halo_weave.memory.attended; the app's
    # default keeps half): the share of the recalled tokens kept.
    "attn33": ("halo-attention", {"recall_keep_share": 0.33}, True),
    "attn-third": ("halo-attention", {"recall_keep_share": 1 / 3}, True),
    "attn67": ("halo-attention", {"recall_keep_share": 2 / 3}, True),
    "default-attention": ("halo-attention", {}, True),  # the attention choosing at the default share
    # The app's order of what came back (halo_weave.memory.relevance) keeping other shares.
    "keep33": ("halo", {"recall_keep_share": 1 / 3}, True),
    "keep67": ("halo", {"recall_keep_share": 2 / 3}, True),
    # The note's shape (the app's copies 4 paragraphs' first 40 tokens, 160 in all).
    "note3x64": ("halo", {}, recall_note.NoteShape(lines=3, line_tokens=64, tokens=200)),
    "note4x64": ("halo", {}, recall_note.NoteShape(lines=4, line_tokens=64, tokens=256)),
    # The note copying the sentences that hold the question's words, not the first ones.
    "note-focus": ("halo", {}, recall_note.NoteShape(focused=True)),
    # The note ending with the kind of answer asked for: a number, a place (a date only
    # after dated lines: "dated-cue", which with --dates text is the transcript's own).
    "cue": ("halo", {}, recall_note.NoteShape(cue=True)),
    # Each note line opening with the day its paragraph was said (with --dates note the
    # context holds no day; with --dates text the line's own day is kept, not repeated),
    # without and with the cue.
    "undated": ("halo", {}, recall_note.NoteShape()),
    "dated": ("halo", {}, recall_note.NoteShape(dated=True)),
    "dated-cue": ("halo", {}, recall_note.NoteShape(dated=True, cue=True)),
    "focus-cue": ("halo", {}, recall_note.NoteShape(focused=True, cue=True)),
    # The dated, cued note with its lines in the order they were said, not best first.
    "timeline": ("halo", {}, recall_note.NoteShape(dated=True, cue=True, timeline=True)),
    # A second hop: the search's words also take the best match's 4 rarest words.
    "hop": ("halo", {"query_hop_terms": 4}, True),
    # The lines of a speaker the question names favoured in the search ("What does Melanie
    # do to relax?": her own lines, "Melanie: ..."), by speaker_weight.
    "speaker": ("halo", {"speaker_weight": 0.1}, True),
    "speaker05": ("halo", {"speaker_weight": 0.05}, True),
    "speaker20": ("halo", {"speaker_weight": 0.2}, True),
    "speaker-all": ("halo", {"speaker_weight": 0.1, **ALL}, True),
    "speaker-hop": ("halo", {"speaker_weight": 0.1, "query_hop_terms": 4}, True),
    "speaker-floor45": ("halo", {"speaker_weight": 0.1, "recall_relative_floor": 0.45}, True),
    "speaker-q45": ("halo", {"speaker_weight": 0.1, "query_max_results": 45}, True),
    # Whole paragraphs (up to 128 tokens each) copied before the question.
    "note-whole": ("halo", {}, recall_note.NoteShape(lines=4, line_tokens=128, tokens=400)),
    # A question asking for several things (:func:`asks_for_several`: "What books has Tim
    # read?") keeps all of what its recall brought back, not the most relevant half; the
    # others are asked as the default asks them.  ``several-note``: its note also copies
    # more paragraphs, fewer words of each (the sentences holding the question's words).
    "several-all": ("halo-several", ALL, True),
    "several-note": ("halo-several", ALL, recall_note.NoteShape(lines=8, line_tokens=28, tokens=240,
                                                               focused=True, dated=True, cue=True)),
    # The search reads the message and the chat model's own answer to it from the recent
    # context alone (HYDE_TOKENS tokens, greedy: a hypothetical answer whose words reach
    # paragraphs the question's do not); the app could write it in the read-ahead.
    "hyde": ("halo-hyde", {}, True),
}
BUNDLED_METHODS = ["oracle", "fifo", "rag", "before", "before-note", "default", "default-all", "default-nonote",
                   "floor70", "cap12", "floor80-cap8"]
LARGER_METHODS = ["oracle", "fifo", "default"]
QUICK_METHODS = ["oracle", "fifo", "full", "default"]
QUICK_CONVERSATIONS = ["conv-30"]
#: Tokens of the chat model's answer without recall that ``hyde`` searches with.
HYDE_TOKENS = 24
#: Words after "what" or "which" that end a question's subject ("What books *has* Tim
#: read?") and words ending in "s" that are not plural nouns.
AUXILIARIES = frozenset("does did do has have had is are was were can could would will should might may".split())
NOT_PLURAL = frozenset("us his this is was has does its yes unless plus bus gas news".split())
#: Defaults are chosen on the tuning conversations and reported on the test ones.
SPLITS = {"tune": ["conv-26", "conv-30", "conv-41"], "test": ["conv-42", "conv-43", "conv-44"]}
#: Methods asked each question alone, one after another (their prompts share a start).
ALONE = ("oracle", "fifo", "full")
#: Resamples of the bootstrap intervals.
BOOTSTRAP = 2000


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(DEFAULT_DATA), help="LoCoMo-format JSON file")
    p.add_argument("--prune-to", type=int, default=1024, help="P: live tokens between messages")
    p.add_argument("--context", type=int, default=2048, help="C: the model's context at question time")
    p.add_argument("--max-new-tokens", type=int, default=200,
                   help="room kept for the answer in the budget (the memory benchmark's 200)")
    p.add_argument("--answer-tokens", type=int, default=32, help="new tokens the model may answer with")
    p.add_argument("--models", default="bundled",
                   help="comma-separated: 'bundled', 'smollm2', or GGUF paths; the first is the "
                        "bundled model's figures, the others go under models.<name>")
    p.add_argument("--methods", default="", help=f"for the first model (default: {','.join(BUNDLED_METHODS)})")
    p.add_argument("--other-methods", default=",".join(LARGER_METHODS), help="for the other models")
    p.add_argument("--conversations", default="", help="comma-separated sample ids (default: all)")
    p.add_argument("--split", choices=["", *SPLITS], default="",
                   help="the tuning conversations (" + ", ".join(SPLITS["tune"]) + ") or the test ones ("
                        + ", ".join(SPLITS["test"]) + "); default: --conversations")
    p.add_argument("--only", default="",
                   help="comma-separated sample ids: ask only their questions of the subset (drawn as "
                        "without it: a long run split across processes asks the same questions)")
    p.add_argument("--categories", default="",
                   help="comma-separated category names (multi-hop, temporal, open-domain, "
                        "single-hop): ask only their questions of the subset")
    p.add_argument("--several-only", action="store_true",
                   help="ask only the questions that ask for several things (see asks_for_several)")
    p.add_argument("--full-context", type=int, default=0,
                   help="the window `full` reads the conversation in (default: the model's trained window)")
    p.add_argument("--per-category", type=int, default=6,
                   help="questions per category in the subset (0: every question)")
    p.add_argument("--seed", type=int, default=1, help="the subset's seed")
    p.add_argument("--threads", type=int, default=2, help="model threads")
    p.add_argument("--kv", choices=["exact", "surgery", "surgery-any", "in-order", "surgery-run"], default="exact",
                   help="how the engine's cache follows the prompts: exact (default: everything "
                        "after the first change re-run, so an answer depends on its prompt only), "
                        "the server's KV surgery (kept states put back only in the context "
                        "they were kept in), surgery putting them back wherever their tokens "
                        "match, surgery with the message run after what came back, or surgery "
                        "running every span that comes back (all four depend on the prompts before)")
    p.add_argument("--notes-tool", action="store_true",
                   help="the system prompt with the notes tool's instructions (the app adds them "
                        "when the tool is on)")
    p.add_argument("--dates", choices=["text", "note"], default="text",
                   help="where a turn's day is: in its text (default: a transcript line "
                        "\"[8 May 2023] Caroline: ...\") or only in its time, as the app keeps "
                        "a message (\"Caroline: ...\"; a dated recall note then writes it)")
    p.add_argument("--ask", default=ASK,
                   help="added to every question as the user writes it (the search reads it too)")
    p.add_argument("--embed-cache", default="", help="file keeping MiniLM vectors between runs")
    p.add_argument("--quick", action="store_true",
                   help=f"{QUICK_CONVERSATIONS[0]}, 3 questions per category, the bundled model, "
                        f"methods {','.join(QUICK_METHODS)}")
    p.add_argument("--no-answer", action="store_true",
                   help="build each method's prompt and report what it brought back (evidence "
                        "recall, tokens) without asking the model: minutes, not hours, to tune a "
                        "search on")
    p.add_argument("--show", type=int, default=0, help="print this many answers per method")
    p.add_argument("--answers", default="", help="write every answer to this file, a JSON object a line "
                                                  "(to compare methods question by question)")
    p.add_argument("--json", action="store_true", help="print one JSON object of figures last")
    return p.parse_args(argv)


def log(*args) -> None:
    print(*args, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- the dialogue


def with_speakers(dialogue: locomo.Dialogue, dates: str = "text") -> locomo.Dialogue:
    """Each turn's text as a transcript line: ``"[8 May 2023] Caroline: text"``.  Two
    people talk in LoCoMo and its questions name them and ask when: a chat app's user
    would have said who and when in the text the model reads.  ``dates="note"``: the
    line without its day (``"Caroline: text"``), as the app's context holds a message;
    the day is then only the turn's time, which a dated recall note writes."""
    if dates == "note":
        turns = [replace(t, text=f"{t.speaker}: {t.text}") for t in dialogue.turns]
    else:
        turns = [replace(t, text=f"{_day(t.created_at)} {t.speaker}: {t.text}") for t in dialogue.turns]
    return replace(dialogue, turns=turns)


def _day(stamp: float) -> str:
    """``"[8 May 2023]"``: the UTC day of ``stamp`` written as a dated recall note writes a
    day (so that a note recognises a transcript line's own day and does not repeat it)."""
    day = datetime.fromtimestamp(stamp, timezone.utc)
    return "".join(DATE_WORDS[piece] for piece in recall_note.day_pieces(day))


def subset(dialogues, per_category: int, seed: int) -> list[tuple[locomo.Dialogue, locomo.Question]]:
    """Questions with evidence, ``per_category`` of each category drawn with ``seed``
    (0: all), in the data's order."""
    pool = [(d, q) for d in dialogues for q in d.questions if q.evidence]
    if per_category <= 0:
        return pool
    rng = random.Random(seed)
    chosen = set()
    for category in sorted(locomo.CATEGORIES):
        found = [i for i, (_, q) in enumerate(pool) if q.category == category]
        chosen.update(rng.sample(found, min(per_category, len(found))))
    return [pool[i] for i in sorted(chosen)]


def category_counts(dialogues) -> dict[int, int]:
    """How many questions with evidence each category has in ``dialogues``."""
    counts: dict[int, int] = {}
    for d in dialogues:
        for q in d.questions:
            if q.evidence:
                counts[q.category] = counts.get(q.category, 0) + 1
    return counts


# ---------------------------------------------------------------------- contexts


@dataclass
class Context:
    """One method's prompt for one question, and what it brought back."""

    ids: list[int]
    recalled_tokens: int
    evidence_tokens: int  # of the recalled content tokens, those of evidence turns
    recalled_chunks: int
    recall: float


@dataclass
class Prepared:
    """A conversation tokenized for one model, stored and indexed as the app does."""

    dialogue: locomo.Dialogue
    tok: object
    full: object
    recent: object
    store: object
    indexes: dict = field(default_factory=dict)


#: Room `full` keeps for a framed question.  A conversation longer than the window is cut
#: once for all its questions (the most recent turns that fit beside this room), so that
#: they share its text as their start and it is read once; cut beside each question's own
#: length, a question one token longer than the last moved the cut and the whole window
#: was read again.
FULL_QUESTION_ROOM = 192


def full_limit(window: int, answer_tokens: int, framed: int) -> int:
    """Tokens of the conversation `full` keeps: the window less the answer's room and
    :data:`FULL_QUESTION_ROOM` (the question's own length where it is longer)."""
    return window - answer_tokens - 1 - max(FULL_QUESTION_ROOM, framed)


def _keep_recent(conv, limit):
    from .memory.methods import keep_recent

    return keep_recent(conv, limit)


def evidence_turns(prep: Prepared, question) -> set[int]:
    turn_of = prep.dialogue.turn_index()
    return {turn_of[d] for d in question.evidence}


def finish(conv, prep: Prepared, question, user_text: str, answerer, base_live: set[int],
           evidence: set[int] | None = None, recalled: list[int] | None = None,
           shape: recall_note.NoteShape = recall_note.SHAPE) -> Context:
    """Add the question as the user's message and read the prompt and its figures
    (``evidence``: the evidence turns' ids in ``conv``, default the dialogue's);
    ``recalled`` (best first): what the message recalled, copied in a recall note before
    it as the app does (None: no note), in a note of ``shape``."""
    evidence = evidence_turns(prep, question) if evidence is None else evidence
    now = {c.id for c in conv.live_chunks()}
    back = [conv.chunks[i] for i in sorted(now - base_live)]
    content = [c for c in back if not c.framing]
    recalled_tokens = sum(c.token_count for c in back)
    evidence_tokens = sum(c.token_count for c in content if c.turn_id in evidence)
    live = [t for t in evidence if any(c.live for c in conv.content_chunks(t))]
    recall = len(live) / len(evidence) if evidence else float("nan")
    pieces = answerer.tokenize(user_text) or answerer.tokenize("?")
    turn = conv.add_turn("user", [int(i) for i, _ in pieces], [t for _, t in pieces])
    ids = [int(i) for i in conv.live_input_ids()]
    if recalled is not None:
        recall_core.record(conv, turn.turn_id, recalled)
        note = recall_note.for_message(conv, turn.turn_id, shape.tokens, shape)
        if note is not None:
            ids = note.insert(ids)
    ids += list(conv.framing.prefix["assistant"][0])
    return Context(ids, recalled_tokens, evidence_tokens, len(content), recall)


def build_context(method: str, prep: Prepared, question, answerer, settings, args, queries) -> Context:
    kind, options, with_note = METHODS[method]
    budget = args.context - args.max_new_tokens
    message, q_pieces, framed = asked(prep, question, answerer, args.ask)
    if kind == "oracle":
        conv = new_conversation(prep.tok, settings)
        turn_of = prep.dialogue.turn_index()
        for dia in sorted(question.evidence, key=lambda d: turn_of[d]):
            t = turn_of[dia]
            ids, texts = prep.tok.turns[t]
            conv.add_turn(prep.dialogue.turns[t].role, ids, texts, prep.dialogue.turns[t].created_at)
        recalled = [c.id for c in conv.live_chunks() if not c.framing] if with_note else None
        return finish(conv, prep, question, message, answerer, set(), set(conv.turns), recalled=recalled)
    if kind in ("fifo", "full"):
        limit = budget - framed
        if kind == "full":  # the model's whole window, less the answer's and the question's room
            limit = full_limit(answerer.window, args.answer_tokens, framed)
        conv = _keep_recent(prep.full, limit)
        return finish(conv, prep, question, message, answerer, {c.id for c in conv.live_chunks()})
    conv = copy.deepcopy(prep.recent)
    base_live = {c.id for c in conv.live_chunks()}
    if kind == "recent-evidence":
        evidence = evidence_turns(prep, question)
        back = [c.id for t in sorted(evidence) for c in conv.content_chunks(t) if not c.live]
        if back:
            conv.resurrect(back, with_anchors=False)
        return finish(conv, prep, question, message, answerer, base_live, recalled=back if with_note else None)
    if kind == "rag":
        index = index_for(prep, settings, queries, {"user_similarity_boost": 1.0, "hybrid_search": False})
        left = budget - framed - conv.live_token_count()
        for match in index.search(message, RAG_CANDIDATES):
            chunk = conv.chunks.get(match.chunk_id)
            if chunk is None or chunk.live:
                continue
            cost = token_resurrection.cost(conv, chunk, with_anchors=False)
            if cost <= left:
                conv.resurrect([chunk.id], with_anchors=False)
                left -= cost
        return finish(conv, prep, question, message, answerer, base_live)
    if kind == "halo-several":
        kind = "halo"
        if not asks_for_several(question.question):
            options, with_note = {}, True
    query = message
    if kind == "halo-hyde":
        kind = "halo"
        guess = finish(copy.deepcopy(prep.recent), prep, question, message, answerer, base_live)
        query = f"{message} {answerer.answer(guess.ids, HYDE_TOKENS).text}"
    shape = with_note if isinstance(with_note, recall_note.NoteShape) else recall_note.SHAPE
    reserve = shape.tokens if with_note else 0
    index = index_for(prep, settings, queries, options)
    made = recall_for(conv, index, query, framed + reserve, args)
    kept = None
    share = index.settings.recall.recall_keep_share
    if share < 1 and kind == "halo-attention":
        kept = keep_attended(conv, base_live, q_pieces, answerer, share)
    elif share < 1:
        kept = keep_relevant(conv, base_live, made.plan, message, queries, share)
    recalled = None
    if with_note:
        back = [c for c in conv.live_chunks() if c.id not in base_live and not c.framing]
        if with_note == "live":  # the search's best matches whether or not they had been pruned
            matched = {p.match.chunk_id for p in made.plan.taken}
            back += [c for c in conv.live_chunks() if c.id in base_live and c.id in matched and not c.framing]
        recalled = recall_note.best_first(made.plan, back) if kept is None else kept
    return finish(conv, prep, question, message, answerer, base_live, recalled=recalled, shape=shape)


def asks_for_several(message: str) -> bool:
    """Whether the question in ``message`` asks for several things: its "what" or
    "which" is followed, before its verb, by a plural noun ("What books has Tim read?",
    "Which US cities did John visit?"), the questions whose evidence is spread over the
    most turns (LoCoMo's multi-hop ones, most of them)."""
    question = recall_note.question_of(message)
    if question is None:
        return False
    words = re.findall(r"[a-z'+]+", question.lower())
    start = next((k for k, w in enumerate(words) if w in ("what", "which")), None)
    if start is None:
        return False
    for word in words[start + 1:start + 5]:
        if word in AUXILIARIES:
            return False
        if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "'s")) and word not in NOT_PLURAL:
            return True
    return False


def asked(prep: Prepared, question, answerer, ask: str) -> tuple[str, list, int]:
    """The question as the user writes it (with ``ask``), its tokens, and the tokens
    its turn takes with the chat framing."""
    message = question.question + ask
    pieces = answerer.tokenize(message)
    framing = prep.tok.framing
    return message, pieces, len(pieces) + len(framing.prefix["user"][0]) + len(framing.suffix["user"][0])


def recall_for(conv, index, message: str, user_tokens: int, args):
    """The app's recall for ``message`` (taking ``user_tokens`` with its framing and
    note) in ``conv`` (the recent context, changed in place): the search of ``index``,
    the plan with the room it makes, applied, the context pruned to the budget.
    Returns the room's result (its plan)."""
    from halo_weave.memory import room

    matches = index.search(message)
    floor = room.floor(index.settings) if room.shares_room(index.settings) else conv.live_token_count()
    made = room.plan_with_room(conv, matches, index.plan, user_tokens=user_tokens,
                               max_context=args.context, max_new_tokens=args.max_new_tokens,
                               floor=floor, cap=index.settings.recall.resurrection_budget_cap, order="age")
    made.plan.apply(conv, index.settings.recall.resurrection_brightness)
    conv.prune_to_fit(args.context - args.max_new_tokens - user_tokens, keep_latest_exchange=True, order="age")
    return made


def keep_attended(conv, base_live: set[int], q_pieces, answerer, share: float) -> list[int] | None:
    """What the app keeps of the recall (the live content chunks of ``conv`` not in
    ``base_live``) by the attention the question (``q_pieces``) pays it, as
    :func:`halo_weave.memory.attended.ranked` orders it with our server: the kept ids,
    the most attended first; the rest are pruned.  None when there is nothing to choose
    from (fewer than two chunks came back)."""
    back = [c.id for c in conv.live_chunks() if c.id not in base_live and not c.framing]
    if len(back) < 2:
        return None
    reading = attended.read_for(conv, back, [int(i) for i, _ in q_pieces], [t for _, t in q_pieces])
    keep, given_back = attended.choose(conv, reading, answerer.weigh(reading.prefix, reading.queries), share)
    for chunk_id in given_back:
        conv.prune_chunk(chunk_id)
    return keep


def index_for(prep: Prepared, settings, queries, options: dict):
    """The semantic index over ``prep``'s store with ``options`` changed from
    ``settings``, loaded once per set of options."""
    from halo_weave.semantic_index import SemanticIndex

    key = tuple(sorted(options.items()))
    if key not in prep.indexes:
        index = SemanticIndex(prep.store.conn, settings.replace(**options), queries, lock=prep.store.lock)
        index.load()
        prep.indexes[key] = index
    return prep.indexes[key]


def prepare_dialogue(dialogue, answerer, settings, folder: Path, queries, prune_to: int) -> Prepared:
    from halo_weave.semantic_index import SemanticIndex
    from halo_weave.store import ConversationStore

    tok = tokenize_dialogue(dialogue, answerer.tokenize, settings)
    full = replay(tok, Policy("full", 0, attention=False), settings, None).conv
    store = ConversationStore.open(folder / f"{dialogue.sample_id}-{abs(hash(answerer.name))}.db")
    store.save_system_prompt(full)
    for turn in full.turns.values():
        store.save_turn(full, turn)
    index = SemanticIndex(store.conn, settings, queries, lock=store.lock)
    index.index_pending(full)
    queries.save()
    prep = Prepared(dialogue, tok, full, _keep_recent(full, prune_to), store)
    prep.indexes[()] = index
    return prep


# ---------------------------------------------------------------------- figures


@dataclass
class Tally:
    f1: list = field(default_factory=list)
    contain: list = field(default_factory=list)
    recall: list = field(default_factory=list)
    recalled_tokens: list = field(default_factory=list)
    evidence_tokens: list = field(default_factory=list)
    recalled_chunks: list = field(default_factory=list)
    prompt_tokens: list = field(default_factory=list)
    computed_tokens: list = field(default_factory=list)
    seconds: list = field(default_factory=list)
    by_category: dict = field(default_factory=dict)
    recall_by_category: dict = field(default_factory=dict)
    examples: list = field(default_factory=list)

    def add(self, category: int, f1: float | None, contain: float | None, ctx: Context, answer) -> None:
        """One question's figures; ``f1`` None: its prompt was built, not answered."""
        if f1 is not None:
            self.f1.append(f1)
            self.contain.append(contain)
            self.by_category.setdefault(category, []).append(f1)
        self.recall.append(ctx.recall)
        self.recalled_tokens.append(ctx.recalled_tokens)
        self.evidence_tokens.append(ctx.evidence_tokens)
        self.recalled_chunks.append(ctx.recalled_chunks)
        self.prompt_tokens.append(answer.prompt_tokens)
        self.computed_tokens.append(answer.computed_tokens)
        self.seconds.append(answer.seconds)
        self.recall_by_category.setdefault(category, []).append(ctx.recall)

    def figures(self, weights: dict[int, int] | None = None) -> dict:
        """The method's figures; with ``weights`` (questions per category in the data)
        also ``answer_f1_weighted`` and ``evidence_recall_weighted``: the per-category
        means weighted by those counts, as if the subset had the data's mix of categories
        (a stratified subset over-weights the rare ones; the memory benchmark's recall
        is over every question)."""
        def mean(xs):
            xs = [x for x in xs if x == x]
            return round(sum(xs) / len(xs), 4) if xs else None

        def weighted(by_category):
            have = {c: v for c, v in by_category.items() if v and weights and weights.get(c)}
            total = sum(weights[c] for c in have)
            return round(sum(weights[c] * sum(v) / len(v) for c, v in have.items()) / total, 4) if total else None

        recalled = sum(self.recalled_tokens)
        return {
            "answer_f1": mean(self.f1),
            "contains": mean(self.contain),
            "evidence_recall": mean(self.recall),
            "recalled_tokens": mean(self.recalled_tokens),
            "recalled_chunks": mean(self.recalled_chunks),
            "evidence_precision": round(sum(self.evidence_tokens) / recalled, 4) if recalled else None,
            "prompt_tokens": mean(self.prompt_tokens),
            "computed_tokens": mean(self.computed_tokens),
            "seconds_per_answer": mean(self.seconds),
            "questions": len(self.recall),
            "answer_f1_by_category": {locomo.CATEGORIES[c]: mean(v) for c, v in sorted(self.by_category.items())},
            "answer_f1_weighted": weighted(self.by_category),
            "evidence_recall_weighted": weighted(self.recall_by_category),
            "evidence_recall_by_category": {locomo.CATEGORIES[c]: mean(v)
                                            for c, v in sorted(self.recall_by_category.items())},
        }


def interval(num: list[float], den: list[float], seed: int = 0) -> dict:
    """The ratio of two methods' mean F1 over the same questions (paired), with a 95 %
    percentile bootstrap interval over the questions (``BOOTSTRAP`` resamples, seeded)."""
    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if len(a) != len(b) or not len(a) or b.sum() == 0:
        return {"ratio": None, "low": None, "high": None, "questions": len(a)}
    picks = np.random.default_rng(seed).integers(0, len(a), size=(BOOTSTRAP, len(a)))
    sums_a, sums_b = a[picks].sum(axis=1), b[picks].sum(axis=1)
    boot = sums_a[sums_b > 0] / sums_b[sums_b > 0]
    low, high = np.percentile(boot, [2.5, 97.5])
    return {"ratio": round(float(a.sum() / b.sum()), 3), "low": round(float(low), 3),
            "high": round(float(high), 3), "questions": len(a)}


#: The ratios every run reports where both methods ran: numerator, denominator.
RATIOS = [("default", "oracle"), ("default", "full"), ("default", "fifo"), ("full", "oracle"),
          ("full", "fifo")]


def ratios(f1: dict[str, list[float]], by_category: dict[str, dict[int, list[float]]]) -> dict:
    """Each of :data:`RATIOS` whose methods ran, with its interval, overall and on the
    multi-hop questions (``"default/oracle multi-hop"``)."""
    found = {}
    for num, den in RATIOS:
        if num in f1 and den in f1:
            found[f"{num}/{den}"] = interval(f1[num], f1[den])
            hop_a, hop_b = by_category[num].get(1, []), by_category[den].get(1, [])
            if hop_a and hop_b:
                found[f"{num}/{den} multi-hop"] = interval(hop_a, hop_b)
    return found


def paired_difference(a: list[float], b: list[float], seed: int = 0) -> dict:
    """``mean(a - b)`` over paired questions, its standard error and a 95 % bootstrap
    interval."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if not len(d):
        return {"difference": None, "se": None, "low": None, "high": None, "questions": 0}
    picks = np.random.default_rng(seed).integers(0, len(d), size=(BOOTSTRAP, len(d)))
    low, high = np.percentile(d[picks].mean(axis=1), [2.5, 97.5])
    se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
    return {"difference": round(float(d.mean()), 4), "se": round(se, 4), "low": round(float(low), 4),
            "high": round(float(high), 4), "questions": len(d), "identical": int((d == 0).sum())}


def resolve_model(spec: str) -> Path:
    from halo_weave.server import loader

    if spec == "bundled":
        source = loader.resolve(None)
    else:
        source = loader.resolve(spec)
    if not source.gguf_file:
        raise SystemExit(f"{spec}: the answer benchmark runs GGUF models on the llama.cpp engine")
    return Path(source.path) / source.gguf_file


def run_model(spec: str, methods: list[str], chosen, args, settings, queries, folder: Path,
              weights: dict[int, int] | None = None) -> dict:
    path = resolve_model(spec)
    t0 = time.perf_counter()
    weighs = any(METHODS[m][0] == "halo-attention" for m in methods)
    answerer = scoring.Answerer(path, args.threads, args.context + 64, args.kv, attention=weighs)
    # `full` reads in a window of its own, in exact mode: one conversation's questions share
    # its whole text as their start, so it is read once and each question runs only itself.
    whole = scoring.Answerer(path, args.threads, args.full_context or None, "exact") if "full" in methods else None
    answerer_of = {m: whole if METHODS[m][0] == "full" else answerer for m in methods}
    log(f"{spec}: {path.name} loaded in {time.perf_counter() - t0:.1f} s"
        + (f"; `full` reads in {whole.window:,} tokens" if whole else ""))
    tallies = {m: Tally() for m in methods}
    reads: list[dict] = []  # `full`'s first question of each conversation: the whole read
    by_dialogue: dict[str, list] = {}
    for dialogue, question in chosen:
        by_dialogue.setdefault(dialogue.sample_id, [dialogue, []])[1].append(question)
    started = time.perf_counter()
    for sample_id, (dialogue, questions) in by_dialogue.items():
        t = time.perf_counter()
        prep = prepare_dialogue(dialogue, answerer, settings, folder, queries, args.prune_to)
        log(f"  {sample_id}: {len(dialogue.turns)} turns indexed in {time.perf_counter() - t:.0f} s; "
            f"{len(questions)} questions")
        # In the order whose consecutive prompts share the most, so that the engine's KV
        # surgery runs only what differs: the oracle's and fifo's questions one after another,
        # then question by question every method built on the recent context (they differ
        # by what they bring back; a variant's chunks are mostly a subset of the default's).
        def ask(method: str, question) -> None:
            ctx = build_context(method, prep, question, answerer_of[method], settings, args, queries)
            if args.no_answer:
                answer, f1, contain = scoring.Answer("", len(ctx.ids), 0, 0.0, 0), None, None
            else:
                answer = answerer_of[method].answer(ctx.ids, args.answer_tokens)
                f1 = scoring.answer_f1(answer.text, question.answer, question.category)
                contain = scoring.contains(answer.text, question.answer, question.category)
            if METHODS[method][0] == "full" and question is questions[0] and not args.no_answer:
                reads.append({"conversation": sample_id, "prompt_tokens": answer.prompt_tokens,
                              "computed_tokens": answer.computed_tokens, "seconds": round(answer.seconds, 1)})
                log(f"    full: read {answer.computed_tokens:,} of {answer.prompt_tokens:,} tokens "
                    f"in {answer.seconds:.0f} s")
            tallies[method].add(question.category, f1, contain, ctx, answer)
            if args.answers:
                with open(args.answers, "a", encoding="utf-8") as out:
                    out.write(json.dumps({"model": path.name, "method": method, "conversation": sample_id,
                                          "question": question.question, "category": question.category,
                                          "gold": str(question.answer), "answer": answer.text, "f1": f1,
                                          "contains": contain, "evidence_recall": ctx.recall,
                                          "recalled_tokens": ctx.recalled_tokens}) + "\n")
            if f1 is not None and len(tallies[method].examples) < args.show:
                tallies[method].examples.append((question.question, question.answer, answer.text, round(f1, 2)))

        alone = [m for m in methods if METHODS[m][0] in ALONE]
        together = [m for m in methods if m not in alone]
        for method in alone:
            for question in questions:
                ask(method, question)
        for n, question in enumerate(questions, 1):
            for method in together:
                ask(method, question)
            log(f"    question {n}/{len(questions)} ({time.perf_counter() - started:.0f} s so far)")
        prep.store.close()
    answerer.close()
    if whole is not None:
        whole.close()
    return {"model": path.name, "file_bytes": path.stat().st_size,
            "seconds": round(time.perf_counter() - started, 1),
            "methods": {m: tallies[m].figures(weights) for m in methods},
            "ratios": ratios({m: tallies[m].f1 for m in methods}, {m: tallies[m].by_category for m in methods}),
            "full_reads": reads,
            "examples": {m: tallies[m].examples for m in methods if tallies[m].examples}}


def table(result: dict) -> str:
    rows = [f"| method | answer F1 | weighted | contains | multi-hop | temporal | open | single-hop | recall | "
            f"weighted | recalled tokens | chunks | precision | s/answer |", "|" + "---|" * 14]
    for name, f in result["methods"].items():
        c = f["answer_f1_by_category"]
        rows.append("| " + " | ".join(str(x) for x in [
            name, f["answer_f1"], f["answer_f1_weighted"], f["contains"], c.get("multi-hop"), c.get("temporal"),
            c.get("open-domain"), c.get("single-hop"), f["evidence_recall"], f["evidence_recall_weighted"],
            f["recalled_tokens"], f["recalled_chunks"],
            f["evidence_precision"], f["seconds_per_answer"]]) + " |")
    return "\n".join(rows)


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    from halo_weave.memory.embedder import Embedder
    from halo_weave.settings import Settings

    if args.quick:
        args.conversations = args.conversations or ",".join(QUICK_CONVERSATIONS)
        args.per_category = 3 if args.per_category == 6 else args.per_category
        args.models = args.models.split(",")[0]
        args.methods = args.methods or ",".join(QUICK_METHODS)
    methods = [m.strip() for m in (args.methods or ",".join(BUNDLED_METHODS)).split(",") if m.strip()]
    others = [m.strip() for m in args.other_methods.split(",") if m.strip()]
    unknown = (set(methods) | set(others)) - set(METHODS)
    if unknown:
        raise SystemExit(f"unknown methods: {', '.join(sorted(unknown))}")
    if args.no_answer and any(METHODS[m][0] == "halo-hyde" for m in methods):
        raise SystemExit("--no-answer: hyde's search reads the model's answer")
    # The app's defaults (prune oldest first, its recall settings), P as the target.
    settings = Settings.of(max_context_tokens=args.prune_to)
    if args.notes_tool:  # the prompt the model reads, as the app builds it with the tool on
        settings = settings.replace(system_prompt=settings.replace(notes_tool=True).effective_system_prompt)
    dialogues = locomo.load(args.data)
    if args.split:
        args.conversations = ",".join(SPLITS[args.split])
    wanted = [c.strip() for c in args.conversations.split(",") if c.strip()]
    if wanted:
        dialogues = [d for d in dialogues if d.sample_id in wanted]
    # A note writes a turn's local day; LoCoMo's times, and the transcript's days, are UTC.
    os.environ["TZ"] = "UTC"
    time.tzset()
    dialogues = [with_speakers(d, args.dates) for d in dialogues]
    chosen = subset(dialogues, args.per_category, args.seed)
    only = {c.strip() for c in args.only.split(",") if c.strip()}
    if only:
        chosen = [(d, q) for d, q in chosen if d.sample_id in only]
    if args.several_only:
        chosen = [(d, q) for d, q in chosen if asks_for_several(q.question)]
    if args.categories:
        names = {c.strip() for c in args.categories.split(",") if c.strip()}
        if names - set(locomo.CATEGORIES.values()):
            raise SystemExit(f"unknown categories: {', '.join(sorted(names - set(locomo.CATEGORIES.values())))}")
        chosen = [(d, q) for d, q in chosen if locomo.CATEGORIES[q.category] in names]
    weights = category_counts(dialogues)
    log(f"{len(chosen)} questions from {len({d.sample_id for d, _ in chosen})} conversations")
    embedder = Embedder()
    embedder.load()
    queries = retrieval.CachedEmbedder(embedder, args.embed_cache)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench_answers_") as tmp:
        for i, spec in enumerate(models):
            results[spec] = run_model(spec, methods if i == 0 else others, chosen, args, settings,
                                      queries, Path(tmp), weights)
    wall = time.perf_counter() - started
    machine = cpu()
    print(f"# bench_answers: P={args.prune_to} C={args.context} budget={args.context - args.max_new_tokens}; "
          f"{len(chosen)} questions (seed {args.seed}, {args.per_category or 'all'} per category); "
          f"{machine}; {os.cpu_count()} cpu; load {os.getloadavg()[0]:.2f}; wall {wall:.0f} s")
    for spec, result in results.items():
        print(f"\n## {spec} ({result['model']}, {result['seconds']:.0f} s)\n")
        print(table(result))
        for name, r in result["ratios"].items():
            print(f"  {name}: {r['ratio']} (95 % interval {r['low']}–{r['high']}, {r['questions']} questions)")
        for read in result["full_reads"]:
            print(f"  full read {read['conversation']}: {read['computed_tokens']:,} tokens in {read['seconds']} s")
        for m, examples in result.get("examples", {}).items():
            for q, gold, got, f1 in examples:
                print(f"  {m}: {q!r} gold {gold!r} -> {got!r} (F1 {f1})")
    if args.json:
        first = results[models[0]]["methods"]
        figures = {
            "prune_to": args.prune_to, "context": args.context, "answer_tokens": args.answer_tokens,
            "questions": len(chosen), "seed": args.seed, "per_category": args.per_category,
            "kv": args.kv, "notes_tool": args.notes_tool, "dates": args.dates,
            "conversations": sorted({d.sample_id for d, _ in chosen}), "cpu": machine,
            "cpus": os.cpu_count(), "load_average": list(os.getloadavg()), "wall_seconds": round(wall, 1),
            "model": results[models[0]]["model"],
            "answer_f1": {m: f["answer_f1"] for m, f in first.items()},
            "recalled_tokens": {m: f["recalled_tokens"] for m, f in first.items()},
            "evidence_precision": {m: f["evidence_precision"] for m, f in first.items()},
            "evidence_recall": {m: f["evidence_recall"] for m, f in first.items()},
            "answer_f1_weighted": {m: f["answer_f1_weighted"] for m, f in first.items()},
            "evidence_recall_weighted": {m: f["evidence_recall_weighted"] for m, f in first.items()},
            "category_weights": {locomo.CATEGORIES[c]: n for c, n in sorted(weights.items())},
            "methods": first,
            "answer_f1_default": first.get("default", {}).get("answer_f1"),
            "answer_f1_oracle": first.get("oracle", {}).get("answer_f1"),
            "answer_f1_fifo": first.get("fifo", {}).get("answer_f1"),
            "answer_f1_full": first.get("full", {}).get("answer_f1"),
            "prompt_tokens": {m: f["prompt_tokens"] for m, f in first.items()},
            "seconds_per_answer": {m: f["seconds_per_answer"] for m, f in first.items()},
            "ratios": results[models[0]]["ratios"],
            "full_reads": results[models[0]]["full_reads"],
            "split": args.split,
            "models": {spec: {k: v for k, v in r.items() if k != "examples"} for spec, r in list(results.items())[1:]},
        }
        print(json.dumps(figures, allow_nan=False, default=str))
    return 0


def cpu() -> str:
    try:
        from halo_weave.server.llamacpp.safety import cpu_name

        return cpu_name()
    except Exception:  # noqa: BLE001 - a name only
        return platform.processor() or platform.machine()

