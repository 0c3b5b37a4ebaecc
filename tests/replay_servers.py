"""Real loopback HTTP servers that answer like stock KoboldCPP 1.76 and llama-server.

:class:`KoboldReplay` answers with the exchanges recorded from a real, unmodified
KoboldCPP 1.76 (``shared/data/koboldcpp-1.76``: headers and bodies as recorded) and
keeps their quirks where a request differs from the recording: several tokens of text
per event, the *string* ``"null"`` finish reason, ``input_ids`` ignored, string booleans
from abort and an aborted stream ending with ``"length"``, HTTP 500 ``bad_input`` for
malformed JSON, 404 for ``/api/v1/tokenize``.  Token counts come from the same SmolLM2
vocabulary the recording was made with (BOS included, as recorded).

:class:`LlamaReplay` follows llama.cpp's server documentation (``/props``,
``/tokenize`` with pieces, ``/detokenize``, ``/completion`` streaming with token ids,
``stop_type``, ``timings.cache_n``; checked against a real llama-server).  Both speak HTTP/1.0 and close after each answer.

A test scripts the answer (``answer_chunks``), a delay between events (to press Stop),
or ``die_after`` events (the connection is reset, as when the server process dies).
"""

from __future__ import annotations

import json

import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

RECORDINGS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "koboldcpp-1.76"
if not RECORDINGS.exists():  # a worktree beside the main checkout
    RECORDINGS = Path("/work/shared/data/koboldcpp-1.76")


def load_recording(name: str) -> tuple[int, list[tuple[str, str]], bytes]:
    """``(status, headers, body)`` of one recorded response file."""
    raw = (RECORDINGS / name).read_bytes().decode("utf-8")
    lines = raw.split("\n")
    start = 1 if lines[0].startswith("###") else 0
    status = int(lines[start].split()[1])
    headers, i = [], start + 1
    while i < len(lines) and lines[i].strip():
        key, _, value = lines[i].partition(":")
        headers.append((key.strip(), value.strip()))
        i += 1
    body = "\n".join(lines[i + 1:])
    return status, headers, body.encode("utf-8")


def recorded_events(name: str) -> list[dict]:
    """The ``data:`` payloads of a recorded SSE body."""
    _, _, body = load_recording(name) if not name.endswith(".body.txt") else (0, [], (RECORDINGS / name).read_bytes())
    return [json.loads(line[5:]) for line in body.decode().splitlines() if line.startswith("data:")]


