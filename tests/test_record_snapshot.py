"""Opening reads the turn and chunk records from their snapshot only while it is current
and sound; otherwise from the tables, checked.  Either way the conversation is the same."""

from __future__ import annotations

import random
import shutil
import sqlite3
import zlib
from pathlib import Path

import numpy as np
import pytest

from conversation_writer import FRAMING, settings
from halo_weave.storage import record_snapshot
from halo_weave.store import ConversationStore, StoreDamaged

from hostile.helpers import build_conversation, what_the_user_sees


def everything(store: ConversationStore) -> tuple:
    """Every turn and chunk record, every live token column, and the id counters."""
    conv = store.load(settings(), FRAMING)
    table = {name: col.tolist() for name, col in conv.table.snapshot().items()}
    return ([repr(conv.chunks[i]) for i in sorted(conv.chunks)],
            [repr(conv.turns[t]) for t in sorted(conv.turns)], table,
            (conv.next_position, conv.next_turn_id, conv.next_chunk_id))


def stored(chunk) -> tuple:
    """A chunk's record as the file keeps it (the session-only marks left out)."""
    return (chunk.id, chunk.turn_id, chunk.chunk_index, chunk.role, chunk.start, chunk.token_count,
            chunk.live, chunk.pinned, chunk.brightness_at_prune, chunk.tool_result)


def snapshot_of(path: Path):
    conn = sqlite3.connect(path)
    try:
        return record_snapshot.read(conn)
    finally:
        conn.close()


def sql(path: Path, *statements: str) -> None:
    """Statements run by a program that knows nothing of Halo Weave."""
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Path, tuple, dict]:
    """A conversation closed after changes (so with a current snapshot), what a table read
    of it gives, and what the user sees."""
    path = tmp_path_factory.mktemp("snap") / "talk.halo.db"
    build_conversation(path)
    assert snapshot_of(path) is not None  # closing after changes kept one
    plain = path.with_name("plain.halo.db")
    shutil.copy(path, plain)
    sql(plain, "DELETE FROM record_snapshot")
    with ConversationStore.open(plain, create=False) as store:
        from_tables = everything(store)
    with ConversationStore.open(path, create=False) as store:
        seen = what_the_user_sees(store)
    return path, from_tables, seen


def copy_of(saved, tmp_path) -> Path:
    path = tmp_path / "talk.halo.db"
    shutil.copy(saved[0], path)
    return path


def test_the_snapshot_reads_back_the_same_conversation_as_the_tables(saved, tmp_path):
    path = copy_of(saved, tmp_path)
    with ConversationStore.open(path, create=False) as store:
        assert everything(store) == saved[1]
        assert not store.damage


def test_a_table_read_keeps_a_snapshot_for_the_next_opening(saved, tmp_path):
    path = copy_of(saved, tmp_path)
    sql(path, "DELETE FROM record_snapshot")
    with ConversationStore.open(path, create=False) as store:
        assert everything(store) == saved[1]
    turns, chunks = snapshot_of(path)
    assert len(chunks) == len(saved[1][0]) and len(turns) == len(saved[1][1])
    with ConversationStore.open(path, create=False) as store:
        assert everything(store) == saved[1]


