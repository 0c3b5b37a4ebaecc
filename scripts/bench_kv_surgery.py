#!/usr/bin/env python
"""What KV surgery costs in accuracy and saves in time, against an exact re-prefill.

The command line of :mod:`bench.kv_surgery`, where the benchmark lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.kv_surgery import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
