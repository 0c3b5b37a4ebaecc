#!/usr/bin/env python
"""What the recall settings add to the search the app runs on every user message.

The command line of :mod:`bench.recall`, where the benchmark lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.recall import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
