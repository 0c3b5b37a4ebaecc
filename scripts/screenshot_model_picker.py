"""Screenshots of the model picker, on a loopback server that serves several models.

The server speaks the OpenAI-compatible API as llama-swap does (``/v1/models`` lists three
models, ``/v1/completions`` streams an answer naming the model the request asked for).
The window connects, one message is answered, the picker's list is opened (shot 1), the
third model is picked and answers (shot 2):

    xvfb-run -a -s "-screen 0 1400x900x24" python scripts/screenshot_model_picker.py [--out docs/screenshots]

Saves model_picker.png and model_picker_switched.png in --out; prints one JSON object last.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODELS = ("qwen2.5-coder-7b-instruct", "llama-3.1-8b-instruct", "gemma-2-9b-it")


class Handler(BaseHTTPRequestHandler):
    """``/v1/models`` and a streamed ``/v1/completions``."""

    protocol_version = "HTTP/1.0"

    def log_message(self, *args) -> None:
        pass

    def _json(self, data: dict, status: int = 200) -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        if self.path == "/v1/models":
            self._json({"object": "list", "data": [{"id": m, "object": "model", "owned_by": "llama-swap"}
                                                   for m in MODELS]})
        else:
            self._json({"error": "not found"}, 404)

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        if self.path != "/v1/completions":
            self._json({"error": "not found"}, 404)
            return
        words = [f"This is **{body['model']}** answering.", " Pick another model", " above the conversation."]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for n, text in enumerate(words):
            reason = "stop" if n == len(words) - 1 else None
            chunk = {"choices": [{"index": 0, "text": text, "finish_reason": reason}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/screenshots")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"

    from halo_weave.settings import Settings
    from screenshot_driver import ShotDriver

    home = Path(tempfile.mkdtemp(prefix="hw-picker-"))
    settings = Settings.of(server_url=url, autostart_server=False, proxy_attention=False,
                        system_prompt="You are a helpful assistant.")
    driver = ShotDriver(settings, home, Path(args.out), size=(1180, 780))
    driver.connect(60)
    driver.send("Which model are you?")
    bar = driver.window.stats_bar
    picker = bar.model_picker
    picker.showPopup()
    driver.settle()
    # The list is a window of its own: grab the screen around the main window to show both.
    screen = driver.window.screen()
    frame = driver.window.frameGeometry()
    path = Path(args.out) / "model_picker.png"
    screen.grabWindow(0, frame.x(), frame.y(), frame.width(), frame.height()).save(str(path))
    picker.hidePopup()
    driver.window.pick_model(MODELS[2])
    c = driver.controller
    driver.wait(lambda: getattr(c.session.backend, "model_id", None) == MODELS[2] and not c.gate.input_block_reason(), 60)
    driver.send("And now?")
    switched = driver.shot("model_picker_switched", flush=True)
    print(json.dumps({"model_picker": str(path), "model_picker_switched": switched,
                      "models": [picker.itemText(i) for i in range(picker.count())],
                      "current": picker.currentText(), "template": bar.template_words}))
    driver.window.close()
    driver.wait(lambda: not any(w.isRunning() for w in list(driver.controller.calls)), 30)
    driver.settle()
    server.shutdown()


if __name__ == "__main__":
    main()
