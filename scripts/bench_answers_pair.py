"""Two answer-benchmark runs compared question by question (see bench/answers_pair.py).

    python scripts/bench_answers_pair.py surgery.jsonl exact.jsonl --json
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.answers_pair import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
