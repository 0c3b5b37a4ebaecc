"""What a statement writes, for the tests that scan the source for writes (no pytest here)."""

from __future__ import annotations

import ast


def targets(node: ast.AST, deletes: bool = False) -> list[ast.expr]:
    """The targets ``node`` assigns (and deletes, with ``deletes``), tuples unpacked."""
    if isinstance(node, ast.Assign) or (deletes and isinstance(node, ast.Delete)):
        found = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        found = [node.target]
    else:
        return []
    out: list[ast.expr] = []
    for target in found:
        out.extend(target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target])
    return out
