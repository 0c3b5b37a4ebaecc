"""The heatmap's side of branches: the "‹ n / m ›" of a message where branches part, a
click on an arrow, and the context menu's Edit / Regenerate / branch actions.  The view
only forwards intent (the session's branches are tested in tests/test_branches.py)."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QTextCursor

from halo_weave.ui.heatmap import HeatmapView

from test_heatmap import make_conv, show


@pytest.fixture
def view(qtbot):
    widget = HeatmapView()
    qtbot.addWidget(widget)
    widget.resize(640, 480)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def _turns(conv):
    return list(conv.turns)


def _action(menu, label: str):
    found = [a for a in menu.actions() if label in a.text()]
    assert found, [a.text() for a in menu.actions()]
    return found[0]


def test_the_header_where_branches_part_shows_its_place_and_an_arrow_switches(view, qtbot):
    conv = make_conv()
    question, answer = _turns(conv)
    view.branches.set_marks({answer: (2, 3)})
    show(view, conv)
    assert "Assistant  ‹ 2 / 3 ›" in view.toPlainText()
    assert "User · " in view.toPlainText() and view.toPlainText().count("‹") == 1

    for step in (-1, 1):
        rect = view.branches.arrow_rect(answer, step)
        assert rect is not None
        with qtbot.wait_signal(view.branch_requested, timeout=1000) as blocker:
            qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
        assert blocker.args == [answer, step]


def test_an_arrow_with_nowhere_to_go_does_nothing(view, qtbot):
    conv = make_conv()
    _, answer = _turns(conv)
    view.branches.set_marks({answer: (2, 2)})
    show(view, conv)
    assert view.branches.arrow_rect(answer, 1) is None
    cursor = QTextCursor(view.document())
    cursor.setPosition(view.toPlainText().index("›"))
    rect = view.cursorRect(cursor)
    with qtbot.assert_not_emitted(view.branch_requested):
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center() + QPoint(3, 0))
    view.branches.set_marks({})
    show(view, conv)
    assert "‹" not in view.toPlainText(), "no branches: no mark"


@pytest.mark.parametrize(("role_index", "label", "signal"), [
    (0, "Edit this message", "edit_requested"),
    (1, "Regenerate this answer", "regenerate_requested"),
])
def test_any_message_offers_edit_or_regenerate(view, qtbot, role_index, label, signal):
    conv = make_conv()
    turn_id = _turns(conv)[role_index]
    show(view, conv)
    chunk = conv.content_chunks(turn_id)[0]
    menu = view.context_menu_for(view.chunk_rect(chunk.id).center())
    with qtbot.wait_signal(getattr(view, signal), timeout=1000) as blocker:
        _action(menu, label).trigger()
    assert blocker.args == [turn_id]


def test_the_menu_switches_branches_where_they_part(view, qtbot):
    conv = make_conv()
    question, _ = _turns(conv)
    view.branches.set_marks({question: (1, 2)})
    show(view, conv)
    menu = view.context_menu_for(view.chunk_rect(conv.content_chunks(question)[0].id).center())
    assert not _action(menu, "Previous branch (1 of 2)").isEnabled()
    with qtbot.wait_signal(view.branch_requested, timeout=1000) as blocker:
        _action(menu, "Next branch › (1 of 2)").trigger()
    assert blocker.args == [question, 1]
