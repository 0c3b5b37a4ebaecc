"""A real HTTP server on loopback that speaks only OpenAI's chat completions, and answers
them with whatever bytes a test scripts.

For what no real server here produces: a server without ``/v1/completions`` (hosted
chat-only APIs), one that fails (HTTP 500) or streams garbage.  ``GET /v1/models`` lists
one model; ``GET /v1/completions`` is 404 Not Found; ``GET /v1/chat/completions`` is 405
(the route exists, for POST); ``POST /v1/chat/completions`` gets :meth:`respond`'s
answer and is recorded in ``requests``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODELS = {"object": "list", "data": [{"id": "chat-only-model", "object": "model", "owned_by": "test"}]}
CHAT_PATH = "/v1/chat/completions"


def chat_sse(*pieces: str, finish: str = "stop") -> bytes:
    """A well-formed chat stream answering ``pieces`` then ``finish``."""
    events = [{"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}]
    events += [{"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces]
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return ("".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n").encode()


class ChatOnlyServer:
    """``respond(body, status=…, content_type=…)`` sets what the next chat requests get."""

    def __init__(self) -> None:
        self.body = chat_sse("Hello", " there", ".")
        self.status = 200
        self.content_type = "text/event-stream"
        self.requests: list[dict] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._send(200, "application/json", json.dumps(MODELS).encode())
                elif self.path == CHAT_PATH:
                    self._send(405, "application/json", b'{"detail": "Method Not Allowed"}')
                else:
                    self._send(404, "application/json", b'{"detail": "Not Found"}')

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.path != CHAT_PATH:
                    self._send(404, "application/json", b'{"detail": "Not Found"}')
                    return
                try:
                    owner.requests.append(json.loads(raw or b"{}"))
                except ValueError:
                    owner.requests.append({})
                self._send(owner.status, owner.content_type, owner.body)

            def _send(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def respond(self, body: bytes, *, status: int = 200, content_type: str = "text/event-stream") -> None:
        self.body, self.status, self.content_type = body, status, content_type

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
