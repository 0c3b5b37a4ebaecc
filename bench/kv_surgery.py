"""What KV surgery costs in accuracy and saves in time, against an exact re-prefill.

On LoCoMo dialogue (dev set, ChatML, ~1.2k tokens of context, a span of 50-200 tokens
made of whole turns in the first third), for each engine and each case:

* ``prune``: the cache holds the context; the request drops the span and adds a question;
* ``insert``: the cache holds the context without the span (exactly prefilled); the request
  puts the span back and adds the question: the span is run at its positions;
* ``restore`` (llama.cpp): right after the prune, the request puts the span back; its
  states were stored in host memory, so nothing is run.

With ``--tail-cases N`` (a follow-up as the app sends it: ~2k tokens of context, a span in
the first third, and the next LoCoMo user message, 30-100 tokens with the assistant
header, as new tokens at the end), each way with tail first (``kv_surgery.sync``) off and on:

* ``insert_tail`` / ``insert_tail_first``: the cache holds the context without the span
  (exactly prefilled, nothing stored); the request puts the span back (run) and adds the message;
* ``restore_tail`` / ``restore_tail_first``: the cache held the context and pruned the span
  (stored); the request puts it back from the store and adds the message.

``--read-ahead-cases N`` (the same follow-ups): the draft prompt of the message was synced
before Enter (:func:`measure_read_ahead`), the draft's resurrection plan and Enter's alike
or not.

``--big`` adds one resurrection the size the chat benchmark meets (a ~6k-token dialogue
pruned to ~2k, all of it brought back from the store with a new message): the request's
time with tail first off and on, interleaved, and the KL of each against exact.

Compared with the same ids prefilled from scratch: next-token KL (nats, exact || surgery),
top-1 agreement, the Pearson correlation of the first generated token's attention row
(mean over layers and heads, over all positions), and the time of the request's prompt
(sync + last token) both ways.

Usage: ``python scripts/bench_kv_surgery.py [--engines llamacpp,transformers] [--cases 8]
[--tail-cases 8] [--read-ahead-cases 8] [--big] [--threads 2] [--json]``; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from .locomo import load as load_locomo

LOCOMO = Path("/work/shared/data/locomo/locomo_dev.json")
SYSTEM = "You are a helpful assistant who remembers the conversation."
CHAT = "<|im_start|>{}\n{}<|im_end|>\n"
CONTEXT_TOKENS = 1200
SPAN_MIN, SPAN_MAX = 50, 200
QUESTION = "What did we talk about at the start?"


TAIL_CONTEXT_TOKENS = 2000
TAIL_MIN, TAIL_MAX = 30, 100


def build_case(engine, dialogue, offset: int, context_tokens: int = CONTEXT_TOKENS) -> dict:
    """``{"context": [...], "span": (start, end), "question": [...], "message": [...]}`` token
    ids; ``message``: the next user turns after the context (30-100 tokens with the
    assistant header)."""
    def ids(text):
        return [i for i, _ in engine.tokenize(text, parse_special=True)]

    turns = [ids(CHAT.format(t.role, t.text)) for t in dialogue.turns[offset:]]
    head = ids(CHAT.format("system", SYSTEM))
    context, bounds = list(head), []
    for turn in turns:
        if len(context) + len(turn) > context_tokens:
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
    return {"context": context, "span": (a, b), "question": question,
            "message": next_message(engine, dialogue.turns[offset + len(bounds):])}


def next_message(engine, turns) -> list[int]:
    """The next user turns' text as one message of ``TAIL_MIN``..``TAIL_MAX`` tokens."""
    header = "<|im_start|>assistant\n"
    text = ""
    for t in turns:
        if t.role != "user":
            continue
        text = f"{text} {t.text}".strip()
        if len(engine.encode(CHAT.format("user", text) + header)) >= TAIL_MIN:
            break
    words = text.split()
    while len(words) > 1 and len(engine.encode(CHAT.format("user", " ".join(words)) + header, parse_special=True)) > TAIL_MAX:
        words = words[:-1]
    return [i for i, _ in engine.tokenize(CHAT.format("user", " ".join(words)) + header, parse_special=True)]


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
    return summarize(kinds)


def summarize(kinds: dict[str, list[dict]]) -> dict:
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


