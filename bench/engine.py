"""The engine benchmark: brightness, attention decoding, the store, crash safety (Qt-free).

    python scripts/bench_engine.py [--tokens 1000000] [--live 30000] [--trials 50] [--json]

* brightness update per generated token at ``--live`` live tokens, through
  ``Conversation.apply_attention`` with an aggregated vector (goal <= 0.2 ms)
* decode + aggregate one ``per_layer`` payload of 28 x 28 x 8192 float32 (base64)
* open (integrity check) and rehydrate a file of ``--tokens`` tokens with ``--live``
  live (goal <= 50 ms for the rehydration)
* prune one chunk / resurrect one long-pruned chunk (with its anchors), each including
  its DB transaction (goal <= 5 ms each)
* DB bytes per token
* crash safety: a writer SIGKILLed ``--trials`` times at random moments

Timings are wall-clock medians, best runs and median process CPU time (``*_best``,
``*_cpu`` in the JSON).  ``calibration_cpu_ms`` (a fixed pure-Python loop, measured
before and after) says how fast the machine was at the time: on a shared machine
compare CPU figures scaled by it.  The last line is one JSON object with ``--json``.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from halo_weave.brightness import decode_attention
from halo_weave.conversation import Conversation
from halo_weave.settings import Settings
from halo_weave.store import ConversationStore, new_conversation_path
from halo_weave.storage.schema import pack_tokens

#: The crash-safety test's writer (``tests/conversation_writer.py``) lives with the tests.
TESTS = Path(__file__).resolve().parents[1] / "tests"

GOALS = {"brightness_ms": 0.2, "rehydrate_ms": 50.0, "prune_ms": 5.0, "resurrect_ms": 5.0}
WORDS = [" the", " river", " stone", " lantern", " of", ",", ".", " cedar", "\n\n", " and", " to"]
PREFIX, SUFFIX = 3, 2  # ChatML framing tokens per turn: "<|im_start|>", role, "\n" / "<|im_end|>", "\n"


class Times(list):
    """Wall-clock milliseconds, with the process CPU milliseconds alongside."""

    def __init__(self) -> None:
        super().__init__()
        self.cpu: list[float] = []

    def measure(self, fn):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        self.cpu.append((time.process_time() - cpu) * 1000)
        self.append((time.perf_counter() - wall) * 1000)
        return result


def timed(fn, repeat: int) -> Times:
    times = Times()
    for _ in range(repeat):
        times.measure(fn)
    return times


def summary(times: Times) -> tuple[float, float, float]:
    """(median wall, best wall, median CPU) in ms."""
    return (round(statistics.median(times), 4), round(min(times), 4),
            round(statistics.median(times.cpu), 4))


def calibrate() -> float:
    """CPU ms of a fixed pure-Python loop: ~10-15 ms on an idle current desktop core."""
    return summary(timed(lambda: sum(range(1_000_000)), 5))[2]


# ---------------------------------------------------------------------- brightness
def bench_brightness(live: int, steps: int = 2000) -> list[float]:
    conv = Conversation(Settings.of(max_context_tokens=0))
    rng = np.random.default_rng(0)
    per_turn = 300
    for t in range(live // per_turn):
        ids = rng.integers(1, 50_000, per_turn).tolist()
        conv.add_turn("user" if t % 2 == 0 else "assistant", ids, [" w"] * per_turn)
    vectors = []
    for _ in range(8):
        a = rng.random(conv.live_token_count(), dtype=np.float32) ** 6
        a[0] = a.sum()  # an attention sink
        vectors.append(a / a.sum())
    return timed(lambda: conv.apply_attention(vectors[random.randrange(8)]), steps)


def bench_decode(layers: int = 28, heads: int = 28, ctx: int = 8192, repeat: int = 10) -> list[float]:
    rng = np.random.default_rng(1)
    values = rng.random((layers, heads, ctx), dtype=np.float32)
    values /= values.sum(axis=2, keepdims=True)
    payload = {
        "format": "per_layer", "shape": [layers, heads, ctx], "encoding": "base64",
        "dtype": "float32", "data": base64.b64encode(values.astype("<f4").tobytes()).decode(),
    }
    return timed(lambda: decode_attention(payload, ctx), repeat)


# ---------------------------------------------------------------------- the store
def build_file(path: Path, total: int, live: int, seed: int = 2) -> None:
    """A realistic file without running a model: alternating user (60-120 tokens) and
    assistant (150-450 tokens) turns cut into ~100-token chunks, framed; the most recent
    turns hold ``live`` live tokens and everything older is pruned."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    turns, chunks = [], []
    position = turn_id = 0
    while position < total:
        role = "user" if turn_id % 2 == 0 else "assistant"
        size = rng.randint(60, 120) if role == "user" else rng.randint(150, 450)
        pieces = [(-1, PREFIX)] + [(i, n) for i, n in enumerate(_split(size))] + [(-2, SUFFIX)]
        turns.append((turn_id, role, 1.7e9 + turn_id * 30.0, 1))
        for chunk_index, count in pieces:
            chunks.append([len(chunks), turn_id, chunk_index, role, position, count])
            position += count
        turn_id += 1
    live_turns, seen = set(), 0
    for chunk in reversed(chunks):
        if seen >= live:
            break
        live_turns.add(chunk[1])
        seen += chunk[5]
    with ConversationStore.open(path) as store, store.transaction() as conn:
        conn.executemany(
            "INSERT INTO turns (turn_id, role, created_at, complete) VALUES (?, ?, ?, ?)", turns)
        rows, token_rows = [], []
        for cid, tid, sid, role, start, count in chunks:
            alive = tid in live_turns
            brightness = nrng.integers(-800, 10_001, count)
            rows.append((cid, tid, sid, role, start, count, int(alive), 0,
                         None if alive else int(brightness.max()), 0))
            texts = [WORDS[i] for i in nrng.integers(0, len(WORDS), count)]
            token_rows.append((cid, *pack_tokens(nrng.integers(1, 50_000, count), texts, brightness)))
        conn.executemany("INSERT INTO chunks VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
        conn.executemany("INSERT INTO chunk_tokens VALUES (?,?,?,?,?)", token_rows)
        meta = {"next_position": position, "next_turn_id": turn_id, "next_chunk_id": len(chunks)}
        conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                         [(k, json.dumps(v)) for k, v in meta.items()])


