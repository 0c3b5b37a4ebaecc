"""Which server answers at a URL: detected by probing endpoints, never by version alone.

Detection walks :data:`PROBES` in order; each :class:`Probe` asks one endpoint (``GET``),
recognises its server family by the answer's shape, and builds that family's backend
(asking more where the family has several kinds).  The first probe that recognises the
server decides:

1. ``GET /api/v1/model`` answers a KoboldAI model object → a KoboldCPP family server.
   ``POST /api/v1/tokenize`` with pieces works → the attention API (ours when
   ``/api/extra/version`` names ``halo_weave`` or the model declares
   ``supports_attention``, else the patched fork).  Otherwise → stock KoboldCPP (text
   mode), which needs ``/api/extra/tokencount``.
2. ``GET /props`` with generation settings → llama.cpp's ``llama-server`` (exact token
   ids), which needs ``POST /tokenize``.
3. ``GET /v1/models`` with a model list → an OpenAI-compatible server (text mode), spoken
   to through ``/v1/completions`` (a prompt the app frames) or ``/v1/chat/completions``
   (messages the server frames), as ``api`` says: ``"completions"``, ``"chat"``, or
   ``"auto"`` (the default), which takes chat completions only where the server shows it
   has that route and lacks the other: ``GET /v1/completions`` answers 404 Not Found and
   ``GET /v1/chat/completions`` anything else (a route that exists but is POST-only
   answers 405).  Where both exist or neither can be told (servers that answer 404 to
   every GET there), completions: the app frames the prompt exactly as the heatmap shows
   it.  Hosted chat-only APIs that answer 404 to both need ``"chat"`` (Settings → Server → API).

Nothing answering raises :class:`BackendUnavailable` (only then may the app start its
bundled server); a server that answers but cannot be used raises
:class:`BackendUnusable` with a sentence saying what is missing.  Qt-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..errors import BackendError, BackendUnavailable
from .base import BackendAuthError, BackendUnusable, Http
from .interface import Backend

KIND_NAMES = {
    "halo": "Halo Weave server", "koboldcpp-fork": "KoboldCPP (attention fork)", "koboldcpp": "KoboldCPP",
    "llama-server": "llama-server", "openai": "OpenAI-compatible server",
    "openai-chat": "OpenAI-compatible server (chat completions)",
}

#: How an OpenAI-compatible server is spoken to (see the module docstring).
APIS = ("auto", "completions", "chat")


#: Kinds whose own API, found at the root of a ".../v1" URL, beats their OpenAI-compatible one.
NATIVE_KINDS = ("halo", "koboldcpp-fork", "koboldcpp", "llama-server")


def connect(url: str, *, api_key: str | None = None, tokenizer=None, model: str | None = None,
            api: str = "auto") -> Backend:
    """The backend for the server at ``url`` (its model info is read once here).
    ``model``: which of the server's models to use where it serves several; ``api``: one
    of :data:`APIS`, for an OpenAI-compatible server."""
    if api not in APIS:
        raise ValueError(f"api must be one of {', '.join(APIS)}, not {api!r}")
    url = url.strip().rstrip("/")
    if url.endswith("/v1"):
        # Many tools ask for an OpenAI base URL, so people paste ".../v1"; llama-server's own
        # API sits at the root and gives exact token ids (at /v1 a real llama-server runs
        # as a plain OpenAI-compatible server: counts estimated, no prefix cache by ids).
        try:
            native = connect(url[:-3], api_key=api_key, tokenizer=tokenizer, model=model, api=api)
        except BackendError:
            native = None
        if native is not None and native.kind in NATIVE_KINDS:
            return native
        if native is not None:
            native.close()
    asking = Asking(Http(url, api_key=api_key), url, api_key, tokenizer, model, api)
    try:
        backend = detect(asking)
    finally:
        asking.http.close()
    try:
        backend.model_info()
    except BaseException:
        backend.close()
        raise
    return backend


@dataclass
class Asking:
    """One detection: the connection it asks through, what the backend will need, and
    what the server's answers said so far (an auth refusal, whether anything answered)."""

    http: Http
    url: str
    api_key: str | None
    tokenizer: object = None
    wanted_model: str | None = None
    api: str = "auto"
    auth_error: BackendAuthError | None = field(default=None, init=False)
    answered: bool = field(default=False, init=False)

    def get(self, path: str) -> dict | None:
        """``path``'s JSON object or None; raises :class:`BackendUnavailable` when nothing
        answers at all; an auth refusal is kept for the end (a later probe may not need a key)."""
        try:
            data = self.http.get_json(path)
        except BackendAuthError as exc:
            self.auth_error, self.answered = exc, True
            return None
        self.answered = True
        return data

    def status(self, path: str) -> int | None:
        """The HTTP status ``GET path`` answers (None: no answer)."""
        try:
            return self.http.request("GET", path, raw=True).status_code
        except BackendError:
            return None

    def post(self, path: str, body: dict) -> dict | None:
        """``path``'s JSON object for a POST, or None (an auth refusal too)."""
        try:
            return self.http.post_json(path, body)
        except BackendAuthError:
            return None


