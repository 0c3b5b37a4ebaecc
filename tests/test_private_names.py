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
    another module (the package, the scripts and the tests)."""
    names = private_names((root / OWNER).read_text())
    pattern = re.compile(r"(\w+)\s*\.\s*(" + "|".join(map(re.escape, sorted(names))) + r")\b")
    found = []
    for folder in ("halo_weave", "scripts", "tests"):
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root)
            if rel == OWNER or rel == Path(__file__).resolve().relative_to(ROOT):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if any(m.group(1) != "self" for m in pattern.finditer(line)):
                    found.append(f"{rel}:{number}: {line.strip()}")
    return found


def test_the_conversation_has_private_names_to_guard():
    names = private_names((ROOT / OWNER).read_text())
    assert {"_writer", "_prune_chunks"} <= names


def test_no_module_reaches_into_the_conversation():
    assert accesses() == []


if __name__ == "__main__":
    hits = accesses(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
    print("\n".join(hits))
    print(f"{len(hits)} accesses to Conversation's private names from other modules")
