#!/usr/bin/env python
"""Prefill and decode speed of the bundled model with llama.cpp's default and safe settings.

The command line of :mod:`bench.llamacpp_settings`, where the benchmark lives (``--help`` for its options).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench.llamacpp_settings import main  # noqa: E402

if __name__ == "__main__":
    main()