class _Base:
    def __init__(self, tokenizer) -> None:
        self.tok = tokenizer
        self.requests: list[tuple[str, dict | None]] = []
        self.answer_chunks: list[str] | None = None  # None: the recorded answer
        self.delay = 0.0
        self.die_after: int | None = None
        self.streams_started = threading.Event()
        self.reading_prompt = threading.Event()  # cleared: the server is still reading the prompt
        self.reading_prompt.set()
        self.aborted = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"
            server_version = owner.server_header

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                owner.requests.append((self.path, None))
                owner.get(self)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    owner.requests.append((self.path, None))
                    owner.malformed(self)
                    return
                owner.requests.append((self.path, body))
                owner.post(self, body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    server_header = "Replay"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def bodies(self, path: str) -> list[dict]:
        return [b for p, b in self.requests if p == path and b is not None]

    # -- helpers

    @staticmethod
    def send(handler, status: int, body: bytes, content_type: str = "application/json", headers=()) -> None:
        handler.send_response(status)
        sent = {"content-type"}
        handler.send_header("Content-Type", content_type)
        for key, value in headers:
            if key.lower() not in sent | {"content-length", "server", "date"}:
                handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def send_json(self, handler, data: dict, status: int = 200) -> None:
        self.send(handler, status, json.dumps(data).encode())

    def stream_events(self, handler, payloads, *, kobold: bool) -> None:
        # While the prompt is read (``reading_prompt`` not set): llama-server sends nothing,
        # not even its headers; KoboldCPP sends its headers, then nothing (both as seen).
        self.streams_started.set()
        if not kobold:
            self.reading_prompt.wait()
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.end_headers()
        if kobold:
            handler.wfile.flush()
            self.reading_prompt.wait()
        for n, payload in enumerate(payloads):
            if self.die_after is not None and n >= self.die_after:
                # The process dies: the connection is reset, not closed cleanly.
                handler.wfile.flush()
                handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                handler.connection.close()
                return
            prefix = "event: message\n" if kobold else ""
            try:
                handler.wfile.write(f"{prefix}data: {json.dumps(payload)}\n\n".encode())
                handler.wfile.flush()
            except OSError:
                return  # the client went away (an abort by closing)
            if self.delay:
                time.sleep(self.delay)


class KoboldReplay(_Base):
    """Stock KoboldCPP 1.76, from its recorded exchanges."""

    server_header = "ConcedoLlamaForKoboldServer"

    def __init__(self, tokenizer) -> None:
        super().__init__(tokenizer)
        self._abort_keys: set[str] = set()
        self.ignore_abort = False  # a server that says it stopped but streams on
        self.password: str | None = None  # as `koboldcpp.py --password`: POSTs need the key

    def recorded(self, handler, name: str) -> None:
        status, headers, body = load_recording(name)
        content_type = dict((k.lower(), v) for k, v in headers).get("content-type", "application/json")
        self.send(handler, status, body, content_type, headers)

    def get(self, handler) -> None:
        files = {"/api/v1/model": "01_model.txt", "/api/extra/version": "02_version.txt",
                 "/api/extra/true_max_context_length": "03_true_max_context.txt",
                 "/api/v1/config/max_context_length": "04_max_context.txt"}
        if handler.path == "/api/v1/model" and self.password:
            self.send_json(handler, {"result": "koboldcpp/protected-model"})  # the name is hidden
        elif handler.path in files:
            self.recorded(handler, files[handler.path])
        else:
            self.send(handler, 404, b"", "text/html")

    def malformed(self, handler) -> None:
        self.recorded(handler, "13_bad_json.txt")

    def post(self, handler, body: dict) -> None:
        path = handler.path
        if self.password and handler.headers.get("Authorization") != f"Bearer {self.password}":
            # What a real KoboldCPP 1.76 started with --password answers.
            self.send_json(handler, {"detail": {"error": "Unauthorized", "msg": "Authentication key is missing or "
                                                "invalid.", "type": "unauthorized"}}, 401)
            return
        if path == "/api/extra/tokencount":
            ids = self.tok.ids(str(body.get("prompt", "")), parse_special=True)
            # As recorded and as a real 1.76 counts: a BOS (id 1) is added unless the text
            # starts with one or the request says "special": false.
            if body.get("special", True) is not False and ids[:1] != [1]:
                ids = [1] + ids
            self.send_json(handler, {"value": len(ids), "ids": ids})
        elif path == "/api/v1/tokenize":
            self.recorded(handler, "06_tokenize_missing.txt")
        elif path == "/api/extra/abort":
            self._abort_keys.add(str(body.get("genkey")))
            self.aborted.set()
            self.recorded(handler, "15_abort.txt")
        elif path == "/api/extra/generate/check":
            self.recorded(handler, "14_check.txt")
        elif path == "/api/extra/generate/stream":
            if "prompt" not in body:  # input_ids alone: silently ignored, as recorded
                self.stream_events(handler, recorded_events("09_input_ids.txt"), kobold=True)
                return
            self.stream_events(handler, self._answer(body), kobold=True)
        else:
            self.send(handler, 404, b"", "text/html")

    def _answer(self, body: dict):
        chunks = self.answer_chunks if self.answer_chunks is not None else [
            e["token"] for e in recorded_events("07_stream.txt") if e["token"]]
        key = str(body.get("genkey"))
        limit = int(body.get("max_length", 100))
        for n, chunk in enumerate(chunks[:limit]):
            if key in self._abort_keys and not self.ignore_abort:
                # As recorded: after an abort the stream ends with "length".
                yield {"token": chunk, "finish_reason": "length"}
                return
            last = n == len(chunks) - 1 or n == limit - 1
            reason = ("stop" if n == len(chunks) - 1 else "length") if last else "null"
            if last and reason == "stop":
                yield {"token": chunk, "finish_reason": "null"}
                yield {"token": "", "finish_reason": "stop"}
            else:
                yield {"token": chunk, "finish_reason": reason}


class LlamaReplay(_Base):
    """llama-server's native API as documented."""

    server_header = "llama.cpp"

    def __init__(self, tokenizer, n_ctx: int = 4096) -> None:
        super().__init__(tokenizer)
        self.n_ctx = n_ctx
        self.eos_id = 2  # SmolLM2's <|im_end|>
        self._last_prompt: list[int] = []

    def get(self, handler) -> None:
        if handler.path == "/props":
            self.send_json(handler, {
                "default_generation_settings": {"n_ctx": self.n_ctx, "temperature": 0.8},
                "total_slots": 1, "model_path": "/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                "chat_template": "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
                                 "{{ message['content'] }}<|im_end|>\n{% endfor %}",
                "build_info": "b4000-replay"})
        elif handler.path == "/health":
            self.send_json(handler, {"status": "ok"})
        elif handler.path == "/v1/models":  # its OpenAI-compatible side, as a real b1-0c1e570 answers
            self.send_json(handler, {"object": "list", "data": [{
                "id": "/models/SmolLM2-135M-Instruct.Q4_1.gguf", "object": "model", "owned_by": "llamacpp",
                "meta": {"n_vocab": 49152, "n_ctx": self.n_ctx, "n_ctx_train": 8192}}]})
        else:
            self.send_json(handler, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}, 404)

    def malformed(self, handler) -> None:
        self.send_json(handler, {"error": {"code": 500, "message": "[json.exception.parse_error.101] parse error",
                                           "type": "server_error"}}, 500)

    def post(self, handler, body: dict) -> None:
        if handler.path == "/tokenize":
            # As llama-server: control-token strings are parsed unless the request says not.
            ids = self.tok.ids(str(body.get("content", "")), parse_special=body.get("parse_special", True) is not False)
            if body.get("with_pieces"):
                tokens = []
                for i in ids:
                    raw = self.tok.token_bytes(i)
                    try:
                        piece = raw.decode("utf-8")
                    except UnicodeDecodeError:
                        piece = list(raw)  # documented: bytes when not valid UTF-8
                    tokens.append({"id": i, "piece": piece})
                self.send_json(handler, {"tokens": tokens})
            else:
                self.send_json(handler, {"tokens": ids})
        elif handler.path == "/detokenize":
            self.send_json(handler, {"content": self.tok.detokenize(body.get("tokens", []), keep_control=False)})
        elif handler.path == "/completion":
            prompt = body.get("prompt")
            if not isinstance(prompt, list):
                self.send_json(handler, {"error": {"code": 400, "message": "this replay wants token ids",
                                                   "type": "invalid_request_error"}}, 400)
                return
            cached = 0
            while cached < min(len(prompt), len(self._last_prompt)) and prompt[cached] == self._last_prompt[cached]:
                cached += 1
            self._last_prompt = list(prompt)
            self.stream_events(handler, self._answer(body, len(prompt), cached), kobold=False)
        else:
            self.send_json(handler, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}, 404)

    def _answer(self, body: dict, n_prompt: int, cached: int):
        chunks = self.answer_chunks if self.answer_chunks is not None else ["1", ".", " Ban", "anas", "\n", "2", ".", " Or", "anges"]
        limit = int(body.get("n_predict", 100))
        n = 0
        for chunk in chunks:
            ids = self.tok.ids(chunk)
            if n + len(ids) > limit:
                break
            n += len(ids)
            self._last_prompt.extend(ids)  # the slot's cache holds what it generated too…
            yield {"content": chunk, "tokens": ids, "stop": False, "id_slot": 0}
        if n < limit:
            # The end token comes as an event of its own, without text (as a real server sends
            # it); it is the last token sampled, so it is not in the cache.
            yield {"content": "", "tokens": [self.eos_id], "stop": False, "id_slot": 0}
        elif n:
            self._last_prompt.pop()  # …but its last token, sampled and never evaluated
        yield {"content": "", "tokens": [], "stop": True, "stop_type": "eos" if n < limit else "limit",
               # As a real llama-server says it: tokens_cached is what the slot holds now
               # (prompt + answer but its last token), timings.cache_n the reused prefix.
               "tokens_predicted": n, "tokens_evaluated": n_prompt, "tokens_cached": n_prompt + max(0, n - 1),
               "timings": {"cache_n": cached, "prompt_n": n_prompt - cached}}





