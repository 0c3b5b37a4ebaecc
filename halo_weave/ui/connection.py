"""The link to the model server: connect, autostart the bundled one, reconnect.

:class:`ServerConnection` probes the URL on a thread (:func:`halo_weave.backends.connect`:
whatever kind of server answers there is used), reads its model and tokenizes the chat
framing; only when *nothing* answers at the default URL does it start the bundled
reference server as a child process (progress while the model loads), stopped on
:meth:`shutdown`.  A server that answers but cannot be used is reported with the
sentence saying what is missing.  After a lost server it retries quietly every few
seconds.  QtCore only.
"""

from __future__ import annotations

import os

from PySide6.QtCore import QObject, QTimer, Signal

from ..core.chat_template import AUTO, build_framing, detect_template
from ..settings import Settings
from .workers import CallWorker, ServerStartWorker

DEFAULT_SERVER_URL = Settings().server_url

#: Milliseconds between quiet reconnection attempts after the server went away.
RECONNECT_MS = 5000

#: Seconds the bundled server may take to load its model.
SERVER_START_TIMEOUT_S = 600.0


def is_default_url(url: str) -> bool:
    """Whether ``url`` is the built-in default (the only one autostart stands in for)."""
    return url.rstrip("/") == DEFAULT_SERVER_URL.rstrip("/")


class ServerConnection(QObject):
    """One server at a time.  States: connecting, loading, connected, offline.

    Signals: ``state_changed(state, detail)``; ``connected(client, model_info,
    framing)``; ``failed(exc, context)`` for errors worth a message; ``progress(what,
    done, total)`` while the bundled model loads.
    """

    state_changed = Signal(str, str)
    connected = Signal(object, object, object)
    failed = Signal(object, str)
    progress = Signal(str, int, int)

    def __init__(self, autostart: bool, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.autostart = autostart
        self.state = "offline"
        self.url = ""
        self.client = None
        self.server = None  # the bundled server we started, if any
        self._attempt = 0  # a newer attempt makes older answers and retries moot
        self._probe: CallWorker | None = None
        self._starter: ServerStartWorker | None = None
        self._closed = False
        #: ``() -> {"api_key": str | None, "template": str}``, read at each connect.
        self.options = lambda: {}
        #: ``() -> list[str]``: options for the bundled server, read when it starts.
        self.server_args = lambda: []

    def connect_to(self, url: str, *, quiet: bool = False) -> None:
        """Probe ``url`` on a thread.  ``quiet``: on failure retry later without a message."""
        self._attempt += 1
        attempt = self._attempt
        self.url = url
        self._set_state("connecting", f"Connecting to {url}…")

        options = dict(self.options() or {})

        def probe():
            # Imported here: httpx costs ~0.2 s, which the window's first paint need not wait for.
            from ..backends import connect

            # A key from Settings (keyring) or $HALO_WEAVE_API_KEY (e.g. halo-weave-server --api-key).
            client = connect(url, api_key=options.get("api_key") or os.environ.get("HALO_WEAVE_API_KEY") or None)
            try:
                info = client.model_info()
                template = detect_template(getattr(info, "chat_template", None), options.get("template") or AUTO)
                # The framing alone has its marker strings read as control tokens.
                framing = build_framing(lambda text: client.tokenize(text, parse_special=True), template)
            except BaseException:
                client.close()
                raise
            client.template = template
            return client, info, framing

        def ok(result) -> None:
            if attempt == self._attempt and not self._closed:
                client, info, framing = result
                self.client = client
                self.state = "connected"
                self.connected.emit(client, info, framing)

        def fail(exc) -> None:
            if attempt != self._attempt or self._closed:
                return
            nothing_answers = {c.__name__ for c in type(exc).__mro__} & {"BackendUnavailable", "BackendTimeout"}
            # A server that answers is used or explained, never replaced by the bundled one.
            if nothing_answers and self.autostart and self.server is None and is_default_url(url):
                self.start_bundled_server()
                return
            self._set_state("offline", f"No model server at {url}" if nothing_answers
                            else f"The server at {url} cannot be used")
            if quiet:
                self.reconnect_later()
            else:
                self.failed.emit(exc, "Connecting")

        worker = CallWorker(probe, parent=self)
        worker.succeeded.connect(ok)
        worker.failed.connect(fail)
        worker.finished.connect(worker.deleteLater)
        self._probe = worker
        worker.start()

    def lost(self) -> None:
        """The server stopped answering mid-answer: go offline and retry quietly."""
        self.client = None
        self._set_state("offline", "The model server stopped answering")
        self.reconnect_later()

    def reconnect_later(self, delay_ms: int = RECONNECT_MS) -> None:
        attempt = self._attempt
        QTimer.singleShot(delay_ms, lambda: self._retry(attempt))

    def _retry(self, attempt: int) -> None:
        # A newer explicit connect (a new URL in Settings) supersedes this retry loop.
        if attempt == self._attempt and self.state == "offline" and not self._closed:
            self.connect_to(self.server.url if self.server is not None else self.url, quiet=True)

    def start_bundled_server(self) -> None:
        """Start the bundled reference server on a free loopback port."""
        if self._starter is not None:
            return
        self._set_state("loading", "Starting the built-in model server…")
        self.progress.emit("Loading the model", 0, 0)
        worker = ServerStartWorker(SERVER_START_TIMEOUT_S, extra_args=self.server_args(), parent=self)
        worker.progress.connect(
            lambda seconds, line: self._set_state(
                "loading", f"Loading the built-in model… {seconds:.0f} s" + (f" — {line[:60]}" if line else "")
            )
        )

        def ready(server) -> None:
            self._starter = None
            self.server = server
            self.progress.emit("Loading the model", 1, 1)
            if self._closed:
                server.stop()
                return
            self.connect_to(server.url)

        def failed(exc) -> None:
            self._starter = None
            self.progress.emit("Loading the model", 1, 1)
            self._set_state("offline", "The built-in model server did not start")
            self.failed.emit(exc, "Starting the built-in model server")

        worker.ready.connect(ready)
        worker.failed.connect(failed)
        self._starter = worker
        worker.start()

    def _set_state(self, state: str, detail: str) -> None:
        self.state = state
        self.state_changed.emit(state, detail)

    def shutdown(self) -> None:
        """Forget pending attempts, stop a loading or running bundled server."""
        self._closed = True
        self._attempt += 1
        if self._starter is not None:
            self._starter.cancel()
            self._starter.wait(5000)
        if self._probe is not None:
            try:
                self._probe.wait(3000)
            except RuntimeError:  # already deleted
                pass
        if self.server is not None:
            try:
                self.server.stop()
            finally:
                self.server = None
