"""Decode ms/token with attention at 2k context under each OpenMP wait setting.

Each setting runs in a fresh process (libgomp reads its environment once, when it loads):
the bundled GGUF on the llama.cpp engine, a 2,048-token context, then ``--tokens``
decodes with the aggregated attention read out.  The settings are interleaved over
``--rounds`` so that a change in the machine's load hits them all alike; ``--busy N``
also runs N busy-loop processes for the whole run (the "loaded machine" condition).
The default setting (nothing set: the server's :mod:`halo_weave.server.omp`) is ``default``.

Usage: ``python scripts/bench_wait_policy.py [--settings default,PASSIVE,ACTIVE,2000]
[--rounds 3] [--tokens 16] [--busy 0] [--json]``; the last line is one JSON object
(median ms/token per setting, the load average before and after).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MEASURE = """
import json, os, sys, time
from halo_weave.server.omp import configure
configure()
from halo_weave.server.engine_choice import load_engine
engine = load_engine("llamacpp", threads=int(sys.argv[1]), context_size=4096)
kv = engine.kv
kv.sync([(i * 7919) % 40000 + 100 for i in range(2048)])
kv.step([5], attention=True)
times = []
for k in range(int(sys.argv[2])):
    started = time.perf_counter()
    kv.step([6 + k], attention=True)
    times.append(time.perf_counter() - started)
print(json.dumps(sorted(times)[len(times) // 2] * 1000))
"""


def environment(setting: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("HF_HUB_OFFLINE", "1")
    if setting in ("PASSIVE", "ACTIVE"):
        env["OMP_WAIT_POLICY"] = setting
    elif setting != "default":
        env["GOMP_SPINCOUNT"] = setting
    return env


def busy_loop() -> None:
    while True:
        pass


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default="default,PASSIVE,ACTIVE,2000",
                        help="comma-separated: default, PASSIVE, ACTIVE or a GOMP_SPINCOUNT")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--busy", type=int, default=0, help="busy-loop processes beside the runs")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    settings = args.settings.split(",")
    figures: dict = {"threads": args.threads, "busy": args.busy, "cpu_count": os.cpu_count(),
                     "load_average_1m": round(os.getloadavg()[0], 2)}
    loops = [multiprocessing.Process(target=busy_loop, daemon=True) for _ in range(args.busy)]
    for p in loops:
        p.start()
    runs: dict[str, list[float]] = {s: [] for s in settings}
    try:
        for _ in range(args.rounds):
            for setting in settings:
                out = subprocess.run([sys.executable, "-c", MEASURE, str(args.threads), str(args.tokens)],
                                     env=environment(setting), capture_output=True, text=True, check=True)
                runs[setting].append(round(json.loads(out.stdout.strip().splitlines()[-1]), 1))
                if not args.json:
                    print(setting, runs[setting][-1], file=sys.stderr, flush=True)
    finally:
        for p in loops:
            p.terminate()
    figures["decode_ms_attention_2k"] = {s: statistics.median(v) for s, v in runs.items()}
    figures["runs_ms"] = runs
    figures["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(figures))
    return 0
