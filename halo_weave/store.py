"""SQLite persistence: one file per conversation (WAL), DB-first, exact rehydration.

Errors are :class:`~halo_weave.errors.StoreError` and its subclasses (:mod:`halo_weave.errors`).

Layout (see :mod:`halo_weave.storage.schema`): ``turns``, ``chunks`` (metadata only), ``chunk_tokens``
(one row per chunk: ids and brightness as int32 BLOBs, texts as one string plus lengths),
``meta`` (JSON values: counters, system prompt), ``tool_data``, ``semantic_entries`` +
``semantic_fts`` (owned by the semantic index, which uses :attr:`ConversationStore.conn`).

Why a row per chunk rather than DESIGN.md's row per token: measured on this (shared)
2-core machine with 1,000,000 tokens, 30,000 live, reading the live tokens took 75-130 ms
from a ``tokens(position PK, ...)`` table through a ``(live, position)`` index and 13-18 ms
from chunk BLOBs, and the file held 38 vs 21 bytes per token; pruning or resurrecting a
chunk is one row update instead of one per token.  Positions need no column: a chunk's
tokens occupy ``start .. start + token_count``.  Chunk metadata lives in its own narrow
table so that opening a conversation does not read every dead chunk's tokens, and it is
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
from operator import itemgetter
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
from sqlite_utils import Database

from .errors import (  # noqa: F401 - re-exported for callers of the store
    StoreCorrupt, StoreDamaged, StoreError, StoreForeign, StoreJournalLost, StoreMissing, StoreRefused,
    StoreTooNew,
)
from .conversation import Chunk, ChunkTokens, Conversation, Framing, Turn
from .core.registry import NO_VALUE, ROLE_CODE, ChunkColumns, TurnColumns
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
from .storage import integrity
from .storage.wal_guard import DatabaseVanished, WalGuard, WalVanished
from .storage.schema import (
    migrations,
    pack_brightness,
    pack_tokens,
    unpack_token_rows,
    unpack_tokens,
)

_COUNTERS = ("next_position", "next_turn_id", "next_chunk_id")
_CHUNK_COLUMNS = (
    "id, turn_id, chunk_index, role, start, token_count, live, pinned, "
    "brightness_at_deletion, tool_result"
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
            if not exists:
                with store.transaction():
                    store._put_meta({"created_at": time.time(), "updated_at": time.time()})
            store._wal.remember()
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(f"Could not open {path.name}: {exc}") from exc
        return store

    def close(self) -> None:
        """Close the file (WAL content is checkpointed into it)."""
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

    def _found_damage(self, damage: list) -> None:
        """Record damage and stop saving: the file is kept as it is (read-only)."""
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
            self._found_damage(damage)
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
        """Rebuild the conversation exactly as last saved.

        A last turn left incomplete by a crash keeps its partial answer and is closed
        (its suffix framing is added and saved); one with no content is dropped.
        """
        held: list = []  # the records, read (and their checksums totalled) once the turns are sound

        def chunks_agree() -> bool:
            held.extend(self._records_and_check() or ())
            return bool(held)

        try:
            damage = integrity.verify_on_open(self.conn, chunks_agree=chunks_agree)
        except sqlite3.DatabaseError as exc:  # e.g. a column renamed by a flipped schema byte
            raise StoreCorrupt(
                f"{self.path.name} is damaged ({exc}). It was left untouched; restore it from a backup "
                "or an export."
            ) from exc
        records = held or None
        if damage:
            self._found_damage(damage)
            records = None  # read again, leaving the damaged records out
        elif self._drop_empty_open_turn():
            records = None
        conv = Conversation(settings, framing)
        meta = {k: _json_or_none(v) for k, v in self.conn.execute("SELECT key, value FROM meta")}
        for damaged in self.damage:  # a damaged value is not used (defaults instead)
            if damaged.table == "meta":
                meta.pop(damaged.key, None)
        conv.set_system_prompt(
            meta.get("system_prompt", ""), meta.get("system_ids", []), meta.get("system_texts", [])
        )
        skip = integrity.skipped(self.damage)  # damaged records are left out (read-only)
        if records is not None and not skip:
            turns, chunks = records
        else:
            turns = self._turn_columns(skip)
            chunks = self._chunk_columns(turns, skip)
        # (Rows of chunks left out are dropped there: only the live chunks' order is kept.)
        conv.rehydrate(turns, chunks, *unpack_token_rows(self._live_token_rows(chunks)))
        last = len(chunks) - 1
        end = int(chunks.start[last] + chunks.token_count[last]) if len(chunks) else 0
        chunk_end = int(chunks.id.max()) + 1 if len(chunks) else 0
        turn_end = int(turns.turn_id[-1]) + 1 if len(turns) else 0
        conv.next_position = max(meta.get("next_position", 0), end)
        conv.next_turn_id = max(meta.get("next_turn_id", 0), turn_end)
        conv.next_chunk_id = max(meta.get("next_chunk_id", 0), chunk_end)
        conv.chunk_loader = self.load_chunk_tokens
        self._streamed.clear()
        self._close_crashed_turn(conv)
        return conv

    # Opening reads every turn and chunk record as a few comma-joined columns and keeps
    # them as numpy columns (see halo_weave.core.registry): per-record Python work
    # dominated opening a long conversation (~20k chunks and ~5k turns per million tokens).
    def _turn_columns(self, skip: "integrity.Skipped | None" = None) -> TurnColumns:
        """Every turn record, ascending (but those ``skip`` names: damaged)."""
        where, args = _not_in("turn_id", skip.turns if skip else ())
        codes = " ".join(f"WHEN '{role}' THEN {code}" for role, code in ROLE_CODE.items())
        count, ids, roles, complete = self.conn.execute(
            f"SELECT count(*), group_concat(turn_id), group_concat(CASE role {codes} ELSE -1 END), "
            f"group_concat(complete) FROM (SELECT * FROM turns WHERE {where} ORDER BY turn_id)", args,
        ).fetchone()
        if not count:
            return TurnColumns.empty()
        roles = _ints(roles).astype(np.int8)
        if (roles < 0).any():
            raise StoreError(f"{self.path.name} is damaged: a turn has an unknown role.")
        # REAL as text would lose digits: the times come as floats.
        created = self.conn.execute(f"SELECT created_at FROM turns WHERE {where} ORDER BY turn_id", args).fetchall()
        return TurnColumns(
            _ints(ids), roles, np.fromiter(map(itemgetter(0), created), np.float64, count),
            _ints(complete) != 0,
        )

    def _records_and_check(self) -> tuple[TurnColumns, ChunkColumns] | None:
        """Every turn and chunk record, when the chunk records' checksum total agrees
        (summed from the same read: :func:`integrity.chunk_records_agree`); None when it
        does not or the records cannot be read as they are (the SQL checks then say why)."""
        try:
            turns = self._turn_columns()
            check: dict = {}
            chunks = self._chunk_columns(turns, check=check)
        except StoreError:
            return None
        return (turns, chunks) if check["agree"] else None

    def _chunk_columns(self, turns: TurnColumns, skip: "integrity.Skipped | None" = None,
                       check: dict | None = None) -> ChunkColumns:
        """Every chunk record, in position order (roles from their turns).

        ``skip`` (a damaged file, open read-only): chunks with damaged records or of damaged
        turns are left out, and those with damaged tokens are shown as pruned.  ``check``
        (a dict): its ``"agree"`` is set to whether the records' checksum total agrees.
        """
        where, args = _not_in("id", skip.chunks if skip else ())
        turn_where, turn_args = _not_in("turn_id", skip.turns if skip else ())
        live_where, live_args = _not_in("id", skip.tokens if skip else ())
        extra = ""
        if check is not None:
            codes = " ".join(f"WHEN '{role}' THEN {code}" for role, code in ROLE_CODE.items())
            extra = "".join(f", group_concat({c})" for c in integrity.CHUNK_CHECK_COLUMNS)
            extra += f", group_concat(CASE role {codes} ELSE -1 END), sum({integrity.ALL_INTEGERS_SQL})"
        row = self.conn.execute(
            "SELECT count(*), group_concat(id), group_concat(turn_id), group_concat(chunk_index), "
            "group_concat(start), group_concat(token_count), "
            f"group_concat(ifnull(brightness_at_deletion, {NO_VALUE})), "
            f"group_concat(((live != 0) AND {live_where}) + 2 * (pinned != 0) + 4 * (tool_result != 0)){extra} "
            f"FROM chunks WHERE {where} AND {turn_where}",
            (*live_args, *args, *turn_args),
        ).fetchone()
        if check is not None:  # every summed column an integer (a chunk's types' term holds)
            check["agree"] = (row[12] or 0) == row[0]
            if not check["agree"]:  # the values may not even be numbers: the SQL check says
                return ChunkColumns.empty()
        if not row[0]:
            return ChunkColumns.empty()
        values = list(map(_ints, row[1:12] if check is not None else row[1:8]))
        if check is not None:
            names = ("id", "turn_id", "chunk_index", "start", "token_count", "brightness_at_deletion",
                     "flags", *integrity.CHUNK_CHECK_COLUMNS, "role")
            check["agree"] = integrity.chunk_records_agree(
                self.conn, dict(zip(names, values)), list(ROLE_CODE), NO_VALUE)
            if not check["agree"]:
                return ChunkColumns.empty()
        ids, turn_ids, chunk_indices, starts, counts, at_deletion, flags = values[:7]
        live, pinned, tool_result = (flags & 1) != 0, (flags & 2) != 0, (flags & 4) != 0
        at = np.minimum(turns.turn_id.searchsorted(turn_ids), len(turns) - 1)
        known = turns.turn_id[at] == turn_ids if len(turns) else np.zeros(len(ids), bool)
        if not known.all():
            missing = int(turn_ids[np.argmin(known)])
            raise StoreError(f"{self.path.name} is damaged: a chunk belongs to missing turn {missing}.")
        chunks = ChunkColumns(ids, turn_ids, chunk_indices, turns.role[at], starts, counts, live, pinned,
                              at_deletion, tool_result)
        if not (np.diff(starts) > 0).all():  # SQLite does not promise the order
            chunks = chunks.take(np.argsort(starts, kind="stable"))
        return chunks

    def _live_token_rows(self, chunks: ChunkColumns) -> list[tuple]:
        """The live chunks' token rows, in position order."""
        rows = self.conn.execute(
            "SELECT t.chunk_id, t.token_ids, t.brightness, t.text, t.text_lengths "
            "FROM chunks c JOIN chunk_tokens t ON t.chunk_id = c.id WHERE c.live = 1"
        ).fetchall()
        order = chunks.id[chunks.live].tolist()
        if list(map(itemgetter(0), rows)) != order:  # read in id order: usually position order
            by_id = {row[0]: row for row in rows}
            rows = [by_id[c] for c in order if c in by_id]
        return rows

    def _drop_empty_open_turn(self) -> bool:
        """Drop a last turn left open with no content; True when one was dropped."""
        row = self.conn.execute("SELECT turn_id, complete FROM turns ORDER BY turn_id DESC LIMIT 1").fetchone()
        if row is None or row[1]:
            return False
        content = self.conn.execute(
            "SELECT COUNT(*) FROM chunks WHERE turn_id = ? AND chunk_index >= 0 AND token_count > 0",
            (row[0],),
        ).fetchone()[0]
        if content:
            return False
        with self.transaction():
            self.conn.execute(
                "DELETE FROM chunk_tokens WHERE chunk_id IN (SELECT id FROM chunks WHERE turn_id = ?)",
                (row[0],),
            )
            self.conn.execute("DELETE FROM chunks WHERE turn_id = ?", (row[0],))
            self.conn.execute("DELETE FROM turns WHERE turn_id = ?", (row[0],))
        return True

    def _close_crashed_turn(self, conv: Conversation) -> None:
        incomplete = [conv.turns[t] for t in conv.turns.incomplete()]
        if not incomplete:
            return
        last = conv.turns.last()
        for turn in incomplete:
            if turn.turn_id == last:
                conv.resume_turn(last)
                conv.end_turn()
            else:  # cannot happen through this API; closing it keeps positions ordered
                turn.complete = True
        if self.read_only:
            return
        with self.transaction():
            for turn in incomplete:
                self._write_turn(conv, turn)
            self._write_counters(conv)

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
            self._found_damage(damage)
            raise StoreDamaged(self.refusal and str(self.refusal))

    # ------------------------------------------------------------------ saving
    def save_system_prompt(self, conv: Conversation) -> None:
        with self.transaction():
            self._put_meta({
                "system_prompt": conv.system_prompt,
                "system_ids": [int(i) for i in conv.system_ids],
                "system_texts": list(conv.system_texts),
            })
            self._touch()

    def save_turn(self, conv: Conversation, turn: Turn) -> None:
        """Persist a whole turn (its chunks, framing and tokens) in one transaction.

        DB-first: call it for a user message before the message is shown, and for an
        answer once generation has ended.
        """
        with self.transaction():
            self._write_turn(conv, turn)
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
        ids, starts = conv.table.segments()
        pieces = np.split(conv.table.brightness, starts[1:])
        with self.transaction():
            self.conn.executemany(
                "UPDATE chunk_tokens SET brightness = ? WHERE chunk_id = ?",
                [(pack_brightness(p), int(c)) for c, p in zip(ids, pieces)],
            )
            self._touch()

    def save_chunks(self, conv: Conversation, chunks: Iterable[Chunk]) -> None:
        """Persist state, pin, brightness at deletion and brightness of ``chunks``.

        One transaction: use it for a prune, a resurrection, a pin or a deletion; inside
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
            self._touch()

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
            if tokens is not None:  # else long dead: its stored tokens are already right
                rows.append((chunk.id, *pack_tokens(tokens.token_ids, tokens.texts, tokens.brightness)))
        self.conn.executemany(
            "INSERT OR REPLACE INTO chunk_tokens (chunk_id, token_ids, brightness, text, text_lengths) "
            "VALUES (?, ?, ?, ?, ?)", rows,
        )

    def _write_counters(self, conv: Conversation) -> None:
        self._put_meta({
            "next_position": conv.next_position,
            "next_turn_id": conv.next_turn_id,
            "next_chunk_id": conv.next_chunk_id,
            "updated_at": time.time(),
        })


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):  # only in a damaged file (the checksum says which key)
        return None


def _chunk_row(c: Chunk) -> tuple:
    return (c.id, c.turn_id, c.sentence_id, c.role, c.start, c.token_count, int(c.live),
            int(c.pinned), c.brightness_at_deletion, int(c.tool_result))


def _not_in(column: str, keys) -> tuple[str, tuple]:
    """``column NOT IN (keys)`` as SQL and its one parameter (``1`` when there are none)."""
    if not keys:
        return "1", ()
    return f"{column} NOT IN (SELECT value FROM json_each(?))", (json.dumps(sorted(keys, key=repr)),)


def _ints(text: str) -> np.ndarray:
    """A comma-joined list of integers (``group_concat``) as an int64 array."""
    return np.fromstring(text, np.int64, sep=",")
