"""The link to the model server: connect, autostart the bundled one, reconnect.

:class:`ServerConnection` probes the URL on a thread (:func:`halo_weave.backends.connect`:
whatever kind of server answers there is used), reads its model and tokenizes the chat
framing; only when *nothing* answers at the default URL does it start the bundled
reference server as a child process (progress while the model loads), stopped on
:meth:`shutdown`.  A server that does not say its context size gets the one set in
Settings (``options()["context_tokens"]``).  A server that answers but cannot be used
is reported with the sentence saying what is missing.  After a lost server it retries quietly every few
seconds.  When the bundled server's process ends by itself (a crash), the state turns
offline at once, :class:`~halo_weave.errors.ServerStopped` is reported with how it ended
and its last lines, and it is started again once; a second end within
:data:`RESTART_WINDOW_S` is reported and not restarted.  QtCore only.
"""

from __future__ import annotations

import os
import time
from typing import Callable

from PySide6.QtCore import QObject, QTimer, Signal

from ...core.chat_template import AUTO, build_framing
from ...settings import Settings
from .workers import CallWorker, ServerStartWorker

DEFAULT_SERVER_URL = Settings().server.server_url

#: Milliseconds between quiet reconnection attempts after the server went away.
RECONNECT_MS = 5000

#: Seconds the bundled server may take to load its model.
SERVER_START_TIMEOUT_S = 600.0

#: A bundled server that stops again within this many seconds of its last stop is not restarted.
RESTART_WINDOW_S = 60.0

#: While the bundled server is connected it is asked every HEALTH_MS whether it still
#: answers (``/api/extra/version``: no model work, so a long prefill does not delay it);
#: after HEALTH_MISSES unanswered asks in a row (HEALTH_TIMEOUT_S each) it counts as hung,
#: is ended, and is reported and restarted like a crash.
HEALTH_MS = 10_000
HEALTH_TIMEOUT_S = 5.0
HEALTH_MISSES = 2

#: Output lines of a stopped server kept with the message (its dialog's details): enough
#: for faulthandler's stack of every thread and the lines before it.
STOPPED_TAIL_LINES = 200


def is_default_url(url: str) -> bool:
    """Whether ``url`` is the built-in default (the only one autostart stands in for)."""
    return url.rstrip("/") == DEFAULT_SERVER_URL.rstrip("/")


