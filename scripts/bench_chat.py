#!/usr/bin/env python
"""A scripted chat through the real server and the app's turn logic: what a user feels.

The command line of :mod:`bench.chat`, where the benchmark lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.chat import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
