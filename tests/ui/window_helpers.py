"""Set-up shared by the window tests: a window on a closed port (no model), and
conversation files written straight into a data directory (real SQLite)."""

from __future__ import annotations

from pathlib import Path

from halo_weave.app import TurnController
from halo_weave.settings import Settings
from halo_weave.store import ConversationStore, new_conversation_path
from halo_weave.ui.main_window import MainWindow, app_qsettings

#: Nothing listens there: the window runs without a model (and never starts one).
CLOSED_PORT_URL = "http://127.0.0.1:9"


def offline_window(qtbot, data_dir: Path, monkeypatch, **settings) -> MainWindow:
    """A shown main window whose data lives in ``data_dir``, pointed at a closed port
    with no bundled server (``settings`` override the rest)."""
    monkeypatch.setenv("HALO_WEAVE_HOME", str(data_dir))
    values = dict(server_url=CLOSED_PORT_URL, autostart_server=False, **settings)
    controller = TurnController(Settings.of(**values), data_dir, autostart=False)
    window = MainWindow(controller, app_qsettings(data_dir))
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    return window


def write_conversation(data_dir: Path, *messages: tuple[str, str] | str, updated: float | None = None) -> Path:
    """A conversation file with ``messages`` ((role, text), or a bare text from the user),
    split into one piece per word; ``updated``: its last-used time."""
    path = new_conversation_path(data_dir)
    with ConversationStore.open(path) as store:
        conv = store.load(Settings())
        for message in messages:
            role, text = ("user", message) if isinstance(message, str) else message
            pieces = [(" " if i else "") + w for i, w in enumerate(text.split(" "))]
            store.save_turn(conv, conv.add_turn(role, list(range(100, 100 + len(pieces))), pieces))
        if updated is not None:
            store.set_meta("updated_at", updated)
    return path
