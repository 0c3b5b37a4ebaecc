"""Cost of recording attention: ms per token and disk bytes per token.

    python scripts/bench_capture.py [--tokens 100] [--context 2000] [--json]
    python scripts/bench_capture.py --real [--format per_layer] [--tokens 80] [--keep DIR]

Synthetic mode (default) records ``--tokens`` token events at the bundled model's shape
(SmolLM2-135M: 30 layers x 9 heads) over a ``--context``-token conversation, both as
``per_layer`` ``[30, 9, ctx]`` and ``aggregated`` ``[ctx]`` payloads, into a temporary
folder on the data directory's disk, and times :meth:`AttentionRecorder.record` alone.
Writes go to the OS page cache (no fsync, as in the app).

``--real`` loads the bundled model in-process (halo_weave.server.transformers_engine), builds a small
conversation, generates one answer and runs the app's per-token path (apply attention,
record, append) — leaving a real capture behind (in ``--keep`` or the data directory's
``captures``) for ``scripts/analyze_capture.py``.

Prints a table; with ``--json`` one JSON object of figures as the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from halo_weave.rules import attention_format
from halo_weave.storage.capture import AttentionRecorder, default_capture_dir, generation_meta
from halo_weave.conversation import Conversation
from halo_weave.settings import Settings, data_dir

LAYERS, HEADS = 30, 9

STORY = [
    ("user", "I'm planning a trip to Lisbon in May. I love old trams, custard tarts and "
             "viewpoints over the river. My budget is about 900 euros for a week, flights "
             "excluded.\n\nI am vegetarian, and my sister Ana joins me for the weekend."),
    ("assistant", "Lisbon in May is lovely: warm days and long evenings. Ride tram 28 early "
                  "in the morning before the queues, and try the pastéis de nata at Manteigaria "
                  "and in Belém.\n\nFor views, the miradouros of Graça and Santa Luzia are the "
                  "best at sunset. A week on 900 euros works with a guesthouse in Arroios or "
                  "Anjos and the Viva Viagem card for transport."),
    ("user", "Separately, my Python script that parses CSV files is slow on 2 GB files. "
             "It reads every line with csv.reader and appends dicts to a list.\n\n"
             "What should I change first?"),
    ("assistant", "Stream instead of collecting: process each row as you read it and keep "
                  "only aggregates. Use csv.reader over csv.DictReader, and open the file "
                  "with a large buffer.\n\nIf you need columns, pandas.read_csv with "
                  "usecols and chunksize, or pyarrow.csv, is many times faster."),
]
QUESTION = "Back to the trip: which viewpoint did you suggest for sunset, and what should Ana and I eat?"


def synthetic(tokens: int, context: int, fmt: str, root: Path) -> dict:
    rng = np.random.default_rng(0)
    recorder = AttentionRecorder(root)
    recorder.start({"benchmark": "synthetic", "format": fmt})
    positions = np.arange(context + tokens, dtype=np.int64)
    brightness = np.full(context + tokens, 10000, np.int32)
    chunks = (positions // 64).astype(np.int32)
    times = []
    for i in range(tokens):
        ctx = context + i
        if attention_format(fmt).per_layer:
            attention = rng.random((LAYERS, HEADS, ctx), dtype=np.float32)
        else:
            attention = rng.random(ctx, dtype=np.float32)
        t = time.perf_counter()
        recorder.record(1234, " tok", positions[:ctx], attention, brightness[:ctx], chunk_ids=chunks[:ctx])
        times.append((time.perf_counter() - t) * 1000)
    path = recorder.finish()
    size = sum(p.stat().st_size for p in path.iterdir())
    times.sort()
    return {
        "format": fmt,
        "context": context,
        "tokens": tokens,
        "ms_per_token_mean": round(statistics.fmean(times), 3),
        "ms_per_token_p50": round(times[len(times) // 2], 3),
        "ms_per_token_p95": round(times[int(len(times) * 0.95) - 1], 3),
        "bytes_per_token": round(size / tokens),
    }


def real(tokens: int, fmt: str, keep: Path | None) -> dict:
    from halo_weave.core.chat_template import build_framing
    from halo_weave.server.transformers_engine import TransformersEngine
    from halo_weave.tools.notebook import TOOL_PROMPT

    t = time.perf_counter()
    engine = TransformersEngine.load(attention_format=fmt)
    load_s = time.perf_counter() - t
    settings = Settings.of(min_chunk_tokens=16)
    tokenize = lambda text: engine.tokenize(text)  # noqa: E731
    framing = build_framing(lambda text: engine.tokenize(text, parse_special=True))
    conv = Conversation(settings, framing)
    prompt = "You are a helpful assistant.\n\n" + TOOL_PROMPT
    pieces = framing.wrap("system", tokenize(prompt))
    conv.set_system_prompt(prompt, [i for i, _ in pieces], [p for _, p in pieces])
    for role, text in STORY + [("user", QUESTION)]:
        pieces = tokenize(text)
        conv.add_turn(role, [i for i, _ in pieces], [p for _, p in pieces])
    conv.begin_turn("assistant")
    recorder = AttentionRecorder(keep or default_capture_dir())
    recorder.start(generation_meta(conv, model=engine.name, attention_format=fmt, question=QUESTION))
    times = []
    generation = engine.generate([int(i) for i in conv.live_input_ids()], max_length=tokens,
                                 temperature=0.0, attention_format=fmt,
                                 stop_sequence=["<|im_end|>", "<|im_start|>"])
    done = None
    for record in generation:
        if not hasattr(record, "token_id"):
            done = record
            continue
        aggregated = record.attention
        if aggregated is not None and aggregated.ndim == 3:
            aggregated = aggregated.reshape(-1, aggregated.shape[-1]).mean(axis=0)
        if aggregated is not None:
            conv.apply_attention(aggregated)
        t = time.perf_counter()
        recorder.record(record.token_id, record.text, conv.table.position, record.attention,
                        conv.table.brightness, chunk_ids=conv.table.chunk_id)
        times.append((time.perf_counter() - t) * 1000)
        conv.append_token(record.token_id, record.text)
    conv.end_turn()
    from halo_weave.storage.capture import chunk_snapshot

    path = recorder.finish({"chunks": chunk_snapshot(conv), "finish_reason": getattr(done, "finish_reason", None),
                            "decode_s": getattr(done, "decode_s", None)})
    size = sum(p.stat().st_size for p in path.iterdir())
    times.sort()
    return {
        "format": fmt,
        "mode": "real",
        "model": engine.name,
        "load_s": round(load_s, 1),
        "context": int(conv.live_token_count()),
        "tokens": len(times),
        "tokens_per_s": round(getattr(done, "tokens_per_s", 0.0) or 0.0, 2),
        "ms_per_token_mean": round(statistics.fmean(times), 3) if times else None,
        "ms_per_token_p95": round(times[int(len(times) * 0.95) - 1], 3) if times else None,
        "bytes_per_token": round(size / max(1, len(times))),
        "capture": str(path),
        "answer": "".join(recorder_text(path)),
    }


def recorder_text(path: Path) -> list[str]:
    from halo_weave.storage.capture import load_capture

    return [e["text"] for e in load_capture(path).index]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--context", type=int, default=2000)
    parser.add_argument("--real", action="store_true", help="record a real generation of the bundled model")
    parser.add_argument("--format", choices=["per_layer", "aggregated"], default="per_layer")
    parser.add_argument("--keep", type=Path, help="(--real) capture folder root")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    if args.real:
        figures = real(args.tokens, args.format, args.keep)
        for key, value in figures.items():
            print(f"{key:>18}: {value}")
    else:
        root = Path(tempfile.mkdtemp(prefix="bench-capture-", dir=data_dir()))
        try:
            results = [synthetic(args.tokens, args.context, fmt, root) for fmt in ("per_layer", "aggregated")]
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(f"{'format':>11} {'context':>8} {'mean ms':>8} {'p50 ms':>7} {'p95 ms':>7} {'bytes/token':>12}")
        for r in results:
            print(f"{r['format']:>11} {r['context']:>8} {r['ms_per_token_mean']:>8} {r['ms_per_token_p50']:>7} "
                  f"{r['ms_per_token_p95']:>7} {r['bytes_per_token']:>12}")
        figures = {
            "shape": f"{LAYERS}x{HEADS}x{args.context}",
            "per_layer_ms_per_token": results[0]["ms_per_token_mean"],
            "per_layer_ms_per_token_p95": results[0]["ms_per_token_p95"],
            "per_layer_bytes_per_token": results[0]["bytes_per_token"],
            "aggregated_ms_per_token": results[1]["ms_per_token_mean"],
            "aggregated_ms_per_token_p95": results[1]["ms_per_token_p95"],
            "aggregated_bytes_per_token": results[1]["bytes_per_token"],
            "tokens": args.tokens,
            "cpu_count": os.cpu_count(),
        }
    if args.json:
        print(json.dumps(figures, ensure_ascii=False))
    return 0
