"""Steps the window tests against other servers share (tests/ui/test_app_other_servers.py,
tests/ui/test_real_servers_window.py): the same user actions, the same checks, whatever
server answers."""

from __future__ import annotations

import json

from PySide6.QtCore import Qt

from halo_weave.app import TurnController
from halo_weave.settings import Settings
from halo_weave.ui.control import connection as connection_mod
from halo_weave.ui.main_window import MainWindow, app_qsettings

from test_app import LONG_MESSAGE, SHORT_SYSTEM_PROMPT, TURN_TIMEOUT_MS

CAT = "My cat is called Mochi and she likes boxes."


def text_of(conv, turn_id: int) -> str:
    """A message's text as its live chunks hold it."""
    return "".join(conv.chunk_text(c.id) for c in conv.content_chunks(turn_id))


def small_budget(url: str, **overrides) -> Settings:
    """Greedy, short answers and a 150-token budget: a few messages make it prune."""
    values = dict(server_url=url, autostart_server=False, temperature=0.0, max_new_tokens=10,
                  max_context_tokens=150, min_chunk_tokens=16, system_prompt=SHORT_SYSTEM_PROMPT)
    return Settings.of(**{**values, **overrides})


def cat_chunks_pruned(conv) -> list:
    """The user's chunks about the cat that are in the graveyard."""
    return [ch for ch in conv.graveyard() if ch.role == "user" and "Mochi" in conv.chunk_text(ch.id)]


def prune_the_cat(app) -> list:
    """Long messages until the cat's chunk is pruned (at most four); its pruned chunks.

    The tiny model answers "Mochi…" to anything, so a message may bring the cat back for
    its own exchange; it then goes with a later prune."""
    conv = app.conv
    for _ in range(4):
        assert app.say(LONG_MESSAGE) in ("stop", "length")
        if cat_chunks_pruned(conv):
            break
    pruned = conv.graveyard()
    assert pruned and app.window.graveyard.model().total_count() == len(pruned), "the graveyard shows them"
    cats = cat_chunks_pruned(conv)
    assert cats, "the user's chunk about the cat was pruned"
    return cats


def stop_mid_answer(app, qtbot, *, after: int, timeout_ms: int = 30_000) -> str:
    """Esc once ``after`` tokens of a long answer streamed: "aborted", the partial answer
    kept (returned), far short of the 200 allowed."""
    c, window = app.controller, app.window
    c.apply_settings(c.settings.replace(max_new_tokens=200))
    window.input.setPlainText("Write a long story about a dragon who loves tea.")
    qtbot.keyClick(window.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: c.turn.generating and c.session.answer.streamed >= after, timeout=TURN_TIMEOUT_MS)
    with qtbot.wait_signal(c.signals.turn_finished, timeout=timeout_ms) as blocker:
        qtbot.keyClick(window.input, Qt.Key.Key_Escape)
    assert blocker.args == ["aborted"]
    partial = text_of(c.conv, max(c.conv.turns))
    assert partial.strip() and c.session.answer.streamed < 200
    qtbot.waitUntil(lambda: not c.gate.busy, timeout=10_000)
    return partial


def exported_text(controller, path) -> str:
    """File → Export to ``path``: the whole conversation's text as the file holds it."""
    assert controller.files.export_json(path)
    return "".join(json.loads(path.read_text(encoding="utf-8"))["tokens"]["text"])


def window_on_default_url(qtbot, tmp_path, monkeypatch, url: str, **settings):
    """A window whose server sits on "the default URL", with the bundled server allowed to
    start; ``(controller, window, started)``: ``started`` records any bundled-server start."""
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    monkeypatch.setattr(connection_mod, "DEFAULT_SERVER_URL", url)
    values = dict(server_url=url, autostart_server=True, temperature=0.0, max_new_tokens=24,
                  system_prompt=SHORT_SYSTEM_PROMPT)
    controller = TurnController(Settings.of(**{**values, **settings}), tmp_path, autostart=True)
    window = MainWindow(controller, app_qsettings(tmp_path))
    qtbot.addWidget(window)
    window.show()
    started = []
    monkeypatch.setattr(controller.link.connection, "start_bundled_server", lambda: started.append(True))
    return controller, window, started


def used_not_replaced(qtbot, controller, window, started, status: str) -> str:
    """The server on the default URL is connected, not replaced by the bundled one, its
    ``status`` shown; one message answered.  The finish reason."""
    controller.start()
    qtbot.waitUntil(lambda: controller.link.state == "connected" and not controller.gate.input_block_reason(),
                    timeout=60_000)
    assert not started and controller.link.server is None, "the bundled server was not started"
    first_line = window.stats_bar.connection_label.toolTip().splitlines()[0]
    assert status in first_line, "the server's kind after its model's name: " + first_line
    window.input.setPlainText("Name three fruits.")
    with qtbot.wait_signal(controller.signals.turn_finished, timeout=TURN_TIMEOUT_MS) as blocker:
        qtbot.keyClick(window.input, Qt.Key.Key_Return)
    assert text_of(controller.conv, max(controller.conv.turns)).strip(), "the model answered"
    return blocker.args[0]
