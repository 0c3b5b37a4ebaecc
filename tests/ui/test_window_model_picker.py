"""The model picker: on a server with several models the window lists them, the answer
comes from the one picked, and each conversation keeps its own; the window says which
chat template frames the turns and where it came from."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from halo_weave.backends.local_tokenizer import shared
from halo_weave.ui.settings_dialog import SettingsDialog

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
    qtbot.waitUntil(lambda: getattr(app.controller.session.backend, "model_id", None) == name, timeout=20_000)
    qtbot.waitUntil(lambda: not app.controller.gate.input_block_reason(), timeout=20_000)


def test_pick_a_model_per_conversation(qtbot, tmp_path, monkeypatch, swap):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    app = App(qtbot, tmp_path, small_budget(swap.url, proxy_attention=False)).start()
    bar = app.window.stats_bar
    picker = bar.model_picker
    assert picker.isVisible()
    assert [picker.itemText(i) for i in range(picker.count())] == list(LlamaSwapReplay.served)
    assert picker.currentText() == "qwen2.5-coder-1.5b"
    assert bar.connection_label.toolTip().startswith("OpenAI-compatible · no attention · 2048 ctx (assumed) · text mode")
    assert "3 models" in bar.connection_label.toolTip() and "qwen2.5-coder-1.5b" not in bar.connection_label.text()
    assert "Template: ChatML (built-in fallback: this OpenAI-compatible server publishes no template)" in (
        bar.connection_label.toolTip())

    assert app.say("Who are you?") == "stop"
    assert _last_answer(app) == "I am qwen2.5-coder-1.5b."
    first = app.controller.files.path

    _pick(app, qtbot, "llama-3.2-3b")
    assert app.say("And now?") == "stop"
    assert _last_answer(app) == "I am llama-3.2-3b."
    assert swap.bodies("/v1/completions")[-1]["model"] == "llama-3.2-3b"
    assert app.controller.session.store.get_meta("model") == "llama-3.2-3b"

    # A new conversation starts with the last model picked; it gets its own choice.
    app.window.new_conversation()
    qtbot.waitUntil(lambda: app.controller.files.path != first and not app.controller.gate.input_block_reason(), timeout=20_000)
    assert picker.currentText() == "llama-3.2-3b"
    _pick(app, qtbot, "phi-3-mini")
    assert app.say("Hello?") == "stop"
    assert _last_answer(app) == "I am phi-3-mini."

    # Back to the first conversation: its model again.
    assert app.controller.files.open_conversation(first)
    qtbot.waitUntil(lambda: getattr(app.controller.session.backend, "model_id", None) == "llama-3.2-3b", timeout=20_000)
    qtbot.waitUntil(lambda: picker.currentText() == "llama-3.2-3b", timeout=20_000)
    qtbot.waitUntil(lambda: not app.controller.gate.input_block_reason(), timeout=20_000)
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
        assert app.controller.session.server.template.prefix_for("assistant") == "<|im_start|>assistant\n"

        # Settings → Server says the same, and previews the template in use.
        dialog = SettingsDialog(app.controller.settings, app.window, keyring=False)
        qtbot.addWidget(dialog)
        dialog.server_fields.show_in_use(app.controller.session.backend.template_in_use)
        assert dialog.server_fields.in_use_label.text() == "ChatML (from llama-server /props)"
        assert dialog.server_fields.preview.toPlainText().startswith("<|im_start|>system\n")
        app.close()
    finally:
        server.close()


PHI3_LIKE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}")


class PhiLlamaServer(LlamaReplay):
    """llama-server with a model whose template is none of the built-in ones."""

    def get(self, handler) -> None:
        if handler.path == "/props":
            self.send_json(handler, {"default_generation_settings": {"n_ctx": self.n_ctx}, "total_slots": 1,
                                     "model_path": "/models/Phi-3-mini-4k-instruct-q4.gguf",
                                     "chat_template": PHI3_LIKE, "eos_token": "<|endoftext|>",
                                     "build_info": "b4000-replay"})
        else:
            super().get(handler)


def test_the_prompt_is_framed_by_the_models_own_template(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    server = PhiLlamaServer(shared())
    try:
        app = App(qtbot, tmp_path, small_budget(server.url, proxy_attention=False,
                                                system_prompt="Answer briefly.")).start()
        assert "Template: The model's own (from llama-server /props)" in (
            app.window.stats_bar.connection_label.toolTip())
        assert app.say("Name a fruit.") in ("stop", "length")
        body = server.bodies("/completion")[-1]
        prompt = shared().detokenize(body["prompt"])
        assert prompt == ("<|system|>\nAnswer briefly.<|end|>\n<|user|>\nName a fruit.<|end|>\n<|assistant|>\n"), prompt
        assert "<|end|>" in body["stop"]
        app.close()
    finally:
        server.close()


class HostileLlamaServer(LlamaReplay):
    """llama-server whose published template reaches for Python internals."""

    def get(self, handler) -> None:
        if handler.path == "/props":
            self.send_json(handler, {"default_generation_settings": {"n_ctx": self.n_ctx}, "total_slots": 1,
                                     "model_path": "/models/odd.gguf", "build_info": "b4000-replay",
                                     "chat_template": "{{ messages.__class__.__mro__[1].__subclasses__() }}"
                                                      "<|im_start|>{{ messages[0]['content'] }}"})
        else:
            super().get(handler)


def test_a_hostile_template_is_explained_once_and_chatml_frames_instead(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    server = HostileLlamaServer(shared())
    try:
        app = App(qtbot, tmp_path, small_budget(server.url, proxy_attention=False)).start()
        said = [m.text for m in app.window.messages.history if "chat template" in m.text]
        assert len(said) == 1 and "sandbox refused" in said[0] and "built-in ChatML template instead" in said[0]
        assert "Template: ChatML (built-in fallback)" in app.window.stats_bar.connection_label.toolTip()
        assert app.controller.session.server.template.prefix_for("user") == "<|im_start|>user\n"
        app.controller.link.connect_server()  # a reconnect does not say it again
        qtbot.waitUntil(lambda: app.controller.link.state == "connected"
                        and not app.controller.gate.input_block_reason(), timeout=20_000)
        assert len([m for m in app.window.messages.history if "chat template" in m.text]) == 1
        assert app.say("Hello") in ("stop", "length")
        app.close()
    finally:
        server.close()
