"""An object owns its state: no module reaches into the conversation's private names.

The names are read from ``conversation.py`` itself (every ``self._x`` it assigns and every
``_x`` method it defines), and an access is any ``something._x`` outside that file,
whatever the variable is called (``conv._x``, ``base._x``, ``self.conv._x``); a class's
own ``self._x`` is its own business and is not counted.

Run as a script (``python tests/test_private_names.py [ROOT]``) it prints the accesses
and their count.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OWNER = Path("halo_weave/conversation.py")


def private_names(source: str, class_name: str = "Conversation") -> set[str]:
    """The private attributes and methods a class defines (dunders left out)."""
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    names = set()
    for node in ast.walk(cls):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id == "self"):
            names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.endswith("__")}


def accesses(root: Path = ROOT) -> list[str]:
    """``path:line: text`` of every access to the conversation's private names from
    another module (the package, the benchmarks, the scripts and the tests)."""
    names = private_names((root / OWNER).read_text())
    pattern = re.compile(r"(\w+)\s*\.\s*(" + "|".join(map(re.escape, sorted(names))) + r")\b")
    found = []
    for folder in ("halo_weave", "bench", "scripts", "tests"):
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root)
            if rel == OWNER or rel == Path(__file__).resolve().relative_to(ROOT):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if any(m.group(1) != "self" for m in pattern.finditer(line)):
                    found.append(f"{rel}:{number}: {line.strip()}")
    return found


#: Private names of other libraries the benchmarks read, each for a reason: transformers
#: keeps the attention implementation a loaded model runs in its config, nowhere public.
FOREIGN_PRIVATE = {"_attn_implementation"}


def private_uses(source: str) -> list[tuple[int, str]]:
    """(line, code) of every private name a module uses on something not its own:
    ``x._y`` for any ``x`` but ``self`` and ``cls`` (``self.conv._y`` counts),
    ``getattr``/``setattr``/``hasattr`` with a ``"_y"`` literal, and an import of a
    private name or module (``from m import _y``, ``import halo_weave.core._x``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        name = None
        if isinstance(node, ast.Attribute):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                name = node.attr
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            name = node.args[1].value
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            parts = [p for alias in node.names for p in alias.name.split(".")]
            parts += (getattr(node, "module", None) or "").split(".")
            name = next((p for p in parts if p.startswith("_") and not p.endswith("__")), None)
        if name and name.startswith("_") and not name.endswith("__") and name not in FOREIGN_PRIVATE:
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def bench_private_uses(root: Path = ROOT) -> list[str]:
    """``path:line: code`` of every private name the benchmarks (``bench/``) use on the
    app's objects: they reach the app only through its public interface."""
    return [f"{path.relative_to(root)}:{line}: {code}"
            for path in sorted((root / "bench").rglob("*.py"))
            for line, code in private_uses(path.read_text())]


def test_the_private_use_check_sees_every_form():
    source = ("import halo_weave.core._x\nfrom halo_weave.conversation import _Writer\n"
              "conv._texts\nself.session._save()\ngetattr(conv, '_pruned_tokens')\n"
              "self._own\ncls._own\nconv.__class__\nconv.texts\n")
    assert [line for line, _ in private_uses(source)] == [1, 2, 3, 4, 5]


def test_the_benchmarks_use_only_the_apps_public_names():
    assert bench_private_uses() == []


def test_the_conversation_has_private_names_to_guard():
    names = private_names((ROOT / OWNER).read_text())
    assert {"_prune_chunks"} <= names


def test_no_module_reaches_into_the_conversation():
    assert accesses() == []


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT
    hits = accesses(root)
    print("\n".join(hits))
    print(f"{len(hits)} accesses to Conversation's private names from other modules")
    uses = bench_private_uses(root)
    print("\n".join(uses))
    print(f"{len(uses)} uses of private names in bench/")
