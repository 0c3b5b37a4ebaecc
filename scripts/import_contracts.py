"""An import-linter contract type for submodules of an external package.

import-linter sees an external package as one node (``PySide6``), so its ``forbidden``
contract cannot forbid ``PySide6.QtWidgets`` alone.  :class:`ForbiddenSubmodulesContract`
reads the import statements behind each edge to the package instead.  Configured in
``pyproject.toml`` (``contract_types``); ``lint-imports`` runs it with the others.
"""

from __future__ import annotations

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output


class ForbiddenSubmodulesContract(Contract):
    """The modules in ``source_modules`` (and below) never import the submodules of an
    external package listed in ``forbidden_modules`` (e.g. ``PySide6.QtWidgets``).

    A ``from PySide6 import QtWidgets`` counts as importing ``PySide6.QtWidgets``.
    """

    source_modules = fields.ListField(subfield=fields.StringField())
    forbidden_modules = fields.ListField(subfield=fields.StringField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        found = []
        for source in self.source_modules:
            importers = {source} | graph.find_descendants(source)
            for importer in sorted(importers):
                for package in {name.split(".")[0] for name in self.forbidden_modules}:
                    for detail in graph.get_import_details(importer=importer, imported=package):
                        line = detail["line_contents"]
                        bad = [name for name in self.forbidden_modules if _imports(line, name)]
                        if bad:
                            found.append((importer, detail["line_number"], line, bad[0]))
        return ContractCheck(kept=not found, metadata={"found": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, line_number, line, name in check.metadata["found"]:
            output.print_error(f"{importer}:{line_number} imports {name}: {line}")
            output.new_line()


def _imports(line: str, module: str) -> bool:
    """Whether the import statement ``line`` imports ``module`` (``a.b``)."""
    words = line.replace(",", " ").split()
    package, _, name = module.rpartition(".")
    if words[:1] == ["import"]:
        return any(w == module or w.startswith(module + ".") for w in words[1:])
    if words[:1] == ["from"] and len(words) > 1:
        origin = words[1]
        if origin == module or origin.startswith(module + "."):
            return True
        return origin == package and name in words[3:]
    return False
