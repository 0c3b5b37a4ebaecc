"""Which order of a message's recall keeps its evidence?  Without answering.

The app keeps part of what a message's search brought back: the paragraphs the chat
model's attention ranks first (:mod:`halo_weave.memory.attended`).  This benchmark builds
the answer benchmark's default context for each question of a LoCoMo subset (the same
code, :func:`bench.answers.recall_for`), reads the prompt with the question on the
llama.cpp engine, keeping every layer's and head's attention, and compares orders of the
recalled paragraphs: the search's, the attention's (mean per token, as the app; summed;
the most attended token; the largest head; by halves of the layers; each layer alone),
and fusions of the search's and the attention's ranks.  For each: evidence recall at
question time keeping ``--share`` of the recalled tokens (the live context's evidence
counts too), the tokens kept, and the AUC of evidence paragraphs against the other
recalled paragraphs of the same question.  A layer chosen as the best on the same
questions is an optimistic figure; ``--seed`` draws another subset to check it.

    python scripts/bench_recall_order.py --per-category 16 --json

The last line with ``--json`` is one JSON object of figures.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import answers
from . import answer_scoring as scoring
from . import locomo
from halo_weave.core import ties
from halo_weave.memory import attended, recall_note, relevance  # after bench.answers: it sets llama.cpp's threads up first

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@dataclass
class Paragraph:
    """One recalled paragraph of one question."""

    tokens: int
    evidence: bool
    first: int  # its first position in the prompt
    search_rank: int  # in the order the app's note would list it without attention
    attention: np.ndarray  # [layers, heads]: mean per token
    attention_sum: float  # over its tokens, layers and heads averaged
    attention_max: float  # its most attended token, layers and heads averaged
    turn: int
    text: str = ""
    score: float | None = None  # the search's score when the paragraph was a match itself
    similarity: float | None = None  # its raw cosine then
    # The app's relevance views (:func:`add_relevance`): its rank in the app's order, its
    # own text's cosine with the message, the share of the message's words it holds.
    relevance_rank: int = 0
    cosine: float = 0.0
    word_share: float = 0.0


@dataclass
class Question:
    evidence_turns: int
    live_evidence: set  # evidence turns live in the context before the recall
    recalled: list
    text: str = ""
    category: str = ""


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(answers.DEFAULT_DATA), help="LoCoMo-format JSON file")
    p.add_argument("--per-category", type=int, default=16, help="questions per category (0: all)")
    p.add_argument("--seed", type=int, default=1, help="the subset's seed")
    p.add_argument("--share", type=float, default=0.5, help="share of the recalled tokens kept")
    p.add_argument("--model", default="bundled", help="'bundled' or a GGUF path")
    p.add_argument("--embed-cache", default="", help="file keeping MiniLM vectors between runs")
    p.add_argument("--save", default="", help="pickle the measured questions to this file (to try orders offline)")
    p.add_argument("--load", default="", help="score the questions a --save run measured instead of measuring")
    p.add_argument("--json", action="store_true", help="print one JSON object of figures last")
    return p.parse_args(argv)


def read_layers(answerer, prefix: list[int], queries: list[int]) -> np.ndarray:
    """The attention ``queries`` (one batch) pay each position of ``prefix``, summed
    over the queries: ``[layers, heads, len(prefix)]``."""
    kv = answerer.engine.kv
    kv.sync([int(i) for i in prefix])
    cells = np.asarray(kv.cells[:len(prefix)])
    total = np.zeros((kv.n_layer, kv.n_head, kv.decoder.readout.n_cells), dtype=np.float32)

    def add(layer, probs):
        total[layer, :, :probs.shape[2]] += probs.sum(axis=1)

    kv.decode([int(i) for i in queries], hook=add)
    return total[:, :, cells]


def measure(prep, question, answerer, settings, args, queries) -> Question:
    message, pieces, framed = answers.asked(prep, question, answerer, args.ask)
    conv = copy.deepcopy(prep.recent)
    base_live = {c.id for c in conv.live_chunks()}
    index = answers.index_for(prep, settings, queries, answers.ALL)
    made = answers.recall_for(conv, index, message, framed + recall_note.SHAPE.tokens, args)
    evidence = answers.evidence_turns(prep, question)
    back = [c for c in conv.live_chunks() if c.id not in base_live and not c.framing]
    before = {t for t in evidence if any(c.live and c.id in base_live for c in conv.content_chunks(t))}
    if not back:
        return Question(len(evidence), before, [], message, question.category)
    search = recall_note.best_first(made.plan, back)
    reading = attended.read_for(conv, [c.id for c in back], [int(i) for i, _ in pieces], [t for _, t in pieces])
    layers = read_layers(answerer, reading.prefix, reading.queries)
    mean = layers.mean(axis=(0, 1))
    matched = {p.match.chunk_id: p.match for p in made.plan.taken}
    recalled = []
    for c in back:
        mine = reading.chunk_of == c.id
        if not mine.any():
            continue
        recalled.append(Paragraph(c.token_count, c.turn_id in evidence, int(np.flatnonzero(mine)[0]),
                                  search.index(c.id), layers[:, :, mine].mean(axis=2),
                                  float(mean[mine].sum()), float(mean[mine].max()), c.turn_id, conv.chunk_text(c.id),
                                  getattr(matched.get(c.id), "score", None),
                                  getattr(matched.get(c.id), "similarity", None)))
    return Question(len(evidence), before, recalled, message, question.category)


# ---------------------------------------------------------------------- orders


def _by(key):
    return lambda ps: sorted(ps, key=lambda p: (key(p), p.first))


def _layers(sel):
    return _by(lambda p: -float(p.attention[sel].mean()))


def add_relevance(questions: list[Question], embedder) -> None:
    """Each recalled paragraph's views of :mod:`halo_weave.memory.relevance` and its rank
    in the app's order (the plan's order: the search's)."""
    for q in questions:
        if not q.recalled:
            continue
        plan = sorted(q.recalled, key=lambda p: p.search_rank)
        texts = {k: p.text for k, p in enumerate(plan)}
        vectors = np.asarray(embedder.encode([q.text] + [p.text for p in plan]), np.float32)
        order = relevance.ranked(list(range(len(plan))), texts, q.text, vectors)
        asked = relevance.words(q.text)
        for rank, k in enumerate(order):
            plan[k].relevance_rank = rank
        for k, p in enumerate(plan):
            p.cosine = float(vectors[k + 1] @ vectors[0])
            p.word_share = relevance.word_share(asked, p.text)


