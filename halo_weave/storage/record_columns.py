"""The turn and chunk records read as columns, the way opening a conversation reads them.

One ``group_concat`` per column instead of a Python tuple per row (~20k chunk records per
1M tokens); :class:`~halo_weave.store.ConversationStore` turns them into a conversation.
``name`` (the file's name) is for error messages.
"""

from __future__ import annotations

import json
import sqlite3
from operator import itemgetter

import numpy as np

from ..core.registry import NO_VALUE, ROLE_CODE, ChunkColumns, TurnColumns
from ..errors import StoreError
from . import integrity


def turn_columns(conn: sqlite3.Connection, name: str, skip: "integrity.Skipped | None" = None) -> TurnColumns:
    """Every turn record, ascending (but those ``skip`` names: damaged)."""
    where, args = _not_in("turn_id", skip.turns if skip else ())
    codes = " ".join(f"WHEN '{role}' THEN {code}" for role, code in ROLE_CODE.items())
    count, ids, roles, complete = conn.execute(
        f"SELECT count(*), group_concat(turn_id), group_concat(CASE role {codes} ELSE -1 END), "
        f"group_concat(complete) FROM (SELECT * FROM turns WHERE {where} ORDER BY turn_id)", args,
    ).fetchone()
    if not count:
        return TurnColumns.empty()
    roles = _ints(roles).astype(np.int8)
    if (roles < 0).any():
        raise StoreError(f"{name} is damaged: a turn has an unknown role.")
    # REAL as text would lose digits: the times come as floats.
    created = conn.execute(f"SELECT created_at FROM turns WHERE {where} ORDER BY turn_id", args).fetchall()
    return TurnColumns(
        _ints(ids), roles, np.fromiter(map(itemgetter(0), created), np.float64, count),
        _ints(complete) != 0,
    )


def chunk_columns(conn: sqlite3.Connection, name: str, turns: TurnColumns,
                  skip: "integrity.Skipped | None" = None, check: dict | None = None) -> ChunkColumns:
    """Every chunk record, in position order (roles from their turns).

    ``skip`` (a damaged file, open read-only): chunks with damaged records or of damaged
    turns are left out, and those with damaged tokens are shown as pruned.  ``check``
    (a dict): its ``"agree"`` is set to whether the records' checksum total agrees.
    """
    where, args = _not_in("id", skip.chunks if skip else ())
    turn_where, turn_args = _not_in("turn_id", skip.turns if skip else ())
    live_where, live_args = _not_in("id", skip.tokens if skip else ())
    # The flags in one column; with ``check`` they come from the columns the checksum
    # reads anyway (the live, pinned and tool_result values: one column less to join).
    last = f", group_concat(((live != 0) AND {live_where}) + 2 * (pinned != 0) + 4 * (tool_result != 0))"
    if check is not None:
        if live_args:
            raise ValueError("a checked read leaves no chunk's tokens out")
        codes = " ".join(f"WHEN '{role}' THEN {code}" for role, code in ROLE_CODE.items())
        last = "".join(f", group_concat({c})" for c in integrity.CHUNK_CHECK_COLUMNS)
        last += f", group_concat(CASE role {codes} ELSE -1 END), sum({integrity.ALL_INTEGERS_SQL})"
    row = conn.execute(
        "SELECT count(*), group_concat(id), group_concat(turn_id), group_concat(chunk_index), "
        "group_concat(start), group_concat(token_count), "
        f"group_concat(ifnull(brightness_at_prune, {NO_VALUE})){last} "
        f"FROM chunks WHERE {where} AND {turn_where}",
        (*live_args, *args, *turn_args),
    ).fetchone()
    if check is not None:  # every summed column an integer (a chunk's types' term holds)
        check["agree"] = (row[11] or 0) == row[0]
        if not check["agree"]:  # the values may not even be numbers: the SQL check says
            return ChunkColumns.empty()
    if not row[0]:
        return ChunkColumns.empty()
    values = list(map(_ints, row[1:11] if check is not None else row[1:8]))
    if check is not None:
        names = ("id", "turn_id", "chunk_index", "start", "token_count", "brightness_at_prune",
                 *integrity.CHUNK_CHECK_COLUMNS, "role")
        check["agree"] = integrity.chunk_records_agree(
            conn, dict(zip(names, values)), list(ROLE_CODE), NO_VALUE)
        if not check["agree"]:
            return ChunkColumns.empty()
        live, pinned, tool_result = (v != 0 for v in values[6:9])
    else:
        flags = values[6]
        live, pinned, tool_result = (flags & 1) != 0, (flags & 2) != 0, (flags & 4) != 0
    ids, turn_ids, chunk_indices, starts, counts, at_prune = values[:6]
    at = np.minimum(turns.turn_id.searchsorted(turn_ids), len(turns) - 1)
    known = turns.turn_id[at] == turn_ids if len(turns) else np.zeros(len(ids), bool)
    if not known.all():
        missing = int(turn_ids[np.argmin(known)])
        raise StoreError(f"{name} is damaged: a chunk belongs to missing turn {missing}.")
    chunks = ChunkColumns(ids, turn_ids, chunk_indices, turns.role[at], starts, counts, live, pinned,
                          at_prune, tool_result)
    if not (np.diff(starts) > 0).all():  # SQLite does not promise the order
        chunks = chunks.take(np.argsort(starts, kind="stable"))
    return chunks

def live_token_rows(conn: sqlite3.Connection, chunks: ChunkColumns, read: list | None = None) -> list[tuple]:
    """The live chunks' token rows, in position order.

    ``read``: the rows the integrity checks read from the file as it still is
    (:func:`.integrity.shape_problems`' ``keep``), taken instead of reading them again.
    """
    if read is None:
        rows = conn.execute(
            "SELECT t.chunk_id, t.token_ids, t.brightness, t.text, t.text_lengths "
            "FROM chunks c JOIN chunk_tokens t ON t.chunk_id = c.id WHERE c.live = 1"
        ).fetchall()
    else:
        rows = [(chunk_id, *values) for chunk_id, live, *values in read if live == 1]
    order = chunks.id[chunks.live].tolist()
    if list(map(itemgetter(0), rows)) != order:  # read in id order: usually position order
        by_id = {row[0]: row for row in rows}
        rows = [by_id[c] for c in order if c in by_id]
    return rows


def _not_in(column: str, keys) -> tuple[str, tuple]:
    """``column NOT IN (keys)`` as SQL and its one parameter (``1`` when there are none)."""
    if not keys:
        return "1", ()
    return f"{column} NOT IN (SELECT value FROM json_each(?))", (json.dumps(sorted(keys, key=repr)),)


def _ints(text: str) -> np.ndarray:
    """A comma-joined list of integers (``group_concat``) as an int64 array."""
    return np.fromstring(text, np.int64, sep=",")
