"""What a prune costs at each size of the llama.cpp KV cache: the K-shift.

After a prune the cache shifts the later positions back (``seq_add``), and llama.cpp
re-rotates the keys of *every* cell of the cache at the next decode, used or not
(``build_graph_shift`` in llama-kv-cache.cpp).  For each cache size (``--cells``), on a
context of ``--context`` tokens of LoCoMo dialogue (the bundled model, ``--threads``):

* ``plain_s``: a follow-up of one token (sync + decode, nothing moved);
* ``after_prune_s``: the same after one token near the start was pruned (sync, the
  K-shift, the decode);
* ``kshift_s``: the difference.

Minimum and median of ``--rounds`` rounds each (the minimum is the least disturbed by
a busy machine).  Usage: ``python scripts/bench_kv_cells.py [--cells 2048,4096,5632,8192]
[--context 1800] [--rounds 8] [--threads 2] [--json]``; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np


from bench.locomo import load as load_locomo

LOCOMO = Path("/work/shared/data/locomo/locomo_dev.json")


def measure(cells: int, context: int, rounds: int, threads: int) -> dict:
    from halo_weave.server.engine_choice import load_engine

    engine = load_engine("llamacpp", None, threads=threads, store_bytes=0, initial_context=cells)
    try:
        text = " ".join(t.text for d in load_locomo(LOCOMO)[:3] for t in d.turns)
        ids = engine.encode(text)
        if len(ids) < context + 2 * rounds + 1:
            raise SystemExit(f"only {len(ids)} tokens of dialogue")
        kv = engine.kv
        live, nxt = ids[:context], context
        kv.sync(live)
        plain, pruned = [], []
        for _ in range(rounds):
            for times, prune in ((plain, False), (pruned, True)):
                if prune:
                    live = live[:100] + live[101:]
                started = time.perf_counter()
                kv.sync(live)
                kv.step([ids[nxt]], attention=False)
                times.append(time.perf_counter() - started)
                live, nxt = live + [ids[nxt]], nxt + 1
        row = {"cells": engine.n_cells}
        for name, times in (("plain_s", plain), ("after_prune_s", pruned)):
            row[name] = {"min": round(min(times), 4), "median": round(float(np.median(times)), 4)}
        row["kshift_s"] = {k: round(row["after_prune_s"][k] - row["plain_s"][k], 4) for k in ("min", "median")}
        return row
    finally:
        engine.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default="2048,4096,5632,8192")
    parser.add_argument("--context", type=int, default=1800)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    figures: dict = {"load_average_1m": round(os.getloadavg()[0], 2), "context": args.context,
                     "threads": args.threads, "by_cells": []}
    for cells in (int(c) for c in args.cells.split(",")):
        row = measure(cells, args.context, args.rounds, args.threads)
        figures["by_cells"].append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    figures["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(figures))
    return 0