@dataclass(frozen=True)
class Probe:
    """One server family: the endpoint it asks, how it recognises the answer, what it builds.

    ``asks``: paths tried in order until one is recognised; ``asks_at_v1``: further paths
    tried when the URL ends with ``/v1``.  ``builds`` may ask more and may raise
    :class:`BackendUnusable` (the family is recognised but lacks what the app needs)."""

    family: str
    asks: tuple[str, ...]
    recognises: Callable[[dict], bool]
    builds: Callable[[Asking, dict], Backend]
    asks_at_v1: tuple[str, ...] = ()

    def answer(self, asking: Asking) -> dict | None:
        """The recognised answer, or None when the server is not of this family."""
        paths = self.asks + (self.asks_at_v1 if asking.url.endswith("/v1") else ())
        for path in paths:
            data = asking.get(path)
            if data is not None and self.recognises(data):
                return data
        return None


def _kobold(asking: Asking, model: dict) -> Backend:
    version = asking.get("/api/extra/version") or {}
    pieces = asking.post("/api/v1/tokenize", {"text": "hi", "with_pieces": True})
    if pieces is not None and isinstance(pieces.get("tokens"), list):
        from ..kobold_client import KoboldClient

        ours = "halo_weave" in version or "supports_attention" in model
        return KoboldClient(asking.url, kind="halo" if ours else "koboldcpp-fork", api_key=asking.api_key,
                            version=str(version.get("halo_weave") or version.get("version") or "") or None)
    # Not Asking.post: a --password server refuses the counter without the key, and that is
    # what the user must be told (not that the counter is missing).
    count = asking.http.post_json("/api/extra/tokencount", {"prompt": "hi"})
    if count is None or not isinstance(count.get("value"), int):
        raise BackendUnusable(
            f"The server at {asking.url} looks like KoboldCPP {version.get('version', '')}".rstrip()
            + ", but it has no token counter (/api/extra/tokencount); "
            "use KoboldCPP 1.76 or newer.")
    from .koboldcpp import StockKobold

    return StockKobold(asking.url, version=str(version["version"]) if version.get("version") else None,
                       api_key=asking.api_key, tokenizer=asking.tokenizer)


def _llama_server(asking: Asking, props: dict) -> Backend:
    tokens = asking.post("/tokenize", {"content": "hi", "with_pieces": True})
    if tokens is None or not isinstance(tokens.get("tokens"), list):
        raise BackendUnusable(f"The server at {asking.url} looks like llama.cpp's llama-server, but its "
                              "/tokenize endpoint does not work, so the app cannot count tokens.")
    from .llama_server import LlamaServer

    return LlamaServer(asking.url, api_key=asking.api_key, props=props)


def _openai(asking: Asking, models: dict) -> Backend:
    if not models["data"]:
        raise BackendUnusable(f"The OpenAI-compatible server at {asking.url} serves no model: load one there first.")
    from .chat_completions import ChatCompletions
    from .openai_compat import OpenAICompat

    kind = ChatCompletions if asking.api == "chat" or (asking.api == "auto" and _chat_only(asking)) else OpenAICompat
    return kind(asking.url, api_key=asking.api_key, models=models, model=asking.wanted_model,
                tokenizer=asking.tokenizer)


