"""Benchmark documents in the memory: attaching a 300-page PDF, search at 100k document
chunks, and whether a question about page 200 brings page 200 back (:mod:`bench.documents`).

    python scripts/bench_documents.py [--json] [--server-url URL] [--pages 300] [--chunks 100000] [--page 200]

Without ``--server-url`` the bundled server is started (and stopped) for the tokenizer.
With ``--json`` the last line printed is one JSON object of figures.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from bench.documents import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
