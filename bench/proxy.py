"""What proxy attention costs per exchange: the bundled reader reading a finished answer.

A text-mode conversation (the bundled tokenizer's ids, ChatML, the app's default system
prompt) is filled with LoCoMo dialogue (read in place from the shared data, never
copied) up to each context size; the last assistant turn is the answer read.  Per size:

* ``cold_ms``: the reader's cache is empty (the first read after connecting, or after
  the reader's window moved): the whole context is run, then the answer teacher-forced;
* ``warm_ms``: the cache already holds the conversation up to the previous answer (what
  the app does every exchange): only the new question and the answer are run;
* ``pruned_ms``: as warm, after the oldest quarter of the context was pruned (KV
  surgery removes it; nothing before the new exchange is re-run);
* ``votes_ms``: replaying the magnitude votes on the snapshot (the worker thread, numpy).

Everything runs as the app runs it (``memory.proxy.plan_read`` / ``votes`` / ``apply`` and
``ProxyReader.read``), on llama.cpp, one thread by default (the reader shares the machine
with the user's server).  Medians of ``--repeats``.

Usage: ``python scripts/bench_proxy.py [--sizes 512,1024,2048,3500] [--answer 120]
[--threads 1] [--repeats 3] [--json]``; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path


LOCOMO = Path("/work/shared/data/locomo/locomo_dev.json")


def dialogue_texts() -> list[tuple[str, str]]:
    from bench.locomo import load

    if not LOCOMO.exists():
        raise SystemExit(f"LoCoMo is not at {LOCOMO}")
    return [(t.role, t.text) for d in load(LOCOMO) for t in d.turns]


def build(tok, turns, context_tokens: int, answer_tokens: int):
    """A conversation of about ``context_tokens`` live tokens ending with an answer of
    about ``answer_tokens`` (LoCoMo answers are short: the last one is lengthened)."""
    from halo_weave.conversation import Conversation
    from halo_weave.core.chat_template import CHATML, build_framing
    from halo_weave.settings import Settings

    settings = Settings.of(max_context_tokens=0)
    framing = build_framing(lambda t: tok.tokenize(t, parse_special=True), CHATML)
    conv = Conversation(settings, framing)
    pieces = framing.wrap("system", tok.tokenize(settings.chat.system_prompt))
    conv.set_system_prompt(settings.chat.system_prompt, [i for i, _ in pieces], [t for _, t in pieces])
    role = "user"
    for _, text in turns:
        if conv.live_token_count() >= context_tokens - answer_tokens:
            break
        pieces = tok.tokenize(text)
        conv.add_turn(role, [i for i, _ in pieces], [t for _, t in pieces])
        role = "assistant" if role == "user" else "user"
    if role == "assistant":  # end on a question
        pieces = tok.tokenize("What did you do after that?")
        conv.add_turn("user", [i for i, _ in pieces], [t for _, t in pieces])
    words = " ".join(text for _, text in turns[-40:])
    answer = tok.tokenize(words)[:answer_tokens]
    conv.add_turn("assistant", [i for i, _ in answer], [t for _, t in answer])
    return conv


def measure(reader, tok, turns, size: int, answer: int, repeats: int) -> dict:
    from halo_weave.memory import proxy

    conv = build(tok, turns, size, answer)
    plan = proxy.plan_read(conv, reader.window)
    last_user = conv.turns.last("user")
    # The previous exchange's state: everything before the last question.
    before = [int(i) for i in plan.context_ids[: plan.n_system]] + [
        int(i) for i, t in zip(conv.table.token_id, conv.table.turn_id) if t < last_user]
    cold, warm, pruned, vote = [], [], [], []
    for _ in range(repeats):
        reader.engine.kv.reset()
        cold.append(reader.read(plan.context_ids, plan.answer_ids).seconds)
        reader.engine.kv.reset()
        reader.engine.kv.sync(before)
        result = reader.read(plan.context_ids, plan.answer_ids)
        warm.append(result.seconds)
        started = time.perf_counter()
        proxy.votes(plan, result.rows, conv.settings)
        vote.append(time.perf_counter() - started)
        # Pruned: the oldest quarter of the table goes (KV surgery), then the new exchange.
        reader.engine.kv.reset()
        reader.engine.kv.sync(before)
        cut = plan.n_system + (len(plan.context_ids) - plan.n_system) // 4
        ids = [int(i) for i in plan.context_ids]
        pruned.append(reader.read(ids[: plan.n_system] + ids[cut:], plan.answer_ids).seconds)
    ms = lambda xs: round(statistics.median(xs) * 1000, 1)  # noqa: E731
    return {"context_tokens": len(plan.context_ids), "answer_tokens": len(plan.answer_ids),
            "cold_ms": ms(cold), "warm_ms": ms(warm), "pruned_ms": ms(pruned), "votes_ms": ms(vote),
            "warm_ms_per_answer_token": round(statistics.median(warm) * 1000 / len(plan.answer_ids), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="512,1024,2048,3500")
    parser.add_argument("--answer", type=int, default=120)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from halo_weave.backends.local_tokenizer import shared
    from halo_weave.server.reader import ProxyReader

    figures: dict = {"cpu_count": os.cpu_count(), "threads": args.threads,
                     "load_average_1m": round(os.getloadavg()[0], 2)}
    started = time.perf_counter()
    reader = ProxyReader.load(threads=args.threads)
    figures["reader_load_s"] = round(time.perf_counter() - started, 2)
    figures["reader_window"] = reader.window
    tok = shared()
    turns = dialogue_texts()
    sizes = []
    for size in (int(s) for s in args.sizes.split(",")):
        row = measure(reader, tok, turns, size, args.answer, args.repeats)
        sizes.append(row)
        if not args.json:
            print(row, flush=True)
    figures["sizes"] = sizes
    figures["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    reader.close()
    print(json.dumps(figures))
