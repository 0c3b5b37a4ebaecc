"""HTTP client for the attention API: our reference server and the patched KoboldCPP fork,
a backend of :class:`halo_weave.backends.interface.Backend` (stock KoboldCPP, without
the attention API, is :class:`halo_weave.backends.koboldcpp.StockKobold`).

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

import uuid
from typing import Sequence

import httpx

from .events import (  # noqa: F401 - importable from here too
    NO_TOKEN_ID,
    Capabilities,
    DoneEvent,
    ModelInfo,
    StreamStats,
    TokenEvent,
)
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
from .kobold_stream import GenerationStream, error_message

#: Seconds allowed to open a connection, and for short calls (tokenize, model info): 5 s.
CONNECT_TIMEOUT_S = 5.0
TOKENIZE_TIMEOUT_S = 5.0

#: Tokenizing takes time in proportion to the text: a 1M-character paste took 5.5 s on
#: the bundled server, past the fixed 5 s.  The timeout grows by a second per
#: this many characters, a margin of ~10x over what was measured.
TOKENIZE_CHARS_PER_S = 20_000
#: Seconds a restore may take: without a saved cache it prefills the whole conversation
#: (minutes for a long one on a slow CPU).
RESTORE_TIMEOUT_S = 900.0


HALO_CAPABILITIES = Capabilities(
    attention=True, token_ids=True, exact_tokens=True,
    prefix_cache="yes (token ids; the server reuses the KV prefix)",
    abort="yes (/api/extra/abort with the request id)", template="the model's own (from /api/v1/model)")

FORK_CAPABILITIES = Capabilities(
    attention=None, token_ids=True, exact_tokens=True,
    prefix_cache="yes (token ids)", abort="yes (/api/extra/abort, genkey)",
    template="ChatML unless chosen in Settings")

#: What the window calls each kind this client serves.
NAMES = {"halo": "Halo Weave server", "koboldcpp-fork": "KoboldCPP (attention fork)"}


def tokenize_timeout(chars: int, base: float = TOKENIZE_TIMEOUT_S) -> float:
    """Seconds to wait for the tokenization of ``chars`` characters."""
    return base + chars / TOKENIZE_CHARS_PER_S


# ---------------------------------------------------------------- client


class KoboldClient:
    """Typed calls to one server.  Thread-safe: a stream may be aborted from another thread.

    ``kind``: ``"halo"`` (ours) or ``"koboldcpp-fork"`` (the patched fork, which may or
    may not stream attention: its events tell); ``version``: the server's, when it says.
    """

    def __init__(self, base_url: str, *, connect_timeout: float = CONNECT_TIMEOUT_S,
                 tokenize_timeout: float = TOKENIZE_TIMEOUT_S, api_key: str | None = None,
                 kind: str = "halo", version: str | None = None) -> None:
        if kind not in NAMES:
            raise ValueError(f"KoboldClient serves {sorted(NAMES)}, not {kind!r}")
        self.kind = kind
        self.version = version
        self.capabilities = HALO_CAPABILITIES if kind == "halo" else FORK_CAPABILITIES
        self.base_url = base_url.rstrip("/")
        self.connect_timeout = connect_timeout
        self.tokenize_timeout = tokenize_timeout
        #: Takes a draft prompt while the user types (:meth:`prepare`): set by
        #: :meth:`model_info` from ``supports_prepare`` (our server declares it).
        self.read_ahead = False
        #: Warms its cache for a reopened conversation (:meth:`restore`): set by
        #: :meth:`model_info` from ``supports_restore`` (our server declares it).
        self.restores = False
        #: The server saves each conversation's cache itself (:meth:`save_cache` saves nothing).
        self.saves_cache = False
        #: Takes token ids the app framed, never chat messages.
        self.takes_messages = False
        #: The conversation generate, prepare and restore requests name (the server saves
        #: that conversation's cache when idle); None names none.
        self.conversation: str | None = None
        #: One model per server: nothing to pick.
        self.models: list[str] = []
        self.model_id: str | None = None
        #: The chat template the connection frames with (:meth:`use_template`).
        self.template = None
        self.template_in_use = None
        self.template_choice: str | None = None
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(tokenize_timeout, connect=connect_timeout),
            headers={"Accept": "application/json",
                     **({"Authorization": f"Bearer {api_key}"} if api_key else {})},
        )

    def close(self) -> None:
        self._http.close()

    def post_stream(self, path: str, body: dict, timeout: httpx.Timeout):
        """A streamed POST of ``body`` to ``path`` on this connection (a context manager
        giving the open :class:`httpx.Response`; :class:`GenerationStream` reads it)."""
        return self._http.stream("POST", path, json=body, timeout=timeout,
                                 headers={"Accept": "text/event-stream"})

    @property
    def label(self) -> str:
        """The server in the window's words, with its version when it says."""
        return f"{NAMES[self.kind]} {self.version}" if self.version else NAMES[self.kind]

    @property
    def missing_model(self) -> str | None:
        return None  # one model per server

    def count_tokens(self, text: str) -> tuple[int, bool]:
        """The server's own count: exact."""
        return len(self.tokenize(text)), True

    def table_context(self, server_context: int) -> int:
        return server_context  # the table holds the server's own tokens

    def assume_context(self, server_context: int) -> int:
        return server_context  # requests carry no context size here

    def save_cache(self) -> int:
        return 0  # the server saves each conversation's cache itself

    def use_template(self, used, choice: str | None) -> None:
        """Frame with ``used`` (a ``TemplateInUse``), resolved from ``choice``."""
        self.template, self.template_in_use, self.template_choice = used.template, used, choice

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
            raise BackendHTTPError(response.status_code, error_message(response))
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
        self.read_ahead = raw.get("supports_prepare") is True
        self.restores = raw.get("supports_restore") is True
        if self.kind == "halo":
            self.capabilities = Capabilities(**{**HALO_CAPABILITIES.as_dict(),
                                                "attention": raw.get("supports_attention") is True,
                                                "weighs": raw.get("supports_weighing") is True})
        eos_id = num("eos_token_id", None)
        specials = raw.get("chat_template_tokens") if isinstance(raw.get("chat_template_tokens"), dict) else {}
        info = ModelInfo(
            name=str(raw.get("model_name") or raw.get("result") or "unknown"),
            num_layers=num("num_layers"),
            num_heads=num("num_attention_heads"),
            num_kv_heads=num("num_key_value_heads", num("num_attention_heads")),
            hidden_size=num("embedding_size"),
            max_context=max_context,
            bos_token_id=num("bos_token_id", None),
            eos_token_id=eos_id,
            chat_template=template if isinstance(template, str) and template else None,
            supports_attention=raw.get("supports_attention") is True,
            raw=raw,
            kind=self.kind,
            version=self.version,
            server_max_context=max_context,
        )
        info.template_origin = "the model file, via /api/v1/model"
        info.eos_token = next((text for text, i in specials.items() if i == eos_id and isinstance(text, str)), "")
        return info

    def tokenize(self, text: str, add_special_tokens: bool = False, *,
                 parse_special: bool = False) -> list[tuple[int, str]]:
        """``(token_id, piece)`` pairs for ``text``.

        ``parse_special`` (for chat framing only) makes control-token strings such as
        ``<|im_end|>`` those tokens; otherwise our server keeps them text.
        """
        data = self._call("POST", "/api/v1/tokenize",
                          {"text": text, "add_special_tokens": add_special_tokens,
                           "parse_special": parse_special, "with_pieces": True},
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

    def prepare(self, input_ids, max_length: int = 0, request_id: str | None = None, timeout: float = 60.0,
                queries=None) -> dict:
        """Read ahead (our server's ``/api/extra/prepare``): the server's cache takes
        ``input_ids`` now, so the generate that follows with them (and ``max_length``, the
        answer it will ask for) runs only what is new.  Returns the server's answer
        (``prepared``, ``seconds``, ``kv``); with ``queries`` (where ``capabilities.weighs``)
        also ``attention``, what they pay each position of ``input_ids`` (empty when a
        generate stopped it first)."""
        body = {"input_ids": [int(i) for i in input_ids], "max_length": int(max_length)}
        if queries is not None:
            body["queries"] = [int(i) for i in queries]
        if request_id:
            body["request_id"] = request_id
        if self.conversation:
            body["conversation"] = self.conversation
        data = self._call("POST", "/api/extra/prepare", body, timeout=timeout)
        if queries is not None:
            values = data.get("attention")
            if (not isinstance(values, list) or len(values) not in (0, len(body["input_ids"]))
                    or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)):
                raise ProtocolError(f"read-ahead answer holds no attention over the {len(body['input_ids'])} "
                                    "prompt tokens")
        return data

    def restore(self, input_ids, max_length: int = 0, conversation: str | None = None,
                request_id: str | None = None, timeout: float = RESTORE_TIMEOUT_S) -> dict:
        """Warm the server's cache for ``conversation`` (default :attr:`conversation`),
        just opened, whose live context is ``input_ids`` (our server's
        ``/api/extra/restore``): from the cache it saved for it, else by a prefill.
        Returns the server's answer (``restored``, ``ran``, ``seconds``, ``reason``);
        :meth:`abort` with ``request_id`` stops its prefill."""
        key = conversation or self.conversation
        if not key:
            raise ValueError("restore needs the conversation's key (KoboldClient.conversation)")
        body = {"input_ids": [int(i) for i in input_ids], "max_length": int(max_length), "conversation": key}
        if request_id:
            body["request_id"] = request_id
        return self._call("POST", "/api/extra/restore", body, timeout=timeout)

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
        if self.conversation:
            body["conversation"] = self.conversation
        if input_ids is not None:
            body["input_ids"] = [int(i) for i in input_ids]
        else:
            body["prompt"] = prompt
        return GenerationStream(self, body, raise_on_abort=raise_on_abort)
