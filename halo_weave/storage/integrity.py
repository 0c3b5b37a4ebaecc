"""Checksums over the stored conversation, so that damage is noticed instead of shown.

SQLite's ``integrity_check`` sees damage to its own structure, not to the values inside
a row: a flipped bit in a chunk's token-lengths BLOB opened without error and showed
altered text (34 of 60 single-bit flips, in the hostile-input suite).  So every row of the tables that
hold the conversation (``chunk_tokens``, ``chunks``, ``turns``, ``meta``, ``tool_data``,
``recalls``, ``branches``) has a CRC-32 in ``row_checksums``, kept by triggers that call
:func:`row_sum` (registered on every connection
:class:`~halo_weave.store.ConversationStore` opens, so every writer keeps them, and a
program writing the file without it fails instead of leaving stale sums).
``semantic_entries`` is left out: it is an index, rebuilt from the chunks.

Reading verifies what is read: opening checks every row of the small tables and the live
chunks' tokens; a pruned chunk's tokens are checked when they are read back (resurrection,
graveyard preview).  :func:`.files.check_file` checks everything (``halo-weave --check FILE``).
Besides the sums, each chunk's BLOBs must agree in length with its ``token_count`` and
its text with its lengths.
"""

from __future__ import annotations

import re
import sqlite3
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

#: Function name the triggers call.
SUM_FUNCTION = "halo_row_sum"

#: Checked table -> (key column, value columns).
CHECKED: dict[str, tuple[str, tuple[str, ...]]] = {
    "chunk_tokens": ("chunk_id", ("token_ids", "brightness", "text", "text_lengths")),
    "chunks": ("id", ("turn_id", "chunk_index", "role", "start", "token_count", "live", "pinned",
                      "brightness_at_prune", "tool_result")),
    "turns": ("turn_id", ("role", "created_at", "complete")),
    "meta": ("key", ("value",)),
    "tool_data": ("name", ("json",)),
    "recalls": ("id", ("turn_id", "chunk_id", "live")),
    "branches": ("id", ("parent_turn_id", "first_turn_id", "created_at", "tail")),
}

#: The tables m004 gave checksums; later migrations add theirs with :func:`checksum_sql`.
FIRST_CHECKED = ("chunk_tokens", "chunks", "turns", "meta", "tool_data")


def row_sum(table: str, *values) -> int:
    """CRC-32 of a row's values, each with its length, in order (see :func:`_sum_sql`)."""
    crc = zlib.crc32(table.encode())
    for value in values:
        data = value if type(value) is bytes else repr(value).encode("utf-8", "surrogatepass")
        crc = zlib.crc32(data, zlib.crc32(b"%d:" % len(data), crc))
    return crc


def register(conn: sqlite3.Connection) -> None:
    """Make :func:`row_sum` callable from SQL on ``conn`` (needed by the triggers)."""
    conn.create_function(SUM_FUNCTION, -1, row_sum, deterministic=True)


#: BLOB columns, handed to the function as they are.  Every other column goes in one
#: comma-joined BLOB per row (NULL as ''; integers and reals in SQLite's text form, so 1
#: and 1.0 differ): a BLOB cannot fail to decode (SQLite hands damaged, non-UTF-8 text
#: to a Python function as an error), and one argument costs less per call than nine
#: (opening verifies every chunk record: ~20k per 1M tokens).
BLOB_COLUMNS = frozenset({"token_ids", "brightness", "text_lengths", "tail"})

def _scalars_sql(table: str, ref: str) -> str:
    _, columns = CHECKED[table]
    return " || ',' || ".join(f"ifnull({ref}.{c}, '')" for c in columns if c not in BLOB_COLUMNS)


