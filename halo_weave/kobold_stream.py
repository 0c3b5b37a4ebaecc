"""One generation read from the attention API's event stream (``/api/extra/generate/stream``).

:meth:`KoboldClient.stream <halo_weave.kobold_client.KoboldClient.stream>` builds a
:class:`GenerationStream`; iterating it sends the request and turns the server-sent events
into :class:`~halo_weave.events.TokenEvent` objects, ending with a
:class:`~halo_weave.events.DoneEvent`.  The event shapes of each server (ours, the
original fork, stock KoboldCPP) are described in :mod:`halo_weave.kobold_client`; every
failure is one of the :class:`~halo_weave.errors.BackendError` tree.
"""

from __future__ import annotations

import json
import time
from typing import Iterable, Iterator, Protocol

import httpx
import httpx_sse
import numpy as np

from .brightness import decode_attention
from .events import NO_TOKEN_ID, DoneEvent, StreamStats, TokenEvent
from .errors import (
    AttentionError,
    BackendHTTPError,
    BackendTimeout,
    BackendUnavailable,
    GenerationAborted,
    ProtocolError,
    StreamInterrupted,
)


class StreamClient(Protocol):
    """What a stream uses of its :class:`~halo_weave.kobold_client.KoboldClient` (which
    imports this module, so the type is named here by what it offers)."""

    base_url: str
    connect_timeout: float

    def post_stream(self, path: str, body: dict, timeout: httpx.Timeout): ...

    def abort(self, request_id: str | None = None) -> bool: ...


class GenerationStream:
    """Iterable of :class:`TokenEvent`; afterwards ``done`` holds the :class:`DoneEvent`.

    ``tokens`` grows as events arrive (``text`` joins their texts); it keeps each event's id
    and text but not its attention (the consumer applies each vector and drops it: at 30k context
    200 vectors are ~24 MB).  Iterate once.  ``abort()`` (any
    thread) asks the server to stop after the current token; the stream then ends with
    ``done.finish_reason == "abort"``.
    """

    def __init__(self, client: StreamClient, body: dict, *, raise_on_abort: bool = False) -> None:
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
            with client.post_stream("/api/extra/generate/stream", self.body, timeout) as response:
                got_response = True
                if response.status_code >= 400:
                    response.read()
                    raise BackendHTTPError(response.status_code, error_message(response))
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

    def replay(self, events: Iterable[httpx_sse.ServerSentEvent]) -> Iterator[TokenEvent]:
        """The token events of server-sent events already received (a recorded stream),
        read as iterating reads the server's; sends no request.  Ends at the done event."""
        if self._started:
            raise RuntimeError("a GenerationStream can be iterated only once")
        self._started = True
        for sse in events:
            yield from self._handle(sse)
            if self.done is not None:
                return

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


def error_message(response: httpx.Response) -> str:
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
