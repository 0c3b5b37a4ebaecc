"""Opt-in: the window chatting through a real KoboldCPP and a real llama-server.

Skipped unless ``HALO_WEAVE_KOBOLDCPP`` / ``HALO_WEAVE_LLAMA_SERVER`` point at binaries
built outside the repository (tests/real_servers.py).  The same steps as a user: several
messages, a prune under a small budget, a resurrection, Stop mid-answer, export; and the
real KoboldCPP on "the default URL" is used, not replaced by the bundled server.
"""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt

from halo_weave.app import TurnController
from halo_weave.settings import MAX_BRIGHTNESS, Settings
from halo_weave.ui import connection as connection_mod
from halo_weave.ui.main_window import MainWindow, app_qsettings

from real_servers import KoboldCppProcess, LlamaServerProcess
from test_app import LONG_MESSAGE, SHORT_SYSTEM_PROMPT, TURN_TIMEOUT_MS, App

pytestmark = pytest.mark.slow

CAT = "My cat is called Mochi and she likes boxes."


def _text(conv, turn_id: int) -> str:
    return "".join(conv.chunk_text(c.id) for c in conv.content_chunks(turn_id))


def _chat_prune_resurrect_stop_export(qtbot, tmp_path, url: str, status_start: str, *, attention_table: bool):
    settings = Settings(server_url=url, autostart_server=False, temperature=0.0, max_new_tokens=10,
                        max_context_tokens=150, min_chunk_tokens=16, system_prompt=SHORT_SYSTEM_PROMPT)
    app = App(qtbot, tmp_path, settings).start()
    c, window = app.controller, app.window
    detail = window.stats_bar.connection_label.toolTip()
    assert detail.startswith(status_start), detail

    assert app.say(CAT) in ("stop", "length")
    conv = app.conv
    user, answer = sorted(conv.turns)[-2:]
    assert CAT in _text(conv, user) and _text(conv, answer).strip(), "the model answered"
    assert _text(conv, answer).strip()[:12] in window.heatmap.toPlainText()
    if not attention_table:
        assert (conv.table.brightness[~conv.table.framing] == MAX_BRIGHTNESS).all(), "no attention moved brightness"

    # Long messages push the oldest chunks out.  (The tiny model answers "Mochi…" to anything,
    # so a message may bring the cat back for its own exchange; it goes with a later prune.)
    def cat_pruned():
        return [ch for ch in conv.graveyard() if ch.role == "user" and "Mochi" in conv.chunk_text(ch.id)]

    for _ in range(4):
        assert app.say(LONG_MESSAGE) in ("stop", "length")
        if cat_pruned():
            break
    pruned = conv.graveyard()
    assert pruned and window.graveyard.model().total_count() == len(pruned)
    assert cat_pruned(), "the cat was pruned"

    app.settle()
    assert app.say("What is the name of my cat? Mochi?") in ("stop", "length")
    assert c.last_resurrected > 0, "the chunk about the cat came back for the question"

    c.apply_settings(c.settings.replace(max_new_tokens=200))
    window.input.setPlainText("Write a long story about a dragon who loves tea.")
    qtbot.keyClick(window.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: c.generating and c.session.streamed >= 3, timeout=TURN_TIMEOUT_MS)
    with qtbot.wait_signal(c.turn_finished, timeout=60_000) as blocker:
        qtbot.keyClick(window.input, Qt.Key.Key_Escape)
    assert blocker.args == ["aborted"]
    partial = _text(c.conv, max(c.conv.turns))
    assert partial.strip() and c.session.streamed < 200
    qtbot.waitUntil(lambda: not c.busy, timeout=10_000)

    # Every turn is closed once: no end token twice in a row in what the model is sent.
    end = [i for i, _ in c.client.tokenize("<|im_end|>")]
    sent = [int(i) for i in conv.live_input_ids()]
    assert len(end) == 1 and not any(a == b == end[0] for a, b in zip(sent, sent[1:]))

    export = tmp_path / "export.json"
    assert c.export_json(export)
    exported = "".join(json.loads(export.read_text(encoding="utf-8"))["tokens"]["text"])
    assert CAT in exported and partial in exported
    app.close()


def test_window_through_real_koboldcpp(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    server = KoboldCppProcess(n_ctx=2048)
    try:
        _chat_prune_resurrect_stop_export(qtbot, tmp_path, server.url, "KoboldCPP 1.76 · no attention · 2048 ctx",
                                          attention_table=False)
    finally:
        server.stop()


def test_window_through_real_llama_server(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    server = LlamaServerProcess(n_ctx=1024)
    try:
        _chat_prune_resurrect_stop_export(qtbot, tmp_path, server.url, "llama-server ",
                                          attention_table=False)
    finally:
        server.stop()


def test_real_koboldcpp_on_the_default_url_is_used_not_replaced(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    server = KoboldCppProcess(n_ctx=2048)
    try:
        monkeypatch.setattr(connection_mod, "DEFAULT_SERVER_URL", server.url)  # it sits on "the default URL"
        controller = TurnController(Settings(server_url=server.url, autostart_server=True, temperature=0.0,
                                             max_new_tokens=12, system_prompt=SHORT_SYSTEM_PROMPT),
                                    tmp_path, autostart=True)
        window = MainWindow(controller, app_qsettings(tmp_path))
        qtbot.addWidget(window)
        window.show()
        started = []
        monkeypatch.setattr(controller.connection, "start_bundled_server", lambda: started.append(True))
        controller.start()
        qtbot.waitUntil(lambda: controller.connection_state == "connected" and not controller.input_block_reason(),
                        timeout=60_000)
        assert not started and controller.server is None, "the bundled server was not started"
        assert window.stats_bar.connection_label.toolTip().startswith("KoboldCPP 1.76 · no attention · 2048 ctx")
        window.input.setPlainText("Name three fruits.")
        with qtbot.wait_signal(controller.turn_finished, timeout=TURN_TIMEOUT_MS) as blocker:
            qtbot.keyClick(window.input, Qt.Key.Key_Return)
        assert blocker.args[0] in ("stop", "length")
        assert _text(controller.conv, max(controller.conv.turns)).strip()
        window.close()
    finally:
        server.stop()


@pytest.mark.parametrize("kind", ["koboldcpp", "llama-server"])
def test_real_server_killed_mid_answer_keeps_the_partial_answer_and_says_so(qtbot, tmp_path, monkeypatch, kind):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    server = KoboldCppProcess(n_ctx=1024) if kind == "koboldcpp" else LlamaServerProcess(n_ctx=1024)
    try:
        app = App(qtbot, tmp_path, Settings(server_url=server.url, autostart_server=False, max_new_tokens=200,
                                            system_prompt=SHORT_SYSTEM_PROMPT)).start()
        c, window = app.controller, app.window
        window.input.setPlainText("Tell me a long story about a lighthouse keeper.")
        qtbot.keyClick(window.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: c.session.streamed >= 3, timeout=TURN_TIMEOUT_MS)
        with qtbot.wait_signal(c.turn_finished, timeout=60_000) as blocker:
            server.kill()
        assert blocker.args == ["error"]
        shown = [m for m in window.messages.history if m.serious]
        assert shown and any("server" in m.text.lower() for m in shown), [m.text for m in shown]
        answer = max(c.conv.turns)
        assert c.conv.turns[answer].complete and _text(c.conv, answer).strip(), "the partial answer was kept"
        assert not c.busy and window.reason.text(), "the input says why it cannot send"
        window.close()
    finally:
        server.stop()
