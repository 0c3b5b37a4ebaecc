"""Indexing in the background leaves a core for the window: the embedder thread runs an
indexing batch on half the cores (at least one) and a message's search on all of them,
so a long document being embedded neither stalls the heatmap's frames nor slows the
search a message waits for (``scripts/bench_documents.py`` has the frame times)."""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication

from halo_weave.ui.control.workers import EmbedderWorker


def _threads() -> int:
    import torch

    return int(torch.get_num_threads())


def test_indexing_batches_use_half_the_cores_and_a_search_all_of_them(qtbot):
    QCoreApplication.instance()
    worker = EmbedderWorker()
    results: dict[int, int] = {}
    worker.job_done.connect(lambda job, tag, value: results.__setitem__(job, value))
    try:
        first = worker.submit(_threads, urgent=True)  # torch imported: the search's count
        assert worker.wait_idle(60)
        batch = worker.submit(_threads)  # an indexing batch
        search = worker.submit(_threads, urgent=True)
        assert worker.wait_idle(60)
        qtbot.waitUntil(lambda: len(results) == 3, timeout=10_000)
    finally:
        worker.shutdown()
    full = results[first]
    assert results[batch] == max(1, full // 2)
    assert results[search] == full
