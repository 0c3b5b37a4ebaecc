"""HTTP client for the attention API (our reference server, the patched KoboldCPP fork,
or stock KoboldCPP without attention).

>>> client = KoboldClient("http://127.0.0.1:5001")               # doctest: +SKIP
>>> stream = client.stream(input_ids=ids, max_length=50)        # doctest: +SKIP
>>> for event in stream:                                         # doctest: +SKIP
...     show(event.token_id, event.text, event.attention)       # attention: float32 or None
>>> stream.done.finish_reason, stream.text                      # doctest: +SKIP

Every failure is a :class:`~halo_weave.errors.BackendError` (the tree is in
:mod:`halo_weave.errors`; the names are importable from here too), with a message a user
can read.

An attention payload that cannot be used (truncated base64, wrong shape, NaN) is *not*
an error: that event's ``attention`` is ``None``, the stream goes on, and
``stream.stats.attention_errors`` counts it.

Events.  Our server sends one event per generated token (``text`` may be ``""`` while a
UTF-8 character is incomplete; the completing token carries it), each with its exact
attention.  The original fork sends ``null`` attention on the first token, vectors padded
with zeros to a multiple of 256 (cut here to the live length), and merges split-UTF-8
tokens into one event carrying the *last* token's id.  Stock KoboldCPP sends text chunks
without ids (``token_id == -1``, ``attention is None``).

Streams use a connect timeout but no read timeout: a slow model may take as long as it
needs between tokens.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Iterator, Sequence

import httpx
import httpx_sse
import numpy as np

from .brightness import decode_attention
from .events import NO_TOKEN_ID, DoneEvent, ModelInfo, StreamStats, TokenEvent  # noqa: F401 - importable from here too
from .errors import (  # noqa: F401 - the client's errors, importable from here too
    AttentionError,
    BackendError,
    BackendHTTPError,
    BackendTimeout,
    BackendUnavailable,
    GenerationAborted,
    PartialError,
    ProtocolError,
    StreamInterrupted,
)

#: Seconds allowed to open a connection, and for short calls (the seed's 5 s).
CONNECT_TIMEOUT_S = 5.0
TOKENIZE_TIMEOUT_S = 5.0

#: Tokenizing takes time in proportion to the text: a 1M-character paste took 5.5 s on
#: the bundled server (issue 17), past the fixed 5 s.  The timeout grows by a second per
#: this many characters, a margin of ~10x over what was measured.
TOKENIZE_CHARS_PER_S = 20_000


def tokenize_timeout(chars: int, base: float = TOKENIZE_TIMEOUT_S) -> float:
    """Seconds to wait for the tokenization of ``chars`` characters."""
    return base + chars / TOKENIZE_CHARS_PER_S


# ---------------------------------------------------------------- client


class KoboldClient:
    """Typed calls to one server.  Thread-safe: a stream may be aborted from another thread."""

    def __init__(self, base_url: str, *, connect_timeout: float = CONNECT_TIMEOUT_S,
                 tokenize_timeout: float = TOKENIZE_TIMEOUT_S, api_key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.connect_timeout = connect_timeout
        self.tokenize_timeout = tokenize_timeout
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(tokenize_timeout, connect=connect_timeout),
            headers={"Accept": "application/json",
                     **({"Authorization": f"Bearer {api_key}"} if api_key else {})},
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "KoboldClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- short calls

    def _call(self, method: str, path: str, body: dict | None = None, timeout: float | None = None) -> dict:
        try:
            extra = {"timeout": httpx.Timeout(timeout, connect=self.connect_timeout)} if timeout else {}
            response = self._http.request(method, path, json=body, **extra)
        except httpx.TimeoutException as exc:
            raise BackendTimeout(f"{self.base_url}{path} did not answer in time ({exc.__class__.__name__})") from exc
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise BackendUnavailable(f"no server answers at {self.base_url}: {exc}") from exc
        except httpx.HTTPError as exc:
            raise BackendUnavailable(f"request to {self.base_url}{path} failed: {exc}") from exc
        if response.status_code >= 400:
            raise BackendHTTPError(response.status_code, _error_message(response))
        try:
            data = response.json()
        except ValueError as exc:
            raise ProtocolError(f"{path} answered with non-JSON: {response.text[:200]!r}") from exc
        if not isinstance(data, dict):
            raise ProtocolError(f"{path} answered with {type(data).__name__}, not an object")
        return data

    def model_info(self) -> ModelInfo:
        """The served model's facts (``/api/v1/model``)."""
        raw = self._call("GET", "/api/v1/model")

        def num(key: str, default=0):
            value = raw.get(key, default)
            return value if isinstance(value, int) and not isinstance(value, bool) else default

        max_context = num("max_context_length")
        if not max_context:
            try:
                max_context = int(self._call("GET", "/api/v1/config/max_context_length").get("value", 0))
            except (BackendError, TypeError, ValueError):
                max_context = 0
        template = raw.get("chat_template")
        return ModelInfo(
            name=str(raw.get("model_name") or raw.get("result") or "unknown"),
            num_layers=num("num_layers"),
            num_heads=num("num_attention_heads"),
            num_kv_heads=num("num_key_value_heads", num("num_attention_heads")),
            hidden_size=num("embedding_size"),
            max_context=max_context,
            bos_token_id=num("bos_token_id", None),
            eos_token_id=num("eos_token_id", None),
            chat_template=template if isinstance(template, str) and template else None,
            supports_attention=raw.get("supports_attention") is True,
            raw=raw,
        )

    def tokenize(self, text: str, add_special_tokens: bool = False) -> list[tuple[int, str]]:
        """``(token_id, piece)`` pairs for ``text`` (special-token strings are parsed)."""
        data = self._call("POST", "/api/v1/tokenize",
                          {"text": text, "add_special_tokens": add_special_tokens, "with_pieces": True},
                          timeout=tokenize_timeout(len(text), self.tokenize_timeout))
        tokens = data.get("tokens")
        if not isinstance(tokens, list):
            raise ProtocolError("tokenize answer has no token list")
        pairs = []
        for item in tokens:
            if not isinstance(item, dict):
                raise ProtocolError("tokenize answer holds a non-object token")
            token_id = item.get("token_id", item.get("id"))
            piece = item.get("text", "")
            if isinstance(token_id, bool) or not isinstance(token_id, int) or not isinstance(piece, str):
                raise ProtocolError(f"tokenize answer holds a malformed token {item!r:.80}")
            pairs.append((token_id, piece))
        return pairs

    def detokenize(self, ids) -> str:
        """Text of ``ids`` (special tokens come back empty)."""
        data = self._call("POST", "/api/v1/detokenize", {"token_ids": [int(i) for i in ids]})
        text = data.get("text", data.get("result"))
        if not isinstance(text, str):
            raise ProtocolError("detokenize answer has no text")
        return text

    def abort(self, request_id: str | None = None) -> bool:
        """Ask the server to stop the running generation (that one only, given its id)."""
        body = {"genkey": request_id, "request_id": request_id} if request_id else {}
        data = self._call("POST", "/api/extra/abort", body)
        return data.get("success") in (True, "true")

    # -- streaming

    def stream(self, *, input_ids=None, prompt=None, max_length: int = 200, temperature: float = 0.7,
               top_p: float = 0.9, top_k: int = 40, rep_pen: float = 1.1, sampler_seed: int = -1,
               stop_sequence: Sequence[str] = (), output_attentions: bool = True,
               attention_format: str = "aggregated", request_id: str | None = None,
               raise_on_abort: bool = False) -> "GenerationStream":
        """A generation stream; the request is sent when iteration starts."""
        if (input_ids is None) == (prompt is None):
            raise ValueError("pass exactly one of input_ids and prompt")
        body: dict = {
            "max_length": max_length, "temperature": temperature, "top_p": top_p, "top_k": top_k,
            "rep_pen": rep_pen, "sampler_seed": sampler_seed, "stop_sequence": list(stop_sequence),
            "output_attentions": output_attentions, "attention_format": attention_format,
            # Token ids even without attention (our server; others ignore the field).
            "per_token": True,
            "request_id": request_id or f"hw-{uuid.uuid4().hex[:12]}",
        }
        if input_ids is not None:
            body["input_ids"] = [int(i) for i in input_ids]
        else:
            body["prompt"] = prompt
        return GenerationStream(self, body, raise_on_abort=raise_on_abort)


