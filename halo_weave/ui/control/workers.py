"""The threads: everything that would block the UI thread for more than a frame.

* :class:`GenerationWorker` reads one SSE stream with the synchronous client.  The client
  decodes and aggregates attention on this thread; the worker emits each typed
  :class:`~halo_weave.events.TokenEvent` as it is, and the session applies it on the UI thread.
* :class:`EmbedderWorker` is a long-lived thread that owns the sentence-transformers
  model (loaded lazily, on this thread) and runs queued jobs (indexing, search, a
  re-index) one after the other; an indexing batch uses half the cores
  (:func:`~halo_weave.memory.embedder.share_cores`), a search all of them.
* :class:`CallWorker` runs one blocking call (connect, tokenize, import) and reports.
* :class:`ServerStartWorker` starts the bundled model server and waits while it loads.

QtCore only, so the controller and its tests need no widgets.
"""

from __future__ import annotations

import queue
import re
import threading
import time
from typing import Any, Callable

from PySide6.QtCore import QThread, Signal

from ...memory.embedder import share_cores
from ...session import token_events


_LOG_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d [\d:,.]+ +[A-Z]+ +[\w.]+: ")


class CallWorker(QThread):
    """Run ``fn(*args)`` once on a thread; report ``succeeded(result)`` or ``failed(exc)``."""

    succeeded = Signal(object)
    failed = Signal(object)

    def __init__(self, fn: Callable[..., Any], *args: Any, parent=None) -> None:
        super().__init__(parent)
        self._fn, self._args = fn, args

    def run(self) -> None:
        try:
            result = self._fn(*self._args)
        except BaseException as exc:  # noqa: BLE001 - every failure becomes a message
            self.failed.emit(exc)
        else:
            self.succeeded.emit(result)


class GenerationWorker(QThread):
    """Stream one answer; per token emit ``token(event)``, a :class:`~halo_weave.events.TokenEvent`.

    Ends with exactly one of ``completed(done_event)`` or ``failed(exc)``.  :meth:`stop`
    asks the server to abort; the stream then ends (normally or with GenerationAborted)
    and the partial answer stays with the session.
    """

    token = Signal(object)
    completed = Signal(object)
    failed = Signal(object)

    def __init__(self, client, request: dict, parent=None) -> None:
        super().__init__(parent)
        self._client = client
        self._request = dict(request)
        self._stream = None
        self._stopping = threading.Event()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def run(self) -> None:
        try:
            stream = self._client.stream(**self._request)
            self._stream = stream
            for event in token_events(stream, self._client):
                self.token.emit(event)
            self.completed.emit(getattr(stream, "done", None))
        except BaseException as exc:  # noqa: BLE001
            self.failed.emit(exc)

    def stop(self) -> None:
        """Abort the generation (returns at once; the abort request runs on a thread)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        threading.Thread(target=self._abort, daemon=True, name="halo-weave-abort").start()

    def _abort(self) -> None:
        target = self._stream if hasattr(self._stream, "abort") else self._client
        try:
            target.abort()
        except Exception:  # noqa: BLE001 - the stream's own error reports the outcome
            pass


class EmbedderWorker(QThread):
    """A queue of embedding jobs run in order on one long-lived thread.

    ``submit(fn, *args, tag=..., urgent=False)`` returns a job number; ``job_done(job,
    tag, result)`` or ``job_failed(job, tag, exc)`` follows.  Urgent jobs (the search
    for a user message) jump ahead of queued indexing batches.  ``idle`` fires whenever the queue empties, and
    :attr:`pending` counts jobs not finished yet.  ``progress(tag, done, total)`` may be
    emitted by a job through the ``progress`` callable it receives as keyword argument
    when submitted with ``with_progress=True``.
    """

    job_done = Signal(int, str, object)
    job_failed = Signal(int, str, object)
    progress = Signal(str, int, int)
    idle = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._queue: queue.PriorityQueue = queue.PriorityQueue()
        self._lock = threading.Lock()
        self._pending = 0
        self._next_job = 0
        self._idle_event = threading.Event()
        self._idle_event.set()

    @property
    def pending(self) -> int:
        with self._lock:
            return self._pending

    def submit(
        self, fn: Callable[..., Any], *args: Any, tag: str = "", with_progress: bool = False,
        urgent: bool = False,
    ) -> int:
        with self._lock:
            job = self._next_job
            self._next_job += 1
            self._pending += 1
            self._idle_event.clear()
        self._queue.put((0 if urgent else 1, job, (tag, fn, args, with_progress)))
        if not self.isRunning():
            self.start()
        return job

    def wait_idle(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds for the queue to drain (for scripts and tests)."""
        return self._idle_event.wait(timeout)

    def shutdown(self, timeout_ms: int = 10000) -> None:
        """Finish the running job, drop the rest, end the thread."""
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._queue.put((-1, -1, None))
        if self.isRunning():
            self.wait(timeout_ms)

    def run(self) -> None:
        while True:
            priority, job, item = self._queue.get()
            if item is None:
                return
            tag, fn, args, with_progress = item
            share_cores(background=priority > 0)
            try:
                if with_progress:
                    result = fn(*args, progress=lambda done, total: self.progress.emit(tag, done, total))
                else:
                    result = fn(*args)
            except BaseException as exc:  # noqa: BLE001
                self.job_failed.emit(job, tag, exc)
            else:
                self.job_done.emit(job, tag, result)
            with self._lock:
                self._pending -= 1
                empty = self._pending == 0
                if empty:
                    self._idle_event.set()
            if empty:
                self.idle.emit()


