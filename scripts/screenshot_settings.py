"""Screenshots of the window at the size a first start opens at (1180×780, the stats bar
on one line) and of the settings dialog (every field with its explanation).

Starts the bundled attention server (as a fresh install does), imports the Kyoto chat of
``screenshot_chat.py`` and sends one message, so the stats bar holds a real answer's
figures.  Run under a real X server to see what a user sees:

    xvfb-run -a -s "-screen 0 1400x1000x24" python scripts/screenshot_settings.py --out docs/screenshots

Saves stats_bar (the window), settings_dialog (Context & memory), settings_prompt (System
prompt), settings_generation, settings_server and settings_server_models (the Server tab
with the built-in model's list open; the whole screen) (PNG) in --out; prints one JSON object last (the files,
the stats bar's texts as shown).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

MESSAGE = "What did you say Ada needs for Tuna, and which day trip was it?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/screenshots"))
    parser.add_argument("--server-url")
    parser.add_argument("--max-new-tokens", type=int, default=60)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds the server may take to start")
    args = parser.parse_args()
    from screenshot_driver import open_driver
    from halo_weave.ui.main_window import DEFAULT_SIZE

    driver = open_driver("settings", args.server_url, args.out, DEFAULT_SIZE, max_new_tokens=args.max_new_tokens)
    try:
        figures = shoot(driver, args)
    finally:
        driver.window.close()  # stops the bundled server it started, even after an error
    print(json.dumps(figures))


def shoot(driver, args) -> dict:
    from halo_weave.ui.settings_dialog import SettingsDialog

    window, bar, controller = driver.window, driver.window.stats_bar, driver.controller
    driver.connect(timeout=args.timeout)
    driver.import_kyoto()
    driver.send(MESSAGE)
    window.heatmap.follower.jump_to_latest()
    driver.shot("stats_bar", flush=True)
    dialog = SettingsDialog(controller.settings, window, keyring=False,
                            conversation_prompt=controller.session.prompt.own())
    dialog.show()
    for name, title in (("settings_dialog", "Context && memory"), ("settings_generation", "Generation"),
                        ("settings_prompt", "System prompt"), ("settings_server", "Server")):
        dialog.tabs.setCurrentIndex(next(i for i in range(dialog.tabs.count()) if dialog.tabs.tabText(i) == title))
        dialog.adjustSize()
        driver.wait(dialog.isVisible, 10)
        driver.shot(name, dialog)
    combo = dialog.model_choice.combo  # the built-in model's list, open
    combo.showPopup()
    driver.wait(lambda: combo.view().isVisible(), 10)
    driver.shot("settings_server_models", dialog, whole_screen=True)
    combo.hidePopup()
    dialog.reject()
    labels = (bar.budget_label, bar.recalled_label, bar.totals_label, bar.brightness_label, bar.speed_label,
              bar.connection_label)
    return {"files": driver.saved, "window_size": [window.width(), window.height()],
            "stats_bar_two_lines": bar.is_two_lines(),
            "shown": {label.text(): label.displayed_text() for label in labels if label.isVisible()},
            "dialog_size": [dialog.width(), dialog.height()], "load_average_1m": round(os.getloadavg()[0], 2)}


if __name__ == "__main__":
    main()
