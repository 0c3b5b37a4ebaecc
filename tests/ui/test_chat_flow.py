"""Chatting as in the apps people already use, against the real window, server and model:
the speed shows while the answer streams, and the view follows the answer."""

from __future__ import annotations

import re

import pytest
from PySide6.QtCore import Qt

from test_app import TURN_TIMEOUT_MS, make_app  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow

LONG_TOPIC = "Tell me a long story about a lighthouse keeper and the sea, in many paragraphs."


def test_speed_and_first_token_show_while_the_answer_streams(make_app, qtbot):
    app = make_app(max_new_tokens=24).start()
    seen: list[str] = []
    app.controller.tokens_streamed.connect(lambda: seen.append(app.window.stats_bar.speed_label.text()))
    app.window.input.setPlainText("Count from one to twenty in words.")
    with qtbot.wait_signal(app.controller.turn_finished, timeout=TURN_TIMEOUT_MS):
        qtbot.keyClick(app.window.input, Qt.Key.Key_Return)
        # Read the label while the answer is still streaming, not after it ended.
        qtbot.waitUntil(lambda: any(re.search(r"\d+\.\d tok/s", s) for s in seen), timeout=TURN_TIMEOUT_MS)
        assert app.controller.generating
    live = [s for s in seen if re.search(r"\d+\.\d tok/s", s)]
    assert live and "first token" in live[0] and re.search(r"first token \d+\.\d s", live[0])
    final = app.window.stats_bar.speed_label.text()
    assert re.search(r"\d+\.\d tok/s", final) and "first token" in final


def test_window_follows_a_long_answer_and_respects_a_reader(make_app, qtbot):
    app = make_app(max_new_tokens=40, max_context_tokens=0).start()
    app.window.resize(900, 520)
    for _ in range(4):
        app.say(LONG_TOPIC)
    heatmap = app.window.heatmap
    bar = heatmap.verticalScrollBar()
    assert bar.maximum() > 0, "the conversation is longer than the window"
    assert bar.value() == bar.maximum(), "the newest answer is in view after each exchange"
    # Now the user scrolls up to read while the next answer streams.
    app.window.input.setPlainText(LONG_TOPIC)
    with qtbot.wait_signal(app.controller.turn_finished, timeout=TURN_TIMEOUT_MS):
        qtbot.keyClick(app.window.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: app.controller.generating, timeout=TURN_TIMEOUT_MS)
        bar.triggerAction(bar.SliderAction.SliderToMinimum)
        assert heatmap.follower.button.isVisible()
    qtbot.waitUntil(lambda: not app.controller.busy, timeout=10_000)
    assert bar.value() == 0, "the reader was not moved"
    qtbot.mouseClick(heatmap.follower.button, Qt.MouseButton.LeftButton)
    assert bar.value() == bar.maximum()
