"""The window names each failure in plain words, keeps the unsent message, loses no turn."""

from __future__ import annotations

import errno
import sqlite3

import pytest
from PySide6.QtCore import Qt

from halo_weave.app import TurnController
from halo_weave.settings import Settings
from halo_weave.store import ConversationStore
from halo_weave.ui.main_window import MainWindow, app_qsettings

from .helpers import build_conversation
from .test_store_damage import flip_chunk_text

CLOSED_PORT_URL = "http://127.0.0.1:9"
TURN_TIMEOUT_MS = 120_000


def make_window(qtbot, data_dir, **settings) -> MainWindow:
    values = dict(server_url=CLOSED_PORT_URL, autostart_server=False, max_new_tokens=8,
                  temperature=0.0, system_prompt="You are a helpful assistant.")
    values.update(settings)
    controller = TurnController(Settings.of(**values), data_dir, autostart=False)
    window = MainWindow(controller, app_qsettings(data_dir))
    qtbot.addWidget(window)
    window.show()
    return window


@pytest.fixture
def offline(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    window = make_window(qtbot, tmp_path)
    yield window
    if not window.controller.gate.closing:
        window.close()


@pytest.mark.parametrize("exc, title, words", [
    (sqlite3.OperationalError("database or disk is full"), "Disk full", "Free some space"),
    (OSError(errno.ENOSPC, "No space left on device"), "Disk full", "Free some space"),
    (sqlite3.OperationalError("attempt to write a readonly database"), "Cannot write there",
     "Choose another folder"),
    (OSError(errno.EROFS, "Read-only file system"), "Cannot write there", "Choose another folder"),
    (sqlite3.OperationalError("disk I/O error"), "Disk error", "halo-weave --check"),
    (sqlite3.OperationalError("unable to open database file"), "Cannot open the conversation file",
     "moved or deleted"),
    (MemoryError(), "Out of memory", "Close other programs"),
    (RecursionError("maximum recursion depth exceeded"), "Too deeply nested", "Simplify"),
    (UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"), "Text that cannot be stored",
     "not valid Unicode"),
])
def test_each_failure_is_named_with_what_to_do(offline, exc, title, words):
    offline.controller.signals.error.emit(exc, "Saving your message")
    shown = offline.messages.history[-1]
    assert shown.title == title and words in shown.text
    assert "still in the input box" in shown.text
    assert "Unexpected" not in shown.title and type(exc).__name__ not in shown.text
    assert offline.messages.dialog is not None  # serious: a dialog, not only the status bar


def test_damaged_file_opens_read_only_and_says_what_to_do(offline, tmp_path):
    path = tmp_path / "conversations" / "old.halo.db"
    path.parent.mkdir(exist_ok=True)
    build_conversation(path)
    with ConversationStore.open(path, create=False) as store:
        live = [c.id for c in store.load().live_chunks() if c.chunk_index >= 0]
    flip_chunk_text(path, live[0])
    before = path.read_bytes()
    assert offline.controller.files.open_conversation(path)
    shown = offline.messages.history[-1]
    assert shown.title == "Conversation file damaged"
    assert f"chunk {live[0]}" in shown.text and "read-only" in shown.text and "--check" in shown.text
    assert "read-only" in offline.controller.gate.input_block_reason()
    assert offline.controller.conv.turns  # the rest is shown
    offline.controller.files.open_conversation(None)  # moving on writes nothing into it
    assert path.read_bytes() == before


# ---------------------------------------------------------------------- with the real server
@pytest.fixture
def online(qtbot, tmp_path, monkeypatch, server):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    window = make_window(qtbot, tmp_path, server_url=server.url)
    controller = window.controller
    controller.start()
    qtbot.waitUntil(lambda: controller.link.state == "connected", timeout=60_000)
    qtbot.waitUntil(lambda: not controller.gate.input_block_reason(), timeout=60_000)
    yield window
    if not controller.gate.closing:
        window.close()


def send(window, qtbot, text: str) -> str:
    window.input.setPlainText(text)
    with qtbot.wait_signal(window.controller.signals.turn_finished, timeout=TURN_TIMEOUT_MS) as blocker:
        qtbot.keyClick(window.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not window.controller.gate.busy, timeout=10_000)
    return blocker.args[0]


def saved_turns(path) -> list[tuple]:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT turn_id, role, complete FROM turns ORDER BY turn_id").fetchall()
    finally:
        conn.close()


LONG = "\n\n".join(f"Paragraph {i}: " + "the harbour lights were counted one by one " * 40 for i in range(12))


@pytest.mark.slow
@pytest.mark.parametrize("failure, title", [("full", "Disk full"), ("read-only", "Cannot write there")])
def test_a_message_that_cannot_be_saved_goes_back_to_the_input(online, qtbot, failure, title):
    controller = online.controller
    assert send(online, qtbot, "Hello! Say hi.") in ("stop", "length")
    store = controller.session.store
    before = saved_turns(store.path)
    turns_in_memory = sorted(controller.conv.turns)
    if failure == "full":
        pages = store.conn.execute("PRAGMA page_count").fetchone()[0]
        store.conn.execute(f"PRAGMA max_page_count = {pages}")
    else:
        store.conn.execute("PRAGMA query_only = 1")
    assert send(online, qtbot, LONG) == "error"
    shown = [m for m in online.messages.history if m.serious][-1]
    assert shown.title == title and "still in the input box" in shown.text
    assert online.input.toPlainText() == LONG.strip()  # the unsent message is kept
    assert saved_turns(store.path) == before  # every committed turn is still there
    assert sorted(controller.conv.turns) == turns_in_memory  # and nothing unsaved is shown


@pytest.mark.slow
def test_a_huge_message_is_saved_on_a_thread_and_never_lost(online, qtbot):
    from halo_weave.ui.control.message import SAVE_ON_THREAD_TOKENS

    controller = online.controller
    reasons = []
    controller.signals.busy_changed.connect(lambda busy, reason: reasons.append(reason))
    huge = "\n\n".join(f"Note {i}: the tide tables for the harbour, copied by hand. " * 30 for i in range(120))
    send(online, qtbot, huge)  # far beyond the model's context: the answer fails, the message stays
    assert any(r.startswith("Saving your message (") for r in reasons), reasons
    rows = saved_turns(controller.session.store.path)
    assert rows and rows[0][1] == "user"
    user = controller.conv.turns[rows[0][0]]
    assert sum(controller.conv.chunks[c].token_count for c in user.chunk_ids) > SAVE_ON_THREAD_TOKENS
    text = "".join(controller.conv.chunk_text(c.id) for c in controller.conv.content_chunks(user.turn_id))
    assert text == huge.strip()
