"""The semantic index's tables: every SQL statement on ``semantic_entries``, its FTS
table and its change log (``semantic_state`` / ``semantic_changes``, kept by triggers,
see :mod:`.schema`).  :class:`~halo_weave.semantic_index.SemanticIndex` keeps the vectors
in memory and calls these on the conversation file's connection.
"""

from __future__ import annotations

import sqlite3
from typing import Iterator, Sequence

from .sql import batches

_ENTRY = "chunk_id, role, context_hash, model, dim, embedding"


def entries(conn: sqlite3.Connection) -> list[tuple]:
    """Every entry as ``(chunk_id, role, context_hash, model, dim, embedding)``."""
    return conn.execute(f"SELECT {_ENTRY} FROM semantic_entries").fetchall()


def entries_of(conn: sqlite3.Connection, chunk_ids: Sequence[int]) -> Iterator[tuple]:
    """:func:`entries` of the given chunks (those that have one)."""
    for batch in batches(list(chunk_ids)):
        marks = ",".join("?" * len(batch))
        yield from conn.execute(f"SELECT {_ENTRY} FROM semantic_entries WHERE chunk_id IN ({marks})", batch)


def entry_text(conn: sqlite3.Connection, chunk_id: int) -> str | None:
    """The text indexed for ``chunk_id`` (None: no entry)."""
    row = conn.execute("SELECT text FROM semantic_entries WHERE chunk_id = ?", (chunk_id,)).fetchone()
    return None if row is None else row[0]


def change_log(conn: sqlite3.Connection) -> tuple[str, int, int] | None:
    """``(uid, seq, count)`` of the change log; None for a file without one."""
    try:
        return conn.execute("SELECT uid, seq, count FROM semantic_state").fetchone()
    except sqlite3.OperationalError:
        return None


def changes_since(conn: sqlite3.Connection, seq: int) -> list[int]:
    """Chunk ids whose entry changed after ``seq``."""
    return [r[0] for r in conn.execute("SELECT chunk_id FROM semantic_changes WHERE seq > ?", (seq,))]


def upsert(conn: sqlite3.Connection, rows: list[tuple]) -> None:
    """Insert or replace entries: ``(chunk_id, turn_id, chunk_index, role, text,
    token_count, context_hash, embedding, model, dim, updated_at)`` each."""
    conn.executemany(
        """INSERT INTO semantic_entries (chunk_id, turn_id, chunk_index, role, text,
               token_count, context_hash, embedding, model, dim, updated_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT(chunk_id) DO UPDATE SET turn_id = excluded.turn_id,
               chunk_index = excluded.chunk_index, role = excluded.role,
               text = excluded.text, token_count = excluded.token_count,
               context_hash = excluded.context_hash, embedding = excluded.embedding,
               model = excluded.model, dim = excluded.dim,
               updated_at = excluded.updated_at""",
        rows,
    )


def delete(conn: sqlite3.Connection, chunk_ids: Sequence[int]) -> None:
    conn.executemany("DELETE FROM semantic_entries WHERE chunk_id = ?", [(c,) for c in chunk_ids])


def count_references(conn: sqlite3.Connection, chunk_ids: Sequence[int]) -> None:
    """One more resurrection of each entry's chunk (``reference_count`` + 1)."""
    conn.executemany("UPDATE semantic_entries SET reference_count = reference_count + 1 WHERE chunk_id = ?",
                     [(c,) for c in chunk_ids])


def meta(conn: sqlite3.Connection, chunk_ids: list[int]) -> dict[int, tuple]:
    """Chunk id -> ``(turn_id, chunk_index, role, text, token_count, reference_count)``."""
    if not chunk_ids:
        return {}
    marks = ",".join("?" * len(chunk_ids))
    rows = conn.execute(
        f"SELECT chunk_id, turn_id, chunk_index, role, text, token_count, reference_count "
        f"FROM semantic_entries WHERE chunk_id IN ({marks})", chunk_ids).fetchall()
    return {r[0]: tuple(r[1:]) for r in rows}


def bm25(conn: sqlite3.Connection, query: str, limit: int) -> dict[int, float]:
    """Chunk id -> BM25 score of the ``limit`` best full-text matches of ``query``."""
    rows = conn.execute(
        "SELECT rowid, -bm25(semantic_fts) FROM semantic_fts WHERE semantic_fts MATCH ? "
        "ORDER BY rank, rowid LIMIT ?", (query, limit)).fetchall()  # ties: the older chunk
    return {int(r[0]): max(float(r[1]), 0.0) for r in rows}


def said_between(conn: sqlite3.Connection, spans: Sequence[tuple[float, float]]) -> frozenset[int]:
    """Chunk ids of the entries whose turn was said within one of ``spans`` (``[start,
    end)`` epoch seconds); empty for a file without turns."""
    if not spans:
        return frozenset()
    where = " OR ".join("(t.created_at >= ? AND t.created_at < ?)" for _ in spans)
    try:
        rows = conn.execute(f"SELECT e.chunk_id FROM semantic_entries e JOIN turns t ON "
                            f"t.turn_id = e.turn_id WHERE {where}",
                            [x for span in spans for x in span]).fetchall()
    except sqlite3.OperationalError:
        return frozenset()
    return frozenset(r[0] for r in rows)


def term_documents(conn: sqlite3.Connection, term: str, at_most: int | None = None) -> int | None:
    """How many entries hold ``term`` (None: not in the vocabulary as written).

    With ``at_most``, counting stops there (the answer is ``min(count, at_most)``): the
    vocabulary's count walks the term's whole document list (~1.5 ms for a word in 30k
    of 100k entries), while a caller that only asks "more than N?" needs N + 1 of them.
    That shortcut is taken for words of ASCII letters and digits, which the full-text
    tokenizer keeps as they are written, so the two ways agree on every such word.
    """
    if at_most is not None and term.isascii() and term.isalnum():
        return conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM semantic_fts WHERE semantic_fts MATCH ? LIMIT ?)",
            (f'"{term}"', at_most)).fetchone()[0] or None
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.semantic_vocab "
                 "USING fts5vocab(main, semantic_fts, row)")
    # One seek per term: "term IN (...)" scans the whole vocabulary.
    row = conn.execute("SELECT doc FROM temp.semantic_vocab WHERE term = ?", (term,)).fetchone()
    return None if row is None else row[0]


def database_file(conn: sqlite3.Connection) -> str | None:
    """The main database's file name (None or "" for an in-memory or temporary one)."""
    for _, name, file in conn.execute("PRAGMA database_list"):
        if name == "main":
            return file
    return None
