"""The model server dies in the middle of an answer: the user reads what happened, keeps
the partial answer, and can chat again once a server is back.  Uses its own real server
processes (started with the launcher), since this test kills one."""

from __future__ import annotations

import os
import signal

import pytest
from PySide6.QtCore import Qt

from halo_weave.app import TurnController
from halo_weave.server.launcher import start_server
from halo_weave.settings import Settings
from halo_weave.ui.main_window import MainWindow, app_qsettings

pytestmark = pytest.mark.slow

START_TIMEOUT_S = 600


def _kill(server) -> None:
    process = getattr(server, "process", None) or getattr(server, "proc", None) or getattr(server, "popen", None)
    if process is not None:
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    elif getattr(server, "pid", None):
        os.kill(server.pid, signal.SIGKILL)
    else:
        server.stop()


def test_server_killed_mid_answer_shows_error_and_app_recovers(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_WEAVE_HOME", str(tmp_path))
    first = start_server(port=0)
    second = None
    try:
        first.wait_ready(START_TIMEOUT_S)
        settings = Settings.of(server_url=first.url, max_new_tokens=200, autostart_server=False)
        controller = TurnController(settings, tmp_path, autostart=False)
        window = MainWindow(controller, app_qsettings(tmp_path))
        qtbot.addWidget(window)
        window.show()
        controller.start()
        qtbot.waitUntil(lambda: not controller.gate.input_block_reason(), timeout=60_000)

        window.input.setPlainText("Tell me a long story about a lighthouse keeper.")
        qtbot.keyClick(window.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: controller.session.answer.streamed >= 3, timeout=120_000)
        with qtbot.wait_signal(controller.signals.turn_finished, timeout=60_000) as blocker:
            _kill(first)
        assert blocker.args == ["error"]

        shown = [m for m in window.messages.history if m.serious]
        assert shown, "the error is shown in the window"
        assert any("server" in m.text.lower() for m in shown)
        assert window.messages.dialog is not None
        answer = max(controller.conv.turns)
        assert controller.conv.turns[answer].complete, "the partial answer was kept and closed"
        assert not controller.gate.busy
        assert window.reason.text(), "the input says why it cannot send"

        # A server comes back (here: on a new port, set in Settings); chatting resumes.
        second = start_server(port=0)
        second.wait_ready(START_TIMEOUT_S)
        window.apply_settings(controller.settings.replace(server_url=second.url, max_new_tokens=12))
        qtbot.waitUntil(lambda: controller.link.state == "connected", timeout=60_000)
        qtbot.waitUntil(lambda: not controller.gate.input_block_reason(), timeout=60_000)
        window.input.setPlainText("Are you back?")
        with qtbot.wait_signal(controller.signals.turn_finished, timeout=120_000) as blocker:
            qtbot.keyClick(window.input, Qt.Key.Key_Return)
        assert blocker.args[0] in ("stop", "length")
        assert controller.conv.content_chunks(max(controller.conv.turns))
        window.close()
    finally:
        for server in (first, second):
            if server is not None:
                try:
                    server.stop()
                except Exception:  # noqa: BLE001 - already dead
                    pass
