"""Screenshots of a conversation opened from a character card, and of the preset picker.

Starts the built-in server on a free loopback port (or uses ``--server URL``), imports a
character card (JSON, as SillyTavern exports it) through File → Import, lets the
character answer one message, saves that prompt as a preset of the user's, then opens
Chat → Presets… with Writer selected:

    QT_QPA_PLATFORM=offscreen python scripts/screenshot_cards.py [--out docs/screenshots]

Saves character_card.png and presets_picker.png in --out (each grabbed from its widget,
so it works offscreen); prints one JSON object last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CARD = {
    "spec": "chara_card_v2",
    "spec_version": "2.0",
    "data": {
        "name": "Captain Mora",
        "description": "{{char}} commands the airship Kestrel, a battered cargo ship that flies the "
                       "trade winds between floating islands. She is fifty, weather-beaten and fair.",
        "personality": "gruff, dry humour, fiercely loyal to her crew",
        "scenario": "{{user}} has just signed on as a deckhand, minutes before the Kestrel casts off.",
        "first_mes": "*{{char}} looks you up and down from the quarterdeck.* So you're the new deckhand, "
                     "{{user}}. Stow your bag below, keep your hands off the red lever, and be on deck "
                     "when the bell rings twice. Questions?",
        "mes_example": "<START>\n{{user}}: What does the red lever do?\n{{char}}: Drops the ballast. "
                       "All of it. Don't.",
        "system_prompt": "",
        "tags": ["adventure"],
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/screenshots")
    parser.add_argument("--server", default=None, help="a running server's URL (default: start one)")
    parser.add_argument("--message", default="Aye, captain. Where are we bound?")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    server = None
    url = args.server
    if url is None:
        from halo_weave.server.launcher import start_server

        server = start_server(port=0)
        server.wait_ready(timeout=600)
        url = server.url
    try:
        shots = take(url, Path(args.out), args.message)
    finally:
        if server is not None:
            server.stop()
    print(json.dumps(shots))


def take(url: str, out: Path, message: str) -> dict:
    from screenshot_driver import open_driver

    driver = open_driver("cards", url, out, (1180, 760), max_new_tokens=60, temperature=0.7)
    c, window = driver.controller, driver.window
    driver.connect()
    card = Path(tempfile.mkdtemp(prefix="halo-weave-card-")) / "Captain Mora.json"
    card.write_text(json.dumps(CARD), encoding="utf-8")
    c.files.import_json(card)
    driver.wait(lambda: c.conv is not None and c.files.path is not None and "airship" in c.conv.system.text
                and not c.gate.busy and not c.prompt.syncing)
    driver.send(message)
    driver.wait(lambda: c.memory.pending == 0)
    window.heatmap.flush()
    driver.settle()
    saved = {}
    path = out / "character_card.png"
    window.grab().save(str(path))
    saved["character_card"] = str(path)

    from halo_weave.settings.presets import Preset, PresetBook
    from halo_weave.ui.preset_dialog import PresetDialog

    book = PresetBook(Path(driver.home) / "presets.json")
    book.save(Preset.of("Captain Mora", c.session.prompt.own(), c.settings))  # one of the user's, in use
    dialog = PresetDialog(book, c.session.prompt.own(), c.settings, True, window)
    dialog.select("Writer")
    dialog.show()
    driver.settle()
    path = out / "presets_picker.png"
    dialog.grab().save(str(path))
    saved["presets_picker"] = str(path)
    dialog.close()
    window.close()
    driver.settle()
    return saved


if __name__ == "__main__":
    main()
