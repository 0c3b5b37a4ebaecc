"""Find in the chat, as a user does it: Ctrl+F, words, Enter and Shift+Enter through the
matches (outlined in the heatmap), and a pruned paragraph that holds the words offered
and brought back.  A window on a closed port (finding needs no model); the conversation
is a real SQLite file in ``tmp_path``."""

from __future__ import annotations

import re

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage

from halo_weave.settings import Settings
from halo_weave.store import ConversationStore, new_conversation_path
from halo_weave.ui import colors

MESSAGES = [
    ("user", "I fly to Lisbon on the third of March, early in the morning."),
    ("assistant", "Lovely! Lisbon in March is mild.\n\nPack a light jacket for the evenings by the river."),
    ("user", "What should I eat there?"),
    ("assistant", "Try pastel de nata in Belém.\n\nGrilled sardines are a Lisbon classic in summer."),
    ("user", "And a day trip?"),
    ("assistant", "Sintra is an easy train ride away, with palaces in the hills."),
]


def write_chat(data_dir):
    """:data:`MESSAGES` in a file, with the sardines paragraph pruned."""
    path = new_conversation_path(data_dir)
    with ConversationStore.open(path) as store:
        conv = store.load(Settings.of(min_chunk_tokens=4))
        for role, text in MESSAGES:
            pieces = re.findall(r"\n+|[^\S\n]*\S+", text)
            store.save_turn(conv, conv.add_turn(role, list(range(100, 100 + len(pieces))), pieces))
        answer = list(conv.turns)[3]
        sardines = next(c for c in conv.content_chunks(answer) if "sardines" in conv.chunk_text(c.id))
        store.save_chunks(conv, conv.prune_chunk(sardines.id))
    return path, sardines.id


def _find_pixels(view) -> int:
    """Pixels of the heatmap painted in the find colour's hue (the matches' outlines)."""
    image = view.viewport().grab().toImage().convertToFormat(QImage.Format.Format_RGB32)
    rows = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine())
    bgr = rows[:, : image.width() * 4].reshape(image.height(), image.width(), 4)[..., :3].astype(int)
    r, g, b = bgr[..., 2], bgr[..., 1], bgr[..., 0]
    want = colors.FIND_RGB
    return int(((abs(r - want[0]) < 40) & (abs(g - want[1]) < 40) & (abs(b - want[2]) < 40)).sum())


def test_ctrl_f_finds_steps_highlights_and_brings_a_pruned_paragraph_back(offline_window, qtbot, tmp_path):
    window = offline_window
    path, sardines = write_chat(tmp_path)
    assert window.controller.files.open_conversation(path)
    view, bar = window.heatmap, window.find_bar
    assert not bar.isVisible() and _find_pixels(view) == 0

    qtbot.keyClick(window.heatmap, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert bar.isVisible() and bar.edit.hasFocus()
    qtbot.keyClicks(bar.edit, "LISBON")
    qtbot.waitUntil(lambda: bar.count_label.text() == "1 of 2", timeout=3000)
    first = view.search.matches[0]
    assert view.document().toPlainText()[first[0]:first[1]] == "Lisbon", "case-insensitive"
    view.viewport().repaint()
    assert _find_pixels(view) > 20, "the matches are outlined in the heatmap"

    qtbot.keyClick(bar.edit, Qt.Key.Key_Return)
    assert bar.count_label.text() == "2 of 2"
    qtbot.keyClick(bar.edit, Qt.Key.Key_Return)
    assert bar.count_label.text() == "1 of 2", "round the end"
    qtbot.keyClick(bar.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert bar.count_label.text() == "2 of 2"

    # The pruned paragraph holds the words too: offered, and brought back on a click.
    assert bar.pruned_button.isVisible() and bar.pruned_button.text() == "+ 1 pruned paragraph…"
    offer = [a for a in bar.pruned_button.menu().actions() if "sardines" in a.text().lower()]
    assert offer and offer[0].text().startswith("Message 4 · Assistant · paragraph 2 — Grilled sardines")
    offer[0].trigger()
    conv = window.controller.conv
    assert conv.chunks[sardines].live, "brought back into the context"
    qtbot.waitUntil(lambda: bar.count_label.text() == "3 of 3", timeout=3000)
    start, end = view.search.matches[view.search.current]
    assert "Lisbon classic" in view.document().toPlainText()[start:end + 10], "the bar goes to it"
    assert not bar.pruned_button.isVisible()

    qtbot.keyClick(bar.edit, Qt.Key.Key_Escape)
    assert not bar.isVisible() and view.search.matches == []
    view.viewport().repaint()
    assert _find_pixels(view) == 0, "closing the bar takes the outlines away"
    assert not window.controller.turn.generating


def test_words_found_only_in_the_graveyard_are_listed_there(offline_window, qtbot, tmp_path):
    window = offline_window
    path, sardines = write_chat(tmp_path)
    assert window.controller.files.open_conversation(path)
    bar = window.find_bar
    bar.open()
    qtbot.keyClicks(bar.edit, "sardines")
    qtbot.waitUntil(lambda: bar.count_label.text() == "not in the chat shown", timeout=3000)
    assert bar.pruned_button.text() == "+ 1 pruned paragraph…"
    show_all = bar.pruned_button.menu().actions()[-1]
    assert show_all.text() == "Show all 1 in the graveyard"
    show_all.trigger()
    model = window.graveyard.model()
    assert window.graveyard.isVisible() and model.rowCount() == 1
    assert model.index(0).data(model.ChunkIdRole) == sardines
