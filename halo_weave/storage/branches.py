"""Branches, the file's part: edit or regenerate any earlier message and keep what it
replaced.  The session's part is :mod:`halo_weave.session.branches`, the export's
:mod:`.branches_transfer`, the window's :mod:`halo_weave.ui.branch_marks`
(docs/architecture.md, "Branches").

A **branch point** is a turn, the *parent*, after which two or more tails exist: the
tail shown (the turns after the parent in ``turns``) and the **stashed** ones, each one
row of the ``branches`` table (m009).  Making a branch (editing an earlier message,
regenerating an earlier answer) stashes the tail from that message on and begins a new
one; switching swaps the shown tail with a stashed one.  Each is one transaction, so a
file killed at any moment holds either the old tail or the new one, never a mixture.

A stashed tail is the rows of its turns as the tables held them: ``turns``, ``chunks``,
``chunk_tokens``, ``semantic_entries`` (vectors included, so showing it again needs no
embedding), ``recalls``, the ``answer_versions`` of its questions and the ``branches``
rows whose parent lies inside it (branch points nested in the tail travel with it).
Because the rows leave the tables, everything that reads the conversation (pruning,
the graveyard, the semantic index and its search, the stats, opening) sees only the
branch shown, without a filter of its own.  A tail also records the state the earlier
turns had when it was stashed (which chunks were live or pinned, brightness, recall
marks): what the new branch prunes or brightens there is put back when the old branch
is shown again.

Turn, chunk and position ids come from the file's counters, which never go back, so a
stashed tail's ids can never meet another branch's; a tail's own ids are ascending, and
siblings are ordered by their first turn id (the order they were made in).  Row ids of
``recalls``, ``answer_versions`` and ``branches`` are not kept: a restored row gets a
new one.

The tail is zlib-compressed JSON: ``{"tables": {name: {"columns": [...], "rows":
[[...]]}}, "prefix": {...}}`` with BLOB values as ``{"$b": base64}``.  The ``branches``
row carries a checksum like the conversation tables (:mod:`.integrity`); it is checked
when the tail is read back, and the restored chunks' BLOBs are checked against their
token counts before the switch commits.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import time
import zlib
from dataclasses import dataclass
from typing import Any

from ..core import token_resurrection
from ..conversation import Chunk, Conversation, Turn
from ..errors import ConversationError, StoreDamaged
from . import integrity
from .handle import StoreHandle
from .schema import unpack_ints
from .sql import batches

#: Parent of a tail that starts at the first message.
START = -1

#: Tables a tail's rows come from, in the order they are restored (parents first), and
#: the row id column a restored row does not keep.
_TAIL_TABLES = ("turns", "chunks", "chunk_tokens", "semantic_entries", "recalls", "answer_versions", "branches")
_FRESH_ID = {"recalls": "id", "answer_versions": "id", "branches": "id"}


class BranchError(ConversationError):
    """A branch cannot be made or shown now (``str`` is meant for the user)."""


@dataclass(frozen=True)
class StashedBranch:
    """One stashed tail (not shown now): where it branches off and how it begins."""

    id: int
    parent_turn_id: int
    first_turn_id: int
    created_at: float


@dataclass(frozen=True)
class BranchState:
    """Where the tail shown after a branch point stands among its siblings ("2 of 3")."""

    parent_turn_id: int
    first_turn_id: int  # the first turn shown after the parent
    number: int
    count: int
    previous: StashedBranch | None
    next: StashedBranch | None


# ---------------------------------------------------------------------- blob codec
def _encode_value(value: Any) -> Any:
    return {"$b": base64.b64encode(value).decode("ascii")} if isinstance(value, bytes) else value


def _decode_value(value: Any) -> Any:
    if isinstance(value, dict):
        return base64.b64decode(value["$b"], validate=True)
    return value


def pack_tail(tail: dict) -> bytes:
    """A tail document (see the module docstring) as stored."""
    return zlib.compress(json.dumps(tail, separators=(",", ":")).encode("utf-8"), 6)


def unpack_tail(blob: bytes) -> dict:
    """The inverse of :func:`pack_tail`."""
    return json.loads(zlib.decompress(blob).decode("utf-8"))


# ---------------------------------------------------------------------- reading
def stashed(store: StoreHandle, parent_turn_id: int | None = None) -> list[StashedBranch]:
    """Stashed tails (of one parent, or all), in the order they were made."""
    where, args = ("WHERE parent_turn_id = ?", (parent_turn_id,)) if parent_turn_id is not None else ("", ())
    return [StashedBranch(*row) for row in store.conn.execute(
        f"SELECT id, parent_turn_id, first_turn_id, created_at FROM branches {where} "
        "ORDER BY parent_turn_id, first_turn_id", args)]


def parent_of(conv: Conversation, turn_id: int) -> int:
    """The turn before ``turn_id`` in the conversation shown (:data:`START` for the first)."""
    before = START
    for tid in conv.turns:
        if tid >= turn_id:
            break
        before = tid
    return before


def states(conv: Conversation, store: StoreHandle) -> dict[int, BranchState]:
    """Every branch point of the conversation shown, by the first turn shown after it (or
    the id the next turn will take, when the conversation ends at the branch point)."""
    ids = list(conv.turns)
    out: dict[int, BranchState] = {}
    by_parent: dict[int, list[StashedBranch]] = {}
    for branch in stashed(store):
        by_parent.setdefault(branch.parent_turn_id, []).append(branch)
    for parent, siblings in by_parent.items():
        first = next((t for t in ids if t > parent), None)
        if first is None:
            # The new tail is still to come (an earlier answer being regenerated): its
            # first turn will take the next id.  (A crash here: opening shows the newest
            # stashed tail again, see show_orphaned.)
            first = conv.next_turn_id
        earlier = [b for b in siblings if b.first_turn_id < first]
        later = [b for b in siblings if b.first_turn_id > first]
        out[first] = BranchState(parent, first, len(earlier) + 1, len(siblings) + 1,
                                 earlier[-1] if earlier else None, later[0] if later else None)
    return out


def tail_turn_signatures(store: StoreHandle) -> dict[int, tuple[str, int, int]]:
    """Every stashed turn, nested ones included: turn id -> (role, token count, sum of
    token ids of its content).  For checks (the crash test) and diagnostics."""
    out: dict[int, tuple[str, int, int]] = {}

    def walk(tail: dict) -> None:
        tables = tail["tables"]
        roles = {row[0]: row[1] for row in _rows(tables, "turns", ("turn_id", "role"))}
        content = {cid: tid for cid, tid, index in _rows(tables, "chunks", ("id", "turn_id", "chunk_index"))
                   if index >= 0}
        for turn_id, role in roles.items():
            out[turn_id] = (role, 0, 0)
        for chunk_id, blob in _rows(tables, "chunk_tokens", ("chunk_id", "token_ids")):
            if chunk_id in content:
                turn_id = content[chunk_id]
                ids = unpack_ints(blob)
                role, count, total = out[turn_id]
                out[turn_id] = (role, count + len(ids), total + int(ids.sum()))
        for (blob,) in _rows(tables, "branches", ("tail",)):
            walk(unpack_tail(blob))

    for (blob,) in store.conn.execute("SELECT tail FROM branches"):
        walk(unpack_tail(blob))
    return out


@dataclass(frozen=True)
class StashedSummary:
    """What the conversation list counts of the stashed tails (read from a connection)."""

    #: Turns in every stashed tail, nested ones included.
    turns: int
    #: Stashed tails, nested ones included (the conversation has this many branches more
    #: than the one shown).
    tails: int
    #: (turn id, text) of the first user message of each tail stashed at :data:`START`
    #: (the first message, edited: its earlier wordings).
    first_messages: tuple[tuple[int, str], ...]


def stashed_summary(conn) -> StashedSummary:
    """Count the stashed tails' turns and find their opening user messages, so the list
    can show a conversation the same whichever branch is shown.  ``conn`` may be
    read-only; a file from before branches were kept has none."""
    turns = tails = 0
    firsts: list[tuple[int, str]] = []

    def walk(tail: dict, parent: int) -> None:
        nonlocal turns, tails
        tables = tail["tables"]
        tails += 1
        turns += len(_rows(tables, "turns", ("turn_id",)))
        if parent == START:
            user = sorted((start, cid, tid) for cid, tid, index, role, start in
                          _rows(tables, "chunks", ("id", "turn_id", "chunk_index", "role", "start"))
                          if index >= 0 and role == "user")
            if user:
                texts = dict(_rows(tables, "chunk_tokens", ("chunk_id", "text")))
                first_turn = user[0][2]
                firsts.append((first_turn, "".join(texts.get(cid, "") for _, cid, tid in user if tid == first_turn)))
        for nested_parent, blob in _rows(tables, "branches", ("parent_turn_id", "tail")):
            walk(unpack_tail(blob), nested_parent)

    try:
        rows = conn.execute("SELECT parent_turn_id, tail FROM branches").fetchall()
    except sqlite3.OperationalError:  # no branches table: written before they were kept
        return StashedSummary(0, 0, ())
    for parent, blob in rows:
        walk(unpack_tail(blob), parent)
    return StashedSummary(turns, tails, tuple(firsts))


def _rows(tables: dict, name: str, columns: tuple[str, ...]) -> list[tuple]:
    table = tables.get(name)
    if not table:
        return []
    where = [table["columns"].index(c) for c in columns]
    return [tuple(_decode_value(row[i]) for i in where) for row in table["rows"]]


# ---------------------------------------------------------------------- stashing
def _select(conn, table: str, where: str, args: tuple) -> dict:
    cursor = conn.execute(f"SELECT * FROM {table} WHERE {where}", args)
    columns = [d[0] for d in cursor.description]
    fresh = _FRESH_ID.get(table)
    keep = [i for i, c in enumerate(columns) if c != fresh]
    return {"columns": [columns[i] for i in keep],
            "rows": [[_encode_value(row[i]) for i in keep] for row in cursor]}


def _tail_rows(conn, parent: int, answer_first: bool) -> dict:
    """The rows of every turn after ``parent`` (see the module docstring)."""
    in_tail = "chunk_id IN (SELECT id FROM chunks WHERE turn_id > ?)"
    # An answer's versions are kept by its question's id: when the tail starts with the
    # answer, the versions of the parent (its question) belong to the tail too.
    versions_from = parent if answer_first else parent + 1
    return {
        "turns": _select(conn, "turns", "turn_id > ?", (parent,)),
        "chunks": _select(conn, "chunks", "turn_id > ?", (parent,)),
        "chunk_tokens": _select(conn, "chunk_tokens", in_tail, (parent,)),
        "semantic_entries": _select(conn, "semantic_entries", "turn_id > ?", (parent,)),
        "recalls": _select(conn, "recalls", "turn_id > ?", (parent,)),
        "answer_versions": _select(conn, "answer_versions", "user_turn_id >= ?", (versions_from,)),
        "branches": _select(conn, "branches", "parent_turn_id > ?", (parent,)),
    }


def _prefix_state(conn, parent: int) -> dict:
    """What later turns can change about the turns up to ``parent``: chunk states,
    brightness, recall marks.  Brightness of pruned chunks too: a later turn may bring
    one back, score it and prune it again."""
    chunks = conn.execute(
        "SELECT id, live, pinned, brightness_at_prune FROM chunks WHERE turn_id <= ?", (parent,)).fetchall()
    brightness = conn.execute(
        "SELECT t.chunk_id, t.brightness FROM chunk_tokens t JOIN chunks c ON c.id = t.chunk_id "
        "WHERE c.turn_id <= ? AND NOT (c.chunk_index < 0)", (parent,)).fetchall()
    marks = conn.execute("SELECT turn_id, chunk_id, live FROM recalls WHERE turn_id <= ?", (parent,)).fetchall()
    return {"chunks": [list(r) for r in chunks],
            "brightness": [[c, _encode_value(b)] for c, b in brightness],
            "recalls": [list(r) for r in marks]}


def _delete_tail(conn, parent: int, answer_first: bool) -> None:
    versions_from = parent if answer_first else parent + 1
    conn.execute("DELETE FROM semantic_entries WHERE turn_id > ?", (parent,))
    conn.execute("DELETE FROM chunk_tokens WHERE chunk_id IN (SELECT id FROM chunks WHERE turn_id > ?)", (parent,))
    conn.execute("DELETE FROM chunks WHERE turn_id > ?", (parent,))
    conn.execute("DELETE FROM recalls WHERE turn_id > ?", (parent,))
    conn.execute("DELETE FROM answer_versions WHERE user_turn_id >= ?", (versions_from,))
    conn.execute("DELETE FROM branches WHERE parent_turn_id > ?", (parent,))
    conn.execute("DELETE FROM turns WHERE turn_id > ?", (parent,))


def _stash(store: StoreHandle, parent: int) -> list[int]:
    """Move the tail after ``parent`` into a new ``branches`` row (inside a transaction).

    Returns the ids of the chunks that left the tables; nothing when there is no tail.
    """
    conn = store.conn
    first = conn.execute("SELECT turn_id, role, created_at FROM turns WHERE turn_id > ? ORDER BY turn_id LIMIT 1",
                         (parent,)).fetchone()
    if first is None:
        return []
    answer_first = first[1] == "assistant"
    tail = {"tables": _tail_rows(conn, parent, answer_first), "prefix": _prefix_state(conn, parent),
            "answer_first": answer_first}
    conn.execute("INSERT INTO branches (parent_turn_id, first_turn_id, created_at, tail) VALUES (?, ?, ?, ?)",
                 (parent, first[0], first[2], pack_tail(tail)))
    gone = [c for (c,) in conn.execute("SELECT id FROM chunks WHERE turn_id > ?", (parent,))]
    _delete_tail(conn, parent, answer_first)
    return gone


def _restore(store: StoreHandle, branch_id: int) -> list[int]:
    """Put a stashed tail back into the tables and its row away (inside a transaction).

    Returns the restored chunk ids.  Raises :class:`StoreDamaged` when the row fails its
    checksum or a restored chunk's BLOBs disagree with its token count.
    """
    conn = store.conn
    damage = integrity.verify_row(conn, "branches", branch_id)
    row = conn.execute("SELECT tail FROM branches WHERE id = ?", (branch_id,)).fetchone()
    if damage or row is None:
        raise StoreDamaged(f"The stashed branch {branch_id} of {store.path.name} is damaged; "
                           "it was left as it is and the branch shown was kept.")
    tail = unpack_tail(row[0])
    conn.execute("DELETE FROM branches WHERE id = ?", (branch_id,))
    for name in _TAIL_TABLES:
        table = tail["tables"].get(name)
        if not table or not table["rows"]:
            continue
        columns = table["columns"]
        conn.executemany(
            f"INSERT INTO {name} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
            [[_decode_value(v) for v in row] for row in table["rows"]])
    _apply_prefix(conn, tail.get("prefix", {}))
    restored = [row[0] for row in _rows(tail["tables"], "chunks", ("id",))]
    problems = [p for batch in batches(restored)
                for p in integrity.shape_problems(conn, f"AND c.id IN ({','.join('?' * len(batch))})", batch)]
    if problems:
        raise StoreDamaged(f"The stashed branch {branch_id} of {store.path.name} is damaged "
                           f"({problems[0].describe()}); the branch shown was kept.")
    return restored


def _apply_prefix(conn, prefix: dict) -> None:
    """Put back the earlier turns' state a tail was stashed with, where it still fits
    (a chunk merged since keeps its present state)."""
    counts = dict(conn.execute("SELECT id, token_count FROM chunks"))
    conn.executemany(
        "UPDATE chunks SET live = ?, pinned = ?, brightness_at_prune = ? WHERE id = ? "
        "AND (live != ? OR pinned != ? OR brightness_at_prune IS NOT ?)",
        [(live, pinned, at_prune, cid, live, pinned, at_prune)
         for cid, live, pinned, at_prune in prefix.get("chunks", []) if cid in counts])
    conn.executemany(
        "UPDATE chunk_tokens SET brightness = ? WHERE chunk_id = ? AND brightness != ?",
        [(blob, cid, blob) for cid, blob in ((c, _decode_value(b)) for c, b in prefix.get("brightness", []))
         if cid in counts and len(blob) == 4 * counts[cid]])
    conn.executemany("UPDATE recalls SET live = ? WHERE turn_id = ? AND chunk_id = ? AND live != ?",
                     [(live, tid, cid, live) for tid, cid, live in prefix.get("recalls", [])])


def show_orphaned(store: StoreHandle) -> bool:
    """When the conversation ends with a branch point and no tail (a regenerate of an
    earlier answer killed before its first token was saved), show the newest stashed
    tail there again, so no branch is left out of reach.  True when one was shown."""
    if store.read_only or not integrity.has_table(store.conn, "branches"):
        return False
    last = store.conn.execute("SELECT MAX(turn_id) FROM turns").fetchone()[0]
    row = store.conn.execute(
        "SELECT id FROM branches WHERE parent_turn_id = ? ORDER BY first_turn_id DESC LIMIT 1",
        (START if last is None else last,)).fetchone()
    if row is None:
        return False
    try:
        with store.transaction():
            _restore(store, row[0])
    except StoreDamaged:
        return False  # it stays stashed (and exported); the conversation opens as it is
    return True


# ---------------------------------------------------------------------- changing
def _check_closed(conv: Conversation) -> None:
    if conv.open_turn is not None:
        raise BranchError("Wait for the answer to finish before changing an earlier message.")


def branch_at(conv: Conversation, store: StoreHandle, turn_id: int) -> list[Chunk]:
    """Stash the tail from ``turn_id`` on (file, then memory); a new tail may begin.

    Joins the caller's transaction when there is one (the new message is then saved in
    the same commit).  Returns the chunks that left the conversation (their index
    vectors left the file's table with them).
    """
    _check_closed(conv)
    if turn_id not in conv.turns:
        raise BranchError("That message is not in the conversation shown.")
    parent = parent_of(conv, turn_id)
    with store.transaction():
        _stash(store, parent)
        store.set_meta("updated_at", time.time())
    return conv.remove_turns_from(turn_id)


def reopen_before(conv: Conversation, turn_id: int, room_for: int = 0) -> list[Chunk]:
    """Bring back the pruned paragraphs just before ``turn_id``, newest first, while they
    fit the context target (``prune_hysteresis`` of ``max_context_tokens``) with
    ``room_for`` more tokens: a new branch then starts from the conversation as it led up
    to that message, not from what later turns left of it.  Returns the chunks that came
    back (save them); nothing without a target."""
    s = conv.settings
    if s.pruning.max_context_tokens <= 0:
        return []
    room = int(s.pruning.max_context_tokens * s.pruning.prune_hysteresis) - conv.live_token_count() - room_for
    back: list[Chunk] = []
    for chunk in conv.graveyard():
        if room <= 0:
            break
        if chunk.turn_id >= turn_id or chunk.live:
            continue  # later (gone) or already back with an anchor
        cost = token_resurrection.cost(conv, chunk)
        if cost > room:
            break  # what is older than a paragraph that does not fit stays pruned
        came = conv.resurrect([chunk.id])
        back += came
        room -= sum(c.token_count for c in came)
    return back


def edit_message(conv: Conversation, store: StoreHandle, turn_id: int, token_ids, texts) -> tuple[Turn, list[Chunk]]:
    """A new branch from an earlier message of the user: the message and everything after
    it are stashed, the paragraphs that led up to it come back where they fit
    (:func:`reopen_before`), and the new wording is saved (one transaction, DB-first).

    Returns the new user turn and the chunks that left the conversation.
    """
    if turn_id in conv.turns and conv.turns[turn_id].role != "user":
        raise BranchError("Only your own messages can be edited; regenerate an answer instead.")
    snapshot = conv.snapshot()
    try:
        with store.transaction():
            removed = branch_at(conv, store, turn_id)
            store.save_chunks(conv, reopen_before(conv, turn_id, len(token_ids)))
            turn = conv.add_turn("user", token_ids, texts)
            store.save_turn(conv, turn)
    except BaseException:
        conv.restore(snapshot)
        raise
    return turn, removed


def retire_answer(conv: Conversation, store: StoreHandle, turn_id: int) -> list[Chunk]:
    """Regenerate an earlier answer: the answer and everything after it are stashed and
    what led up to it comes back where it fits (one transaction); the conversation then
    ends with its question, ready for a new answer."""
    if turn_id not in conv.turns or conv.turns[turn_id].role != "assistant":
        raise BranchError("Only an answer can be regenerated.")
    snapshot = conv.snapshot()
    try:
        with store.transaction():
            removed = branch_at(conv, store, turn_id)
            store.save_chunks(conv, reopen_before(conv, turn_id))
        return removed
    except BaseException:
        conv.restore(snapshot)
        raise


def switch(store: StoreHandle, branch: StashedBranch) -> tuple[list[int], list[int]]:
    """Show ``branch``: the tail shown after its parent is stashed and ``branch``'s tail
    restored, in one transaction.  Returns (chunk ids that left, chunk ids that came back);
    the caller reads the conversation again (:meth:`~halo_weave.store.ConversationStore.load`).
    """
    with store.transaction():
        gone = _stash(store, branch.parent_turn_id)
        back = _restore(store, branch.id)
        store.set_meta("updated_at", time.time())
    return gone, back
