#!/usr/bin/env python
"""Decode ms/token with attention at 2k context under each OpenMP wait setting.

The command line of :mod:`bench.wait_policy`, where the benchmark lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.wait_policy import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
