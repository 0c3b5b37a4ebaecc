"""The heatmap follows the answer while the newest text is in view, stays put when the
user scrolled up to read, and offers "Jump to latest" then."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication

from halo_weave.conversation import Conversation
from halo_weave.settings import Settings
from halo_weave.ui.heatmap import HeatmapView

WORDS = "the model keeps an endless conversation inside a fixed window by letting attention decide".split()


def long_conversation(turns: int = 20) -> Conversation:
    conv = Conversation(Settings.of(min_chunk_tokens=8))
    conv.set_system_prompt("sys", [1], ["You are helpful."])
    rng = np.random.default_rng(3)
    for t in range(turns):
        texts: list[str] = []
        for _ in range(3):
            texts += [(" " if i else "") + WORDS[rng.integers(len(WORDS))] for i in range(30)] + ["\n\n"]
        conv.add_turn("user" if t % 2 == 0 else "assistant", list(range(len(texts))), texts)
    return conv


def stream(view: HeatmapView, conv: Conversation, count: int, start: int = 0) -> None:
    if conv.open_turn is None:
        conv.begin_turn("assistant")
    for i in range(start, start + count):
        conv.append_token(5, f" w{i}" + ("\n\n" if i % 60 == 59 else ""))
        view.append_streamed()
        if i % 4 == 0:
            view.flush()
            QApplication.processEvents()
    view.flush()
    QApplication.processEvents()


def wheel_up(view: HeatmapView, notches: int = 3) -> None:
    viewport = view.viewport()
    centre = QPointF(viewport.width() / 2, viewport.height() / 2)
    for _ in range(notches):
        event = QWheelEvent(centre, viewport.mapToGlobal(centre), QPoint(0, 0), QPoint(0, 120),
                            Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier,
                            Qt.ScrollPhase.NoScrollPhase, False)
        QApplication.sendEvent(viewport, event)


def last_line_visible(view: HeatmapView) -> bool:
    block = view.document().lastBlock()
    geo = view.blockBoundingGeometry(block).translated(view.contentOffset())
    return 0 <= geo.top() < view.viewport().height() and geo.bottom() <= view.viewport().height() + 8


@pytest.fixture
def view(qtbot):
    widget = HeatmapView()
    qtbot.addWidget(widget)
    widget.resize(640, 420)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def test_opening_a_long_conversation_shows_its_newest_text(view):
    view.set_conversation(long_conversation())
    view.flush()
    bar = view.verticalScrollBar()
    assert bar.maximum() > 0
    assert bar.value() == bar.maximum()
    assert last_line_visible(view)
    assert not view.follower.button.isVisible()


def test_streamed_answer_is_followed_to_its_last_line(view):
    conv = long_conversation()
    view.set_conversation(conv)
    stream(view, conv, 400)
    bar = view.verticalScrollBar()
    assert bar.value() == bar.maximum()
    assert last_line_visible(view), "the newest streamed line is on screen"
    assert "w399" in view.toPlainText()
    conv.end_turn()
    view.rebuild()  # end of the turn: the view is rebuilt, and still at the end
    view.flush()
    QApplication.processEvents()
    assert bar.value() == bar.maximum() and last_line_visible(view)


def test_scrolled_up_reader_is_not_moved_and_can_jump_back(view, qtbot):
    conv = long_conversation()
    view.set_conversation(conv)
    stream(view, conv, 40)
    bar = view.verticalScrollBar()
    wheel_up(view)
    reading = bar.value()
    assert reading < bar.maximum()
    assert not view.follower.following
    assert view.follower.button.isVisible(), "a way back to the newest text is offered"
    stream(view, conv, 300, start=40)
    assert bar.value() == reading, "the text the user reads does not move"
    assert not last_line_visible(view)
    qtbot.mouseClick(view.follower.button, Qt.MouseButton.LeftButton)
    assert bar.value() == bar.maximum() and last_line_visible(view)
    assert not view.follower.button.isVisible()
    stream(view, conv, 100, start=340)
    assert last_line_visible(view), "following again after the jump"


def test_scrolling_back_down_to_the_end_resumes_following(view):
    conv = long_conversation()
    view.set_conversation(conv)
    stream(view, conv, 40)
    bar = view.verticalScrollBar()
    wheel_up(view, 1)
    assert not view.follower.following
    bar.triggerAction(bar.SliderAction.SliderToMaximum)  # End / drag to the bottom
    assert view.follower.following
    stream(view, conv, 200, start=40)
    assert last_line_visible(view)


def test_short_conversation_shows_no_jump_button(view):
    conv = Conversation(Settings.of(min_chunk_tokens=8))
    conv.add_turn("user", [1, 2], ["Hello", " there"])
    view.set_conversation(conv)
    stream(view, conv, 5)
    assert not view.follower.button.isVisible()
    assert view.follower.following