def make_cases(engine, count: int, context_tokens: int = CONTEXT_TOKENS) -> list[dict]:
    dialogues = load_locomo(LOCOMO)
    return [build_case(engine, dialogues[k % len(dialogues)], 60 * (k // len(dialogues)), context_tokens)
            for k in range(count)]


def with_tail_first(engine, on: bool, ids: list[int]):
    """:func:`run` with the cache's tail first set to ``on``."""
    saved, engine.kv.tail_first = engine.kv.tail_first, on
    try:
        return run(engine, ids)
    finally:
        engine.kv.tail_first = saved


def measure_tail(engine, cases: list[dict], say=lambda *a: None) -> dict:
    """A resurrection with a new message, tail first off and on (see the module docstring)."""
    kinds: dict[str, list[dict]] = {k: [] for k in ("insert_tail", "insert_tail_first",
                                                    "restore_tail", "restore_tail_first")}
    store = engine.kv.store
    for n, case in enumerate(cases):
        ctx, (a, b), msg = case["context"], case["span"], case["message"]
        pruned, full = ctx[:a] + ctx[b:], ctx + msg
        ref = exact(engine, full)
        for on in (False, True):
            suffix = "_tail_first" if on else "_tail"
            store.clear()  # the span is run
            exact(engine, pruned)
            got = with_tail_first(engine, on, full)
            kinds["insert" + suffix].append(compare(ref, got) | {"tail_first": got[3].tail_first})
            engine.kv.reset()  # the span comes from the store
            engine.kv.sync(ctx)
            engine.kv.sync(pruned)
            got = with_tail_first(engine, on, full)
            kinds["restore" + suffix].append(compare(ref, got) | {"tail_first": got[3].tail_first})
        say(f"tail case {n}: context {len(ctx)}, span {b - a}, message {len(msg)}: "
            + ", ".join(f"{k} KL {v[-1]['kl']:.4f} top1 {v[-1]['top1']} {v[-1]['surgery_s']:.2f}s "
                        f"tail first {v[-1]['tail_first']}" for k, v in kinds.items()))
    return summarize(kinds) | {"message_tokens": [len(c["message"]) for c in cases]}


#: Tokens of the message a read-ahead leaves for Enter (its last word or two, the closing
#: framing and the assistant header: the chat benchmark's median is 7).
READ_AHEAD_LEFT = 8


def measure_read_ahead(engine, cases: list[dict], say=lambda *a: None) -> dict:
    """What reading ahead costs in accuracy (see :meth:`EngineBase.prepare
    <halo_weave.server.engine_base.EngineBase.prepare>`): the cache held the context with
    the span pruned (stored), the draft prompt (the message less its last
    :data:`READ_AHEAD_LEFT` tokens) was synced, then Enter sends the request; against the
    same request prefilled exactly.  Three ways the draft's resurrection plan meets Enter's:

    * ``read_ahead_same``: both bring the span back (the usual case: the same text);
    * ``read_ahead_late_span``: only Enter's does (the last words found it): the span is
      restored before a message whose states were computed without it;
    * ``read_ahead_dropped_span``: only the draft's did: the span is pruned again after the
      message's states were computed with it.
    """
    kinds: dict[str, list[dict]] = {k: [] for k in ("read_ahead_same", "read_ahead_late_span",
                                                    "read_ahead_dropped_span")}
    for n, case in enumerate(cases):
        ctx, (a, b), msg = case["context"], case["span"], case["message"]
        pruned = ctx[:a] + ctx[b:]
        draft = msg[:-READ_AHEAD_LEFT]
        ways = {"read_ahead_same": (ctx + draft, ctx + msg),
                "read_ahead_late_span": (pruned + draft, ctx + msg),
                "read_ahead_dropped_span": (ctx + draft, pruned + msg)}
        refs = {tuple(ids): exact(engine, ids) for ids in (ctx + msg, pruned + msg)}
        for kind, (ahead, request) in ways.items():
            engine.kv.reset()
            engine.kv.sync(ctx)
            engine.kv.sync(pruned)  # pruned after the last answer: the span is stored
            engine.kv.sync(ahead)
            got = run(engine, request)
            kinds[kind].append(compare(refs[tuple(request)], got))
        say(f"read-ahead case {n}: context {len(ctx)}, span {b - a}, message {len(msg)}: "
            + ", ".join(f"{k} KL {v[-1]['kl']:.4f} top1 {v[-1]['top1']} corr {v[-1]['attention_corr']:.4f} "
                        f"{v[-1]['surgery_s']:.2f}s (exact {v[-1]['exact_s']:.2f}s)" for k, v in kinds.items()))
    return summarize(kinds) | {"message_tokens": [len(c["message"]) for c in cases]}


def tail_keys(tail: dict) -> dict:
    """Top-level keys of :func:`measure_tail`'s figures: ``surgery_kl_<kind>`` (mean
    nats) and ``surgery_top1_<kind>`` ("agreeing/cases")."""
    out = {}
    for kind in ("insert_tail", "insert_tail_first", "restore_tail", "restore_tail_first"):
        out[f"surgery_kl_{kind}"] = tail[kind]["kl_mean"]
        out[f"surgery_top1_{kind}"] = f"{tail[kind]['top1_agree']}/{tail[kind]['cases']}"
    return out


def measure_big(engine, rounds: int = 3, say=lambda *a: None) -> dict:
    """The largest LoCoMo dialogue's first ~6k tokens pruned to its first 600 and last
    1,400; the request brings the middle back from the store, prunes 200 more tokens and
    adds a new message (as a chat turn does): its time and KL against exact, tail first
    off and on, ``rounds`` times each, interleaved."""
    dialogues = load_locomo(LOCOMO)
    case = build_case(engine, max(dialogues, key=lambda d: len(d.turns)), 0, 6000)
    ctx, msg = case["context"], case["message"]
    keep_head, keep_tail = 600, 1400
    pruned = ctx[:keep_head] + ctx[-keep_tail:]
    full = ctx[:-keep_tail] + ctx[-keep_tail + 200:] + msg
    ref = exact(engine, full)
    engine.kv.reset()
    engine.kv.sync(ctx)
    rows: dict[str, list[dict]] = {"off": [], "on": []}
    for _ in range(rounds):
        for on in (False, True):
            engine.kv.sync(pruned)  # a prune: the spans are stored (again)
            load = os.getloadavg()[0]
            got = with_tail_first(engine, on, full)
            rows["on" if on else "off"].append(compare(ref, got) | {"load_1m": round(load, 2),
                                                                     "restored": got[3].restored})
            say(f"big: tail first {on}: {got[2]:.2f} s, restored {got[3].restored}, load {load:.2f}")
    out = {"context": len(full), "pruned_to": len(pruned) + len(msg), "message_tokens": len(msg)}
    for key, got in rows.items():
        out[f"tail_first_{key}"] = {
            "request_s": [round(r["surgery_s"], 3) for r in got],
            "request_s_median": round(float(np.median([r["surgery_s"] for r in got])), 3),
            "kl": round(got[0]["kl"], 5), "top1": got[0]["top1"],
            "load_1m": [r["load_1m"] for r in got], "restored": got[0]["restored"],
        }
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="llamacpp,transformers")
    parser.add_argument("--cases", type=int, default=8)
    parser.add_argument("--tail-cases", type=int, default=0,
                        help="resurrections with a new message, tail first off and on (llama.cpp)")
    parser.add_argument("--big", action="store_true", help="add the chat-sized resurrection (llama.cpp)")
    parser.add_argument("--read-ahead-cases", type=int, default=0,
                        help="a read-ahead before Enter, the draft's plan and Enter's alike or not (llama.cpp)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    say = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr))
    from halo_weave.server.engine_choice import load_engine

    figures: dict = {"threads": args.threads, "load_average_1m": round(os.getloadavg()[0], 2)}
    for kind in args.engines.split(","):
        engine = load_engine(kind, threads=args.threads, cache_model=False)
        figures[kind] = measure(engine, make_cases(engine, args.cases), say) if args.cases else {}
        if args.tail_cases and kind == "llamacpp":
            tail = measure_tail(engine, make_cases(engine, args.tail_cases, TAIL_CONTEXT_TOKENS), say)
            figures[kind]["tail"] = tail
            figures.update(tail_keys(tail))
        if args.read_ahead_cases and kind == "llamacpp":
            ahead = measure_read_ahead(engine, make_cases(engine, args.read_ahead_cases, TAIL_CONTEXT_TOKENS), say)
            figures[kind]["read_ahead"] = ahead
            for key, row in ahead.items():
                if isinstance(row, dict):
                    figures[f"surgery_kl_{key}"] = row["kl_mean"]
                    figures[f"surgery_top1_{key}"] = f"{row['top1_agree']}/{row['cases']}"
        if args.big and kind == "llamacpp":
            figures[kind]["big"] = measure_big(engine, say=say)
        say(kind, json.dumps(figures[kind]))
    figures["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(figures))
    return 0

