"""Read-ahead while the user types: the message's prompt goes to the server before Enter.

The rules (what is settled, the prompt a draft would get) are
:mod:`halo_weave.session.read_ahead`'s; :class:`ReadAhead` decides only *when*, on which
thread.  The window hands over every change of the message box
(:meth:`ReadAhead.draft_changed`); once a word is finished — or the user has paused for
:data:`IDLE_MS` — and no draft's prompt is being built, one is: tokenize the settled text
on a thread, search on the embedder thread (what the message would resurrect), plan here,
rank what would come back on the embedder thread (the part Enter keeps, and the order of
its note), build the prompt here, send it on a thread (:meth:`halo_weave.kobold_client.KoboldClient.prepare`).
The next draft's prompt is built while the server still reads the last one, and sent as
soon as it is ready: the server stops the older read-ahead after its current batch (what
it ran stays in its cache) and reads the newer.  A message's recall changes as its words
come, and reading an older draft's paragraphs to the end made the newer draft wait
seconds for what it no longer brings back.  Only for a server that declares it (ours); a
failed read-ahead changes nothing the user sees (Enter then runs the whole message, as
without it), so it is only logged.

A *warm-up* (:meth:`ReadAhead.warm_up`) gives the server the whole live context when a
conversation opens (at start or from the list) or the server connects: restored from the
cache the server saved for it (``/api/extra/restore``), else prefilled through the
read-ahead path.  No read-ahead starts while it runs, and a message sent meanwhile waits
for it (:meth:`ReadAhead.when_warm`) rather than making the server read the context twice.
"""

from __future__ import annotations

import logging
import uuid
from typing import Callable

from PySide6.QtCore import QObject, QTimer

from ...session.read_ahead import settled_text, unread
from .calls import Calls
from .gate import Gate
from .memory import Memory
from .prompt import PromptUpkeep
from .signals import ControlSignals

log = logging.getLogger("halo_weave.app")

#: A pause this long settles the last word too (milliseconds).
IDLE_MS = 600