class ServerStartWorker(QThread):
    """Start the bundled model server and wait until it answers.

    Emits ``progress(seconds_elapsed, last_log_line)`` while the model loads, then
    ``ready(server_process)`` or ``failed(exc)``.
    """

    progress = Signal(float, str)
    ready = Signal(object)
    failed = Signal(object)

    def __init__(self, timeout_s: float = 300.0, extra_args=(), on_exit=None, parent=None) -> None:
        """``on_exit(server_process, returncode)``: called on the server's output thread
        when the process ends by itself (see :class:`~halo_weave.server.launcher.ServerProcess`)."""
        super().__init__(parent)
        self._timeout = timeout_s
        self._extra_args = tuple(extra_args)
        self._on_exit = on_exit
        self.server = None
        self._cancel = threading.Event()
        self._last_line = ""

    def cancel(self) -> None:
        self._cancel.set()

    def _on_line(self, line: str) -> None:
        # Keep the message of a log line ("2026-01-01 10:00:00,000 INFO name: message").
        message = _LOG_PREFIX.sub("", line.strip())
        if message:
            self._last_line = message

    def run(self) -> None:
        from ...server.launcher import start_server

        started = time.monotonic()
        try:
            on_exit = self._on_exit
            holder: list = []  # the process object, for the exit callback that may outlive this thread
            self.server = start_server(port=0, extra_args=self._extra_args, on_line=self._on_line,
                                       on_exit=(lambda code: on_exit(holder[0] if holder else None, code)) if on_exit else None,
                                       log_file=True)
            holder.append(self.server)
            while not self.server.ready:
                if self._cancel.is_set():
                    raise RuntimeError("start cancelled")
                if time.monotonic() - started > self._timeout:
                    break
                self.progress.emit(time.monotonic() - started, self._last_line)
                time.sleep(0.5)
            self.server.wait_ready(max(1.0, self._timeout - (time.monotonic() - started)))
        except BaseException as exc:  # noqa: BLE001
            if self.server is not None:
                try:
                    self.server.stop()
                except Exception:  # noqa: BLE001
                    pass
                self.server = None
            self.failed.emit(exc)
        else:
            self.ready.emit(self.server)
