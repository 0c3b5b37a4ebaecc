"""Screenshots of what a message recalled: the line under it, the counter, a click on a
recalled chunk, the graveyard for one pruned since, and the same after reopening.

Starts the bundled attention server (as a fresh install does) with a 700-token target, so
pruning starts after a few exchanges; types four facts, then unrelated questions, then
asks about the facts, all through the window; the shots are of the last question.  Run under a real X server to see what a
user sees:

    xvfb-run -a -s "-screen 0 1400x900x24" python scripts/screenshot_recall.py --out docs/screenshots

Saves recall_answering, recall_answered, recall_jump, recall_graveyard, recall_reopened and
recall_legend (PNG) in --out; prints one JSON object last (the files and what the window
says).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

FACTS = [
    "My cat is called Mochi. She is a grey tabby and she sleeps in cardboard boxes.",
    "I fly to Lisbon on 3 March, early in the morning, for a week of holidays.",
    "My sister Ana is a nurse; she works night shifts at the city hospital.",
    "Here is a small Python function I wrote:\n\n```python\ndef double(x):\n    return 2 * x\n```",
]
UNRELATED = [
    "What is a good way to keep basil alive on a windowsill?",
    "Explain in two sentences why the sky is blue.",
    "Suggest a name for a small bakery by the sea.",
    "How long should I boil an egg for a soft yolk?",
    "What are three easy stretches for a stiff back?",
    "Give me a short packing list for a rainy weekend.",
    "Why do leaves change colour in autumn?",
    "What is the difference between a violin and a viola?",
]
ASKED = ["What is my cat called?"]
QUESTION = "When do I fly to Lisbon?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/screenshots"))
    parser.add_argument("--server-url")
    parser.add_argument("--max-new-tokens", type=int, default=60)
    parser.add_argument("--target", type=int, default=700, help="max context tokens (the pruning target)")
    parser.add_argument("--size", default="1360x860", help="window size WxH")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    home = Path(tempfile.mkdtemp(prefix="halo-weave-recall-shots-"))
    os.environ["HALO_WEAVE_HOME"] = str(home)

    from halo_weave.settings import Settings
    from screenshot_driver import ShotDriver

    settings = Settings(server_url=args.server_url or Settings().server_url,
                        autostart_server=args.server_url is None, max_new_tokens=args.max_new_tokens,
                        max_context_tokens=args.target, sampler_seed=11,
                        system_prompt="You are a helpful assistant.")
    driver = ShotDriver(settings, home, args.out, tuple(int(v) for v in args.size.split("x")))
    try:
        figures = shoot(driver)
    finally:
        driver.window.close()  # stops the bundled server it started, even after an error
    print(json.dumps(figures))


def shoot(driver) -> dict:
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    c, window, wait, shot = driver.controller, driver.window, driver.wait, driver.shot
    view, bar = window.heatmap, window.stats_bar
    driver.connect()
    for message in FACTS + UNRELATED + ASKED:
        driver.send(message)
        c.wait_for_indexing(300)
    fact = next(ch for ch in c.conv.chunks.values() if ch.role == "user" and "Lisbon" in c.conv.chunk_text(ch.id))
    figures: dict = {"fact_pruned_before_the_question": not fact.live,
                     "before": [bar.budget_label.text(), bar.recalled_label.text()]}

    window.input.setPlainText(QUESTION)
    window.send()
    wait(lambda: c.generating and c.session.streamed >= 12 or not c.busy)
    shot("recall_answering", flush=True)
    figures["answering"] = [bar.budget_label.text(), bar.recalled_label.text(), bar.budget_label.styleSheet(),
                            bar.budget_label.toolTip()]
    wait(lambda: not c.busy)
    view.follower.jump_to_latest()
    shot("recall_answered", flush=True)
    question = c.conv.turns.last("user")
    recalled = c.conv.recalls.of(question)
    figures["answered"] = [bar.budget_label.text(), bar.recalled_label.text(), bar.budget_label.styleSheet()]
    figures["recalled"] = [(i, c.conv.chunks[i].live, c.conv.chunk_text(i)[:40]) for i in recalled]

    def click(chunk_id: int) -> bool:
        view.follower.jump_to_latest()
        view.flush()
        driver.settle()
        rect = view.recall_link_rect(question, chunk_id)
        if rect is None:
            return False
        QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
        view.flush()
        return True

    live = sorted((i for i in recalled if c.conv.chunks[i].live), key=lambda i: i != fact.id)
    pruned = sorted((i for i in recalled if not c.conv.chunks[i].live), key=lambda i: i != fact.id)
    if live and click(live[0]):
        shot("recall_jump", flush=True)
        figures["jumped_to"] = view.flashed_chunk
    if pruned and click(pruned[0]):
        shot("recall_graveyard", flush=True)
    path = c.path
    c.open_conversation(path)  # read back from the file
    wait(lambda: c.conv is not None and not c.busy)
    view.follower.jump_to_latest()
    shot("recall_reopened", flush=True)
    figures["reopened"] = [bar.budget_label.text(), bar.recalled_label.text(), c.conv.recalls.of(question) == recalled]
    window.show_legend()
    wait(lambda: window._legend.isVisible(), 10)
    shot("recall_legend", window._legend)
    figures["files"] = driver.saved
    return figures


if __name__ == "__main__":
    main()