class ReadAhead(QObject):
    """The message box's draft, read ahead to the server, and the warm-up.

    Owns: the draft and the settled text last sent, whether a draft's prompt is being
    built and which read-ahead the server is reading, the warm-up (its size, request and
    the answer waiting for it), the idle timer, what the server was last given
    (:meth:`unread`), and the figures :attr:`read_aheads`, :attr:`replaced` and
    :attr:`last_warm_up`.
    """

    def __init__(self, session, signals: ControlSignals, gate: Gate, calls: Calls, memory: Memory,
                 prompt: PromptUpkeep, *, connected: Callable[[], bool], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._session, self._signals, self._gate, self._calls = session, signals, gate, calls
        self._memory, self._prompt, self._connected = memory, prompt, connected
        gate.became_free.connect(self._try_warm_up)  # one asked for while busy (an import, a turn)
        prompt.synced.connect(self._try_warm_up)  # the context starts with the prompt
        self._draft = ""
        self._draft_sent = None  # the settled text of the last read-ahead started
        self._planning = False  # a draft's prompt is being built (tokenize, search, rank)
        self.read_aheads = 0  # read-aheads the server took (tests, diagnostics)
        self.replaced = 0  # read-aheads the server stopped for a newer draft's (tests, diagnostics)
        self._idle_timer = QTimer(self)
        self._idle_timer.setSingleShot(True)
        self._idle_timer.setInterval(IDLE_MS)
        self._idle_timer.timeout.connect(lambda: self._read_ahead(paused=True))
        self._warm_wanted = False  # the open conversation's context is not at the server yet
        self._warming = 0  # tokens of the warm-up at the server (0: none running)
        self._after_warm_up = None  # the answer waiting for the warm-up
        self._warm_request: tuple[str, str | None] | None = None  # the running one's request id and key
        self._ahead_request: str | None = None  # the request id of the newest read-ahead at the server
        self.last_warm_up: dict | None = None  # the server's answer to the last warm-up
        #: The prompt the server was last given (warm-up, read-ahead, answer), to tell the
        #: user how much of the next one it still has to read.
        self._server_has: list[int] = []

    @property
    def warming_up(self) -> int:
        """Tokens of the context the server is reading for a warm-up (0: none running)."""
        return self._warming

    def warm_up(self) -> None:
        """Give the server the open conversation's context now (it opened, or the server
        connected): it is read while the user reads and types, not after Enter.  One still
        running for another conversation is stopped (the server then stops its prefill)."""
        self._warm_wanted = True
        running, backend = self._warm_request, self._session.backend
        if self._warming and running is not None and running[1] != self._session.server.cache_key() and backend is not None:
            self._warm_request = None
            self._calls.run(backend.abort, running[0],
                            on_fail=lambda exc: log.debug("stopping a warm-up failed: %s", exc))
        self._try_warm_up()

    def when_warm(self, action) -> None:
        """Run ``action`` (the answer's request) now, or once the warm-up has ended."""
        if not self._warming:
            action()
            return
        self._after_warm_up = action
        self._gate.set_busy(True, f"Reading the conversation ({self._warming:,} tokens) — Esc stops")
        self._signals.turn_phase.emit("", f"reading {self._warming:,} tokens…")

    def _try_warm_up(self) -> None:
        session = self._session
        if (not self._warm_wanted or self.reading_ahead or self._gate.busy or self._gate.closing
                or self._prompt.syncing or not self._connected() or not session.server.can_warm_up):
            return
        self._warm_wanted = False
        ids = session.server.warm_up_ids()
        if not ids:
            return
        key = session.server.cache_key()
        request_id = f"hw-warm-{uuid.uuid4().hex[:12]}"
        self._warming = len(ids)
        self._warm_request = (request_id, key)
        self._signals.warm_up_changed.emit(len(ids))

        def ended(answer: dict | None = None, error: BaseException | None = None) -> None:
            self._warming, self._warm_request = 0, None
            if error is not None:
                log.info("warm-up failed (the first answer reads the context itself): %s", error)
            else:
                self.last_warm_up, self._server_has = answer, ids
                log.info("warm-up of %d tokens: %s", len(ids), answer)
            self._signals.warm_up_changed.emit(0)
            waiting, self._after_warm_up = self._after_warm_up, None
            if waiting is not None:
                waiting()
                return
            self._next()  # another conversation opened meanwhile, or the draft

        self._calls.run(session.server.warm_up, ids, key, request_id, on_ok=ended, on_fail=lambda exc: ended(error=exc))

    def stop_for_quit(self) -> None:
        """Quitting: the read-ahead or warm-up the server runs for this app stops after its
        current batch, so that the server is free to save its cache (what ran stays in it)
        when it is stopped, instead of the save being left out."""
        backend = self._session.backend
        running = self._ahead_request or (self._warm_request[0] if self._warm_request else None)
        if backend is not None and running:
            self._calls.run(backend.abort, running, on_fail=lambda exc: log.debug("stopping at quit failed: %s", exc))

    @property
    def waiting_for_warm_up(self) -> bool:
        """An answer waits for the warm-up to end (Stop applies)."""
        return self._after_warm_up is not None

    def drop_waiting(self) -> bool:
        """Stop: the answer waiting for the warm-up is not sent; False when none waited."""
        waiting, self._after_warm_up = self._after_warm_up, None
        return waiting is not None

    def unread(self, ids: list[int]) -> int:
        """Tokens of the prompt ``ids`` the server has not read yet."""
        return unread(self._server_has, ids)

    def server_given(self, ids: list[int]) -> None:
        """The server was given the prompt ``ids`` (an answer's request, or the context
        an ended answer leaves)."""
        self._server_has = ids

    @property
    def reading_ahead(self) -> bool:
        """A read-ahead or warm-up is on its way (tokenizing, searching or at the server)."""
        return bool(self._warming or self._planning or self._ahead_request is not None)

    @property
    def read_ahead_text(self) -> str | None:
        """The text of the last read-ahead started (None since the box was emptied)."""
        return self._draft_sent

    def draft_changed(self, text: str) -> None:
        """The message box now holds ``text`` (the window calls this on every change)."""
        self._draft = text
        if not text.strip():
            self._idle_timer.stop()
            self._draft_sent = None  # sent or cleared: the same words again are a new message
            return
        self._idle_timer.start()
        self._read_ahead(paused=False)

    def _can_read_ahead_now(self) -> bool:
        """No draft's prompt is being built, no warm-up runs (a read-ahead still at the
        server is no reason to wait: the newer one replaces it)."""
        return (not self._planning and not self._warming and not self._gate.busy and not self._gate.closing
                and not self._gate.input_block_reason() and self._session.server.can_read_ahead)

    def _read_ahead(self, paused: bool) -> None:
        if not self._can_read_ahead_now():
            return
        draft = self._draft.strip() if paused else settled_text(self._draft)
        if not draft or draft == self._draft_sent:
            return
        session, conv = self._session, self._session.conv
        self._planning, self._draft_sent = True, draft

        def stale() -> bool:  # a send or another conversation came first
            return self._session.conv is not conv or self._gate.busy or self._gate.closing

        def searched(pieces, matches) -> None:
            if stale():
                return self._planned()
            ids = [int(i) for i, _ in pieces]
            try:
                plan = session.server.draft_plan(session.recall.index, matches, ids)
                if not session.recall.keeps_part(plan.recalled):
                    return send(plan, ids, None)
                ranking = session.recall.ranking(plan.recalled, draft)
            except Exception:  # noqa: BLE001 - the send path reports a real failure itself
                log.debug("read-ahead: no draft prompt", exc_info=True)
                return self._planned()
            # What Enter keeps of the recall is ranked on the embedder's thread, as Enter
            # ranks it: the draft's note is then the note Enter sends.
            self._memory.run(ranking, on_ok=lambda order: send(plan, ids, order),
                             on_fail=lambda exc: send(plan, ids, None))

        def send(plan, pieces: list[int], order) -> None:
            if stale():
                return self._planned()
            try:
                ids = session.server.draft_prompt(plan, pieces, order, draft)
            except Exception:  # noqa: BLE001 - the send path reports a real failure itself
                log.debug("read-ahead: no draft prompt", exc_info=True)
                return self._planned()
            backend, room = session.backend, self._session.settings.sampling.max_new_tokens
            request_id = self._ahead_request = f"hw-ahead-{uuid.uuid4().hex[:12]}"
            self._calls.run(lambda: backend.prepare(ids, max_length=room, request_id=request_id),
                            on_ok=lambda answer: self._read_ahead_ended(request_id, answer, ids=ids),
                            on_fail=lambda exc: self._read_ahead_ended(request_id, error=exc))
            self._planned()

        def tokenized(pieces) -> None:
            if self._session.conv is not conv or self._gate.busy:
                return self._planned()
            index = session.recall.index
            if index is None or not session.recall.can_recall():
                searched(pieces, [])
                return
            self._memory.search(draft, lambda matches, exc: searched(pieces, matches if exc is None else []))

        self._calls.run(session.server.tokenize, draft, on_ok=tokenized,
                        on_fail=lambda exc: self._planned(error=exc))

    def _planned(self, error: BaseException | None = None) -> None:
        """A draft's prompt was sent, or could not be built (``error``, or a send or
        another conversation came first): the next draft may be built."""
        self._planning = False
        if error is not None:
            log.debug("read-ahead failed: %s", error)
        self._next()

    def _read_ahead_ended(self, request_id: str, answer: dict | None = None, error: BaseException | None = None,
                          ids: list[int] | None = None) -> None:
        """The server answered the read-ahead ``request_id`` (stopped, when a newer one or
        an answer replaced it)."""
        newest = request_id == self._ahead_request
        if newest:
            self._ahead_request = None
        if error is not None:
            log.debug("read-ahead failed: %s", error)
        elif answer and answer.get("prepared"):
            self.read_aheads += 1
            self._server_has = ids or self._server_has
        elif answer is not None and not newest:
            self.replaced += 1
        self._next()

    def _next(self) -> None:
        """After a read-ahead step: a warm-up asked for meanwhile, else the draft as it is now."""
        self._try_warm_up()
        if not self._warming and self._draft.strip():
            self._read_ahead(paused=not self._idle_timer.isActive())
