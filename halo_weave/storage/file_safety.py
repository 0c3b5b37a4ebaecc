"""Where import and export may read and write: never a database, never a special file.

Two dangers met in practice: an export aimed at a ``.halo.db`` file replaced
the conversation with JSON, and an import of a symlink to ``/dev/zero`` (read until
MemoryError) or of a FIFO (hung forever).  So:

* :func:`check_export_target` refuses a target that is an SQLite database (decided by its
  first bytes, whatever its name), the open conversation's own files (the database and
  its ``-wal``, ``-shm`` and ``-journal`` companions, however they are reached), or
  anything that is not a regular file.
* :func:`read_regular_file` opens without blocking, checks that what it opened is a
  regular file, and reads at most ``limit`` bytes.

Both raise :class:`UnsafePath`, a :class:`ValueError` whose text names the file and the
reason, meant for the user.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterable

#: The first 16 bytes of every SQLite 3 database file.
SQLITE_HEADER = b"SQLite format 3\x00"

#: Files SQLite keeps beside a database.
COMPANION_SUFFIXES = ("", "-wal", "-shm", "-journal")


class UnsafePath(ValueError):
    """A path import or export must not touch; ``str(error)`` is meant for the user."""


def is_sqlite_file(path: Path) -> bool:
    """True when ``path`` is a regular file starting with the SQLite header."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as f:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_export_target(target: Path, protected: Iterable[Path] = ()) -> None:
    """Refuse an export target that would destroy something (see the module docstring).

    ``protected`` are database files that are open now (the conversation being exported):
    the target may be neither one of them nor one of their companion files, whether
    named directly, through a symlink or a hard link.
    """
    target = Path(target)
    for database in protected:
        database = Path(database)
        for suffix in COMPANION_SUFFIXES:
            companion = database.with_name(database.name + suffix)
            if target.absolute() == companion.absolute() or _same_file(target, companion):
                raise UnsafePath(
                    f"{target.name} is the open conversation's own file; exporting there would "
                    "destroy the conversation. Choose another file name (e.g. ending in .json)."
                )
    try:
        info = os.stat(target)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise UnsafePath(f"Cannot export to {target}: {exc.strerror or exc}.") from exc
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise UnsafePath(
            f"{target.name} is not a regular file (a folder, device or pipe); choose a file to export to."
        )
    if info is not None and is_sqlite_file(target):
        raise UnsafePath(
            f"{target.name} is a database (perhaps another conversation); exporting there would "
            "overwrite it. Choose another file name (e.g. ending in .json)."
        )
    # A companion of any conversation database (its -wal or -shm file) is as precious.
    for suffix in COMPANION_SUFFIXES[1:]:
        if target.name.endswith(suffix):
            base = target.with_name(target.name[: -len(suffix)])
            if is_sqlite_file(base):
                raise UnsafePath(
                    f"{target.name} belongs to the database {base.name}; exporting there would "
                    "damage it. Choose another file name."
                )


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``limit`` bytes.

    Opened with ``O_NONBLOCK`` so that a FIFO cannot hang the caller; the type and size
    are checked on the opened descriptor (no window between check and use), and at most
    ``limit + 1`` bytes are ever read, so a file that grows is refused too.
    """
    path = Path(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise UnsafePath(f"Could not read {path.name}: {exc.strerror or exc}.") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafePath(
                f"{path.name} is not a regular file (a device, pipe or folder); only files can be imported."
            )
        if info.st_size > limit:
            raise UnsafePath(f"{path.name} is {info.st_size >> 20} MB, more than the {limit >> 20} MB limit.")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise UnsafePath(f"{path.name} grew past the {limit >> 20} MB limit while being read.")
        return b"".join(chunks)
    except OSError as exc:
        raise UnsafePath(f"Could not read {path.name}: {exc.strerror or exc}.") from exc
    finally:
        os.close(fd)
