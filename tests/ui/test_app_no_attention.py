"""A server that sends no attention (like stock KoboldCPP): the window says so, chatting
works, and pruning falls back to oldest-first.

Runs the reference server with ``--no-attention``: ``/api/v1/model`` declares no
attention, and the stream is KoboldCPP's text chunks (no token ids, no attention).
"""

from __future__ import annotations

import pytest

from conftest import SERVER_START_TIMEOUT_S
from halo_weave.server.launcher import start_server
from halo_weave.settings import MAX_BRIGHTNESS, Settings
from halo_weave.ui.stats_bar import NO_ATTENTION_TEXT
from test_app import LONG_MESSAGE, SHORT_SYSTEM_PROMPT, App

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plain_server():
    """The reference server behaving like stock KoboldCPP (cached model: starts in seconds)."""
    process = start_server(port=0, extra_args=["--no-attention"])
    try:
        process.wait_ready(timeout=SERVER_START_TIMEOUT_S)
        yield process
    finally:
        process.stop()


@pytest.fixture
def app(qtbot, tmp_path, monkeypatch, plain_server):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    settings = Settings.of(server_url=plain_server.url, autostart_server=False, temperature=0.0,
                        max_new_tokens=12, max_context_tokens=90, min_chunk_tokens=16,
                        system_prompt=SHORT_SYSTEM_PROMPT)
    app = App(qtbot, tmp_path, settings)
    yield app.start()
    if not app.controller.gate.closing:
        app.window.close()


def test_no_attention_is_explained_chat_works_and_oldest_chunks_are_pruned(app, qtbot):
    controller, window = app.controller, app.window
    assert not controller.session.model_info.supports_attention

    assert app.say(LONG_MESSAGE) in ("stop", "length")

    conv = app.conv
    user, answer = sorted(conv.turns)[-2:]
    answer_text = "".join(conv.chunk_text(c.id) for c in conv.content_chunks(answer))
    assert answer_text.strip(), "the model answered"
    assert not controller.session.attention_available
    assert window.stats_bar.attention_label.isVisible()
    assert window.stats_bar.attention_label.text() == NO_ATTENTION_TEXT
    assert any("no attention" in m.text for m in window.messages.history)
    # Without attention nothing moves brightness.
    assert (conv.table.brightness[~conv.table.framing] == MAX_BRIGHTNESS).all()

    # The exchange just read is never pruned automatically; the next message makes it old.
    assert app.say("Thanks! One more word?") in ("stop", "length"), "chatting goes on"
    pruned = conv.graveyard()
    assert pruned, "the small max context pruned something"
    live = [c for c in conv.live_chunks() if not c.framing and not c.pinned and c.chunk_index != 0]
    first_prunable = min([c for c in pruned] + [c for c in live if c.turn_id < max(conv.turns) - 1], key=lambda c: c.start)
    assert first_prunable in pruned, "the oldest prunable chunk went first"
    assert all(d.start < c.start for d in pruned for c in live), "pruned oldest-first"
    assert window.graveyard.model().total_count() == len(pruned)


