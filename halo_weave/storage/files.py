"""Conversation files on disk: where they live, the check before one is opened, the list.

:func:`inspect` refuses anything unsafe to write to (not SQLite, damaged, foreign, written
by a newer version) without changing a byte of it; the list reads each file read-only.
"""

from __future__ import annotations

import json
import re
import secrets
import sqlite3
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import StoreCorrupt, StoreError, StoreForeign, StoreTooNew
from . import integrity
from .schema import KNOWN_MIGRATIONS, MIGRATION_SET

#: Conversation files live in ``<data dir>/conversations`` with this suffix.
CONVERSATIONS_FOLDER = "conversations"
SUFFIX = ".halo.db"
_SQLITE_HEADER = b"SQLite format 3\x00"


@dataclass(frozen=True)
class ConversationSummary:
    """What the conversation list shows about one file (``error`` when it cannot open)."""

    path: Path
    title: str
    updated_at: float
    turn_count: int
    token_count: int
    error: str | None = None
    #: Branches besides the one shown (stashed tails); ``turn_count`` counts their turns too.
    stashed_branches: int = 0


def read_only_connection(path: Path) -> sqlite3.Connection:
    """A connection that cannot change the file (nor leave -wal/-shm files behind).

    ``immutable`` skips locking and the WAL, so it is used only when there is no WAL
    content to read; otherwise the -wal and -shm files exist already and ``mode=ro``
    reads through them.
    """
    wal = path.with_name(path.name + "-wal")
    mode = "mode=ro" if wal.exists() and wal.stat().st_size > 0 else "immutable=1"
    return sqlite3.connect(f"{path.resolve().as_uri()}?{mode}", uri=True, isolation_level=None)


def inspect(path: Path) -> None:
    """Raise :class:`StoreRefused` unless ``path`` is a sound conversation we can open."""
    with open(path, "rb") as f:
        header = f.read(len(_SQLITE_HEADER))
    if header != _SQLITE_HEADER:
        raise StoreCorrupt(f"{path.name} is not a Halo Weave conversation (not an SQLite database).")
    try:
        conn = read_only_connection(path)
    except sqlite3.Error as exc:
        raise StoreCorrupt(f"{path.name} cannot be read: {exc}.") from exc
    try:
        result = [r[0] for r in conn.execute("PRAGMA integrity_check")]
        if result != ["ok"]:
            raise StoreCorrupt(
                f"{path.name} is damaged (integrity check: {'; '.join(result[:3])}). "
                "It was left untouched; restore it from a backup or an export."
            )
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return  # an empty database: ours to initialise
        if "_sqlite_migrations" not in tables:
            raise StoreForeign(f"{path.name} is an SQLite database but not a Halo Weave conversation.")
        applied = [r[0] for r in conn.execute(
            "SELECT name FROM _sqlite_migrations WHERE migration_set = ? ORDER BY rowid", (MIGRATION_SET,)
        )]
        if not applied:
            raise StoreForeign(f"{path.name} is an SQLite database but not a Halo Weave conversation.")
        unknown = [name for name in applied if name not in KNOWN_MIGRATIONS]
        if unknown:
            raise StoreTooNew(
                f"{path.name} was written by a newer version of Halo Weave (schema {unknown[-1]}). "
                "Update Halo Weave to open it; the file was left untouched."
            )
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # undecodable: a damaged schema
        raise StoreCorrupt(
            f"{path.name} is damaged ({exc}). It was left untouched; restore it from a backup or an export."
        ) from exc
    finally:
        conn.close()


# ---------------------------------------------------------------------- the list
def conversations_dir(data_dir: Path) -> Path:
    """The folder holding the conversation files of a data directory."""
    folder = Path(data_dir) / CONVERSATIONS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def new_conversation_path(data_dir: Path) -> Path:
    """A fresh, unused file name for a new conversation."""
    folder = conversations_dir(data_dir)
    while True:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = folder / f"{stamp}-{secrets.token_hex(3)}{SUFFIX}"
        if not path.exists():
            return path


