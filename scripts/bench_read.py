"""What reading a long chat whole costs, with and without flash attention (bench/read_speed.py).

    python scripts/bench_read.py --tokens 2048,8192 --json
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.read_speed import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
