"""Screenshots of a non-default brightness rule: the window, Settings → What decides
pruning, and the legend, at a 1280 px screen.

Starts the bundled attention server (as a fresh install does), chooses decayed attention
mass (half-life 128) with paragraphs scored by their top-4 mean, imports the Kyoto chat of
``screenshot_chat.py`` and sends one message, so the real model's attention moves
brightness under that rule.  Run under a real X server to see what a user sees:

    xvfb-run -a -s "-screen 0 1400x900x24" python scripts/screenshot_rules.py --out docs/screenshots

Saves rules_window, rules_settings, rules_legend (PNG) in --out; prints one JSON object
last (the files and the words the window shows).
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

    driver = open_driver("rules", args.server_url, args.out, (1280, 800), max_new_tokens=args.max_new_tokens,
                         brightness_rule="decay", brightness_half_life=128, chunk_rank="topk")
    try:
        figures = shoot(driver, args)
    finally:
        driver.window.close()  # stops the bundled server it started, even after an error
    print(json.dumps(figures))


def shoot(driver, args) -> dict:
    from halo_weave.ui.settings_dialog import SettingsDialog

    window, bar = driver.window, driver.window.stats_bar
    dialog = SettingsDialog(driver.controller.settings, window, keyring=False)  # needs no model
    dialog.tabs.setCurrentWidget(dialog.pruning_page)
    dialog.show()
    driver.wait(dialog.isVisible, 10)
    driver.shot("rules_settings", dialog)
    dialog.reject()
    driver.connect(timeout=args.timeout)
    driver.import_kyoto()
    driver.send(MESSAGE)
    window.heatmap.follower.jump_to_latest()
    driver.shot("rules_window", flush=True)
    window.guide.show_legend()
    driver.wait(lambda: window.guide.legend.isVisible(), 10)
    driver.shot("rules_legend", window.guide.legend)
    figures = {"files": driver.saved, "scoring_label": bar.scoring_label.text(),
               "scoring_shown": bar.scoring_label.displayed_text(), "brightness_label": bar.brightness_label.text(),
               "legend": window.guide.legend.scoring_text, "window_width": window.frameGeometry().width(),
               "dialog_size": [dialog.width(), dialog.height()], "load_average_1m": round(os.getloadavg()[0], 2)}
    return figures


if __name__ == "__main__":
    main()