class GenerationStream:
    """Iterable of :class:`TokenEvent`; afterwards ``done`` holds the :class:`DoneEvent`.

    ``tokens`` grows as events arrive (``text`` joins their texts); it keeps each event's id
    and text but not its attention (the consumer applies each vector and drops it: at 30k context
    200 vectors are ~24 MB).  Iterate once.  ``abort()`` (any
    thread) asks the server to stop after the current token; the stream then ends with
    ``done.finish_reason == "abort"``.
    """

    def __init__(self, client: KoboldClient, body: dict, *, raise_on_abort: bool = False) -> None:
        self.client = client
        self.body = body
        self.request_id: str = body["request_id"]
        self.raise_on_abort = raise_on_abort
        self.tokens: list[TokenEvent] = []
        self.done: DoneEvent | None = None
        self.stats = StreamStats()
        self._prompt_tokens = len(body["input_ids"]) if "input_ids" in body else None
        self._drift = 0  # tokens the fork merged into earlier events (see _attention)
        self._started = False
        self._abort_requested = False
        self._t0 = self._t_first = self._t_last = 0.0

    @property
    def text(self) -> str:
        """The text so far, joined from :attr:`tokens` (not kept as a second copy)."""
        return "".join(t.text for t in self.tokens)

    def abort(self) -> bool:
        """Ask the server to stop this generation."""
        self._abort_requested = True
        return self.client.abort(self.request_id)

    def __iter__(self) -> Iterator[TokenEvent]:
        if self._started:
            raise RuntimeError("a GenerationStream can be iterated only once")
        self._started = True
        return self._events()

    def _events(self) -> Iterator[TokenEvent]:
        client = self.client
        timeout = httpx.Timeout(client.connect_timeout, read=None)
        self._t0 = time.perf_counter()
        got_response = False
        try:
            with client._http.stream("POST", "/api/extra/generate/stream", json=self.body,
                                     timeout=timeout, headers={"Accept": "text/event-stream"}) as response:
                got_response = True
                if response.status_code >= 400:
                    response.read()
                    raise BackendHTTPError(response.status_code, _error_message(response))
                for sse in httpx_sse.EventSource(response).iter_sse():
                    yield from self._handle(sse)
                    if self.done is not None:
                        break
        except httpx.ConnectTimeout as exc:
            raise BackendTimeout(f"connecting to {client.base_url} timed out") from exc
        except httpx.ConnectError as exc:
            raise BackendUnavailable(f"no server answers at {client.base_url}: {exc}") from exc
        except httpx_sse.SSEError as exc:
            raise self._partial(ProtocolError, f"not an event stream: {exc}") from exc
        except httpx.TransportError as exc:
            if not got_response and not self.tokens:
                raise BackendUnavailable(f"{client.base_url} dropped the connection: {exc}") from exc
            raise self._partial(StreamInterrupted, f"connection lost mid-stream: {exc}") from exc
        if self.done is None:
            raise self._partial(StreamInterrupted, "the stream ended without a done event")
        if self.raise_on_abort and self.done.finish_reason == "abort":
            raise self._partial(GenerationAborted, "the generation was aborted")

    def _partial(self, kind, message: str):
        return kind(f"{message} (after {len(self.tokens)} tokens)", self.text, self.tokens)

    def _handle(self, sse: httpx_sse.ServerSentEvent) -> Iterator[TokenEvent]:
        if not sse.data:
            return
        self.stats.events += 1
        try:
            data = json.loads(sse.data)
        except ValueError as exc:
            raise self._partial(ProtocolError, f"event is not JSON: {sse.data[:80]!r}") from exc
        if not isinstance(data, dict):
            raise self._partial(ProtocolError, f"event is {type(data).__name__}, not an object")
        kind = data.get("type")
        if kind == "token":
            yield self._token(data)
        elif kind == "done":
            self._finish(data)
        elif kind == "error":
            message = data.get("message")
            raise self._partial(StreamInterrupted, f"server error: {message if isinstance(message, str) else data!r:.200}")
        elif kind is None and "token" in data:  # stock KoboldCPP text chunk
            text = data.get("token") or ""
            reason = data.get("finish_reason")
            if not isinstance(text, str) or not (reason is None or isinstance(reason, str)):
                raise self._partial(ProtocolError, f"malformed text event {data!r:.120}")
            if isinstance(reason, str) and reason.strip() in ("", "null", "None"):
                reason = None  # stock KoboldCPP sends the *string* "null" until the end
            if text:
                yield self._add(TokenEvent(NO_TOKEN_ID, text, None))
            if reason:
                self._finish({"finish_reason": reason})
        else:
            self.stats.ignored_events += 1

    def _token(self, data: dict) -> TokenEvent:
        token = data.get("token")
        if not isinstance(token, dict):
            raise self._partial(ProtocolError, f"token event without a token object: {data!r:.120}")
        token_id = token.get("token_id")
        text = token.get("text", "")
        if token_id is None:
            token_id = NO_TOKEN_ID
        if isinstance(token_id, bool) or not isinstance(token_id, int) or not isinstance(text, str):
            raise self._partial(ProtocolError, f"malformed token {token!r:.120}")
        return self._add(TokenEvent(token_id, text, self._attention(data.get("attention"))))

    def _add(self, event: TokenEvent) -> TokenEvent:
        now = time.perf_counter()
        self._t_first = self._t_first or now
        self._t_last = now
        self.stats.token_events += 1
        self.tokens.append(TokenEvent(event.token_id, event.text, None))
        return event

    def _attention(self, payload) -> np.ndarray | None:
        if payload is None:
            self.stats.attention_missing += 1
            return None
        expected = None
        if self._prompt_tokens is not None:
            expected = self._prompt_tokens + len(self.tokens) + self._drift
        try:
            vector = decode_attention(payload, expected)
        except AttentionError as exc:
            vector = self._merged_tokens_attention(payload, expected)
            if vector is None:
                self.stats.attention_errors += 1
                self.stats.last_attention_error = str(exc)
                return None
        self.stats.attention_events += 1
        return vector

    def _merged_tokens_attention(self, payload, expected: int | None) -> np.ndarray | None:
        """The fork merges split-UTF-8 tokens into one event, so its live length runs ahead
        of our event count.  A padded vector shows the true live length: the last nonzero
        cell is the query token itself."""
        if expected is None or not isinstance(payload, dict):
            return None
        try:
            vector = decode_attention(payload, None)
        except AttentionError:
            return None
        nonzero = np.flatnonzero(vector)
        live = int(nonzero[-1]) + 1 if nonzero.size else 0
        if live <= expected:
            return None
        self._drift += live - expected
        return vector[:live]

    def _finish(self, data: dict) -> None:
        reason = data.get("finish_reason")
        reason = reason if isinstance(reason, str) and reason else "stop"
        if self._abort_requested and reason == "length":
            reason = "abort"  # the fork reports an abort as "length"

        def count(key: str) -> int | None:
            value = data.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        end = self._t_last or time.perf_counter()
        ttft = (self._t_first or end) - self._t0
        span = self._t_last - self._t_first
        n = len(self.tokens)
        self.done = DoneEvent(
            finish_reason=reason,
            total_tokens=count("total_tokens") if count("total_tokens") is not None else n,
            prompt_tokens=count("prompt_tokens") if count("prompt_tokens") is not None else self._prompt_tokens,
            reused_prefix_tokens=count("reused_prefix_tokens"),
            time_to_first_token_s=ttft,
            tokens_per_s=(n - 1) / span if n > 1 and span > 0 else 0.0,
            text=self.text,
            processed_prompt_tokens=count("processed_prompt_tokens"),
            raw=data,
        )


def _error_message(response: httpx.Response) -> str:
    """The server's own explanation from either KoboldCPP error shape, or its text."""
    try:
        data = response.json()
    except ValueError:
        return response.text.strip()[:500] or response.reason_phrase
    if isinstance(data, dict):
        if isinstance(data.get("error"), str):
            return data["error"]
        detail = data.get("detail")
        if isinstance(detail, dict) and isinstance(detail.get("msg"), str):
            return detail["msg"]
        if isinstance(detail, str):
            return detail
    return json.dumps(data)[:500]
