"""SQLite persistence: one file per conversation (WAL), DB-first, exact rehydration.

Errors are :class:`~halo_weave.errors.StoreError` and its subclasses (:mod:`halo_weave.errors`).

Layout (see :mod:`halo_weave.storage.schema`): ``turns``, ``chunks`` (metadata only), ``chunk_tokens``
(one row per chunk: ids and brightness as int32 BLOBs, texts as one string plus lengths),
``meta`` (JSON values: counters, system prompt), ``tool_data``, ``recalls`` (what each message
recalled: :mod:`.storage.recall_rows`), ``semantic_entries`` +
``semantic_fts`` (owned by the semantic index, which uses :attr:`ConversationStore.conn`).

Why a row per chunk rather than a row per token: measured on this (shared)
2-core machine with 1,000,000 tokens, 30,000 live, reading the live tokens took 75-130 ms
from a ``tokens(position PK, ...)`` table through a ``(live, position)`` index and 13-18 ms
from chunk BLOBs, and the file held 38 vs 21 bytes per token; pruning or resurrecting a
chunk is one row update instead of one per token.  Positions need no column: a chunk's
tokens occupy ``start .. start + token_count``.  Chunk metadata lives in its own narrow
table so that opening a conversation does not read every pruned chunk's tokens, and it is
read as one row of joined columns (per-row Python cost dominates opening: ~20k chunks
per million tokens).

Durability: WAL with ``synchronous=NORMAL``.  A commit survives the app being killed at
any moment (the crash-safety test kills a writer 50 times); on power loss the last few
commits may roll back but the file stays consistent.  ``FULL`` would add an fsync to
every streamed batch for protection against power loss only.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
from sqlite_utils import Database

from .errors import (  # noqa: F401 - re-exported for callers of the store
    StoreCorrupt, StoreDamaged, StoreError, StoreForeign, StoreJournalLost, StoreMissing, StoreRefused,
    StoreTooNew,
)
from .conversation import Chunk, ChunkTokens, Conversation, Framing, Turn
from .settings import Settings
from .storage.files import (  # noqa: F401 - the conversation list, importable from here too
    CONVERSATIONS_FOLDER,
    SUFFIX,
    ConversationSummary,
    conversations_dir,
    inspect,
    list_conversations,
    new_conversation_path,
)
from .storage.sql import batches, transaction
from .storage import conversation_loader, integrity, recall_rows, record_snapshot
from .storage.wal_guard import DatabaseVanished, WalGuard, WalVanished
from .storage.schema import (
    migrations,
    pack_brightness,
    pack_tokens,
    unpack_tokens,
)

_COUNTERS = ("next_position", "next_turn_id", "next_chunk_id")
_CHUNK_COLUMNS = (
    "id, turn_id, chunk_index, role, start, token_count, live, pinned, "
    "brightness_at_prune, tool_result"
)


class ConversationStore:
    """One open conversation file.  Every ``save_*`` method is one transaction."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self.conn = conn
        self.db = Database(conn)
        #: Serialises transactions when the connection is shared with a worker thread.
        self.lock = threading.RLock()
        self._streamed: dict[int, int] = {}  # chunk id -> tokens written while streaming
        #: Damaged rows found on open or on reading tokens back (:mod:`halo_weave.storage.integrity`).
        self.damage: list[integrity.Damage] = []
        #: Why saving is refused (damage found, or the -wal file vanished); None = writable.
        self.refusal: StoreError | None = None
        self._wal = WalGuard(path)
        #: The records' change counter when opened: closing keeps a snapshot of them if it moved.
        self._opened_at: int | None = None
        #: Opening read the turn and chunk records from their snapshot: their tables are
        #: checked before the first write (:meth:`check_records_before_writing`).
        self._records_unchecked = False

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | Path, *, create: bool = True) -> "ConversationStore":
        """Open (or create) a conversation file, refusing anything unsafe to write to."""
        path = Path(path)
        exists = path.exists() and path.stat().st_size > 0
        if not exists:
            if not create:
                raise StoreMissing(f"There is no conversation at {path}.")
            path.parent.mkdir(parents=True, exist_ok=True)
        else:
            inspect(path)
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        integrity.register(conn)  # the checksum triggers call it
        conn.text_factory = integrity.lenient_text
        try:
            conn.execute("PRAGMA busy_timeout = 5000")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            store = cls(path, conn)
            migrations.apply(store.db)
            store._opened_at = record_snapshot.change_count(conn)
            if not exists:
                with store.transaction():
                    store._put_meta({"created_at": time.time(), "updated_at": time.time()})
            store._wal.remember()
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(f"Could not open {path.name}: {exc}") from exc
        return store

    def close(self) -> None:
        """Close the file (WAL content is checkpointed into it), once a worker thread
        reading it under :attr:`lock` (the semantic index loading) is done: closing the
        connection under a running statement crashes SQLite."""
        with self.lock:
            try:
                record_snapshot.refresh(self, self._opened_at)
            finally:
                self.conn.close()

    def __enter__(self) -> "ConversationStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One transaction on this file (:func:`halo_weave.storage.sql.transaction`).

        Re-entrant: inside an open one it is a savepoint, so every ``save_*`` call can be
        part of a larger transaction::

            with store.transaction() as db:       # one commit for both
                store.save_chunks(conv, resurrected)
                db.executemany(...)
        """
        with self.lock:
            if self._records_unchecked and not self.conn.in_transaction:
                self._records_unchecked = False
                damage = integrity.verify_records(self.conn)
                if damage:
                    self.record_damage(damage)
            if self.refusal is not None and not self.conn.in_transaction:
                raise type(self.refusal)(str(self.refusal))
            with transaction(self.conn, before_commit=self._check_wal) as conn:
                yield conn

    def _check_wal(self) -> None:
        """Refuse to commit into a -wal file that another program deleted or replaced."""
        try:
            self._wal.check()
        except WalVanished as exc:
            self.conn.execute("ROLLBACK")
            if isinstance(exc, DatabaseVanished):
                rescued = self._wal.rescue_database(self.conn)
                kept = ("Everything saved before that was written back to it from memory; "
                        if rescued else "It could not be written back; export the conversation now; ")
            else:
                rescued = WalGuard.rescue(self.conn)
                kept = ("Everything saved before that was written into the conversation file; "
                        if rescued else "Changes since the last checkpoint may be lost; ")
            self.refusal = StoreJournalLost(
                f"Saving stopped: {exc} (a sync tool or cleaner?) while the conversation was open. "
                + kept + "this last change was not saved. Stop that program from touching the "
                "conversations folder, then reopen the conversation."
            )
            raise type(self.refusal)(str(self.refusal)) from exc

    def check_records_before_writing(self) -> None:
        """Opening read the turn and chunk records from their snapshot, not their tables
        (:mod:`.storage.record_snapshot`): check the tables before anything is written on
        top of them, so that a record damaged there is named (and the file kept read-only)
        instead of being copied into a branch or a saved cache as if sound."""
        self._records_unchecked = True

    def record_damage(self, damage: list) -> None:
        """Record damage (:class:`~halo_weave.storage.integrity.Damage` found in this file)
        and stop saving: the file is kept as it is (read-only)."""
        self.damage += [d for d in damage if d not in self.damage]
        self.refusal = StoreDamaged(integrity.damage_message(self.path.name, self.damage))
        self.conn.execute("PRAGMA query_only = 1")

    @property
    def read_only(self) -> bool:
        """True once saving is refused (damage found, or the -wal file vanished)."""
        return self.refusal is not None

    # ------------------------------------------------------------------ meta & tools
    def get_meta(self, key: str, default: Any = None) -> Any:
        """A JSON value stored under ``key`` (``default`` when absent)."""
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def set_meta(self, key: str, value: Any) -> None:
        """Store a JSON-serialisable value under ``key``."""
        with self.transaction():
            self._put_meta({key: value})

    def _put_meta(self, values: dict[str, Any]) -> None:
        self.conn.executemany(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
            [(k, json.dumps(v)) for k, v in values.items()],
        )

    def load_tool_data(self, name: str) -> dict | None:
        """The tool's saved JSON document (the model's notes), or None."""
        row = self.conn.execute("SELECT json FROM tool_data WHERE name = ?", (name,)).fetchone()
        damage = integrity.verify_row(self.conn, "tool_data", name) if row else []
        if damage:
            self.record_damage(damage)
            raise StoreDamaged(str(self.refusal))
        return json.loads(row[0]) if row else None

    def save_tool_data(self, name: str, obj: Any) -> None:
        with self.transaction():
            self.conn.execute(
                "INSERT OR REPLACE INTO tool_data (name, json) VALUES (?, ?)",
                (name, json.dumps(obj)),
            )
            self._touch()

    def _touch(self) -> None:
        self._put_meta({"updated_at": time.time()})

    # ------------------------------------------------------------------ rehydration
    def load(self, settings: Settings | None = None, framing: Framing | None = None) -> Conversation:
        """Rebuild the conversation exactly as last saved (:func:`.storage.conversation_loader.load`).

        A last turn left incomplete by a crash keeps its partial answer and is closed
        (its suffix framing is added and saved); one with no content is dropped.
        """
        conv = conversation_loader.load(self, settings, framing)
        self._streamed.clear()
        return conv

    def load_chunk_tokens(self, chunk_ids: Sequence[int]) -> dict[int, ChunkTokens]:
        """Tokens of the given chunks (the conversation's ``chunk_loader``)."""
        found = {}
        for batch in batches(list(chunk_ids)):
            marks = ",".join("?" * len(batch))
            for chunk_id, *blobs in self.conn.execute(
                "SELECT chunk_id, token_ids, brightness, text, text_lengths "
                f"FROM chunk_tokens WHERE chunk_id IN ({marks})", batch,
            ):
                found[chunk_id] = unpack_tokens(*blobs)
        self._verify_read(chunk_ids)
        missing = set(chunk_ids) - set(found)
        if missing:
            raise StoreError(f"The conversation file has no tokens for chunks {sorted(missing)}.")
        return found

    def chunk_texts(self, chunk_ids: Sequence[int]) -> dict[int, str]:
        """Plain text of the given chunks (graveyard previews, indexing)."""
        found = {}
        for batch in batches(list(chunk_ids)):
            marks = ",".join("?" * len(batch))
            found.update(self.conn.execute(
                f"SELECT chunk_id, text FROM chunk_tokens WHERE chunk_id IN ({marks})", batch
            ))
        self._verify_read(chunk_ids)
        return found

    def _verify_read(self, chunk_ids: Sequence[int]) -> None:
        """Raise :class:`StoreDamaged` naming the chunks whose stored tokens fail their checksum."""
        damage = integrity.verify_chunks(self.conn, chunk_ids)
        if damage:
            self.record_damage(damage)
            raise StoreDamaged(self.refusal and str(self.refusal))

    # ------------------------------------------------------------------ saving
    def save_system_prompt(self, conv: Conversation, own: str | None = None) -> None:
        """The system prompt as framed (text, ids, pieces); ``own``: the conversation's own
        prompt as the user wrote it (meta ``prompt``), saved with it."""
        values = {
            "system_prompt": conv.system.text,
            "system_ids": [int(i) for i in conv.system.ids],
            "system_texts": list(conv.system.texts),
        }
        if own is not None:
            values["prompt"] = own
        with self.transaction():
            self._put_meta(values)
            self._touch()

    def save_turn(self, conv: Conversation, turn: Turn) -> None:
        """Persist a whole turn (its chunks, framing and tokens) in one transaction.

        DB-first: call it for a user message before the message is shown, and for an
        answer once generation has ended.  A message's recall (``conv.recalls``) is saved
        with it.
        """
        with self.transaction():
            self._write_turn(conv, turn)
            if conv.recalls.of(turn.turn_id):
                recall_rows.write(self.conn, conv, turn.turn_id)
            self._write_counters(conv)
        for chunk_id in turn.chunk_ids:
            self._streamed.pop(chunk_id, None)

    def save_stream_progress(self, conv: Conversation) -> None:
        """Write the open turn's tokens added since the last call (one transaction).

        Call every ~16 streamed tokens; the turn is stored as incomplete until
        :meth:`save_turn` closes it.
        """
        turn = conv.open_turn
        if turn is None:
            return
        changed = [
            conv.chunks[c] for c in turn.chunk_ids
            if self._streamed.get(c) != conv.chunks[c].token_count
        ]
        with self.transaction():
            self._write_turn_row(turn)
            self._write_chunks(conv, changed)
            self._write_counters(conv)
        for chunk in changed:
            self._streamed[chunk.id] = chunk.token_count

    def save_brightness(self, conv: Conversation) -> None:
        """Persist the brightness of every live token (after a generation)."""
        ids, starts = conv.table.chunk_spans()
        per_chunk = np.split(conv.table.brightness, starts[1:])
        with self.transaction():
            self.conn.executemany(
                "UPDATE chunk_tokens SET brightness = ? WHERE chunk_id = ?",
                [(pack_brightness(p), int(c)) for c, p in zip(ids, per_chunk)],
            )
            self._touch()

    def save_chunks(self, conv: Conversation, chunks: Iterable[Chunk]) -> None:
        """Persist state, pin, brightness at prune and brightness of ``chunks``.

        One transaction: use it for a prune, a resurrection, a pin or a prune by hand; inside
        :meth:`transaction` it joins the caller's transaction.
        """
        with self.transaction():
            self._write_chunks(conv, list(chunks))
            self._touch()

    def save_merge(self, conv: Conversation, kept: Chunk, absorbed: Chunk) -> None:
        """Persist a merge: ``kept`` grows, ``absorbed`` (and its index entry) go."""
        with self.transaction():
            for table, column in (("semantic_entries", "chunk_id"), ("chunk_tokens", "chunk_id"), ("chunks", "id")):
                self.conn.execute(f"DELETE FROM {table} WHERE {column} = ?", (absorbed.id,))
            self._write_chunks(conv, [kept])
            recall_rows.rewrite_chunk(self.conn, conv, kept, absorbed)
            self._touch()

    def save_closed_turns(self, conv: Conversation, turns: Iterable[Turn]) -> None:
        """Persist ``turns`` whole (their rows, chunks and tokens) and the id counters in
        one transaction: the turns a crash left open, once opening closed them."""
        with self.transaction():
            for turn in turns:
                self._write_turn(conv, turn)
            self._write_counters(conv)

    # ------------------------------------------------------------------ row writers
    def _write_turn(self, conv: Conversation, turn: Turn) -> None:
        self._write_turn_row(turn)
        self._write_chunks(conv, [conv.chunks[c] for c in turn.chunk_ids])

    def _write_turn_row(self, turn: Turn) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO turns (turn_id, role, created_at, complete) VALUES (?, ?, ?, ?)",
            (turn.turn_id, turn.role, turn.created_at, int(turn.complete)),
        )

    def _write_chunks(self, conv: Conversation, chunks: list[Chunk]) -> None:
        self.conn.executemany(
            f"INSERT OR REPLACE INTO chunks ({_CHUNK_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)",
            [_chunk_row(c) for c in chunks],
        )
        rows = []
        for chunk in chunks:
            tokens = conv.tokens_in_memory(chunk.id)
            if tokens is not None:  # else long pruned: its stored tokens are already right
                rows.append((chunk.id, *pack_tokens(tokens.token_ids, tokens.texts, tokens.brightness)))
        self.conn.executemany(
            "INSERT OR REPLACE INTO chunk_tokens (chunk_id, token_ids, brightness, text, text_lengths) "
            "VALUES (?, ?, ?, ?, ?)", rows,
        )
        recall_rows.unmark(self.conn, chunks)

    def _write_counters(self, conv: Conversation) -> None:
        self._put_meta({
            "next_position": conv.next_position,
            "next_turn_id": conv.next_turn_id,
            "next_chunk_id": conv.next_chunk_id,
            "updated_at": time.time(),
        })


def _chunk_row(c: Chunk) -> tuple:
    return (c.id, c.turn_id, c.chunk_index, c.role, c.start, c.token_count, int(c.live),
            int(c.pinned), c.brightness_at_prune, int(c.tool_result))
