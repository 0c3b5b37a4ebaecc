"""Opt-in: the window chatting through a real KoboldCPP and a real llama-server.

Skipped unless ``HALO_WEAVE_KOBOLDCPP`` / ``HALO_WEAVE_LLAMA_SERVER`` point at binaries
built outside the repository (tests/real_servers.py).  The same steps as a user: several
messages, a prune under a small budget, a resurrection, Stop mid-answer, export; and the
real KoboldCPP on "the default URL" is used, not replaced by the bundled server.
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from halo_weave.settings import MAX_BRIGHTNESS, Settings

from real_servers import KoboldCppProcess, LlamaServerProcess, started
from server_steps import (CAT, exported_text, prune_the_cat, small_budget, stop_mid_answer, text_of,
                          used_not_replaced, window_on_default_url)
from test_app import SHORT_SYSTEM_PROMPT, TURN_TIMEOUT_MS, App

pytestmark = pytest.mark.slow


def _chat_prune_resurrect_stop_export(qtbot, tmp_path, url: str, status_start: str, *, attention_table: bool):
    app = App(qtbot, tmp_path, small_budget(url)).start()
    c, window = app.controller, app.window
    detail = window.stats_bar.connection_label.toolTip()
    assert detail.startswith(status_start), detail

    assert app.say(CAT) in ("stop", "length")
    conv = app.conv
    user, answer = sorted(conv.turns)[-2:]
    assert CAT in text_of(conv, user) and text_of(conv, answer).strip(), "the model answered"
    assert text_of(conv, answer).strip()[:12] in window.heatmap.toPlainText()
    if not attention_table:
        assert (conv.table.brightness[~conv.table.framing] == MAX_BRIGHTNESS).all(), "no attention moved brightness"

    prune_the_cat(app)  # long messages push the oldest chunks out
    app.settle()
    assert app.say("What is the name of my cat? Mochi?") in ("stop", "length")
    assert c.session.recall.kept > 0, "the chunk about the cat came back for the question"

    partial = stop_mid_answer(app, qtbot, after=3, timeout_ms=60_000)

    # Every turn is closed once: no end token twice in a row in what the model is sent.
    end = [i for i, _ in c.session.backend.tokenize("<|im_end|>", parse_special=True)]
    sent = [int(i) for i in conv.live_input_ids()]
    assert len(end) == 1 and not any(a == b == end[0] for a, b in zip(sent, sent[1:]))

    exported = exported_text(c, tmp_path / "export.json")
    assert CAT in exported and partial in exported
    app.close()


def test_window_through_real_koboldcpp(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    with KoboldCppProcess(n_ctx=2048) as server:
        _chat_prune_resurrect_stop_export(qtbot, tmp_path, server.url, "KoboldCPP 1.76 · no attention · 2048 ctx",
                                          attention_table=False)


def test_window_through_real_llama_server(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    with LlamaServerProcess(n_ctx=1024) as server:
        _chat_prune_resurrect_stop_export(qtbot, tmp_path, server.url, "llama-server ", attention_table=False)


def test_real_koboldcpp_on_the_default_url_is_used_not_replaced(qtbot, tmp_path, monkeypatch):
    with KoboldCppProcess(n_ctx=2048) as server:
        controller, window, bundled = window_on_default_url(qtbot, tmp_path, monkeypatch, server.url,
                                                            max_new_tokens=12)
        finish = used_not_replaced(qtbot, controller, window, bundled, "KoboldCPP 1.76 · no attention · 2048 ctx")
        assert finish in ("stop", "length")
        window.close()


@pytest.mark.parametrize("kind", ["koboldcpp", "llama-server"])
def test_real_server_killed_mid_answer_keeps_the_partial_answer_and_says_so(qtbot, tmp_path, monkeypatch, kind):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    with started(kind, n_ctx=1024) as server:
        app = App(qtbot, tmp_path, Settings.of(server_url=server.url, autostart_server=False, max_new_tokens=200,
                                            system_prompt=SHORT_SYSTEM_PROMPT)).start()
        c, window = app.controller, app.window
        window.input.setPlainText("Tell me a long story about a lighthouse keeper.")
        qtbot.keyClick(window.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: c.session.answer.streamed >= 3, timeout=TURN_TIMEOUT_MS)
        with qtbot.wait_signal(c.signals.turn_finished, timeout=60_000) as blocker:
            server.kill()
        assert blocker.args == ["error"]
        shown = [m for m in window.messages.history if m.serious]
        assert shown and any("server" in m.text.lower() for m in shown), [m.text for m in shown]
        answer = max(c.conv.turns)
        assert c.conv.turns[answer].complete and text_of(c.conv, answer).strip(), "the partial answer was kept"
        assert not c.gate.busy and window.reason.text(), "the input says why it cannot send"
        window.close()
