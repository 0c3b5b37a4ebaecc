"""The house rules that keep the core usable without a GUI."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import halo_weave

ROOT = Path(__file__).resolve().parents[1]
#: The only places allowed to import Qt.
QT_MODULES = {"halo_weave.app", "halo_weave.ui"}


def core_modules() -> list[str]:
    """Top-level modules and subpackages of halo_weave outside the Qt layer."""
    names = [f"halo_weave.{m.name}" for m in pkgutil.iter_modules(halo_weave.__path__)]
    return sorted(n for n in names if n not in QT_MODULES)


def test_every_core_module_is_under_the_no_qt_contract():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = config["tool"]["importlinter"]["contracts"][0]
    missing = set(core_modules()) - set(contract["source_modules"])
    assert not missing, f"add {sorted(missing)} to the import-linter contract in pyproject.toml"


def test_core_modules_never_import_qt():
    """import-linter's contract (pyproject.toml) holds: no core module reaches PySide6."""
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Core modules never import Qt KEPT" in result.stdout


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
