"""The memory benchmark's parts: LoCoMo loading, teacher-forced replay, methods, report.

``cli`` is the command line (``scripts/bench_memory.py``, ``python -m bench.memory``); the
other modules hold the logic so that ``tests/test_bench_memory.py`` can exercise it on a
tiny synthetic file.  LoCoMo loading is :mod:`bench.locomo`, shared with other benchmarks.
"""
