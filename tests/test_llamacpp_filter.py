"""The llama.cpp engine's C filter: same attention as the pure-Python callback, and a
server that still works where no C compiler exists."""

from __future__ import annotations

import base64
import json
import shutil
import threading
import time

import httpx
import numpy as np
import pytest

pytestmark = pytest.mark.slow

CHAT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
PROMPT = ("My sister Ana moved to Lisbon last spring and opened a small bakery near the river. "
          "Her dog, a grey whippet called Pavlov, sleeps under the counter. Where did Ana move?")

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed here")


def gguf_path():
    from halo_weave.server import loader

    source = loader.resolve(None)
    return source.path / source.gguf_file


def generate(engine, ids: list[int], fmt: str):
    """The token records of a greedy 4-token answer."""
    records = engine.generate(ids, max_length=4, temperature=0, attention_format=fmt)
    return [r for r in records if hasattr(r, "token_id")]


def test_the_c_filter_and_the_python_callback_read_the_same_attention(tmp_path, monkeypatch):
    if not shutil.which("cc") and not shutil.which("gcc"):
        pytest.skip("no C compiler here: only the Python callback can run")
    gguf = gguf_path()  # assembled, if need be, in the session's cache
    monkeypatch.setenv("HALO_WEAVE_CACHE", str(tmp_path))  # compiled afresh, into a private cache
    from halo_weave.server.llamacpp.engine import LlamaEngine

    fast = LlamaEngine(gguf, threads=1)
    slow = LlamaEngine(gguf, threads=1, c_filter=False)
    try:
        assert fast._filter is not None and slow._filter is None
        assert list((tmp_path / "llamacpp").glob("filter-*.so"))
        ids = fast.encode(CHAT.format(PROMPT), parse_special=True)
        for fmt in ("aggregated", "per_layer"):
            before = fast._filter.forwarded
            got, ref = generate(fast, ids, fmt), generate(slow, ids, fmt)
            assert [r.token_id for r in got] == [r.token_id for r in ref]
            assert len(got) == 4 and all(r.attention is not None for r in got)
            for a, b in zip(got, ref):
                assert a.attention.shape == b.attention.shape
                np.testing.assert_array_equal(a.attention, b.attention)
            # Only the nodes the cache reads entered Python: ~2 per layer and token, not ~1,100.
            assert fast._filter.forwarded - before < len(got) * 4 * fast.num_layers + 600
    finally:
        fast.close()
        slow.close()


def per_layer_attention(url: str, prompt: str) -> tuple[list[int], list[np.ndarray]]:
    with httpx.Client(base_url=url, timeout=httpx.Timeout(120, connect=5)) as http:
        info = http.get("/api/v1/model").json()
        assert info["engine"] == "llamacpp"
        # A first token no earlier request began with: nothing is reused from the server's
        # cache, so both servers run the whole prompt in the same batches (a prefix computed
        # in another batch differs in the last bits, and attention by up to ~0.02).
        text = "Filter check.\n" + CHAT.format(prompt)
        ids = http.post("/api/v1/tokenize", json={"text": text, "parse_special": True}).json()["token_ids"]
        body = {"input_ids": ids, "max_length": 3, "temperature": 0, "output_attentions": True,
                "attention_format": "per_layer"}
        with http.stream("POST", "/api/extra/generate/stream", json=body) as response:
            assert response.status_code == 200
            events = [json.loads(line[len("data: "):]) for line in response.iter_lines()
                      if line.startswith("data: ")]
    tokens = [e for e in events if e["type"] == "token"]
    rows = [np.frombuffer(base64.b64decode(e["attention"]["data"]), "<f4").reshape(e["attention"]["shape"])
            for e in tokens]
    return [e["token"]["token_id"] for e in tokens], rows


def test_a_server_without_a_c_compiler_still_serves_the_same_attention(server, tmp_path):
    from halo_weave.server.launcher import start_server

    # A fresh cache holds no compiled filter, and the compiler named does not exist.  The model
    # is the session server's, named by its file (the bundled default, already assembled).
    broken = start_server(port=0, extra_args=["--model", str(gguf_path())],
                          env={"HALO_WEAVE_CACHE": str(tmp_path), "CC": str(tmp_path / "no-such-cc")})
    try:
        url = broken.wait_ready(timeout=300)
        got_ids, got = per_layer_attention(url, PROMPT)
        assert any("no C filter" in line for line in broken.log)
    finally:
        broken.stop()
    ref_ids, ref = per_layer_attention(server.url, PROMPT)
    assert got_ids == ref_ids and len(got) == 3
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a.sum(axis=-1), 1.0, atol=1e-4)
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert not list((tmp_path / "llamacpp").glob("filter-*.so"))


