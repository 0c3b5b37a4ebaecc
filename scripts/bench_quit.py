#!/usr/bin/env python
"""Time from closing the window to the end of the process, as a user quits.

The command line of :mod:`bench.quit`, where the benchmark lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.quit import main  # noqa: E402

if __name__ == "__main__":
    main()
