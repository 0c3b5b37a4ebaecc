"""The window with the servers people already run.

* llama-cpp-python's real OpenAI-compatible server (the bundled GGUF, behind an API key):
  chat, Stop, pruning, resurrection and export in text mode.
* Stock KoboldCPP 1.76 (replayed from its recordings) on the default URL: it is used,
  not replaced by the bundled server.
* A web server that is not a model server on the default URL: a sentence, no bundled server.
"""

from __future__ import annotations

import json

import pytest

from halo_weave.backends import api_keys
from halo_weave.settings import MAX_BRIGHTNESS, Settings
from halo_weave.ui.stats_bar import NO_ATTENTION_TEXT, NO_BRIGHTNESS_TEXT

from llama_cpp_server import LlamaCppServer
from replay_servers import KoboldReplay
from server_steps import (CAT, exported_text, prune_the_cat, small_budget, stop_mid_answer, text_of,
                          used_not_replaced, window_on_default_url)
from test_app import SHORT_SYSTEM_PROMPT, App
from test_backends import _NotAModelServer

pytestmark = pytest.mark.slow

API_KEY = "sk-halo-weave-test"


@pytest.fixture(scope="module")
def llama_cpp():
    server = LlamaCppServer(api_key=API_KEY)
    yield server
    server.stop()


def test_text_mode_through_llama_cpp_python_chat_stop_prune_resurrect_export(qtbot, tmp_path, monkeypatch, llama_cpp):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    api_keys.forget_session()
    api_keys.set_key(llama_cpp.url, API_KEY, data_dir=tmp_path)  # no keyring here: this session only
    settings = small_budget(llama_cpp.url, max_new_tokens=12,
                            proxy_attention=False)  # the plain no-attention path (the reader: below)
    app = App(qtbot, tmp_path, settings).start()
    c, window = app.controller, app.window
    detail = window.stats_bar.connection_label.toolTip()
    # The model's name first, then what the server is.
    assert detail.startswith("SmolLM2-135M-Instruct")
    assert "· OpenAI-compatible · no attention · 2048 ctx (assumed) · text mode" in detail.splitlines()[0], detail
    assert window.stats_bar.attention_label.isVisible()
    assert window.stats_bar.attention_label.text() == NO_ATTENTION_TEXT
    assert window.stats_bar.brightness_label.text() == NO_BRIGHTNESS_TEXT, "no 'Mean ☀ 10,000' claim"
    window.resize(1360, 860)  # a laptop's window: the warning is read whole, not cut to "no attention fr…"
    qtbot.wait(50)
    assert not window.stats_bar.attention_label.is_elided(), window.stats_bar.attention_label.displayed_text()

    # Chat: the answer streams in as text and lands in the table as the bundled tokenizer splits it.
    assert app.say(CAT) in ("stop", "length")
    conv = app.conv
    user, answer = sorted(conv.turns)[-2:]
    assert "Mochi" in text_of(conv, user) and text_of(conv, answer).strip(), "the model answered"
    assert text_of(conv, answer).strip()[:15] in window.heatmap.toPlainText()
    assert (conv.table.brightness[~conv.table.framing] == MAX_BRIGHTNESS).all(), "no attention moved brightness"

    # Prune: long messages push the oldest chunks (the cat) into the graveyard, oldest first.
    mochi = prune_the_cat(app)
    pruned = conv.graveyard()
    # Anchors (S0) leave only with their partner, so the oldest non-anchor chunks go first
    # (a resurrected chunk's age counts from its resurrection).
    live = [ch for ch in conv.live_chunks() if not ch.framing and ch.chunk_index != 0 and ch.resurrected_at is None]
    assert min(ch.start for ch in pruned) < min(ch.start for ch in live), "the oldest went first"

    # Resurrect: asking about the cat brings its chunk back from the semantic index.
    app.settle()
    seen_live = []
    c.signals.tokens_streamed.connect(lambda: seen_live.append(mochi[0].live) if not seen_live else None)
    assert app.say("What is the name of my cat? Mochi?") in ("stop", "length")
    assert c.session.recall.kept > 0 and seen_live == [True], "the pruned chunk was back while the model answered"
    # It survives the prune after the answer it was brought back for (its age counts from then).
    assert mochi[0].live, "the resurrected chunk was pruned again right after the answer"

    # Stop: Esc mid-answer keeps the partial answer (the stream is closed; the server stops).
    partial = stop_mid_answer(app, qtbot, after=4)

    # Export: the whole conversation, the cat included, in the export file.
    exported = exported_text(c, tmp_path / "export.json")
    assert "My cat is called Mochi" in exported and partial in exported

    # The server does not say its context: the one set in Settings is used (and shown).
    app.window.apply_settings(c.settings.replace(server_context_tokens=1536))
    qtbot.waitUntil(lambda: c.link.state == "connected" and c.session.model_info.server_max_context == 1536
                    and not c.gate.input_block_reason(), timeout=30_000)
    assert "· OpenAI-compatible · no attention · 1536 ctx · " in window.stats_bar.connection_label.toolTip()
    app.close()


