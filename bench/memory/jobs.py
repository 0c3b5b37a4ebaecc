"""``--jobs N``: one command runs the conversations in N worker processes and merges.

Each worker is the benchmark again (``python -m bench.memory --worker-of <folder>``) that loads the
model and the embedder once and then takes conversations from a queue in the folder, one
at a time, longest first, until none is left; each conversation runs exactly as
``--conversations <one> --json`` would, its stdout in ``<folder>/<conversation>.out``.  The
driver combines those files' last JSON lines exactly as ``--merge`` does.  One model load
per worker rather than per conversation: loading the GGUF model costs ~27 s of two cores.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

QUEUE = "queue.json"


def worker_argv(argv: list[str], conversation: str) -> list[str]:
    """``argv`` without ``--jobs``, ``--conversations``, ``--plot`` and ``--json``, for one
    conversation (``--plot`` is drawn from the merged figures instead)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in ("--jobs", "--conversations", "--plot", "--worker-of"):
            skip = "=" not in arg
            continue
        if name == "--json":
            continue
        out.append(arg)
    return out + ["--conversations", conversation, "--json"]


def claim(folder: Path, conversation: str) -> bool:
    """Take ``conversation`` for this worker unless another already has (atomic)."""
    try:
        os.close(os.open(folder / f"{conversation}.claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def serve(folder: str, main, log=lambda *a: None) -> int:
    """A worker: run ``main`` for every conversation of the queue no other worker took
    (in the queue's order), each one's stdout to its ``.out`` file; 1 if any failed."""
    folder = Path(folder)
    queue = json.loads((folder / QUEUE).read_text())
    failed = 0
    for conversation in queue["conversations"]:
        if not claim(folder, conversation):
            continue
        started = time.perf_counter()
        with open(folder / f"{conversation}.out", "w") as out, contextlib.redirect_stdout(out):
            try:
                code = main(worker_argv(queue["argv"], conversation))
            except Exception:
                traceback.print_exc()
                code = 1
        failed += code != 0
        log(f"[jobs] worker {os.getpid()}: {conversation} done (exit {code}) in "
            f"{time.perf_counter() - started:.0f} s")
    return 1 if failed else 0


def run(argv: list[str], conversations: list[str], jobs: int,
        log=lambda *a: None) -> tuple[list[str], float]:
    """Run the conversations in ``jobs`` workers (:func:`serve`); (output files in
    conversation order, elapsed seconds).  Raises if one failed (its stderr was shown)."""
    folder = Path(tempfile.mkdtemp(prefix="bench_memory_jobs_"))
    started = time.perf_counter()
    (folder / QUEUE).write_text(json.dumps({"conversations": conversations, "argv": argv}))
    # The folder holding ``bench`` leads the workers' path, installed or not.
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    workers = [subprocess.Popen([sys.executable, "-m", "bench.memory", "--worker-of", str(folder)], env=env)
               for _ in range(min(jobs, len(conversations)))]
    log(f"[jobs] {len(workers)} workers for {len(conversations)} conversations")
    codes = [w.wait() for w in workers]
    outputs = {c: folder / f"{c}.out" for c in conversations}
    failed = [c for c in conversations if not _finished(outputs[c])]
    log(f"[jobs] workers done (exit {codes}) at {time.perf_counter() - started:.0f} s")
    if failed or any(codes):
        raise SystemExit(f"workers failed for {', '.join(failed) or 'a conversation'}; "
                         f"their output is in {folder}")
    return [str(outputs[c]) for c in conversations], time.perf_counter() - started


def _finished(path: Path) -> bool:
    """Whether a conversation's output ends with its JSON figures."""
    try:
        lines = path.read_text().strip().splitlines()
        return bool(lines) and isinstance(json.loads(lines[-1]), dict)
    except (OSError, ValueError):
        return False