def _fused(k: int):
    """Reciprocal rank fusion of the search's and the attention's orders."""
    def order(ps):
        att = {id(p): r for r, p in enumerate(_by(lambda p: -float(p.attention.mean()))(ps))}
        return sorted(ps, key=lambda p: (-(1 / (k + att[id(p)]) + 1 / (k + p.search_rank)), p.first))
    return order


def _fused_with_attention(k: int):
    """The app's three views and the attention's order, fused (:func:`relevance.fused`)."""
    def order(ps):
        plan = sorted(ps, key=lambda p: p.search_rank)
        views = [plan, _by(lambda p: (-ties.level(p.cosine), p.search_rank))(plan),
                 _by(lambda p: (-ties.level(p.word_share), p.search_rank))(plan),
                 _by(lambda p: -float(p.attention.mean()))(plan)]
        at = {id(p): n for n, p in enumerate(plan)}
        return [plan[n] for n in relevance.fused([[at[id(p)] for p in view] for view in views], k)]
    return order


def _search_first(n: int):
    """The search's first ``n``, then the attention's order."""
    def order(ps):
        rest = _by(lambda p: -float(p.attention.mean()))(ps)
        return sorted([p for p in ps if p.search_rank < n], key=lambda p: p.search_rank) + \
            [p for p in rest if p.search_rank >= n]
    return order


def orders(n_layer: int) -> dict:
    half = n_layer // 2
    return {
        "search": _by(lambda p: p.search_rank),
        "attention (mean per token, every layer and head)": _layers(slice(None)),
        "attention sum": _by(lambda p: -p.attention_sum),
        "attention max token": _by(lambda p: -p.attention_max),
        "attention largest head": _by(lambda p: -float(p.attention.max(axis=1).mean())),
        "attention first half of layers": _layers(slice(0, half)),
        "attention second half of layers": _layers(slice(half, None)),
        "attention without layers 0-1": _layers(slice(2, None)),
        "fused k=10": _fused(10),
        "fused k=30": _fused(30),
        "search first 1, then attention": _search_first(1),
        "search first 2, then attention": _search_first(2),
        "relevance (the app's: search, cosine and words fused)": _by(lambda p: p.relevance_rank),
        "its cosine alone": _by(lambda p: (-ties.level(p.cosine), p.search_rank)),
        "its words alone": _by(lambda p: (-ties.level(p.word_share), p.search_rank)),
        "relevance fused with attention": _fused_with_attention(relevance.FUSION_K),
    }


