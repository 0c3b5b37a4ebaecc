#!/usr/bin/env python
"""Figures for a 1M-character paste of mixed scripts.

The command line of :mod:`bench.paste`, where the benchmark lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.paste import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
