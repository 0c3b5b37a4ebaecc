"""Notice when another program deletes or replaces the conversation's ``-wal`` file.

In WAL mode a commit lands in ``<file>-wal`` and reaches the database file only at a
checkpoint.  A sync tool or cleaner that deletes the ``-wal`` while the app runs leaves
SQLite writing into an unlinked file: every save still reports success, and everything
since the last checkpoint is gone once the app stops (issue 17: six turns).

:class:`WalGuard` remembers the ``-wal`` file's identity (device and inode) and compares
it before each commit.  When it has vanished or changed, the caller does not commit;
:meth:`rescue` checkpoints what the open connection can still read from the unlinked
file into the database file itself, so turns committed before the deletion survive.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path


class WalVanished(OSError):
    """The ``-wal`` file was deleted or replaced by another program."""


class WalGuard:
    """Tracks the identity of one database's ``-wal`` file."""

    def __init__(self, database: Path) -> None:
        self.wal = Path(f"{database}-wal")
        self._identity: tuple[int, int] | None = None
        self.remember()

    def _current(self) -> tuple[int, int] | None:
        try:
            info = os.stat(self.wal)
        except FileNotFoundError:
            return None
        return info.st_dev, info.st_ino

    def remember(self) -> None:
        """Record the current identity (after opening, or once the file first appears)."""
        self._identity = self._current()

    def check(self) -> None:
        """Raise :class:`WalVanished` if the file we write to is no longer the one on disk."""
        current = self._current()
        if self._identity is None:
            self._identity = current  # SQLite creates the file on first use
            return
        if current != self._identity:
            state = "deleted" if current is None else "replaced"
            raise WalVanished(f"{self.wal.name} was {state} by another program")

    @staticmethod
    def rescue(conn: sqlite3.Connection) -> bool:
        """Copy committed pages from the (unlinked) WAL into the database file."""
        try:
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(FULL)").fetchone()
        except sqlite3.Error:
            return False
        return busy == 0
