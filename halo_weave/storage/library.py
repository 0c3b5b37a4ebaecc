"""The conversation list's library: titles, last-used order, search, rename, delete with undo.

Qt-free.  Every conversation is one file in ``<data dir>/conversations`` (see
:mod:`halo_weave.store`); the library adds what a list beside the chat needs:

* a **title**: the one the user gave (meta key ``title`` in the file, so it travels
  with exports), else the start of the first user message;
* **last used**: the later of the file's last change and the last time it was opened
  here (kept in ``<data dir>/library.json``, so opening a conversation never writes
  to it);
* **search** by text: the title and every token of the conversation, pruned chunks
  included, case-insensitive;
* **delete** moves the file (with its ``-wal``/``-shm``) into ``<data dir>/trash``;
  :meth:`Library.restore` puts it back (the list's Undo).  Nothing is destroyed.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from . import integrity
from .files import ConversationSummary, conversation_summary, conversations_dir, list_conversations, read_only_connection

log = logging.getLogger("halo_weave.library")

LIBRARY_FILE = "library.json"
TRASH_FOLDER = "trash"
#: The longest title a user can give (longer ones are cut).
MAX_TITLE = 200
_SIDE_FILES = ("", "-wal", "-shm")


@dataclass(frozen=True)
class Entry:
    """One row of the conversation list."""

    path: Path
    title: str
    last_used: float
    turn_count: int
    token_count: int
    custom_title: bool = False
    error: str | None = None
    #: When the conversation last changed (the time the list shows; opening it is no change).
    updated_at: float = 0.0
    #: Branches besides the one shown (``turn_count`` counts the turns of all of them).
    stashed_branches: int = 0


@dataclass(frozen=True)
class Trashed:
    """A deleted conversation: where it was and where it waits for an undo."""

    original: Path
    trashed: Path
    title: str


class Library:
    """The conversations of one data directory; see the module docstring."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)

    # ------------------------------------------------------------------ reading
    def entries(self, query: str = "") -> list[Entry]:
        """The conversations, last used first; only those matching ``query`` when given."""
        opened = self._opened()
        entries = [self._entry(s, opened) for s in list_conversations(self.data_dir)]
        entries.sort(key=lambda e: e.last_used, reverse=True)
        query = query.strip()
        if query:
            entries = [e for e in entries if self.matches(e, query)]
        return entries

    def title_of(self, path: Path) -> str:
        """The title the list shows for ``path`` (its own, else its first message; "" when
        it is not in the library)."""
        path = Path(path)
        if not path.is_file():
            return ""
        summary = conversation_summary(path)
        if summary.error is not None:
            return ""
        return self._custom_title(path) or summary.title

    def matches(self, entry: Entry, query: str) -> bool:
        """Whether the title or any text of the conversation contains ``query``."""
        needle = query.casefold()
        if needle in entry.title.casefold():
            return True
        try:
            conn = read_only_connection(entry.path)
        except sqlite3.Error:
            return False
        try:
            # SQLite's lower() folds ASCII only: a first cut there, then Python folds.
            rows = conn.execute("SELECT text FROM chunk_tokens").fetchall()
        except sqlite3.Error:
            return False
        finally:
            conn.close()
        return any(needle in text.casefold() for (text,) in rows)

    def _entry(self, summary: ConversationSummary, opened: dict[str, float]) -> Entry:
        custom = self._custom_title(summary.path) if summary.error is None else None
        last_used = max(summary.updated_at, opened.get(str(summary.path), 0.0))
        return Entry(summary.path, custom or summary.title, last_used, summary.turn_count,
                     summary.token_count, custom is not None, summary.error, summary.updated_at,
                     summary.stashed_branches)

    @staticmethod
    def _custom_title(path: Path) -> str | None:
        try:
            conn = read_only_connection(path)
            try:
                row = conn.execute("SELECT value FROM meta WHERE key = 'title'").fetchone()
            finally:
                conn.close()
        except sqlite3.Error:
            return None
        if row is None:
            return None
        try:
            title = json.loads(row[0])
        except ValueError:
            return None
        return title if isinstance(title, str) and title.strip() else None

    # ------------------------------------------------------------------ writing
    def mark_opened(self, path: Path, when: float | None = None) -> None:
        """Record that ``path`` was opened now (it moves to the top of the list)."""
        opened = self._opened()
        opened[str(Path(path))] = time.time() if when is None else when
        self._save_opened(opened)

    def rename(self, path: Path, title: str) -> str:
        """Give ``path`` a title (an empty one returns to the automatic title)."""
        title = " ".join(title.split())[:MAX_TITLE]
        # A short write through its own connection: the app may hold the file open (WAL).
        conn = sqlite3.connect(str(path), timeout=10, isolation_level=None)
        integrity.register(conn)  # the row-checksum triggers call it
        try:
            if title:
                conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('title', ?)", (json.dumps(title),))
            else:
                conn.execute("DELETE FROM meta WHERE key = 'title'")
        finally:
            conn.close()
        return title

    def delete(self, path: Path, title: str = "") -> Trashed:
        """Move a conversation into the trash folder; :meth:`restore` undoes it."""
        path = Path(path)
        trash = self.data_dir / TRASH_FOLDER
        trash.mkdir(parents=True, exist_ok=True)
        target = trash / f"{time.strftime('%Y%m%d-%H%M%S')}-{path.name}"
        n = 1
        while target.exists():
            target = trash / f"{time.strftime('%Y%m%d-%H%M%S')}-{n}-{path.name}"
            n += 1
        for suffix in _SIDE_FILES:
            source = Path(f"{path}{suffix}")
            if source.exists():
                os.replace(source, Path(f"{target}{suffix}"))
        opened = self._opened()
        if opened.pop(str(path), None) is not None:
            self._save_opened(opened)
        return Trashed(path, target, title or path.stem)

    def restore(self, item: Trashed) -> Path:
        """Put a deleted conversation back where it was."""
        if item.original.exists():
            raise FileExistsError(f"{item.original.name} exists again; the deleted copy stays in {item.trashed.parent}")
        for suffix in _SIDE_FILES:
            source = Path(f"{item.trashed}{suffix}")
            if source.exists():
                os.replace(source, Path(f"{item.original}{suffix}"))
        return item.original

    # ------------------------------------------------------------------ the opened log
    def _opened(self) -> dict[str, float]:
        try:
            data = json.loads((self.data_dir / LIBRARY_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        opened = data.get("opened", {}) if isinstance(data, dict) else {}
        return {k: float(v) for k, v in opened.items() if isinstance(v, (int, float))}

    def _save_opened(self, opened: dict[str, float]) -> None:
        folder = conversations_dir(self.data_dir)
        # Forget files that are gone, so the log does not grow forever.
        opened = {k: v for k, v in opened.items() if Path(k).parent != folder or Path(k).exists()}
        target = self.data_dir / LIBRARY_FILE
        tmp = target.with_name(f".{LIBRARY_FILE}.tmp")
        try:
            tmp.write_text(json.dumps({"opened": opened}), encoding="utf-8")
            os.replace(tmp, target)
        except OSError as exc:
            log.warning("cannot write %s: %s", target, exc)
