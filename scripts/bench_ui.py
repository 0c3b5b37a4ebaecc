#!/usr/bin/env python
"""Widget timings: heatmap first paint and per-token cost at 30k live tokens, graveyard scroll.

The command line of :mod:`bench.ui`, where the benchmark lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.ui import main  # noqa: E402

if __name__ == "__main__":
    main()
