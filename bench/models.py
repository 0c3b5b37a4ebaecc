"""Speed of the bundled models on the server with attention on: what choosing one costs.

For each model named (default ``qwen,smollm2``), one server at a time, on the engine
``--engine`` names (default llama.cpp), ``--threads`` threads:

* ``prefill_tok_s``: a chat prompt of about ``--context`` tokens (LoCoMo dev turns, the
  system prompt the app ships) read from scratch, the last token's attention read out:
  prompt tokens run / the request's prefill time; the median of ``--rounds`` requests, each
  on another dialogue so that nothing is reused from the cache;
* ``decode_tok_s``: tokens per second while an answer streams with each token's
  aggregated attention, after that prompt (temperature 0, up to ``--tokens`` tokens),
  the median of the same requests;
* ``start_s``: server start to its ready line (the assembled file, the llama.cpp verdict
  and the transformers engine's dequantized copy as an earlier start left them);
* ``file_mb``, ``layers``, ``heads``, ``kv_heads``: the model file and its shape.

Usage: ``python scripts/bench_models.py [--models qwen,smollm2] [--engine llamacpp] [--threads 2]
[--context 1500] [--tokens 48] [--rounds 3] [--json]``; the last line is one JSON object,
the figures under ``models.<name>``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import httpx


from bench.locomo import load as load_locomo

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev.json"
CHAT = "<|im_start|>{}\n{}<|im_end|>\n"


def chat_text(dialogue: int, context: int) -> str:
    """A chat of about ``context`` tokens (at ~4 characters a token) from LoCoMo's dialogue
    ``dialogue``, ending in a question."""
    from halo_weave.settings import Settings

    parts = [CHAT.format("system", Settings().chat.system_prompt)]
    size = 0
    for turn in load_locomo(LOCOMO)[dialogue].turns:
        text = CHAT.format(turn.role, turn.text)
        if size + len(text) > context * 4:
            break
        parts.append(text)
        size += len(text)
    parts.append(CHAT.format("user", "Tell me everything you remember about my week, in detail."))
    return "".join(parts) + "<|im_start|>assistant\n"


def measure(url: str, args) -> dict:
    with httpx.Client(base_url=url, timeout=600) as http:
        info = http.get("/api/v1/model").json()
        prefill, decode, prompt_tokens = [], [], []
        for n in range(args.rounds):
            text = chat_text(n, args.context)
            ids = http.post("/api/v1/tokenize", json={"text": text, "parse_special": True}).json()["token_ids"]
            body = {"input_ids": ids, "max_length": args.tokens, "temperature": 0, "output_attentions": True}
            with http.stream("POST", "/api/extra/generate/stream", json=body) as response:
                lines = [line for line in response.iter_lines() if line.startswith("data: ")]
            done = json.loads(lines[-1][len("data: "):])
            if done["kv"].get("reused", 0) > 16:
                raise SystemExit(f"round {n} reused {done['kv']['reused']} tokens: not a cold prefill")
            prefill.append(done["processed_prompt_tokens"] / done["timings"]["prefill_s"])
            decode.append(done["timings"]["tokens_per_s"])
            prompt_tokens.append(len(ids))
    return {
        "prefill_tok_s": round(statistics.median(prefill), 1),
        "decode_tok_s": round(statistics.median(decode), 1),
        "prompt_tokens": int(statistics.median(prompt_tokens)),
        "layers": info["num_layers"], "heads": info["num_attention_heads"],
        "kv_heads": info.get("num_key_value_heads"), "server_model": info["model_name"],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="qwen,smollm2")
    parser.add_argument("--engine", choices=("llamacpp", "transformers"), default="llamacpp")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--context", type=int, default=1500)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from halo_weave.server.launcher import start_server
    from halo_weave.server.loader import resolve

    figures: dict = {"engine": args.engine, "threads": args.threads,
                     "load_average_1m": round(os.getloadavg()[0], 2), "models": {}}
    for name in args.models.split(","):
        source = resolve(name)  # assembles a bundled model before the timed start
        started = time.perf_counter()
        server = start_server(port=0, extra_args=["--model", name, "--engine", args.engine, "--threads",
                                                  str(args.threads), "--kv-disk-mb", "0"])
        try:
            url = server.wait_ready(timeout=600)
            row = {"start_s": round(time.perf_counter() - started, 2),
                   "file_mb": round((source.path / source.gguf_file).stat().st_size / 1e6, 1), **measure(url, args)}
        finally:
            server.stop()
        figures["models"][name] = row
        if not args.json:
            print(name, json.dumps(row), file=sys.stderr, flush=True)
    figures["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(figures))
    return 0
