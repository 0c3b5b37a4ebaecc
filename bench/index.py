"""The semantic index benchmark: search latency, embedding throughput, load time, memory.

    python scripts/bench_index.py [--json] [--sizes 10000 100000] [--chunks 64]

Recall is measured on real MiniLM vectors: ``--real`` LoCoMo utterances (read in place
from ``--locomo``; generated text without it) searched with LoCoMo questions, two-stage
forced on, against exact search.  Search and load at ``--sizes`` use vectors spread like
those real ones (each a real vector plus noise with their covariance), written to a real
SQLite file through the app's upsert path; recall@20 is measured there too.  Load is
timed from the table (first open after an upgrade) and from the vector snapshot (every
later open), also with entries written since the snapshot.  Throughput embeds real
64-150-token chunks with their turn-pair context through the same prepare / embed /
store calls the app makes.  Wall and CPU time are both reported: the machine is shared.
With ``--json`` the last line printed is one JSON object of figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from halo_weave.core.chat_template import build_framing
from halo_weave.conversation import Conversation
from halo_weave.memory.embedder import Embedder
from halo_weave.semantic_index import EntryDraft, SearchTuning, SemanticIndex
from halo_weave.settings import Settings
from halo_weave.store import ConversationStore

WORDS = ("the river boat engine garden tomato bread oven python function list castle empire "
         "winter mountain honey bee vaccine cell interest money bill law climate weather star "
         "light north orange sail marina harbour berth anchor rope wind").split()


def paragraph(rng: np.random.Generator, n_words: int) -> str:
    return " ".join(rng.choice(WORDS, n_words)).capitalize() + "."


LOCOMO = Path("/work/shared/data/locomo/locomo_dev.json")


class FakeEmbedder:
    """Only what loading and searching need when the vectors are synthetic."""

    name, dim, available = "sentence-transformers/all-MiniLM-L6-v2", 384, True


class OneVectorEmbedder(FakeEmbedder):
    """An embedder whose every text is ``vector``: times the search, not the model."""

    def __init__(self, vector: np.ndarray) -> None:
        self.vector = vector

    def encode(self, texts, batch_size: int = 32) -> np.ndarray:
        return np.repeat(self.vector[None, :], len(texts), axis=0)


def realistic_vectors(base: np.ndarray, n: int, rng, sigma: float = 0.4) -> np.ndarray:
    """``n`` unit vectors spread like ``base`` (real MiniLM vectors): each a base vector
    plus noise drawn from the base's own covariance, so PCA sees a realistic spectrum."""
    chol = np.linalg.cholesky(np.cov(base.T) + 1e-6 * np.eye(base.shape[1])).astype(np.float32)
    out = np.empty((n, base.shape[1]), np.float32)
    for start in range(0, n, 10_000):
        m = min(10_000, n - start)
        block = base[rng.integers(0, len(base), m)] + sigma * (
            rng.standard_normal((m, base.shape[1])).astype(np.float32) @ chol.T)
        out[start:start + m] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def real_texts(path: Path, limit: int, rng) -> tuple[list[str], list[str]]:
    """(utterances, questions) from LoCoMo, read in place; generated text without it."""
    if path.is_file():
        data = json.loads(path.read_text())
        docs = [t["text"] for s in data for k, v in s["conversation"].items()
                if isinstance(v, list) for t in v if isinstance(t, dict) and t.get("text")]
        questions = [q["question"] for s in data for q in s["qa"]]
    else:
        docs = [paragraph(rng, int(rng.integers(8, 40))) for _ in range(limit)]
        questions = [paragraph(rng, 6) for _ in range(limit // 4)]
    pick = rng.permutation(len(docs))[:limit]
    qpick = rng.permutation(len(questions))[: max(50, limit // 8)]
    return [docs[i] for i in pick], [questions[i] for i in qpick]


NO_SNAPSHOTS = SearchTuning(snapshot_min=10**12)


def fill(path: Path, vectors: np.ndarray, rng: np.random.Generator) -> None:
    store = ConversationStore.open(path)
    index = SemanticIndex(store.conn, Settings(), FakeEmbedder(), lock=store.lock, tuning=NO_SNAPSHOTS)
    n = len(vectors)
    for start in range(0, n, 5000):
        m = min(5000, n - start)
        drafts = [EntryDraft(start + i, (start + i) // 3, (start + i) % 3,
                             "user" if i % 3 == 0 else "assistant", paragraph(rng, 12), 90, [],
                             "0:0", vectors[start + i]) for i in range(m)]
        index.store(drafts)
    store.close()


def timed(fn, repeat: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of each call."""
    wall, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return wall, cpu


def ms(values: list[float], q: float = 50) -> float:
    return round(float(np.percentile(values, q)) * 1000, 2)


def recall_at(index: SemanticIndex, queries: np.ndarray, k: int = 20) -> tuple[float, float]:
    """(mean recall@k, share of queries with the identical top k) of ``index`` vs exact."""
    exact = index.sharing(exact=True)
    recalls = []
    truth = [{m.chunk_id for m in exact.search_vector(q, k)} for q in queries]
    for q, want in zip(queries, truth):
        got = {m.chunk_id for m in index.search_vector(q, k)}
        recalls.append(len(got & want) / max(len(want), 1))
    return round(float(np.mean(recalls)), 4), round(float(np.mean([r == 1 for r in recalls])), 4)


def bench_search_and_load(n: int, base: np.ndarray, queries: np.ndarray, rng) -> dict:
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"bench_{n}.halo.db"
        fill(path, realistic_vectors(base, n, rng), rng)
        store = ConversationStore.open(path)  # the migrations' shape (change log included)
        index = SemanticIndex(store.conn, Settings(), FakeEmbedder())
        wall, cpu = timed(index.load, 1)
        out[f"load_table_ms_{n}"], out[f"load_table_cpu_ms_{n}"] = ms(wall), ms(cpu)
        wall, cpu = timed(index.save_snapshot, 1)
        out[f"snapshot_write_ms_{n}"] = ms(wall)
        out[f"snapshot_bytes_per_entry_{n}"] = round(index.snapshot_path.stat().st_size / n)
        store.close()

        def reload():
            conn = sqlite3.connect(path, isolation_level=None)
            try:
                idx = SemanticIndex(conn, Settings(), FakeEmbedder())
                t, c = time.perf_counter(), time.process_time()
                idx.load()
                return time.perf_counter() - t, time.process_time() - c, idx.entry_count
            finally:
                conn.close()

        loads = [reload() for _ in range(5)]
        assert all(count == n for *_, count in loads)
        out[f"load_ms_{n}"] = ms([w for w, _, _ in loads])
        out[f"load_cpu_ms_{n}"] = ms([c for _, c, _ in loads])
        with ConversationStore.open(path) as s:  # 64 entries written since the snapshot
            SemanticIndex(s.conn, Settings(), FakeEmbedder(), tuning=NO_SNAPSHOTS).store(
                [EntryDraft(n + i, 0, i, "user", "late entry", 5, [], "0:0", base[i]) for i in range(64)])
        out[f"load_after_64_changes_ms_{n}"] = ms([reload()[0] for _ in range(3)])

        conn = sqlite3.connect(path, isolation_level=None)
        tracemalloc.start()
        index = SemanticIndex(conn, Settings(), OneVectorEmbedder(queries[0]))  # the search, not the model
        index.load()
        resident, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        out[f"two_stage_{n}"] = index.two_stage
        index.search("warm up")
        wall, cpu = timed(lambda: index.search("the river boat"), 40)
        out[f"search_ms_median_{n}"], out[f"search_ms_p95_{n}"] = ms(wall), ms(wall, 95)
        out[f"search_cpu_ms_median_{n}"] = ms(cpu)
        exact = index.sharing(exact=True)
        wall, cpu = timed(lambda: exact.search("the river boat"), 20)
        out[f"exact_search_ms_median_{n}"], out[f"exact_search_cpu_ms_median_{n}"] = ms(wall), ms(cpu)
        out[f"recall_at_20_{n}"], out[f"identical_top20_share_{n}"] = recall_at(index, queries)
        hybrid = index.sharing(settings=Settings.of(hybrid_search=True))
        hybrid.search("warm up")
        wall, cpu = timed(lambda: hybrid.search("river boat marina"), 10)
        out[f"hybrid_search_ms_median_{n}"], out[f"hybrid_search_cpu_ms_median_{n}"] = ms(wall), ms(cpu)
        out[f"db_bytes_per_entry_{n}"] = round(path.stat().st_size / n)
        out[f"memory_bytes_per_entry_{n}"] = round(resident / n)
        out[f"load_peak_bytes_per_entry_{n}"] = round(peak / n)
        conn.close()
    return out


def bench_real(embedder: Embedder, data: Path, count: int, rng) -> tuple[dict, np.ndarray, np.ndarray]:
    """Real MiniLM vectors of LoCoMo text: recall of the two-stage search on them, and
    the base the synthetic sizes are spread from."""
    docs, questions = real_texts(data, count, rng)
    started = time.perf_counter()
    embedder.load()  # the first load of this process: torch imported, the weights read
    load_s = time.perf_counter() - started
    t, c = time.perf_counter(), time.process_time()
    vectors = embedder.encode(docs, batch_size=64)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    queries = embedder.encode(questions, batch_size=64)
    out = {"embedder_first_load_s": round(load_s, 2), "real_entries": len(docs), "real_queries": len(questions),
           "short_text_embed_ms_per_text": round(wall / len(docs) * 1000, 2),
           "short_text_embed_cpu_ms_per_text": round(cpu / len(docs) * 1000, 2)}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "real.halo.db"
        fill(path, vectors, rng)
        with ConversationStore.open(path) as store:
            # two stages at any size, 1 in 12 rows reranked (at 100k it is 1 in 64)
            forced = SemanticIndex(store.conn, Settings(), FakeEmbedder(), tuning=SearchTuning(
                two_stage_min=0, candidates=0, candidate_factor=8, candidate_share=12))
            forced.load()
            assert forced.two_stage
            out["real_recall_at_20"], out["real_identical_top20_share"] = recall_at(forced, queries)
    return out, vectors, queries


def bench_embedding(embedder: Embedder, n_chunks: int, rng) -> dict:
    t = time.perf_counter()
    embedder.load()
    load_s = time.perf_counter() - t

    conv = Conversation(Settings.of(max_context_tokens=0),
                        build_framing(lambda s: list(zip(*embedder.pieces(s)))))
    while len([c for c in conv.chunks.values() if not c.framing]) < n_chunks:
        for role in ("user", "assistant"):
            paras = [paragraph(rng, int(rng.integers(55, 130))) for _ in range(3 if role == "assistant" else 1)]
            conv.add_turn(role, *embedder.pieces("\n\n".join(paras) + "\n\n"))
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


def main(argv=None) -> int:
    """The command line (``scripts/bench_index.py``): figures as lines, with ``--json``
    one JSON object last."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON last")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--chunks", type=int, default=128, help="chunks embedded for throughput")
    parser.add_argument("--real", type=int, default=2000, help="real texts embedded for recall")
    parser.add_argument("--locomo", type=Path, default=LOCOMO)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    figures: dict = {"cpu_count": os.cpu_count(), "load_average_start": os.getloadavg()[0]}
    embedder = Embedder()
    real, base, queries = bench_real(embedder, args.locomo, args.real, rng)
    figures.update(real)
    print("real vectors: " + ", ".join(f"{k}={v}" for k, v in real.items()))
    for n in args.sizes:
        figures.update(bench_search_and_load(n, base, queries, rng))
        print(f"{n} entries: " + ", ".join(f"{k}={v}" for k, v in figures.items() if k.endswith(f"_{n}")))
    figures.update(bench_embedding(embedder, args.chunks, rng))
    print(f"embedding: {figures['embed_chunks_per_s']} chunks/s "
          f"({figures['embed_ms_per_chunk']} ms/chunk, mean {figures['embed_chunk_tokens_mean']} tokens)")
    figures["load_average_end"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(figures))
    return 0
