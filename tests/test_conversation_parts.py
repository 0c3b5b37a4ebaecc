"""Only the conversation writes its state: nothing reaches through one of its parts.

A :class:`~halo_weave.conversation.Conversation` keeps its state in parts (the token
table, the chunk and turn registries, the held texts, the recalls, the system prompt, the
open turn's writer, ...); others read them through its properties and change them only
through its methods (``begin_turn``, ``append_token``, ``record_recall``,
``set_system_prompt``, ``from_records``, ...).  Read from the source of every module of
the package, the benchmarks and the scripts (``conversation.py`` and the ``core`` modules
it is built from excepted), this fails on

* an assignment, augmented assignment or ``del`` whose target reaches through a part:
  ``conv.table.brightness[:] = …``, ``conv.chunks[i] = …``, ``conv.chunks[i].live = …``,
  or that replaces a part: ``conv.framing = …``;
* a call of a mutating method through a part: ``conv.recalls.put(…)``,
  ``session.conv.held.forget(…)``, ``conv.system.set(…)``;
* a call of one of ``core``'s writing helpers (which take the conversation and change its
  parts for it): ``recall.record(conv, …)``, ``table_from_records.add_chunk(…)``, ...

A conversation is recognised by name: an expression ending in ``conv`` or
``conversation`` (``conv``, ``self.conv``, ``session.conv``, ``new_conv``).

Run as a script (``python tests/test_conversation_parts.py [ROOT]``) it prints the writes.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from ast_targets import targets

ROOT = Path(__file__).resolve().parents[1]
#: Where the rule holds: every module of these folders ...
CHECKED = ("halo_weave", "bench", "scripts")
#: ... but the conversation itself and the modules it is built from.
OWNERS = ("halo_weave/conversation.py", "halo_weave/core/")

#: The conversation's parts (each assigned once, in ``Conversation.__init__``).
PARTS = frozenset({"settings", "framing", "chunks", "turns", "table", "system", "role_names",
                   "held", "chunk_loader", "recalls", "writer", "_writer"})
#: Methods of the parts (and of ``dict``/``list``) that change them.
MUTATING = frozenset({
    "append_rows", "append_chunks", "append_one", "insert_rows", "keep", "restore", "load", "clear",
    "start", "append", "put", "put_many", "join", "forget", "keep_pruned", "revive", "drop_pruned",
    "set", "begin", "end", "resume", "reopen_answer", "break_chunk", "take_counters",
    "pop", "popitem", "update", "setdefault", "remove", "extend", "insert", "sort", "fill",
    "__setitem__", "__delitem__",
})
#: ``core``'s helpers that change a conversation handed to them: only the conversation
#: calls them (its methods with the same job are the way in).
WRITING_HELPERS = frozenset({
    ("recall", "record"), ("recall", "move"), ("recall", "merged"), ("recall", "take_stored"),
    ("table_from_records", "add_chunk"), ("table_from_records", "take_records"),
    ("token_resurrection", "put_back"), ("pruning", "take_out"), ("merging", "merge_with_next"),
})


def _is_conversation(node: ast.expr) -> bool:
    name = ast.unparse(node).rsplit(".", 1)[-1].lstrip("_")
    return name.endswith(("conv", "conversation"))


def _through_part(node: ast.expr) -> bool:
    """Whether ``node`` (an attribute or subscript chain) passes through ``<conv>.<part>``."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute) and node.attr in PARTS and _is_conversation(node.value):
            return True
        node = node.value
    return False


def writes_through_parts(source: str) -> list[tuple[int, str]]:
    """(line, code) of every write through a conversation's part in ``source``."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        for target in targets(node, deletes=True):
            if isinstance(target, (ast.Attribute, ast.Subscript)) and _through_part(target):
                found.add((node.lineno, ast.unparse(target)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func = node.func
            if func.attr in MUTATING and _through_part(func.value):
                found.add((node.lineno, ast.unparse(func)))
            elif isinstance(func.value, ast.Attribute) and func.value.attr in ("writer", "_writer"):
                found.add((node.lineno, ast.unparse(func)))
            elif (isinstance(func.value, ast.Name) and (func.value.id, func.attr) in WRITING_HELPERS):
                found.add((node.lineno, ast.unparse(func)))
    return sorted(found)


def all_writes_through_parts(root: Path = ROOT) -> list[str]:
    """``path:line: code`` of every write through a part outside the conversation."""
    found = []
    for folder in CHECKED:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(OWNERS):
                continue
            found += [f"{rel}:{line}: {code}" for line, code in writes_through_parts(path.read_text())]
    return found


def test_the_check_sees_every_kind_of_write_through_a_part():
    source = (
        "conv.table.brightness[:] = 5\n"          # 1: a part's column
        "conv.chunks[3] = chunk\n"                 # 2: a registry entry
        "self.conv.chunks[3].live = False\n"       # 3: a field of a part's record
        "conv.framing = framing\n"                 # 4: a part replaced
        "conv.recalls.put(1, [2])\n"               # 5: a mutating method
        "session.conv.writer.end()\n"              # 6: the writer, whatever the method
        "recall.record(conv, 1, [2])\n"            # 7: a core helper that writes
        "del conv.chunks[3]\n"                     # 8
        "conv.table.token_id.sum()\n"              # reads are fine
        "conv.recalls.of(1)\n"
        "conv.begin_turn('user')\n"                # the conversation's own methods
        "conv.record_recall(1, [2])\n"
        "settings.pruning.table = 3\n"             # not a conversation
        "x = conv.chunks[3]\n"
    )
    assert [line for line, _ in writes_through_parts(source)] == [1, 2, 3, 4, 5, 6, 7, 8]


def test_nothing_outside_the_conversation_writes_through_its_parts():
    assert all_writes_through_parts() == []


def test_the_writer_is_the_conversations_own():
    """No part is reached as ``conv.writer`` at all: the open turn is read as ``open_turn``."""
    from halo_weave.conversation import Conversation

    assert not hasattr(Conversation(), "writer")


if __name__ == "__main__":
    hits = all_writes_through_parts(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
    print("\n".join(hits))
    print(f"{len(hits)} writes through a conversation's parts outside it")
