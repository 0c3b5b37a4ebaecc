"""Rehydration: a conversation file read back into a :class:`~halo_weave.conversation.Conversation`.

The functions take the open :class:`~halo_weave.store.ConversationStore` (``store``);
:meth:`ConversationStore.load` is the way in.  Opening checks the file's checksums while
it reads the records (:mod:`.integrity`), leaves damaged records out (the file is then
read-only), drops a last turn a crash left open and empty, and closes one that has a
partial answer.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from ..conversation import Conversation, Framing
from ..core.registry import ChunkColumns, TurnColumns
from ..errors import StoreCorrupt, StoreError
from ..settings import Settings
from . import branches, integrity, recall_rows, record_snapshot
from .record_columns import chunk_columns, live_token_rows, turn_columns
from .schema import unpack_token_rows


def load(store, settings: Settings | None = None, framing: Framing | None = None) -> Conversation:
    """Rebuild the conversation exactly as last saved.

    A last turn left incomplete by a crash keeps its partial answer and is closed
    (its suffix framing is added and saved); one with no content is dropped.  A branch
    point a crash left without a tail shows its newest stashed one
    (:func:`.branches.show_orphaned`).
    """
    held: list = []  # the records, read (and their checksums totalled) once the turns are sound
    live_rows: list = []  # the live chunks' token rows, read by the checks
    checked: list = []  # the change counter when the records were read from their tables

    def records_current() -> bool:
        held.extend(record_snapshot.read(store.conn) or ())
        return bool(held)

    def chunks_agree() -> bool:
        checked.append(record_snapshot.change_count(store.conn))
        held.extend(records_and_check(store) or ())
        return bool(held)

    try:
        damage = integrity.verify_on_open(store.conn, chunks_agree=chunks_agree, live_rows=live_rows,
                                          records_current=records_current)
    except sqlite3.DatabaseError as exc:  # e.g. a column renamed by a flipped schema byte
        raise StoreCorrupt(
            f"{store.path.name} is damaged ({exc}). It was left untouched; restore it from a backup "
            "or an export."
        ) from exc
    records = held or None
    if held and not checked:  # from the snapshot: the tables are checked before a write
        store.check_records_before_writing()
    if damage:
        store.record_damage(damage)
        records = None  # read again, leaving the damaged records out
    elif _drop_empty_open_turn(store) | branches.show_orphaned(store):
        records = None
    meta = {k: _json_or_none(v) for k, v in store.conn.execute("SELECT key, value FROM meta")}
    for damaged in store.damage:  # a damaged value is not used (defaults instead)
        if damaged.table == "meta":
            meta.pop(damaged.key, None)
    names = meta.get("role_names")
    if isinstance(names, dict):
        names = {role: name.strip()[:80] for role, name in names.items()
                 if role in ("user", "assistant") and isinstance(name, str) and name.strip()}
    skip = integrity.skipped(store.damage)  # damaged records are left out (read-only)
    if records is not None and not skip:
        turns, chunks = records  # the file is as the checks read it: their rows are current
        if checked and held:  # read from the tables and sound: the next opening reads them at once
            record_snapshot.save(store, checked[0], turns, chunks)
        rows = live_token_rows(store.conn, chunks, live_rows if live_rows else None)
    else:
        turns = turn_columns(store.conn, store.path.name, skip)
        chunks = chunk_columns(store.conn, store.path.name, turns, skip)
        rows = live_token_rows(store.conn, chunks)
    # (Rows of chunks left out are dropped there: only the live chunks' order is kept.)
    conv = Conversation.from_records(
        turns, chunks, unpack_token_rows(rows), settings=settings, framing=framing,
        system=(meta.get("system_prompt", ""), meta.get("system_ids", []), meta.get("system_texts", [])),
        role_names=names if isinstance(names, dict) else None,
        counters=(meta.get("next_position", 0), meta.get("next_turn_id", 0), meta.get("next_chunk_id", 0)),
        recalls=recall_rows.read(store.conn, [d.key for d in store.damage if d.table == "recalls"]),
        chunk_loader=store.load_chunk_tokens,
    )
    closed = conv.close_crashed_turns()
    if closed and not store.read_only:
        store.save_closed_turns(conv, closed)
    return conv

# Opening reads every turn and chunk record as a few comma-joined columns and keeps
# them as numpy columns (see halo_weave.core.registry): per-record Python work
# dominated opening a long conversation (~20k chunks and ~5k turns per million tokens).
def records_and_check(store) -> tuple[TurnColumns, ChunkColumns] | None:
    """Every turn and chunk record, when the chunk records' checksum total agrees
    (summed from the same read: :func:`integrity.chunk_records_agree`); None when it
    does not or the records cannot be read as they are (the SQL checks then say why)."""
    try:
        turns = turn_columns(store.conn, store.path.name)
        check: dict = {}
        chunks = chunk_columns(store.conn, store.path.name, turns, check=check)
    except StoreError:
        return None
    return (turns, chunks) if check["agree"] else None

def _drop_empty_open_turn(store) -> bool:
    """Drop a last turn left open with no content; True when one was dropped."""
    row = store.conn.execute("SELECT turn_id, complete FROM turns ORDER BY turn_id DESC LIMIT 1").fetchone()
    if row is None or row[1]:
        return False
    content = store.conn.execute(
        "SELECT COUNT(*) FROM chunks WHERE turn_id = ? AND chunk_index >= 0 AND token_count > 0",
        (row[0],),
    ).fetchone()[0]
    if content:
        return False
    with store.transaction():
        store.conn.execute(
            "DELETE FROM chunk_tokens WHERE chunk_id IN (SELECT id FROM chunks WHERE turn_id = ?)",
            (row[0],),
        )
        store.conn.execute("DELETE FROM chunks WHERE turn_id = ?", (row[0],))
        store.conn.execute("DELETE FROM turns WHERE turn_id = ?", (row[0],))
    return True

def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):  # only in a damaged file (the checksum says which key)
        return None
