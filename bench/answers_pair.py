"""Two runs of the answer benchmark compared question by question.

Reads two ``bench_answers.py --answers`` files (one JSON object per answer) and, for each
method both ran, pairs the answers to the same question (conversation, question, gold;
a question asked twice in one conversation pairs by its order) and reports the mean
difference of F1 (first minus second), its standard error and a 95 % bootstrap interval,
and how many answers are identical.  For instance the app's KV surgery against exact
re-prefill:

    python scripts/bench_answers.py --kv surgery --methods default --answers surgery.jsonl ...
    python scripts/bench_answers.py --kv exact --methods default --answers exact.jsonl ...
    python scripts/bench_answers_pair.py surgery.jsonl exact.jsonl --json
"""

from __future__ import annotations

import argparse
import json
import sys

from .answers import paired_difference


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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("first", help="answers file (bench_answers.py --answers)")
    p.add_argument("second", help="answers file to compare it with")
    p.add_argument("--json", action="store_true", help="print one JSON object of figures last")
    args = p.parse_args(argv)
    figures = compare(read(args.first), read(args.second))
    for method, f in figures.items():
        print(f"{method}: {f['first_f1']} vs {f['second_f1']} over {f['questions']} questions: "
              f"difference {f['difference']} (SE {f['se']}, 95 % {f['low']}–{f['high']}); "
              f"{f['same_answer']} answers the same", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps({"methods": figures}))
    return 0