#: The record tables opening reads in full (~20k chunks and ~5k turns per 1M tokens) are
#: summed in SQL arithmetic instead of CRC-32 in Python: a polynomial in the columns modulo
#: a prime, so a change of any one integer column by any amount below the prime (every
#: single bit flip of a value) changes the sum, and opening compares one total per table
#: (locating the damaged rows only when the totals differ).  Roles are summed by length
#: and by which known role they are; reals by milliseconds; types by their names' length.
_PRIME = 2147483629
_ARITH_TERMS: dict[str, tuple[str, ...]] = {
    "chunks": ("id", "turn_id", "chunk_index", "start", "token_count", "live", "pinned",
               "ifnull(brightness_at_prune, -7777777)", "tool_result", "length(role)",
               "instr(role, 'user') + 2 * instr(role, 'assistant')",
               "length(typeof(id) || typeof(turn_id) || typeof(chunk_index) || typeof(start) || "
               "typeof(token_count) || typeof(live) || typeof(pinned) || typeof(tool_result))"),
    "turns": ("turn_id", "complete", "CAST(round(created_at * 1000) AS INTEGER)", "length(role)",
              "instr(role, 'user') + 2 * instr(role, 'assistant')",
              "length(typeof(turn_id) || typeof(complete) || typeof(created_at))"),
    "recalls": ("id", "turn_id", "chunk_id", "live",
                "length(typeof(id) || typeof(turn_id) || typeof(chunk_id) || typeof(live))"),
}


def _arith_sql(table: str, ref: str) -> str:
    expr = "0"
    for term in _ARITH_TERMS[table]:
        term = re.sub(r"\b(id|turn_id|chunk_index|chunk_id|start|token_count|live|pinned|brightness_at_prune|"
                      r"tool_result|role|complete|created_at)\b(?!')", rf"{ref}.\1", term)
        expr = f"(({expr}) * 1000003 + ({term}) % {_PRIME}) % {_PRIME}"
    return expr


def _sum_sql(table: str, ref: str) -> str:
    if table in _ARITH_TERMS:
        return _arith_sql(table, ref)
    _, columns = CHECKED[table]
    blobs = [f"{ref}.{c}" for c in columns if c in BLOB_COLUMNS]
    scalars = _scalars_sql(table, ref)
    args = [*blobs, f"CAST({scalars} AS BLOB)"] if scalars else blobs
    return f"{SUM_FUNCTION}('{table}', {', '.join(args)})"


def lenient_text(data: bytes) -> str:
    """A ``text_factory`` that reads damaged (not UTF-8) text instead of failing the query.

    Valid text decodes exactly as by default; damaged bytes become lone surrogates, which
    the checksums (over the raw bytes) report.
    """
    return data.decode("utf-8", "surrogateescape")


def schema_sql(names: dict[str, str] | None = None) -> str:
    """The ``row_checksums`` table and the triggers that keep it (for the migration), over
    the tables of :data:`FIRST_CHECKED`.

    ``names`` maps a column's name today to its name as the calling migration knows it.
    """
    parts = [
        "CREATE TABLE row_checksums ("
        " tbl TEXT NOT NULL, key NUMERIC NOT NULL, sum INTEGER NOT NULL, PRIMARY KEY (tbl, key)"
        ") WITHOUT ROWID;"
    ]
    parts += [checksum_sql(table) for table in FIRST_CHECKED]
    sql = "\n".join(parts)
    for name, then in (names or {}).items():
        sql = re.sub(rf"\b{name}\b", then, sql)
    return sql


def checksum_sql(table: str) -> str:
    """The triggers that keep ``table``'s rows summed in ``row_checksums``, and the sums of
    the rows it holds already."""
    key, _ = CHECKED[table]
    # Delete-then-insert: a trigger body inherits the outer statement's conflict
    # policy (see m003), and this form has no conflict to resolve.
    put = (f"DELETE FROM row_checksums WHERE tbl = '{table}' AND key = new.{key}; "
           f"INSERT INTO row_checksums (tbl, key, sum) VALUES ('{table}', new.{key}, {_sum_sql(table, 'new')});")
    drop = f"DELETE FROM row_checksums WHERE tbl = '{table}' AND key = old.{key};"
    return "\n".join([
        f"CREATE TRIGGER {table}_sum_ai AFTER INSERT ON {table} BEGIN {put} END;",
        f"CREATE TRIGGER {table}_sum_au AFTER UPDATE ON {table} BEGIN {drop} {put} END;",
        f"CREATE TRIGGER {table}_sum_ad AFTER DELETE ON {table} BEGIN {drop} END;",
        f"INSERT INTO row_checksums (tbl, key, sum) SELECT '{table}', {key}, {_sum_sql(table, table)} FROM {table};",
    ])


