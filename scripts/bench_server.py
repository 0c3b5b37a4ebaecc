#!/usr/bin/env python
"""Figures for the attention server: both engines side by side.

The command line of :mod:`bench.server`, where the benchmark lives (``--help`` for its options):

    python scripts/bench_server.py [--json] [--threads 2] [--engines llamacpp,transformers]
        [--contexts 1024,2048,8000] [--tokens 32] [--only-abort]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.server import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
