"""Who may talk to the server: the key, web pages, and what a request must look like.

Checked on every request, before routing (an ASGI middleware):

* ``--api-key``: every request must carry ``Authorization: Bearer <key>`` (401 otherwise).
  A server listening beyond loopback must have one (``__main__`` refuses to start).
* A request from a web page is refused (403): any ``Origin`` header that is not this
  server itself.  Browsers send ``Origin`` with every cross-site POST, so a page the user
  visits can neither start nor abort generations on this localhost API (CSRF), even with
  the ``text/plain`` or form bodies that need no CORS preflight.
* On loopback, a ``Host`` header naming another machine is refused (403): that is a DNS
  rebinding page talking to 127.0.0.1 under its own name.
* A POST must declare ``Content-Type: application/json`` (415): HTML forms and
  ``fetch(..., {mode: "no-cors"})`` cannot send that without a CORS preflight, which this
  server never grants.

Errors have the server's usual shape, ``{"error": msg, "detail": {"msg", "type"}}``.
"""

from __future__ import annotations

import hmac
import ipaddress
from urllib.parse import urlsplit

from starlette.responses import JSONResponse

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost`` (an unparsable name is not)."""
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _split_host(value: str) -> tuple[str, int | None]:
    try:
        parts = urlsplit(f"//{value}")
        return (parts.hostname or ""), parts.port
    except ValueError:
        return "", None


def _refuse(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"error": message, "detail": {"msg": message, "type": kind}}, status)


class RequestGuard:
    """ASGI middleware applying the checks in the module docstring."""

    def __init__(self, app, *, api_key: str | None = None) -> None:
        self.app = app
        self.api_key = api_key.encode() if api_key else None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def refusal(self, scope) -> JSONResponse | None:
        """The response refusing this request, or None to let it through."""
        headers: dict[str, str] = {}
        for name, value in scope.get("headers", []):
            headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
        if self.api_key is not None:
            given = headers.get("authorization", "")
            scheme, _, token = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self.api_key):
                return _refuse(401, "missing or wrong API key: send the header Authorization: Bearer <key>",
                               "unauthorized")
        server_host, server_port = (scope.get("server") or ("", None))[:2]
        origin = headers.get("origin")
        if origin is not None and not self._own_origin(origin, server_host, server_port):
            return _refuse(403, f"requests from web pages are refused (Origin {origin[:80]})", "forbidden")
        host = headers.get("host")
        if host is not None and is_loopback(str(server_host)):
            name, _ = _split_host(host)
            if not is_loopback(name):
                return _refuse(403, f"this server answers only to a loopback address, not Host {host[:80]}",
                               "forbidden")
        if scope.get("method") == "POST":
            media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if media != "application/json":
                shown = media or "none"
                return _refuse(415, f"send the body as JSON with Content-Type: application/json (got {shown[:60]})",
                               "unsupported_media_type")
        return None

    @staticmethod
    def _own_origin(origin: str, server_host: str, server_port) -> bool:
        """An Origin naming this very server (a page it served itself); no other."""
        try:
            parts = urlsplit(origin)
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return False
        host = parts.hostname or ""
        if port != server_port or parts.scheme not in ("http", "https"):
            return False
        if is_loopback(str(server_host)):
            return is_loopback(host)
        return host == str(server_host).strip("[]")
