"""Which server answers at a URL: detected by probing endpoints, never by version alone.

Order (each step only when the previous one did not recognise the server):

1. ``GET /api/v1/model`` answers a KoboldAI model object → a KoboldCPP family server.
   ``POST /api/v1/tokenize`` with pieces works → the attention API (ours when
   ``/api/extra/version`` names ``halo_weave`` or the model declares
   ``supports_attention``, else the patched fork).  Otherwise → stock KoboldCPP (text
   mode), which needs ``/api/extra/tokencount``.
2. ``GET /props`` with generation settings and ``POST /tokenize`` → llama.cpp's
   ``llama-server`` (exact token ids).
3. ``GET /v1/models`` → an OpenAI-compatible server (text mode).

Nothing answering raises :class:`BackendUnavailable` (only then may the app start its
bundled server); a server that answers but cannot be used raises
:class:`BackendUnusable` with a sentence saying what is missing.  Qt-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import BackendError, BackendUnavailable
from .base import BackendAuthError, BackendUnusable, Http

KIND_NAMES = {
    "halo": "Halo Weave server", "koboldcpp-fork": "KoboldCPP (attention fork)", "koboldcpp": "KoboldCPP",
    "llama-server": "llama-server", "openai": "OpenAI-compatible server",
}


#: Kinds whose own API, found at the root of a ".../v1" URL, beats their OpenAI-compatible one.
NATIVE_KINDS = ("halo", "koboldcpp-fork", "koboldcpp", "llama-server")


def connect(url: str, *, api_key: str | None = None, tokenizer=None, model: str | None = None):
    """The backend for the server at ``url`` (its model info is read once here).
    ``model``: which of the server's models to use where it serves several."""
    url = url.strip().rstrip("/")
    if url.endswith("/v1"):
        # Many tools ask for an OpenAI base URL, so people paste ".../v1"; llama-server's own
        # API sits at the root and gives exact token ids (seen: at /v1 a real llama-server
        # ran as a plain OpenAI-compatible server, counts estimated, no prefix cache by ids).
        try:
            native = connect(url[:-3], api_key=api_key, tokenizer=tokenizer, model=model)
        except BackendError:
            native = None
        if native is not None and native.kind in NATIVE_KINDS:
            return native
        if native is not None:
            native.close()
    http = Http(url, api_key=api_key)
    try:
        backend = _detect(http, url, api_key, tokenizer, model)
    finally:
        http.close()
    try:
        backend.model_info()
    except BaseException:
        backend.close()
        raise
    return backend


