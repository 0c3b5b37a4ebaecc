"""The open conversation's semantic memory: its index, the embedder, the indexing queue.

The embedder (torch and the model: seconds) and the index load on the embedder thread
after the window's first paint, or on first use.  QtCore only.
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import QObject

from .collector import WindowThreadCollector
from .gate import Gate
from .indexing import IndexQueue
from .signals import ControlSignals


def _new_index(store, settings, embedder):
    """The semantic index of ``store``'s conversation, loaded (any thread)."""
    from ...semantic_index import SemanticIndex

    # The indexing thread shares the connection: commits go through the store's lock.
    index = SemanticIndex(store.conn, settings, embedder, lock=store.lock)
    index.load()
    return index


class Memory(QObject):
    """Loads the open conversation's semantic index and keeps it fed.

    Owns: the embedder (made by ``embedder_factory``, else the MiniLM
    :class:`~halo_weave.memory.embedder.Embedder`), the :class:`~.indexing.IndexQueue`
    (its thread), whether this conversation's index was tried, is loading, or must be
    re-indexed once loaded, labelled work asked for while it loads, and whether the
    window has painted once.  The index itself
    is the session's (``session.recall.use_index``).

    It is also the session's indexer: :meth:`queue_pending` and :meth:`queue`.
    """

    def __init__(self, session, signals: ControlSignals, gate: Gate,
                 embedder_factory: Callable[[], Any] | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._session, self._signals, self._gate = session, signals, gate
        self._embedder_factory = embedder_factory
        self._embedder = None
        self._tried = False
        self._loading = False
        self._reindex_when_loaded = False
        self._labelled_when_loaded: list[tuple[list[int], str]] = []  # queue() while loading
        self._painted = False
        self._queue = IndexQueue(self)
        self._queue.failed.connect(signals.error)
        self._queue.progress.connect(signals.progress)

    @property
    def idle(self):
        """The queue's ``idle`` signal: nothing is queued any more."""
        return self._queue.idle

    @property
    def pending(self) -> int:
        """Embedding jobs queued or running."""
        return self._queue.pending

    @property
    def loading(self) -> bool:
        """The embedder and the index are being loaded on the embedder thread."""
        return self._loading

    @property
    def index(self):
        """The open conversation's semantic index (loaded after the window's first paint,
        or here on first use; None if unusable or still loading)."""
        session = self._session
        if session.recall.index is None and not self._tried and session.store is not None:
            self._tried = True
            try:
                session.recall.use_index(_new_index(session.store, session.settings, self._get_embedder()))
            except Exception as exc:  # noqa: BLE001
                self._signals.error.emit(exc, "Loading the semantic index")
        return session.recall.index

    def opened(self) -> None:
        """Another conversation opened: its index loads after the first paint (or on first use)."""
        self._tried = False
        self._labelled_when_loaded = []

    def closed(self) -> None:
        """The conversation's file closed: jobs still queued for its index are dropped."""
        self._queue.aim(None)

    def window_painted(self) -> None:
        """The window has painted the conversation: load what the memory needs now, on
        its thread, so the first message's search does not wait for it."""
        if not self._painted:
            self._painted = True
            self.load()

    def load_if_painted(self) -> None:
        """Load the memory now when the window has painted already (a conversation opened)."""
        if self._painted:
            self.load()

    def load(self) -> None:
        """Load the embedder (torch and the model: seconds) and the open conversation's
        index on the embedder thread."""
        session = self._session
        store = session.store
        if session.recall.index is not None or self._tried or store is None or self._gate.closing:
            return
        self._tried, self._loading = True, True
        embedder, settings = self._get_embedder(), session.settings

        def load():
            index = _new_index(store, settings, embedder)
            embedder.load()
            return index

        def loaded(index) -> None:
            self._loading = False
            WindowThreadCollector.freeze()  # torch's objects stay out of later collections
            if session.store is store and session.recall.index is None:
                session.recall.use_index(index)
                waiting, self._labelled_when_loaded = self._labelled_when_loaded, []
                for chunk_ids, label in waiting:  # with the progress they were asked with
                    self.queue(session.conv, chunk_ids, label)
                if self._reindex_when_loaded:
                    self.reindex_all()
                else:
                    self.queue_pending(session.conv)
            self._reindex_when_loaded = False

        def failed(exc) -> None:
            self._loading = False
            if session.store is store:
                self._signals.error.emit(exc, "Loading the semantic index")

        self._queue.run(load, on_ok=loaded, on_fail=failed)

    def _get_embedder(self):
        if self._embedder is None:
            if self._embedder_factory is not None:
                self._embedder = self._embedder_factory()
            else:
                from ...memory.embedder import Embedder

                self._embedder = Embedder()
        return self._embedder

    # ------------------------------------------------------------------ indexing
    def queue_pending(self, conv=None) -> None:
        """Queue every chunk of the open conversation whose index entry is missing or out of date."""
        if self._gate.closing:
            return
        self._queue.aim(self.index)
        self._queue.queue_pending(self._session.conv)

    def queue(self, conv, chunk_ids: list[int], label: str = "") -> None:
        """Embed ``chunk_ids`` of the open conversation (with a ``label``: with progress)."""
        if self._gate.closing:
            return
        if label and self._loading:  # queued once the index has loaded, progress and all
            self._labelled_when_loaded.append((list(chunk_ids), label))
            return
        self._queue.aim(self.index)
        self._queue.queue(self._session.conv, chunk_ids, label)

    def reindex_all(self) -> None:
        """Embed every chunk without a current entry (after an import), with progress."""
        if self._loading:
            self._reindex_when_loaded = True  # once the index has loaded
            return
        self._reindex_when_loaded = False
        index, conv = self.index, self._session.conv
        if index is None or conv is None or not index.available:
            return
        self._queue.aim(index)
        try:
            index.remove(index.orphans(conv))
            pending = index.pending(conv)
        except Exception as exc:  # noqa: BLE001
            self._signals.error.emit(exc, "Re-indexing")
            return
        self.queue(conv, pending, label="Re-indexing")

    def search(self, text: str, on_done) -> None:
        """Search the open index ahead of queued indexing; ``on_done(matches, error)``."""
        self._queue.search(text, on_done)

    def run(self, fn, on_ok=None, on_fail=None) -> None:
        """Run ``fn`` on the embedder's thread ahead of queued indexing; ``on_ok(result)``
        or ``on_fail(exc)`` on the UI thread."""
        self._queue.run(fn, on_ok=on_ok, on_fail=on_fail)

    def wait_for_indexing(self, timeout: float = 60.0) -> bool:
        """Block until queued embedding jobs finish (scripts and tests)."""
        return self._queue.wait_idle(timeout)

    def shutdown(self) -> None:
        """Let queued jobs finish briefly, then end the thread (a job in flight, such as
        the embedder loading torch, cannot be interrupted: it is waited for)."""
        self._queue.wait_idle(5.0)
        self._queue.shutdown(timeout_ms=60_000)
        self._tried = True