# ---------------------------------------------------------------------- verifying
@dataclass(frozen=True)
class Damage:
    """One damaged row: ``table`` and ``key`` (a chunk id for chunk tables), and what is wrong."""

    table: str
    key: object
    problem: str

    def describe(self) -> str:
        if self.table in ("chunk_tokens", "chunks"):
            return f"chunk {self.key} ({self.problem})"
        if self.table == "turns":
            return f"turn {self.key} ({self.problem})"
        if self.table == "recalls":
            return f"what a message recalled, row {self.key} ({self.problem})"
        if self.table == "branches":
            return f"stashed branch {self.key} ({self.problem})"
        return f"{self.table} '{self.key}' ({self.problem})"


def has_checksums(conn: sqlite3.Connection) -> bool:
    return has_table(conn, "row_checksums")


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    """Whether the file has the table ``name`` (a file from before a migration may not)."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


def _totals_agree(conn: sqlite3.Connection, table: str) -> bool:
    """One scan per table: the rows' sums, computed now, total what ``row_checksums`` holds."""
    now = conn.execute(f"SELECT count(*), total({_sum_sql(table, 't')}) FROM {table} t").fetchone()
    kept = conn.execute("SELECT count(*), total(sum) FROM row_checksums WHERE tbl = ?", (table,)).fetchone()
    return now == kept


#: The columns :func:`chunk_records_agree` needs beyond those opening reads anyway.
CHUNK_CHECK_COLUMNS = ("live", "pinned", "tool_result")
#: True for a chunk record whose summed columns are all integers: the one term of the
#: checksum (their types) that the values read as text cannot show (a BLOB of digits).
ALL_INTEGERS_SQL = " AND ".join(
    [f"typeof({c}) = 'integer'"
     for c in ("turn_id", "chunk_index", "start", "token_count", "live", "pinned", "tool_result")]
    + ["typeof(brightness_at_prune) IN ('integer', 'null')"])


def chunk_records_agree(conn: sqlite3.Connection, columns: dict[str, np.ndarray],
                        roles: Sequence[str], no_value: int) -> bool:
    """The ``chunks`` total of :func:`_totals_agree`, computed in numpy from the columns
    opening reads anyway (one scan instead of two: the SQL arithmetic cost ~20 ms per
    million tokens).

    ``columns``: every chunk's values, read where every summed column is an integer
    (:data:`ALL_INTEGERS_SQL`, so their types' term is a constant), with
    ``brightness_at_prune`` NULL as ``no_value`` and ``role`` the role's index in
    ``roles`` (-1 for any other text).  True only when the total agrees; False (the
    caller runs the exact SQL check) for an unknown role or a total that differs.
    """
    count = len(columns["id"])
    kept = conn.execute("SELECT count(*), total(sum) FROM row_checksums WHERE tbl = 'chunks'").fetchone()
    if kept[0] != count or any(len(v) != count for v in columns.values()):
        return False
    role = columns["role"]
    if count and (role.min() < 0 or role.max() >= len(roles)):
        return False
    lengths = np.array([len(r) for r in roles], np.int64)[role]
    codes = np.array([(r.find("user") + 1) + 2 * (r.find("assistant") + 1) for r in roles], np.int64)[role]
    at = np.where(columns["brightness_at_prune"] == no_value, -7777777, columns["brightness_at_prune"])
    terms = [columns[c] for c in ("id", "turn_id", "chunk_index", "start", "token_count", "live", "pinned")]
    terms += [at, columns["tool_result"], lengths, codes]
    expr = np.zeros(count, np.int64)
    for term in terms:  # SQLite's % truncates like C: np.fmod
        expr = np.fmod(expr * 1000003 + np.fmod(term, _PRIME), _PRIME)
    expr = np.fmod(expr * 1000003 + len("integer") * 8, _PRIME)  # the types' term
    return float(expr.sum()) == kept[1]


