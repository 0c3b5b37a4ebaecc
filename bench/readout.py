"""What reading attention out of llama.cpp costs per token: the C filter against the
pure-Python evaluation callback (halo_weave/server/llamacpp/filter.py).

Two engines on the bundled GGUF in one process, one with the C filter, one with the
Python callback for every graph node.  At each context both hold the same prompt; then,
round after round, each variant decodes ``--tokens`` tokens one by one after it (the
cache is cut back to the prompt before each run): with attention (aggregated row) and
plain.  Variants alternate inside every round, so they share the machine's load.  Figures
are medians over rounds of ms/token, wall clock and this process's CPU time (CPU time
holds up better on a loaded machine).  ``slowdown`` is attention over plain (C filter).
Both paths must return the same attention row (checked before timing).

Usage: ``python scripts/bench_readout.py [--contexts 1024,2048] [--threads 2] [--tokens 16]
[--rounds 5] [--json]``; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np


TEXT = "The lighthouse keeper walked along the cliff and counted the ships in the bay. "


def measure(contexts: list[int], threads: int, tokens: int, rounds: int, say) -> dict:
    from halo_weave.server import loader
    from halo_weave.server.llamacpp.engine import LlamaEngine

    source = loader.resolve(None)
    path = source.path / source.gguf_file
    room = max(contexts) + tokens * rounds + 256
    engines = {"python": LlamaEngine(path, threads=threads, context_size=room, c_filter=False),
               "c": LlamaEngine(path, threads=threads, context_size=room)}
    if engines["c"].kv.decoder.readout.c_filter is None:
        raise SystemExit("the C filter did not compile here (see the log line above)")
    variants = [(f"{side}_{kind}", engine, kind == "attention")
                for kind in ("attention", "plain") for side, engine in engines.items()]
    figures: dict = {}
    try:
        for context in contexts:
            ids = engines["c"].encode(TEXT * (context // 8))[:context]
            rows = []
            for engine in engines.values():
                engine.kv.sync(ids)
                rows.append(engine.kv.step([5], attention=True)[1])
            if not np.array_equal(rows[0], rows[1]):
                raise SystemExit("the two paths read different attention")
            wall: dict[str, list[float]] = {name: [] for name, _, _ in variants}
            cpu: dict[str, list[float]] = {name: [] for name, _, _ in variants}
            for _ in range(rounds):
                for name, engine, attention in variants:
                    engine.kv.sync(ids)
                    started, cpu_started = time.perf_counter(), time.process_time()
                    for k in range(tokens):
                        engine.kv.step([7 + k], attention=attention)
                    wall[name].append((time.perf_counter() - started) * 1000 / tokens)
                    cpu[name].append((time.process_time() - cpu_started) * 1000 / tokens)
            key = f"{round(context / 1024)}k"
            block = {f"wall_ms_{n}": round(statistics.median(v), 2) for n, v in wall.items()}
            block.update({f"cpu_ms_{n}": round(statistics.median(v), 2) for n, v in cpu.items()})
            for clock in ("wall", "cpu"):
                block[f"{clock}_slowdown_c"] = round(block[f"{clock}_ms_c_attention"] / block[f"{clock}_ms_c_plain"], 3)
                block[f"{clock}_slowdown_python"] = round(
                    block[f"{clock}_ms_python_attention"] / block[f"{clock}_ms_c_plain"], 3)
            block["load_average_1m"] = round(os.getloadavg()[0], 2)
            figures[key] = block
            say(key, block)
    finally:
        for engine in engines.values():
            engine.close()
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON figures line")
    parser.add_argument("--contexts", default="1024,2048")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=16, help="tokens per timed run")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    os.environ["HF_HUB_OFFLINE"] = "1"
    say = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr, flush=True))
    figures: dict = {"threads": args.threads, "tokens": args.tokens, "rounds": args.rounds,
                     "load_average_1m": round(os.getloadavg()[0], 2)}
    figures.update(measure([int(c) for c in args.contexts.split(",")], args.threads, args.tokens,
                           args.rounds, say))
    figures["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(figures))
    return 0