def _split(size: int) -> list[int]:
    parts = []
    while size > 0:
        take = size if size < 160 else 100
        parts.append(take)
        size -= take
    return parts


def bench_store(workdir: Path, total: int, live: int, repeat: int = 7) -> dict:
    path = new_conversation_path(workdir)
    build_file(path, total, live)
    settings = Settings.of(max_context_tokens=0)
    open_times = timed(lambda: ConversationStore.open(path).close(), repeat)
    store = ConversationStore.open(path)
    holder = {}
    load_times = timed(lambda: holder.update(conv=store.load(settings)), repeat)
    conv = holder["conv"]
    figures = {
        "tokens": total, "live_tokens": len(conv.table), "chunks": len(conv.chunks),
        "turns": len(conv.turns), "db_bytes_per_token": round(path.stat().st_size / total, 2),
        "open_ms": summary(open_times), "rehydrate_ms": summary(load_times),
    }
    rng = random.Random(3)
    long_pruned = [c.id for c in conv.chunks.values()
                 if not c.live and not c.framing and not c.anchor]
    prune_times, resurrect_times, sizes = Times(), Times(), []

    def prune():
        store.save_chunks(conv, conv.prune_to_fit(conv.live_token_count() - 1))

    def resurrect():
        resurrected = conv.resurrect([long_pruned.pop(rng.randrange(len(long_pruned)))])
        store.save_chunks(conv, resurrected)
        return resurrected

    for _ in range(30):
        prune_times.measure(prune)
        sizes.append(len(resurrect_times.measure(resurrect)))
    figures["prune_ms"] = summary(prune_times)
    figures["resurrect_ms"] = summary(resurrect_times)
    figures["chunks_per_resurrection"] = statistics.median(sizes)
    store.close()
    return figures


def bench_crash(workdir: Path, trials: int) -> dict:
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    from conversation_writer import crash_trials

    path = new_conversation_path(workdir)
    stats: dict = {}
    start = time.perf_counter()
    failures = crash_trials(path, trials=trials, seed=11, stats=stats)
    with ConversationStore.open(path) as store:
        tokens = store.conn.execute("SELECT SUM(token_count) FROM chunks").fetchone()[0]
        turns = store.conn.execute("SELECT COUNT(*) FROM turns").fetchone()[0]
    return {
        "crash_safety": f"{trials - len({f.split(':')[0] for f in failures})}/{trials}",
        "crash_failures": failures[:5],
        "crash_kills_mid_answer": stats["mid_answer"],
        "crash_turns_written": turns,
        "crash_db_bytes_per_token": round(path.stat().st_size / max(tokens, 1), 2),
        "crash_seconds": round(time.perf_counter() - start, 1),
    }


def main(argv=None) -> int:
    """The command line (``scripts/bench_engine.py``): figures as a table, with ``--json``
    one JSON object instead."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--live", type=int, default=30_000)
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    figures: dict = {
        "calibration_cpu_ms": calibrate(),
        "brightness_ms": summary(bench_brightness(args.live)),
        "per_layer_decode_ms": summary(bench_decode()),
    }
    with tempfile.TemporaryDirectory() as tmp:
        figures.update(bench_store(Path(tmp) / "store", args.tokens, args.live))
        if args.trials:
            figures.update(bench_crash(Path(tmp) / "crash", args.trials))
    figures["calibration_cpu_ms_after"] = calibrate()
    flat = {k: (v[0] if isinstance(v, tuple) else v) for k, v in figures.items()}
    flat.update({f"{k}_best": v[1] for k, v in figures.items() if isinstance(v, tuple)})
    flat.update({f"{k}_cpu": v[2] for k, v in figures.items() if isinstance(v, tuple)})
    if args.json:
        print(json.dumps(flat))
        return 0
    print(f"{'figure':28} {'median ms':>10} {'best':>9} {'CPU ms':>9}")
    for key, value in figures.items():
        shown = (f"{value[0]:10.3f} {value[1]:9.3f} {value[2]:9.3f}" if isinstance(value, tuple)
                 else value)
        goal = f"   goal <= {GOALS[key]}" if key in GOALS else ""
        print(f"{key:28} {shown}{goal}")
    return 0
