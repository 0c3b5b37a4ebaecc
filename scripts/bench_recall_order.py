#!/usr/bin/env python
"""Which order of a message's recall keeps its evidence?  Without answering.

The command line of :mod:`bench.recall_order`, where the benchmark lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.recall_order import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
