"""The driving loop the screenshot scripts share: one window on a real server, waiting
on the Qt event loop, saving what the screen shows, importing the Kyoto chat.

``ShotDriver(settings, home, out, size)`` builds the application, the controller and the
window; ``wait(condition)``, ``shot(name)`` (the window, or another top-level widget, as
``QScreen.grabWindow`` sees it), ``connect()``, ``import_kyoto()``, ``scroll_to_middle()``.
``saved`` maps each shot's name to its file.  :func:`open_driver` makes one in a fresh
data directory, on a given server or the bundled one.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def open_driver(name: str, server_url: str | None, out: Path, size: tuple[int, int] | str, **settings):
    """A :class:`ShotDriver` in a new temporary data directory (``$HALO_WEAVE_HOME``), on the
    server at ``server_url`` or, without one, the bundled server the window starts; answers
    seeded (11); ``settings``: the rest of the settings; ``size``: (w, h) or ``"WxH"``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    home = Path(tempfile.mkdtemp(prefix=f"halo-weave-{name}-shots-"))
    os.environ["HALO_WEAVE_HOME"] = str(home)
    from halo_weave.settings import Settings

    chosen = Settings.of(server_url=server_url or Settings().server.server_url, autostart_server=server_url is None,
                      **{"sampler_seed": 11, **settings})
    if isinstance(size, str):
        size = tuple(int(v) for v in size.split("x"))
    return ShotDriver(chosen, home, out, size)


class ShotDriver:
    """The app, its controller and window, and the steps the scripts take with them."""

    def __init__(self, settings, home: Path, out: Path, size: tuple[int, int] = (1360, 860)) -> None:
        from PySide6.QtWidgets import QApplication

        from halo_weave.app import TurnController
        from halo_weave.ui.main_window import MainWindow, app_qsettings
        from halo_weave.ui.theme import apply_dark_theme

        self.app = QApplication.instance() or QApplication(sys.argv[:1])
        apply_dark_theme(self.app)
        self.home, self.out = home, out
        out.mkdir(parents=True, exist_ok=True)
        self.controller = TurnController(settings, home)
        self.window = MainWindow(self.controller, app_qsettings(home))
        self.window.resize(*size)
        self.window.show()
        self.saved: dict[str, str] = {}

    def wait(self, condition, timeout: float = 600.0) -> None:
        """Run the event loop until ``condition()`` holds (TimeoutError after ``timeout`` s)."""
        deadline = time.time() + timeout
        while not condition():
            if time.time() > deadline:
                c = self.controller
                raise TimeoutError(f"timed out: connection {c.link.state!r}, "
                                   f"input {c.gate.input_block_reason()!r}, busy {c.gate.busy}")
            self.app.processEvents()
            time.sleep(0.01)

    def settle(self) -> None:
        """Let pending paints reach the screen."""
        for _ in range(10):
            self.app.processEvents()
            time.sleep(0.02)

    def shot(self, name: str, widget=None, *, flush: bool = False, whole_screen: bool = False) -> str:
        """Save ``widget`` (default: the window) as the screen shows it, as ``<out>/<name>.png``
        (``whole_screen``: the screen it is on, popups included)."""
        if flush:
            self.window.heatmap.flush()
        self.settle()
        target = widget or self.window
        path = self.out / f"{name}.png"
        target.screen().grabWindow(0 if whole_screen else target.winId()).save(str(path))
        self.saved[name] = str(path)
        return str(path)

    def connect(self, timeout: float = 600.0) -> None:
        """Start the controller and wait until a message can be sent."""
        c = self.controller
        c.start()
        self.wait(lambda: c.link.state == "connected" and not c.gate.input_block_reason(), timeout)

    def import_kyoto(self) -> None:
        """File → Import of the 20-message Kyoto chat (screenshot_chat.EXCHANGES), indexed."""
        from screenshot_chat import write_chat

        c = self.controller
        chat = self.home / "kyoto.jsonl"
        write_chat(chat)
        c.files.import_json(chat)
        self.wait(lambda: c.conv is not None and len(c.conv.turns) >= 20 and not c.gate.busy)
        c.memory.wait_for_indexing(300)
        self.wait(lambda: c.memory.pending == 0)

    def send(self, message: str) -> None:
        """Type ``message``, send it, wait for the answer (and the reader, if it reads)."""
        c, window = self.controller, self.window
        self.wait(lambda: not c.gate.input_block_reason())  # e.g. a re-prefill after an import
        window.input.setPlainText(message)
        window.send()
        if window.input.toPlainText():  # not sent: the window said why
            said = [m.text for m in window.messages.history][-3:]
            raise RuntimeError(f"the message was not sent: {said}")
        self.wait(lambda: not c.gate.busy)

    def scroll_to_middle(self) -> None:
        bar = self.window.heatmap.verticalScrollBar()
        bar.triggerAction(bar.SliderAction.SliderToMinimum)
        for _ in range(max(1, bar.maximum() // 2 // max(bar.singleStep(), 1))):
            bar.triggerAction(bar.SliderAction.SliderSingleStepAdd)
