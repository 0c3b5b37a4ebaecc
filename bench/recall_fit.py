"""Which recalled paragraphs should a message keep?  Studied offline, from a dump.

``bench_memory --recall-only --methods recent-kept,recent-kept-wide --dump-recall FILE``
writes, for each LoCoMo question, every paragraph the app's search and plan brought back
with what the app's relevance order reads of it (:mod:`bench.memory.recall_dump`).  This
script replays the choice of what to keep on that file in seconds, without the model:

- orders: the plan's; the app's (:mod:`halo_weave.memory.relevance`, reciprocal rank fusion
  of the plan's order, the paragraph's own cosine and its share of the message's words);
  that fusion with the match's search score as a fourth order, or with other weights; the
  chat model's yes/no judgement (:mod:`bench.recall_judge`) or a second embedder's cosine
  (:mod:`bench.recall_embedder`) where the file has them; and
  orders learned from the same features (logistic regression, gradient-boosted trees),
  each conversation ranked by a model fitted on the other conversations;
- what is kept: a share of the recalled tokens (the app's ``recall_keep_share``), or up
  to a number of tokens.

For each: evidence recall at question time (the evidence already live counts), the
recalled tokens kept (a turn's chat framing counted once, as the app resurrects it), by
category; and each view's per-question AUC of evidence against the rest.  The learned orders are a bound on what these features can give, not the app's.

    python scripts/bench_recall_fit.py /tmp/recall.jsonl --json

The last line with ``--json`` is one JSON object of figures.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict

import numpy as np

from halo_weave.memory import relevance

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
SHARES = (0.5, 2 / 3)
CAPS = (300, 400, 500, 600)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dump", help="bench_memory --dump-recall's file")
    p.add_argument("--methods", default="", help="comma-separated methods of the dump (default: all)")
    p.add_argument("--no-learned", action="store_true", help="skip the learned orders")
    p.add_argument("--json", action="store_true", help="print one JSON object of figures last")
    return p.parse_args(argv)


def load(path: str) -> dict[str, list[dict]]:
    """The dump's questions by method, in the file's order."""
    by_method: dict[str, list[dict]] = defaultdict(list)
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                q = json.loads(line)
                by_method[q["method"]].append(q)
    return dict(by_method)


def evidence_recall(q: dict, kept: list[int]) -> float:
    """The share of ``q``'s evidence turns live with the paragraphs ``kept`` (indices into
    its paragraphs); NaN for a question without evidence."""
    if not q["evidence"]:
        return math.nan
    turns = set(q["live_evidence"]) | {q["paragraphs"][k]["turn"] for k in kept}
    return sum(t in turns for t in q["evidence"]) / len(q["evidence"])


def recalled_tokens(q: dict, kept: list[int]) -> int:
    """The tokens the paragraphs ``kept`` bring back, each kept turn's framing once."""
    paras = q["paragraphs"]
    turns = {paras[k]["turn"] for k in kept}
    return sum(paras[k]["tokens"] for k in kept) + sum(q["framing"].get(str(t), 0) for t in turns)


# -- what is kept ------------------------------------------------------------------------


def keep_share(q: dict, order: list[int], share: float) -> list[int]:
    """The app's rule (:func:`relevance.kept`): the last of ``order`` go until ``share`` of
    the recalled tokens are left, the first always kept."""
    tokens = {k: q["paragraphs"][k]["tokens"] for k in order}
    return relevance.kept(order, tokens, share)[0]


def keep_cap(q: dict, order: list[int], cap: int) -> list[int]:
    """Down ``order``, each paragraph that still fits in ``cap`` recalled tokens (framing
    counted); the first always kept."""
    kept: list[int] = []
    turns: set[int] = set()
    used = 0
    for k in order:
        para = q["paragraphs"][k]
        cost = para["tokens"] + (0 if para["turn"] in turns else q["framing"].get(str(para["turn"]), 0))
        if kept and used + cost > cap:
            continue
        kept.append(k)
        turns.add(para["turn"])
        used += cost
    return kept


# -- orders ------------------------------------------------------------------------------


#: Scores a dump may carry on each paragraph beyond the app's views, each written by a
#: study script: the chat model's yes/no judgement (:mod:`bench.recall_judge`) and a second
#: embedder's cosine (:mod:`bench.recall_embedder`).
EXTRA_VIEWS = {"judge": "the chat model's judgement", "second_cosine": "the second embedder's cosine"}


