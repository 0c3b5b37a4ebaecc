"""Every object owns its state: the controller and the window, read from their source.

* An attribute of a class is assigned in one file only (a class and the classes it
  inherits from in ``halo_weave`` count as one: a mixin that sets what another file's
  class also sets shares its state); this holds in the whole package.
* Nothing assigns another object's attribute (``other.attr = …``) except on an object
  built right there, in the same function (``x = Thing(); x.attr = …``).
* The turn controller is a small composition root (at most 3 bases, 40 members), and
  no collaborator in ``halo_weave/ui/control`` has more than 40 members.

Run as a script for the figures of the whole package (or of another checkout)::

    python tests/test_state_ownership.py [ROOT] [PATH_PREFIX ...]
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

from ast_targets import targets

ROOT = Path(__file__).resolve().parents[1]

#: The controller and the window: where these rules hold everywhere.
OWNED = ("halo_weave/app.py", "halo_weave/ui/")
#: Where each attribute is assigned in one file: the whole package.
ONE_FILE = ("halo_weave/",)

MAX_MEMBERS = 40
MAX_BASES = 3


def _trees(root: Path, under: tuple[str, ...] = ("halo_weave/",)) -> dict[str, ast.Module]:
    files = sorted((root / "halo_weave").rglob("*.py"))
    return {str(f.relative_to(root)): ast.parse(f.read_text(encoding="utf-8"))
            for f in files if str(f.relative_to(root)).startswith(under)}


def _on_self(target: ast.expr) -> bool:
    return isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"


def attributes_in_several_files(trees: dict[str, ast.Module]) -> dict[tuple[str, str], list[str]]:
    """``(class, attribute)`` -> the files assigning it, where more than one does.

    A class is the one defined in a file; two unrelated classes that share a name in
    different files are two classes.  A base is found by its name.
    """
    classes: dict[str, list[tuple[str, ast.ClassDef]]] = defaultdict(list)
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes[node.name].append((name, node))

    def family(name: str, node: ast.ClassDef, seen: set[int]) -> list[tuple[str, ast.ClassDef]]:
        if id(node) in seen:
            return []
        seen.add(id(node))
        out = [(name, node)]
        for base in node.bases:
            base_name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
            for base_file, base_node in classes.get(base_name, []):
                out.extend(family(base_file, base_node, seen))
        return out

    found = {}
    for cls, defined in classes.items():
        for name, node in defined:
            files: dict[str, set[str]] = defaultdict(set)
            for member_file, member in family(name, node, set()):
                for inner in ast.walk(member):
                    for target in targets(inner):
                        if _on_self(target):
                            files[target.attr].add(member_file)
            found.update({(cls, attr): sorted(f) for attr, f in files.items() if len(f) > 1})
    return found


def writes_to_other_objects(trees: dict[str, ast.Module]) -> list[tuple[str, int, str]]:
    """``(file, line, target)`` of every ``other.attr = …`` on an object not built in
    the same function."""
    found = set()
    for name, tree in trees.items():
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            built = {t.id for node in ast.walk(function) if isinstance(node, ast.Assign)
                     and isinstance(node.value, ast.Call) for t in targets(node) if isinstance(t, ast.Name)}
            for node in ast.walk(function):
                for target in targets(node):
                    if not isinstance(target, ast.Attribute):
                        continue
                    owner = target.value
                    if isinstance(owner, ast.Name) and (owner.id in ("self", "cls") or owner.id in built):
                        continue
                    found.add((name, node.lineno, ast.unparse(target)))
    return sorted(found)


def members(cls: ast.ClassDef) -> set[str]:
    """Methods, class attributes (signals too) and instance attributes of ``cls``."""
    names = set()
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        names.update(t.id for t in targets(node) if isinstance(t, ast.Name))
    for node in ast.walk(cls):
        names.update(t.attr for t in targets(node) if _on_self(t))
    return names


def _classes(trees: dict[str, ast.Module]):
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                yield name, node


def test_each_attribute_in_the_package_is_assigned_in_one_file():
    assert attributes_in_several_files(_trees(ROOT, ONE_FILE)) == {}


def test_the_controller_and_window_write_no_other_objects_attributes():
    assert writes_to_other_objects(_trees(ROOT, OWNED)) == []


def test_the_session_counts_a_new_turns_tokens_itself():
    """The controller starts a turn through the session, not by writing its counter."""
    assert not [w for w in writes_to_other_objects(_trees(ROOT, OWNED)) if w[2].endswith(".streamed")]


def test_the_controller_is_small_and_so_is_each_collaborator():
    trees = _trees(ROOT, ("halo_weave/app.py", "halo_weave/ui/control/"))
    sizes = {f"{name}:{cls.name}": (len(members(cls)), len(cls.bases)) for name, cls in _classes(trees)}
    controller = sizes["halo_weave/app.py:TurnController"]
    assert controller[0] <= MAX_MEMBERS and controller[1] <= MAX_BASES
    assert {k: v for k, v in sizes.items() if v[0] > MAX_MEMBERS or v[1] > MAX_BASES} == {}


def test_the_checks_see_shared_and_foreign_writes():
    """The rules catch what they are for: a mixin's second writer, a foreign write."""
    sample = ast.parse(
        "class Part:\n    def go(self, other):\n        self.x = 1\n        other.y = 2\n"
        "        made = Thing()\n        made.z = 3\n"
    )
    whole = ast.parse("class Whole(Part):\n    def __init__(self):\n        self.x = 0\n")
    namesake = ast.parse("class Part:\n    def __init__(self):\n        self.x = 5\n")
    trees = {"a.py": sample, "b.py": whole}
    assert attributes_in_several_files(trees) == {("Whole", "x"): ["a.py", "b.py"]}
    assert attributes_in_several_files({"a.py": sample, "c.py": namesake}) == {}, "two classes, one name"
    assert writes_to_other_objects(trees) == [("a.py", 4, "other.y")]


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT
    under = tuple(sys.argv[2:]) or ("halo_weave/",)
    trees = _trees(root, under)
    several, writes = attributes_in_several_files(trees), writes_to_other_objects(trees)
    for (cls, attr), files in sorted(several.items()):
        print(f"several files: {cls}.{attr}: {', '.join(files)}")
    for name, line, target in writes:
        print(f"foreign write: {name}:{line}: {target}")
    largest = sorted(((len(members(c)), len(c.bases), f"{n}:{c.name}") for n, c in _classes(trees)), reverse=True)[:5]
    print(f"attributes assigned in several files: {len(several)}; writes to other objects' attributes: {len(writes)}")
    print("largest classes (members, bases):", "; ".join(f"{k} {m}, {b}" for m, b, k in largest))
