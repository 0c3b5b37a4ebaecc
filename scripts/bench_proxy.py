#!/usr/bin/env python
"""What proxy attention costs per exchange: the bundled reader reading a finished answer.

The command line of :mod:`bench.proxy`, where the benchmark lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.proxy import main  # noqa: E402

if __name__ == "__main__":
    main()
