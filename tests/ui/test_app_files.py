"""File menu, start-up and errors a user can meet without a model answering.

No server is needed here: the app points at a closed loopback port with autostart off,
which is itself a case the window must explain ("No model server").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog

from halo_weave.app import build_parser
from halo_weave.settings import Settings
from halo_weave.store import ConversationStore, list_conversations
from halo_weave.ui.conversation_picker import ConversationPicker

@pytest.fixture
def window(offline_window):
    return offline_window


def _seed_conversation(path, words: str) -> None:
    store = ConversationStore.open(path)
    conv = store.load(Settings())
    pieces = [" " + w for w in words.split()]
    turn = conv.add_turn("user", list(range(100, 100 + len(pieces))), pieces)
    store.save_turn(conv, turn)
    store.close()


def test_no_server_is_explained_and_input_says_why(window, qtbot):
    controller = window.controller
    controller.start()
    qtbot.waitUntil(lambda: controller.link.state == "offline", timeout=30_000)
    assert window.stats_bar.connection_state() == "offline"
    assert any("server" in m.text.lower() for m in window.messages.history if m.serious)
    assert window.input.isReadOnly() and not window.send_button.isEnabled()
    assert "server" in window.reason.text().lower()
    assert controller.conv is not None, "the conversation is open even without a server"


def test_menus_show_shortcuts():
    parser_help = build_parser().format_help()
    for option in ("--server-url", "--model", "--data-dir", "--conversation", "--no-autostart"):
        assert option in parser_help


def test_menu_shortcuts_are_shown(window):
    shortcuts = {a.text().replace("&", ""): a.shortcut().toString() for a in window.findChildren(type(window.menus.new_action))}
    assert shortcuts["New conversation"] == "Ctrl+N"
    assert shortcuts["Open conversation…"] == "Ctrl+O"
    assert shortcuts["Export JSON…"] == "Ctrl+E"
    assert shortcuts["Settings…"] == "Ctrl+,"
    assert shortcuts["Stop generating"] == "Esc"
    assert shortcuts["Send message"] == "Return"


def test_help_runs_as_console_script():
    script = Path(sys.executable).with_name("halo-weave")  # installed beside this interpreter
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    assert "--no-autostart" in result.stdout and "--conversation FILE" in result.stdout


def test_new_and_open_conversations(window, qtbot, tmp_path):
    controller = window.controller
    controller.start()
    first = controller.files.path
    qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert controller.files.path != first
    _seed_conversation(first, "my tea notes about oolong")
    listed = [s.path for s in list_conversations(tmp_path)]
    assert first in listed

    picker = ConversationPicker(tmp_path, controller.files.path, window)
    titles = [picker.list.item(i).text() for i in range(picker.list.count())]
    assert any("my tea notes about oolong" in t for t in titles)
    row = next(i for i, t in enumerate(titles) if "oolong" in t)
    picker.list.setCurrentRow(row)
    picker.accept()
    assert picker.result() == QDialog.DialogCode.Accepted
    assert controller.files.open_conversation(picker.selected_path())
    assert controller.files.path == first
    assert "oolong" in window.heatmap.toPlainText()


def test_refused_database_is_explained_and_app_keeps_running(window, qtbot, tmp_path):
    bogus = tmp_path / "not-a-conversation.halo.db"
    bogus.write_bytes(b"this is not sqlite at all" * 10)
    before = bogus.read_bytes()
    controller = window.controller
    controller.start(bogus)
    assert controller.conv is not None and controller.files.path != bogus, "a new conversation opened instead"
    assert bogus.read_bytes() == before, "the refused file is untouched"
    serious = [m for m in window.messages.history if m.serious]
    assert serious and "not-a-conversation" in serious[0].text
    assert window.messages.dialog is not None


def test_broken_import_shows_dialog_and_imports_nothing(window, qtbot, tmp_path):
    controller = window.controller
    controller.start()
    count = len(list_conversations(tmp_path))
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"format": "halo-weave", "version": 1, "turns": "nope"}))
    with qtbot.wait_signal(controller.signals.error, timeout=30_000):
        controller.files.import_json(broken)
    qtbot.waitUntil(lambda: not controller.gate.busy, timeout=10_000)
    assert len(list_conversations(tmp_path)) == count
    assert window.messages.dialog is not None
    # Not necessarily the last message: the closed port's connection error can come after it.
    assert any("broken.json" in m.text for m in window.messages.history)