def _mismatches(conn: sqlite3.Connection, table: str, where: str = "", args: Sequence = ()) -> list[Damage]:
    key, _ = CHECKED[table]
    if not where and table in _ARITH_TERMS and _totals_agree(conn, table):
        return []
    rows = conn.execute(
        f"SELECT t.{key}, s.sum IS NULL FROM {table} t "
        f"LEFT JOIN row_checksums s ON s.tbl = '{table}' AND s.key = t.{key} "
        f"WHERE (s.sum IS NULL OR s.sum != {_sum_sql(table, 't')}) {where}",
        args,
    ).fetchall()
    return [Damage(table, k, "no checksum" if missing else "checksum mismatch") for k, missing in rows]


def shape_problems(conn: sqlite3.Connection, where: str = "", args: Sequence = (),
                   keep: list | None = None) -> list[Damage]:
    """Chunks whose stored BLOBs disagree with their token count or their text.

    ``keep`` (a list): the rows read are appended to it, as ``(chunk_id, live, token_ids,
    brightness, text, text_lengths)``, for a caller that reads them next (opening).
    """
    rows = conn.execute(
        "SELECT c.id, c.token_count, t.token_ids, t.brightness, t.text, t.text_lengths, c.live "
        f"FROM chunks c JOIN chunk_tokens t ON t.chunk_id = c.id WHERE 1 {where}", args,
    ).fetchall()
    if keep is not None:
        keep.extend((r[0], r[6], *r[2:6]) for r in rows)
    return [Damage("chunk_tokens", rows[i][0], problem) for i, problem in _shape_problems(rows)]


def _shape_problems(rows: Sequence[tuple]) -> list[tuple[int, str]]:
    """``(index, problem)`` of each of ``rows`` (``chunk_id, count, ids, brightness, text,
    lengths, ...``) that :func:`shape_problem` finds wrong, in order; the lengths of every
    row are summed at once (per row in Python it took ~7 us a chunk)."""
    found: dict[int, str] = {}
    whole: list[int] = []  # rows whose types and sizes are right: their lengths are summed
    for i, (_, count, ids, brightness, text, lengths, *_) in enumerate(rows):
        problem = _size_problem(count, ids, brightness, text, lengths)
        if problem:
            found[i] = problem
        elif count:
            whole.append(i)
    if whole:
        counts = np.fromiter((rows[i][1] for i in whole), np.int64, len(whole))
        values = np.frombuffer(b"".join(rows[i][5] for i in whole), "<i4").astype(np.int64)
        starts = np.cumsum(counts) - counts
        total = np.add.reduceat(values, starts)
        least = np.minimum.reduceat(values, starts)
        texts = np.fromiter((len(rows[i][4]) for i in whole), np.int64, len(whole))
        for j in np.flatnonzero((total != texts) | (least < 0)).tolist():
            found[whole[j]] = "token lengths disagree with the text"
    for i, (_, count, *_rest) in enumerate(rows):  # a row of no tokens must have no text
        if i not in found and not count and rows[i][4]:
            found[i] = "token lengths disagree with the text"
    return sorted(found.items())


def _size_problem(count, ids, brightness, text, lengths) -> str | None:
    if not all(isinstance(b, bytes) for b in (ids, brightness, lengths)) or not isinstance(text, str):
        return "a value has the wrong type"
    if not isinstance(count, int) or not len(ids) == len(brightness) == len(lengths) == 4 * count:
        return "token count disagrees with the stored tokens"
    return None


def shape_problem(count, ids, brightness, text, lengths) -> str | None:
    """Why a chunk's stored values cannot be its tokens (None when they can)."""
    problem = _size_problem(count, ids, brightness, text, lengths)
    if problem:
        return problem
    total = sum(struct.unpack(f"<{count}i", lengths)) if count else 0
    if total != len(text) or (count and min(struct.unpack(f"<{count}i", lengths)) < 0):
        return "token lengths disagree with the text"
    return None


