#!/usr/bin/env python
"""What reading attention out of llama.cpp costs per token: the C filter against the
pure-Python evaluation callback (halo_weave/server/llamacpp/filter.py).

The command line of :mod:`bench.readout`, where the benchmark lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.readout import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
