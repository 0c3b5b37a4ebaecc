"""Recall, the file's part: the ``recalls`` table (m008), what each user message
recalled (:mod:`halo_weave.core.recall`), and which of those chunks are still marked (not
pruned since).  Every statement on it is here; the store
calls them inside its transactions, and opening reads them back with :func:`read`.
"""

from __future__ import annotations

import sqlite3
from typing import Iterable, Sequence

from ..conversation import Chunk, Conversation


def write(conn: sqlite3.Connection, conv: Conversation, turn_id: int) -> None:
    """The rows of what the message ``turn_id`` recalled, as the conversation holds it."""
    conn.execute("DELETE FROM recalls WHERE turn_id = ?", (turn_id,))
    conn.executemany(
        "INSERT INTO recalls (turn_id, chunk_id, live) VALUES (?, ?, ?)",
        [(turn_id, c, int(conv.chunks[c].recalled_for == turn_id)) for c in conv.recalls.of(turn_id)],
    )


def unmark(conn: sqlite3.Connection, chunks: Iterable[Chunk]) -> None:
    """Pruned chunks lose their marks."""
    gone = [(c.id,) for c in chunks if not c.live and not c.framing]
    if gone:
        conn.executemany("UPDATE recalls SET live = 0 WHERE chunk_id = ? AND live != 0", gone)


def rewrite_chunk(conn: sqlite3.Connection, conv: Conversation, chunk: Chunk, absorbed: Chunk) -> None:
    """After a merge: ``absorbed``'s rows become ``chunk``'s (see :func:`halo_weave.core.recall.merged`)."""
    conn.executemany("DELETE FROM recalls WHERE chunk_id = ?", [(chunk.id,), (absorbed.id,)])
    for turn_id in conv.recalls.turns_of(chunk.id):
        write(conn, conv, turn_id)  # in the recall's order


def delete_turn(conn: sqlite3.Connection, turn_id: int) -> None:
    conn.execute("DELETE FROM recalls WHERE turn_id = ?", (turn_id,))


def read(conn: sqlite3.Connection, skip: Sequence[int] = ()) -> dict[int, list[tuple[int, bool]]]:
    """What the file says each message recalled: ``turn_id -> [(chunk_id, marked), ...]``
    in the recall's order (rows in ``skip``, damaged, are left out).  The conversation
    takes them (:meth:`~halo_weave.conversation.Conversation.from_records`), a list only
    for a user turn and a chunk that both exist, a mark only on a live chunk."""
    left_out = set(skip)
    by_turn: dict[int, list[tuple[int, bool]]] = {}
    for row_id, turn_id, chunk_id, live in conn.execute(
            "SELECT id, turn_id, chunk_id, live FROM recalls ORDER BY turn_id, id"):
        if row_id not in left_out:
            by_turn.setdefault(turn_id, []).append((chunk_id, bool(live)))
    return by_turn
