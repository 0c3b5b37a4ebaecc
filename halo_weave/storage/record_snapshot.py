"""Every turn and chunk record as one binary row, so that opening reads them in one SELECT.

Opening checks every chunk record against its checksum (:mod:`.integrity`); read from the
tables as text (``group_concat``) that cost ~45 ms per million tokens (~20k chunk and ~5k
turn records), most of it SQLite turning integers into text.  The *record snapshot* holds
the same columns as little-endian arrays in one BLOB (``record_snapshot``), with its own
CRC-32 and the value of a change counter (``record_state.seq``) it was taken at.

The counter is kept by triggers on ``turns`` and ``chunks`` (every insert, update and
delete, by whatever program writes the file), so a snapshot is used only while no record
has changed since it was taken; a missing, stale, damaged or older-format snapshot, or a
file whose counting triggers are gone, is read from the tables, checked, as before.  A
snapshot is taken by that checked read (opening), and by closing a store whose records
changed (the tables read and checked again inside the transaction that writes it).

A record damaged inside the tables while the snapshot is current is not read at all: the
conversation opens as it was saved, and the damage is found the next time the tables are
read (a close after a change, or ``halo-weave --check``).
"""

from __future__ import annotations

import sqlite3
import struct
import zlib

import numpy as np

from ..core.registry import ChunkColumns, TurnColumns
from ..errors import StoreError
from . import integrity
from .record_columns import chunk_columns, turn_columns

#: The format written; a snapshot of any other version is not used (and is replaced).
VERSION = 1
_MAGIC = b"HWRS"
_HEADER = struct.Struct("<4sIqqq")  # magic, version, counter, turns, chunks
#: (columns, field, kind): "int" is stored in 4 or 8 bytes (whichever holds every
#: value), "code" int8, "flag" one byte 0/1, "real" float64.
_FIELDS = (
    ("turns", "turn_id", "int"), ("turns", "role", "code"), ("turns", "created_at", "real"),
    ("turns", "complete", "flag"),
    ("chunks", "id", "int"), ("chunks", "turn_id", "int"), ("chunks", "chunk_index", "int"),
    ("chunks", "role", "code"), ("chunks", "start", "int"), ("chunks", "token_count", "int"),
    ("chunks", "live", "flag"), ("chunks", "pinned", "flag"), ("chunks", "at_prune", "int"),
    ("chunks", "tool_result", "flag"),
)
_DTYPE = {"code": "i1", "flag": "u1", "real": "<f8", 4: "<i4", 8: "<i8"}
_TYPE = {"int": np.int64, "code": np.int8, "real": np.float64}
_WIDTHS = {"int": (4, 8), "code": (1,), "flag": (1,), "real": (8,)}
#: The triggers that keep the counter (the migration creates them).
TRIGGERS = tuple(f"{table}_seq_{event}" for table in ("turns", "chunks") for event in ("ai", "au", "ad"))


def schema_sql() -> str:
    """The counter, the snapshot's table and the counting triggers (for the migration)."""
    events = {"ai": "INSERT", "au": "UPDATE", "ad": "DELETE"}
    triggers = "\n".join(
        f"CREATE TRIGGER {name} AFTER {events[name[-2:]]} ON {name.split('_seq_')[0]} "
        "BEGIN UPDATE record_state SET seq = seq + 1; END;" for name in TRIGGERS)
    return (
        "CREATE TABLE record_state (id INTEGER PRIMARY KEY CHECK (id = 0), seq INTEGER NOT NULL);\n"
        "INSERT INTO record_state (id, seq) VALUES (0, 0);\n"
        "CREATE TABLE record_snapshot (id INTEGER PRIMARY KEY CHECK (id = 0), "
        "seq INTEGER NOT NULL, crc INTEGER NOT NULL, data BLOB NOT NULL);\n" + triggers
    )


def change_count(conn: sqlite3.Connection) -> int | None:
    """The counter now (None in a file without one)."""
    try:
        row = conn.execute("SELECT seq FROM record_state WHERE id = 0").fetchone()
    except sqlite3.Error:
        return None
    return row[0] if row and type(row[0]) is int else None


