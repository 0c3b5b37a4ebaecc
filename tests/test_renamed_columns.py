"""m006_chunk_index and m007_brightness_at_prune: a file written before the renames
(columns ``sentence_id`` and ``brightness_at_deletion``) still opens with its chunks."""

from __future__ import annotations

import random
import sqlite3

from sqlite_utils import Database, Migrations

from conversation_writer import FRAMING, new_conversation, settings
from halo_weave.storage import integrity, schema
from halo_weave.store import ConversationStore, new_conversation_path
from test_store import chat, snapshot

OLD_MIGRATIONS = ("m001_conversation", "m002_semantic_changes", "m003_semantic_changes_upsert_safe",
                  "m004_row_checksums", "m005_answer_versions")
#: Today's column name -> the name the old migrations gave it.
OLD_NAMES = {"chunk_index": "sentence_id", "brightness_at_prune": "brightness_at_deletion"}
COPIED = ("meta", "turns", "chunks", "chunk_tokens", "tool_data", "semantic_entries")


def old_schema_file(path) -> None:
    """An empty conversation file as the version before m006 and m007 created it."""
    old = Migrations(schema.MIGRATION_SET)
    for name in OLD_MIGRATIONS:
        old()(getattr(schema, name))
    conn = sqlite3.connect(path)
    integrity.register(conn)
    old.apply(Database(conn))
    conn.close()


def columns(conn, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def test_a_file_with_the_old_schema_opens_with_its_chunks(tmp_path):
    # A real conversation, written by today's store...
    new = new_conversation_path(tmp_path)
    with ConversationStore.open(new) as store:
        conv = new_conversation()
        chat(conv, store, random.Random(5), exchanges=4, max_tokens=300)
        assert any(not c.live for c in conv.chunks.values())
    with ConversationStore.open(new, create=False) as store:
        expected = snapshot(store.load(settings(), FRAMING))

    # ... copied row by row into a file made by the old migrations only.
    old = tmp_path / "old.sqlite"
    old_schema_file(old)
    conn = sqlite3.connect(old)
    integrity.register(conn)
    assert {"sentence_id", "brightness_at_deletion"} <= set(columns(conn, "chunks"))
    assert not {"chunk_index", "brightness_at_prune"} & set(columns(conn, "chunks"))
    assert "sentence_id" in columns(conn, "semantic_entries")
    conn.execute("ATTACH DATABASE ? AS new", (str(new),))
    for table in COPIED:
        source = [row[1] for row in conn.execute(f"PRAGMA new.table_info({table})")]
        target = [OLD_NAMES.get(c, c) for c in source]
        conn.execute(f"DELETE FROM main.{table}")
        conn.execute(f"INSERT INTO main.{table} ({', '.join(target)}) "
                     f"SELECT {', '.join(source)} FROM new.{table}")
    conn.commit()
    conn.execute("DETACH DATABASE new")
    assert conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == len(expected["chunks"])
    applied = {r[0] for r in conn.execute("SELECT name FROM _sqlite_migrations")}
    assert not {"m006_chunk_index", "m007_brightness_at_prune"} & applied
    conn.close()

    with ConversationStore.open(old, create=False) as store:
        loaded = store.load(settings(), FRAMING)
        assert snapshot(loaded) == expected
        assert integrity.verify_all(store.conn) == []
    conn = sqlite3.connect(old)
    assert {"chunk_index", "brightness_at_prune"} <= set(columns(conn, "chunks"))
    assert not {"sentence_id", "brightness_at_deletion"} & set(columns(conn, "chunks"))
    assert "chunk_index" in columns(conn, "semantic_entries")
    applied = {r[0] for r in conn.execute("SELECT name FROM _sqlite_migrations")}
    assert {"m006_chunk_index", "m007_brightness_at_prune"} <= applied
    triggers = " ".join(r[0] for r in conn.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL"))
    assert "sentence_id" not in triggers and "brightness_at_deletion" not in triggers
    conn.close()

    # And it keeps working: a later session reopens it unchanged.
    with ConversationStore.open(old, create=False) as store:
        assert snapshot(store.load(settings(), FRAMING)) == expected
