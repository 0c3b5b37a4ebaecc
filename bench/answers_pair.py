"""Runs of the answer benchmark compared question by question, or put together.

Reads two ``bench_answers.py --answers`` files (one JSON object per answer) and, for each
method both ran, pairs the answers to the same question (conversation, question, gold;
a question asked twice in one conversation pairs by its order) and reports the mean
difference of F1 (first minus second), its standard error and a 95 % bootstrap interval,
and how many answers are identical.  For instance the app's KV surgery against exact
re-prefill:

    python scripts/bench_answers.py --kv surgery --methods default --answers surgery.jsonl ...
    python scripts/bench_answers.py --kv exact --methods default --answers exact.jsonl ...
    python scripts/bench_answers_pair.py surgery.jsonl exact.jsonl --json

With ``--table``, the answers of any number of files (a long run split across processes
or stopped part way) are put together instead: each method's answer F1 overall and by
category, over the questions every method answered, and the ratios of
:data:`~bench.answers.RATIOS` with their paired intervals.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import locomo
from .answers import RATIOS, interval, paired_difference


def read(path: str) -> dict[tuple, dict]:
    """The answers of one file by (method, conversation, question, gold, occurrence)."""
    found: dict[tuple, dict] = {}
    seen: dict[tuple, int] = {}
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            if not line.strip():
                continue
            row = json.loads(line)
            key = (row["method"], row["conversation"], row["question"], row["gold"])
            n = seen.get(key, 0)
            seen[key] = n + 1
            found[(*key, n)] = row
    return found


def compare(first: dict[tuple, dict], second: dict[tuple, dict]) -> dict:
    """Per method both files hold: the paired difference of F1 (first - second), the
    mean F1 of each and the answers identical in text."""
    figures = {}
    for method in sorted({k[0] for k in first} & {k[0] for k in second}):
        keys = sorted(k for k in first if k[0] == method and k in second)
        a = [first[k]["f1"] for k in keys]
        b = [second[k]["f1"] for k in keys]
        same = sum(first[k]["answer"] == second[k]["answer"] for k in keys)
        figures[method] = {**paired_difference(a, b), "first_f1": round(sum(a) / len(a), 4) if a else None,
                           "second_f1": round(sum(b) / len(b), 4) if b else None, "same_answer": same}
    return figures


def summarise(rows: dict[tuple, dict]) -> dict:
    """Each method's F1 over the questions every method in ``rows`` answered (by
    category too), and the ratios between them with their intervals."""
    methods = sorted({k[0] for k in rows})
    shared = set.intersection(*({k[1:] for k in rows if k[0] == m} for m in methods)) if methods else set()
    questions = sorted(shared)
    figures: dict = {"questions": len(questions), "methods": {}, "ratios": {}}
    f1 = {m: [rows[(m, *q)]["f1"] for q in questions] for m in methods}
    for m in methods:
        by_category: dict[str, list] = {}
        for q in questions:
            row = rows[(m, *q)]
            by_category.setdefault(locomo.CATEGORIES.get(row["category"], str(row["category"])), []).append(row["f1"])
        figures["methods"][m] = {"answer_f1": round(sum(f1[m]) / len(f1[m]), 4) if f1[m] else None,
                                 "by_category": {c: round(sum(v) / len(v), 4) for c, v in sorted(by_category.items())}}
    hop = [k for k, q in enumerate(questions) if rows[(methods[0], *q)]["category"] == 1] if methods else []
    for num, den in RATIOS:
        if num in f1 and den in f1:
            figures["ratios"][f"{num}/{den}"] = interval(f1[num], f1[den])
            if hop:
                figures["ratios"][f"{num}/{den} multi-hop"] = interval([f1[num][k] for k in hop],
                                                                      [f1[den][k] for k in hop])
    return figures


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", help="answers files (bench_answers.py --answers): two to compare")
    p.add_argument("--table", action="store_true", help="put the files' answers together instead")
    p.add_argument("--json", action="store_true", help="print one JSON object of figures last")
    args = p.parse_args(argv)
    if args.table:
        rows: dict[tuple, dict] = {}
        for path in args.files:
            rows.update(read(path))
        figures = summarise(rows)
        out = sys.stderr if args.json else sys.stdout
        print(f"{figures['questions']} questions every method answered", file=out)
        for m, f in figures["methods"].items():
            print(f"  {m}: {f['answer_f1']} {f['by_category']}", file=out)
        for name, r in figures["ratios"].items():
            print(f"  {name}: {r['ratio']} ({r['low']}–{r['high']})", file=out)
        if args.json:
            print(json.dumps(figures))
        return 0
    if len(args.files) != 2:
        p.error("two files to compare (or --table)")
    figures = compare(read(args.files[0]), read(args.files[1]))
    for method, f in figures.items():
        print(f"{method}: {f['first_f1']} vs {f['second_f1']} over {f['questions']} questions: "
              f"difference {f['difference']} (SE {f['se']}, 95 % {f['low']}–{f['high']}); "
              f"{f['same_answer']} answers the same", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps({"methods": figures}))
    return 0
