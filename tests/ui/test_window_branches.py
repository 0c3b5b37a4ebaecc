"""Editing an earlier message and switching branches in the window, as a user does it:
right-click a message, Edit this message…, new words, Enter; the header where the
branches part says ‹ 2 / 2 ›; a click on ‹ brings the old messages back; Regenerate on an
earlier answer; all of it again after reopening.  The real window, server, model and file."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from test_app import TURN_TIMEOUT_MS, make_app  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow


def _messages(conv) -> list[str]:
    return ["".join(conv.chunk_text(c.id) for c in conv.content_chunks(t)).strip() for t in conv.turns]


def _menu_action(view, turn_id: int, label: str):
    conv = view.conversation()
    menu = view.context_menu_for(view.chunk_rect(conv.content_chunks(turn_id)[0].id).center())
    found = [a for a in menu.actions() if label in a.text()]
    assert found, [a.text() for a in menu.actions()]
    return found[0]


def _wait_answer(app, act) -> None:
    with app.qtbot.wait_signal(app.controller.signals.turn_finished, timeout=TURN_TIMEOUT_MS):
        act()
    app.qtbot.waitUntil(lambda: not app.controller.gate.busy, timeout=10_000)


def test_edit_an_earlier_message_then_switch_back_with_the_arrows(make_app, qtbot):
    app = make_app(max_new_tokens=8).start()
    for question in ("Name a fruit.", "Name a river.", "Name a colour."):
        app.say(question)
    window, view = app.window, app.window.heatmap
    before = _messages(app.conv)
    second = list(app.conv.turns)[2]

    view.scroll_to_chunk(app.conv.content_chunks(second)[0].id)
    _menu_action(view, second, "Edit this message").trigger()
    assert window.input.toPlainText() == "Name a river."
    assert "new branch" in window.reason.text()
    window.input.setPlainText("Name a mountain.")
    _wait_answer(app, lambda: qtbot.keyClick(window.input, Qt.Key.Key_Return))

    conv = app.conv
    shown = _messages(conv)
    assert shown[:2] == before[:2] and shown[2] == "Name a mountain." and len(shown) == 4
    assert "Name a colour." not in view.toPlainText() and "‹ 2 / 2 ›" in view.toPlainText()
    edited = list(conv.turns)[2]

    view.scroll_to_chunk(conv.content_chunks(edited)[0].id)
    qtbot.wait(50)
    rect = view.branches.arrow_rect(edited, -1)
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    qtbot.waitUntil(lambda: _messages(app.conv) == before, timeout=10_000)
    assert "‹ 1 / 2 ›" in view.toPlainText() and "Name a colour." in view.toPlainText()
    assert "Name a mountain." not in view.toPlainText()

    first_answer = list(app.conv.turns)[1]
    _wait_answer(app, _menu_action(view, first_answer, "Regenerate this answer").trigger)
    assert len(app.conv.turns) == 2 and "‹ 2 / 2 ›" in view.toPlainText()

    path = app.controller.files.path
    app.window.close()
    again = make_app(max_new_tokens=8).start(path)
    assert len(again.conv.turns) == 2 and "‹ 2 / 2 ›" in again.window.heatmap.toPlainText()
    again.window.switch_branch(list(again.conv.turns)[1], -1)
    assert _messages(again.conv) == before
