"""The controller's side of the model server connection: connect, adopt, announce.

:class:`~.connection.ServerConnection` connects on a thread; :class:`ServerLink` hands
the connected server to the session, syncs the system prompt and announces the
connection state, the models and template in use, and whether attention is available.
QtCore only.
"""

from __future__ import annotations

from PySide6.QtCore import QObject

from ...conversation import Framing
from .connection import ServerConnection
from .gate import Gate
from .prompt import PromptUpkeep
from .proxy import ProxyReading
from .ahead import ReadAhead
from .signals import ControlSignals


def model_first(line: str, model: object) -> str:
    """The status line with the model's name first ("qwen2.5-coder-0.5b….gguf · Halo Weave
    server · 32768 ctx"): where the bar is short, what is cut is the server's words, never
    the model's name."""
    name = str(model or "").replace("\\", "/").rsplit("/", 1)[-1]
    tail = f" · {name}"
    if name and line.endswith(tail):
        return f"{name} · {line[: -len(tail)]}"
    return line


class ServerLink(QObject):
    """Connection intents and their outcome.

    Owns: :attr:`state` (connecting, loading, connected, offline, stopped, as the window
    shows it), the :class:`~.connection.ServerConnection` (:attr:`connection`), and the
    template problems already explained this session (each is said once, not per
    reconnect).
    """

    def __init__(self, session, signals: ControlSignals, gate: Gate, prompt: PromptUpkeep,
                 proxy: ProxyReading, ahead: ReadAhead, *, autostart: bool, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._session, self._signals, self._gate = session, signals, gate
        self._prompt, self._proxy, self._ahead = prompt, proxy, ahead
        self.state = "connecting"  # start() connects; "offline" only once that fails
        self._template_problems: set[str] = set()
        self.connection = ServerConnection(autostart, options=self._connection_options,
                                           server_args=lambda: self._session.settings.server_args(), parent=self)
        self.connection.state_changed.connect(self._set_state)
        self.connection.connected.connect(self._on_connected)
        self.connection.failed.connect(signals.error)
        self.connection.progress.connect(signals.progress)

    @property
    def server(self):
        """The bundled server process this app started, if any."""
        return self.connection.server

    def connect_server(self, url: str | None = None) -> None:
        """Connect to ``url`` (the settings' server by default), on a thread."""
        self.connection.connect_to(url or self._session.settings.server.server_url)

    def _on_connected(self, client, info, framing: Framing) -> None:
        from ...backends import status_line

        session, signals = self._session, self._signals
        before = session.attention_available
        declared = session.connect(client, info, framing)
        self._proxy.new_server()
        if declared is not None:
            # A server that does not declare it (the original fork) is judged by its events.
            self.announce_attention(session.attention_available != before)
        self.state = "connected"
        self._prompt.sync()  # before input opens: the prefix is part of every turn
        self._set_state("connected", model_first(status_line(client, info), info.name))
        self._announce_model_and_template(client, info)
        note = (getattr(info, "raw", None) or {}).get("engine_note")
        if isinstance(note, str) and note:
            signals.info.emit(note)  # e.g. llama.cpp's safe settings on this CPU
        signals.stats_changed.emit()
        self._ahead.warm_up()  # the open conversation's context, read before the first message

    def template_choice(self) -> str:
        """The conversation's saved template choice, else the settings' ("auto")."""
        return self._session.server.template_choice()

    def _connection_options(self) -> dict:
        settings = self._session.settings
        url = settings.server.server_url

        def api_key() -> str | None:
            # On the probe's thread: importing the backends (httpx) and finding the keyring
            # backend take ~0.4 s, which the window's first paint need not wait for.
            from ...backends.api_keys import get_key

            return get_key(url)

        return {"api_key": api_key, "template": self.template_choice(),
                "model": self._session.server.model_choice(), "context_tokens": settings.server.server_context_tokens,
                "api": settings.server.server_api}

    def choose_model(self, name: str) -> None:
        """Use the server's model ``name`` in the open conversation (saved with it) and
        reconnect when it is not the one in use."""
        session = self._session
        store = session.store
        if store is not None and not getattr(store, "read_only", False):
            session.save(lambda: store.set_meta("model", name), "Saving the model choice")
        if session.backend is None or name != session.backend.model_id:
            self.connect_server()

    def follows_conversation(self) -> bool:
        """Whether the connected server frames and answers as the open conversation asks
        (its template choice, its model where the server serves several)."""
        client = self._session.backend
        if client is None:
            return True
        if client.template_choice not in (None, self.template_choice()):
            return False
        wanted = self._session.server.model_choice()
        return not (wanted and wanted in client.models and wanted != client.model_id)

    def _announce_model_and_template(self, client, info) -> None:
        signals = self._signals
        signals.models_changed.emit(list(client.models), str(client.model_id or info.name))
        missing = client.missing_model
        if missing:
            signals.info.emit(f"The model {missing!r} is not served at {self.connection.url}; "
                              f"using {client.model_id!r} (pick another above the conversation).")
        used = client.template_in_use
        if used is not None:
            signals.template_changed.emit(used.words)
            if used.problem and used.problem not in self._template_problems:
                self._template_problems.add(used.problem)  # said once per session, not per reconnect
                signals.info.emit(used.problem)

    def _set_state(self, state: str, detail: str) -> None:
        self.state = state
        if state in ("offline", "stopped"):
            self._session.disconnect()
        self._signals.connection_changed.emit(state, detail)
        self._gate.announce_free()

    def announce_attention(self, changed: bool) -> None:
        """Tell the window whether attention is available (and, when it just went, why
        the heatmap will not light up)."""
        available = self._session.attention_available
        self._proxy.sync_ranks()
        if changed and not available:
            self._signals.info.emit(self._proxy.no_attention_sentence())
        self._signals.attention_changed.emit(available)

    def shutdown(self) -> None:
        """Stop a bundled server this app started (and forget pending attempts)."""
        self.connection.shutdown()
