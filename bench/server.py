"""Figures for the attention server: both engines side by side.

For each engine (``llamacpp``, ``transformers``; same thread count, one server at a time):

* ``abort_ms_worst_*`` / ``abort_ms_median_*``: round trip of ``/api/extra/abort`` sent
  every 20 ms while another request is in flight: a 30 MB stop string (refused with 400
  once read), a 1M-character tokenize, a 262,144-id detokenize (the most accepted), and a running generation (under 100 ms).

``--only-abort`` measures just the abort figures, against a server using the model cache
in ``$HALO_WEAVE_CACHE`` (seconds to start when it is warm).

* ``decode_ms_attention_{1k,2k,8k}``: ms per generated token streamed with aggregated
  attention through the server, at that context;
* ``decode_ms_plain_2k``: the same engine with no attention read out, at its fastest
  setting, in-process (llama.cpp: a context without the callback, flash attention on
  and off, the faster one: ``decode_plain_flash_attn``, both in
  ``decode_ms_plain_2k_by_flash_attn``; transformers: ``generate()`` with sdpa);
* ``ttft_followup_s`` / ``ttft_after_prune_s`` / ``ttft_after_resurrect_s``: time to
  first token of a follow-up turn on a ~2k-token chat (a plain one, one whose request
  also drops the oldest chunk, and one that brings back a chunk from the first third
  that was pruned two turns earlier), medians of 3 rounds of that pattern, with the done
  event's ``kv`` report;
* ``start_to_ready_cold_s`` / ``_warm_s`` (default engine): server start to ready line
  with an empty model cache, then again.

Top-level keys: ``engine_speedup`` (llama.cpp / transformers tokens/s, attention on, 2k),
``llamacpp_attention_slowdown`` (plain / attention tokens/s, 2k),
``ttft_after_prune_ratio`` and ``ttft_after_resurrect_ratio`` (default engine, each /
the plain follow-up's TTFT), with the surgery's KL and top-1 agreement against an exact
re-prefill from ``bench_kv_surgery.py`` (:mod:`bench.kv_surgery`) beside them (``--surgery-cases``; with a new
message after the resurrected span, tail first off and on: ``surgery_kl_restore_tail``,
``surgery_kl_restore_tail_first``, ``surgery_kl_insert_tail[_first]`` and their
``surgery_top1_*``, ``--tail-cases``), and the client's per-event cost (``client_event_ms_*``).

Usage: ``python scripts/bench_server.py [--json] [--threads 2] [--engines llamacpp,transformers]
[--contexts 1024,2048,8000] [--tokens 32]``; the last line is one JSON object.
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

from halo_weave.kobold_client import KoboldClient
from halo_weave.server.launcher import start_server

DEFAULT_ENGINE = "llamacpp"
CHAT = "<|im_start|>{}\n{}<|im_end|>\n"
EVENT_REPEATS = 40
CHAT_CONTEXT_TOKENS = 2048
PARAGRAPH = (
    "The lighthouse keeper wrote in his log every evening: the colour of the sea, the ships "
    "that passed, the birds that rested on the rail, and the letters he meant to send home. "
)
TOPICS = ["the storm of March", "his daughter Ines", "the broken lens", "the supply boat",
          "the seal colony", "the winter fog", "the new radio", "the old captain", "the garden",
          "the inspector's visit", "the shipwreck", "the lamp oil", "the cat", "the logbook",
          "the festival", "the long night", "the gull chicks", "the painter", "the letters"]


def measure_start(cache: Path, threads: int, engine: str) -> float:
    started = time.perf_counter()
    process = start_server(port=0, extra_args=["--threads", str(threads), "--engine", engine],
                           env={"HALO_WEAVE_CACHE": str(cache)})
    try:
        process.wait_ready(timeout=600)
        return time.perf_counter() - started
    finally:
        if engine == "transformers":  # let the background cache write finish
            deadline = time.monotonic() + 120
            while not list(cache.glob("models/*/halo-weave-complete")) and time.monotonic() < deadline:
                time.sleep(0.5)
        process.stop()


def ids_of(client: KoboldClient, text: str) -> list[int]:
    return [i for i, _ in client.tokenize(text, parse_special=True)]


def filler(client: KoboldClient, tokens: int) -> list[int]:
    ids: list[int] = []
    turn = 0
    while len(ids) < tokens:
        role = "user" if turn % 2 == 0 else "assistant"
        ids += ids_of(client, CHAT.format(role, f"About {TOPICS[turn % len(TOPICS)]}: " + PARAGRAPH * 2))
        turn += 1
    return ids[:tokens]


def stream(client: KoboldClient, ids: list[int], max_length: int, **kw):
    s = client.stream(input_ids=ids, max_length=max_length, output_attentions=True, **kw)
    list(s)
    return s


def decode_ms(client: KoboldClient, context: int, tokens: int) -> dict:
    """ms/token with attention at ``context`` (prefill not counted)."""
    prompt = ids_of(client, CHAT.format("user", "Tell me a long story about a lighthouse keeper.")
                    + "<|im_start|>assistant\n")
    ids = filler(client, context - len(prompt)) + prompt
    best = None
    for seed in (11, 12):
        s = stream(client, ids, tokens, temperature=0.8, sampler_seed=seed)
        if len(s.tokens) >= 8 and (best is None or s.done.tokens_per_s > best[0]):
            best = (s.done.tokens_per_s, len(s.tokens))
    if best is None:
        return {"context": len(ids), "ms": None}
    return {"context": len(ids), "ms": round(1000 / best[0], 2), "tokens": best[1]}


def chat_ttft(client: KoboldClient, rounds: int = 3) -> dict:
    """TTFT of a plain follow-up, after a prune, after a resurrection (see the docstring)."""
    system = ids_of(client, CHAT.format("system", "You are the lighthouse keeper's assistant."))
    turns: list[list[int]] = []
    n = 0
    while len(system) + sum(map(len, turns)) < CHAT_CONTEXT_TOKENS - 200:
        role = "user" if n % 2 == 0 else "assistant"
        turns.append(ids_of(client, CHAT.format(role, f"About {TOPICS[n % len(TOPICS)]}: " + PARAGRAPH)))
        n += 1
    live = list(range(len(turns)))

    def exchange(k: int) -> list[int]:
        q = f"Question {k}: what happened with {TOPICS[(k * 5) % len(TOPICS)]}?"
        a = f"Answer {k}: it is written in the log, page {k * 7}."
        return (ids_of(client, CHAT.format("user", q)) + ids_of(client, CHAT.format("assistant", a)))

    def request(extra_turns: list[int]):
        ids = list(system)
        for i in live:
            ids += turns[i]
        question = ids_of(client, CHAT.format("user", f"And then, part {len(extra_turns)}?") + "<|im_start|>assistant\n")
        return ids + [t for k in extra_turns for t in exchange(k)] + question

    def ttft(ids):
        s = stream(client, ids, 1, temperature=0)
        return s.done.time_to_first_token_s, s.done.raw

    history: list[int] = []

    def turn():
        history.append(len(history))
        return ttft(request(history))

    turn()  # fills the cache
    turn()  # warm-up follow-up
    times: dict[str, list[float]] = {"plain": [], "prune": [], "resurrect": []}
    reports = {}
    for _ in range(rounds):
        s, reports["plain"] = turn()
        times["plain"].append(s)
        live.remove(live[0])  # the oldest chunk goes with the next turn
        s, reports["prune"] = turn()
        times["prune"].append(s)
        victim = live[len(live) // 4]  # a chunk in the first third...
        live.remove(victim)
        turn()
        turn()
        live.append(victim)  # ...comes back two turns after it was pruned
        live.sort()
        s, reports["resurrect"] = turn()
        times["resurrect"].append(s)
    med = {k: float(np.median(v)) for k, v in times.items()}
    return {
        "context_tokens": len(request(history)),
        "ttft_rounds": rounds,
        "ttft_followup_s": round(med["plain"], 3),
        "ttft_after_prune_s": round(med["prune"], 3),
        "ttft_after_resurrect_s": round(med["resurrect"], 3),
        "ttft_all_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "resurrected_tokens": len(turns[victim]),
        "kv_followup": reports["plain"].get("kv"),
        "kv_after_prune": reports["prune"].get("kv"),
        "kv_after_resurrect": reports["resurrect"].get("kv"),
    }


def bench_engine(engine: str, threads: int, contexts: list[int], tokens: int, say) -> dict:
    figures: dict = {"load_average_1m": round(os.getloadavg()[0], 2)}
    process = start_server(port=0, extra_args=["--threads", str(threads), "--engine", engine])
    try:
        process.wait_ready(timeout=600)
        with KoboldClient(process.url) as client:
            for context in contexts:
                result = decode_ms(client, context, tokens)
                key = f"{round(context / 1024)}k" if context >= 1000 else str(context)
                figures[f"decode_ms_attention_{key}"] = result["ms"]
                figures[f"decode_context_{key}"] = result["context"]
                say(engine, key, result)
            figures.update(chat_ttft(client))
            say(engine, "chat", figures)
    finally:
        process.stop()
    if engine == "llamacpp":  # its fastest setting: flash attention on or off, whichever wins
        plain = {flash: round(plain_decode_ms(engine, threads, 2048, tokens, flash=flash), 2)
                 for flash in ("off", "on")}
        figures["decode_ms_plain_2k_by_flash_attn"] = plain
        figures["decode_plain_flash_attn"] = min(plain, key=plain.get)
        figures["decode_ms_plain_2k"] = min(plain.values())
    else:
        figures["decode_ms_plain_2k"] = round(plain_decode_ms(engine, threads, 2048, tokens), 2)
    figures["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    return figures


def plain_decode_ms(engine: str, threads: int, context: int, tokens: int, flash: str = "off") -> float:
    """ms/token of the engine with no attention read out, in-process (llama.cpp: flash
    attention ``flash`` on or off)."""
    ids = [(i * 7919) % 40000 + 100 for i in range(context)]
    if engine == "llamacpp":
        import llama_cpp.llama_cpp as L

        from halo_weave.server.loader import resolve

        source = resolve(None)
        L.llama_backend_init()
        from halo_weave.server.llamacpp import safety

        gguf = source.path / source.gguf_file
        model = L.llama_model_load_from_file(str(gguf).encode(), safety.model_params(L, gguf))
        cp = L.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = context + tokens + 256, 512, 512
        cp.n_threads = cp.n_threads_batch = threads
        cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash == "on" else L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        ctx = L.llama_init_from_model(model, cp)
        batch = L.llama_batch_init(512, 0, 1)

        def decode(chunk, pos, logits):
            batch.n_tokens = len(chunk)
            for i, t in enumerate(chunk):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, pos + i, 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = int(logits and i == len(chunk) - 1)
            assert L.llama_decode(ctx, batch) == 0

        for s in range(0, context, 512):
            decode(ids[s:s + 512], s, s + 512 >= context)
        started = time.perf_counter()
        for k in range(tokens):
            decode([5 + k], context + k, True)
        ms = (time.perf_counter() - started) * 1000 / tokens
        L.llama_batch_free(batch)
        L.llama_free(ctx)
        L.llama_model_free(model)
        return ms
    import torch

    from halo_weave.server.transformers_engine import TransformersEngine

    hf = TransformersEngine.load(device="cpu", threads=threads)
    hf.model.set_attn_implementation("sdpa")
    prompt = torch.tensor([ids])
    with torch.inference_mode():
        start = time.perf_counter()
        hf.model.generate(prompt, max_new_tokens=1, min_new_tokens=1, do_sample=False)
        first = time.perf_counter() - start
        start = time.perf_counter()
        hf.model.generate(prompt, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
        total = time.perf_counter() - start
    return (total - first) * 1000 / (tokens - 1)


def sse_bytes(payload: dict, repeats: int) -> bytes:
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
    body = sse_bytes(payload, EVENT_REPEATS)
    # No input_ids in the request: the context length is checked by the shape only.
    stream_ = GenerationStream(KoboldClient("http://unused"), {"request_id": "bench"})
    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)
    start = time.perf_counter()
    count = 0
    for event in stream_.replay(httpx_sse.EventSource(response).iter_sse()):
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
        ids = http.post("/api/v1/tokenize", json={"text": chat, "parse_special": True}).json()["token_ids"]
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
    """The command line (``scripts/bench_server.py``): the figures, one JSON object last."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON figures line")
    parser.add_argument("--tokens", type=int, default=32, help="tokens per decode-rate run")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--engines", default="llamacpp,transformers")
    parser.add_argument("--contexts", default="1024,2048,8000")
    parser.add_argument("--surgery-cases", type=int, default=4, help="LoCoMo cases for KL/top-1 (0: skip)")
    parser.add_argument("--tail-cases", type=int, default=4,
                        help="LoCoMo resurrections with a new message, tail first off and on (0: skip)")
    parser.add_argument("--skip-start", action="store_true", help="skip the cold/warm start figures")
    parser.add_argument("--only-abort", action="store_true",
                        help="only the /abort latency figures (model cache from $HALO_WEAVE_CACHE)")
    args = parser.parse_args(argv)
    os.environ["HF_HUB_OFFLINE"] = "1"
    from halo_weave.server.omp import configure as configure_openmp

    configure_openmp()  # as the server sets it (in-process runs)
    say = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr, flush=True))
    engines = args.engines.split(",")
    contexts = [int(c) for c in args.contexts.split(",")]
    figures: dict = {"threads": args.threads, "cpu_count": os.cpu_count(), "default_engine": DEFAULT_ENGINE,
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

    with tempfile.TemporaryDirectory(prefix="hw-bench-cache-") as tmp:
        cache = Path(tmp)
        if not args.skip_start:
            figures["start_to_ready_cold_s"] = round(measure_start(cache, args.threads, DEFAULT_ENGINE), 2)
            figures["start_to_ready_warm_s"] = round(measure_start(cache, args.threads, DEFAULT_ENGINE), 2)
            say("start", figures)
        os.environ.setdefault("HALO_WEAVE_CACHE", str(cache))
        for engine in engines:
            figures[engine] = bench_engine(engine, args.threads, contexts, args.tokens, say)
            say(engine, figures[engine])

    default = figures.get(DEFAULT_ENGINE, {})
    if "llamacpp" in figures and "transformers" in figures:
        a, b = figures["llamacpp"].get("decode_ms_attention_2k"), figures["transformers"].get("decode_ms_attention_2k")
        if a and b:
            figures["engine_speedup"] = round(b / a, 2)
    if "llamacpp" in figures and figures["llamacpp"].get("decode_ms_attention_2k"):
        figures["llamacpp_attention_slowdown"] = round(
            figures["llamacpp"]["decode_ms_attention_2k"] / figures["llamacpp"]["decode_ms_plain_2k"], 3)
    if default.get("ttft_followup_s"):
        figures["ttft_after_prune_ratio"] = round(default["ttft_after_prune_s"] / default["ttft_followup_s"], 2)
        figures["ttft_after_resurrect_ratio"] = round(default["ttft_after_resurrect_s"] / default["ttft_followup_s"], 2)
    if args.surgery_cases and DEFAULT_ENGINE in engines:
        from bench import kv_surgery as bench_kv_surgery

        from halo_weave.server.engine_choice import load_engine

        engine = load_engine(DEFAULT_ENGINE, threads=args.threads)
        quality = bench_kv_surgery.measure(engine, bench_kv_surgery.make_cases(engine, args.surgery_cases))
        figures["surgery_quality"] = quality
        figures["prune_kl_mean"] = quality["prune"]["kl_mean"]
        figures["prune_top1_agree"] = f"{quality['prune']['top1_agree']}/{quality['prune']['cases']}"
        if "restore" in quality:
            figures["resurrect_kl_mean"] = quality["restore"]["kl_mean"]
            figures["resurrect_top1_agree"] = f"{quality['restore']['top1_agree']}/{quality['restore']['cases']}"
    if args.tail_cases and DEFAULT_ENGINE in engines:
        from bench import kv_surgery as bench_kv_surgery

        from halo_weave.server.engine_choice import load_engine

        engine = load_engine(DEFAULT_ENGINE, threads=args.threads)
        tail = bench_kv_surgery.measure_tail(
            engine, bench_kv_surgery.make_cases(engine, args.tail_cases, bench_kv_surgery.TAIL_CONTEXT_TOKENS))
        figures["surgery_tail_quality"] = tail
        figures.update(bench_kv_surgery.tail_keys(tail))
    figures["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(figures))
    return 0