def test_an_answer_stops_a_read_ahead_part_way_through_its_batch(monkeypatch):
    """The user pressed Enter while the server read the draft: the read-ahead's batch stops
    where it is (the answer does not wait for it), and the cache keeps nothing of it."""
    if not shutil.which("cc") and not shutil.which("gcc"):
        pytest.skip("no C compiler here: a read-ahead's batch always runs to its end")
    from halo_weave.server import engine_base
    from halo_weave.server.llamacpp.engine import LlamaEngine

    monkeypatch.setattr(engine_base, "READ_AHEAD_STEP", 512)  # one batch of seconds
    engine = LlamaEngine(gguf_path(), threads=2)
    try:
        context = engine.encode(CHAT.format(PROMPT), parse_special=True)
        assert engine.prepare(context)["prepared"] is True
        rows = " ".join(f"Row {n}: the tide at {n % 12} o'clock was {n % 7} feet." for n in range(40))
        draft = context + engine.encode(rows)
        assert len(draft) - len(context) > 400
        result: dict = {}
        thread = threading.Thread(target=lambda: result.update(engine.prepare(draft)))
        thread.start()
        deadline = time.monotonic() + 30
        while not isinstance(engine._running, engine_base.Preparation) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # inside its one batch
        answer = engine.generate(context, max_length=2, temperature=0)
        records = list(answer)
        thread.join(60)
        assert result["prepared"] is False
        assert engine.kv.stopped_batches == 1, "the batch was stopped part way, not run to its end"
        assert records[-1].kv["reused"] == len(context) - 1 and records[-1].kv["appended"] == 0
        # llama.cpp dropped the stopped batch's cells: the sequence ends with the answer.
        assert engine.L.llama_memory_seq_pos_max(engine.kv.mem, 0) == len(engine.kv.ids) - 1

        # Enter on the draft itself: the batch under way is the answer's work too, so it
        # runs to its end and the answer reads only what is left after it.
        thread = threading.Thread(target=lambda: result.update(engine.prepare(draft)))
        thread.start()
        while not isinstance(engine._running, engine_base.Preparation) and time.monotonic() < deadline + 30:
            time.sleep(0.01)
        time.sleep(0.3)
        records = list(engine.generate(draft + engine.encode(" Which row?"), max_length=2, temperature=0))
        thread.join(60)
        assert engine.kv.stopped_batches == 1, "not stopped: the answer needed what it ran"
        assert records[-1].kv["reused"] >= len(context) + 400, "the read-ahead's batch was kept for the answer"
    finally:
        engine.close()


def test_a_draft_waiting_for_the_model_gives_way_to_a_waiting_answer():
    """Enter came while a newer draft waited for the model: whichever of the two takes it
    first, the draft is not read (the answer's prompt replaces it) and the answer does
    not wait for it."""
    from halo_weave.server import engine_base
    from halo_weave.server.llamacpp.engine import LlamaEngine

    engine = LlamaEngine(gguf_path(), threads=2)
    try:
        context = engine.encode(CHAT.format(PROMPT), parse_special=True)
        engine.prepare(context)
        draft = context + engine.encode(" ".join(f"Row {n}: the tide was {n % 7} feet." for n in range(40)))
        engine._lock.acquire()  # as a read-ahead holding the model would
        results: dict = {}
        ahead = threading.Thread(target=lambda: results.update(ahead=engine.prepare(draft)))
        ahead.start()
        time.sleep(0.2)  # the draft polls for the model
        answer = threading.Thread(target=lambda: results.update(
            answer=list(engine.generate(context, max_length=2, temperature=0, wait_s=30))))
        answer.start()
        while not engine._answers:
            time.sleep(0.005)
        time.sleep(0.1)  # both wait
        engine._lock.release()
        answer.join(60)
        ahead.join(60)
        assert results["ahead"]["prepared"] is False, "the draft gave way to the answer"
        assert results["answer"][-1].kv["appended"] == 0, "the answer found the context, not the draft, in the cache"
        assert engine_base.PREPARE_POLL_S < 1
    finally:
        engine.close()
