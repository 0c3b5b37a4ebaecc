#!/usr/bin/env python
"""Which recalled paragraphs should a message keep?  Studied offline, from a dump.

The command line of :mod:`bench.recall_fit`, where the study lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.recall_fit import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
