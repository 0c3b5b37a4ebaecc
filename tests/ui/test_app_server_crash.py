"""The built-in model server crashes: the window says it stopped and how, keeps what the
user was typing, starts the server again once, and leaves it stopped after a second
crash within a minute, saying so.  Its whole output is in the log folder."""

from __future__ import annotations

import os
import signal

import pytest
from PySide6.QtCore import Qt

from halo_weave.app import TurnController
from halo_weave.logs import SERVER_LOG
from halo_weave.settings import Settings, log_dir
from halo_weave.ui.control import connection as connection_mod
from halo_weave.ui.main_window import MainWindow, app_qsettings

pytestmark = pytest.mark.slow

NOTHING_LISTENS = "http://127.0.0.1:9"
START_TIMEOUT_MS = 300_000


def _stopped_messages(window) -> list:
    return [m for m in window.messages.history if m.title == "Built-in model server stopped"]


def test_a_crashed_builtin_server_is_said_dead_restarted_once_then_left(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    monkeypatch.setattr(connection_mod, "DEFAULT_SERVER_URL", NOTHING_LISTENS)
    settings = Settings.of(server_url=NOTHING_LISTENS, autostart_server=True, max_new_tokens=6)
    controller = TurnController(settings, tmp_path, autostart=True)
    window = MainWindow(controller, app_qsettings(tmp_path))
    qtbot.addWidget(window)
    window.show()
    states: list[tuple[str, str]] = []
    controller.signals.connection_changed.connect(lambda state, detail: states.append((state, detail)))
    try:
        controller.start()
        qtbot.waitUntil(lambda: not controller.gate.input_block_reason(), timeout=START_TIMEOUT_MS)
        first = controller.link.server
        window.input.setPlainText("What is the capital of France?")

        os.kill(first.process.pid, signal.SIGSEGV)  # what llama.cpp's AMX defect does to it
        qtbot.waitUntil(lambda: bool(_stopped_messages(window)), timeout=30_000)
        message = _stopped_messages(window)[0]
        assert message.text.startswith("The built-in model server stopped (signal 11).")
        assert "being started again" in message.text and "unsent message" in message.text
        assert "Fatal Python error: Segmentation fault" in message.text, "its last lines say what died"
        assert message.log_path.endswith(SERVER_LOG) and message.serious
        assert window.messages.dialog is not None
        assert ("stopped", "The built-in model server stopped (signal 11)") in states
        assert window.input.toPlainText() == "What is the capital of France?"
        assert not any("Cannot reach" in m.text for m in window.messages.history)

        # Restarted once: a new process answers, and the message in the box can be sent.
        qtbot.waitUntil(lambda: not controller.gate.input_block_reason(), timeout=START_TIMEOUT_MS)
        second = controller.link.server
        assert second is not None and second.process.pid != first.process.pid and second.alive()
        with qtbot.wait_signal(controller.signals.turn_finished, timeout=120_000) as blocker:
            qtbot.keyClick(window.input, Qt.Key.Key_Return)
        assert blocker.args[0] in ("stop", "length")
        assert window.input.toPlainText() == ""

        # A second crash within a minute: said, not restarted.
        os.kill(second.process.pid, signal.SIGSEGV)
        qtbot.waitUntil(lambda: len(_stopped_messages(window)) == 2, timeout=30_000)
        again = _stopped_messages(window)[1]
        assert "again within a minute, so it is not restarted" in again.text
        qtbot.wait(2000)
        assert controller.link.server is None and controller.link.state == "stopped"
        assert window.stats_bar.connection_state() == "stopped"  # the red dot
        assert "Restart the built-in model server" in controller.gate.input_block_reason()

        log = (log_dir() / SERVER_LOG).read_text()
        assert "Halo Weave server ready on" in log
        assert log.count("[the server process ended: signal 11]") == 2
    finally:
        window.close()
        controller.shutdown()


def test_a_builtin_server_that_stops_answering_is_ended_said_and_restarted(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    monkeypatch.setattr(connection_mod, "DEFAULT_SERVER_URL", NOTHING_LISTENS)
    # Asked twice a second, a second to answer: a hang shows within a few seconds.
    monkeypatch.setattr(connection_mod, "HEALTH_MS", 500)
    monkeypatch.setattr(connection_mod, "HEALTH_TIMEOUT_S", 1.0)
    controller = TurnController(Settings.of(server_url=NOTHING_LISTENS, autostart_server=True), tmp_path,
                                autostart=True)
    window = MainWindow(controller, app_qsettings(tmp_path))
    qtbot.addWidget(window)
    window.show()
    try:
        controller.start()
        qtbot.waitUntil(lambda: not controller.gate.input_block_reason(), timeout=START_TIMEOUT_MS)
        qtbot.wait(1500)
        assert not _stopped_messages(window), "a server that answers is left alone"
        first = controller.link.server
        os.kill(first.process.pid, signal.SIGSTOP)  # alive, answering nothing
        qtbot.waitUntil(lambda: bool(_stopped_messages(window)), timeout=30_000)
        message = _stopped_messages(window)[0]
        assert message.text.startswith("The built-in model server stopped (no answer for 1 s, so it was ended).")
        assert first.process.wait(10) == -signal.SIGKILL
        qtbot.waitUntil(lambda: not controller.gate.input_block_reason(), timeout=START_TIMEOUT_MS)
        assert controller.link.server is not first and controller.link.server.alive()
    finally:
        window.close()
        controller.shutdown()
