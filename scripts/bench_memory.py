#!/usr/bin/env python
"""Does it remember?  Evidence recall on LoCoMo at a fixed context budget.

The command line of :mod:`bench.memory.cli`, where the benchmark lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.memory.cli import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
