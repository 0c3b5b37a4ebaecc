"""The house rules that keep the core usable without a GUI."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import halo_weave

ROOT = Path(__file__).resolve().parents[1]
#: The top layers of the contract: the only places allowed to import Qt.
QT_LAYERS = ["app", "ui"]


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {c["name"]: c for c in config["tool"]["importlinter"]["contracts"]}


def _layer_names(layer: str) -> list[str]:
    """``"a | (b) : c"`` -> ``["a", "b", "c"]``."""
    return [n.strip().strip("()") for n in layer.replace(":", "|").split("|")]


def core_modules() -> list[str]:
    """Top-level modules and subpackages of halo_weave outside the Qt layers."""
    names = [f"halo_weave.{m.name}" for m in pkgutil.iter_modules(halo_weave.__path__)]
    return sorted(n for n in names if n.removeprefix("halo_weave.") not in QT_LAYERS)


def test_qt_layers_are_the_top_of_the_layers_contract():
    layers = _contracts()["Layers"]["layers"]
    assert [_layer_names(layer) for layer in layers[: len(QT_LAYERS)]] == [[n] for n in QT_LAYERS]


def test_the_no_qt_contract_covers_every_layer_below_ui():
    """The forbidden list is the layers contract below ``ui``: every module that exists there."""
    below = [n for layer in _contracts()["Layers"]["layers"][len(QT_LAYERS):] for n in _layer_names(layer)]
    existing = {f"halo_weave.{n}" for n in below} & set(core_modules())
    assert set(_contracts()["Only app and ui import Qt"]["source_modules"]) == existing
    assert existing == set(core_modules()), "place every module in the layers contract (pyproject.toml)"


def test_core_modules_never_import_qt():
    """import-linter's contracts (pyproject.toml) hold: the layers, and no core module reaches PySide6."""
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Layers KEPT" in result.stdout
    assert "Only app and ui import Qt KEPT" in result.stdout
    assert "The controller uses QtCore only KEPT" in result.stdout


def test_importing_the_core_loads_no_qt():
    """Every core module imported in a fresh interpreter: no Qt module gets loaded."""
    code = (
        "import importlib, sys\n"
        f"for name in {core_modules()!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = [m for m in sys.modules if m.startswith(('PySide6', 'shiboken6'))]\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
