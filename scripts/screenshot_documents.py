"""Screenshots of a document in the memory: a 40-page PDF attached to a chat, its paragraphs
in the graveyard with the file's name and page, the progress bar while it is read, and a
question that brings one page back into the context.

Starts the bundled attention server unless ``--server-url`` names one; the PDF is written
by ``bench/pdf_writer.py``.  Run under a real X server to see what a user sees:

    xvfb-run -a -s "-screen 0 1400x900x24" python scripts/screenshot_documents.py --out docs/screenshots

Saves documents_progress, documents_graveyard and documents_recalled (PNG) in --out;
prints one JSON object last (the files and what the window said).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.documents import almanac, fact  # noqa: E402
from bench.pdf_writer import write_pdf  # noqa: E402

PAGE = 23


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/screenshots"))
    parser.add_argument("--server-url")
    parser.add_argument("--pages", type=int, default=40)
    parser.add_argument("--size", default="1360x860", help="window size WxH")
    args = parser.parse_args()
    from screenshot_driver import open_driver

    driver = open_driver("documents", args.server_url, args.out, args.size, max_new_tokens=40,
                         system_prompt="You are a helpful assistant.")
    try:
        figures = shoot(driver, args.pages)
    finally:
        driver.window.close()
    print(json.dumps(figures))


def shoot(driver, pages: int) -> dict:
    c, window, shot = driver.controller, driver.window, driver.shot
    driver.connect()
    driver.send("I am reading the harbour almanac; I will attach it.")
    pdf = write_pdf(driver.home / "harbour almanac.pdf", almanac(pages))
    shown: list = []
    c.signals.progress.connect(lambda what, done, total: shown.append((what, done, total)))
    c.documents.attach(pdf)
    driver.wait(lambda: any(total > 0 and 0 < done < total for _, done, total in shown))
    shot("documents_progress")
    driver.wait(lambda: not c.gate.busy and not c.documents.attaching)
    c.memory.wait_for_indexing(600)
    driver.wait(lambda: c.memory.pending == 0)
    shot("documents_graveyard")
    driver.send(fact(PAGE)[1])
    shot("documents_recalled", flush=True)
    conv = c.conv
    live = [conv.chunk_text(ch.id)[:60] for ch in conv.live_chunks() if ch.role == "document"]
    return {"saved": driver.saved, "said": [m.text for m in window.messages.history][-3:],
            "document_paragraphs_live": live}


if __name__ == "__main__":
    main()
