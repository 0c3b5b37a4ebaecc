#!/usr/bin/env python
"""The 20-message chat: facts said early, pruned, then asked about; does the model answer?

The command line of :mod:`bench.chat_facts`, where the benchmark lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.chat_facts import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
