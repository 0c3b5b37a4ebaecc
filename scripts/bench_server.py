"""Figures for the attention server and client (issue 3).

* ``attention_stream_tokens_per_s`` vs ``plain_generate_tokens_per_s``: decode rate of
  the real server streaming aggregated attention over HTTP, against the same model's
  plain transformers ``generate()`` (sdpa, no attention) in-process, same prompt, same
  length, same thread count; ``attention_slowdown`` is their ratio (goal <= 1.3).
* ``ttft_followup_reuse_s`` vs ``ttft_followup_no_reuse_s``: time to first token of a
  follow-up turn on a ~1.5k-token conversation, with the KV prefix reused and after the
  cache was evicted by an unrelated request (goal: ratio >= 5).
* ``client_event_ms_*``: client cost per token event (SSE parse + JSON + base64 decode
  + aggregation), aggregated at 8k context and per_layer at 30 x 9 x 2048.
* ``start_to_ready_cold_s`` / ``_warm_s``: server start to ready line with an empty
  model cache and with the dequantized model cached.
* ``abort_ms_worst_*`` / ``abort_ms_median_*``: round trip of ``/api/extra/abort`` sent
  every 20 ms while another request is in flight: a 30 MB stop string (refused with 400
  once read), a 1M-character tokenize, a 262,144-id detokenize (the most accepted), and a running generation (issue 17: under 100 ms).

``--only-abort`` measures just the abort figures, against a server using the model cache
in ``$HALO_WEAVE_CACHE`` (seconds to start when it is warm).

Usage: ``python scripts/bench_server.py [--json] [--tokens 64] [--threads N]``; the
last line of output is one JSON object of figures.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
import httpx_sse
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from halo_weave.kobold_client import KoboldClient  # noqa: E402
from halo_weave.server.launcher import start_server  # noqa: E402

CHAT = "<|im_start|>{}\n{}<|im_end|>\n"
FOLLOWUP_CONTEXT_TOKENS = 1500
EVENT_REPEATS = 40
PARAGRAPH = (
    "The lighthouse keeper wrote in his log every evening: the colour of the sea, the ships "
    "that passed, the birds that rested on the rail, and the letters he meant to send home. "
)


def measure_start(cache: Path, threads: int) -> float:
    started = time.perf_counter()
    process = start_server(port=0, extra_args=["--threads", str(threads)], env={"HALO_WEAVE_CACHE": str(cache)})
    try:
        process.wait_ready(timeout=600)
        return time.perf_counter() - started
    finally:
        # Let the background cache write finish before stopping a cold server.
        deadline = time.monotonic() + 120
        while not list(cache.glob("models/*/halo-weave-complete")) and time.monotonic() < deadline:
            time.sleep(0.5)
        process.stop()


def conversation_ids(client: KoboldClient, tokens: int) -> list[int]:
    ids: list[int] = []
    turn = 0
    while len(ids) < tokens:
        role = "user" if turn % 2 == 0 else "assistant"
        ids += [i for i, _ in client.tokenize(CHAT.format(role, PARAGRAPH * 2))]
        turn += 1
    return ids[:tokens]


def ttft(client: KoboldClient, ids: list[int]) -> tuple[float, dict]:
    stream = client.stream(input_ids=ids, max_length=1, output_attentions=True, temperature=0)
    list(stream)
    return stream.done.time_to_first_token_s, stream.done.raw


def bench_server(url: str, tokens: int) -> dict:
    figures = {}
    with KoboldClient(url) as client:
        prompt = [i for i, _ in client.tokenize(
            CHAT.format("user", "Tell me a long story about a lighthouse keeper.") + "<|im_start|>assistant\n")]
        rates = []
        for seed in (11, 12):
            stream = client.stream(input_ids=prompt, max_length=tokens, temperature=0.8, sampler_seed=seed,
                                   output_attentions=True, attention_format="aggregated")
            list(stream)
            rates.append((stream.done.tokens_per_s, len(stream.tokens)))
        figures["attention_stream_tokens_per_s"] = round(max(r for r, _ in rates), 2)
        figures["attention_stream_tokens"] = max(n for _, n in rates)

        context = conversation_ids(client, FOLLOWUP_CONTEXT_TOKENS)
        followup = context + [i for i, _ in client.tokenize(
            CHAT.format("user", "What did the keeper write about?") + "<|im_start|>assistant\n")]
        ttft(client, context)  # the previous turn: fills the cache
        reuse_s, reuse_raw = ttft(client, followup)
        ttft(client, [followup[1]] * 8)  # an unrelated request evicts the prefix
        full_s, full_raw = ttft(client, followup)
        figures.update(
            followup_context_tokens=len(followup),
            ttft_followup_reuse_s=round(reuse_s, 3),
            ttft_followup_no_reuse_s=round(full_s, 3),
            ttft_reuse_speedup=round(full_s / reuse_s, 1),
            reuse_processed_prompt_tokens=reuse_raw.get("processed_prompt_tokens"),
            no_reuse_processed_prompt_tokens=full_raw.get("processed_prompt_tokens"),
        )
    return figures, prompt


def bench_plain_generate(prompt: list[int], tokens: int, threads: int) -> float:
    """Decode rate of transformers' own generate(): (n - 1) tokens after the first."""
    import torch

    from halo_weave.server.engine import Engine

    engine = Engine.load(device="cpu", threads=threads, cache_model=False)
    model = engine.model
    model.set_attn_implementation("sdpa")
    ids = torch.tensor([prompt])
    with torch.inference_mode():
        model.generate(ids, max_new_tokens=2, do_sample=False)  # warm-up
        start = time.perf_counter()
        model.generate(ids, max_new_tokens=1, min_new_tokens=1, do_sample=False)
        first = time.perf_counter() - start
        start = time.perf_counter()
        model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
        total = time.perf_counter() - start
    return (tokens - 1) / (total - first)


