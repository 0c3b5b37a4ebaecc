"""What reading a long chat whole costs: prefill speed with and without flash attention.

The app's engine reads with flash attention off, so that the softmax it reads attention
from exists; a context that only answers may read with it on.  For each length of
``--tokens`` (a LoCoMo conversation's transcript in the chat template, cut to that many
tokens), on the bundled model, ``--threads`` threads, this reads the prompt from an empty
cache with each setting and reports the seconds and tokens per second, then the decode
speed of ``--decode`` tokens after it.  ``attention`` is the app's own setting (the
attention readable), ``flash`` the fastest one the engine has.

    python scripts/bench_read.py --tokens 2048,8192 --json

With ``--after`` it measures instead what a message pays at Enter: ``--new`` tokens read
after each of those many cached ones, in batches of each of ``--steps`` (the read-ahead
runs 64 a batch, an answer's prompt 512), on the engine's own ``sync``:

    python scripts/bench_read.py --after 0,2000,5500 --new 256 --steps 64,512 --json

With ``--requantize`` each listed weight format (``Q8_0``, ``Q4_0``, … llama.cpp's
``LLAMA_FTYPE_MOSTLY_*`` names) is also measured: a copy of the bundled model's weights
written in it (llama.cpp's own quantizer, from the shipped Q4_K_M weights, into a
temporary folder) read the same way, and its next-token distributions over a transcript
are compared with the shipped weights' (``weights``: mean KL divergence from the shipped
weights and the share of tokens whose most likely next token is the same), so the rows
say what a weight format would change and cost:

    python scripts/bench_read.py --after 1950 --new 160 --steps 512 --settings attention --requantize Q8_0,Q4_0 --json

The last line with ``--json`` is one JSON object: ``reads``, a row per length and setting
(with ``--after``: per context, setting and step).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import answers, locomo


def transcript_ids(engine, n_tokens: int) -> list[int]:
    """About ``n_tokens`` ids of the first dev conversations' turns, framed as chat turns."""
    ids: list[int] = []
    for dialogue in locomo.load(answers.DEFAULT_DATA):
        for turn in answers.with_speakers(dialogue).turns:
            ids += engine.encode(f"<|im_start|>{turn.role}\n{turn.text}<|im_end|>\n", parse_special=True)
            if len(ids) >= n_tokens:
                return ids[:n_tokens]
    return ids


def read(path, n_tokens: int, threads: int, attention: bool, decode: int) -> dict:
    from halo_weave.server.llamacpp.engine import LlamaEngine

    engine = LlamaEngine(path, context_size=n_tokens + decode + 64, threads=threads, read_attention=attention)
    try:
        ids = transcript_ids(engine, n_tokens)
        started = time.perf_counter()
        engine.kv.sync(ids[:-1])
        logits, _ = engine.kv.step(ids[-1:], attention=False)
        read_s = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(decode):
            logits, _ = engine.kv.step([int(np.argmax(logits))], attention=False)
        decode_s = time.perf_counter() - started
    finally:
        engine.close()
    return {"tokens": len(ids), "setting": "attention" if attention else "flash", "read_s": round(read_s, 2),
            "read_tok_s": round(len(ids) / read_s, 1), "decode_tok_s": round(decode / decode_s, 1) if decode else None}


def read_after(path, context: int, threads: int, attention: bool, new: int, steps: list[int]) -> list[dict]:
    """``new`` tokens of a transcript read after its first ``context`` cached ones, once per
    step size; the cache is cut back to ``context`` tokens between them."""
    from halo_weave.server.llamacpp.engine import LlamaEngine

    engine = LlamaEngine(path, context_size=context + new + 64, threads=threads, read_attention=attention)
    rows = []
    try:
        ids = transcript_ids(engine, context + new)
        engine.kv.sync(ids[:context])
        for step in steps:
            started = time.perf_counter()
            engine.kv.sync(ids, step=step)
            seconds = time.perf_counter() - started
            engine.kv.sync(ids[:context])
            rows.append({"context": context, "tokens": len(ids) - context, "step": step,
                         "setting": "attention" if attention else "flash", "read_s": round(seconds, 2),
                         "read_tok_s": round((len(ids) - context) / seconds, 1)})
    finally:
        engine.close()
    return rows


def requantized(path: Path, fmt: str, folder: Path) -> Path:
    """A copy of the GGUF ``path`` with its weights written in ``fmt`` (``Q8_0``, ``Q4_0``,
    …), made by llama.cpp's quantizer in ``folder``."""
    import ctypes

    import llama_cpp

    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{fmt.upper()}", None)
    if ftype is None:
        raise SystemExit(f"--requantize: llama.cpp has no weight format {fmt!r}")
    out = folder / f"{path.stem}-{fmt.upper()}.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.allow_requantize, params.nthread = ftype, True, os.cpu_count() or 1
    if llama_cpp.llama_model_quantize(str(path).encode(), str(out).encode(), ctypes.byref(params)) != 0:
        raise SystemExit(f"--requantize: llama.cpp could not write {fmt}")
    return out


