"""The controller's side of the model server connection: connect, adopt, announce.

A mixin of :class:`~halo_weave.app.TurnController`: :class:`~.connection.ServerConnection`
connects on a thread; this hands the connected server to the session, applies the
context size set in Settings, syncs the system prompt and announces the connection state
and whether attention is available.
"""

from __future__ import annotations

from ..conversation import Framing


class ServerLink:
    """Connection intents and their outcome, for the turn controller."""

    @property
    def server(self):
        """The bundled server process this app started, if any."""
        return self.connection.server

    def connect_server(self, url: str | None = None) -> None:
        """Connect to ``url`` (the settings' server by default), on a thread."""
        self.connection.connect_to(url or self.settings.server_url)

    def _on_connected(self, client, info, framing: Framing) -> None:
        from ..backends import status_line

        self._apply_context_override(client, info)
        before = self.session.attention_available
        declared = self.session.connect(client, info, framing)
        self._reader_problem = ""  # a new server: the reader may try again
        self._sync_proxy_ranks()
        if declared is not None:
            # A server that does not declare it (the original fork) is judged by its events.
            self._announce_attention(self.session.attention_available != before)
        self.connection_state = "connected"
        self._sync_system_prompt()  # before input opens: the prefix is part of every turn
        self._set_connection("connected", status_line(client, info))
        self._announce_model_and_template(client, info)
        note = (getattr(info, "raw", None) or {}).get("engine_note")
        if isinstance(note, str) and note:
            self.info.emit(note)  # e.g. llama.cpp's safe settings on this CPU
        self.stats_changed.emit()
        self.warm_up()  # the open conversation's context, read before the first message

    def _apply_context_override(self, client, info) -> None:
        """A server that does not say its context size gets the one set in Settings."""
        value = self.settings.server_context_tokens
        if value <= 0 or getattr(info, "context_known", True):
            return
        info.server_max_context = value
        info.max_context = client.assume_context(value)
        info.context_known = True

    @property
    def template(self):
        """The chat template in use (the server's own, or the conversation's choice)."""
        return self.session.server.template

    def template_choice(self) -> str:
        """The conversation's saved template choice, else the settings' ("auto")."""
        return self.session.server.template_choice()

    def _connection_options(self) -> dict:
        from ..backends.api_keys import get_key

        return {"api_key": get_key(self.settings.server_url), "template": self.template_choice(),
                "model": self.session.server.model_choice()}

    def choose_model(self, name: str) -> None:
        """Use the server's model ``name`` in the open conversation (saved with it) and
        reconnect when it is not the one in use."""
        if self.store is not None and not getattr(self.store, "read_only", False):
            self.session.save(lambda: self.store.set_meta("model", name), "Saving the model choice")
        if self.client is None or name != self.client.model_id:
            self.connect_server()

    def follows_conversation(self) -> bool:
        """Whether the connected server frames and answers as the open conversation asks
        (its template choice, its model where the server serves several)."""
        client = self.client
        if client is None:
            return True
        if client.template_choice not in (None, self.template_choice()):
            return False
        wanted = self.session.server.model_choice()
        return not (wanted and wanted in client.models and wanted != client.model_id)

    def _announce_model_and_template(self, client, info) -> None:
        self.models_changed.emit(list(client.models), str(client.model_id or info.name))
        missing = client.missing_model
        if missing:
            self.info.emit(f"The model {missing!r} is not served at {self.connection.url}; "
                           f"using {client.model_id!r} (pick another above the conversation).")
        used = client.template_in_use
        if used is not None:
            self.template_changed.emit(used.words)
            if used.problem and used.problem not in self._template_problems:
                self._template_problems.add(used.problem)  # said once per session, not per reconnect
                self.info.emit(used.problem)

    def _set_connection(self, state: str, detail: str) -> None:
        self.connection_state = state
        if state != "connected":
            self.client = None if state in ("offline", "stopped") else self.client
        self.connection_changed.emit(state, detail)
        if not self.busy:
            self.busy_changed.emit(False, self.input_block_reason())

    def _announce_attention(self, changed: bool) -> None:
        available = self.session.attention_available
        self._sync_proxy_ranks()
        if changed and not available:
            self.info.emit(self.no_attention_sentence())
        self.attention_changed.emit(available)