def read(conn: sqlite3.Connection) -> tuple[TurnColumns, ChunkColumns] | None:
    """The turn and chunk records from a current, sound snapshot; None when there is none."""
    seq = change_count(conn)
    try:
        row = conn.execute("SELECT crc, data FROM record_snapshot WHERE id = 0").fetchone()
        marks = ",".join("?" * len(TRIGGERS))
        counting = conn.execute(
            f"SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name IN ({marks})", TRIGGERS,
        ).fetchone()[0]
    except sqlite3.Error:
        return None
    if seq is None or row is None or counting != len(TRIGGERS):
        return None
    crc, data = row
    if type(data) is not bytes or zlib.crc32(data) != crc:
        return None
    return decode(data, seq)


def encode(seq: int, turns: TurnColumns, chunks: ChunkColumns) -> bytes:
    """The snapshot's BLOB: a header, one width byte per field, then the columns."""
    columns = {"turns": turns, "chunks": chunks}
    widths, parts = [], []
    for which, field, kind in _FIELDS:
        values = getattr(columns[which], field)
        if kind == "int":
            small = not len(values) or (values.min() >= -2**31 and values.max() < 2**31)
            kind = 4 if small else 8
        widths.append(np.dtype(_DTYPE[kind]).itemsize)
        parts.append(np.ascontiguousarray(values, _DTYPE[kind]).tobytes())
    header = _HEADER.pack(_MAGIC, VERSION, seq, len(turns), len(chunks)) + bytes(widths)
    return header + b"".join(parts)


def decode(data: bytes, seq: int | None = None) -> tuple[TurnColumns, ChunkColumns] | None:
    """The columns of :func:`encode`'s BLOB; None when it is of another version or shape,
    or was taken at another value of the counter than ``seq`` (when given)."""
    if len(data) < _HEADER.size + len(_FIELDS):
        return None
    magic, version, taken, n_turns, n_chunks = _HEADER.unpack_from(data)
    if magic != _MAGIC or version != VERSION or (seq is not None and taken != seq) or min(n_turns, n_chunks) < 0:
        return None
    widths = data[_HEADER.size : _HEADER.size + len(_FIELDS)]
    sizes = {"turns": n_turns, "chunks": n_chunks}
    offset = _HEADER.size + len(_FIELDS)
    if len(data) != offset + sum(w * sizes[which] for w, (which, _, _) in zip(widths, _FIELDS)):
        return None
    values: dict[str, list] = {"turns": [], "chunks": []}
    for width, (which, _, kind) in zip(widths, _FIELDS):
        if width not in _WIDTHS[kind]:
            return None
        dtype = _DTYPE[width if kind == "int" else kind]
        column = np.frombuffer(data, dtype, sizes[which], offset)
        values[which].append(column != 0 if kind == "flag" else column.astype(_TYPE[kind]))
        offset += width * sizes[which]
    return TurnColumns(*values["turns"]), ChunkColumns(*values["chunks"])


def write(conn: sqlite3.Connection, seq: int, turns: TurnColumns, chunks: ChunkColumns) -> None:
    """Replace the snapshot with these records, taken at counter ``seq`` (call inside a
    transaction that has checked the counter)."""
    data = encode(seq, turns, chunks)
    conn.execute("INSERT OR REPLACE INTO record_snapshot (id, seq, crc, data) VALUES (0, ?, ?, ?)",
                 (seq, zlib.crc32(data), data))


def save(store, seq: int | None, turns: TurnColumns, chunks: ChunkColumns) -> None:
    """Keep records that opening read and checked at counter ``seq``, unless the file has
    changed since or cannot be written (the snapshot is a cache: failing to keep it loses
    nothing)."""
    if seq is None or store.read_only:
        return
    try:
        with store.transaction() as conn:
            if change_count(conn) == seq:
                write(conn, seq, turns, chunks)
    except (StoreError, sqlite3.Error):
        pass


def refresh(store, since: int | None) -> None:
    """At closing: when the records changed since the counter read ``since``, read them
    from the tables, check them (the turns' and the chunks' checksums) and keep them,
    in one transaction.  Damage found here is left for the next opening to report."""
    if since is None or store.read_only or change_count(store.conn) in (None, since):
        return
    try:
        with store.transaction() as conn:
            seq = change_count(conn)
            kept = conn.execute("SELECT seq FROM record_snapshot WHERE id = 0").fetchone()
            if seq is None or (kept and kept[0] == seq):
                return
            if not integrity.records_sound(conn, "turns"):
                return
            turns = turn_columns(conn, store.path.name)
            check: dict = {}
            chunks = chunk_columns(conn, store.path.name, turns, check=check)
            if check["agree"]:
                write(conn, seq, turns, chunks)
    except (StoreError, sqlite3.Error):
        pass
