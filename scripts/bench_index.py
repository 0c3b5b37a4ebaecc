#!/usr/bin/env python
"""Benchmark the semantic index: search latency, embedding throughput, load time, memory.

The command line of :mod:`bench.index`, where the benchmark lives (``--help`` for its options):

    python scripts/bench_index.py [--json] [--sizes 10000 100000] [--chunks 128] [--real 2000]
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.index import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