class OpenAIReplay(_Base):
    """An OpenAI-compatible completions server: ``/v1/models``, ``/v1/completions`` (SSE
    ``data: {"choices": [{"text", "finish_reason"}]}`` ending ``data: [DONE]``)."""

    model_id = "replay-model"

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.model_id, "object": "model", "owned_by": "replay"}]}

    def get(self, handler) -> None:
        if handler.path == "/v1/models":
            self.send_json(handler, self.models())
        else:
            self.native_get(handler)

    def native_get(self, handler) -> None:
        self.send(handler, 404, b"404 page not found", "text/plain")

    def native_post(self, handler, body: dict) -> None:
        self.send(handler, 404, b"404 page not found", "text/plain")

    def malformed(self, handler) -> None:
        self.send_json(handler, {"error": {"message": "invalid JSON", "type": "invalid_request_error"}}, 400)

    def post(self, handler, body: dict) -> None:
        if handler.path == "/v1/completions":
            self.stream_events(handler, self._answer(body), kobold=False)
            handler.wfile.write(b"data: [DONE]\n\n")
        else:
            self.native_post(handler, body)

    def _answer(self, body: dict):
        chunks = self.answer_chunks if self.answer_chunks is not None else ["Mochi", " is", " your", " cat", "."]
        limit = int(body.get("max_tokens", 100))
        for n, chunk in enumerate(chunks[:limit]):
            last = n == len(chunks) - 1 or n == limit - 1
            reason = ("stop" if n == len(chunks) - 1 else "length") if last else None
            yield {"id": "cmpl-replay", "object": "text_completion", "model": self.model_id,
                   "choices": [{"index": 0, "text": chunk, "finish_reason": reason}]}


