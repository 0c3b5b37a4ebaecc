#!/usr/bin/env python
"""Branches on a long conversation: how long an edit of an earlier message and a switch
between the two branches take, and what a stashed tail weighs.

The command line of :mod:`bench.branches`, where the benchmark lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.branches import main  # noqa: E402

if __name__ == "__main__":
    main()
