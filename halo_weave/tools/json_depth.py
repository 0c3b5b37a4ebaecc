"""How deeply a JSON value nests, found without recursion.

Python code that walks JSON recursively (validation, diffs, ``json.dumps`` itself)
raises RecursionError on values nested a few hundred levels deep: a jq program
writing 600-deep notes crashed ``ToolRunner.run`` that way.  Callers check
:func:`too_deep` first and refuse the value with words instead.
"""

from __future__ import annotations

from typing import Any

#: Deepest nesting the notes (and other JSON documents kept by the app) may have.
MAX_DEPTH = 64


def depth(value: Any, stop_after: int | None = None) -> int:
    """Levels of list/dict nesting in ``value`` (a scalar is 0); stops counting past ``stop_after``."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        level += 1
        deepest = max(deepest, level)
        if stop_after is not None and deepest > stop_after:
            return deepest
        stack.extend((child, level) for child in children)
    return deepest


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True when ``value`` nests more than ``limit`` levels."""
    return depth(value, stop_after=limit) > limit
