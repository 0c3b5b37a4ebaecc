#!/usr/bin/env python
"""What a prune costs at each size of the llama.cpp KV cache: the K-shift.

The command line of :mod:`bench.kv_cells`, where the benchmark lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.kv_cells import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
