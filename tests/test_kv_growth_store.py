"""A span pruned by the request that grows the llama.cpp cache is still kept for resurrection.

Its own module: two llama.cpp engines alive in one process (this one beside
test_kv_growth's module engine) crashed at the second one's ``llama_free``.
"""

from __future__ import annotations

import pytest

from test_engines import conversation, first_token, question

pytestmark = pytest.mark.slow


def test_a_span_pruned_by_the_request_that_grows_the_cache_still_comes_back_without_a_run():
    # The request that grows the cache also prunes a paragraph: its states are kept
    # (the new context has run nothing yet), and resurrecting it runs nothing.
    from halo_weave.server.engine_choice import load_engine

    engine = load_engine("llamacpp", threads=1, initial_context=256)
    try:
        ids, spans = conversation(engine)
        a, b = spans[1]
        head = ids[:spans[3][1]]
        q = question(engine)
        more = question(engine, "Tell me everything about the bakery and the dog. " * 12)
        first_token(engine, head + q)
        assert len(head + q) < 256 < len(head + more + q) - (b - a)
        _, done = first_token(engine, head[:a] + head[b:] + more + q)
        assert done.kv["grown_to"] > 256 and done.kv["carried"] > 0
        assert done.kv["spans_removed"] == 1 and done.kv["stored"] == b - a
        _, done = first_token(engine, head + more + q)
        assert done.kv["restored"] == b - a and done.kv["inserted"] == 0
        assert done.processed_prompt_tokens == 1
    finally:
        engine.close()
