"""How the server's OpenMP threads wait: a short spin by default, the user's choice kept.

libgomp prints what it read from the environment when ``OMP_DISPLAY_ENV=VERBOSE``; each
case loads the real library in a fresh process the way the server does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LOAD_LLAMA = "from halo_weave.server.llamacpp import bindings; bindings.load(); print('loaded')"
# The server's command line, as far as the engine load (torch for transformers).
LOAD_TORCH = ("import sys; from halo_weave.server.omp import configure; configure(); import torch; "
              "torch.ones(64, 64) @ torch.ones(64, 64); print('loaded')")


def openmp_settings(code: str, **env: str) -> str:
    full = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    full.update(PYTHONPATH=str(ROOT), OMP_DISPLAY_ENV="VERBOSE", **env)
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=300)
    assert "loaded" in out.stdout, out.stderr[-2000:]
    return out.stderr


def llama_or_skip() -> None:
    try:
        import llama_cpp  # noqa: F401
    except Exception:  # noqa: BLE001 - the install without a compiler has no llama.cpp
        pytest.skip("llama-cpp-python is not installed here")


def test_llama_engine_threads_spin_briefly_then_sleep():
    llama_or_skip()
    shown = openmp_settings(LOAD_LLAMA)
    assert "GOMP_SPINCOUNT = '2000'" in shown


def test_a_users_own_wait_policy_wins():
    llama_or_skip()
    shown = openmp_settings(LOAD_LLAMA, OMP_WAIT_POLICY="PASSIVE")
    assert "OMP_WAIT_POLICY = 'PASSIVE'" in shown
    assert "GOMP_SPINCOUNT = '0'" in shown  # libgomp's passive: no spin at all
    shown = openmp_settings(LOAD_LLAMA, GOMP_SPINCOUNT="300")
    assert "GOMP_SPINCOUNT = '300'" in shown


def test_torch_threads_get_the_same_setting():
    shown = openmp_settings(LOAD_TORCH)
    assert "GOMP_SPINCOUNT = '2000'" in shown
