"""Screenshots of the window on a server that sends no attention, with proxy attention.

Starts llama-cpp-python's real OpenAI-compatible server (``python -m llama_cpp.server``,
the bundled GGUF, its own port), imports the 20-message Kyoto chat of
``screenshot_chat.py`` (File → Import, text mode), then chats a few exchanges with it:
after each, the bundled reader reads the exchange and its attention lights the heatmap.
Run under a real X server to see what a user sees:

    xvfb-run -a -s "-screen 0 1400x900x24" python scripts/screenshot_proxy.py --out DIR

Saves proxy_connected, proxy_heatmap, proxy_heatmap_scrolled, proxy_off (PNG) in --out
and prints one JSON object last (files, reads, the stats bar's words, load).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

MESSAGES = ["Thanks! What does Ada need to know about Tuna?",
            "And what was the day trip you suggested from Kyoto?",
            "Which card should I get for the trains?"]


def start_llama_cpp_server(n_ctx: int) -> tuple[subprocess.Popen, str]:
    import httpx

    from halo_weave.backends.local_tokenizer import bundled_gguf

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tempfile.NamedTemporaryFile(prefix="llama-cpp-server-", suffix=".log", delete=False)
    # tests/llama_cpp_server_main.py: llama_cpp.server with the model settings this CPU survives.
    main = Path(__file__).resolve().parents[1] / "tests" / "llama_cpp_server_main.py"
    process = subprocess.Popen([sys.executable, str(main), "--model", str(bundled_gguf()),
                                "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx),
                                "--n_threads", "2"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit(f"llama_cpp.server did not start; see {log.name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/screenshots"))
    parser.add_argument("--max-new-tokens", type=int, default=60)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    home = Path(tempfile.mkdtemp(prefix="halo-weave-proxy-shots-"))
    os.environ["HALO_WEAVE_HOME"] = str(home)
    server, url = start_llama_cpp_server(4096)
    try:
        figures = run(args, home, url)
    finally:
        server.terminate()
        server.wait(10)
    print(json.dumps(figures))


def run(args, home: Path, url: str) -> dict:
    from halo_weave.settings import Settings
    from screenshot_driver import ShotDriver

    settings = Settings.of(server_url=url, max_new_tokens=args.max_new_tokens, max_context_tokens=0,
                        autostart_server=False, sampler_seed=11, temperature=0.3)
    driver = ShotDriver(settings, home, args.out)
    controller, window = driver.controller, driver.window
    driver.connect()
    driver.import_kyoto()
    driver.shot("proxy_connected", flush=True)
    read_ms = []
    for message in MESSAGES:
        driver.send(message)
        assert controller.proxy.wait_for_reading(900_000)
        read_ms.append(controller.proxy.last_read)
    window.heatmap.follower.jump_to_latest()
    driver.shot("proxy_heatmap", flush=True)
    driver.scroll_to_middle()
    driver.shot("proxy_heatmap_scrolled", flush=True)
    words = {"attention_label": window.stats_bar.attention_label.text(),
             "brightness_label": window.stats_bar.brightness_label.text(),
             "connection": window.stats_bar.connection_label.toolTip()}
    controller.apply_settings(controller.settings.replace(proxy_attention=False))
    window.heatmap.follower.jump_to_latest()
    window.refresh_stats()
    driver.shot("proxy_off", flush=True)
    words["brightness_label_off"] = window.stats_bar.brightness_label.text()
    figures = {"files": driver.saved, "reads": read_ms, "words": words, "turns": len(controller.conv.turns),
               "load_average_1m": round(os.getloadavg()[0], 2)}
    window.close()
    return figures


if __name__ == "__main__":
    main()
