#!/usr/bin/env python
"""Figures of the Qt-free engine: brightness, attention decoding, the store, crash safety.

The command line of :mod:`bench.engine`, where the benchmark lives (``--help`` for its options):

    python scripts/bench_engine.py [--tokens 1000000] [--live 30000] [--trials 50] [--json]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.engine import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
