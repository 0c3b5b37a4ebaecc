"""The house rules that keep the core usable without a GUI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_core_modules_never_import_qt():
    """import-linter's contract (pyproject.toml) holds: no core module reaches PySide6."""
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Core modules never import Qt KEPT" in result.stdout


def test_core_imports_without_qt_installed_in_the_process():
    """Importing every core module in a fresh interpreter loads no Qt module."""
    code = (
        "import sys\n"
        "import halo_weave.conversation, halo_weave.brightness, halo_weave.settings\n"
        "import halo_weave.chat_template, halo_weave.token_table, halo_weave.chunking\n"
        "for name in ('store', 'kobold_client', 'semantic_index', 'transfer'):\n"
        "    try:\n"
        "        __import__('halo_weave.' + name)\n"
        "    except ModuleNotFoundError as exc:\n"
        "        if exc.name != 'halo_weave.' + name: raise\n"
        "bad = [m for m in sys.modules if m.startswith(('PySide6', 'shiboken6'))]\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
