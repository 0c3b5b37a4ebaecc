"""What KV surgery costs in accuracy and saves in time, against an exact re-prefill (issue 14).

On LoCoMo dialogue (dev set, ChatML, ~1.2k tokens of context, a span of 50-200 tokens
made of whole turns in the first third), for each engine and each case:

* ``prune``: the cache holds the context; the request drops the span and adds a question;
* ``insert``: the cache holds the context without the span (exactly prefilled); the request
  puts the span back and adds the question: the span is run at its positions;
* ``restore`` (llama.cpp): right after the prune, the request puts the span back; its
  states were stored in host memory, so nothing is run.

Compared with the same ids prefilled from scratch: next-token KL (nats, exact || surgery),
top-1 agreement, the Pearson correlation of the first generated token's attention row
(mean over layers and heads, over all positions), and the time of the request's prompt
(sync + last token) both ways.

Usage: ``python scripts/bench_kv_surgery.py [--engines llamacpp,transformers] [--cases 8]
[--threads 2] [--json]``; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory_bench.locomo import load as load_locomo  # noqa: E402

LOCOMO = Path("/work/shared/data/locomo/locomo_dev.json")
SYSTEM = "You are a helpful assistant who remembers the conversation."
CHAT = "<|im_start|>{}\n{}<|im_end|>\n"
CONTEXT_TOKENS = 1200
SPAN_MIN, SPAN_MAX = 50, 200
QUESTION = "What did we talk about at the start?"


def build_case(engine, dialogue, offset: int) -> dict:
    """``{"context": [...], "span": (start, end), "question": [...]}`` token ids."""
    def ids(text):
        return [i for i, _ in engine.tokenize(text)]

    turns = [ids(CHAT.format(t.role, t.text)) for t in dialogue.turns[offset:]]
    head = ids(CHAT.format("system", SYSTEM))
    context, bounds = list(head), []
    for turn in turns:
        if len(context) + len(turn) > CONTEXT_TOKENS:
            break
        bounds.append((len(context), len(context) + len(turn)))
        context += turn
    # The span: whole turns starting in the first third, 50..200 tokens.
    start_turn = max(1, len(bounds) // 6)
    a = bounds[start_turn][0]
    b = a
    for lo, hi in bounds[start_turn:]:
        if hi - a > SPAN_MAX:
            break
        b = hi
        if b - a >= SPAN_MIN:
            break
    question = ids(CHAT.format("user", QUESTION) + "<|im_start|>assistant\n")
    return {"context": context, "span": (a, b), "question": question}


def run(engine, ids: list[int]):
    """``(logits, attention row, seconds, report)`` for a request of ``ids``."""
    kv = engine.kv
    started = time.perf_counter()
    report = kv.sync(ids[:-1])
    logits, row = kv.step(ids[-1:], attention=True)
    seconds = time.perf_counter() - started
    return np.asarray(logits, np.float64), np.asarray(row, np.float64), seconds, report


def exact(engine, ids: list[int]):
    engine.kv.reset()
    return run(engine, ids)


def compare(ref, got) -> dict:
    (lr, ar, tr, _), (lg, ag, tg, report) = ref, got
    pr = np.exp(lr - lr.max())
    pr /= pr.sum()
    pg = np.exp(lg - lg.max())
    pg /= pg.sum()
    kl = float(np.sum(pr * (np.log(pr + 1e-30) - np.log(pg + 1e-30))))
    return {
        "kl": kl,
        "top1": bool(lr.argmax() == lg.argmax()),
        "attention_corr": float(np.corrcoef(ar, ag)[0, 1]),
        "attention_max_abs_diff": float(np.abs(ar - ag).max()),
        "exact_s": tr,
        "surgery_s": tg,
        "computed_tokens": report.computed if report else None,
        "mode": report.mode if report else None,
    }


def measure(engine, cases: list[dict], say=lambda *a: None) -> dict:
    """Per case kind: mean/max KL, top-1 agreement, attention correlation, times."""
    kinds: dict[str, list[dict]] = {"prune": [], "insert": [], "restore": []}
    llama = engine.kind == "llamacpp"
    for n, case in enumerate(cases):
        ctx, (a, b), q = case["context"], case["span"], case["question"]
        pruned = ctx[:a] + ctx[b:] + q
        full = ctx + q
        # prune (the span's states are stored)
        engine.kv.reset()
        engine.kv.sync(ctx)
        got = run(engine, pruned)
        ref_pruned = exact(engine, pruned)
        kinds["prune"].append(compare(ref_pruned, got))
        if llama:
            engine.kv.reset()
            engine.kv.sync(ctx)
            run(engine, pruned)
            got = run(engine, full)
            ref_full = exact(engine, full)
            kinds["restore"].append(compare(ref_full, got))
        else:
            ref_full = exact(engine, full)
        # insert by running the span: from an exact cache of the pruned context
        store = getattr(engine.kv, "store", None)
        if store is not None:  # forget stored states so that the span is run
            store.clear()
        exact(engine, pruned)
        got = run(engine, full)
        kinds["insert"].append(compare(ref_full, got))
        say(f"case {n}: context {len(ctx)}, span {b - a}: "
            + ", ".join(f"{k} KL {v[-1]['kl']:.4f} top1 {v[-1]['top1']} corr {v[-1]['attention_corr']:.4f}"
                        for k, v in kinds.items() if v))
    out = {}
    for kind, rows in kinds.items():
        if not rows:
            continue
        out[kind] = {
            "cases": len(rows),
            "kl_mean": round(float(np.mean([r["kl"] for r in rows])), 5),
            "kl_max": round(float(np.max([r["kl"] for r in rows])), 5),
            "top1_agree": sum(r["top1"] for r in rows),
            "attention_corr_mean": round(float(np.mean([r["attention_corr"] for r in rows])), 5),
            "attention_corr_min": round(float(np.min([r["attention_corr"] for r in rows])), 5),
            "exact_s_median": round(float(np.median([r["exact_s"] for r in rows])), 3),
            "surgery_s_median": round(float(np.median([r["surgery_s"] for r in rows])), 3),
            "computed_tokens_median": float(np.median([r["computed_tokens"] for r in rows])),
            "modes": sorted({r["mode"] for r in rows}),
        }
    return out


def make_cases(engine, count: int) -> list[dict]:
    dialogues = load_locomo(LOCOMO)
    return [build_case(engine, dialogues[k % len(dialogues)], 60 * (k // len(dialogues)))
            for k in range(count)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="llamacpp,transformers")
    parser.add_argument("--cases", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    say = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr))
    from halo_weave.server.engines import load_engine

    figures: dict = {"threads": args.threads, "load_average_1m": round(os.getloadavg()[0], 2)}
    for kind in args.engines.split(","):
        engine = load_engine(kind, threads=args.threads, cache_model=False)
        cases = make_cases(engine, args.cases)
        figures[kind] = measure(engine, cases, say)
        say(kind, json.dumps(figures[kind]))
    figures["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