def _detect(http: Http, url: str, api_key: str | None, tokenizer, wanted: str | None = None):
    auth_error: BackendAuthError | None = None
    answered = False

    def get(path: str):
        nonlocal auth_error, answered
        try:
            data = http.get_json(path)
        except BackendAuthError as exc:
            auth_error, answered = exc, True
            return None
        answered = True
        return data

    model = get("/api/v1/model")  # raises BackendUnavailable when nothing answers at all
    if model is not None and ("result" in model or "model_name" in model):
        version = get("/api/extra/version") or {}
        pieces = _post(http, "/api/v1/tokenize", {"text": "hi", "with_pieces": True})
        if pieces is not None and isinstance(pieces.get("tokens"), list):
            from .koboldcpp import AttentionKobold

            ours = "halo_weave" in version or "supports_attention" in model
            return AttentionKobold(url, kind="halo" if ours else "koboldcpp-fork", api_key=api_key,
                                   version=str(version.get("halo_weave") or version.get("version") or "") or None)
        # Not _post: a --password server refuses the counter without the key, and that is
        # what the user must be told (not that the counter is missing).
        count = http.post_json("/api/extra/tokencount", {"prompt": "hi"})
        if count is None or not isinstance(count.get("value"), int):
            raise BackendUnusable(
                f"The server at {url} looks like KoboldCPP {version.get('version', '')}".rstrip()
                + ", but it has no token counter (/api/extra/tokencount); "
                "use KoboldCPP 1.76 or newer.")
        from .koboldcpp import StockKobold

        return StockKobold(url, version=str(version["version"]) if version.get("version") else None,
                           api_key=api_key, tokenizer=tokenizer)

    props = get("/props")
    if props is not None and ("default_generation_settings" in props or "total_slots" in props):
        tokens = _post(http, "/tokenize", {"content": "hi", "with_pieces": True})
        if tokens is None or not isinstance(tokens.get("tokens"), list):
            raise BackendUnusable(f"The server at {url} looks like llama.cpp's llama-server, but its "
                                  "/tokenize endpoint does not work, so the app cannot count tokens.")
        from .llama_server import LlamaServer

        return LlamaServer(url, api_key=api_key, props=props)

    models = get("/v1/models")
    if (models is None or not isinstance(models.get("data"), list)) and url.endswith("/v1"):
        # LM Studio answers an unknown path with HTTP 200 and {"error": ...}.
        models = get("/models")
    if models is not None and isinstance(models.get("data"), list):
        if not models["data"]:
            raise BackendUnusable(f"The OpenAI-compatible server at {url} serves no model: load one there first.")
        from .openai_compat import OpenAICompat

        return OpenAICompat(url, api_key=api_key, models=models, model=wanted, tokenizer=tokenizer)
    if auth_error is not None:
        raise auth_error
    if answered:
        raise BackendUnusable(
            f"Something answers at {url}, but it is not a model server the app knows: it speaks none of "
            "KoboldCPP's API, llama-server's (/props) or the OpenAI-compatible one (/v1/models).")
    raise BackendUnavailable(f"no server answers at {url}")


def _post(http: Http, path: str, body: dict) -> dict | None:
    try:
        return http.post_json(path, body)
    except BackendAuthError:
        return None


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


def probe(url: str, *, api_key: str | None = None, tokenizer=None) -> ProbeResult:
    """Probe ``url`` without raising: the result says what answers and whether it is usable."""
    try:
        backend = connect(url, api_key=api_key, tokenizer=tokenizer)
    except BackendError as exc:
        return ProbeResult(url=url, usable=False, problem=str(exc))
    try:
        info = backend.model_info()
        caps = backend.capabilities
        return ProbeResult(
            url=url, usable=True, kind=backend.kind, version=backend.version, model=info.name,
            models=list(getattr(backend, "models", None) or []) or None,
            server=getattr(backend, "label", None) or KIND_NAMES.get(backend.kind),
            context_size=info.server_max_context or info.max_context, context_known=info.context_known,
            attention=caps.attention if caps.attention is not None else None,
            token_ids=caps.token_ids, exact_tokens=caps.exact_tokens)
    finally:
        backend.close()


def status_line(backend, info) -> str:
    """``"KoboldCPP 1.76 · no attention · 4096 ctx · text mode · <model>"``: what the window shows."""
    caps = getattr(backend, "capabilities", None)
    label = getattr(backend, "label", None) or KIND_NAMES.get(getattr(info, "kind", ""), "server")
    parts = [label]
    attention = getattr(info, "supports_attention", False) or (caps is not None and caps.attention)
    if not attention:
        parts.append("attention unknown" if caps is not None and caps.attention is None else "no attention")
    ctx = getattr(info, "server_max_context", None) or getattr(info, "max_context", 0)
    parts.append(f"{ctx} ctx" + ("" if getattr(info, "context_known", True) else " (assumed)"))
    if caps is not None and not caps.token_ids:
        parts.append("text mode")
    if caps is not None and not caps.exact_tokens:
        parts.append("token counts estimated")
    name = str(getattr(info, "name", "")).replace("\\", "/").rsplit("/", 1)[-1]
    served = len(getattr(backend, "models", None) or [])
    if served > 1:
        parts.append(f"{served} models")  # the window's model picker names the one in use
    elif name and name.lower() not in label.lower():
        parts.append(name)
    return " · ".join(parts)
