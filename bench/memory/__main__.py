"""``python -m bench.memory``: the memory benchmark's command line (as ``scripts/bench_memory.py``)."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
