"""Tail first: a resurrection with a new message runs the message before the spans come back."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from halo_weave.server.kv_surgery import TAIL_FIRST_MIN_PAIRS
from test_engines import CHAT, PARAGRAPHS, conversation, first_token, kl, next_token_distribution, question

pytestmark = pytest.mark.slow

MESSAGE = ("Tell me more about her bakery: the dog under the counter, what the critic wrote, "
           "and whether the second shop is a good idea.")
#: What a user sees of a request's accounting (the done event), tail first or not.
SEEN = ("prompt_tokens", "processed_prompt_tokens", "reused_prefix_tokens")
SEEN_KV = ("mode", "reused", "dropped", "inserted", "restored", "stored", "appended", "rerun",
           "spans_removed", "spans_inserted")


@pytest.fixture
def any_size(monkeypatch):
    """Tail first however few tokens come back (the chats here are short)."""
    from halo_weave.server import kv_surgery

    monkeypatch.setattr(kv_surgery, "TAIL_FIRST_MIN_PAIRS", 0)


@pytest.fixture(scope="module")
def llama():
    from halo_weave.server.engine_choice import load_engine

    engine = load_engine("llamacpp", threads=1)
    yield engine
    engine.close()


def follow_up(llama, tail_first: bool):
    """Answer a chat, prune turn 1, then send turn 1 back with turn 4 pruned and a new
    message: ``(request ids, first record, done record, len(message))``."""
    ids, spans = conversation(llama)
    (a, b), (c, d) = spans[1], spans[4]
    msg = question(llama, MESSAGE)
    llama.kv.reset()
    llama.kv.store.clear()
    saved, llama.kv.tail_first = llama.kv.tail_first, tail_first
    try:
        first_token(llama, ids)
        first_token(llama, ids[:a] + ids[b:])  # prune: the turn's states are stored
        request = ids[:c] + ids[d:] + msg
        record, done = first_token(llama, request)
    finally:
        llama.kv.tail_first = saved
    return request, record, done, (a, b, c, d, len(msg))


def test_a_resurrection_with_a_new_message_is_answered_as_before_and_close_to_exact(llama, any_size):
    _, _, before, _ = follow_up(llama, tail_first=False)
    request, record, done, (a, b, c, d, n_msg) = follow_up(llama, tail_first=True)
    # The message (all but its last token, which the first sample runs) ran first, the
    # turn came back from the store, turn 4 was pruned: the same counts as one pass.
    assert done.kv["tail_first"] == n_msg - 1 and before.kv["tail_first"] == 0
    assert done.kv["appended"] == n_msg - 1 and done.kv["restored"] == b - a
    assert done.kv["inserted"] == 0 and done.kv["rerun"] == 0 and done.kv["dropped"] == d - c
    assert done.processed_prompt_tokens == n_msg
    assert {k: getattr(done, k) for k in SEEN} == {k: getattr(before, k) for k in SEEN}
    assert {k: done.kv[k] for k in SEEN_KV} == {k: before.kv[k] for k in SEEN_KV}
    # The first answer token still attends to the turn that came back.
    assert record.attention.shape == (len(request),) and record.attention[a:b].sum() > 0
    surgery = next_token_distribution(llama, request)
    llama.kv.reset()
    exact = next_token_distribution(llama, request)
    exact_record, _ = first_token(llama, request)
    assert exact.argmax() == surgery.argmax() and kl(exact, surgery) < 0.05
    assert exact_record.token_id == record.token_id


def test_the_transformers_engine_runs_the_tail_first_as_well(any_size):
    from halo_weave.server.engine_choice import load_engine

    engine = load_engine("transformers", "smollm2", threads=1)  # not the default's 0.5B, dequantized
    request, _, done, (a, b, c, d, n_msg) = follow_up(engine, tail_first=True)
    assert done.kv["tail_first"] == n_msg - 1 and done.kv["restored"] == b - a
    assert done.kv["dropped"] == d - c and done.processed_prompt_tokens == n_msg
    surgery = next_token_distribution(engine, request)
    engine.kv.reset()
    exact = next_token_distribution(engine, request)
    assert exact.argmax() == surgery.argmax() and kl(exact, surgery) < 0.05


def test_exact_mode_never_runs_the_tail_first(llama, any_size):
    ids, spans = conversation(llama)
    a, b = spans[1]
    msg = question(llama, MESSAGE)
    llama.kv.reset()
    llama.kv.mode, llama.kv.tail_first = "exact", True
    try:
        first_token(llama, ids[:a] + ids[b:])
        _, done = first_token(llama, ids + msg)
    finally:
        llama.kv.mode, llama.kv.tail_first = "surgery", False
    assert done.kv["mode"] == "exact" and done.kv["tail_first"] == 0
    assert done.processed_prompt_tokens == len(ids) + len(msg) - done.kv["reused"]


@pytest.fixture(scope="module")
def tail_first_server():
    """The real server with ``--kv-tail-first`` (off by default)."""
    from conftest import SERVER_START_TIMEOUT_S, TEST_CACHE_DIR

    from halo_weave.server.launcher import start_server

    process = start_server(port=0, extra_args=["--kv-tail-first"], env={"HALO_WEAVE_CACHE": str(TEST_CACHE_DIR)})
    try:
        process.wait_ready(timeout=SERVER_START_TIMEOUT_S)
        yield process
    finally:
        process.stop()


def test_the_server_runs_a_new_message_first_and_answers_as_an_exact_re_prefill(tail_first_server):
    server = tail_first_server
    def stream(http, ids):
        with http.stream("POST", "/api/extra/generate/stream",
                         json={"input_ids": ids, "max_length": 1, "temperature": 0,
                               "output_attentions": True}) as response:
            lines = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
        return lines[0], lines[-1]

    with httpx.Client(base_url=server.url, timeout=120) as http:
        assert http.get("/api/v1/model").json()["kv_tail_first"] is True

        def ids_of(text):
            return http.post("/api/v1/tokenize", json={"text": text, "parse_special": True}).json()["token_ids"]

        # Enough comes back under the message for tail first to pay (TAIL_FIRST_MIN_PAIRS).
        turns = [ids_of(CHAT.format("user" if n % 2 == 0 else "assistant", p * repeat))
                 for n, (p, repeat) in enumerate((("Ana moved to Lisbon and opened a bakery by the river.", 2),
                                                  (" ".join(PARAGRAPHS), 6),
                                                  ("A critic praised her almond cake last week.", 2),
                                                  ("She wants a second shop but needs good bakers.", 2)))]
        head = ids_of(CHAT.format("system", "You are a friendly assistant."))
        msg = ids_of(CHAT.format("user", MESSAGE + " " + MESSAGE) + "<|im_start|>assistant\n")
        assert len(msg) * len(turns[1]) >= TAIL_FIRST_MIN_PAIRS
        ids = head + sum(turns, [])
        pruned = head + turns[0] + sum(turns[2:], [])
        stream(http, ids)
        stream(http, pruned)  # turn 1 pruned: stored
        token, done = stream(http, ids + msg)  # back, with a new message
        assert done["kv"]["tail_first"] == len(msg) - 1 and done["kv"]["restored"] == len(turns[1])
        assert done["processed_prompt_tokens"] == len(msg) and done["kv"]["rerun"] == 0
        stream(http, ids_of("Something else entirely, to empty the cache. " * 4))
        exact_token, exact_done = stream(http, ids + msg)
        assert exact_done["kv"]["tail_first"] == 0 and exact_done["kv"]["restored"] == 0
    assert token["token"]["token_id"] == exact_token["token"]["token_id"]
