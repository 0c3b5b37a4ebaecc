"""Time from closing the window to the end of the process, as a user quits.

Launches ``halo-weave`` (``halo_weave.app.main``) in a fresh interpreter, offscreen, with
a temporary data directory: it starts its bundled model server and loads the embedder
as on any start.  Once the model server answered and the embedder loaded (their log
lines on stderr), it waits ``--settle`` seconds, sends SIGTERM (the app closes its window
as when the user closes it) and measures until the process has ended.  Prints one JSON
object as its last line with --json.

    python scripts/bench_quit.py [--runs 3] [--settle 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Log lines that say the model server answered and the embedder loaded.
READY_MARKS = ("warm-up of", "Loading SentenceTransformer model")


def one_quit(settle_s: float, timeout_s: float) -> dict:
    """Launch, wait until ready and settled, close; the seconds each step took."""
    home = Path(tempfile.mkdtemp(prefix="halo-weave-quit-"))
    env = dict(os.environ, HALO_WEAVE_HOME=str(home), XDG_CONFIG_HOME=str(home / "config"),
               QT_QPA_PLATFORM=os.environ.get("QT_QPA_PLATFORM", "offscreen"), HF_HUB_OFFLINE="1",
               PYTHONPATH=str(ROOT))
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", "import sys; from halo_weave.app import main; sys.exit(main([]))"],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen: set[str] = set()
    ready = threading.Event()

    def read() -> None:
        for line in process.stderr:
            seen.update(mark for mark in READY_MARKS if mark in line)
            if len(seen) == len(READY_MARKS):
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not ready.wait(timeout_s):
        process.kill()
        process.wait()
        raise TimeoutError(f"not ready after {timeout_s} s (seen: {sorted(seen)})")
    ready_s = time.perf_counter() - started
    time.sleep(settle_s)
    closed = time.perf_counter()
    process.send_signal(signal.SIGTERM)
    code = process.wait(timeout=120)
    quit_s = time.perf_counter() - closed
    return dict(ready_s=round(ready_s, 2), quit_s=round(quit_s, 3), exit_code=code)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--settle", type=float, default=15.0, help="seconds between ready and closing")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for ready")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runs = []
    for number in range(args.runs):
        run = one_quit(args.settle, args.timeout)
        runs.append(run)
        print(f"run {number + 1}: ready after {run['ready_s']} s, quit in {run['quit_s']} s "
              f"(exit code {run['exit_code']})", flush=True)
    figures = dict(runs=runs, quit_median_s=statistics.median(r["quit_s"] for r in runs),
                   settle_s=args.settle, cpu_count=os.cpu_count())
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"quit median: {figures['quit_median_s']} s")