@pytest.mark.parametrize("damage", ["flip", "crc", "version", "truncated", "empty"])
def test_a_damaged_or_foreign_snapshot_is_not_used(saved, tmp_path, damage):
    path = copy_of(saved, tmp_path)
    conn = sqlite3.connect(path)
    data = bytearray(conn.execute("SELECT data FROM record_snapshot").fetchone()[0])
    if damage == "flip":  # a role changed inside the BLOB: its CRC no longer agrees
        data[len(data) // 2] ^= 0x04
        conn.execute("UPDATE record_snapshot SET data = ?", (bytes(data),))
    elif damage == "crc":
        conn.execute("UPDATE record_snapshot SET crc = crc + 1")
    elif damage == "version":  # an older format, with a CRC that agrees
        data[4:8] = (record_snapshot.VERSION - 1).to_bytes(4, "little")
        conn.execute("UPDATE record_snapshot SET data = ?, crc = ?", (bytes(data), zlib.crc32(bytes(data))))
    elif damage == "truncated":
        conn.execute("UPDATE record_snapshot SET data = ?, crc = ?", (bytes(data[:-3]), zlib.crc32(bytes(data[:-3]))))
    else:
        conn.execute("UPDATE record_snapshot SET data = X'', crc = 0")
    conn.commit()
    conn.close()
    assert snapshot_of(path) is None
    with ConversationStore.open(path, create=False) as store:
        assert everything(store) == saved[1]
        assert not store.damage
    assert snapshot_of(path) is not None  # the table read replaced it


def test_a_change_the_snapshot_did_not_see_is_read_from_the_tables(saved, tmp_path):
    """Pruned, then the app killed before closing: the stale snapshot is not used."""
    path = copy_of(saved, tmp_path)
    store = ConversationStore.open(path, create=False)
    conv = store.load(settings(), FRAMING)
    victim = next(c.id for c in conv.live_chunks() if not c.framing and not c.pinned)
    store.save_chunks(conv, conv.prune_chunk(victim))
    store.conn.close()  # killed: no closing step ran
    assert snapshot_of(path) is None  # stale (the counter moved)
    with ConversationStore.open(path, create=False) as store:
        conv = store.load(settings(), FRAMING)
        assert not conv.chunks[victim].live


@pytest.mark.parametrize("change", [
    "UPDATE chunks SET start = start + 1 WHERE id = {victim}",
    "UPDATE chunks SET live = 1 - live WHERE id = {victim}",
    "UPDATE turns SET role = 'assistant' WHERE turn_id = (SELECT turn_id FROM chunks WHERE id = {victim})",
])
def test_a_record_edited_behind_the_apps_back_is_still_named(saved, tmp_path, change):
    """A program that drops the checksum trigger in its way (as a foreign tool would) and
    edits a record: the counter moves, so opening reads the tables and names the record."""
    path = copy_of(saved, tmp_path)
    victim = sorted(saved[2]["chunks"])[3]
    table = "turns" if "UPDATE turns" in change else "chunks"
    sql(path, f"DROP TRIGGER {table}_sum_au", change.format(victim=victim))
    with ConversationStore.open(path, create=False) as store:
        store.load(settings(), FRAMING)
        assert store.damage and store.read_only


def test_a_record_deleted_behind_the_apps_back_is_gone_when_opened(saved, tmp_path):
    path = copy_of(saved, tmp_path)
    victim = sorted(saved[2]["chunks"])[3]
    sql(path, "DROP TRIGGER chunks_sum_ad", f"DELETE FROM chunks WHERE id = {victim}")
    with ConversationStore.open(path, create=False) as store:
        conv = store.load(settings(), FRAMING)
        assert victim not in conv.chunks


def test_a_file_whose_counting_triggers_are_gone_is_read_from_the_tables(saved, tmp_path):
    path = copy_of(saved, tmp_path)
    victim = sorted(saved[2]["chunks"])[3]
    sql(path, *(f"DROP TRIGGER {name}" for name in record_snapshot.TRIGGERS), "DROP TRIGGER chunks_sum_au",
        f"UPDATE chunks SET pinned = 1 - pinned WHERE id = {victim}")
    assert snapshot_of(path) is None
    with ConversationStore.open(path, create=False) as store:
        store.load(settings(), FRAMING)
        assert [d.key for d in store.damage] == [victim] and store.read_only


def test_a_file_from_before_the_snapshot_opens_the_same_and_gets_one(saved, tmp_path):
    path = copy_of(saved, tmp_path)
    sql(path, *(f"DROP TRIGGER {name}" for name in record_snapshot.TRIGGERS),
        "DROP TABLE record_snapshot", "DROP TABLE record_state",
        "DELETE FROM _sqlite_migrations WHERE name = 'm011_record_snapshot'")
    with ConversationStore.open(path, create=False) as store:
        assert what_the_user_sees(store) == saved[2]
    assert snapshot_of(path) is not None
    with ConversationStore.open(path, create=False) as store:
        assert what_the_user_sees(store) == saved[2]


def test_closing_after_a_session_keeps_the_records_as_saved(saved, tmp_path):
    """Prune, pin and resurrect, close: the next opening (from the snapshot) shows them,
    exactly as a table read does."""
    path = copy_of(saved, tmp_path)
    rng = random.Random(4)
    with ConversationStore.open(path, create=False) as store:
        conv = store.load(settings(), FRAMING)
        pruned = [c.id for c in conv.chunks.values() if not c.live and not c.framing]
        store.save_chunks(conv, conv.resurrect([rng.choice(pruned)]))
        store.save_chunks(conv, [conv.pin([c for c in conv.live_chunks() if not c.framing][1].id)])
        store.save_chunks(conv, conv.prune_to_fit(200))
        expected = [stored(conv.chunks[i]) for i in sorted(conv.chunks)]
        live = conv.table.snapshot()
    assert snapshot_of(path) is not None
    with ConversationStore.open(path, create=False) as store:
        first = everything(store)
    with ConversationStore.open(path, create=False) as store:
        conv = store.load(settings(), FRAMING)
        assert [stored(conv.chunks[i]) for i in sorted(conv.chunks)] == expected
    assert all(np.array_equal(first[2][name], col) for name, col in live.items())
    plain = tmp_path / "plain.halo.db"
    shutil.copy(path, plain)
    sql(plain, "DELETE FROM record_snapshot")
    with ConversationStore.open(plain, create=False) as store:
        assert everything(store) == first


def test_damage_behind_a_current_snapshot_is_named_before_the_first_write(saved, tmp_path):
    """A record changed without any trigger firing (the triggers dropped and put back, as
    a bit flip would): opening shows the conversation as saved, from the snapshot; the
    first save checks the tables, names the record and keeps the file read-only."""
    path = copy_of(saved, tmp_path)
    victim = sorted(saved[2]["chunks"])[3]
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA writable_schema = 0")
    for name in (*record_snapshot.TRIGGERS, "chunks_sum_au"):
        sql_text = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]
        conn.execute(f"DROP TRIGGER {name}")
        if name != "chunks_sum_au":
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS later (sql TEXT)")
            conn.execute("INSERT INTO later VALUES (?)", (sql_text,))
    conn.execute(f"UPDATE chunks SET start = start + 1 WHERE id = {victim}")
    for (text,) in conn.execute("SELECT sql FROM later").fetchall():  # put back as they were
        conn.execute(text)
    conn.commit()
    conn.close()
    assert snapshot_of(path) is not None  # it cannot tell: the counter did not move
    with ConversationStore.open(path, create=False) as store:
        conv = store.load(settings(), FRAMING)  # as saved: the snapshot's records
        assert not store.damage
        with pytest.raises(StoreDamaged, match=f"chunk {victim}"):
            store.save_chunks(conv, [conv.pin(next(c for c in conv.live_chunks() if not c.framing).id)])
        assert store.read_only
    with ConversationStore.open(path, create=False) as store:
        store.load(settings(), FRAMING)
        assert snapshot_of(path) is not None  # nothing was written