def test_the_bundled_reader_lights_the_heatmap_of_a_server_without_attention(qtbot, tmp_path, monkeypatch, llama_cpp):
    from PySide6.QtCore import QTimer

    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    api_keys.forget_session()
    api_keys.set_key(llama_cpp.url, API_KEY, data_dir=tmp_path)
    settings = Settings.of(server_url=llama_cpp.url, autostart_server=False, temperature=0.0, max_new_tokens=24,
                        max_context_tokens=400, min_chunk_tokens=16, system_prompt=SHORT_SYSTEM_PROMPT)
    app = App(qtbot, tmp_path, settings).start()
    c, window, bar = app.controller, app.window, app.window.stats_bar
    assert bar.attention_label.isVisible()
    words = bar.attention_label.text()
    assert words == "reader's attention (SmolLM2-135M) · pruning oldest-first"
    assert "not the attention of" in bar.attention_label.toolTip()
    assert any("reads each finished exchange" in m.text for m in window.messages.history)

    assert bar.brightness_label.text() == "☀ — (reader)", "nothing read yet: no mean of 10,000"
    # The window keeps painting while the reader reads (it runs on a thread).
    ticks = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(c.proxy.reading))
    timer.start(10)
    assert app.say("My cat is called Mochi and she sleeps in a cardboard box.") in ("stop", "length")
    assert app.say("What is my cat called?") in ("stop", "length")
    assert c.proxy.wait_for_reading(120_000)
    timer.stop()
    assert c.proxy.reads_done == 2 and c.proxy.last_read["answer"] > 0 and c.proxy.last_read["ms"] > 0
    assert sum(ticks) >= 2, "the UI thread ran while a read was in flight"

    conv = app.conv
    content = ~conv.table.framing
    assert (conv.table.brightness[content] < MAX_BRIGHTNESS).any(), "the reader's votes moved brightness"
    assert "(reader)" in bar.brightness_label.text()
    assert "not measured" not in bar.brightness_label.text()
    # Pruning stays oldest-first by default: the reader only lights the heatmap.
    assert not c.session.proxy_ranks

    # Asked to, the reader ranks chunks for pruning, and the window says so.
    c.apply_settings(c.settings.replace(proxy_pruning=True))
    assert c.session.proxy_ranks and "pruning by its attention" in bar.attention_label.text()

    # Turned off: no more reads, and brightness is "not measured" again.
    c.apply_settings(c.settings.replace(proxy_attention=False, proxy_pruning=False))
    assert not c.session.proxy_ranks and bar.attention_label.text() == NO_ATTENTION_TEXT
    done = c.proxy.reads_done
    assert app.say("Thanks!") in ("stop", "length")
    assert c.proxy.wait_for_reading(10_000) and c.proxy.reads_done == done
    qtbot.waitUntil(lambda: bar.brightness_label.text() == NO_BRIGHTNESS_TEXT, timeout=5_000)
    app.close()


def test_llama_cpp_python_asks_for_its_key_in_a_sentence(llama_cpp):
    from halo_weave.backends import BackendAuthError, connect, probe

    with pytest.raises(BackendAuthError) as caught:
        connect(llama_cpp.url)
    assert "asks for an API key" in str(caught.value)
    result = probe(llama_cpp.url, api_key=API_KEY)
    assert result.usable and result.kind == "openai" and result.exact_tokens, json.dumps(result.as_json())


