"""The context size of an OpenAI-compatible server, read from its own native API.

``/v1/models`` does not say how many tokens a model reads on Ollama or LM Studio, and both
cut a longer prompt silently, so the app asks their native APIs:

* **Ollama** (``GET /api/version`` answers ``{"version"}``): the context a *running* model
  was loaded with (``GET /api/ps``, ``context_length``) is what it really uses; else the
  Modelfile's ``num_ctx`` (``POST /api/show``, the ``parameters`` text); else Ollama's
  default, 4096 on machines with < 24 GiB of VRAM (docs/context-length), which may be
  larger where there is more: said to be assumed.  Never more than the model's trained
  context (``model_info["<arch>.context_length"]``).
* **LM Studio** (``GET /api/v0/models``): a loaded model's ``loaded_context_length``; a
  model listed only with ``max_context_length`` reads at most that, but LM Studio loads
  with a smaller default, so the app assumes :data:`ASSUMED_LOADED` and says so.

Qt-free; every request tolerates a server that does not have the endpoint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import BackendError
from .base import Http

#: Ollama's default context where nothing else is known (its docs: < 24 GiB VRAM → 4k).
OLLAMA_DEFAULT = 4096
#: What LM Studio loads a model with unless told otherwise (assumed when it does not say).
ASSUMED_LOADED = 4096

_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)


@dataclass
class NativeContext:
    """What a server's native API says: which server, its version, the context used."""

    label: str
    version: str | None
    context: int
    known: bool
    source: str  # where the figure came from, for the tooltip
    template: str | None = None  # the model's chat template (Ollama's is a Go template)


def read(http: Http, model_id: str) -> NativeContext | None:
    """Ollama's or LM Studio's facts about ``model_id``; None for any other server."""
    try:
        found = _ollama(http, model_id)
        if found is None:
            found = _lmstudio(http, model_id)
    except BackendError:
        return None
    return found


#: Ollama models asked about at most (one ``/api/show`` each) when sorting out embedders.
OLLAMA_SHOW_MAX = 32


def model_states(http: Http, listed: list[str]) -> tuple[set[str], list[str]]:
    """Which of the ``listed`` models cannot chat (embedding models) and which are loaded
    now: LM Studio's ``/api/v0/models`` (``type``, ``state``); Ollama's ``/api/show``
    (``capabilities`` without ``completion``) and ``/api/ps``; both empty elsewhere."""
    try:
        return _lmstudio_states(http) or _ollama_states(http, listed) or (set(), [])
    except BackendError:
        return set(), []


def _ollama_states(http: Http, listed: list[str]) -> tuple[set[str], list[str]] | None:
    version = http.get_json("/api/version")
    if version is None or not isinstance(version.get("version"), str) or set(version) - {"version"}:
        return None
    cannot_chat = set()
    for name in listed[:OLLAMA_SHOW_MAX] if len(listed) > 1 else ():
        show = http.post_json("/api/show", {"model": name}) or {}
        capabilities = show.get("capabilities")
        if isinstance(capabilities, list) and "embedding" in capabilities and "completion" not in capabilities:
            cannot_chat.add(name)
    running = http.get_json("/api/ps") or {}
    loaded = [str(e.get("model") or e.get("name")) for e in running.get("models") or []
              if isinstance(e, dict) and (e.get("model") or e.get("name"))]
    return cannot_chat, [m for m in listed if any(_same_model(m, r) for r in loaded)]


def _lmstudio_states(http: Http) -> tuple[set[str], list[str]] | None:
    listing = http.get_json("/api/v0/models")
    entries = listing.get("data") if listing else None
    if not isinstance(entries, list):
        return None
    entries = [e for e in entries if isinstance(e, dict) and e.get("id")]
    return ({str(e["id"]) for e in entries if e.get("type") == "embeddings"},
            [str(e["id"]) for e in entries if e.get("state") == "loaded" and e.get("type") != "embeddings"])


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _same_model(name, model_id: str) -> bool:
    if not isinstance(name, str):
        return False
    return name == model_id or name.removesuffix(":latest") == model_id.removesuffix(":latest")


def _ollama(http: Http, model_id: str) -> NativeContext | None:
    version = http.get_json("/api/version")
    if version is None or not isinstance(version.get("version"), str) or set(version) - {"version"}:
        return None
    label, ver = "Ollama", version["version"]
    show = http.post_json("/api/show", {"model": model_id}) or {}
    info = show.get("model_info") if isinstance(show.get("model_info"), dict) else {}
    template = show.get("template") if isinstance(show.get("template"), str) and show.get("template") else None
    arch = info.get("general.architecture")
    trained = _int(info.get(f"{arch}.context_length")) if isinstance(arch, str) else None
    running = http.get_json("/api/ps") or {}
    for entry in running.get("models") or []:
        if isinstance(entry, dict) and (_same_model(entry.get("model"), model_id) or _same_model(entry.get("name"), model_id)):
            loaded = _int(entry.get("context_length"))
            if loaded:
                return NativeContext(label, ver, loaded, True, "the context the running model was loaded with (/api/ps)",
                                         template)
    parameters = show.get("parameters")
    match = _NUM_CTX.search(parameters) if isinstance(parameters, str) else None
    if match:
        return NativeContext(label, ver, _cap(int(match.group(1)), trained), True, "the model's num_ctx (/api/show)", template)
    return NativeContext(label, ver, _cap(OLLAMA_DEFAULT, trained), False,
                         "Ollama's default context (the model is not loaded and sets no num_ctx); "
                         "set the real one in Settings if you changed OLLAMA_CONTEXT_LENGTH", template)


def _lmstudio(http: Http, model_id: str) -> NativeContext | None:
    listing = http.get_json("/api/v0/models")
    entries = listing.get("data") if listing else None
    if not isinstance(entries, list):
        return None
    models = [e for e in entries if isinstance(e, dict)]
    entry = next((e for e in models if e.get("id") == model_id), None) or next(
        (e for e in models if e.get("state") == "loaded"), None)
    if entry is None:
        return None
    loaded = _int(entry.get("loaded_context_length"))
    if loaded:
        return NativeContext("LM Studio", None, loaded, True, "the loaded context length (/api/v0/models)")
    maximum = _int(entry.get("max_context_length"))
    return NativeContext("LM Studio", None, _cap(ASSUMED_LOADED, maximum), False,
                         "assumed: LM Studio says only the model's maximum "
                         f"({maximum or 'unknown'}), not the context it is loaded with")


def _cap(value: int, limit: int | None) -> int:
    return min(value, limit) if limit else value
