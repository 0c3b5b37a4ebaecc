"""Screenshots of the window when the built-in model server crashes (twice).

Starts the app as on a fresh machine (the bundled server autostarted), types a message,
kills the server with SIGSEGV (what a CPU defect in llama.cpp does), and saves the whole
screen: ``01_stopped_restarting.png`` (the first stop: restarting), then, once it is back,
kills it again: ``02_stopped_again.png`` (not restarted, the red dot).  Run under Xvfb:

    xvfb-run -s "-screen 0 1280x860x24" python scripts/screenshot_server_crash.py --out out/crash
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/crash"))
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="halo-weave-crash-"))
    os.environ["HALO_WEAVE_HOME"] = str(home)
    os.environ.setdefault("HALO_WEAVE_LOGS", str(home / "logs"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args.out.mkdir(parents=True, exist_ok=True)

    from PySide6.QtWidgets import QApplication

    from halo_weave.app import TurnController
    from halo_weave.settings import Settings
    from halo_weave.ui.control import connection as connection_mod
    from halo_weave.ui.main_window import MainWindow, app_qsettings

    app = QApplication(sys.argv[:1])
    closed_port = "http://127.0.0.1:9"  # nothing answers: the app starts its own server
    connection_mod.DEFAULT_SERVER_URL = closed_port
    controller = TurnController(Settings.of(server_url=closed_port, max_new_tokens=24), home, autostart=True)
    window = MainWindow(controller, app_qsettings(home))
    window.resize(1180, 780)
    window.show()
    controller.start()

    def wait(condition, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not condition() and time.monotonic() < deadline:
            app.processEvents()
            time.sleep(0.02)
        for _ in range(20):
            app.processEvents()
            time.sleep(0.02)

    def shoot(name: str) -> None:
        path = args.out / name
        app.primaryScreen().grabWindow(0).save(str(path))
        print(path)

    wait(lambda: not controller.gate.input_block_reason(), 300)
    window.input.setPlainText("What is the capital of France?")
    os.kill(controller.link.server.process.pid, signal.SIGSEGV)
    wait(lambda: window.messages.dialog is not None, 30)
    shoot("01_stopped_restarting.png")
    window.messages.dialog.close()
    wait(lambda: not controller.gate.input_block_reason(), 300)
    os.kill(controller.link.server.process.pid, signal.SIGSEGV)
    wait(lambda: window.messages.dialog is not None and "again" in window.messages.dialog.text(), 30)
    shoot("02_stopped_again.png")
    window.close()
    controller.shutdown()


if __name__ == "__main__":
    main()
