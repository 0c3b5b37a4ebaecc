"""The model picker: on a server with several models the window lists them, the answer
comes from the one picked, and each conversation keeps its own; the window says which
chat template frames the turns and where it came from."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from halo_weave.backends.local_tokenizer import shared

from replay_servers import LlamaReplay, LlamaSwapReplay
from server_steps import small_budget
from test_app import App


@pytest.fixture
def swap():
    server = LlamaSwapReplay(shared())
    yield server
    server.close()


def _last_answer(app) -> str:
    conv = app.conv
    answer = sorted(conv.turns)[-1]
    return "".join(conv.chunk_text(c.id) for c in conv.content_chunks(answer))


def _pick(app, qtbot, name: str) -> None:
    """Choose ``name`` in the picker with the keyboard, as a user would, and wait for it."""
    picker = app.window.stats_bar.model_picker
    picker.setFocus()
    target = picker.findData(name)
    key = Qt.Key.Key_Down if target > picker.currentIndex() else Qt.Key.Key_Up
    while picker.currentIndex() != target:
        qtbot.keyClick(picker, key)
    qtbot.waitUntil(lambda: getattr(app.controller.client, "model_id", None) == name, timeout=20_000)
    qtbot.waitUntil(lambda: not app.controller.input_block_reason(), timeout=20_000)


def test_pick_a_model_per_conversation(qtbot, tmp_path, monkeypatch, swap):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    app = App(qtbot, tmp_path, small_budget(swap.url, proxy_attention=False)).start()
    bar = app.window.stats_bar
    picker = bar.model_picker
    assert picker.isVisible()
    assert [picker.itemText(i) for i in range(picker.count())] == list(LlamaSwapReplay.served)
    assert picker.currentText() == "qwen2.5-coder-1.5b"
    assert "qwen2.5-coder-1.5b" not in bar.connection_label.text(), "the picker names it, not the status too"
    assert "Template: ChatML (built-in fallback: this OpenAI-compatible server publishes no template)" in (
        bar.connection_label.toolTip())

    assert app.say("Who are you?") == "stop"
    assert _last_answer(app) == "I am qwen2.5-coder-1.5b."
    first = app.controller.path

    _pick(app, qtbot, "llama-3.2-3b")
    assert app.say("And now?") == "stop"
    assert _last_answer(app) == "I am llama-3.2-3b."
    assert swap.bodies("/v1/completions")[-1]["model"] == "llama-3.2-3b"
    assert app.controller.store.get_meta("model") == "llama-3.2-3b"

    # A new conversation starts with the last model picked; it gets its own choice.
    app.window.new_conversation()
    qtbot.waitUntil(lambda: app.controller.path != first and not app.controller.input_block_reason(), timeout=20_000)
    assert picker.currentText() == "llama-3.2-3b"
    _pick(app, qtbot, "phi-3-mini")
    assert app.say("Hello?") == "stop"
    assert _last_answer(app) == "I am phi-3-mini."

    # Back to the first conversation: its model again.
    assert app.controller.open_conversation(first)
    qtbot.waitUntil(lambda: getattr(app.controller.client, "model_id", None) == "llama-3.2-3b", timeout=20_000)
    qtbot.waitUntil(lambda: picker.currentText() == "llama-3.2-3b", timeout=20_000)
    qtbot.waitUntil(lambda: not app.controller.input_block_reason(), timeout=20_000)
    assert app.say("Still you?") == "stop"
    assert _last_answer(app) == "I am llama-3.2-3b."
    app.close()


def test_a_server_with_one_model_shows_no_picker_and_names_the_models_own_template(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    server = LlamaReplay(shared())
    try:
        app = App(qtbot, tmp_path, small_budget(server.url, proxy_attention=False)).start()
        bar = app.window.stats_bar
        assert not bar.model_picker.isVisible()
        assert "Template: ChatML (from llama-server /props)" in bar.connection_label.toolTip()
        assert app.controller.template.prefix_for("assistant") == "<|im_start|>assistant\n"
        app.close()
    finally:
        server.close()
