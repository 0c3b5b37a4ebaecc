"""An object owns its state: no module reaches into another's private names.

Two checks.  The private names of the conversation and of the store are read from
``conversation.py`` and ``store.py`` themselves (every ``self._x`` the class assigns and
every ``_x`` method it defines), and an access is any ``something._x`` outside that file,
whatever the variable is called (``conv._x``, ``store._write_turn``, ``self.conv._x``),
the tests included; a class's own ``self._x`` is its own business and is not counted.  Then every module of the package, the benchmarks and the scripts
(:func:`module_private_uses`): a private name is its module's, so ``x._y`` counts unless
the module defines ``_y`` itself, and importing a private name from another module counts.

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
#: The classes whose private names no other file touches, tests included: file -> class.
GUARDED = {OWNER: "Conversation", Path("halo_weave/store.py"): "ConversationStore"}


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


def accesses(root: Path = ROOT, owner: Path = OWNER) -> list[str]:
    """``path:line: text`` of every access to the private names of ``owner``'s class
    (:data:`GUARDED`) from another module (the package, the benchmarks, the scripts and
    the tests)."""
    names = private_names((root / owner).read_text(), GUARDED[owner])
    pattern = re.compile(r"(\w+)\s*\.\s*(" + "|".join(map(re.escape, sorted(names))) + r")\b")
    found = []
    for folder in ("halo_weave", "bench", "scripts", "tests"):
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root)
            if rel == owner or rel == Path(__file__).resolve().relative_to(ROOT):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if any(m.group(1) != "self" for m in pattern.finditer(line)):
                    found.append(f"{rel}:{number}: {line.strip()}")
    return found


#: Private names of other libraries the app and the benchmarks read, each for a reason:
#: transformers keeps the attention implementation a loaded model runs in its config,
#: nowhere public; llama-cpp-python's model without a context (a tokenizer that loads no
#: weights) lives only in ``llama_cpp._internals``; torch asks the CPU for AMX and
#: AVX512-BF16 only through ``torch.cpu._is_*_supported``.
FOREIGN_PRIVATE = {"_attn_implementation", "_internals", "_is_amx_tile_supported", "_is_avx512_bf16_supported"}

#: The folders whose modules :func:`module_private_uses` checks.
CHECKED = ("halo_weave", "bench", "scripts")


def private_uses(source: str) -> list[tuple[int, str]]:
    """(line, code) of every private name a module uses on something not its own:
    ``x._y`` for any ``x`` but ``self`` and ``cls`` (``self.conv._y`` counts),
    ``getattr``/``setattr``/``hasattr`` with a ``"_y"`` literal on anything but ``self``
    or ``cls``, and an import of a private name or module (``from m import _y``,
    ``import halo_weave.core._x``)."""
    return sorted((line, code) for line, code, _, _ in _private_names_used(source))


def _private_names_used(source: str):
    """(line, code, name, imported) of every use :func:`private_uses` counts."""
    for node in ast.walk(ast.parse(source)):
        name, imported = None, False
        if isinstance(node, ast.Attribute):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                name = node.attr
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and not (isinstance(node.args[0], ast.Name) and node.args[0].id in ("self", "cls"))):
            name = node.args[1].value
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            parts = [p for alias in node.names for p in alias.name.split(".")]
            parts += (getattr(node, "module", None) or "").split(".")
            name = next((p for p in parts if p.startswith("_") and not p.endswith("__")), None)
            imported = True
        if name and name.startswith("_") and not name.endswith("__") and name not in FOREIGN_PRIVATE:
            yield node.lineno, ast.unparse(node), name, imported


def own_private_names(source: str) -> set[str]:
    """The private names a module defines: its functions, classes and methods, the names
    it assigns at any level and the attributes it assigns on ``self`` or ``cls``."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if n.startswith("_")}


def module_private_uses(source: str) -> list[tuple[int, str]]:
    """(line, code) of every private name a module uses that is not its own: ``x._y`` or
    ``getattr(x, "_y")`` where the module does not define ``_y``
    (:func:`own_private_names`), and every import of a private name or module."""
    own = own_private_names(source)
    return sorted((line, code) for line, code, name, imported in _private_names_used(source)
                  if imported or name not in own)


def other_modules_private_uses(root: Path = ROOT) -> list[str]:
    """``path:line: code`` of every private name a module of :data:`CHECKED` uses that is
    not its own."""
    found = []
    for folder in CHECKED:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            found += [f"{rel}:{line}: {code}" for line, code in module_private_uses(path.read_text())]
    return found


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


def test_a_module_may_use_its_own_private_names_only():
    source = ("class Store:\n    def __init__(self):\n        self._wal = 1\n"
              "    @classmethod\n    def open(cls):\n        store = cls()\n        store._wal.check()\n"
              "        getattr(self, '_kv', None)\n        return store._put_meta\n"
              "def _helper():\n    pass\n"
              "from .files import _readonly\n"
              "client._http.stream()\ncache._helper()\n")
    assert module_private_uses(source) == [(9, "store._put_meta"), (12, "from .files import _readonly"),
                                           (13, "client._http")]


def test_no_module_of_the_app_the_benchmarks_or_the_scripts_uses_anothers_private_names():
    assert other_modules_private_uses() == []


def test_the_conversation_has_private_names_to_guard():
    names = private_names((ROOT / OWNER).read_text())
    assert {"_prune_chunks"} <= names


def test_no_module_reaches_into_the_conversation():
    assert accesses() == []


def test_the_conversations_parts_are_private():
    """Its parts are private attributes (read through properties), the writer included."""
    names = private_names((ROOT / OWNER).read_text())
    assert {"_writer", "_table", "_chunks", "_turns", "_held", "_recalls", "_system"} <= names


def test_no_module_reaches_into_the_store():
    """Storage's modules call the store's public methods, never ``_write_turn`` & co."""
    owner = Path("halo_weave/store.py")
    assert {"_write_turn", "_write_counters", "_streamed"} <= private_names((ROOT / owner).read_text(),
                                                                             GUARDED[owner])
    assert accesses(owner=owner) == []


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT
    for owner, cls in GUARDED.items():
        hits = accesses(root, owner)
        print("\n".join(hits))
        print(f"{len(hits)} accesses to {cls}'s private names from other modules")
    uses = bench_private_uses(root)
    print("\n".join(uses))
    print(f"{len(uses)} uses of private names in bench/")
    others = other_modules_private_uses(root)
    print("\n".join(others))
    print(f"{len(others)} uses of another module's private names in {', '.join(CHECKED)}/")
