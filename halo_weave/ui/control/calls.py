"""Blocking calls run on threads, one :class:`~.workers.CallWorker` each."""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import QObject

from .workers import CallWorker


class Calls(QObject):
    """Starts blocking calls on threads and keeps them until they end.

    Owns: the set of :class:`~.workers.CallWorker` threads still running.
    """

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._running: set[CallWorker] = set()

    def run(self, fn: Callable[..., Any], *args: Any, on_ok: Callable | None = None,
            on_fail: Callable | None = None) -> CallWorker:
        """Run ``fn(*args)`` on a thread; ``on_ok(result)`` or ``on_fail(exc)`` on this one."""
        worker = CallWorker(fn, *args, parent=self)
        self._running.add(worker)

        def finished() -> None:
            self._running.discard(worker)
            worker.deleteLater()

        if on_ok is not None:
            worker.succeeded.connect(on_ok)
        if on_fail is not None:
            worker.failed.connect(on_fail)
        worker.finished.connect(finished)
        worker.start()
        return worker

    @property
    def running(self) -> int:
        """Calls still on their threads."""
        return len(self._running)

    def wait_all(self, timeout_ms: int) -> None:
        """Block until every running call has ended (at most ``timeout_ms`` each)."""
        for worker in list(self._running):
            worker.wait(timeout_ms)
