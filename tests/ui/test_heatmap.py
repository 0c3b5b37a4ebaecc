"""The heatmap shows the live context coloured by brightness and forwards user intent."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest
from PySide6.QtCore import QPoint
from PySide6.QtGui import QColor, QImage

from halo_weave.conversation import Conversation
from halo_weave.settings import Settings
from halo_weave.ui.heatmap import HeatmapView


def paragraph(word: str, n: int = 8) -> list[str]:
    return [(" " if i else "") + word for i in range(n)]


def add(conv: Conversation, role: str, *paragraphs: list[str]) -> None:
    texts: list[str] = []
    for i, para in enumerate(paragraphs):
        texts += para + (["\n\n"] if i + 1 < len(paragraphs) else [])
    conv.add_turn(role, list(range(100, 100 + len(texts))), texts, created_at=1_700_000_000.0)


def make_conv(highlight_fraction: float = 0.2) -> Conversation:
    conv = Conversation(Settings.of(min_chunk_tokens=4, highlight_fraction=highlight_fraction))
    conv.set_system_prompt("You are a test assistant.", [1, 2], ["You are", " a test assistant."])
    add(conv, "user", paragraph("alpha"), paragraph("beta"))
    add(conv, "assistant", paragraph("gamma"), paragraph("delta"))
    return conv


def chunk_with(conv: Conversation, word: str) -> int:
    for chunk in conv.live_chunks():
        if not chunk.framing and word in conv.chunk_text(chunk.id):
            return chunk.id
    raise AssertionError(word)


def focus_attention(conv: Conversation, chunk_id: int, steps: int = 50) -> None:
    """Generated tokens that attend only to one chunk: it stays bright, the rest decay."""
    rows = conv.chunk_rows(conv.chunks[chunk_id])
    n_system = len(conv.system.ids)
    for _ in range(steps):
        attention = np.full(conv.live_token_count(), 1e-6, np.float32)
        attention[n_system + rows.start : n_system + rows.stop] = 1.0
        conv.apply_attention(attention / attention.sum())


@pytest.fixture
def view(qtbot):
    widget = HeatmapView()
    qtbot.addWidget(widget)
    widget.resize(640, 480)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def show(view: HeatmapView, conv: Conversation) -> QImage:
    view.set_conversation(conv)
    view.flush()
    view.verticalScrollBar().setValue(0)
    return view.viewport().grab().toImage()


def brightest_pixel(image: QImage, rect) -> QColor:
    best, best_sum = QColor(0, 0, 0), -1
    for y in range(rect.top(), rect.bottom()):
        for x in range(rect.left(), rect.right()):
            c = image.pixelColor(x, y)
            if c.red() + c.green() + c.blue() > best_sum:
                best, best_sum = c, c.red() + c.green() + c.blue()
    return best


def median_pixel(image: QImage, rect) -> tuple[float, float, float]:
    pixels = [image.pixelColor(x, y) for y in range(rect.top(), rect.bottom()) for x in range(rect.left(), rect.right())]
    return tuple(float(np.median([getattr(p, ch)() for p in pixels])) for ch in ("red", "green", "blue"))


def test_text_of_every_turn_is_shown_with_role_labels(view):
    conv = make_conv()
    show(view, conv)
    text = view.toPlainText()
    assert "You are a test assistant." in text
    assert "User · " in text and "Assistant" in text
    assert text.index("alpha") < text.index("beta") < text.index("gamma") < text.index("delta")
    assert "<|im_start|>" not in text


def test_chunk_colour_follows_peak_brightness(view):
    conv = make_conv(highlight_fraction=0.0)
    bright, dim = chunk_with(conv, "gamma"), chunk_with(conv, "beta")
    focus_attention(conv, bright)
    image = show(view, conv)
    gold = brightest_pixel(image, view.chunk_rect(bright))
    olive = brightest_pixel(image, view.chunk_rect(dim))
    assert gold.red() > 220 and gold.green() > 190 and gold.blue() < 140, gold.getRgb()
    # The dimmest step still reads on the background (WCAG 4.5, tests/ui/test_theme.py).
    assert 130 < olive.red() < 175 and olive.blue() < 100, olive.getRgb()
    assert gold.red() > olive.red() + 80


def test_brightest_tokens_are_highlighted(view):
    conv = make_conv(highlight_fraction=0.2)
    bright, dim = chunk_with(conv, "gamma"), chunk_with(conv, "beta")
    focus_attention(conv, bright)
    image = show(view, conv)
    lit_bg = median_pixel(image, view.chunk_rect(bright))
    plain_bg = median_pixel(image, view.chunk_rect(dim))
    assert lit_bg[0] > 55 and lit_bg[0] > lit_bg[2] + 20, lit_bg  # yellow background
    assert plain_bg[0] < 40, plain_bg  # the dark base
    white = brightest_pixel(image, view.chunk_rect(bright))
    assert min(white.red(), white.green(), white.blue()) > 200, white.getRgb()  # white text


def test_brightness_change_recolours_without_new_text(view, qtbot):
    conv = make_conv(highlight_fraction=0.0)
    beta, gamma = chunk_with(conv, "beta"), chunk_with(conv, "gamma")
    focus_attention(conv, gamma)
    show(view, conv)
    revision = view.document().revision()
    focus_attention(conv, beta, steps=200)  # now beta is the brightest, gamma fading
    view.refresh_brightness()
    view.flush()
    image = view.viewport().grab().toImage()
    assert view.document().revision() == revision
    beta_now = brightest_pixel(image, view.chunk_rect(beta))
    gamma_now = brightest_pixel(image, view.chunk_rect(gamma))
    assert beta_now.red() > 220
    assert gamma_now.red() < beta_now.red() - 80


def test_pinned_chunk_shows_marker(view):
    conv = make_conv()
    beta = chunk_with(conv, "beta")
    show(view, conv)
    assert view.gutter.pinned_marker_chunks() == []
    conv.pin(beta)
    view.refresh_brightness()
    view.flush()
    assert view.gutter.pinned_marker_chunks() == [beta]
    assert "pinned" in view.tips.for_chunk(beta)


def test_tool_result_chunk_is_cyan(view):
    conv = make_conv(highlight_fraction=0.0)
    conv.begin_turn("assistant")
    for text in paragraph("toolout"):
        conv.append_token(7, text, tool_result=True)
    conv.end_turn()
    tool = chunk_with(conv, "toolout")
    image = show(view, conv)
    cyan = brightest_pixel(image, view.chunk_rect(tool))
    assert cyan.green() > 170 and cyan.blue() > 160 and cyan.red() < 120, cyan.getRgb()


def test_streamed_tokens_appear(view, qtbot):
    conv = make_conv()
    show(view, conv)
    conv.begin_turn("assistant")
    for text in ["Streaming", " words", " arrive", " één", " 🙂", " here"]:
        conv.append_token(5, text)
        view.append_streamed()
    qtbot.waitUntil(lambda: "Streaming words arrive één 🙂 here" in view.toPlainText(), timeout=2000)
    streamed = chunk_with(conv, "Streaming")
    view.scroll_to_chunk(streamed)
    view.flush()
    assert view.chunk_rect(streamed) is not None


def test_token_offsets_match_document_text(view):
    conv = make_conv()
    show(view, conv)
    conv.begin_turn("assistant")
    for text in ["naïve", " 🙂🙂", "\n\n", "日本", " end"]:
        conv.append_token(5, text)
        view.append_streamed()
    view.flush()
    plan = view.plan
    assert plan.length == view.document().characterCount() - 1
    text = view.toPlainText().replace("\u2029", "\n")
    # Document positions are UTF-16 units; map them back to Python indices.
    units = text.encode("utf-16-le")
    for row, start, end in zip(plan.rows[-5:], plan.starts[-5:], plan.ends[-5:]):
        shown = units[2 * start : 2 * end].decode("utf-16-le")
        chunk = conv.chunks[int(conv.table.chunk_id[row])]
        expected = conv.chunk_texts(chunk.id)[int(conv.table.position[row]) - chunk.start]
        assert shown == expected


def test_prune_then_rebuild_hides_chunk_and_marks_the_gap(view):
    conv = make_conv()
    beta, gamma = chunk_with(conv, "beta"), chunk_with(conv, "gamma")
    focus_attention(conv, gamma)
    show(view, conv)
    conv.prune_chunk(beta)
    view.rebuild()
    view.flush()
    assert "beta" not in view.toPlainText()
    assert "1 chunk pruned here" in view.toPlainText()
    conv.resurrect([beta], brightness=10000, pin=True)
    view.rebuild()
    text = view.toPlainText()
    assert "pruned here" not in text
    assert text.index("alpha") < text.index("beta") < text.index("gamma")


def test_chunk_at_maps_points_to_chunks(view):
    conv = make_conv()
    show(view, conv)
    for word in ("alpha", "beta", "gamma", "delta"):
        chunk_id = chunk_with(conv, word)
        assert view.finder.chunk_at(view.chunk_rect(chunk_id).center()) == chunk_id
    assert view.finder.chunk_at(QPoint(view.viewport().width() - 3, 3)) is None


def _action(menu, prefix: str):
    found = [a for a in menu.actions() if prefix in a.text()]
    assert found, [a.text() for a in menu.actions()]
    return found[0]


@pytest.mark.parametrize(
    ("label", "signal", "expected"),
    [
        ("Prune now", "prune_requested", lambda c: [c]),
        ("Pin", "pin_requested", lambda c: [c, True]),
        ("Merge with next", "merge_requested", lambda c: [c]),
    ],
)
def test_context_menu_actions_emit_intent(view, qtbot, label, signal, expected):
    conv = make_conv()
    alpha = chunk_with(conv, "alpha")
    show(view, conv)
    menu = view.context_menu_for(view.chunk_rect(alpha).center())
    action = _action(menu, label)
    assert action.isEnabled()
    with qtbot.wait_signal(getattr(view, signal), timeout=1000) as blocker:
        action.trigger()
    assert blocker.args == expected(alpha)
    assert alpha in conv.chunks and conv.chunks[alpha].live  # the view decides nothing


def test_unpin_offered_on_pinned_chunk(view, qtbot):
    conv = make_conv()
    alpha = chunk_with(conv, "alpha")
    conv.pin(alpha)
    show(view, conv)
    menu = view.context_menu_for(view.chunk_rect(alpha).center())
    with qtbot.wait_signal(view.pin_requested, timeout=1000) as blocker:
        _action(menu, "Unpin").trigger()
    assert blocker.args == [alpha, False]


def test_merge_disabled_on_last_chunk_of_turn(view):
    conv = make_conv()
    delta = chunk_with(conv, "delta")
    show(view, conv)
    menu = view.context_menu_for(view.chunk_rect(delta).center())
    assert not _action(menu, "Merge with next").isEnabled()


def test_system_prompt_offers_no_chunk_actions(view, qtbot):
    conv = make_conv()
    show(view, conv)
    block = view.document().findBlockByNumber(1)  # the prompt text under its label
    geo = view.blockBoundingGeometry(block).translated(view.contentOffset())
    point = QPoint(int(geo.left() + 20), int(geo.center().y()))
    assert view.finder.chunk_at(point) is None
    menu = view.context_menu_for(point)
    texts = [a.text() for a in menu.actions()]
    assert not any(word in t for t in texts for word in ("Prune", "Pin", "Merge"))
    with qtbot.assert_not_emitted(view.prune_requested), qtbot.assert_not_emitted(view.pin_requested):
        for action in menu.actions():
            if action.isEnabled():
                action.trigger()


def test_tooltip_describes_chunk(view):
    conv = make_conv()
    gamma = chunk_with(conv, "gamma")
    show(view, conv)
    tip = view.tips.for_chunk(gamma)
    chunk = conv.chunks[gamma]
    number = list(conv.turns).index(chunk.turn_id) + 1
    assert tip.startswith(f"Message {number} · Assistant · paragraph {chunk.chunk_index + 1}")
    assert f"{chunk.token_count:,} tokens" in tip and "peak brightness" in tip


def test_tooltip_names_the_score_and_the_window_that_decide_pruning(view):
    conv = make_conv()
    conv.use_settings(conv.settings.replace(brightness_rule="decay", brightness_half_life=16,
                                            chunk_rank="mean", prune_keep_recent=10, prune_order="brightness"))
    alpha, delta = chunk_with(conv, "alpha"), chunk_with(conv, "delta")
    focus_attention(conv, alpha)
    show(view, conv)
    tip = view.tips.for_chunk(alpha)
    assert f"mean brightness {conv.chunk_peak(alpha):,}" in tip and "peak" not in tip
    assert "pruned last" not in tip  # the oldest chunk: attention alone keeps it
    assert "in the newest 10 tokens: pruned last" in view.tips.for_chunk(delta)
    conv.use_settings(conv.settings.replace(prune_order="age"))
    assert "pruned oldest first" in view.tips.for_chunk(delta)


def test_long_streamed_paragraph_stays_whole_for_the_user(view, qtbot):
    """A long answer streamed token by token: its text, token offsets and copy are
    those of one paragraph, however the view lays it out while it streams."""
    conv = make_conv()
    show(view, conv)
    conv.begin_turn("assistant")
    words = [(" " if i else "") + f"w{i}" for i in range(400)]
    for text in words:
        conv.append_token(5, text)
        view.append_streamed()
        view.flush()
    answer = "".join(words)
    plan = view.plan
    assert plan.length == view.document().characterCount() - 1
    units = view.toPlainText().replace("\u2029", "\n").encode("utf-16-le")
    for row, start, end in zip(plan.rows[-400:], plan.starts[-400:], plan.ends[-400:]):
        chunk = conv.chunks[int(conv.table.chunk_id[row])]
        expected = conv.chunk_texts(chunk.id)[int(conv.table.position[row]) - chunk.start]
        assert units[2 * start : 2 * end].decode("utf-16-le").replace("\n", "") == expected
    view.selectAll()
    assert answer in view.createMimeDataFromSelection().text()
    streamed = chunk_with(conv, "w399")
    assert view.chunk_rect(streamed) is not None
    conv.end_turn()
    view.rebuild()
    assert answer in view.toPlainText()
