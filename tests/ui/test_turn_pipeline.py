"""The window's turn and the benchmarks' turn are one pipeline: the same messages, sent
through the real window (Enter, its threads and signals) and through the benchmarks'
blocking driver (``session.pipeline.send`` / ``answer``, as bench/chat.py runs it), leave
the same live context, recall the same chunks and prune the same chunks, turn by turn.
The real server and bundled model (greedy), the real MiniLM, real SQLite files.
"""

from __future__ import annotations

import pytest

from bench.chat_facts import open_session
from server_steps import CAT
from test_app import LONG_MESSAGE, make_app  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow

#: A fact, two long messages that push it out of the 150-token budget, a question that
#: brings it back.
MESSAGES = [CAT, LONG_MESSAGE, LONG_MESSAGE, "What is the name of my cat? Mochi?"]


def state(conv) -> dict:
    """What a user sees of a conversation: the live context's words, what each message
    recalled, and what is in the graveyard."""
    users = [t for t, turn in sorted(conv.turns.items()) if turn.role == "user"]
    return {
        "live": "".join(conv.chunk_text(c.id) for c in conv.live_chunks()),
        "live_ids": [int(i) for i in conv.live_input_ids()],
        "recalled": {t: list(conv.recalls.of(t)) for t in users},
        "graveyard": sorted(c.id for c in conv.graveyard()),
    }


def test_the_window_and_the_benchmark_drive_the_same_turn(make_app, server, tmp_path):
    app = make_app(max_new_tokens=10, max_context_tokens=150, min_chunk_tokens=16).start()
    session, index, store = open_session(server.url, app.controller.settings, tmp_path / "bench")
    try:
        for n, text in enumerate(MESSAGES):
            assert app.say(text) in ("stop", "length")
            app.settle()  # the window indexes on a thread; the benchmark in place
            message = session.pipeline.send(text, index.search)
            session.pipeline.answer()
            window, bench = state(app.conv), state(session.conv)
            assert window["live"] == bench["live"], f"message {n + 1}: the same live context"
            assert window["live_ids"] == bench["live_ids"]
            assert window["recalled"] == bench["recalled"], f"message {n + 1}: the same recall"
            assert window["graveyard"] == bench["graveyard"], f"message {n + 1}: the same prune"
            assert [c.id for c in message.recalled] == list(app.conv.recalls.of(message.turn.turn_id))
    finally:
        store.close()
    # The case is one a user would notice: older context was pruned, and the question
    # brought some of it back.
    assert bench["graveyard"], "the budget pruned"
    assert bench["recalled"][max(bench["recalled"])], "the question recalled what was pruned"
