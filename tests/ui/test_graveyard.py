"""The graveyard lists pruned chunks, newest first; a click or Enter asks to resurrect one."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from PySide6.QtCore import Qt

from halo_weave.conversation import Conversation
from halo_weave.settings import Settings
from halo_weave.ui.graveyard import GraveyardModel, GraveyardPanel


def pruned_conversation() -> Conversation:
    """Three exchanges with distinct words, pruned so only the last fits."""
    conv = Conversation(Settings.of(min_chunk_tokens=4))
    words = ["apple", "banana", "cherry", "damson", "elder", "fig"]
    for turn, word in enumerate(words):
        texts = [(" " if i else "") + word for i in range(8)] + ["\n\n"] + [" more"] * 8
        conv.add_turn("user" if turn % 2 == 0 else "assistant", list(range(len(texts))), texts)
    conv.table.brightness[:] = conv.table.position  # older = dimmer
    conv.prune_to_fit(40)
    return conv


@pytest.fixture
def conv() -> Conversation:
    return pruned_conversation()


@pytest.fixture
def panel(qtbot, conv):
    widget = GraveyardPanel()
    qtbot.addWidget(widget)
    widget.resize(360, 500)
    widget.set_rows(conv.graveyard(), conv.chunk_text)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def test_rows_newest_first_with_details(panel, conv):
    model = panel.model()
    pruned = conv.graveyard()
    assert model.rowCount() == len(pruned) > 2
    ids = [model.index(i).data(GraveyardModel.ChunkIdRole) for i in range(model.rowCount())]
    assert ids == [c.id for c in pruned]
    starts = [conv.chunks[i].start for i in ids]
    assert starts == sorted(starts, reverse=True)
    first = pruned[0]
    meta = model.index(0).data(Qt.ItemDataRole.DisplayRole)
    assert meta == f"Message ? · {first.role.title()} · paragraph {first.chunk_index + 1}"
    tip = model.index(0).data(Qt.ItemDataRole.ToolTipRole)
    assert f"{first.token_count} tokens · brightness when pruned: {first.brightness_at_prune:,}" in tip
    assert model.index(0).data(GraveyardModel.PreviewRole) == " ".join(conv.chunk_text(first.id).split())
    assert f"{len(pruned)} chunks" in panel.count_label.text()


def test_click_requests_resurrection_of_that_chunk(panel, qtbot, conv):
    view = panel.list_view()
    index = panel.model().index(1)
    expected = index.data(GraveyardModel.ChunkIdRole)
    rect = view.visualRect(index)
    with qtbot.wait_signal(panel.resurrect_requested, timeout=1000) as blocker:
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert blocker.args == [expected]
    assert not conv.chunks[expected].live  # the panel only asks


def test_enter_requests_resurrection(panel, qtbot):
    view = panel.list_view()
    view.setFocus()
    index = panel.model().index(2)
    view.setCurrentIndex(index)
    with qtbot.wait_signal(panel.resurrect_requested, timeout=1000) as blocker:
        qtbot.keyClick(view, Qt.Key.Key_Return)
    assert blocker.args == [index.data(GraveyardModel.ChunkIdRole)]


def test_arrow_keys_do_not_resurrect(panel, qtbot):
    view = panel.list_view()
    view.setFocus()
    view.setCurrentIndex(panel.model().index(0))
    with qtbot.assert_not_emitted(panel.resurrect_requested):
        qtbot.keyClick(view, Qt.Key.Key_Down)


def test_filter_by_preview_text(panel, qtbot, conv):
    target = next(c for c in conv.graveyard() if "banana" in conv.chunk_text(c.id))
    qtbot.keyClicks(panel.filter_edit, "banana")
    qtbot.waitUntil(lambda: panel.model().rowCount() == 1, timeout=2000)
    assert panel.model().index(0).data(GraveyardModel.ChunkIdRole) == target.id
    assert "1 shown" in panel.count_label.text()
    panel.set_filter("")
    assert panel.model().rowCount() == len(conv.graveyard())


def test_filter_by_role_and_turn(panel, conv):
    panel.set_filter("user")
    assert panel.model().rowCount() == sum(1 for c in conv.graveyard() if c.role == "user")
    first = conv.graveyard()[0]
    panel.set_rows(conv.graveyard(), conv.chunk_text, numbers={t: n for n, t in enumerate(conv.turns, 1)})
    number = list(conv.turns).index(first.turn_id) + 1
    panel.set_filter(f"message {number} paragraph {first.chunk_index + 1}")
    ids = [panel.model().index(i).data(GraveyardModel.ChunkIdRole) for i in range(panel.model().rowCount())]
    assert first.id in ids


def test_previews_are_loaded_lazily(qtbot):
    calls: list[int] = []

    def preview(chunk_id: int) -> str:
        calls.append(chunk_id)
        return f"text {chunk_id}"

    from halo_weave.conversation import Chunk

    rows = [Chunk(i, i // 4, i % 4, "user", start=10_000 - i, token_count=64, live=False,
                  brightness_at_prune=i) for i in range(10_000)]
    panel = GraveyardPanel()
    qtbot.addWidget(panel)
    panel.resize(360, 400)
    panel.set_rows(rows, preview)
    panel.show()
    qtbot.waitExposed(panel)
    qtbot.waitUntil(lambda: len(calls) > 0, timeout=2000)
    assert panel.model().rowCount() == 10_000
    assert len(set(calls)) < 100  # only rows on screen


def test_preview_errors_do_not_break_the_list(qtbot, conv):
    def broken(chunk_id: int) -> str:
        raise OSError("database is gone")

    panel = GraveyardPanel()
    qtbot.addWidget(panel)
    panel.set_rows(conv.graveyard(), broken)
    assert panel.model().index(0).data(GraveyardModel.PreviewRole) == "(text unavailable)"


def test_collapse_button_asks_to_hide(panel, qtbot):
    with qtbot.wait_signal(panel.close_requested, timeout=1000):
        qtbot.mouseClick(panel.close_button, Qt.MouseButton.LeftButton)


def test_filter_index_loads_previews_in_one_bulk_call(qtbot, conv):
    calls: list[list[int]] = []

    def previews(ids):
        calls.append(list(ids))
        return {i: conv.chunk_text(i) for i in ids}

    def one(chunk_id: int) -> str:
        raise AssertionError("the bulk loader should have been used")

    panel = GraveyardPanel()
    qtbot.addWidget(panel)
    panel.set_rows(conv.graveyard(), one, previews)
    panel.set_filter("banana")
    assert len(calls) == 1 and sorted(calls[0]) == sorted(c.id for c in conv.graveyard())
    assert panel.model().rowCount() == 1
    assert "banana" in panel.model().index(0).data(GraveyardModel.PreviewRole)


def _painted_list(panel):
    view = panel.list_view()
    view.viewport().repaint()
    return view.viewport().grab().toImage()


def test_a_row_shows_what_its_tooltip_says_after_the_rows_change(qtbot):
    """The same chunk id with another brightness and text (another conversation opened,
    or the chunk pruned again): the row is drawn from the new values, as its tooltip is."""
    from halo_weave.ui.graveyard import GraveRow

    def shown(row, text):
        widget = GraveyardPanel()
        qtbot.addWidget(widget)
        widget.resize(360, 300)
        widget.set_rows([row], lambda _id: text)
        widget.show()
        qtbot.waitExposed(widget)
        return widget

    panel = shown(GraveRow(5, 3, "user", 0, 12, 9_646), "Packing for Kyoto in April")
    _painted_list(panel)
    later = GraveRow(5, 3, "user", 0, 12, 7_692)
    panel.set_rows([later], lambda _id: "Tuna stays with Ada")
    tip = panel.model().index(0).data(Qt.ItemDataRole.ToolTipRole)
    assert "brightness when pruned: 7,692" in tip and "Tuna stays with Ada" in tip
    fresh = shown(later, "Tuna stays with Ada")
    assert _painted_list(panel) == _painted_list(fresh), "the row still shows the old brightness or text"


def test_rows_read_like_the_chat_never_scroll_sideways_and_show_no_markdown_marks(qtbot):
    """A newcomer saw "T12 · S0 · ☀ 9,607", "```python # Define…", a sideways scroll bar
    and rows cut at the bottom; the context menu numbered the same chunk "Chunk 1 · turn 0"."""
    from halo_weave.ui import heatmap_menu
    from halo_weave.ui.heatmap import HeatmapView

    conv = Conversation(Settings.of(min_chunk_tokens=4))
    texts = {"user": "How do I define a function in Python? " * 3,
             "assistant": "```python\n# Define a function\ndef greet(name):\n    return f'hi {name}'\n```"}
    for turn in range(4):
        role = "user" if turn % 2 == 0 else "assistant"
        pieces = [p for p in texts[role].replace("\n", " \n").split(" ") if p]
        conv.add_turn(role, list(range(len(pieces))), [(" " if i else "") + p for i, p in enumerate(pieces)])
    view = HeatmapView()
    qtbot.addWidget(view)
    view.resize(600, 400)
    view.set_conversation(conv)
    view.show()
    qtbot.waitExposed(view)
    answer = list(conv.turns)[1]
    chunk = conv.content_chunks(answer)[0]
    view.scroll_to_chunk(chunk.id)
    menu = view.context_menu_for(view.chunk_rect(chunk.id).center())
    menu_title = menu.actions()[0].text()
    assert menu_title == "Message 2 · Assistant · paragraph 1"

    conv.prune_chunk(chunk.id)
    panel = GraveyardPanel()
    qtbot.addWidget(panel)
    panel.resize(260, 300)  # narrower than a row's text
    panel.show_graveyard_of(conv)
    panel.show()
    qtbot.waitExposed(panel)
    model, view_list = panel.model(), panel.list_view()
    row = model.index(model.row_of(chunk.id))
    assert row.data(Qt.ItemDataRole.DisplayRole).startswith(menu_title), "the same words as the context menu"
    assert row.data(GraveyardModel.PreviewRole).startswith("code (python): Define a function def greet(name):")
    assert "```" not in row.data(GraveyardModel.PreviewRole) and "#" not in row.data(GraveyardModel.PreviewRole)
    assert "☀" not in row.data(Qt.ItemDataRole.DisplayRole)
    assert not view_list.horizontalScrollBar().isVisible() and view_list.horizontalScrollBar().maximum() == 0
    metrics = view_list.fontMetrics()
    assert view_list.visualRect(row).height() >= 2 * metrics.height() + metrics.height() // 2, "two whole lines"
    assert heatmap_menu.link_tooltip(conv, list(conv.turns)[2], chunk.id).endswith(menu_title + ")")
