"""Tail first: a resurrection with a new message runs the message before the spans come back."""

from __future__ import annotations

import pytest
from test_engines import conversation, first_token, kl, next_token_distribution, question

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
    from halo_weave.server.engines import load_engine

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
    llama.kv.tail_first = tail_first
    try:
        first_token(llama, ids)
        first_token(llama, ids[:a] + ids[b:])  # prune: the turn's states are stored
        request = ids[:c] + ids[d:] + msg
        record, done = first_token(llama, request)
    finally:
        llama.kv.tail_first = True
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
    from halo_weave.server.engines import load_engine

    engine = load_engine("transformers", threads=1)
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
    llama.kv.mode = "exact"
    try:
        first_token(llama, ids[:a] + ids[b:])
        _, done = first_token(llama, ids + msg)
    finally:
        llama.kv.mode = "surgery"
    assert done.kv["mode"] == "exact" and done.kv["tail_first"] == 0
    assert done.processed_prompt_tokens == len(ids) + len(msg) - done.kv["reused"]
