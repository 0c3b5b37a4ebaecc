"""What every backend shares: capabilities, the extra errors, and the HTTP plumbing.

The interface every backend implements is declared in :mod:`halo_weave.backends.interface`
(:class:`~halo_weave.backends.interface.Backend`).  Backends that give no token ids
(stock KoboldCPP, OpenAI-compatible servers) run in *text mode*
(:mod:`halo_weave.backends.text_mode`): their token ids are the bundled model's, so the
token table, chunking, pruning and the index work unchanged.  Qt-free.
"""

from __future__ import annotations

import json

import httpx

from ..errors import (  # noqa: F401 - BackendError re-exported for the kinds
    BackendAuthError,
    BackendError,
    BackendHTTPError,
    BackendTimeout,
    BackendUnavailable,
    BackendUnusable,
    ProtocolError,
)
from ..events import Capabilities  # noqa: F401 - re-exported for the kinds
from ..kobold_client import CONNECT_TIMEOUT_S, TOKENIZE_TIMEOUT_S

#: Context size assumed when a server does not say (llama-cpp-python's default n_ctx).
ASSUMED_CONTEXT = 2048


class Http:
    """One ``httpx.Client`` with the project's timeouts and error mapping."""

    def __init__(self, base_url: str, *, api_key: str | None = None,
                 connect_timeout: float = CONNECT_TIMEOUT_S, timeout: float = TOKENIZE_TIMEOUT_S) -> None:
        self.base_url = base_url.rstrip("/")
        self.connect_timeout = connect_timeout
        headers = {"Accept": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self.client = httpx.Client(base_url=self.base_url, headers=headers,
                                   timeout=httpx.Timeout(timeout, connect=connect_timeout))

    def close(self) -> None:
        self.client.close()

    def request(self, method: str, path: str, body: dict | None = None, *, raw: bool = False,
                timeout: float | None = None):
        """JSON object answer of ``path``; every failure is a :class:`BackendError`.
        ``timeout``: seconds to wait for the answer, when longer than a short call's."""
        try:
            extra = {"timeout": httpx.Timeout(timeout, connect=self.connect_timeout)} if timeout else {}
            response = self.client.request(method, path, json=body, **extra)
        except httpx.TimeoutException as exc:
            raise BackendTimeout(f"{self.base_url}{path} did not answer in time") from exc
        except httpx.HTTPError as exc:
            raise BackendUnavailable(f"no server answers at {self.base_url} ({exc.__class__.__name__})") from exc
        if raw:
            return response
        check_status(response, path)
        try:
            data = response.json()
        except ValueError as exc:
            raise ProtocolError(f"{path} answered with something that is not JSON: {response.text[:120]!r}") from exc
        if not isinstance(data, dict):
            raise ProtocolError(f"{path} answered with a {type(data).__name__}, not an object")
        return data

    def get_json(self, path: str) -> dict | None:
        """``path``'s JSON object, or ``None`` when the server has no such endpoint / no JSON."""
        return self._object_or_none(self.request("GET", path, raw=True))

    def post_json(self, path: str, body: dict) -> dict | None:
        """Like :meth:`get_json` for a POST."""
        return self._object_or_none(self.request("POST", path, body, raw=True))

    def _object_or_none(self, response) -> dict | None:
        """The answer's JSON object; ``None`` for an error status or no object; auth raises."""
        if response.status_code in (401, 403):
            raise BackendAuthError(auth_sentence(self.base_url, response.status_code))
        if response.status_code >= 400:
            return None
        try:
            data = response.json()
        except ValueError:
            return None
        return data if isinstance(data, dict) else None


def auth_sentence(url: str, status: int) -> str:
    if status == 401:
        return (f"The server at {url} asks for an API key: enter it in Settings → Server "
                "(it is kept in the system keyring, not in the settings file).")
    return f"The server at {url} refused the API key (HTTP 403): check the key in Settings → Server."


def check_status(response: httpx.Response, path: str) -> None:
    """Raise the error a user can read for a 4xx/5xx answer."""
    if response.status_code in (401, 403):
        raise BackendAuthError(auth_sentence(str(response.request.url.copy_with(path="")).rstrip("/"),
                                             response.status_code))
    if response.status_code >= 400:
        raise BackendHTTPError(response.status_code, error_message(response))


def error_message(response: httpx.Response) -> str:
    """The server's own words from the error shapes of KoboldCPP, llama.cpp and OpenAI."""
    try:
        data = response.json()
    except ValueError:
        return response.text.strip()[:300] or response.reason_phrase
    if isinstance(data, dict):
        for key in ("error", "detail"):
            value = data.get(key)
            if isinstance(value, str):
                return value
            if isinstance(value, dict):
                for inner in ("message", "msg"):
                    if isinstance(value.get(inner), str):
                        return value[inner]
        if isinstance(data.get("message"), str):
            return data["message"]
    return json.dumps(data)[:300]


def as_bool(value) -> bool:
    """KoboldCPP sends booleans as strings (``"true"``): read both."""
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return value is True


def reason_or_none(value) -> str | None:
    """A finish reason, with KoboldCPP's string ``"null"`` (and ``""``) meaning none yet."""
    if not isinstance(value, str):
        return None
    value = value.strip()
    return None if value in ("", "null", "None") else value
