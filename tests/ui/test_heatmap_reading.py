"""Reading comfort in the heatmap: code blocks in monospace on their own background, and
copying a whole message, without moving a single token of the overlay."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication

from halo_weave.conversation import Conversation
from halo_weave.settings import Settings
from halo_weave.ui.code_blocks import CODE_BACKGROUND
from halo_weave.ui.heatmap import HeatmapView

from test_heatmap_alignment import check, on_screen

ANSWER = ["Here", " is", " the", " function", ":", "\n\n", "```", "python", "\n", "def", " f", "(x", "):",
          "\n", "    ", "return", " x", " *", " 9", " /", " 5", " +", " 32", "\n", "iiii", "\n", "mmmm",
          "\n", "```", "\n\n", "It", " converts", " Celsius", "."]


def conversation(highlight_fraction: float = 0.0) -> Conversation:
    conv = Conversation(Settings.of(min_chunk_tokens=4, highlight_fraction=highlight_fraction))
    conv.set_system_prompt("Be brief.", [1], ["Be brief."])
    question = ["Write", " a", " converter", " from", " Celsius", "."]
    conv.add_turn("user", list(range(len(question))), question)
    conv.add_turn("assistant", list(range(len(ANSWER))), ANSWER)
    return conv


@pytest.fixture
def view(qtbot):
    widget = HeatmapView()
    qtbot.addWidget(widget)
    widget.resize(640, 480)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def block_with(view: HeatmapView, text: str):
    block = view.document().firstBlock()
    while block.isValid():
        if block.text() == text:
            return block
        block = block.next()
    raise AssertionError(text)


def line_width(view: HeatmapView, text: str) -> float:
    return block_with(view, text).layout().lineAt(0).naturalTextWidth()


def test_code_is_monospace_and_prose_is_not(view):
    view.set_conversation(conversation())
    view.flush()
    assert line_width(view, "iiii") == pytest.approx(line_width(view, "mmmm")), "code: every letter as wide"
    prose = view.fontMetrics()
    assert prose.horizontalAdvance("iiii") < prose.horizontalAdvance("mmmm"), "the prose font is proportional"


def test_code_lines_have_their_own_background_and_prose_keeps_the_base(view):
    view.set_conversation(conversation())
    view.flush()
    pixels = on_screen(view)
    offset = view.contentOffset()
    for text, expected in (("def f(x):", CODE_BACKGROUND), ("```", CODE_BACKGROUND),
                           ("It converts Celsius.", view.palette().base().color())):
        geo = view.blockBoundingGeometry(block_with(view, text)).translated(offset)
        y, x = int(geo.center().y()), view.viewport().width() - 8  # right of the text
        assert tuple(pixels[y, x]) == (expected.red(), expected.green(), expected.blue()), text


@pytest.mark.parametrize("highlight", [False, True], ids=["tint", "highlight"])
def test_overlay_stays_on_the_tokens_of_code(view, highlight):
    conv = conversation(0.3 if highlight else 0.0)
    rng = np.random.default_rng(4)
    attention = rng.random(conv.live_token_count()).astype(np.float32) ** 6
    conv.apply_attention(attention / attention.sum())
    view.set_conversation(conv)
    check(view, highlight, "over a code block")
    # And while a code block streams in.
    conv.begin_turn("assistant")
    for text in ["Again", ":", "\n\n", "``", "`", "\n", "x", " =", " 1", "\n", "``", "`", "\n\n", "Done", "."]:
        conv.append_token(5, text)
        view.append_streamed()
        view.flush()
        QApplication.processEvents()
    check(view, highlight, "after a streamed code block")
    assert line_width(view, "x = 1") > 0


def test_copy_message_copies_the_whole_answer(view):
    conv = conversation()
    view.set_conversation(conv)
    view.flush()
    geo = view.blockBoundingGeometry(block_with(view, "def f(x):")).translated(view.contentOffset())
    menu = view.context_menu_for(geo.center())
    action = next(a for a in menu.actions() if a.text() == "Copy the answer")
    action.trigger()
    assert QGuiApplication.clipboard().text() == "".join(ANSWER)
    label = view.blockBoundingGeometry(block_with(view, "Assistant")).translated(view.contentOffset())
    assert any(a.text() == "Copy the answer" for a in view.context_menu_for(label.center()).actions()), \
        "the label line of the message offers it too"
    question = view.blockBoundingGeometry(block_with(view, "Write a converter from Celsius.")).translated(
        view.contentOffset())
    mine = next(a for a in view.context_menu_for(question.center()).actions() if a.text() == "Copy your message")
    mine.trigger()
    assert QGuiApplication.clipboard().text() == "Write a converter from Celsius."


def test_a_continued_answer_streams_on_in_place(view):
    conv = conversation()
    view.set_conversation(conv)
    view.flush()
    conv.reopen_answer()
    for text in [" It", " also", " handles", " negatives", "."]:
        conv.append_token(5, text)
        view.append_streamed()
        view.flush()
    shown = view.toPlainText().replace("\u2029", "\n")
    assert shown.endswith("It converts Celsius. It also handles negatives.")
    conv.end_turn()
    view.rebuild()
    assert view.toPlainText().replace("\u2029", "\n").endswith("It converts Celsius. It also handles negatives.")
    check(view, False, "after a continued answer")
