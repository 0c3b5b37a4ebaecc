"""Semantic indexing off the UI thread, for the controller's memory (:mod:`.memory`).

The index's own three steps are split across threads: ``prepare`` (reads the
conversation) and ``store`` (writes the database and the search matrix) run on the UI
thread, ``embed`` (the slow model call) on the :class:`EmbedderWorker`.  So neither the
conversation nor the database is touched by two threads at once.  Searches for a user
message jump ahead of queued indexing batches.  QtCore only.
"""

from __future__ import annotations

from typing import Callable, Sequence

from PySide6.QtCore import QObject, Signal

from ...errors import EmbedderUnavailable
from .workers import EmbedderWorker

#: Chunks embedded per job, so a user message's search waits for one batch at most.
INDEX_BATCH = 8


class IndexQueue(QObject):
    """Queues embedding work for the current :class:`~halo_weave.semantic_index.SemanticIndex`.

    Results that arrive for an index that is no longer current (the conversation was
    closed or switched) are dropped.  ``failed(exc, context)`` reports errors (an
    unavailable embedder only once); ``progress(label, done, total)`` reports labelled
    batches (a re-index); ``idle`` fires when nothing is queued.

    Owns: the :class:`~.workers.EmbedderWorker` thread, the index its jobs are for
    (:meth:`aim`), the callbacks of jobs in flight, the chunks being embedded, and
    whether an unavailable embedder was reported already.
    """

    failed = Signal(object, str)
    progress = Signal(str, int, int)
    idle = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        #: The index jobs are for (None: none open); see :meth:`aim`.
        self.index = None
        self._worker = EmbedderWorker(self)
        self._worker.job_done.connect(self._on_done)
        self._worker.job_failed.connect(self._on_failed)
        self._worker.idle.connect(self.idle)
        self._callbacks: dict[int, tuple[Callable | None, Callable | None]] = {}
        self._in_flight: set[int] = set()
        self._embedder_failed = False

    # ------------------------------------------------------------------ state
    @property
    def pending(self) -> int:
        """Jobs queued or running, or whose result has not reached this thread yet (a
        result may queue more work: the index, once loaded, queues what it lacks)."""
        return max(self._worker.pending, len(self._callbacks))

    def wait_idle(self, timeout: float) -> bool:
        """Block until the queue drains (scripts, tests, quitting)."""
        return self._worker.wait_idle(timeout)

    def aim(self, index) -> None:
        """Work for ``index`` from now on (None: the conversation closed); results of jobs
        queued for another are dropped."""
        self.index = index

    def shutdown(self, timeout_ms: int = 60_000) -> None:
        """Drop queued jobs and end the thread (a running job cannot be interrupted)."""
        self.index = None
        self._worker.shutdown(timeout_ms)

    # ------------------------------------------------------------------ work
    def queue_pending(self, conv) -> None:
        """Queue every chunk whose entry is missing or stale; drop orphaned entries."""
        index = self.index
        if index is None or conv is None:
            return
        try:
            index.remove(index.orphans(conv))
            pending = [c for c in index.pending(conv) if c not in self._in_flight]
        except Exception as exc:  # noqa: BLE001
            self.failed.emit(exc, "Checking the semantic index")
            return
        self.queue(conv, pending)

    def queue(self, conv, chunk_ids: Sequence[int], label: str = "") -> None:
        """Embed ``chunk_ids`` in batches; with a ``label``, report progress."""
        index = self.index
        if index is None or not chunk_ids or not index.available:
            return
        chunk_ids = list(chunk_ids)
        total, done = len(chunk_ids), [0]
        if label:
            self.progress.emit(label, 0, total)
        for start in range(0, total, INDEX_BATCH):
            try:
                drafts = index.prepare(conv, chunk_ids[start : start + INDEX_BATCH])
            except Exception as exc:  # noqa: BLE001
                self.failed.emit(exc, "Preparing chunks for the semantic index")
                return
            self._in_flight.update(d.chunk_id for d in drafts)

            def embed(drafts=drafts):
                index.embedder.load()
                return index.embed(drafts)

            def finish(drafts, stored: bool) -> None:
                self._in_flight.difference_update(d.chunk_id for d in drafts)
                if stored and index is self.index:
                    try:
                        index.store(drafts)
                    except Exception as exc:  # noqa: BLE001
                        self.failed.emit(exc, "Saving the semantic index")
                done[0] += len(drafts)
                if label:
                    self.progress.emit(label, done[0] if stored else total, total)

            self._submit(embed, on_ok=lambda result, d=drafts: finish(d, True),
                         on_fail=lambda exc, d=drafts: finish(d, False))

    def search(self, text: str, on_done: Callable[[list, BaseException | None], None]) -> None:
        """Search the current index ahead of queued indexing; ``on_done(matches, error)``."""
        index = self.index
        if index is None:
            on_done([], None)
            return

        def done(matches) -> None:
            on_done(matches if index is self.index else [], None)

        self._submit(lambda: index.search(text), urgent=True, on_ok=done,
                     on_fail=lambda exc: on_done([], exc))

    def run(self, fn: Callable[[], object], on_ok: Callable | None = None, on_fail: Callable | None = None) -> None:
        """Run ``fn`` on the embedder thread ahead of queued indexing (loading the embedder
        and an index); ``on_ok(result)`` or ``on_fail(exc)`` on this thread."""
        self._submit(fn, urgent=True, on_ok=on_ok, on_fail=on_fail)

    # ------------------------------------------------------------------ plumbing
    def _submit(self, fn, *, urgent: bool = False, on_ok=None, on_fail=None) -> None:
        job = self._worker.submit(fn, urgent=urgent)
        self._callbacks[job] = (on_ok, on_fail)

    def _on_done(self, job: int, tag: str, result) -> None:
        on_ok, _ = self._callbacks.pop(job, (None, None))
        if on_ok is not None:
            on_ok(result)

    def _on_failed(self, job: int, tag: str, exc) -> None:
        _, on_fail = self._callbacks.pop(job, (None, None))
        if isinstance(exc, EmbedderUnavailable):
            if not self._embedder_failed:
                self._embedder_failed = True
                self.failed.emit(exc, "")
        else:
            self.failed.emit(exc, "Semantic index")
        if on_fail is not None:
            on_fail(exc)