class ServerConnection(QObject):
    """One server at a time.  States: connecting, loading, connected, offline, stopped
    (the bundled server's process ended by itself).

    Signals: ``state_changed(state, detail)``; ``connected(client, model_info,
    framing)``; ``failed(exc, context)`` for errors worth a message; ``progress(what,
    done, total)`` while the bundled model loads.

    Owns: the state, the URL and the connected client, the bundled server it started
    (and its starter thread, health checks and the times it stopped by itself), and the
    number of the latest attempt (older answers and retries are moot).
    """

    state_changed = Signal(str, str)
    connected = Signal(object, object, object)
    failed = Signal(object, str)
    progress = Signal(str, int, int)
    _server_exited = Signal(object, int)  # the ServerProcess and its exit status, from its reader thread

    def __init__(self, autostart: bool, *, options: Callable[[], dict] = dict,
                 server_args: Callable[[], list[str]] = list, parent: QObject | None = None) -> None:
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
        #: ``() -> {"api_key": () -> str | None, "template": str, "model": str,
        #: "context_tokens": int}``, read at each connect (the key on the probe's thread).
        self._options = options
        #: ``() -> list[str]``: options for the bundled server, read when it starts.
        self._server_args = server_args
        self._stops: list[float] = []  # monotonic times the bundled server stopped by itself
        self._server_exited.connect(self._on_server_exit)
        self._health = QTimer(self)
        self._health.setInterval(HEALTH_MS)
        self._health.timeout.connect(self._check_health)
        self._health_probe: CallWorker | None = None
        self._misses = 0
        self._hung: object = None  # the server process ended because it stopped answering

    def connect_to(self, url: str, *, quiet: bool = False) -> None:
        """Probe ``url`` on a thread.  ``quiet``: on failure retry later without a message."""
        self._attempt += 1
        attempt = self._attempt
        self.url = url
        self._set_state("connecting", f"Connecting to {url}…")

        options = dict(self._options() or {})

        def probe():
            # Imported here: httpx costs ~0.2 s, which the window's first paint need not wait for.
            from ...backends import connect

            # A key from Settings (keyring) or $HALO_WEAVE_API_KEY (e.g. halo-weave-server --api-key).
            from ...backends.model_template import resolve

            key = options.get("api_key")
            key = key() if callable(key) else key
            client = connect(url, api_key=key or os.environ.get("HALO_WEAVE_API_KEY") or None,
                             model=options.get("model") or None, api=options.get("api") or "auto")
            choice = options.get("template") or AUTO
            try:
                info = client.model_info()
                context = int(options.get("context_tokens") or 0)
                if context > 0 and not getattr(info, "context_known", True):
                    # A server that does not say its context size gets the one set in Settings.
                    info.server_max_context = context
                    info.max_context = client.assume_context(context)
                    info.context_known = True
                # The model's own template is rendered in a sandboxed process (at most a few seconds).
                used = resolve(getattr(info, "chat_template", None), choice,
                               origin=getattr(info, "template_origin", "the server"),
                               eos_token=getattr(info, "eos_token", ""))
                # The framing alone has its marker strings read as control tokens.
                framing = build_framing(lambda text: client.tokenize(text, parse_special=True), used.template)
            except BaseException:
                client.close()
                raise
            client.use_template(used, choice)
            return client, info, framing

        def ok(result) -> None:
            if attempt == self._attempt and not self._closed:
                client, info, framing = result
                self.client = client
                self.state = "connected"
                if self.server is not None and self.server.url == url:
                    self._misses = 0
                    self._health.start(HEALTH_MS)
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
        if self.explains_failure():
            return  # the bundled server's exit is reported and handled on its own
        self.client = None
        self._set_state("offline", "The model server stopped answering")
        self.reconnect_later()

    def explains_failure(self) -> bool:
        """Whether a failed request is explained by the bundled server having stopped
        (its own message says so; a generic "cannot reach" would only confuse)."""
        return (self.server is not None and not self.server.alive()) or bool(
            self._stops and time.monotonic() - self._stops[-1] < 2.0)

    def restart_bundled_server(self) -> None:
        """Start the bundled server again (after it stopped twice, or on the user's request)."""
        self._stops.clear()
        old, self.server = self.server, None
        if old is not None:
            old.stop()
        self.client = None
        self.start_bundled_server()

    def _on_server_exit(self, server, code: int) -> None:
        if self._closed or server is None or server is not self.server:
            return
        from ...errors import ServerStopped
        from ...logs import server_log_path
        from ...server.launcher import exit_words

        now = time.monotonic()
        again = bool(self._stops) and now - self._stops[-1] < RESTART_WINDOW_S
        self._stops.append(now)
        self.server = None
        self.client = None
        self._attempt += 1  # answers and retries aimed at the dead server are moot
        self._health.stop()
        how = (f"no answer for {HEALTH_MISSES * HEALTH_MS // 1000} s, so it was ended" if self._hung is server
               else exit_words(code))
        self._set_state("stopped", f"The built-in model server stopped ({how})")
        self.failed.emit(ServerStopped(how, server.log_tail(STOPPED_TAIL_LINES), restarting=not again,
                                       log_path=str(server_log_path())), "")
        if not again:
            self.start_bundled_server()

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
        worker = ServerStartWorker(SERVER_START_TIMEOUT_S, extra_args=self._server_args(),
                                   on_exit=lambda server, code: self._server_exited.emit(server, code),
                                   parent=self)
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

    def _check_health(self) -> None:
        """Ask the bundled server whether it still answers (see :data:`HEALTH_MS`)."""
        server = self.server
        if server is None or self._closed:
            self._health.stop()
            return
        if self._health_probe is not None or not server.url:
            return  # the last ask is still out

        def ask() -> None:
            import httpx

            key = os.environ.get("HALO_WEAVE_API_KEY")  # the bundled server inherits it
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            httpx.get(f"{server.url}/api/extra/version", headers=headers,
                      timeout=HEALTH_TIMEOUT_S).raise_for_status()

        def answered(_) -> None:
            self._misses = 0

        def unanswered(_exc) -> None:
            if server is not self.server or not server.alive():
                return  # gone already: its exit is reported on its own
            self._misses += 1
            if self._misses >= HEALTH_MISSES:
                self._hung = server
                server.process.kill()  # its exit is then reported and it is restarted

        worker = CallWorker(ask, parent=self)
        worker.succeeded.connect(answered)
        worker.failed.connect(unanswered)
        worker.finished.connect(self._health_probe_done)
        worker.finished.connect(worker.deleteLater)
        self._health_probe = worker
        worker.start()

    def _health_probe_done(self) -> None:
        self._health_probe = None

    def _set_state(self, state: str, detail: str) -> None:
        self.state = state
        self.state_changed.emit(state, detail)

    def shutdown(self) -> None:
        """Forget pending attempts, stop a loading or running bundled server."""
        self._closed = True
        self._attempt += 1
        self._health.stop()
        if self._health_probe is not None:
            try:
                self._health_probe.wait(int(HEALTH_TIMEOUT_S * 1000) + 1000)
            except RuntimeError:  # already deleted
                pass
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
