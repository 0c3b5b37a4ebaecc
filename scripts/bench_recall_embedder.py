#!/usr/bin/env python
"""A second embedder's cosine for every paragraph a message recalled.

The command line of :mod:`bench.recall_embedder`, where the study lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.recall_embedder import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