def verify_on_open(conn: sqlite3.Connection, chunks_agree: Callable[[], bool] | None = None,
                   live_rows: list | None = None,
                   records_current: Callable[[], bool] | None = None) -> list[Damage]:
    """Damage among the rows opening reads: small tables and the live chunks' tokens.

    ``records_current``, called first: True when the caller has the turn and chunk
    records from a current snapshot (:mod:`.record_snapshot`), so neither table is read
    or summed (unless another table is damaged).  ``chunks_agree``, called once the
    turns are found sound: True when the caller found the chunk records' total sound as
    it read them (:func:`chunk_records_agree`), so they are not summed again in SQL.
    ``live_rows`` (a list) gets the live chunks' token rows as checked (see
    :func:`shape_problems`), so opening need not read them twice; it stays empty for a
    file without checksums.
    """
    if not has_checksums(conn):
        return []
    live = "AND t.chunk_id IN (SELECT id FROM chunks WHERE live)"
    current = records_current is not None and records_current()
    damage = [d for table in ("meta", "tool_data", "turns", "recalls")
              if has_table(conn, table) and not (current and table == "turns")
              for d in _mismatches(conn, table)]
    if damage and current:  # the records are read from their tables again: check them
        damage += _mismatches(conn, "turns")
        current = False
    if not current and (damage or chunks_agree is None or not chunks_agree()):
        damage += _mismatches(conn, "chunks")
    damage += _mismatches(conn, "chunk_tokens", live)
    damage += shape_problems(conn, "AND c.live", keep=live_rows)
    return _unique(damage)


def verify_records(conn: sqlite3.Connection) -> list[Damage]:
    """Damage among the turn and chunk records (checked before the first write of a
    session that read them from their snapshot)."""
    if not has_checksums(conn):
        return []
    return _unique(_mismatches(conn, "turns") + _mismatches(conn, "chunks"))


def records_sound(conn: sqlite3.Connection, table: str) -> bool:
    """Whether every row of ``table`` agrees with its checksum (True without checksums)."""
    return not has_checksums(conn) or not _mismatches(conn, table)


def verify_chunks(conn: sqlite3.Connection, chunk_ids: Iterable[int]) -> list[Damage]:
    """Damage among the given chunks' tokens (checked when pruned chunks are read back)."""
    ids = list(chunk_ids)
    if not ids or not has_checksums(conn):
        return []
    damage = []
    for i in range(0, len(ids), 900):
        batch = ids[i : i + 900]
        marks = ",".join("?" * len(batch))
        damage += _mismatches(conn, "chunk_tokens", f"AND t.chunk_id IN ({marks})", batch)
        damage += shape_problems(conn, f"AND c.id IN ({marks})", batch)
    return _unique(damage)


def verify_all(conn: sqlite3.Connection) -> list[Damage]:
    """Every checked row (``--check``)."""
    damage = [d for table in CHECKED if has_table(conn, table) for d in _mismatches(conn, table)]
    return _unique(damage + shape_problems(conn))


def _unique(damage: list[Damage]) -> list[Damage]:
    seen, out = set(), []
    for d in damage:
        key = ("chunk" if d.table in ("chunks", "chunk_tokens") else d.table, d.key)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


def damage_message(name: str, damage: Sequence[Damage], limit: int = 5) -> str:
    """The words shown to the user for damage found in the file ``name``."""
    listed = "; ".join(d.describe() for d in damage[:limit])
    more = f" and {len(damage) - limit} more" if len(damage) > limit else ""
    return (
        f"{name} is damaged: {listed}{more}. The rest of the conversation was opened "
        "read-only, so nothing more can be lost: read what is intact, and restore the file "
        f"from a backup to go on. `halo-weave --check {name}` lists every damaged part."
    )


@dataclass(frozen=True)
class Skipped:
    """What opening a damaged file leaves out: damaged turn and chunk records, and the
    chunks whose tokens are damaged (shown as pruned; their tokens are never loaded)."""

    turns: frozenset
    chunks: frozenset
    tokens: frozenset

    def __bool__(self) -> bool:
        return bool(self.turns or self.chunks or self.tokens)


def skipped(damage: Sequence[Damage]) -> Skipped:
    """The :class:`Skipped` records for ``damage`` (empty when there is none)."""
    keys = {table: frozenset(d.key for d in damage if d.table == table)
            for table in ("turns", "chunks", "chunk_tokens")}
    return Skipped(keys["turns"], keys["chunks"], keys["chunk_tokens"])


def verify_row(conn: sqlite3.Connection, table: str, key) -> list[Damage]:
    """Damage of one row (a tool's notes, read on their own)."""
    if not has_checksums(conn):
        return []
    return _mismatches(conn, table, f"AND t.{CHECKED[table][0]} = ?", (key,))
