"""Benchmark documents in the memory: attaching a 300-page PDF, search at 100k document
chunks, and whether a question about page 200 brings page 200 back (:mod:`bench.documents`).

    python scripts/bench_documents.py [--json] [--server-url URL] [--pages 300] [--chunks 100000] [--page 200]

Without ``--server-url`` the bundled server is started (and stopped) for the tokenizer.
With ``--json`` the last line printed is one JSON object of figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from bench.documents import run  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument("--server-url", default=None, help="a running model server (default: start the bundled one)")
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--chunks", type=int, default=100_000, help="document chunks in the search index")
    parser.add_argument("--page", type=int, default=200, help="the page asked about")
    parser.add_argument("--probes", type=int, default=20, help="other pages asked about (top-1 rate)")
    args = parser.parse_args()
    figures = run(args.server_url, args.pages, args.chunks, args.page, args.probes)
    figures["machine"] = f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>36}: {value}")


if __name__ == "__main__":
    main()
