"""Python's cyclic garbage collected on the window's thread, never on a worker's.

CPython runs its cyclic collector in whichever thread allocates when a generation's
threshold is crossed.  A Qt object found in a cycle is destroyed where the collector
runs: a widget or timer of the window could go on the embedder's thread, in the middle
of loading torch, while the window's thread was using it (a restyle walks every
widget), and the process crashed.  While the controller lives, automatic collection is
off and a timer on the thread that made the application collects instead, by CPython's
own per-generation thresholds.  A worker that allocates between two ticks only holds
its cycles a little longer; everything without a cycle is freed at once, as always.

QtCore only.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QCoreApplication, QObject, QThread, QTimer

#: How often the window's thread looks at the collector's counts (ms).
TICK_MS = 100


class WindowThreadCollector(QObject):
    """Collects on the application's thread; one per application (:meth:`install`)."""

    def __init__(self, parent: QObject | None = None, tick_ms: int = TICK_MS) -> None:
        super().__init__(parent)
        self._thresholds = gc.get_threshold()
        self._timer = QTimer(self)
        self._timer.setInterval(tick_ms)
        self._timer.timeout.connect(self.collect_due)
        #: Collections run by this object, per generation (for tests and benchmarks).
        self.collections = [0, 0, 0]

    @classmethod
    def install(cls) -> WindowThreadCollector | None:
        """The application's collector, started (made once, on the application's thread);
        None where there is no application or this is not its thread."""
        app = QCoreApplication.instance()
        if app is None or app.thread() != QThread.currentThread():
            return None
        found = app.findChild(cls)
        if found is None:
            found = cls(app)
        found.start()
        return found

    @property
    def running(self) -> bool:
        return self._timer.isActive()

    def start(self) -> None:
        """Automatic collection off; this thread's timer collects instead."""
        gc.disable()
        if not self._timer.isActive():
            self._timer.start()

    def collect_due(self) -> int:
        """Collect the oldest generation whose threshold is crossed, as CPython would;
        returns the generation collected, or -1 when none was due."""
        allocated, young_runs, middle_runs = gc.get_count()
        first, second, third = self._thresholds
        if first <= 0 or allocated < first:
            return -1
        generation = 0
        if young_runs >= second:
            generation = 1
            if middle_runs >= third:
                generation = 2
        gc.collect(generation)
        self.collections[generation] += 1
        return generation

    @staticmethod
    def freeze() -> None:
        """Everything alive now is kept out of later collections (torch's and the
        model's objects, once the embedder has loaded: a full collection walked them all,
        a 0.4 s stall of the window in the middle of a streamed answer,
        ``scripts/bench_documents.py``).  Called on this thread."""
        gc.freeze()
