"""A llama.cpp KV cache that starts small grows when a request needs more, and says so."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from test_engines import CHAT, conversation, first_token, kl, next_token_distribution, question

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def small():
    from halo_weave.server.engine_choice import load_engine

    engine = load_engine("llamacpp", threads=1, initial_context=256)
    yield engine
    engine.close()


def test_a_request_larger_than_the_cache_grows_it_and_is_answered_as_before(small):
    assert small.n_cells == 256 and small.context_size == small.describe()["max_trained_context"]
    ids, spans = conversation(small, 8)
    assert len(ids) > 256
    head = ids[:spans[1][1]] + question(small, "Who is Ana?")
    assert len(head) + 1 <= 256
    _, done = first_token(small, head)
    assert done.kv["grown_to"] == 0 and small.n_cells == 256

    wanted = ids + question(small)
    record, done = first_token(small, wanted)
    # One new context, big enough; the live tokens' states copied into it, none re-run.
    assert done.kv["grown_to"] == small.n_cells >= len(wanted) + 1
    assert done.kv["carried"] == len(head) and done.kv["regrown"] == 0 and done.kv["grow_s"] > 0
    assert done.processed_prompt_tokens == done.kv["appended"] + 1
    assert record.attention.shape == (len(wanted),)
    assert abs(float(record.attention.sum()) - 1.0) < 1e-4

    # The same answer and attention as a cache that never grew (re-run from nothing):
    # the copied states sit where the readout looks for them.
    grown = next_token_distribution(small, wanted)
    small.kv.reset()
    exact = next_token_distribution(small, wanted)
    assert kl(exact, grown) < 1e-3 and exact.argmax() == grown.argmax()
    small.kv.reset()
    exact_record, _ = first_token(small, wanted)
    assert np.corrcoef(record.attention, exact_record.attention)[0, 1] > 0.999

    # Surgery still works in the grown cache, and it does not grow again.
    first_token(small, wanted)
    a, b = spans[2]
    record, done = first_token(small, ids[:a] + ids[b:] + question(small))
    assert done.kv["mode"] == "surgery" and done.kv["spans_removed"] == 1
    assert done.kv["grown_to"] == 0 and done.kv["carried"] == done.kv["regrown"] == 0


def test_a_cache_left_with_a_shift_pending_is_copied_when_it_grows_not_run_again(small):
    # A read-ahead that only took a span out leaves llama.cpp a position shift to apply at
    # its next run; the request after it, too big for the cache, still carries the live
    # context over instead of running it all again (seconds on a long chat).
    ids, spans = conversation(small, 8)
    first_token(small, ids + question(small))
    a, b = spans[2]
    pruned = ids[:a] + ids[b:]
    small.prepare(pruned)
    turns = 9
    while True:
        longer, _ = conversation(small, turns)
        wanted = pruned + longer[len(ids):] + question(small)
        if len(wanted) + 1 > small.n_cells:
            break
        turns += 1
    _, done = first_token(small, wanted)
    assert done.kv["grown_to"] > 0
    assert done.kv["carried"] == len(pruned) and done.kv["regrown"] == 0, done.kv


def test_the_server_starts_small_grows_on_demand_and_still_offers_the_whole_window(tmp_path):
    from halo_weave.server.launcher import start_server

    server = start_server(port=0, extra_args=["--threads", "1", "--initial-context", "256"])
    try:
        url = server.wait_ready(timeout=300)
        assert any("256 cells to start" in line for line in server.log)
        with httpx.Client(base_url=url, timeout=300) as http:
            info = http.get("/api/v1/model").json()
            assert info["max_context_length"] == info["max_trained_context"]
            text = "".join(CHAT.format("user", f"Note {n}: the blue door opens at {n} o'clock.") for n in range(30))
            ids = http.post("/api/v1/tokenize", json={"text": text}).json()["token_ids"]
            assert len(ids) > 256
            with http.stream("POST", "/api/extra/generate/stream",
                             json={"input_ids": ids, "max_length": 4, "output_attentions": True}) as response:
                assert response.status_code == 200
                events = [json.loads(line[len("data: "):]) for line in response.iter_lines()
                          if line.startswith("data: ")]
        done = events[-1]
        assert done["type"] == "done" and done["total_tokens"] >= 1
        assert done["kv"]["grown_to"] >= len(ids) + 4
        tokens = [e for e in events if e.get("type") == "token"]
        assert tokens[0]["attention"]["context_length"] == len(ids)
        assert any("KV cache grown to" in line for line in server.log)
    finally:
        server.stop()


def test_a_nonsense_initial_context_is_refused_with_a_clear_message():
    from halo_weave.server.launcher import start_server

    server = start_server(port=0, extra_args=["--threads", "1", "--initial-context", "0"])
    with pytest.raises(Exception) as caught:
        server.wait_ready(timeout=300)
    assert server.process.returncode == 2
    assert "initial context must be a positive number of tokens" in str(caught.value)


def test_the_app_sizes_its_server_cache_from_the_budget():
    from halo_weave.settings import Settings

    args = Settings().server_args()
    assert args[0] == "--initial-context"
    cells = int(args[1])
    s = Settings()
    assert cells % 256 == 0 and s.pruning.max_context_tokens + s.sampling.max_new_tokens <= cells < 8192
    assert "--initial-context" not in Settings.of(max_context_tokens=0).server_args()
    # The saved caches' bound on disk follows the setting (2 GiB unless changed).
    assert args[-2:] == ["--kv-disk-mb", "2048"]
    assert Settings.of(saved_caches_mb=0).server_args()[-2:] == ["--kv-disk-mb", "0"]
    # The bundled default unless another model is chosen (halo-weave --model).
    assert "--model" not in args
    assert Settings.of(server_model="smollm2").server_args()[:2] == ["--model", "smollm2"]
