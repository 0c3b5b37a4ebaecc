"""A screenshot of the window on a chat-completions server (``/v1/chat/completions``).

Starts llama-cpp-python's real server (the bundled GGUF, its own port), connects with
Settings → Server → API set to chat completions, and chats: a fact, enough messages for a
small context target to prune it, then a question that brings it back.  The bundled
reader lights the heatmap.  Offscreen works (the window is grabbed as a widget):

    QT_QPA_PLATFORM=offscreen python scripts/screenshot_chat_completions.py --out docs/screenshots

Saves chat_completions.png in --out and prints one JSON object last (the file, the
connection line, what the last message recalled, load).
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

MESSAGES = ["My cat is called Mochi and she sleeps in a cardboard box by the window.",
            "I am planning a trip to Lisbon in March. What should I pack for the weather?",
            "Also, can you suggest a simple recipe for dinner tonight with rice and beans?",
            "What is my cat called, and where does she sleep?"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/screenshots"))
    parser.add_argument("--max-new-tokens", type=int, default=24)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    home = Path(tempfile.mkdtemp(prefix="halo-weave-chat-shots-"))
    os.environ["HALO_WEAVE_HOME"] = str(home)
    from screenshot_proxy import start_llama_cpp_server

    server, url = start_llama_cpp_server(2048)
    try:
        figures = run(args, home, url)
    finally:
        server.terminate()
        server.wait(10)
    print(json.dumps(figures))


def run(args, home: Path, url: str) -> dict:
    from halo_weave.settings import Settings
    from screenshot_driver import ShotDriver

    settings = Settings.of(server_url=url, server_api="chat", max_new_tokens=args.max_new_tokens,
                           max_context_tokens=260, min_chunk_tokens=16, autostart_server=False,
                           sampler_seed=11, temperature=0.0)
    driver = ShotDriver(settings, home, args.out, (1360, 860))
    controller, window = driver.controller, driver.window
    driver.connect()
    print("connected:", window.stats_bar.connection_label.toolTip(), file=sys.stderr, flush=True)
    for message in MESSAGES:
        driver.send(message)
        assert controller.proxy.wait_for_reading(900_000)
        print("answered:", message[:30], file=sys.stderr, flush=True)
    window.heatmap.follower.jump_to_latest()
    window.heatmap.flush()
    driver.settle()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "chat_completions.png"
    window.grab().save(str(path))
    conv = controller.conv
    question = conv.turns.last("user")
    figures = {"file": str(path), "kind": controller.session.backend.kind,
               "connection": window.stats_bar.connection_label.toolTip(),
               "recalled": [conv.chunk_text(c)[:40] for c in conv.recalls.of(question)],
               "graveyard": len(conv.graveyard()), "load_average_1m": round(os.getloadavg()[0], 2)}
    window.close()
    return figures


if __name__ == "__main__":
    main()