def log_probs(path: Path, n_tokens: int, threads: int) -> np.ndarray:
    """Next-token log-probabilities after each of a transcript's first ``n_tokens`` tokens
    (one batch, float32 ``[n_tokens, n_vocab]``) on the GGUF ``path``."""
    from halo_weave.server.llamacpp.engine import LlamaEngine

    engine = LlamaEngine(path, context_size=n_tokens + 64, threads=threads, read_attention=False)
    try:
        logits = engine.kv.decode(transcript_ids(engine, n_tokens))
    finally:
        engine.close()
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def agreement(shipped: np.ndarray, other: np.ndarray) -> dict:
    """How far ``other``'s next-token distributions are from ``shipped``'s (both from
    :func:`log_probs`): mean KL(shipped || other) in nats, and the share of positions
    whose most likely next token is the same."""
    kl = (np.exp(shipped) * (shipped - other)).sum(axis=1)
    same = shipped.argmax(axis=1) == other.argmax(axis=1)
    return {"kl_mean": round(float(kl.mean()), 5), "kl_max": round(float(kl.max()), 4),
            "top1_same": round(float(same.mean()), 4), "positions": int(len(kl))}


def measure(path: Path, args, settings: list[str]) -> list[dict]:
    """Every row ``args`` asks for, on the GGUF ``path`` (each row names its weights)."""
    rows = []
    for n in [int(x) for x in args.after.split(",") if x.strip()]:
        for setting in settings:
            for row in read_after(path, n, args.threads, setting == "attention", args.new,
                                  [int(x) for x in args.steps.split(",") if x.strip()]):
                rows.append({"weights": path.name, **row})
                print(f"{path.name}: {row['tokens']} tokens after {row['context']:>5}, {row['setting']:>9}, "
                      f"{row['step']:>3} a batch: {row['read_s']} s ({row['read_tok_s']} tok/s)",
                      file=sys.stderr, flush=True)
    lengths = [] if args.after else [int(x) for x in args.tokens.split(",") if x.strip()]  # --after reads instead
    for n in lengths:
        for setting in settings:
            row = {"weights": path.name, **read(path, n, args.threads, setting == "attention", args.decode)}
            rows.append(row)
            print(f"{path.name}: {row['tokens']:>6} tokens, {row['setting']:>9}: read in {row['read_s']} s "
                  f"({row['read_tok_s']} tok/s), decode {row['decode_tok_s']} tok/s", file=sys.stderr, flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", default="2048,8192", help="comma-separated prompt lengths")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--decode", type=int, default=16, help="tokens decoded after each read")
    p.add_argument("--settings", default="attention,flash", help="attention, flash or both")
    p.add_argument("--after", default="", help="comma-separated context lengths: read --new tokens after each")
    p.add_argument("--new", type=int, default=256, help="with --after: tokens read after the context")
    p.add_argument("--steps", default="64,512", help="with --after: comma-separated batch sizes")
    p.add_argument("--requantize", default="",
                   help="comma-separated weight formats (Q8_0, Q4_0, ...) also measured: the bundled model's "
                        "weights rewritten in each")
    p.add_argument("--compare-tokens", type=int, default=256,
                   help="with --requantize: transcript tokens whose next-token distributions are compared")
    p.add_argument("--json", action="store_true", help="print one JSON object of figures last")
    args = p.parse_args(argv)
    path = answers.resolve_model("bundled")
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    formats = [f.strip() for f in args.requantize.split(",") if f.strip()]
    rows, weights = measure(path, args, settings), []
    with tempfile.TemporaryDirectory(prefix="halo-weave-weights-") as folder:
        shipped = log_probs(path, args.compare_tokens, args.threads) if formats else None
        for fmt in formats:
            other = requantized(path, fmt, Path(folder))
            weights.append({"weights": other.name, "format": fmt.upper(), "bytes": other.stat().st_size,
                            "shipped_bytes": path.stat().st_size,
                            **agreement(shipped, log_probs(other, args.compare_tokens, args.threads))})
            print(f"{other.name}: {weights[-1]}", file=sys.stderr, flush=True)
            rows += measure(other, args, settings)
    if args.json:
        print(json.dumps({"model": path.name, "threads": args.threads, "cpu": answers.cpu(),
                          "load_average": list(os.getloadavg()), "reads": rows, "weights": weights}))
    return 0
