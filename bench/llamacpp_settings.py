"""Prefill and decode speed of the bundled model with llama.cpp's default and safe settings.

The safe settings (:mod:`halo_weave.server.llamacpp.safety`) load the weights without
llama.cpp's extra buffer types, so no weight repacking: the AMX repack that crashes on
Intel AMX CPUs, and also the AVX2/AVX-512 repack of Q4_0/Q4_K/IQ4_NL/Q8_0 tensors.  This
measures what that costs on this machine: each setting in its own process (plain
decoding, no attention read out, flash attention off as the engine runs it).

    python scripts/bench_llamacpp_settings.py [--json] [--threads 2] [--prefill 1024] [--decode 64] [--rounds 3]

Figures per setting: ``prefill_tok_s`` (a ``--prefill``-token prompt in 512-token
batches), ``decode_ms_per_token`` (``--decode`` greedy tokens after it), medians over
``--rounds``; ``safe_over_default_*`` the ratios.  The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

#: The command line, run once per measurement in a fresh process.
SCRIPT = str(Path(__file__).resolve().parents[1] / "scripts" / "bench_llamacpp_settings.py")


def measure(mode: str, threads: int, prefill: int, decode: int) -> dict:
    from halo_weave.server.llamacpp import bindings, safety
    from halo_weave.server.loader import bundled_gguf

    L = bindings.load().llama
    model = L.llama_model_load_from_file(str(bundled_gguf()).encode(),
                                         safety.apply(L.llama_model_default_params(), mode))
    vocab = L.llama_model_get_vocab(model)
    n_vocab = int(L.llama_vocab_n_tokens(vocab))
    cp = L.llama_context_default_params()
    cp.n_ctx = prefill + decode + 64
    cp.n_batch = cp.n_ubatch = 512
    cp.n_threads = cp.n_threads_batch = threads
    cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    ctx = L.llama_init_from_model(model, cp)
    ids = [(i * 7919) % (n_vocab - 200) + 100 for i in range(prefill)]
    started = time.perf_counter()
    for at in range(0, prefill, 512):
        part = ids[at:at + 512]
        array = (L.llama_token * len(part))(*part)  # kept alive: the batch only points at it
        code = L.llama_decode(ctx, L.llama_batch_get_one(array, len(part)))
        if code != 0:
            raise RuntimeError(f"prefill failed ({code})")
    prefill_s = time.perf_counter() - started
    token = ids[-1]
    started = time.perf_counter()
    for _ in range(decode):
        array = (L.llama_token * 1)(token)
        if L.llama_decode(ctx, L.llama_batch_get_one(array, 1)) != 0:
            raise RuntimeError("decode failed")
        logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
        token = int(logits.argmax())
    decode_s = time.perf_counter() - started
    L.llama_free(ctx)
    L.llama_model_free(model)
    return {"prefill_tok_s": prefill / prefill_s, "decode_ms_per_token": 1000 * decode_s / decode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prefill", type=int, default=1024)
    parser.add_argument("--decode", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", choices=("default", "safe"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.threads, args.prefill, args.decode)))
        return
    from halo_weave.server.llamacpp import safety

    figures: dict = {"threads": args.threads, "prefill_tokens": args.prefill, "decode_tokens": args.decode,
                     "cpu": safety.cpu_name(), "amx": safety.has_amx(), "machine": platform.machine(),
                     "load_average": os.getloadavg()[0]}
    runs: dict[str, list[dict]] = {"default": [], "safe": []}
    for _ in range(args.rounds):
        for mode in runs:  # interleaved, so that drift in the machine's speed hits both
            out = subprocess.run([sys.executable, SCRIPT, "--child", mode, "--threads", str(args.threads),
                                  "--prefill", str(args.prefill), "--decode", str(args.decode)],
                                 capture_output=True, text=True, check=True).stdout
            runs[mode].append(json.loads(out.strip().splitlines()[-1]))
    for mode, found in runs.items():
        for key in ("prefill_tok_s", "decode_ms_per_token"):
            figures[f"{mode}_{key}"] = round(statistics.median(r[key] for r in found), 2)
    for key in ("prefill_tok_s", "decode_ms_per_token"):
        figures[f"safe_over_default_{key}"] = round(figures[f"safe_{key}"] / figures[f"default_{key}"], 3)
    if not args.json:
        for key, value in figures.items():
            print(f"{key}: {value}")
    print(json.dumps(figures))
