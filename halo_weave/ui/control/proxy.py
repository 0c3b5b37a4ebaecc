"""The controller's proxy attention: the bundled model reads each finished exchange of a
server that sends no attention, off the UI thread, and its votes light the heatmap.

QtCore only.  One read runs at a time on a :class:`~.workers.CallWorker`; an exchange that ends while one
runs waits (only the newest: an older answer's read is superseded).  The reader, the
bundled GGUF on llama.cpp in this process (:mod:`halo_weave.server.reader`), is loaded
by the first read.  By default it lights the heatmap only and pruning stays
oldest-first; ``Settings.proxy_pruning`` lets it rank chunks (then the prune waits for
the read).  What the window shows about it: :meth:`reader_status`.
"""

from __future__ import annotations

import logging
import threading
import time

from PySide6.QtCore import QObject

from .calls import Calls
from .gate import Gate
from .signals import ControlSignals

log = logging.getLogger("halo_weave.app")


class ProxyReading(QObject):
    """Proxy attention for a server that sends none.

    Owns: the reader model (loaded by the first read) and its lock, the read in flight
    and whether an exchange waits for the next, why the reader failed (until another
    server connects), and the figures :attr:`last_read` and :attr:`reads_done`.
    ``prune`` is the controller's prune (announced); the reader's votes may rank it.
    """

    def __init__(self, session, signals: ControlSignals, gate: Gate, calls: Calls, *, prune,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._session, self._signals, self._gate, self._calls = session, signals, gate, calls
        self._prune = prune
        self._reader = None
        self._reader_lock = threading.Lock()
        self._reading = None  # the CallWorker of the read in flight
        self._read_waiting = False  # an exchange ended while a read ran
        self._reader_problem = ""
        #: The last read's figures: ms, context and answer tokens, tokens run.
        self.last_read: dict | None = None
        self.reads_done = 0

    # ------------------------------------------------------------------ state
    def proxy_active(self) -> bool:
        """Whether the reader reads this server's exchanges (setting on, server without
        attention whose tokens the reader shares, and the reader could load)."""
        from ...server.reader import readable

        session = self._session
        return (session.settings.server.proxy_attention and not self._reader_problem and session.backend is not None
                and not session.attention_available and readable(session.backend))

    def reader_status(self) -> tuple[str, str, str]:
        """``(source, words, detail)`` for the window: source ``"server"``, ``"reader"`` or
        ``"none"``; short words for the stats line, the full sentence for its tooltip."""
        session = self._session
        if session.attention_available:
            return "server", "", ""
        if self.proxy_active():
            name = self._reader.name if self._reader is not None else "SmolLM2-135M"
            served = str(getattr(session.model_info, "name", "") or "the server's model").replace("\\", "/").rsplit("/", 1)[-1]
            prune = "pruning by its attention" if session.settings.server.proxy_pruning else "pruning oldest-first"
            detail = (f"This server sends no attention. The heatmap shows the attention of {name}, the bundled "
                      f"reader model, reading each finished exchange — not the attention of {served}. "
                      + ("It also ranks chunks for pruning." if session.settings.server.proxy_pruning else
                         "Pruning stays oldest-first (Settings → Context & memory)."))
            return "reader", f"reader's attention ({name}) · {prune}", detail
        if self._reader_problem:
            return "none", "no attention; the reader failed — pruning oldest-first", (
                f"This server sends no attention and the bundled reader could not run: {self._reader_problem}")
        return "none", "", ""

    def no_attention_sentence(self) -> str:
        """What the window says once it knows the server sends no attention."""
        if not self.proxy_active():
            return ("This server sends no attention: chatting works, but brightness cannot "
                    "be measured, so the oldest chunks are pruned first.")
        return ("This server sends no attention: the bundled SmolLM2-135M reads each finished exchange "
                "and its attention lights the heatmap (its attention, not your model's). "
                + ("It also ranks chunks for pruning." if self._session.settings.server.proxy_pruning else
                   "Pruning stays oldest-first (Settings → Context & memory can change that)."))

    def brightness_source(self) -> str:
        """:meth:`reader_status`'s source, ``"waiting"`` while the reader has read nothing
        of this conversation yet (its brightness still all at the start value)."""
        source = self.reader_status()[0]
        conv = self._session.conv
        if source == "reader" and self.reads_done == 0 and conv is not None and (
                conv.mean_brightness() == self._session.settings.brightness.initial_brightness):
            return "waiting"
        return source

    def new_server(self) -> None:
        """Another server connected: a reader that failed may try again."""
        self._reader_problem = ""
        self.sync_ranks()

    @property
    def reading(self) -> bool:
        """A read is in flight."""
        return self._reading is not None

    def sync_ranks(self) -> None:
        """Let the session rank chunks by the reader's votes when the reader reads and the
        settings ask for it."""
        self._session.set_proxy_ranks(self.proxy_active() and self._session.settings.server.proxy_pruning)

    # ------------------------------------------------------------------ reading
    def prunes_after_read(self) -> bool:
        """True when the prune after this answer must wait for the reader's votes."""
        self.sync_ranks()
        return self._session.proxy_ranks

    def read_exchange(self) -> None:
        """Read the last answer (called when a turn ends); queued if a read is running."""
        if not self.proxy_active() or self._gate.closing:
            return
        if self._reading is not None:
            self._read_waiting = True
            return
        from ...memory import proxy
        from ...server.reader import READER_WINDOW

        conv = self._session.conv
        plan = proxy.plan_read(conv, self._reader.window if self._reader is not None else READER_WINDOW)
        if plan is None:
            self._after_read_prune(conv)
            return
        settings = self._session.settings

        def job():
            reader = self._load_reader()
            result = reader.read(plan.context_ids, plan.answer_ids)
            return result, proxy.votes(plan, result.rows, settings)

        def ok(outcome) -> None:
            result, delta = outcome
            self._reading = None
            if self._session.conv is conv and not self._gate.closing:
                changed = proxy.apply(conv, plan, delta, settings)
                self.reads_done += 1
                self.last_read = dict(ms=round(result.seconds * 1000, 1), context=result.context_tokens,
                                      answer=result.answer_tokens, run=result.run_tokens, rows_changed=changed)
                if conv.open_turn is None and self._session.store is not None:
                    self._session.save(lambda: self._session.store.save_brightness(conv), "Saving brightness")
                self._after_read_prune(conv)
                self._signals.conversation_changed.emit()
                self._signals.stats_changed.emit()
            self._next_read()

        def fail(exc) -> None:
            self._reading = None
            self._reader_problem = str(exc) or exc.__class__.__name__
            log.warning("the proxy reader failed: %s", exc)
            self._session.set_proxy_ranks(False)
            self._after_read_prune(conv)
            self._signals.attention_changed.emit(self._session.attention_available)
            self._signals.stats_changed.emit()

        self._read_waiting = False
        self._reading = self._calls.run(job, on_ok=ok, on_fail=fail)

    def _next_read(self) -> None:
        if self._read_waiting and not self._gate.closing:
            self._read_waiting = False
            self.read_exchange()

    def _after_read_prune(self, conv) -> None:
        """The prune the end of the turn left to the reader (reader-ranked pruning only)."""
        if self._session.proxy_ranks and self._session.conv is conv and conv.open_turn is None and not self._gate.busy:
            if self._prune():
                self._signals.conversation_changed.emit()

    def _load_reader(self):
        """The reader, loaded on first use (on the read's thread)."""
        with self._reader_lock:
            if self._reader is None:
                from ...server.reader import ProxyReader

                started = time.perf_counter()
                self._reader = ProxyReader.load()
                log.info("proxy reader %s loaded in %.2f s", self._reader.name, time.perf_counter() - started)
            return self._reader

    def wait_for_reading(self, timeout_ms: int = 60_000) -> bool:
        """Block until the read in flight (and the one waiting) is applied (tests, scripts)."""
        from PySide6.QtCore import QCoreApplication, QDeadlineTimer

        deadline = QDeadlineTimer(timeout_ms)
        while self._reading is not None or self._read_waiting:
            if deadline.hasExpired():
                return False
            QCoreApplication.processEvents()
            if self._reading is not None:
                self._reading.wait(20)
        return True

    def close(self) -> None:
        """Wait for the read in flight, then free the reader (quitting)."""
        if self._reading is not None:
            self._reading.wait(30_000)
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
