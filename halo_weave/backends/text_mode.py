"""Text mode: chatting through a server that takes a text prompt and streams text back.

The app works in token ids (the token table).  A text-mode backend takes the table's ids
(the bundled tokenizer's, :mod:`~halo_weave.backends.local_tokenizer`), rebuilds the
prompt text from them exactly (framing included), sends the text, and splits the
streamed answer back into bundled-tokenizer tokens as it arrives: all but the last token
of the text received so far are emitted (the last may still grow), the rest at the end.
Pieces join to exactly the server's text.

Budgets: :meth:`TextModeBackend.count_tokens` uses the server's own counter when it has
one (exact) and the bundled tokenizer otherwise (an estimate, and said so).  The model
window in table units is the server's context scaled by the measured ratio of server
tokens to bundled tokens.  Qt-free.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from typing import Iterator, Sequence

import httpx
import httpx_sse

from ..errors import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    BackendUnusable,
    GenerationAborted,
    ProtocolError,
    StreamInterrupted,
)
from ..events import DoneEvent, ModelInfo, StreamStats, TokenEvent
from . import local_tokenizer
from .base import Http, check_status
from .stream_thread import read_on_thread

#: Sample used once at connect to measure server tokens per bundled token.
CALIBRATION_TEXT = (
    "The quick brown fox jumps over the lazy dog. Tea was first drunk in China, and it "
    "travelled along trade routes to Japan, India and Europe.\n\ndef f(x):\n    return x ** 2\n"
    "Café, naïve, 東京, Привет, 🙂 — numbers 1234567890."
)


class TextModeBackend:
    """Base of the text-mode kinds: the bundled tokenizer + a server streaming text."""

    kind = "text"
    version: str | None = None
    #: True when the server ends an aborted stream itself (KoboldCPP); else it is closed.
    ends_stream_on_abort = False
    #: A text prompt is re-read by the server each time: nothing to read ahead or restore.
    read_ahead = False
    restores = False
    saves_cache = False
    #: The prompt is text the app frames (a chat-completions server takes messages instead).
    takes_messages = False
    #: Every model the server lists, and the one in use: none here; kinds that serve
    #: several set their own.
    models: Sequence[str] = ()
    model_id: str | None = None

    def __init__(self, base_url: str, *, api_key: str | None = None, tokenizer=None, http: Http | None = None) -> None:
        self.http = http or Http(base_url, api_key=api_key)
        self.base_url = self.http.base_url
        try:
            self.local = tokenizer or local_tokenizer.shared()
        except local_tokenizer.TokenizerMissing as exc:
            self.http.close()
            raise BackendUnusable(
                f"The server at {self.base_url} sends text without token ids, and text mode needs the "
                f"bundled model's tokenizer, which is missing here: {exc}.") from exc
        self.token_ratio = 1.0  # server tokens per bundled token (1.0 when not measured)
        #: The server's context in its own tokens (0 until the model info is read).
        self.server_context = 0
        self._info = None
        self.conversation: str | None = None
        #: The chat template the connection frames with (:meth:`use_template`).
        self.template = None
        self.template_in_use = None
        self.template_choice: str | None = None

    @property
    def label(self) -> str:
        return self.kind

    @property
    def missing_model(self) -> str | None:
        return None

    def close(self) -> None:
        self.http.close()

    def use_template(self, used, choice: str | None) -> None:
        """Frame with ``used`` (a ``TemplateInUse``), resolved from ``choice``."""
        self.template, self.template_in_use, self.template_choice = used.template, used, choice

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- tokens: the bundled tokenizer's

    def tokenize(self, text: str, add_special_tokens: bool = False, *,
                 parse_special: bool = False) -> list[tuple[int, str]]:
        return self.local.tokenize(text, add_special_tokens, parse_special=parse_special)

    def detokenize(self, ids) -> str:
        return self.local.detokenize(ids, keep_control=False)

    def server_count(self, text: str) -> int | None:
        """The server's own token count of ``text`` (None: it has no counter)."""
        return None

    def count_tokens(self, text: str) -> tuple[int, bool]:
        """``(tokens, exact)``: the server's count, else the bundled tokenizer's estimate."""
        try:
            n = self.server_count(text)
        except BackendError:
            n = None
        if n is not None:
            return n, True
        return self.local.count(text), False

    def calibrate(self) -> None:
        """Measure server tokens per bundled token on a fixed sample (servers with a counter)."""
        try:
            n = self.server_count(CALIBRATION_TEXT)
        except BackendError:
            n = None
        if n:
            self.token_ratio = n / max(1, self.local.count(CALIBRATION_TEXT))

    def table_context(self, server_context: int) -> int:
        """The server's context in table (bundled-token) units."""
        return int(server_context / self.token_ratio) if self.token_ratio > 0 else server_context

    def measured_prompt(self, local_tokens: int | None, server_tokens: int | None) -> None:
        """A prompt counted both ways: refine the ratio, and the model window in table units
        (the app reads ``model_info().max_context`` before every turn)."""
        if not local_tokens or not server_tokens or local_tokens < 32:
            return
        self.token_ratio = server_tokens / local_tokens
        info = self._info
        if info is None:
            return
        server_context = info.server_max_context or self.server_context
        if server_context:
            info.max_context = self.table_context(server_context)

    def _keep_info(self, info: ModelInfo) -> ModelInfo:
        """Remember the model info read from the server (its context in server tokens too)."""
        self.server_context = info.server_max_context
        self._info = info
        return info

    def assume_context(self, server_context: int) -> int:
        """The server does not say its context: ``server_context`` is sent with each
        request (KoboldCPP cuts prompts to what the request says)."""
        self.server_context = server_context
        return self.table_context(server_context)

    # -- streaming

    def stream(self, *, input_ids=None, prompt=None, max_length: int = 200, temperature: float = 0.7,
               top_p: float = 0.9, top_k: int = 40, rep_pen: float = 1.1, sampler_seed: int = -1,
               stop_sequence: Sequence[str] = (), request_id: str | None = None,
               raise_on_abort: bool = False, **_ignored) -> "TextStream":
        """A text stream; ``input_ids`` (bundled ids) become the prompt text exactly."""
        if (input_ids is None) == (prompt is None):
            raise ValueError("pass exactly one of input_ids and prompt")
        if input_ids is not None:
            ids = [int(i) for i in input_ids]
            text = self.local.detokenize(ids)
        else:
            text, ids = prompt, None
        params = dict(max_length=max_length, temperature=temperature, top_p=top_p, top_k=top_k,
                      rep_pen=rep_pen, sampler_seed=sampler_seed, stop_sequence=list(stop_sequence))
        return TextStream(self, text, params, request_id=request_id or f"hw-{uuid.uuid4().hex[:12]}",
                          prompt_tokens=len(ids) if ids is not None else None, raise_on_abort=raise_on_abort)

    # -- the server's cache: a text-mode server keeps none the app can address

    def prepare(self, input_ids, max_length: int = 0, request_id: str | None = None, timeout: float = 60.0,
                queries=None) -> dict:
        raise BackendError(f"{self.label} at {self.base_url} takes no prompt ahead (read_ahead is False)")

    def restore(self, input_ids, max_length: int = 0, conversation: str | None = None,
                request_id: str | None = None) -> dict:
        raise BackendError(f"{self.label} at {self.base_url} keeps no cache to restore (restores is False)")

    def save_cache(self) -> int:
        return 0

    # -- what a kind implements

    def open_stream(self, stream: "TextStream") -> Iterator[tuple[str, str | None]]:
        """Yield ``(text, finish_reason or None)`` pairs from the server."""
        raise NotImplementedError

    def abort_stream(self, stream: "TextStream") -> None:
        """Ask the server to stop (default: close the connection)."""
        stream.close_response()