def _chat_only(asking: Asking) -> bool:
    """Whether the server has ``/v1/chat/completions`` and not ``/v1/completions`` (as far
    as a GET of each can tell: see the module docstring)."""
    v1 = "" if asking.url.endswith("/v1") else "/v1"
    return asking.status(f"{v1}/completions") == 404 and asking.status(f"{v1}/chat/completions") not in (None, 404)


#: The probes, walked in order (the backends' modules are imported only when chosen).
PROBES = (
    Probe("KoboldCPP", ("/api/v1/model",), lambda answer: "result" in answer or "model_name" in answer, _kobold),
    Probe("llama-server", ("/props",),
          lambda answer: "default_generation_settings" in answer or "total_slots" in answer, _llama_server),
    # LM Studio answers an unknown path with HTTP 200 and {"error": ...}: at ".../v1", "/models" too.
    Probe("OpenAI-compatible", ("/v1/models",), lambda answer: isinstance(answer.get("data"), list), _openai,
          asks_at_v1=("/models",)),
)


def detect(asking: Asking) -> Backend:
    """The backend of the first probe in :data:`PROBES` that recognises the server."""
    for probe_ in PROBES:
        answer = probe_.answer(asking)
        if answer is not None:
            return probe_.builds(asking, answer)
    if asking.auth_error is not None:
        raise asking.auth_error
    if asking.answered:
        raise BackendUnusable(
            f"Something answers at {asking.url}, but it is not a model server the app knows: it speaks none of "
            "KoboldCPP's API, llama-server's (/props) or the OpenAI-compatible one (/v1/models).")
    raise BackendUnavailable(f"no server answers at {asking.url}")


@dataclass
class ProbeResult:
    """What ``halo-weave --probe URL`` prints (one JSON line)."""

    url: str
    usable: bool
    kind: str | None = None
    server: str | None = None  # what the window calls it: "Ollama 0.12.6", "KoboldCPP 1.76"
    version: str | None = None
    model: str | None = None
    models: list[str] | None = None  # every model the server lists (where it lists several)
    context_size: int | None = None
    context_known: bool = False
    attention: bool | None = None
    token_ids: bool = False
    exact_tokens: bool = False
    problem: str | None = None

    def as_json(self) -> dict:
        return {
            "url": self.url, "usable": self.usable, "kind": self.kind, "server": self.server, "version": self.version,
            "model": self.model, "models": self.models, "context_size": self.context_size, "context_known": self.context_known,
            "attention": self.attention, "token_ids": self.token_ids, "exact_tokens": self.exact_tokens,
            "problem": self.problem,
        }


def probe(url: str, *, api_key: str | None = None, tokenizer=None, api: str = "auto") -> ProbeResult:
    """Probe ``url`` without raising: the result says what answers and whether it is usable."""
    try:
        backend = connect(url, api_key=api_key, tokenizer=tokenizer, api=api)
    except BackendError as exc:
        return ProbeResult(url=url, usable=False, problem=str(exc))
    try:
        info = backend.model_info()
        caps = backend.capabilities
        return ProbeResult(
            url=url, usable=True, kind=backend.kind, version=backend.version, model=info.name,
            models=list(backend.models) or None, server=backend.label,
            context_size=info.server_max_context or info.max_context, context_known=info.context_known,
            attention=caps.attention, token_ids=caps.token_ids, exact_tokens=caps.exact_tokens)
    finally:
        backend.close()


def status_line(backend: Backend, info) -> str:
    """``"KoboldCPP 1.76 · no attention · 4096 ctx · text mode · <model>"``: what the window shows."""
    caps = backend.capabilities
    label = backend.label
    parts = [label]
    if not (info.supports_attention or caps.attention):
        parts.append("attention unknown" if caps.attention is None else "no attention")
    ctx = info.server_max_context or info.max_context
    parts.append(f"{ctx} ctx" + ("" if info.context_known else " (assumed)"))
    if not caps.token_ids:
        parts.append("text mode")
    if not caps.exact_tokens:
        parts.append("token counts estimated")
    name = str(info.name).replace("\\", "/").rsplit("/", 1)[-1]
    if len(backend.models) > 1:
        parts.append(f"{len(backend.models)} models")  # the window's model picker names the one in use
    elif name and name.lower() not in label.lower():
        parts.append(name)
    return " · ".join(parts)
