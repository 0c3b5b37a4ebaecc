"""Every benchmark's command line is thin: ``scripts/bench_<name>.py`` parses nothing and
measures nothing itself, it runs ``main`` of a module in ``bench/``, where the benchmark
lives (and where the private-name and layer checks read it)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The most lines a command line over ``bench/`` needs.
MAX_LINES = 60


def scripts() -> list[Path]:
    return sorted((ROOT / "scripts").glob("bench_*.py"))


def test_every_benchmark_script_is_a_thin_command_line():
    fat = [f"{path.name}: {len(path.read_text().splitlines())} lines" for path in scripts()
           if len(path.read_text().splitlines()) > MAX_LINES]
    assert fat == []


def test_each_thin_script_runs_the_main_of_a_bench_module():
    thin = scripts()
    for path in thin:
        imports = [(node.module, [alias.name for alias in node.names])
                   for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.ImportFrom) and node.module.split(".")[0] in ("bench", "halo_weave")]
        assert len(imports) == 1 and imports[0][0].startswith("bench.") and imports[0][1] == ["main"], path.name
        module = ROOT / (imports[0][0].replace(".", "/") + ".py")
        functions = {node.name for node in ast.parse(module.read_text()).body if isinstance(node, ast.FunctionDef)}
        assert "main" in functions, (path.name, module)
    assert len(thin) >= 28
