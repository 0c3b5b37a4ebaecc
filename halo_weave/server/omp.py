"""How the OpenMP threads of llama.cpp and torch wait: a short bounded spin.

ggml's CPU threads meet at a barrier after every graph node (~1,000 per token); torch's
parallel regions do the same.  How a thread waits there decides the decode rate on a
small machine (2 cores here, 2 threads, 2k context, ms per token with attention read;
``scripts/bench_wait_policy.py``, figures in ``docs/engines.md``): sleeping at once
(``OMP_WAIT_POLICY=PASSIVE``) 55 idle, 93 beside two busy loops; a spin of 2,000
iterations 28 and 72; spinning without bound 24 idle but 0.4-9.8 s under load.  With the
cores five times oversubscribed a spin of 2,000 cost ~1.7x passive waiting (CPU burnt
that the machine does not have), a known trade: a desktop machine is mostly idle.

Sleeping at once pays a futex wake-up per node; spinning forever takes the core the
other thread needs when the machine is busy.  A spin of ~2,000 iterations bridges the
short gaps between nodes and then sleeps.  libgomp reads the setting once, when it
loads, so :func:`configure` must run before llama_cpp or torch is imported.
"""

from __future__ import annotations

import os

#: libgomp's spin count before a waiting thread sleeps (its own default with no
#: OMP_WAIT_POLICY is 300,000, "about 3 ms"; PASSIVE makes it 0).
SPIN_COUNT = "2000"


def configure(environ=os.environ) -> None:
    """Set the bounded spin unless the user chose a wait policy or spin count themselves."""
    if "OMP_WAIT_POLICY" not in environ and "GOMP_SPINCOUNT" not in environ:
        environ["GOMP_SPINCOUNT"] = SPIN_COUNT