class AnswerSplitter:
    """Streamed text → bundled-tokenizer tokens whose pieces join to the text exactly."""

    def __init__(self, tokenizer) -> None:
        self.tok = tokenizer
        self.pending = ""

    def push(self, text: str) -> list[tuple[int, str]]:
        self.pending += text
        ids = self.tok.ids(self.pending)
        k = len(ids) - 1  # the last token may still grow with the next chunk
        while k > 0 and not self.tok.is_boundary(ids[:k]):
            k -= 1
        if k <= 0:
            return []
        head = ids[:k]
        head_text = self.tok.detokenize(head)
        if not self.pending.startswith(head_text):
            return []  # a split the tokenizer would not reproduce: wait for more text
        self.pending = self.pending[len(head_text):]
        return list(zip(head, self.tok.pieces(head)))

    def finish(self) -> list[tuple[int, str]]:
        ids = self.tok.ids(self.pending)
        self.pending = ""
        return list(zip(ids, self.tok.pieces(ids)))


class TextStream:
    """Iterable of :class:`TokenEvent` (bundled ids, no attention); ``done`` afterwards.

    Same contract as :class:`halo_weave.kobold_client.GenerationStream`: ``text`` and
    ``tokens`` grow as events arrive, ``abort()`` from any thread ends the stream with
    ``done.finish_reason == "abort"`` (whatever the server calls it), a broken stream
    raises :class:`StreamInterrupted` with what arrived.
    """

    def __init__(self, backend: TextModeBackend, prompt: str, params: dict, *, request_id: str,
                 prompt_tokens: int | None, raise_on_abort: bool = False) -> None:
        self.backend = backend
        self.client = backend
        self.prompt = prompt
        self.params = params
        self.request_id = request_id
        self.raise_on_abort = raise_on_abort
        self.tokens: list[TokenEvent] = []
        self.done: DoneEvent | None = None
        self.stats = StreamStats()
        self.server_prompt_tokens: int | None = None
        self._prompt_tokens = prompt_tokens
        self._response: httpx.Response | None = None
        self._started = False
        self._abort_requested = False
        self._t0 = self._t_first = self._t_last = 0.0

    @property
    def text(self) -> str:
        """The text so far, joined from :attr:`tokens` (not kept as a second copy)."""
        return "".join(t.text for t in self.tokens)

    def abort(self) -> bool:
        self._abort_requested = True
        try:
            self.backend.abort_stream(self)
        except BackendError:
            return False
        return True

    def close_response(self) -> None:
        """End the connection now, even while the reader waits for the server's next bytes.

        ``response.close()`` alone does not wake a thread blocked reading the socket: seen
        with real servers still reading a long prompt (KoboldCPP 1.76, llama-server), Stop
        then waited until the prompt was read (30-60 s on two busy cores).  Shutting the
        socket down ends that read at once; the server sees its client gone.
        """
        response = self._response
        if response is None:
            return
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed
        try:
            response.close()
        except Exception:  # noqa: BLE001 - closing from another thread may race the reader
            pass

    def __iter__(self) -> Iterator[TokenEvent]:
        if self._started:
            raise RuntimeError("a stream can be iterated only once")
        self._started = True
        return self._events()

    def sse(self, path: str, body: dict) -> Iterator[dict]:
        """POST ``body`` and yield each SSE event's JSON (``[DONE]`` ends it).

        Read on a thread of its own: Stop before the server's first byte returns at once.
        """
        return read_on_thread(self._read_sse(path, body), lambda: self._abort_requested and self._response is None)

    def _read_sse(self, path: str, body: dict) -> Iterator[dict]:
        http = self.backend.http
        timeout = httpx.Timeout(http.connect_timeout, read=None)
        with http.client.stream("POST", path, json=body, timeout=timeout,
                                headers={"Accept": "text/event-stream"}) as response:
            self._response = response
            if self._abort_requested:
                return  # stopped while the server read the prompt: closing tells it
            if response.status_code >= 400:
                response.read()
                check_status(response, path)
            kind = response.headers.get("content-type", "")
            if "text/event-stream" not in kind:
                response.read()
                raise ProtocolError(f"{path} answered with {kind or 'no content type'}, not an event stream: "
                                    f"{response.text[:120]!r}")
            for event in httpx_sse.EventSource(response).iter_sse():
                if not event.data:
                    continue
                if event.data.strip() == "[DONE]":
                    return
                self.stats.events += 1
                try:
                    data = json.loads(event.data)
                except ValueError as exc:
                    raise ProtocolError(f"an event is not JSON: {event.data[:80]!r}") from exc
                if not isinstance(data, dict):
                    raise ProtocolError(f"an event is a {type(data).__name__}, not an object")
                yield data

    def _events(self) -> Iterator[TokenEvent]:
        splitter = AnswerSplitter(self.backend.local)
        self._start_clock()
        reason: str | None = None
        try:
            for chunk, finish in self.backend.open_stream(self):
                if chunk:
                    for token_id, piece in splitter.push(chunk):
                        yield self._add(token_id, piece)
                if finish:
                    reason = finish
                    break
                if self._abort_requested and not self.backend.ends_stream_on_abort:
                    break
        except (BackendError, httpx.HTTPError, httpx_sse.SSEError) as exc:
            if not self._abort_requested:
                raise self._translate(exc) from exc
        finally:
            self.close_response()
        for token_id, piece in splitter.finish():
            yield self._add(token_id, piece)
        if self._abort_requested:
            reason = "abort"
        if reason is None:
            raise self._partial(StreamInterrupted, "the stream ended before the server said it was done")
        self._finish(reason)
        if self.raise_on_abort and reason == "abort":
            raise self._partial(GenerationAborted, "the generation was aborted")

    def _translate(self, exc: Exception) -> BackendError:
        url = self.backend.base_url
        if isinstance(exc, (ProtocolError, StreamInterrupted)):
            return self._partial(type(exc), str(exc))
        if isinstance(exc, BackendError):
            return exc
        if isinstance(exc, httpx_sse.SSEError):
            return self._partial(ProtocolError, f"not an event stream: {exc}")
        if isinstance(exc, httpx.ConnectTimeout):
            return BackendTimeout(f"connecting to {url} timed out")
        if isinstance(exc, httpx.ConnectError):
            return BackendUnavailable(f"no server answers at {url}")
        if self._response is None and not self.tokens:
            return BackendUnavailable(f"{url} dropped the connection ({exc.__class__.__name__})")
        return self._partial(StreamInterrupted, f"the connection to {url} was lost mid-answer ({exc.__class__.__name__})")

    def _partial(self, kind, message: str):
        return kind(f"{message} (after {len(self.tokens)} tokens)", self.text, self.tokens)

    def _add(self, token_id: int, piece: str) -> TokenEvent:
        now = time.perf_counter()
        self._t_first = self._t_first or now
        self._t_last = now
        event = TokenEvent(int(token_id), piece, None)
        self.stats.token_events += 1
        self.stats.attention_missing += 1
        self.tokens.append(event)
        return event

    def _start_clock(self) -> None:
        """Mark the request's start: the time to the first token counts from here."""
        self._t0 = time.perf_counter()

    def _finish(self, reason: str, final: dict | None = None) -> None:
        """Build :attr:`done`; ``final`` is the server's last event, kept in its ``raw``."""
        end = self._t_last or time.perf_counter()
        span = self._t_last - self._t_first
        n = len(self.tokens)
        self.done = DoneEvent(
            finish_reason=reason,
            total_tokens=n,
            prompt_tokens=self._prompt_tokens,
            reused_prefix_tokens=None,
            time_to_first_token_s=(self._t_first or end) - self._t0,
            tokens_per_s=(n - 1) / span if n > 1 and span > 0 else 0.0,
            text=self.text,
            raw={**(final or {}), "server_prompt_tokens": self.server_prompt_tokens},
        )
        self.backend.measured_prompt(self._prompt_tokens, self.server_prompt_tokens)
