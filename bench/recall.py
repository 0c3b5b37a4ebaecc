"""What the recall settings add to the search the app runs on every user message.

A LoCoMo conversation (read in place, ``--locomo``) is stored and indexed as the app
does (a real conversation file, real MiniLM, each turn with its session's time), every
chunk pruned; then each of its questions is searched and planned
(:meth:`SemanticIndex.search` + :meth:`SemanticIndex.plan`, the two calls the app makes
per message) under each settings variant, the variants interleaved question by question
so that a change of machine load hits them alike.  Token counts come from MiniLM's
tokenizer (the plan's cost arithmetic does not depend on whose tokens they are).

    python scripts/bench_recall.py --json

Wall and CPU time per message are reported (median and p90, milliseconds); the machine is
shared, so compare variants of one run only.  The last line with ``--json`` is one JSON
object of figures.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from halo_weave.core.chat_template import build_framing
from halo_weave.conversation import Conversation
from halo_weave.memory.embedder import Embedder
from halo_weave.semantic_index import SemanticIndex
from halo_weave.settings import Settings
from halo_weave.store import ConversationStore
from bench import locomo
from bench.memory.policies import SEED_RECALL

LOCOMO = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "locomo" / "locomo_dev.json"

#: name -> settings changed from the app's defaults (the first is the reference).
VARIANTS = {
    "seed": SEED_RECALL,  # the recall settings before the date, split and neighbour options
    "dates": {**SEED_RECALL, "date_weight": 0.3},
    "split": {**SEED_RECALL, "query_split": True},
    "neighbours": {**SEED_RECALL, "resurrect_neighbours": 1},
    "anchors-if-room": {**SEED_RECALL, "resurrection_anchors": "if_room"},
    "no-feedback": {"query_feedback": 0.0, "neighbour_matches": 0},  # before query feedback and 4 neighbour matches
    "default": {},  # today's defaults
}


def build(embedder: Embedder, dialogue, path: Path) -> tuple[Conversation, ConversationStore]:
    def tokenize(text: str):
        return list(zip(*embedder.pieces(text)))

    conv = Conversation(Settings.of(max_context_tokens=0), build_framing(tokenize))
    store = ConversationStore.open(path)
    for turn in dialogue.turns:
        pieces = tokenize(turn.text + "\n\n") or tokenize("…")
        t = conv.add_turn(turn.role, [i for i, _ in pieces], [s for _, s in pieces], created_at=turn.created_at)
        store.save_turn(conv, t)
    store.save_chunks(conv, conv.prune_to_fit(1))
    return conv, store


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--locomo", type=Path, default=LOCOMO)
    p.add_argument("--conversation", default="conv-26")
    p.add_argument("--budget", type=int, default=824, help="resurrection budget (C - P - answer)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, from: " + ", ".join(VARIANTS))
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    names = [v for v in args.variants.split(",") if v]
    dialogue = next(d for d in locomo.load(args.locomo) if d.sample_id == args.conversation)
    embedder = Embedder()
    embedder.load()
    with tempfile.TemporaryDirectory(prefix="bench_recall_") as tmp:
        conv, store = build(embedder, dialogue, Path(tmp) / "conv.db")
        base = SemanticIndex(store.conn, conv.settings, embedder, lock=store.lock)
        t = time.perf_counter()
        base.index_pending(conv)
        indexed = time.perf_counter() - t
        indexes = {}
        for name in names:
            indexes[name] = SemanticIndex(store.conn, conv.settings.replace(**VARIANTS[name]), embedder,
                                          lock=store.lock)
            indexes[name].load()
        wall = {n: [] for n in names}
        cpu = {n: [] for n in names}
        for q in dialogue.questions:
            for name in names:
                index = indexes[name]
                w, c = time.perf_counter(), time.process_time()
                index.plan(conv, index.search(q.question), args.budget)
                wall[name].append(1000 * (time.perf_counter() - w))
                cpu[name].append(1000 * (time.process_time() - c))
        store.close()
    figures = {"conversation": args.conversation, "entries": base.entry_count, "questions": len(dialogue.questions),
               "index_seconds": round(indexed, 1), "load_average": list(os.getloadavg()), "cpus": os.cpu_count(),
               "variants": {}}
    print(f"# bench_recall: {args.conversation}, {base.entry_count} entries, {len(dialogue.questions)} messages; "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"{'variant':<16} {'wall p50':>9} {'wall p90':>9} {'cpu p50':>8} {'added p50':>10}")
    ref = float(np.median(wall[names[0]]))
    for name in names:
        f = {"wall_ms_p50": round(float(np.median(wall[name])), 2),
             "wall_ms_p90": round(float(np.percentile(wall[name], 90)), 2),
             "cpu_ms_p50": round(float(np.median(cpu[name])), 2),
             "added_wall_ms_p50": round(float(np.median(wall[name])) - ref, 2)}
        figures["variants"][name] = f
        print(f"{name:<16} {f['wall_ms_p50']:>9.1f} {f['wall_ms_p90']:>9.1f} {f['cpu_ms_p50']:>8.1f} "
              f"{f['added_wall_ms_p50']:>10.1f}")
    if args.json:
        print(json.dumps(figures))
    return 0
