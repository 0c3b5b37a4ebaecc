"""Qt objects in garbage cycles die on the window's thread, even when a worker thread is
the one allocating (a widget destroyed on the embedder's thread crashed the window)."""

from __future__ import annotations

import gc
import threading

from PySide6.QtCore import QObject, QThread

from halo_weave.app import TurnController


class _Dies:
    """Remembers which thread finalised it."""

    def __init__(self, seen: list) -> None:
        self.seen = seen
        self.me = self  # a cycle: only the cyclic collector frees it

    def __del__(self) -> None:
        self.seen.append(QThread.currentThread())


def test_cycles_made_while_a_worker_allocates_are_freed_on_the_windows_thread(qtbot, tmp_path):
    controller = TurnController(data_dir=tmp_path, autostart=False)
    try:
        assert controller.collector is not None and controller.collector.running
        assert not gc.isenabled(), "automatic collection is handed to the window's thread"
        window_thread = QObject().thread()
        seen: list = []
        for _ in range(50):
            _Dies(seen)

        kept: list = []

        def allocate() -> None:  # crosses every generation's threshold many times over
            kept.extend([] for _ in range(200_000))

        worker = threading.Thread(target=allocate)
        worker.start()
        worker.join()
        assert seen == [], "nothing was collected on the worker's thread"
        qtbot.waitUntil(lambda: len(seen) == 50, timeout=5000)
        assert all(thread == window_thread for thread in seen)
        assert sum(controller.collector.collections) >= 1
    finally:
        controller.shutdown()
