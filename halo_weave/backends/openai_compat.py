"""Any OpenAI-compatible completions server (Ollama, LM Studio, vLLM, Jan,
llama-cpp-python's server, hosted APIs), in text mode.

``GET /v1/models`` lists the models the server serves (and, on some servers, their context:
vLLM's ``max_model_len``, LM Studio's ``max_context_length``, llama.cpp's
``meta.n_ctx_train``); the one asked for (``model``: the conversation's choice) is used when
listed, else the first, and every request names it (llama-swap, Ollama and LM Studio load
the model a request names; LM Studio's and Ollama's embedding models are left out and, with
none asked for, a model the server has loaded is used);
``POST /v1/completions`` with ``"stream": true`` streams ``data: {"choices": [{"text",
"finish_reason"}]}`` lines ending with ``data: [DONE]``.  An API key goes in
``Authorization: Bearer``.  Counting: llama-cpp-python's ``/extras/tokenize/count`` or
vLLM's ``/tokenize`` when present (exact), else the bundled tokenizer (an estimate).
Aborting closes the connection.  At most four stop strings (OpenAI's limit).  Top-k and
the repetition penalty are not OpenAI fields: they are sent under the names local servers
read (``top_k``; ``repeat_penalty``: llama.cpp, llama-cpp-python, LM Studio;
``repetition_penalty``: vLLM), and a strict server that refuses them (a 400 or 422 before
any text) is asked again with the standard fields only, from then on.  Qt-free.
"""

from __future__ import annotations

import logging
from typing import Iterator

from ..errors import BackendError, BackendHTTPError, ProtocolError
from ..events import ModelInfo
from . import native_context
from .base import ASSUMED_CONTEXT, Capabilities
from .text_mode import TextModeBackend, TextStream

log = logging.getLogger("halo_weave.backends")

#: OpenAI accepts at most this many stop strings.
MAX_STOPS = 4
#: Statuses with which a strict server refuses fields it does not know.
REFUSED_FIELDS = (400, 422)


def sampler_extras(top_k: int, rep_pen: float) -> dict:
    """Top-k and the repetition penalty under the names local servers read (none at their
    neutral values: 0 = no top-k, 1.0 = no penalty)."""
    extras: dict = {}
    if top_k and top_k > 0:
        extras["top_k"] = int(top_k)
    if rep_pen and abs(rep_pen - 1.0) > 1e-9:
        extras["repeat_penalty"] = extras["repetition_penalty"] = float(rep_pen)
    return extras

#: (path, body key, answer key) of the token counters some servers add.
COUNTERS = (("/extras/tokenize/count", "input", "count"), ("/tokenize", "prompt", "count"))


