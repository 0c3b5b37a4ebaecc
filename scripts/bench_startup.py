#!/usr/bin/env python
"""Time from launch to a usable window with a large live conversation (no model load).

The command line of :mod:`bench.startup`, where the benchmark lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.startup import main  # noqa: E402

if __name__ == "__main__":
    main()