class OllamaReplay(OpenAIReplay):
    """Ollama as its API documentation describes it: the OpenAI-compatible ``/v1`` beside
    the native ``/api/version``, ``/api/show`` (``model_info["<arch>.context_length"]``,
    Modelfile ``parameters`` text with ``num_ctx``) and ``/api/ps`` (running models with the
    ``context_length`` they were loaded with).  ``num_ctx`` / ``running_ctx`` of ``None``
    leave that fact out, as a stock model that is not loaded yet."""

    server_header = "Go-http-client"
    model_id = "llama3.2:latest"

    def __init__(self, tokenizer, *, train_ctx: int = 131072, num_ctx: int | None = None,
                 running_ctx: int | None = None) -> None:
        super().__init__(tokenizer)
        self.train_ctx, self.num_ctx, self.running_ctx = train_ctx, num_ctx, running_ctx

    def native_get(self, handler) -> None:
        if handler.path == "/api/version":
            self.send_json(handler, {"version": "0.12.6"})
        elif handler.path == "/api/ps":
            running = [] if self.running_ctx is None else [{
                "name": self.model_id, "model": self.model_id, "size": 2019393189, "digest": "a80c4f17acd5",
                "details": {"format": "gguf", "family": "llama", "parameter_size": "3.2B",
                            "quantization_level": "Q4_K_M"},
                "expires_at": "2026-11-23T12:34:56Z", "size_vram": 0, "context_length": self.running_ctx}]
            self.send_json(handler, {"models": running})
        elif handler.path == "/":
            self.send(handler, 200, b"Ollama is running", "text/plain")
        else:
            super().native_get(handler)

    def native_post(self, handler, body: dict) -> None:
        if handler.path == "/api/show":
            if body.get("model") not in (self.model_id, self.model_id.removesuffix(":latest")):
                self.send_json(handler, {"error": f"model '{body.get('model')}' not found"}, 404)
                return
            parameters = 'stop                           "<|eot_id|>"'
            if self.num_ctx is not None:
                parameters = f"num_ctx                        {self.num_ctx}\n" + parameters
            self.send_json(handler, {
                "modelfile": "FROM /models/llama3.2\n", "parameters": parameters,
                "template": "{{ .Prompt }}", "details": {"family": "llama", "parameter_size": "3.2B"},
                "model_info": {"general.architecture": "llama", "general.parameter_count": 3212749888,
                               "llama.context_length": self.train_ctx, "llama.embedding_length": 3072},
                "capabilities": ["completion", "tools"]})
        else:
            super().native_post(handler, body)


