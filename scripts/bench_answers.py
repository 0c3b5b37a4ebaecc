#!/usr/bin/env python
"""Does the model answer from its memory?  Answer F1 on LoCoMo from each method's context.

The command line of :mod:`bench.answers`, where the benchmark lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.answers import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
