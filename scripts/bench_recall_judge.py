#!/usr/bin/env python
"""The chat model as a judge of what a message recalled: does this paragraph help answer it?

The command line of :mod:`bench.recall_judge`, where the study lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.recall_judge import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