def fused_order(q: dict, weights=(1.0, 1.0, 1.0), with_score: float = 0.0,
                extra: dict[str, float] | None = None, k: int = relevance.FUSION_K) -> list[int]:
    """The app's order (``weights`` (1, 1, 1), ``with_score`` 0, no ``extra``), or a
    variant: each of the three orders weighted (a weight of 0 leaves that order out), the
    match's search score (a neighbour: half its best neighbouring match's) as a fourth order
    of weight ``with_score``, and each score of :data:`EXTRA_VIEWS` named in ``extra`` as
    another order of its weight."""
    ids = list(range(len(q["paragraphs"])))
    if len(ids) < 2:
        return ids
    paras = q["paragraphs"]
    views = list(zip(weights, [ids, relevance.by_score(ids, [p["cosine"] for p in paras]),
                               relevance.by_score(ids, [p["word_share"] for p in paras])]))
    if with_score:
        views.append((with_score, relevance.by_score(ids, [search_score(p) for p in paras])))
    for name, weight in (extra or {}).items():
        views.append((weight, relevance.by_score(ids, [p[name] for p in paras])))
    views = [(w, o) for w, o in views if w]
    return relevance.fused([o for _, o in views], k, [w for w, _ in views])


def carries(questions: list[dict], name: str) -> bool:
    """Whether every paragraph of ``questions`` has the score ``name`` (of :data:`EXTRA_VIEWS`)."""
    return bool(questions) and all(name in p for q in questions for p in q["paragraphs"])


def search_score(para: dict) -> float:
    return para["match_score"] if para["match_score"] is not None else 0.5 * para["neighbour_score"]


def features(q: dict) -> np.ndarray:
    """One row per paragraph: its plan rank, cosine, word share (each also as a rank and
    against the question's best), its match's score, its neighbours', its length, and how
    many came back."""
    paras = q["paragraphs"]
    n = len(paras)
    if n == 0:
        return np.zeros((0, 13))
    cosine = np.array([p["cosine"] for p in paras])
    share = np.array([p["word_share"] for p in paras])
    cosine_rank = np.argsort(np.argsort(-cosine, kind="stable"), kind="stable")
    share_rank = np.argsort(np.argsort(-share, kind="stable"), kind="stable")
    rows = []
    for k, p in enumerate(paras):
        own = p["match_score"]
        rows.append([k / n, math.log1p(k), cosine[k], cosine[k] - cosine.max(), math.log1p(cosine_rank[k]),
                     share[k], share[k] - share.max(), math.log1p(share_rank[k]),
                     own is not None, own or 0.0, p["neighbour_score"], math.log(max(p["tokens"], 1)), n])
    return np.array(rows, dtype=float)


def learned_orders(questions: list[dict], kind: str) -> list[list[int]]:
    """Each question's paragraphs by a model of ``kind`` ("logistic" or "trees") fitted
    on the other conversations' questions: evidence or not, from :func:`features`."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression

    rows = [features(q) for q in questions]
    labels = [np.array([p["turn"] in q["evidence"] for p in q["paragraphs"]]) for q in questions]
    orders: list[list[int]] = [[] for _ in questions]
    for held in sorted({q["conversation"] for q in questions}):
        train = [i for i, q in enumerate(questions) if q["conversation"] != held and len(rows[i])]
        model = (LogisticRegression(max_iter=2000) if kind == "logistic" else
                 HistGradientBoostingClassifier(max_depth=3, max_iter=150, learning_rate=0.05, random_state=0))
        model.fit(np.vstack([rows[i] for i in train]), np.concatenate([labels[i] for i in train]))
        for i, q in enumerate(questions):
            if q["conversation"] == held:
                ids = list(range(len(q["paragraphs"])))
                orders[i] = (relevance.by_score(ids, model.predict_proba(rows[i])[:, 1].tolist())
                             if len(ids) > 1 else ids)
    return orders


# -- figures -----------------------------------------------------------------------------


def figures(questions: list[dict], orders: list[list[int]], keep) -> dict:
    """Evidence recall (overall: every question with evidence alike; by category) and the
    mean recalled tokens kept, ``keep(q, order)`` choosing."""
    by_category: dict[int, list[float]] = defaultdict(list)
    tokens = []
    for q, order in zip(questions, orders):
        kept = keep(q, order)
        value = evidence_recall(q, kept)
        if not math.isnan(value):
            by_category[q["category"]].append(value)
        tokens.append(recalled_tokens(q, kept))
    every = [v for values in by_category.values() for v in values]
    return {"evidence_recall": round(float(np.mean(every)), 4),
            "by_category": {CATEGORIES[c]: round(float(np.mean(v)), 4) for c, v in sorted(by_category.items())},
            "recalled_tokens": round(float(np.mean(tokens)), 1), "questions": len(every)}


def study(questions: list[dict], learned: bool) -> dict[str, dict]:
    """Every order under every rule of what is kept, for one method's questions."""
    n = [list(range(len(q["paragraphs"]))) for q in questions]
    orders = {
        "plan": n,
        "relevance (the app's)": [fused_order(q) for q in questions],
        "the app's cosine alone": [relevance.by_score(list(range(len(q["paragraphs"]))),
                                                      [p["cosine"] for p in q["paragraphs"]]) for q in questions],
        "relevance + search score": [fused_order(q, with_score=1.0) for q in questions],
        "relevance, plan weighted 2": [fused_order(q, weights=(2.0, 1.0, 1.0)) for q in questions],
        "relevance, words weighted 2": [fused_order(q, weights=(1.0, 1.0, 2.0)) for q in questions],
    }
    for name, label in EXTRA_VIEWS.items():
        if carries(questions, name):
            orders[f"{label} alone"] = [relevance.by_score(list(range(len(q["paragraphs"]))),
                                                           [p[name] for p in q["paragraphs"]]) for q in questions]
            orders[f"relevance + {label}"] = [fused_order(q, extra={name: 1.0}) for q in questions]
            if name == "second_cosine":
                orders[f"relevance, {label} in place of the cosine"] = [
                    fused_order(q, weights=(1.0, 0.0, 1.0), extra={name: 1.0}) for q in questions]
    if learned:
        orders["learned: logistic"] = learned_orders(questions, "logistic")
        orders["learned: trees"] = learned_orders(questions, "trees")
    rows = {"everything recalled": figures(questions, n, lambda q, o: o)}
    for name, order in orders.items():
        for share in SHARES:
            rows[f"{name}, share {share:.2f}"] = figures(questions, order, lambda q, o, s=share: keep_share(q, o, s))
        for cap in CAPS:
            rows[f"{name}, up to {cap}"] = figures(questions, order, lambda q, o, c=cap: keep_cap(q, o, c))
    return rows


