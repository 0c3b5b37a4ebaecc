"""llama.cpp loads models with settings the CPU survives: no AMX repacking where the CPU
has AMX, and a canary child that decides, once per build, CPU and model, what the engine
uses when a test run dies."""

from __future__ import annotations

import signal
import subprocess
import sys

import httpx
import pytest

from halo_weave.server.launcher import start_server
from halo_weave.server.llamacpp import safety

pytestmark = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import llama_cpp"], capture_output=True).returncode != 0,
    reason="llama-cpp-python is not installed")

#: A canary child that dies the way llama.cpp's AMX path does.
SEGFAULTING_CHILD = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]


def segfaults_in(*modes: str):
    """A canary run whose child kills itself with SIGSEGV in ``modes`` and runs the real
    canary otherwise."""
    from halo_weave.server.loader import bundled_gguf

    calls: list[str] = []

    def run(mode: str) -> safety.ChildResult:
        calls.append(mode)
        command = SEGFAULTING_CHILD if mode in modes else None
        return safety.run_child(mode, bundled_gguf(), command=command)

    run.calls = calls
    return run


def test_the_real_canary_decodes_the_bundled_model():
    import llama_cpp.llama_cpp as llama
    from halo_weave.server.loader import bundled_gguf

    safe = safety.run_child(safety.SAFE, bundled_gguf())
    assert safe.ok and len(safe.tokens) == 4, safe
    if safety.has_amx(system_info=safety.system_info(llama)):
        return  # the default settings are the crash this guards against: never run here
    default = safety.run_child(safety.DEFAULT, bundled_gguf())
    # The settings change where weights live, not what comes out.
    assert default.ok and default.tokens == safe.tokens, default


def test_a_default_run_that_segfaults_makes_the_engine_use_its_safe_settings(tmp_path):
    run = segfaults_in(safety.DEFAULT)
    found = safety.verdict(run=run, folder=tmp_path)
    assert found.mode == safety.SAFE
    assert "signal 11" in found.sentence and "safe settings" in found.sentence
    assert found.trials == ("default: signal 11", "safe: ok")
    assert run.calls == [safety.DEFAULT, safety.SAFE]


def test_the_verdict_is_kept_per_build_and_cpu_so_the_canary_runs_once(tmp_path):
    first = segfaults_in(safety.DEFAULT)
    assert safety.verdict(run=first, folder=tmp_path).mode == safety.SAFE
    again = segfaults_in()
    assert safety.verdict(run=again, folder=tmp_path).mode == safety.SAFE
    assert again.calls == [], "the kept verdict is read, no child runs"
    assert len(list(tmp_path.glob("*.json"))) == 1


def test_when_every_setting_dies_llama_cpp_is_not_used(tmp_path):
    found = safety.verdict(run=segfaults_in(safety.DEFAULT, safety.SAFE), folder=tmp_path)
    assert found.mode == safety.UNUSABLE
    assert "transformers" in found.sentence and "signal 11" in found.sentence


def test_a_cpu_with_amx_never_runs_the_default_settings():
    assert safety.has_amx(frozenset({"avx512f", "amx_tile", "amx_int8"}))
    assert safety.has_amx(frozenset(), system_info="CPU : AVX512 = 1 | AMX_INT8 = 1 |")
    assert not safety.has_amx(frozenset({"avx2", "avx512f"}), system_info="CPU : AVX512 = 1 |")
    run = segfaults_in()
    found = safety.decide(True, run)
    assert run.calls == [safety.SAFE]
    assert found.mode == safety.SAFE and "AMX" in found.sentence and "20824" in found.sentence


def test_safe_settings_turn_off_the_extra_buffer_types():
    import llama_cpp.llama_cpp as llama

    assert llama.llama_model_default_params().use_extra_bufts
    assert not safety.apply(llama.llama_model_default_params(), safety.SAFE).use_extra_bufts
    assert safety.apply(llama.llama_model_default_params(), safety.DEFAULT).use_extra_bufts


def test_the_server_says_when_it_runs_llama_cpp_with_safe_settings():
    server = start_server(port=0, env={safety.MODE_ENV: safety.SAFE})
    try:
        url = server.wait_ready(300)
        info = httpx.get(f"{url}/api/v1/model", timeout=30).json()
        assert info["engine"] == "llamacpp"
        assert "safe settings" in info["engine_note"]
        assert any("safe settings" in line for line in server.log), server.log_tail()
    finally:
        server.stop()


def test_the_canary_child_reports_how_it_died():
    result = safety.run_child(safety.DEFAULT, "unused", command=SEGFAULTING_CHILD)
    assert not result.ok and result.how == f"signal {int(signal.SIGSEGV)}"
    hung = safety.run_child(safety.DEFAULT, "unused", timeout=1,
                            command=[sys.executable, "-c", "import time; time.sleep(30)"])
    assert not hung.ok and "no answer" in hung.how


def test_each_model_gets_its_own_verdict(tmp_path):
    """The kernels that run depend on a model's quantization, so a verdict is per model."""
    from halo_weave.server import bundled

    first = segfaults_in(safety.DEFAULT)
    assert safety.verdict(bundled.smollm2_gguf(), run=first, folder=tmp_path).mode == safety.SAFE
    other = segfaults_in()
    assert safety.verdict(bundled.find("qwen").path, run=other, folder=tmp_path).mode != safety.UNUSABLE
    assert other.calls, "another model's canary runs"
    again = segfaults_in()
    assert safety.verdict(bundled.smollm2_gguf(), run=again, folder=tmp_path).mode == safety.SAFE
    assert again.calls == [] and len(list(tmp_path.glob("*.json"))) == 2
