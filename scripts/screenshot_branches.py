"""Screenshots of editing an earlier message and of switching between the two branches.

Starts the bundled attention server (as a fresh install does), imports the 20-message
Kyoto chat of ``screenshot_chat.py`` through File → Import, then, as a user would: opens
the context menu on the third question, takes "Edit this message…", types new words,
presses Enter and waits for the model's answer; then clicks the "‹" of the header where
the branches part to bring the old messages back.  Run under a real X server to see what
a user sees:

    xvfb-run -a -s "-screen 0 1400x900x24" python scripts/screenshot_branches.py --out docs/screenshots

Saves branches_menu (the context menu on the message), branches_edit (its words in the
box, the line saying what Enter will do), branches_new (the new branch answered: ‹ 2 / 2 ›)
and branches_switch (the old branch back: ‹ 1 / 2 ›) in --out; prints one JSON object
last (the files and what the window showed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

NEW_WORDS = "My dog Pico will stay with my neighbour Ada. Any tips?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/screenshots"))
    parser.add_argument("--server-url")
    parser.add_argument("--max-new-tokens", type=int, default=60)
    parser.add_argument("--size", default="1180x780", help="window size WxH")
    args = parser.parse_args()
    from screenshot_driver import open_driver

    driver = open_driver("branch", args.server_url, args.out, args.size, max_new_tokens=args.max_new_tokens,
                         system_prompt="You are a helpful assistant.")
    try:
        figures = shoot(driver)
    finally:
        driver.window.close()  # stops the bundled server it started, even after an error
    print(json.dumps(figures))


def _messages(conv) -> list[str]:
    return ["".join(conv.chunk_text(c.id) for c in conv.content_chunks(t)).strip() for t in conv.turns]


def shoot(driver) -> dict:
    from PySide6.QtCore import QPoint, Qt
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtTest import QTest

    c, window, wait = driver.controller, driver.window, driver.wait
    view = window.heatmap
    driver.connect()
    driver.import_kyoto()
    before = _messages(c.conv)
    third = [t for t in c.conv.turns if c.conv.turns[t].role == "user"][2]

    def scroll_to(turn_id: int) -> None:
        view.scroll_to_chunk(c.conv.content_chunks(turn_id)[0].id)
        bar = view.verticalScrollBar()
        bar.setValue(max(0, bar.value() - 120))  # with the exchange before it in view
        driver.settle()

    # The context menu on the third question, as the screen shows it (a menu is a window
    # of its own: the screen is grabbed and cut to the main window).
    scroll_to(third)
    point = view.chunk_rect(c.conv.content_chunks(third)[0].id).center()
    menu = view.context_menu_for(point)
    menu.popup(view.viewport().mapToGlobal(point))
    driver.settle()
    geometry = window.frameGeometry()
    screen = QGuiApplication.primaryScreen()
    path = driver.out / "branches_menu.png"
    screen.grabWindow(0, geometry.x(), geometry.y(), geometry.width(), geometry.height()).save(str(path))
    driver.saved["branches_menu"] = str(path)
    edit = next(a for a in menu.actions() if "Edit this message" in a.text())
    menu.close()
    edit.trigger()  # the window scrolls to the message and outlines it
    driver.settle()
    bar = view.verticalScrollBar()
    bar.setValue(max(0, bar.value() - 120))
    window.input.setPlainText(NEW_WORDS)
    window.input.moveCursor(window.input.textCursor().MoveOperation.End)
    driver.shot("branches_edit")
    hint = window.reason.text()

    QTest.keyClick(window.input, Qt.Key.Key_Return)
    wait(lambda: c.gate.busy)
    wait(lambda: not c.gate.busy)
    edited = [t for t in c.conv.turns if c.conv.turns[t].role == "user"][2]
    scroll_to(edited)
    driver.shot("branches_new", flush=True)
    new = _messages(c.conv)
    new_mark = view.branches.mark(edited)

    rect = view.branches.arrow_rect(edited, -1)
    QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    wait(lambda: _messages(c.conv) == before)
    driver.settle()
    bar = view.verticalScrollBar()
    bar.setValue(max(0, bar.value() - 120))
    driver.shot("branches_switch", flush=True)
    return {
        "files": driver.saved,
        "hint": hint,
        "messages_before": len(before),
        "messages_in_new_branch": len(new),
        "new_branch_mark": new_mark,
        "switched_back_mark": view.branches.mark(third),
        "new_answer": new[5] if len(new) > 5 else "",
        "old_messages_back": _messages(c.conv) == before,
        "point": [QPoint(point).x(), QPoint(point).y()],
    }


if __name__ == "__main__":
    main()