class OpenAICompat(TextModeBackend):
    """``/v1/completions`` + ``/v1/models``."""

    kind = "openai"

    def __init__(self, base_url: str, *, api_key: str | None = None, models: dict | None = None,
                 model: str | None = None, **kwargs) -> None:
        base_url = base_url.rstrip("/")
        if base_url.endswith("/v1"):
            base_url = base_url[:-3]
        super().__init__(base_url, api_key=api_key, **kwargs)
        self._models = models
        #: The model asked for; :attr:`model_id` is the one used (it, when the server lists it).
        #: :attr:`models`: every model the server lists, in its order (the window's model picker).
        self.wanted_model = model or None
        self.models: list[str] = []
        self.model_id: str | None = None
        self._counter: tuple[str, str, str] | None = None
        self._counter_checked = False
        self.native: native_context.NativeContext | None = None
        #: False once the server refused top-k and the repetition penalty (see the module docstring).
        self.sends_sampler_extras = True

    @property
    def missing_model(self) -> str | None:
        """The model asked for when the server does not list it (the first is used instead)."""
        return self.wanted_model if self.wanted_model and self.wanted_model != self.model_id else None

    @property
    def label(self) -> str:
        if self.native is not None:
            return f"{self.native.label} {self.version}" if self.version else self.native.label
        return "OpenAI-compatible"

    @property
    def counts_exactly(self) -> bool:
        """Whether budgets count the server's own tokens (it has a counter)."""
        return self._counter is not None

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            attention=False, token_ids=False, exact_tokens=self.counts_exactly,
            prefix_cache="server-side only, if the server caches text prompts",
            abort="yes (closing the stream; the server stops when it notices)",
            template="Ollama's is a Go template: matched by its markers; else chosen in Settings"
            if self.native is not None and self.native.label == "Ollama"
            else "chosen in Settings (the completions API does not publish one)")

    def server_count(self, text: str) -> int | None:
        if not self._counter_checked:
            self._counter_checked = True
            for path, key, answer in COUNTERS:
                body = {key: "hi"} if key == "input" else {key: "hi", "model": self.model_id or ""}
                try:
                    data = self.http.post_json(path, body)
                except BackendError:
                    data = None
                if data is not None and isinstance(data.get(answer), int):
                    self._counter = (path, key, answer)
                    break
        if self._counter is None:
            return None
        path, key, answer = self._counter
        body = {key: text} if key == "input" else {key: text, "model": self.model_id or ""}
        data = self.http.post_json(path, body) or {}
        value = data.get(answer)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def model_info(self) -> ModelInfo:
        if self._info is not None:
            return self._info
        models = self._models or self.http.request("GET", "/v1/models")
        entries = [e for e in models.get("data") or [] if isinstance(e, dict) and e.get("id")]
        cannot_chat, loaded = native_context.model_states(self.http, [str(e["id"]) for e in entries])
        entries = [e for e in entries if str(e["id"]) not in cannot_chat] or entries
        if not entries:
            raise ProtocolError("/v1/models lists no model")
        self.models = [str(e["id"]) for e in entries]
        # The one asked for; else one loaded already (LM Studio lists every model it has); else the first.
        first = next((e for e in entries if str(e["id"]) == self.wanted_model), None) or next(
            (e for e in entries if str(e["id"]) in loaded), entries[0])
        self.model_id = str(first["id"])
        context = 0
        meta = first.get("meta") if isinstance(first.get("meta"), dict) else {}
        for value in (first.get("max_model_len"), first.get("max_context_length"), first.get("context_length"),
                      meta.get("n_ctx"), meta.get("n_ctx_train")):
            if isinstance(value, int) and value > 0:
                context = value
                break
        known = context > 0
        self.native = native_context.read(self.http, self.model_id)
        if self.native is not None:
            self.version = self.native.version
            if not known or self.native.known:
                context, known = self.native.context, self.native.known
        server_context = context or ASSUMED_CONTEXT
        self.calibrate()
        template = self.native.template if self.native is not None else None
        info = ModelInfo(
            name=self.model_id or "model", num_layers=0, num_heads=0, num_kv_heads=0, hidden_size=0,
            max_context=self.table_context(server_context), bos_token_id=None, eos_token_id=None,
            chat_template=template, supports_attention=False, raw=models)
        info.kind, info.version = self.kind, self.version
        info.template_origin = (f"{self.native.label} /api/show" if template
                                else self.native.label if self.native is not None else "this OpenAI-compatible server")
        info.server_max_context, info.context_known = server_context, known
        return self._keep_info(info)

    def open_stream(self, stream: TextStream) -> Iterator[tuple[str, str | None]]:
        p = stream.params
        try:
            stream.server_prompt_tokens = self.server_count(stream.prompt)
        except BackendError:
            stream.server_prompt_tokens = None
        body = self.request_body(stream)
        extras = sampler_extras(p["top_k"], p["rep_pen"]) if self.sends_sampler_extras else {}
        try:
            yield from self.answer_chunks(stream, {**body, **extras})
        except BackendHTTPError as exc:
            if not extras or exc.status not in REFUSED_FIELDS or stream.stats.events:
                raise
            log.info("%s refused top_k / repeat_penalty (%s): standard fields only from now on",
                     self.base_url, exc)
            self.sends_sampler_extras = False
            yield from self.answer_chunks(stream, body)

    def request_body(self, stream: TextStream) -> dict:
        """The standard fields of ``stream``'s request (top-k and the penalty are added apart)."""
        p = stream.params
        body = {"model": self.model_id or "", "prompt": stream.prompt, "max_tokens": p["max_length"],
                "temperature": p["temperature"], "top_p": p["top_p"], "stream": True}
        if p["stop_sequence"]:
            body["stop"] = list(p["stop_sequence"])[:MAX_STOPS]
        if p["sampler_seed"] is not None and p["sampler_seed"] >= 0:
            body["seed"] = p["sampler_seed"]
        return body

    def answer_chunks(self, stream: TextStream, body: dict) -> Iterator[tuple[str, str | None]]:
        """``(text, finish_reason or None)`` of each streamed chunk of the answer to ``body``."""
        for data, choice in first_choices(stream, "/v1/completions", body):
            text = choice.get("text") or ""
            if not isinstance(text, str):
                raise ProtocolError(f"a completion chunk without text: {data!r:.120}")
            yield text, finish_reason(choice)

    def abort(self, request_id: str | None = None) -> bool:
        return False  # a stream is aborted through itself (closing its connection)


def first_choices(stream, path: str, body: dict) -> Iterator[tuple[dict, dict]]:
    """``(chunk, its first choice)`` of each chunk streamed from ``path`` for ``body``;
    an error the server reports mid-answer raises :class:`ProtocolError`, a chunk without
    a choice (a usage-only one) is skipped."""
    for data in stream.sse(path, body):
        if "error" in data:
            error = data["error"]
            message = error.get("message") if isinstance(error, dict) else error
            raise ProtocolError(f"the server reported an error mid-answer: {message}")
        choices = data.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            yield data, choices[0]


def finish_reason(choice: dict) -> str | None:
    """A choice's finish reason, None while the answer goes on."""
    reason = choice.get("finish_reason")
    return reason if isinstance(reason, str) and reason not in ("", "null") else None
