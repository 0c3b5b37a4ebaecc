"""The llama.cpp cache packs itself after an answer once prunes have spread it out.

Its own module: two llama.cpp engines alive in one process crashed at the second one's
``llama_free`` (see test_kv_growth_store.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from test_engines import CHAT, PARAGRAPHS, first_token, question

pytestmark = pytest.mark.slow


def _conversation(engine, turns: int):
    """Ids of a chat whose turns all differ (numbered), and each turn's span."""
    ids = [i for i, _ in engine.tokenize(CHAT.format("system", "You are a friendly assistant."), parse_special=True)]
    spans = []
    for n in range(turns):
        role = "user" if n % 2 == 0 else "assistant"
        text = f"Note {n + 1}. " + " ".join(PARAGRAPHS[(n + k) % len(PARAGRAPHS)] for k in range(2))
        turn = [i for i, _ in engine.tokenize(CHAT.format(role, text), parse_special=True)]
        spans.append((len(ids), len(ids) + len(turn)))
        ids += turn
    return ids, spans


def _chat(engine, compact: bool):
    """Three requests of a chat: the whole history, the history with three turns pruned
    (the cache now spread over holes), a follow-up; then the pruned turns resurrected.
    Returns the first-token records, the done events and the cache's spread after each."""
    from halo_weave.server.span_store import ANY_CONTEXT

    engine.kv.reset()
    engine.kv.store.clear()
    # Its turns repeat the same paragraphs, so the prune lines up as a cut plus a
    # replacement, and kept states meet other tokens before them than they were kept
    # with: put back wherever their tokens match, packing alone is what differs here.
    engine.kv.store.restore = ANY_CONTEXT
    engine.kv.growth.compact_min_cells = 512 if compact else 10**9
    ids, spans = _conversation(engine, turns=32)
    q, q2 = question(engine), question(engine, "And what did the dog do?")
    start, end = spans[1][0], spans[20][1]
    pruned = ids[:start] + ids[end:]
    out = []
    for prompt in (ids + q, pruned + q, pruned + q + q2, ids + q + q2):
        record, done = first_token(engine, prompt)
        out.append((record, done, engine.kv.spread()))
    return out, end - start


def test_a_spread_cache_is_packed_after_the_answer_and_answers_as_before():
    from halo_weave.server.engine_choice import load_engine

    engine = load_engine("llamacpp", threads=1)
    try:
        spread, removed = _chat(engine, compact=False)
        packed, _ = _chat(engine, compact=True)
    finally:
        engine.close()
    assert removed >= 768  # enough holes to be worth packing
    # Without packing, the prune leaves the live context spread over the old cells.
    assert spread[1][2] >= 512
    # Packed after the answer: the next request attends over the live context only.
    assert packed[1][2] == 0 and packed[2][2] == 0
    for (a, done_a, _), (b, done_b, _) in zip(spread, packed):
        # The same answer and the same attention heatmap, packed or not: packing only
        # reorders ggml's fp16 sums over cells (seen: 5e-4 at most, where the prune's own
        # approximation against a full re-prefill is 2e-2).
        assert a.token_id == b.token_id
        np.testing.assert_allclose(a.attention, b.attention, atol=2e-3)
        assert done_a.kv.get("rerun", 0) == done_b.kv.get("rerun", 0) == 0
    # The pruned turns still come back from the kept states after packing: nothing re-run.
    last = packed[3][1].kv
    assert last["restored"] >= removed
    assert (last["restored"], last["inserted"]) == (spread[3][1].kv["restored"], spread[3][1].kv["inserted"])
