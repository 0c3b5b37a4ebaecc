"""The model's notebook in the window, and "Record attention", with the real server.

The 135M model rarely writes a tool call on its own, so the tool round gets a scripted
start of the answer (``send(..., answer_prefix=...)``): the real ToolRunner runs it in its
jq sandbox, the real store saves the notes, and the real model continues the answer.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from halo_weave.tools import notebook as tools
from halo_weave.storage.capture import list_captures, load_capture
from halo_weave.settings import DEFAULT_SYSTEM_PROMPT, Settings
from halo_weave.ui.main_window import app_qsettings
from halo_weave.ui.settings_io import GROUP, load_settings
from test_app import TURN_TIMEOUT_MS, make_app  # noqa: F401 - make_app is a fixture

ROOT = Path(__file__).resolve().parents[2]
WRITE_CALL = """<tool>jq '.topics.cat = "Tuna, a grey tabby"' notes.json > output</tool>"""


def _answer_chunks(conv):
    answer = max(t for t in conv.turns if conv.turns[t].role == "assistant")
    return conv.content_chunks(answer)


def _say(app, qtbot, text: str, answer_prefix: str = "") -> str:
    controller = app.controller
    with qtbot.wait_signal(controller.signals.turn_finished, timeout=TURN_TIMEOUT_MS) as finished:
        assert controller.message.send(text, answer_prefix=answer_prefix)
    qtbot.waitUntil(lambda: not controller.gate.busy, timeout=10_000)
    return finished.args[0]


def test_the_notebook_tool_is_an_opt_in_and_settings_that_had_it_keep_it(tmp_path):
    """A new user's model reads a one-line prompt; the notebook's ~190 tokens of jq
    instructions follow it only while the tool is on.  Settings saved when the prompt
    itself held the instructions keep the tool on, the prompt without them."""
    assert DEFAULT_SYSTEM_PROMPT == "You are a helpful assistant."
    assert Settings().effective_system_prompt == DEFAULT_SYSTEM_PROMPT and not Settings().chat.notes_tool
    on = Settings.of(notes_tool=True).effective_system_prompt
    assert on.startswith(DEFAULT_SYSTEM_PROMPT + "\n\n") and on.endswith(tools.TOOL_PROMPT)
    qs = app_qsettings(tmp_path)
    qs.setValue(f"{GROUP}/system_prompt", "You are a helpful assistant.\n\n" + tools.TOOL_PROMPT)  # an older version's
    loaded = load_settings(qs)
    assert (loaded.chat.system_prompt, loaded.chat.notes_tool) == (DEFAULT_SYSTEM_PROMPT, True)
    assert loaded.effective_system_prompt == on
    qs.setValue(f"{GROUP}/system_prompt", "Be brief.")  # a prompt the user wrote stays
    assert (load_settings(qs).chat.system_prompt, load_settings(qs).chat.notes_tool) == ("Be brief.", False)


@pytest.mark.slow
def test_notes_panel_shows_notes_after_a_tool_round_and_after_restart(make_app, qtbot):
    app = make_app(max_new_tokens=8, notes_tool=True).start()
    window = app.window
    assert not window.notes_panel.isVisible()
    window.menus.notes_action.trigger()  # View → Show notes
    assert window.notes_panel.isVisible()
    assert window.notes_panel.text() == "", "a new conversation has no notes yet"

    with qtbot.wait_signal(app.controller.signals.notes_changed, timeout=TURN_TIMEOUT_MS):
        reason = _say(app, qtbot, "My cat is called Tuna. Please remember it.", answer_prefix=WRITE_CALL)
    assert reason in ("stop", "length")

    shown = json.loads(window.notes_panel.text())
    assert shown["topics"]["cat"] == "Tuna, a grey tabby"
    assert set(shown) >= {"_metadata", "topics", "reminders", "context", "scratch"}
    assert app.controller.files.notes() == shown, "the panel shows what the store holds"
    chunks = _answer_chunks(app.conv)
    results = [c for c in chunks if c.tool_result]
    assert results and "✓" in app.conv.chunk_text(results[0].id), "the result line is in the answer"
    assert chunks[-1] is not results[-1] or reason == "length", "the model went on after the result"

    app.close()
    again = make_app(max_new_tokens=8, notes_tool=True).start()  # reopens the last conversation
    assert again.window.notes_panel.isVisible(), "the panel's visibility is restored"
    assert json.loads(again.window.notes_panel.text())["topics"]["cat"] == "Tuna, a grey tabby"

    again.controller.files.new_conversation()
    assert again.window.notes_panel.text() == "", "a new conversation shows its own (empty) notes"


@pytest.mark.slow
def test_with_the_notebook_off_a_tool_call_is_only_text(make_app, qtbot):
    app = make_app(max_new_tokens=8).start()
    assert not app.controller.settings.chat.notes_tool
    with qtbot.assert_not_emitted(app.controller.signals.notes_changed):
        _say(app, qtbot, "My cat is called Tuna.", answer_prefix=WRITE_CALL)
    assert app.controller.files.notes() in (None, {}) or "cat" not in app.controller.files.notes().get("topics", {})
    chunks = _answer_chunks(app.conv)
    assert not any(c.tool_result for c in chunks), "no tool ran"
    assert "notes.json" not in app.conv.system.text, "the model was told of no notebook"


@pytest.mark.slow
def test_record_attention_writes_one_capture_per_answer_that_analyze_capture_plots(make_app, qtbot, tmp_path):
    app = make_app(max_new_tokens=10).start()
    controller, window = app.controller, app.window
    assert not window.menus.record_action.isChecked()
    window.menus.record_action.trigger()  # View → Record attention
    assert controller.settings.server.record_attention
    assert load_settings(app.qsettings).server.record_attention, "the toggle is saved"
    assert str(controller.turn.capture_dir) in window.statusBar().currentMessage()

    with qtbot.wait_signal(controller.signals.capture_saved, timeout=TURN_TIMEOUT_MS) as saved:
        _say(app, qtbot, "Name three fruits.")
    capture_path = Path(saved.args[0])
    assert capture_path.parent == controller.turn.capture_dir
    generated = controller.session.answer.streamed
    assert generated == sum(c.token_count for c in _answer_chunks(app.conv))
    lines = (capture_path / "index.jsonl").read_text("utf-8").splitlines()
    assert len(lines) == generated, "one index line per generated token"
    capture = load_capture(capture_path)
    assert capture.stats["tokens"] == generated and capture.stats["finish_reason"] in ("stop", "length")
    assert capture.text() == app.conv.chunk_text(_answer_chunks(app.conv)[0].id)[: len(capture.text())]
    with_attention = [rec for rec in capture if rec.attention is not None]
    assert with_attention, "the server's attention was recorded"
    for rec in with_attention:
        assert rec.attention.shape == (rec.system_length + rec.positions.size,)
        assert rec.system_length == capture.generation["system_length"]

    out = tmp_path / "plots"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "analyze_capture.py"), str(capture_path), "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    pngs = {p.name for p in out.glob("*.png")}
    assert {"heatmap.png", "brightness.png", "prune_next.png"} <= pngs
    assert all((out / name).stat().st_size > 5_000 for name in pngs)

    window.menus.record_action.trigger()  # off again
    assert not controller.settings.server.record_attention
    before = list_captures(controller.turn.capture_dir)
    with qtbot.assert_not_emitted(controller.signals.capture_saved):
        _say(app, qtbot, "And one vegetable?")
    assert list_captures(controller.turn.capture_dir) == before, "no capture while recording is off"
