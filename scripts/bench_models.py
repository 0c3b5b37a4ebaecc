#!/usr/bin/env python
"""Speed of the bundled models on the server with attention on: what choosing one costs.

The command line of :mod:`bench.models`, where the benchmark lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.models import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
