"""Figures for a 1M-character paste of mixed scripts.

* ``tokenize_s``: ``KoboldClient.tokenize`` of the paste against the real server (HTTP,
  the server's tokenizer, pieces, the JSON answer and its parsing); the client's timeout
  for it (``tokenize_timeout_s``) now grows with the text instead of a fixed 5 s.
* ``add_turn_s`` / ``save_turn_s`` / ``reopen_s``: the conversation steps the app runs
  next (``save_turn`` runs on a worker thread for turns over 20,000 tokens).
* ``paste_total_s``: tokenize + add + save, what the user waits before the message shows.

Usage: ``python scripts/bench_paste.py [--json]``; uses the model cache in
``$HALO_WEAVE_CACHE`` when set.  The last line of output is one JSON object of figures.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path


from halo_weave.kobold_client import KoboldClient, tokenize_timeout
from halo_weave.server.launcher import start_server
from halo_weave.store import ConversationStore

MIXED = "Hello wörld — 你好，世界 · مرحبا بالعالم · שלום · Привет 🌍🧵 नमस्ते\n"
CHARS = 1_000_000


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON figures line")
    parser.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    args = parser.parse_args(argv)
    os.environ["HF_HUB_OFFLINE"] = "1"
    paste = (MIXED * (CHARS // len(MIXED) + 1))[:CHARS]
    figures: dict = {"chars": len(paste), "cpu_count": os.cpu_count(),
                     "load_average_1m": round(os.getloadavg()[0], 2),
                     "tokenize_timeout_s": round(tokenize_timeout(len(paste)), 1)}
    process = start_server(port=0, extra_args=["--threads", str(args.threads)])
    try:
        process.wait_ready(timeout=600)
        with KoboldClient(process.url) as client:
            client.tokenize("warm up")
            started = time.perf_counter()
            pieces = client.tokenize(paste)
            figures["tokenize_s"] = round(time.perf_counter() - started, 2)
    finally:
        process.stop()
    figures["tokens"] = len(pieces)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "paste.halo.db"
        with ConversationStore.open(path) as store:
            conv = store.load()
            started = time.perf_counter()
            turn = conv.add_turn("user", [i for i, _ in pieces], [t for _, t in pieces])
            figures["add_turn_s"] = round(time.perf_counter() - started, 2)
            started = time.perf_counter()
            store.save_turn(conv, turn)
            figures["save_turn_s"] = round(time.perf_counter() - started, 2)
            figures["chunks"] = len(turn.chunk_ids)
        started = time.perf_counter()
        with ConversationStore.open(path, create=False) as store:
            store.load()
        figures["reopen_s"] = round(time.perf_counter() - started, 2)
    figures["paste_total_s"] = round(figures["tokenize_s"] + figures["add_turn_s"] + figures["save_turn_s"], 2)
    figures["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(figures))
    return 0
