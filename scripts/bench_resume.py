#!/usr/bin/env python
"""Reopening a conversation: its saved KV cache read back against a prefill, on the bundled model.

The command line of :mod:`bench.resume`, where the benchmark lives (``--help`` for its options):

    python scripts/bench_resume.py [--json] [--quick] [--parts engine,server,app] ...
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.resume import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
