"""Notice when another program deletes or replaces the conversation's file or its ``-wal``.

In WAL mode a commit lands in ``<file>-wal`` and reaches the database file only at a
checkpoint.  A sync tool or cleaner that deletes the ``-wal`` while the app runs leaves
SQLite writing into an unlinked file: every save still reports success, and everything
since the last checkpoint is gone once the app stops (six turns, when it was tried).

:class:`WalGuard` remembers the ``-wal`` file's identity (device and inode) and compares
it before each commit.  When it has vanished or changed, the caller does not commit;
:meth:`rescue` checkpoints what the open connection can still read from the unlinked
file into the database file itself, so turns committed before the deletion survive.

The database file itself is watched the same way: deleted while open, every later save
would go to a file nobody can open again.  :meth:`rescue_database` writes the whole
conversation (``VACUUM INTO``) back under its name.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path


class WalVanished(OSError):
    """The ``-wal`` file was deleted or replaced by another program."""


class DatabaseVanished(WalVanished):
    """The database file itself was deleted or replaced by another program."""


class WalGuard:
    """Tracks the identity of one database's ``-wal`` file."""

    def __init__(self, database: Path) -> None:
        self.database = Path(database)
        self.wal = Path(f"{database}-wal")
        self._identity: tuple[int, int] | None = None
        self._database_identity: tuple[int, int] | None = None
        self.remember()

    @staticmethod
    def _identity_of(path: Path) -> tuple[int, int] | None:
        try:
            info = os.stat(path)
        except FileNotFoundError:
            return None
        return info.st_dev, info.st_ino

    def remember(self) -> None:
        """Record the current identities (after opening, or once the -wal first appears)."""
        self._identity = self._identity_of(self.wal)
        self._database_identity = self._identity_of(self.database)

    def check(self) -> None:
        """Raise :class:`WalVanished` if the files we write to are no longer those on disk."""
        database = self._identity_of(self.database)
        if self._database_identity is not None and database != self._database_identity:
            state = "deleted" if database is None else "replaced"
            raise DatabaseVanished(f"{self.database.name} was {state} by another program")
        current = self._identity_of(self.wal)
        if self._identity is None:
            self._identity = current  # SQLite creates the file on first use
            return
        if current != self._identity:
            state = "deleted" if current is None else "replaced"
            raise WalVanished(f"{self.wal.name} was {state} by another program")

    def rescue_database(self, conn: sqlite3.Connection) -> bool:
        """Write the open conversation back under its name when its file was deleted."""
        if self.database.exists():
            return False  # replaced by something else: never overwrite it
        try:
            conn.execute("VACUUM INTO ?", (str(self.database),))
        except sqlite3.Error:
            return False
        return True

    @staticmethod
    def rescue(conn: sqlite3.Connection) -> bool:
        """Copy committed pages from the (unlinked) WAL into the database file."""
        try:
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(FULL)").fetchone()
        except sqlite3.Error:
            return False
        return busy == 0
