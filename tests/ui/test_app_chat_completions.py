"""The window with a chat-completions server: llama-cpp-python's real
``/v1/chat/completions`` (the bundled GGUF, behind an API key in the keyring), chosen in
Settings → Server → API; and a chat-only server on loopback that fails mid-conversation."""

from __future__ import annotations

import pytest

from halo_weave.backends import api_keys

from chat_only_server import ChatOnlyServer
from llama_cpp_server import LlamaCppServer
from server_steps import CAT, small_budget, stop_mid_answer, text_of
from test_app import App

pytestmark = pytest.mark.slow

API_KEY = "sk-halo-weave-chat"
#: How long an answer may take here: the first one waits for the embedder to load, and
#: the tests share two cores with other work.
ANSWER_TIMEOUT_MS = 400_000


def say(app: App, text: str) -> str:
    """Type ``text``, press Enter, wait for the answer; the finish reason."""
    from PySide6.QtCore import Qt

    app.window.input.setPlainText(text)
    with app.qtbot.wait_signal(app.controller.signals.turn_finished, timeout=ANSWER_TIMEOUT_MS) as blocker:
        app.qtbot.keyClick(app.window.input, Qt.Key.Key_Return)
    app.qtbot.waitUntil(lambda: not app.controller.gate.busy, timeout=10_000)
    return blocker.args[0]


@pytest.fixture(scope="module")
def llama_cpp():
    server = LlamaCppServer(api_key=API_KEY)
    yield server
    server.stop()


def test_chat_completions_in_the_window_answer_streams_and_stop_keeps_it(qtbot, tmp_path, monkeypatch, llama_cpp):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    api_keys.forget_session()
    api_keys.set_key(llama_cpp.url, API_KEY, data_dir=tmp_path)
    app = App(qtbot, tmp_path, small_budget(llama_cpp.url, server_api="chat", proxy_attention=False)).start()
    c, window = app.controller, app.window
    detail = window.stats_bar.connection_label.toolTip()
    assert "OpenAI-compatible (chat) · no attention · 2048 ctx (assumed) · text mode" in detail, detail
    assert c.session.backend.kind == "openai-chat"
    assert "the server frames the messages with its model's own" in detail, "the framing shown is not what is sent"

    # The answer streams into the heatmap, token by token.
    streamed = []
    c.signals.tokens_streamed.connect(lambda: streamed.append(c.session.answer.streamed))
    assert say(app, CAT) in ("stop", "length")
    conv = app.conv
    user, answer = sorted(conv.turns)[-2:]
    assert "Mochi" in text_of(conv, user) and text_of(conv, answer).strip(), "the model answered"
    assert len(set(streamed)) > 1, "the answer arrived in pieces, not at once"
    assert text_of(conv, answer).strip()[:15] in window.heatmap.toPlainText()

    # Stop: Esc mid-answer keeps what arrived; the next message is answered again.
    partial = stop_mid_answer(app, qtbot, after=4)
    assert partial.strip()
    c.apply_settings(c.settings.replace(max_new_tokens=8))
    assert say(app, "Thanks!") in ("stop", "length")
    assert text_of(app.conv, max(app.conv.turns)).strip(), "answered after the Stop"

    # Back to completions in Settings: the same server, spoken to the other way.
    c.apply_settings(c.settings.replace(server_api="completions"))
    qtbot.waitUntil(lambda: c.link.state == "connected" and c.session.backend is not None
                    and c.session.backend.kind == "openai" and not c.gate.input_block_reason(), timeout=30_000)
    app.close()


def test_a_chat_only_server_that_fails_says_so_and_the_message_stays(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    server = ChatOnlyServer()
    try:
        app = App(qtbot, tmp_path, small_budget(server.url, proxy_attention=False)).start()
        c, window = app.controller, app.window
        assert c.session.backend.kind == "openai-chat", "found by itself: the server has no /v1/completions"
        assert "token counts estimated" in window.stats_bar.connection_label.toolTip()
        assert say(app, CAT) == "stop" and "Hello there." in window.heatmap.toPlainText()

        server.respond(b'{"error": {"message": "model overloaded"}}', status=500, content_type="application/json")
        assert say(app, "And what does she eat?") == "error"
        assert any("model overloaded" in m.text for m in window.messages.history if m.serious)
        conv = app.conv
        asked = [t for t in sorted(conv.turns) if "what does she eat" in text_of(conv, t)]
        assert asked, "the message is kept in the conversation"
        assert "Mochi" in text_of(conv, sorted(conv.turns)[0]) and "Hello there." in window.heatmap.toPlainText()

        server.respond(b"data: {\"choices\": [{\"delta\": {\"content\": \"Fine\"}}]}\n\ndata: nonsense\n\n")
        assert say(app, "Hello?") == "error"
        assert any("not JSON" in m.text for m in window.messages.history if m.serious)
        app.close()
    finally:
        server.close()
