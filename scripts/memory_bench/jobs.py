"""``--jobs N``: one command runs the conversations in N worker processes and merges.

Each worker is this script again with ``--conversations <one>`` and ``--json`` (its own
model, one thread); the workers' stdout goes to files in a temporary folder and the
driver combines their last JSON lines exactly as ``--merge`` does.  Conversations are
handed out longest first, so the last one to start is a short one.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path


def worker_argv(argv: list[str], conversation: str) -> list[str]:
    """``argv`` without ``--jobs``, ``--conversations``, ``--plot`` and ``--json``, for one
    conversation (``--plot`` is drawn from the merged figures instead)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in ("--jobs", "--conversations", "--plot"):
            skip = "=" not in arg
            continue
        if name == "--json":
            continue
        out.append(arg)
    return out + ["--conversations", conversation, "--json"]


def run(script: str, argv: list[str], conversations: list[str], jobs: int,
        log=lambda *a: None) -> tuple[list[str], float]:
    """Run one worker per conversation, ``jobs`` at a time; (output files in conversation
    order, elapsed seconds).  Raises if a worker fails (its stderr was already shown)."""
    folder = Path(tempfile.mkdtemp(prefix="bench_memory_jobs_"))
    started = time.perf_counter()
    waiting = list(conversations)
    running: dict[str, subprocess.Popen] = {}
    outputs = {c: folder / f"{c}.out" for c in conversations}
    failed = []
    while waiting or running:
        while waiting and len(running) < jobs:
            c = waiting.pop(0)
            with open(outputs[c], "w") as out:
                running[c] = subprocess.Popen([sys.executable, script, *worker_argv(argv, c)],
                                              stdout=out)
            log(f"[jobs] started {c} ({len(running)} running, {len(waiting)} waiting)")
        time.sleep(0.5)
        for c, proc in list(running.items()):
            if proc.poll() is not None:
                del running[c]
                log(f"[jobs] {c} finished (exit {proc.returncode}) at "
                    f"{time.perf_counter() - started:.0f} s")
                if proc.returncode != 0:
                    failed.append(c)
    if failed:
        raise SystemExit(f"workers failed for {', '.join(failed)}; their output is in {folder}")
    return [str(outputs[c]) for c in conversations], time.perf_counter() - started
