"""A real HTTP server on loopback that answers with whatever bytes a test scripts.

Only for cases the real server cannot produce (malformed SSE, truncated base64, a
connection cut mid-stream).  It speaks plain HTTP/1.0 through the standard library and
closes the connection after each answer, as KoboldCPP does.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL_INFO = {
    "result": "koboldcpp/fake", "model_name": "koboldcpp/fake", "vocab_size": 100,
    "num_layers": 2, "num_attention_heads": 3, "num_key_value_heads": 1, "embedding_size": 8,
    "max_context_length": 640, "bos_token_id": 1, "eos_token_id": 2,
}


def sse(*events) -> bytes:
    """SSE framing of ``events`` (dicts become JSON, strings are sent verbatim)."""
    out = []
    for event in events:
        data = event if isinstance(event, str) else json.dumps(event)
        out.append(f"event: message\ndata: {data}\n\n")
    return "".join(out).encode("utf-8")


class FaultyServer:
    """``respond(body)`` sets what the next generate requests get."""

    def __init__(self) -> None:
        self.body = b""
        self.status = 200
        self.content_type = "text/event-stream"
        self.cut = False  # drop the connection after the body, without closing cleanly
        self.requests: list[dict] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:
                self._send(200, "application/json", json.dumps(MODEL_INFO).encode())

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
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
                if owner.cut:
                    # An abrupt reset, as when the server process dies mid-stream.
                    import socket
                    import struct

                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def respond(self, body: bytes, *, status: int = 200, content_type: str = "text/event-stream",
                cut: bool = False) -> None:
        self.body, self.status, self.content_type, self.cut = body, status, content_type, cut

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
