"""The memory benchmark's parts: LoCoMo loading, teacher-forced replay, methods, report.

``scripts/bench_memory.py`` is the command line; these modules hold the logic so that
``tests/test_bench_memory.py`` can exercise it on a tiny synthetic file.
"""