def _sse_bytes(payload: dict, repeats: int) -> bytes:
    event = {"type": "token", "token": {"token_id": 5, "text": " x"}, "attention": payload}
    line = f"event: message\ndata: {json.dumps(event)}\n\n"
    done = 'event: message\ndata: {"type": "done", "finish_reason": "length"}\n\n'
    return (line * repeats + done).encode()


def client_event_ms(shape: tuple[int, ...]) -> float:
    """Per-event client cost over in-memory SSE bytes: parse, JSON, base64, aggregate."""
    from halo_weave.kobold_client import GenerationStream

    rng = np.random.default_rng(0)
    values = rng.random(shape, dtype=np.float32)
    values /= values.sum(axis=-1, keepdims=True)
    payload = {"format": "per_layer" if len(shape) == 3 else "aggregated", "shape": list(shape),
               "context_length": shape[-1], "encoding": "base64", "dtype": "float32",
               "data": base64.b64encode(values.astype("<f4").tobytes()).decode()}
    body = _sse_bytes(payload, EVENT_REPEATS)
    stream = GenerationStream(KoboldClient("http://unused"), {"request_id": "bench"})
    stream._prompt_tokens = None  # context length checked by shape only
    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)
    start = time.perf_counter()
    count = 0
    for sse in httpx_sse.EventSource(response).iter_sse():
        for event in stream._handle(sse):
            assert event.attention is not None and event.attention.shape == (shape[-1],)
            count += 1
    return (time.perf_counter() - start) * 1000 / count


ABORT_INTERVAL_S = 0.02


