"""Benchmark the semantic index: search latency, embedding throughput, load time, memory.

    python scripts/bench_index.py [--json] [--sizes 10000 100000] [--chunks 64]

Search and load use synthetic unit vectors (the cost does not depend on their values) in
a real SQLite file written through the same upsert path as the app; throughput embeds
real 64-150-token chunks with their turn-pair context through the same
prepare / embed / store calls the app makes.  With ``--json`` the last line printed is
one JSON object of figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from halo_weave.chat_template import build_framing  # noqa: E402
from halo_weave.conversation import Conversation  # noqa: E402
from halo_weave.embedder import Embedder  # noqa: E402
from halo_weave.semantic_index import EntryDraft, SemanticIndex  # noqa: E402
from halo_weave.settings import Settings  # noqa: E402
from halo_weave.store import ConversationStore  # noqa: E402

WORDS = ("the river boat engine garden tomato bread oven python function list castle empire "
         "winter mountain honey bee vaccine cell interest money bill law climate weather star "
         "light north orange sail marina harbour berth anchor rope wind").split()


def paragraph(rng: np.random.Generator, n_words: int) -> str:
    return " ".join(rng.choice(WORDS, n_words)).capitalize() + "."


class FakeEmbedder:
    """Only what loading and searching need when the vectors are synthetic."""

    name, dim, available = "sentence-transformers/all-MiniLM-L6-v2", 384, True


def fill(path: Path, n: int, rng: np.random.Generator) -> None:
    store = ConversationStore.open(path)
    index = SemanticIndex(store.conn, Settings(), FakeEmbedder(), lock=store.lock)
    for start in range(0, n, 5000):
        m = min(5000, n - start)
        vectors = rng.standard_normal((m, 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        drafts = [EntryDraft(start + i, (start + i) // 3, (start + i) % 3,
                             "user" if i % 3 == 0 else "assistant", paragraph(rng, 12), 90, [],
                             "0:0", vectors[i]) for i in range(m)]
        index.store(drafts)
    store.close()


def bench_search_and_load(n: int, embedder: Embedder | None, rng) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"bench_{n}.db"
        fill(path, n, rng)
        loads = []
        for _ in range(3):
            conn = sqlite3.connect(path, isolation_level=None)
            index = SemanticIndex(conn, Settings(), FakeEmbedder())
            t = time.perf_counter()
            index.load()
            loads.append(time.perf_counter() - t)
            conn.close()
        conn = sqlite3.connect(path, isolation_level=None)
        tracemalloc.start()
        index = SemanticIndex(conn, Settings(), FakeEmbedder())
        index.load()
        resident, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert index.entry_count == n
        query = rng.standard_normal(384).astype(np.float32)
        query /= np.linalg.norm(query)
        index.embedder.encode = lambda texts: query[None, :]  # time the search, not the model
        index.search("warm up")
        times = []
        for _ in range(30):
            t = time.perf_counter()
            index.search("the river boat")
            times.append(time.perf_counter() - t)
        hybrid = SemanticIndex(index.conn, Settings(hybrid_search=True), index.embedder)
        hybrid._matrix, hybrid._ids, hybrid._user = index._matrix, index._ids, index._user
        hybrid._n, hybrid._row = index._n, index._row
        hybrid.conn = sqlite3.connect(path, isolation_level=None)
        hybrid.search("warm up")
        htimes = []
        for _ in range(10):
            t = time.perf_counter()
            hybrid.search("river boat marina")
            htimes.append(time.perf_counter() - t)
        return {
            f"search_ms_median_{n}": round(float(np.median(times)) * 1000, 2),
            f"search_ms_p95_{n}": round(float(np.percentile(times, 95)) * 1000, 2),
            f"hybrid_search_ms_median_{n}": round(float(np.median(htimes)) * 1000, 2),
            f"load_ms_{n}": round(min(loads) * 1000, 1),
            f"db_bytes_per_entry_{n}": round(path.stat().st_size / n),
            f"memory_bytes_per_entry_{n}": round(resident / n),
            f"load_peak_bytes_per_entry_{n}": round(peak / n),
        }


def bench_embedding(embedder: Embedder, n_chunks: int, rng) -> dict:
    t = time.perf_counter()
    embedder.load()
    load_s = time.perf_counter() - t

    def tok(text):
        enc = embedder.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        starts = [0] + [a for a, _ in enc["offset_mapping"][1:]]
        return list(enc["input_ids"]), [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]

    conv = Conversation(Settings(max_context_tokens=0),
                        build_framing(lambda s: list(zip(*tok(s)))))
    while len([c for c in conv.chunks.values() if not c.framing]) < n_chunks:
        for role in ("user", "assistant"):
            paras = [paragraph(rng, int(rng.integers(55, 130))) for _ in range(3 if role == "assistant" else 1)]
            conv.add_turn(role, *tok("\n\n".join(paras) + "\n\n"))
    sizes = [c.token_count for c in conv.chunks.values() if not c.framing]
    with tempfile.TemporaryDirectory() as tmp:
        store = ConversationStore.open(Path(tmp) / "embed.db")
        index = SemanticIndex(store.conn, conv.settings, embedder, lock=store.lock)
        ids = index.pending(conv)
        index.index_chunks(conv, ids[:8])  # warm-up
        rest = ids[8:]
        t = time.perf_counter()
        index.index_chunks(conv, rest, batch_size=32)
        elapsed = time.perf_counter() - t
        t = time.perf_counter()
        pending = index.pending(conv)
        pending_s = time.perf_counter() - t
        store.close()
    assert pending == []
    return {
        "embedder_load_s": round(load_s, 2),
        "embed_chunks": len(rest),
        "embed_chunk_tokens_mean": round(float(np.mean(sizes)), 1),
        "embed_chunks_per_s": round(len(rest) / elapsed, 1),
        "embed_ms_per_chunk": round(elapsed / len(rest) * 1000, 2),
        "embed_speedup_vs_seed_40ms": round(40 / (elapsed / len(rest) * 1000), 1),
        "pending_scan_ms_per_1k_chunks": round(pending_s / len(conv.chunks) * 1e6, 2),
        "device": embedder.device,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON last")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--chunks", type=int, default=128, help="chunks embedded for throughput")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    figures: dict = {"cpu_count": os.cpu_count()}
    for n in args.sizes:
        figures.update(bench_search_and_load(n, None, rng))
        print(f"{n} entries: " + ", ".join(f"{k}={v}" for k, v in figures.items() if k.endswith(f"_{n}")))
    figures.update(bench_embedding(Embedder(), args.chunks, rng))
    print(f"embedding: {figures['embed_chunks_per_s']} chunks/s "
          f"({figures['embed_ms_per_chunk']} ms/chunk, mean {figures['embed_chunk_tokens_mean']} tokens)")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
