"""The chat model as a judge of what a message recalled: does this paragraph help answer it?

For a stratified sample of the questions in a ``bench_memory --dump-recall`` file, each
recalled paragraph is put to the model with the question: "Does the passage say something
that helps answer the question? Answer yes or no."  Its score is the log-odds of the
first answer token, "yes" against "no" (either case), read greedily off the app's llama.cpp
engine; the question goes first, so a question's prompts share their start and only each
paragraph and the ask after it are run.  The sample is written out again with a ``judge``
score on every paragraph, and ``scripts/bench_recall_fit.py`` then ranks by it alone and
fused with the app's three views.  A study of a stronger relevance signal, not the app's:
it costs a prompt per paragraph.

    python scripts/bench_recall_judge.py recall.jsonl judged.jsonl --per-category 30
    python scripts/bench_recall_fit.py judged.jsonl --json

The prompt is written in ChatML, the bundled Qwen models' template.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

import numpy as np

from . import answer_scoring as scoring
from .answers import resolve_model
from .recall_fit import load

ASK = "Does the passage say something that helps answer the question? Answer yes or no."
SYSTEM = "You are a helpful assistant."


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dump", help="bench_memory --dump-recall's file")
    p.add_argument("out", help="the sample, each paragraph with its judge score")
    p.add_argument("--method", default="recent-kept", help="the dump's method to judge")
    p.add_argument("--per-category", type=int, default=30, help="questions per category")
    p.add_argument("--seed", type=int, default=1, help="the sample's seed")
    p.add_argument("--model", default="bundled", help="'bundled', 'smollm2' or a GGUF path")
    p.add_argument("--threads", type=int, default=2, help="model threads")
    return p.parse_args(argv)


def sample(questions: list[dict], per_category: int, seed: int) -> list[dict]:
    """Up to ``per_category`` questions of each category that recalled two paragraphs or
    more (a choice to make), drawn with ``seed``, in the file's order."""
    rng = random.Random(seed)
    chosen: set[int] = set()
    for category in sorted({q["category"] for q in questions}):
        pool = [i for i, q in enumerate(questions)
                if q["category"] == category and len(q["paragraphs"]) > 1 and q["evidence"]]
        chosen.update(rng.sample(pool, min(per_category, len(pool))))
    return [questions[i] for i in sorted(chosen)]


def prompt(question: str, passage: str) -> tuple[str, str]:
    """The prompt's shared start (up to the passage) and the rest."""
    start = (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n"
             f"Question: {question}\n\nPassage from an earlier conversation:\n")
    return start, f"{passage.strip()}\n\n{ASK}<|im_end|>\n<|im_start|>assistant\n"


class Judge:
    """The yes/no log-odds of one model, a prompt at a time."""

    def __init__(self, answerer: scoring.Answerer) -> None:
        self.answerer = answerer
        self.yes = self._first_tokens(("yes", "Yes"))
        self.no = self._first_tokens(("no", "No"))

    def _first_tokens(self, words) -> list[int]:
        return sorted({self.answerer.tokenize(w)[0][0] for w in words})

    def score(self, question: str, passage: str) -> float:
        start, rest = prompt(question, passage)
        ids = [int(i) for i, _ in self.answerer.tokenize(start)] + [int(i) for i, _ in self.answerer.tokenize(rest)]
        kv = self.answerer.engine.kv
        kv.sync(ids[:-1])
        logits, _ = kv.step([ids[-1]], attention=False)
        logits = np.asarray(logits, dtype=np.float64)
        return float(np.logaddexp.reduce(logits[self.yes]) - np.logaddexp.reduce(logits[self.no]))


def main(argv=None) -> int:
    args = parse_args(argv)
    questions = sample(load(args.dump)[args.method], args.per_category, args.seed)
    path = resolve_model(args.model)
    answerer = scoring.Answerer(path, args.threads, 4096, "exact")
    judge = Judge(answerer)
    started = time.perf_counter()
    judged = 0
    with open(args.out, "w", encoding="utf-8") as out:
        for n, q in enumerate(questions, 1):
            for para in q["paragraphs"]:
                para["judge"] = round(judge.score(q["question"], para["text"]), 4)
                judged += 1
            out.write(json.dumps(q) + "\n")
            if n % 10 == 0:
                print(f"  {n}/{len(questions)} questions, {judged} paragraphs, "
                      f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    answerer.close()
    print(json.dumps({"model": path.name, "questions": len(questions), "paragraphs": judged,
                      "seconds": round(time.perf_counter() - started, 1)}))
    return 0