def conversation_summary(path: Path) -> ConversationSummary:
    """What the conversation list shows about one file (read-only, no checks)."""
    return _summary(Path(path))


def list_conversations(data_dir: Path) -> list[ConversationSummary]:
    """Every conversation file, most recently updated first (read-only, no checks)."""
    summaries = [_summary(p) for p in conversations_dir(data_dir).glob(f"*{SUFFIX}")]
    summaries.sort(key=lambda s: s.updated_at, reverse=True)
    return summaries


TITLE_WORDS = 8


def _summary(path: Path) -> ConversationSummary:
    """Title, time and size of a conversation, the same whichever branch is shown: the
    title is its first message as first written (an edit of the first message makes a
    branch, and the first wording stays the title) and the turns of every branch count."""
    from .branches import stashed_summary

    try:
        conn = read_only_connection(path)
        try:
            updated = conn.execute("SELECT value FROM meta WHERE key = 'updated_at'").fetchone()
            turns = conn.execute("SELECT COUNT(*) FROM turns").fetchone()[0]
            tokens = conn.execute("SELECT COALESCE(SUM(token_count), 0) FROM chunks").fetchone()[0]
            first = conn.execute(
                "SELECT c.turn_id, t.text FROM chunks c JOIN chunk_tokens t ON t.chunk_id = c.id "
                "WHERE c.role = 'user' AND c.chunk_index >= 0 ORDER BY c.start LIMIT 1"
            ).fetchone()
            stashed = stashed_summary(conn)
        finally:
            conn.close()
    except (sqlite3.Error, ValueError, zlib.error) as exc:  # a damaged stashed tail too
        return ConversationSummary(path, path.stem, path.stat().st_mtime, 0, 0, f"cannot be read: {exc}")
    candidates = ([tuple(first)] if first else []) + list(stashed.first_messages)
    text = min(candidates)[1] if candidates else ""
    words = re.findall(r"\S+", text)
    title = " ".join(words[:TITLE_WORDS]) + (" …" if len(words) > TITLE_WORDS else "")
    return ConversationSummary(
        path, title or "New conversation",
        json.loads(updated[0]) if updated else path.stat().st_mtime, turns + stashed.turns, tokens,
        stashed_branches=stashed.tails,
    )


# ---------------------------------------------------------------------- halo-weave --check
def check_file(path: Path) -> tuple[bool, list[str]]:
    """Verify a conversation file without changing it: ``(sound, lines to print)``.

    Runs the store's own refusal checks (not SQLite, integrity_check, foreign, too new),
    then every checksum and chunk shape.  Never writes, and leaves no -wal/-shm behind.
    """
    path = Path(path)
    if not path.is_file():
        return False, [f"{path}: no such file."]
    try:
        inspect(path)
    except StoreError as exc:
        return False, [str(exc)]
    conn = read_only_connection(path)
    try:
        integrity.register(conn)
        conn.text_factory = integrity.lenient_text
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "chunk_tokens" not in tables:
            return False, [f"{path.name} is an empty database, not a conversation yet."]
        lines = []
        if "row_checksums" not in tables:
            lines.append(f"{path.name} was written before checksums; they are added when it is next opened. "
                         "Only the chunks' shapes were checked.")
            damage = integrity.shape_problems(conn)
        else:
            damage = integrity.verify_all(conn)
        chunks = conn.execute("SELECT COUNT(*), COALESCE(SUM(token_count), 0) FROM chunks").fetchone()
    except sqlite3.Error as exc:
        return False, [f"{path.name} cannot be read: {exc}."]
    finally:
        conn.close()
    if damage:
        lines += [f"{path.name} is damaged: {len(damage)} damaged part(s):"]
        lines += [f"  {d.describe()}" for d in damage]
        return False, lines
    lines.append(f"{path.name} is sound: integrity check ok, {chunks[0]} chunks, {chunks[1]} tokens, "
                 "every checksum matches.")
    return True, lines