def test_a_stock_koboldcpp_on_the_default_url_is_used_not_replaced(qtbot, tmp_path, monkeypatch):
    from halo_weave.backends.local_tokenizer import shared

    replay = KoboldReplay(shared())
    try:
        controller, window, started = window_on_default_url(qtbot, tmp_path, monkeypatch, replay.url)
        status = "KoboldCPP 1.76 · no attention · 4096 ctx"
        assert used_not_replaced(qtbot, controller, window, started, status) == "stop"
        assert "1. Bananas\n2. Oranges\n3. Grapes" in text_of(controller.conv, max(controller.conv.turns))
        assert "Grapes" in window.heatmap.toPlainText()
        sent = replay.bodies("/api/extra/generate/stream")[-1]["prompt"]
        assert sent.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nName three fruits.")
        window.close()
    finally:
        replay.close()


def test_a_web_server_that_is_not_a_model_server_gets_a_sentence_and_no_bundled_server(qtbot, tmp_path, monkeypatch):
    other = _NotAModelServer()
    try:
        controller, window, started = window_on_default_url(qtbot, tmp_path, monkeypatch, other.url)
        controller.start()
        qtbot.waitUntil(lambda: controller.link.state == "offline" and bool(window.messages.history), timeout=30_000)
        assert not started, "something answers there: it is explained, not replaced"
        text = window.messages.history[-1].text.replace(other.url, "<url>")  # the port may contain "404"
        assert "not a model server" in text and "404" not in text
        window.close()
    finally:
        other.httpd.shutdown()
        other.httpd.server_close()


def test_settings_test_connection_shows_the_detected_kind_and_the_template_is_kept_per_conversation(
        qtbot, tmp_path, monkeypatch):
    from halo_weave.backends.local_tokenizer import shared
    from halo_weave.ui.settings_dialog import SettingsDialog

    replay = KoboldReplay(shared())
    try:
        monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
        settings = Settings.of(server_url=replay.url, autostart_server=False, temperature=0.0, max_new_tokens=24,
                            system_prompt=SHORT_SYSTEM_PROMPT)
        app = App(qtbot, tmp_path, settings).start()
        c = app.controller

        # Settings → Server → Test connection: the kind that answers, in words.
        dialog = SettingsDialog(c.settings, app.window, keyring=False)
        qtbot.addWidget(dialog)
        fields = dialog.server_fields
        fields.test_connection()
        qtbot.waitUntil(lambda: fields.result_label.text().startswith("✓"), timeout=30_000)
        assert fields.result_label.text().startswith("✓ KoboldCPP 1.76 · no attention · 4096 ctx · text mode")
        fields.url_edit.setText("http://127.0.0.1:9")
        fields.test_connection()
        qtbot.waitUntil(lambda: fields.result_label.text().startswith("✗"), timeout=30_000)
        assert "Cannot reach the model server" in fields.result_label.text()
        assert not fields.key_to_file.isHidden(), "no keyring: the private-file choice is offered"

        # KoboldCPP publishes no template: the user picks Llama 3, with a preview.
        fields.template.setCurrentIndex(fields.template.findData("llama3"))
        assert fields.preview.toPlainText().startswith("<|start_header_id|>system<|end_header_id|>")
        dialog.editors["server_url"].setText(replay.url)
        chosen = dialog.current_settings()
        assert chosen.server.chat_template == "llama3"
        app.window.apply_settings(chosen)
        qtbot.waitUntil(lambda: c.link.state == "connected" and c.session.server.template.name == "llama3"
                        and not c.gate.input_block_reason(), timeout=30_000)
        assert not c.session.answer.stop_ids, "no ordinary token (Llama 3's suffix starts with '<') is dropped from answers"
        assert app.say("Name three fruits.") == "stop"
        body = replay.bodies("/api/extra/generate/stream")[-1]
        assert body["prompt"].endswith("<|start_header_id|>user<|end_header_id|>\n\nName three fruits.<|eot_id|>"
                                       "<|start_header_id|>assistant<|end_header_id|>\n\n")
        assert "<|eot_id|>" in body["stop_sequence"]
        assert c.session.store.get_meta("chat_template") == "llama3", "saved with this conversation"

        # A new conversation starts from the default again; reopening the first brings Llama 3 back.
        first = c.files.path
        c.session.use_settings(c.settings.replace(chat_template="auto"))  # the default, not this file's
        assert c.files.new_conversation()
        qtbot.waitUntil(lambda: c.session.server.template.name == "chatml" and not c.gate.input_block_reason(), timeout=30_000)
        assert c.files.open_conversation(first)
        qtbot.waitUntil(lambda: c.session.server.template.name == "llama3" and not c.gate.input_block_reason(), timeout=30_000)
        app.close()
    finally:
        replay.close()