def view_auc(questions: list[dict]) -> dict[str, float]:
    """Each view's mean per-question AUC: how often an evidence paragraph outranks one that
    is not (ties count half), over the questions that recalled both kinds."""
    views = {"plan": lambda paras: [-k for k in range(len(paras))],
             "cosine": lambda paras: [p["cosine"] for p in paras],
             "word_share": lambda paras: [p["word_share"] for p in paras],
             "search_score": lambda paras: [search_score(p) for p in paras]}
    for name in EXTRA_VIEWS:
        if carries(questions, name):
            views[name] = lambda paras, name=name: [p[name] for p in paras]
    aucs: dict[str, list[float]] = defaultdict(list)
    for q in questions:
        paras = q["paragraphs"]
        is_evidence = [p["turn"] in q["evidence"] for p in paras]
        if all(is_evidence) or not any(is_evidence):
            continue
        for name, read in views.items():
            scores = read(paras)
            good = [s for s, e in zip(scores, is_evidence) if e]
            bad = [s for s, e in zip(scores, is_evidence) if not e]
            aucs[name].append(float(np.mean([(g > b) + 0.5 * (g == b) for g in good for b in bad])))
    return {name: round(float(np.mean(values)), 4) for name, values in aucs.items()}


def table(method: str, rows: dict[str, dict]) -> str:
    head = ["order, what is kept", "evidence recall", *CATEGORIES.values(), "recalled tokens"]
    lines = [f"## {method}", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, f in rows.items():
        cats = [f"{f['by_category'].get(c, math.nan):.3f}" for c in CATEGORIES.values()]
        lines.append(f"| {name} | {f['evidence_recall']:.3f} | " + " | ".join(cats) + f" | {f['recalled_tokens']:.0f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    dump = load(args.dump)
    wanted = [m.strip() for m in args.methods.split(",") if m.strip()] or list(dump)
    missing = [m for m in wanted if m not in dump]
    if missing:
        raise SystemExit(f"not in {args.dump}: {', '.join(missing)} (it holds {', '.join(dump)})")
    result, aucs = {}, {}
    for method in wanted:
        result[method] = study(dump[method], learned=not args.no_learned)
        aucs[method] = view_auc(dump[method])
        shown = sys.stderr if args.json else sys.stdout
        print(table(method, result[method]) + "\n", file=shown)
        print("per-question AUC: " + ", ".join(f"{k} {v:.3f}" for k, v in aucs[method].items()) + "\n", file=shown)
    if args.json:
        print(json.dumps({"methods": result, "auc": aucs}))
    return 0