def abort_latency(url: str) -> dict:
    """Worst and median /abort round trips (ms) while each kind of heavy request runs."""
    import statistics
    import threading

    chat = CHAT.format("user", "Write a long story about the sea.") + "<|im_start|>assistant\n"
    with httpx.Client(base_url=url, timeout=120) as http:
        ids = http.post("/api/v1/tokenize", json={"text": chat}).json()["token_ids"]
    json_header = {"Content-Type": "application/json"}
    stop_body = (json.dumps({"input_ids": ids, "max_length": 4})[:-1] + ', "stop_sequence": ["').encode() \
        + b"z" * (30 * 1024 * 1024) + b'"]}'
    mixed = ("héllo wörld 你好 مرحبا 🌍 " * 40000)[:1_000_000]
    heavy = {
        "stop_string_30mb": lambda c: c.post("/api/extra/generate/stream", content=stop_body, headers=json_header),
        "tokenize_1m_chars": lambda c: c.post("/api/v1/tokenize", json={"text": mixed}),
        "detokenize_262k_ids": lambda c: c.post("/api/v1/detokenize", json={"token_ids": [5000] * 262_144}),
        "generation": lambda c: c.post("/api/extra/generate/stream",
                                       json={"input_ids": ids, "max_length": 48, "request_id": "bench-heavy"}),
    }
    figures = {}
    for name, request in heavy.items():
        done = threading.Event()

        outcome = {}

        def run(request=request, outcome=outcome):
            try:
                with httpx.Client(base_url=url, timeout=300) as client:
                    outcome["status"] = request(client).status_code
            except httpx.HTTPError as exc:
                outcome["status"] = type(exc).__name__
            finally:
                done.set()

        worker = threading.Thread(target=run)
        worker.start()
        times = []
        with httpx.Client(base_url=url, timeout=60) as http:
            time.sleep(0.05)
            while not done.is_set():
                # Another request id: measures the answer without stopping the generation.
                started = time.perf_counter()
                try:
                    http.post("/api/extra/abort", json={"request_id": "not-this-one"})
                except httpx.TimeoutException:  # not answered within the client's 60 s
                    pass
                times.append((time.perf_counter() - started) * 1000)
                time.sleep(ABORT_INTERVAL_S)
        worker.join()
        figures[f"abort_ms_worst_{name}"] = round(max(times), 1) if times else None
        figures[f"abort_ms_median_{name}"] = round(statistics.median(times), 1) if times else None
        figures[f"abort_samples_{name}"] = len(times)
        figures[f"heavy_status_{name}"] = outcome.get("status")
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON figures line")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per decode-rate run")
    parser.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--skip-start", action="store_true", help="skip the cold/warm start figures")
    parser.add_argument("--only-abort", action="store_true",
                        help="only the /abort latency figures (model cache from $HALO_WEAVE_CACHE)")
    args = parser.parse_args(argv)
    os.environ["HF_HUB_OFFLINE"] = "1"
    say = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr))
    figures: dict = {"threads": args.threads, "cpu_count": os.cpu_count(),
                     "load_average_1m": round(os.getloadavg()[0], 2)}
    if args.only_abort:
        process = start_server(port=0, extra_args=["--threads", str(args.threads)])
        try:
            process.wait_ready(timeout=600)
            figures.update(abort_latency(process.url))
        finally:
            process.stop()
        figures["load_average_1m_end"] = round(os.getloadavg()[0], 2)
        print(json.dumps(figures))
        return 0

    figures["client_event_ms_aggregated_8k"] = round(client_event_ms((8192,)), 3)
    figures["client_event_ms_per_layer_30x9x2048"] = round(client_event_ms((30, 9, 2048)), 3)
    say("client figures", figures)

    with tempfile.TemporaryDirectory(prefix="hw-bench-cache-") as tmp:
        cache = Path(tmp)
        if not args.skip_start:
            figures["start_to_ready_cold_s"] = round(measure_start(cache, args.threads), 2)
            figures["start_to_ready_warm_s"] = round(measure_start(cache, args.threads), 2)
            say("start figures", figures)
        os.environ["HALO_WEAVE_CACHE"] = str(cache)
        process = start_server(port=0, extra_args=["--threads", str(args.threads)])
        try:
            process.wait_ready(timeout=600)
            server_figures, prompt = bench_server(process.url, args.tokens)
            server_figures.update(abort_latency(process.url))
        finally:
            process.stop()
        figures.update(server_figures)
        say("server figures", figures)
        plain = bench_plain_generate(prompt, args.tokens, args.threads)
    figures["plain_generate_tokens_per_s"] = round(plain, 2)
    figures["attention_slowdown"] = round(plain / figures["attention_stream_tokens_per_s"], 3)
    figures["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
