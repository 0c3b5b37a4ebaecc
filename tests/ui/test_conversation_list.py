"""The conversation list beside the chat: titles, last used first, search, rename, delete
with undo, the open one highlighted.  Real SQLite files in ``tmp_path``; no model needed
(the app points at a closed port)."""

from __future__ import annotations


import pytest
from PySide6.QtCore import Qt

from halo_weave.storage.library import Library
from halo_weave.store import list_conversations

from window_helpers import offline_window, write_conversation


@pytest.fixture
def data(tmp_path):
    paths = {
        "kyoto": write_conversation(tmp_path, ("user", "Packing for Kyoto in April"),
                                    ("assistant", "Bring an umbrella and comfortable shoes"), updated=1000.0),
        "cat": write_conversation(tmp_path, ("user", "Leaving my cat Tuna with Ada"),
                                  ("assistant", "Write down the feeding times"), updated=3000.0),
        "soup": write_conversation(tmp_path, ("user", "A simple vegetable soup recipe"),
                                   ("assistant", "Leeks, carrots and a bay leaf"), updated=2000.0),
    }
    return tmp_path, paths


@pytest.fixture
def window(qtbot, data, monkeypatch):
    tmp_path, paths = data
    win = offline_window(qtbot, tmp_path, monkeypatch)
    win.controller.files.open_conversation(paths["soup"])
    yield win
    win.close()


def row_of(win, title_start: str) -> int:
    titles = win.conversation_list.titles()
    return next(i for i, t in enumerate(titles) if t.startswith(title_start))


def test_list_shows_titles_last_used_first_and_highlights_the_open_one(window, data):
    titles = window.conversation_list.titles()
    # The soup conversation was just opened, so it is the last used; then by last change.
    assert titles[0].startswith("A simple vegetable soup")
    assert titles[1].startswith("Leaving my cat Tuna") and titles[2].startswith("Packing for Kyoto")
    assert window.conversation_list.current_row() == 0
    item = window.conversation_list.list.item(0)
    assert item.font().bold() and window.conversation_list.list.currentRow() == 0
    # Each shows when it last changed: opening the soup moved it up, not its time.
    from halo_weave.ui.conversation_list import when

    assert item.text().split("\n")[1].startswith(when(2000.0))


def test_clicking_a_conversation_opens_it(window, data, qtbot):
    _, paths = data
    lst = window.conversation_list
    item = lst.list.item(row_of(window, "Packing for Kyoto"))
    rect = lst.list.visualItemRect(item)
    qtbot.mouseClick(lst.list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert window.controller.files.path == paths["kyoto"]
    assert "umbrella" in window.heatmap.toPlainText()
    assert lst.titles()[0].startswith("Packing for Kyoto"), "now the last used"
    assert lst.current_row() == 0


def test_search_finds_text_inside_answers(window, qtbot):
    lst = window.conversation_list
    qtbot.keyClicks(lst.search, "BAY LEAF")
    qtbot.waitUntil(lambda: len(lst.titles()) == 1, timeout=2000)
    assert lst.titles()[0].startswith("A simple vegetable soup")
    lst.search.clear()
    qtbot.keyClicks(lst.search, "no such words")
    qtbot.waitUntil(lambda: lst.titles() == [], timeout=2000)
    assert lst.empty_label.isVisible()
    lst.search.clear()
    qtbot.waitUntil(lambda: len(lst.titles()) == 3, timeout=2000)


def test_rename_shows_and_keeps_the_new_title(window, data):
    tmp_path, paths = data
    lst = window.conversation_list
    lst.rename(paths["cat"], "  Tuna's   holiday ")
    assert "Tuna's holiday" in lst.titles()
    assert any(e.title == "Tuna's holiday" for e in Library(tmp_path).entries()), "stored in the file"
    lst.rename(paths["cat"], "")  # back to the first message
    assert any(t.startswith("Leaving my cat Tuna") for t in lst.titles())
    # The open conversation can be renamed while the app holds it open.
    lst.rename(paths["soup"], "Soup")
    assert lst.titles()[0] == "Soup" and lst.current_row() == 0


def test_delete_moves_to_trash_and_undo_brings_it_back(window, data, qtbot):
    tmp_path, paths = data
    lst = window.conversation_list
    assert window.delete_conversation(paths["kyoto"], "Packing for Kyoto in April")
    assert not paths["kyoto"].exists()
    assert not any(t.startswith("Packing for Kyoto") for t in lst.titles())
    assert lst.undo_bar.isVisible() and "Packing for Kyoto" in lst.undo_label.text()
    assert list((tmp_path / "trash").glob("*.halo.db")), "kept in the trash folder"
    qtbot.mouseClick(lst.undo_button, Qt.MouseButton.LeftButton)
    assert paths["kyoto"].exists()
    assert any(t.startswith("Packing for Kyoto") for t in lst.titles())
    assert not lst.undo_bar.isVisible()


def test_deleting_the_open_conversation_opens_another(window, data):
    _, paths = data
    assert window.delete_conversation(paths["soup"], "soup")
    assert window.controller.files.path == paths["cat"], "the most recently used of the others"
    assert window.conversation_list.titles()[0].startswith("Leaving my cat Tuna")
    assert window.conversation_list.current_row() == 0
    assert paths["soup"] not in [s.path for s in list_conversations(data[0])]


def test_the_rename_dialog_shows_a_long_title_whole(window, qtbot):
    title = "Packing for Kyoto in April with an umbrella and comfortable shoes for rainy days"
    dialog = window.conversation_list.rename_dialog(title)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    from PySide6.QtWidgets import QLineEdit

    field = dialog.findChild(QLineEdit)
    assert field.width() >= field.fontMetrics().horizontalAdvance(title), "the whole title is visible"
    dialog.reject()
