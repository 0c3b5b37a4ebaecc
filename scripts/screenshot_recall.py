"""Screenshots of what a message recalled: the line under it, the counter, a click on a
recalled chunk, the graveyard for one pruned since, and the same after reopening.

Starts the bundled attention server (as a fresh install does) with a 700-token target, so
pruning starts after a few exchanges; types the chat of ``scripts/chat_facts.py`` (four
facts, eleven unrelated questions, four questions about the facts) through the window, at
the app's defaults otherwise; the shots are of the last question.  Each fact question is
scored as chat_facts scores it: whether the answer holds the fact, and whether the chunk
stating it was live when the model answered.  Run under a real X server to see what a
user sees:

    xvfb-run -a -s "-screen 0 1400x900x24" python scripts/screenshot_recall.py --out docs/screenshots

Saves recall_answering, recall_answered, recall_jump, recall_graveyard, recall_reopened and
recall_legend (PNG) in --out; prints one JSON object last (the files and what the window
says).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.chat_facts import FACTS, contains_fact, messages  # noqa: E402

QUESTION = FACTS[-1].asked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/screenshots"))
    parser.add_argument("--server-url")
    parser.add_argument("--max-new-tokens", type=int, default=60)
    parser.add_argument("--model", default="", help="the built-in server's model (default: the bundled one)")
    parser.add_argument("--target", type=int, default=700, help="max context tokens (the pruning target)")
    parser.add_argument("--size", default="1360x860", help="window size WxH")
    args = parser.parse_args()
    from screenshot_driver import open_driver

    driver = open_driver("recall", args.server_url, args.out, args.size, max_new_tokens=args.max_new_tokens,
                         max_context_tokens=args.target, system_prompt="You are a helpful assistant.",
                         server_model=args.model)
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
    scores = []

    def stated_live(fact) -> bool:
        """Whether the chunk that states ``fact`` is live (asked while the model answers)."""
        conv = c.conv
        return any(ch.live for ch in conv.chunks.values() if ch.role == "user"
                   and fact.marker in conv.chunk_text(ch.id) and fact.asked not in conv.chunk_text(ch.id))

    def score(fact, live: bool) -> None:
        """The last answer: whether it holds ``fact``; ``live``: whether the context did."""
        conv = c.conv
        answer = conv.turns.last("assistant")
        text = "".join(conv.chunk_text(ch.id) for ch in conv.content_chunks(answer))
        scores.append({"fact": fact.name, "answer": text.strip()[:200], "answered": contains_fact(text, fact),
                       "live": live})

    for text, fact, kind in messages()[:-1]:
        if kind != "question":
            driver.send(text)
        else:
            window.input.setPlainText(text)
            window.send()
            wait(lambda: c.turn.generating or not c.gate.busy)
            live = stated_live(fact)
            wait(lambda: not c.gate.busy)
            score(fact, live)
        c.memory.wait_for_indexing(300)
    fact = next(ch for ch in c.conv.chunks.values()
                if ch.role == "user" and FACTS[-1].marker in c.conv.chunk_text(ch.id))
    figures: dict = {"fact_pruned_before_the_question": not fact.live,
                     "before": [bar.budget_label.text(), bar.recalled_label.text()]}

    window.input.setPlainText(QUESTION)
    window.send()
    wait(lambda: c.turn.generating and c.session.answer.streamed >= 12 or not c.gate.busy)
    live = stated_live(FACTS[-1])
    shot("recall_answering", flush=True)
    figures["answering"] = [bar.budget_label.text(), bar.recalled_label.text(), bar.budget_label.styleSheet(),
                            bar.budget_label.toolTip()]
    wait(lambda: not c.gate.busy)
    score(FACTS[-1], live)
    figures["facts"] = scores
    figures["facts_answered"] = sum(s["answered"] for s in scores)
    figures["facts_live"] = sum(s["live"] for s in scores)
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
        rect = view.finder.recall_link_rect(question, chunk_id)
        if rect is None:
            return False
        QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
        view.flush()
        return True

    live = sorted((i for i in recalled if c.conv.chunks[i].live), key=lambda i: i != fact.id)
    pruned = sorted((i for i in recalled if not c.conv.chunks[i].live), key=lambda i: i != fact.id)
    if live and click(live[0]):
        shot("recall_jump", flush=True)
        figures["jumped_to"] = view.finder.flashed_chunk
    if pruned and click(pruned[0]):
        shot("recall_graveyard", flush=True)
    path = c.files.path
    c.files.open_conversation(path)  # read back from the file
    wait(lambda: c.conv is not None and not c.gate.busy)
    view.follower.jump_to_latest()
    shot("recall_reopened", flush=True)
    figures["reopened"] = [bar.budget_label.text(), bar.recalled_label.text(), c.conv.recalls.of(question) == recalled]
    window.guide.show_legend()
    wait(lambda: window.guide.legend.isVisible(), 10)
    shot("recall_legend", window.guide.legend)
    figures["files"] = driver.saved
    return figures


if __name__ == "__main__":
    main()
