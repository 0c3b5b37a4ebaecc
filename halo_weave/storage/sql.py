"""The one transaction helper every write to a conversation file goes through."""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
from typing import Callable, Iterator

_savepoints = itertools.count(1)


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection, before_commit: Callable[[], None] | None = None
                ) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on any exception.

    ``before_commit`` runs just before the outermost ``COMMIT``; raising there rolls back
    (the store checks that its -wal file is still the one on disk, see ``wal_guard``).

    Inside an open transaction it opens a savepoint instead, so a ``save_*`` call can be
    part of a larger transaction: an exception leaving the inner block rolls back that
    block, leaving the outer one everything.  Callers sharing the connection with another
    thread hold their lock around it (:attr:`ConversationStore.lock`).
    """
    if conn.in_transaction:
        name = f"halo_{next(_savepoints)}"
        conn.execute(f"SAVEPOINT {name}")
        try:
            yield conn
        except BaseException:
            conn.execute(f"ROLLBACK TO {name}")
            conn.execute(f"RELEASE {name}")
            raise
        conn.execute(f"RELEASE {name}")
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        if before_commit is not None:
            before_commit()
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def batches(items: list, size: int = 900) -> Iterator[list]:
    """``items`` in slices small enough for one statement's ``?`` parameters."""
    for i in range(0, len(items), size):
        yield items[i : i + size]