def score(questions: list[Question], order, share: float) -> dict:
    """Evidence recall keeping ``share`` of the recalled tokens in ``order``, the tokens
    kept, the AUC, and the evidence recall of the note (the first paragraphs of the order
    that the recall note copies, with the live context's)."""
    recall, kept_tokens, aucs, noted = [], [], [], []
    lines = recall_note.SHAPE.lines
    for q in questions:
        if not q.recalled:
            recall.append(len(q.live_evidence) / q.evidence_turns)
            noted.append(recall[-1])
            kept_tokens.append(0)
            continue
        ranked = order(q.recalled)
        keep, _ = relevance.kept(list(range(len(ranked))), {k: p.tokens for k, p in enumerate(ranked)}, share)
        kept = [ranked[k] for k in keep]
        live = q.live_evidence | {p.turn for p in kept if p.evidence}
        recall.append(len(live) / q.evidence_turns)
        noted.append(len(q.live_evidence | {p.turn for p in ranked[:lines] if p.evidence}) / q.evidence_turns)
        kept_tokens.append(sum(p.tokens for p in kept))
        place = {id(p): r for r, p in enumerate(ranked)}
        good = [place[id(p)] for p in ranked if p.evidence]
        bad = [place[id(p)] for p in ranked if not p.evidence]
        if good and bad:
            aucs.append(float(np.mean([g < b for g in good for b in bad])))
    return {"evidence_recall": round(float(np.mean(recall)), 4), "kept_tokens": round(float(np.mean(kept_tokens)), 1),
            "auc": round(float(np.mean(aucs)), 4) if aucs else None, "note_recall": round(float(np.mean(noted)), 4)}


def main(argv=None) -> int:
    args = parse_args(argv)
    # The answer benchmark's context settings (P, C, the answer's room).
    base = answers.parse_args(["--per-category", str(args.per_category), "--seed", str(args.seed)])
    from halo_weave.memory.embedder import Embedder
    from halo_weave.settings import Settings

    from .memory import retrieval

    started = time.perf_counter()
    settings = Settings.of(max_context_tokens=base.prune_to)
    dialogues = [answers.with_speakers(d) for d in locomo.load(args.data)]
    chosen = answers.subset(dialogues, args.per_category, args.seed)
    embedder = Embedder()
    embedder.load()
    queries = retrieval.CachedEmbedder(embedder, args.embed_cache)
    if args.load:
        import pickle
        with open(args.load, "rb") as f:
            saved = pickle.load(f)
        measured, n_layer = saved["questions"], saved["n_layer"]
    else:
        measured, n_layer = measure_all(args, base, settings, chosen, queries, started)
    add_relevance(measured, queries)
    queries.save()
    whole = score(measured, orders(n_layer)["search"], 1.0)
    figures = {name: score(measured, order, args.share) for name, order in orders(n_layer).items()}
    per_layer = {str(k): score(measured, _layers(slice(k, k + 1)), args.share) for k in range(n_layer)}
    best = max(per_layer, key=lambda k: (per_layer[k]["evidence_recall"], -int(k)))
    recalled = [p for q in measured for p in q.recalled]
    print(f"# bench_recall_order: {len(measured)} questions (seed {args.seed}); share kept {args.share}; "
          f"the whole recall: evidence recall {whole['evidence_recall']}, {whole['kept_tokens']} tokens, "
          f"{sum(p.tokens for p in recalled if p.evidence) / max(1, sum(p.tokens for p in recalled)):.3f} "
          f"of them evidence; {time.perf_counter() - started:.0f} s")
    print("| order | evidence recall | tokens kept | AUC | the note's evidence recall |\n|---|---|---|---|---|")
    for name, f in figures.items():
        print(f"| {name} | {f['evidence_recall']} | {f['kept_tokens']} | {f['auc']} | {f['note_recall']} |")
    print(f"| the best single layer on these questions ({best}) | {per_layer[best]['evidence_recall']} | "
          f"{per_layer[best]['kept_tokens']} | {per_layer[best]['auc']} | {per_layer[best]['note_recall']} |")
    if args.json:
        print(json.dumps({"questions": len(measured), "seed": args.seed, "share": args.share, "whole": whole,
                          "orders": figures, "per_layer": per_layer, "best_layer": int(best),
                          "seconds": round(time.perf_counter() - started, 1)}))
    return 0


def measure_all(args, base, settings, chosen, queries, started) -> tuple[list[Question], int]:
    """Measure every question of ``chosen`` on the llama.cpp engine; with ``--save`` pickle
    them.  Returns them and the model's layer count."""
    answerer = scoring.Answerer(answers.resolve_model(args.model), 2, base.context + 64, "exact", attention=True)
    by_dialogue: dict[str, list] = {}
    for dialogue, question in chosen:
        by_dialogue.setdefault(dialogue.sample_id, [dialogue, []])[1].append(question)
    measured: list[Question] = []
    with tempfile.TemporaryDirectory(prefix="bench_recall_order_") as tmp:
        for sample_id, (dialogue, questions) in by_dialogue.items():
            prep = answers.prepare_dialogue(dialogue, answerer, settings, Path(tmp), queries, base.prune_to)
            for question in questions:
                measured.append(measure(prep, question, answerer, settings, base, queries))
                print(f"  {sample_id}: question {len(measured)}/{len(chosen)} "
                      f"({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
            prep.store.close()
    n_layer = answerer.engine.kv.n_layer
    answerer.close()
    if args.save:
        import pickle
        with open(args.save, "wb") as f:
            pickle.dump({"seed": args.seed, "n_layer": n_layer, "questions": measured}, f)
    queries.save()
    return measured, n_layer
