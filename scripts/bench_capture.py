#!/usr/bin/env python
"""Cost of recording attention: ms per token and disk bytes per token.

The command line of :mod:`bench.capture`, where the benchmark lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.capture import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