class LMStudioReplay(OpenAIReplay):
    """LM Studio as its REST API documentation describes it: ``/v1`` plus ``/api/v0/models``
    with each model's ``state``, ``max_context_length`` and, once loaded,
    ``loaded_context_length``."""

    server_header = "LM Studio"
    model_id = "meta-llama-3.1-8b-instruct"

    def __init__(self, tokenizer, *, max_ctx: int = 131072, loaded_ctx: int | None = 8192) -> None:
        super().__init__(tokenizer)
        self.max_ctx, self.loaded_ctx = max_ctx, loaded_ctx

    def models(self) -> dict:
        """Every model it has, as with just-in-time loading on (the default)."""
        return {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "organization_owner"} for m in
                                           ("text-embedding-nomic-embed-text-v1.5", "qwen2-vl-7b-instruct",
                                            self.model_id)]}

    def native_get(self, handler) -> None:
        if handler.path == "/api/v0/models":
            loaded = {"id": self.model_id, "object": "model", "type": "llm", "publisher": "lmstudio-community",
                      "arch": "llama", "compatibility_type": "gguf", "quantization": "Q4_K_M",
                      "state": "loaded" if self.loaded_ctx else "not-loaded", "max_context_length": self.max_ctx}
            if self.loaded_ctx:
                loaded["loaded_context_length"] = self.loaded_ctx
            other = {"id": "qwen2-vl-7b-instruct", "object": "model", "type": "vlm", "arch": "qwen2_vl",
                     "state": "not-loaded", "max_context_length": 32768}
            embedder = {"id": "text-embedding-nomic-embed-text-v1.5", "object": "model", "type": "embeddings",
                        "arch": "nomic-bert", "state": "not-loaded", "max_context_length": 2048}
            self.send_json(handler, {"object": "list", "data": [embedder, other, loaded]})
        else:
            self.send_json(handler, {"error": f"Unexpected endpoint or method. ({handler.command} {handler.path})"}, 200)


class LlamaSwapReplay(OpenAIReplay):
    """A server with several models behind one ``/v1`` (llama-swap, vLLM with several
    served names, LM Studio with JIT loading): each answer says which model wrote it, and
    a request for a model it does not serve is refused as llama-swap does."""

    server_header = "llama-swap"
    served = ("qwen2.5-coder-1.5b", "llama-3.2-3b", "phi-3-mini")

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 1732700000,
                                            "owned_by": "llama-swap"} for name in self.served]}

    def post(self, handler, body: dict) -> None:
        if handler.path == "/v1/completions" and body.get("model") not in self.served:
            self.send(handler, 404, f"could not find suitable handler for {body.get('model')}".encode(),
                      "text/plain")
            return
        super().post(handler, body)

    def _answer(self, body: dict):
        self.answer_chunks = ["I am", f" {body['model']}", "."]
        yield from super()._answer(body)
