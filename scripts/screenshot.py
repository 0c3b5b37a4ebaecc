"""Drive a scripted conversation through the real app and save PNGs of the window.

Uses the real model server (the bundled one, autostarted by the app as on a fresh
machine, unless --server-url is given), the real store in a temporary data directory
and the real embedder.  Runs
offscreen by default (``QT_QPA_PLATFORM=offscreen``) or under Xvfb (``xvfb-run``).

    python scripts/screenshot.py [--out out/screenshots] [--server-url URL] [--json]

Saves: 00_loading (autostart only), 01_start, 02_streaming, 03_first_answer,
04_pruned_graveyard, 05_resurrected, 06_context_menu, 07_settings, 08_stopped,
09_open_dialog, 10_notes_panel (a scripted notebook tool call, Notes panel open, attention
recording on).  Prints one JSON object (the files) as its last line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

#: Start of an answer with a notebook write (the small model seldom writes one itself).
NOTES_CALL = """<tool>jq '.topics.trip = "Kyoto in April"' notes.json > output</tool>"""

SCRIPT = [
    "Hi! I'm planning a trip to Kyoto in April. What should I pack?",
    "My cat Tuna will stay with my neighbour Ada while I'm away. Any tips for leaving a cat?",
    "Write a short Python function that converts Celsius to Fahrenheit.",
    "What is a good way to learn Japanese greetings before the trip?",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/screenshots"))
    parser.add_argument("--server-url", help="use this server instead of starting the bundled one")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--max-context", type=int, default=260)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    home = Path(tempfile.mkdtemp(prefix="halo-weave-shots-"))
    os.environ["HALO_WEAVE_HOME"] = str(home)
    args.out.mkdir(parents=True, exist_ok=True)

    from PySide6.QtCore import QPoint
    from PySide6.QtWidgets import QApplication

    from halo_weave.app import TurnController
    from halo_weave.settings import Settings
    from halo_weave.ui.main_window import MainWindow, app_qsettings

    app = QApplication(sys.argv[:1])
    try:
        from halo_weave.ui.theme import apply_dark_theme

        apply_dark_theme(app)
    except ImportError:
        pass

    # Without --server-url the app autostarts its bundled server, as on a fresh machine
    # (nothing listens on the default URL), and stops it on exit.
    url = args.server_url or Settings().server.server_url
    settings = Settings.of(server_url=url, max_new_tokens=args.max_new_tokens,
                        max_context_tokens=args.max_context, min_chunk_tokens=24,
                        autostart_server=args.server_url is None, temperature=0.7, sampler_seed=7,
                        notes_tool=True)
    controller = TurnController(settings, home)
    window = MainWindow(controller, app_qsettings(home))
    window.resize(1280, 800)
    window.show()
    saved: list[str] = []

    def wait(condition, timeout: float = 300.0) -> None:
        deadline = time.time() + timeout
        while not condition():
            if time.time() > deadline:
                raise TimeoutError("the app did not get there in time")
            app.processEvents()
            time.sleep(0.005)

    def pause(seconds: float) -> None:
        end = time.time() + seconds
        while time.time() < end:
            app.processEvents()
            time.sleep(0.005)

    def shot(name: str, widget=None) -> None:
        pause(0.15)
        path = args.out / f"{name}.png"
        (widget or window).grab().save(str(path))
        saved.append(str(path))
        print("saved", path, file=sys.stderr)

    def say(text: str, during=None) -> None:
        window.input.setPlainText(text)
        window.send()
        if during is not None:
            wait(lambda: (controller.turn.generating and controller.session.answer.streamed >= 10) or not controller.gate.busy)
            during()
        wait(lambda: not controller.gate.busy)

    try:
        controller.start()
        if args.server_url is None:
            wait(lambda: controller.link.state == "loading", 60)
            pause(3.0)
            shot("00_loading")
        wait(lambda: controller.link.state == "connected", 600)
        wait(lambda: not controller.gate.input_block_reason(), 60)
        window.input.setPlainText(SCRIPT[0])
        shot("01_start")
        say(SCRIPT[0], during=lambda: shot("02_streaming"))
        shot("03_first_answer")
        for text in SCRIPT[1:]:
            say(text)
        controller.memory.wait_for_indexing(120)
        pause(0.5)
        shot("04_pruned_graveyard")

        pruned = controller.conv.graveyard()
        if pruned:
            controller.levers.resurrect_chunk(pruned[-1].id)
            window.heatmap.scroll_to_chunk(pruned[-1].id)
            shot("05_resurrected")

        heatmap = window.heatmap
        chunk = next((c for c in controller.conv.live_chunks() if not c.framing), None)
        if chunk is not None:
            heatmap.scroll_to_chunk(chunk.id)
            heatmap.flush()
            pause(0.1)
            rect = heatmap.chunk_rect(chunk.id)
            if rect is not None:
                menu = heatmap.context_menu_for(QPoint(rect.left() + 2, rect.top() + 2))
                menu.popup(heatmap.viewport().mapToGlobal(rect.topLeft()))
                shot("06_context_menu", menu)
                menu.close()

        from halo_weave.ui.settings_dialog import SettingsDialog

        dialog = SettingsDialog(controller.settings, window)
        dialog.show()
        shot("07_settings", dialog)
        dialog.close()

        window.input.setPlainText("Tell me a long story about a lighthouse keeper and a fox.")
        window.send()
        wait(lambda: (controller.turn.generating and controller.session.answer.streamed >= 6) or not controller.gate.busy)
        controller.turn.stop()
        wait(lambda: not controller.gate.busy)
        shot("08_stopped")

        from halo_weave.ui.conversation_picker import ConversationPicker

        picker = ConversationPicker(home, controller.files.path, window)
        picker.show()
        shot("09_open_dialog", picker)
        picker.close()

        window.menus.notes_action.trigger()  # View → Show notes
        window.menus.record_action.trigger()  # View → Record attention
        controller.message.send("Please note where I'm travelling.", answer_prefix=NOTES_CALL)
        wait(lambda: not controller.gate.busy)
        controller.memory.wait_for_indexing(120)
        shot("10_notes_panel")
    finally:
        server = controller.link.server
        window.close()
    stopped = server is None or not server.alive()
    figures = {"screenshots": saved, "data_dir": str(home), "bundled_server_stopped_on_exit": stopped}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
