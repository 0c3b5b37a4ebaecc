"""The conversation file's schema: ordered migrations and the token BLOB codec.

Schema versioning uses sqlite-utils' own :class:`~sqlite_utils.migrations.Migrations`
(sqlite-utils >= 4 ships it; the separate ``sqlite-migrate`` package is only a
compatibility shim for it).  Each migration is recorded by name in
``_sqlite_migrations``; a file that records a migration name this code does not know was
written by a newer Halo Weave and is refused rather than guessed at.  Never rename or
edit a released migration: append a new one.

Tokens are stored per chunk, not per row: a chunk's positions are contiguous
(``start .. start + token_count``), so its token ids and brightness are two little-endian
int32 BLOBs, and its texts are one UTF-8 string plus an int32 BLOB of per-token lengths
(in code points).  See :mod:`halo_weave.store` for the measurements behind this.
"""

from __future__ import annotations

from itertools import accumulate, pairwise
from typing import Sequence

import numpy as np
from sqlite_utils import Database, Migrations

from ..conversation import ChunkTokens

MIGRATION_SET = "halo_weave"

migrations = Migrations(MIGRATION_SET)

#: Every migration name this version knows, in order.
KNOWN_MIGRATIONS: list[str] = []


def _migration(fn):
    KNOWN_MIGRATIONS.append(fn.__name__)
    return migrations()(fn)


@_migration
def m001_conversation(db: Database) -> None:
    """Turns, chunks (metadata and tokens apart), meta, tool notes, semantic entries."""
    db.executescript(
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);  -- JSON values
        CREATE TABLE turns (
            turn_id INTEGER PRIMARY KEY,
            role TEXT NOT NULL,
            created_at REAL NOT NULL,
            complete INTEGER NOT NULL DEFAULT 0
        );
        CREATE TABLE chunks (
            id INTEGER PRIMARY KEY,
            turn_id INTEGER NOT NULL REFERENCES turns(turn_id),
            sentence_id INTEGER NOT NULL,
            role TEXT NOT NULL,
            start INTEGER NOT NULL,
            token_count INTEGER NOT NULL,
            live INTEGER NOT NULL,
            pinned INTEGER NOT NULL DEFAULT 0,
            brightness_at_deletion INTEGER,
            tool_result INTEGER NOT NULL DEFAULT 0,
            UNIQUE (turn_id, sentence_id, role)
        );
        CREATE INDEX chunks_start ON chunks (start);
        -- Kept apart from chunks so that reading every chunk's metadata on open does
        -- not drag every pruned chunk's tokens through the page cache.
        CREATE TABLE chunk_tokens (
            chunk_id INTEGER PRIMARY KEY REFERENCES chunks(id),
            token_ids BLOB NOT NULL,
            brightness BLOB NOT NULL,
            text TEXT NOT NULL,
            text_lengths BLOB NOT NULL
        );
        CREATE TABLE tool_data (name TEXT PRIMARY KEY, json TEXT NOT NULL);
        CREATE TABLE semantic_entries (
            chunk_id INTEGER PRIMARY KEY,
            turn_id INTEGER NOT NULL,
            sentence_id INTEGER NOT NULL,
            role TEXT NOT NULL,
            text TEXT NOT NULL,
            token_count INTEGER NOT NULL,
            context_hash TEXT NOT NULL,
            embedding BLOB,
            model TEXT,
            dim INTEGER,
            reference_count INTEGER NOT NULL DEFAULT 0,
            updated_at REAL NOT NULL
        );
        CREATE VIRTUAL TABLE semantic_fts USING fts5(
            text, content='semantic_entries', content_rowid='chunk_id'
        );
        CREATE TRIGGER semantic_entries_ai AFTER INSERT ON semantic_entries BEGIN
            INSERT INTO semantic_fts(rowid, text) VALUES (new.chunk_id, new.text);
        END;
        CREATE TRIGGER semantic_entries_ad AFTER DELETE ON semantic_entries BEGIN
            INSERT INTO semantic_fts(semantic_fts, rowid, text)
                VALUES ('delete', old.chunk_id, old.text);
        END;
        CREATE TRIGGER semantic_entries_au AFTER UPDATE ON semantic_entries BEGIN
            INSERT INTO semantic_fts(semantic_fts, rowid, text)
                VALUES ('delete', old.chunk_id, old.text);
            INSERT INTO semantic_fts(rowid, text) VALUES (new.chunk_id, new.text);
        END;
        """
    )


@_migration
def m002_semantic_changes(db: Database) -> None:
    """A change log of index vectors, so a vector snapshot file can be checked and caught up.

    Every insert, delete or vector-changing update of ``semantic_entries`` (by any path,
    the store's merge included) bumps ``semantic_state.seq`` and records the chunk id with
    that sequence number; ``count`` follows the number of entries.  ``uid`` ties a
    snapshot to this file.  ``reference_count`` updates are not changes to the vectors,
    and no longer rewrite the FTS row either (the old trigger fired on any column).
    """
    db.executescript(
        """
        CREATE TABLE semantic_state (
            id INTEGER PRIMARY KEY CHECK (id = 0),
            uid TEXT NOT NULL,
            seq INTEGER NOT NULL,
            count INTEGER NOT NULL
        );
        INSERT INTO semantic_state (id, uid, seq, count)
            SELECT 0, lower(hex(randomblob(8))), 0, COUNT(*) FROM semantic_entries;
        CREATE TABLE semantic_changes (chunk_id INTEGER PRIMARY KEY, seq INTEGER NOT NULL);
        CREATE INDEX semantic_changes_seq ON semantic_changes (seq);
        CREATE TRIGGER semantic_changes_ai AFTER INSERT ON semantic_entries BEGIN
            UPDATE semantic_state SET seq = seq + 1, count = count + 1;
            INSERT OR REPLACE INTO semantic_changes (chunk_id, seq)
                VALUES (new.chunk_id, (SELECT seq FROM semantic_state));
        END;
        CREATE TRIGGER semantic_changes_ad AFTER DELETE ON semantic_entries BEGIN
            UPDATE semantic_state SET seq = seq + 1, count = count - 1;
            INSERT OR REPLACE INTO semantic_changes (chunk_id, seq)
                VALUES (old.chunk_id, (SELECT seq FROM semantic_state));
        END;
        CREATE TRIGGER semantic_changes_au
            AFTER UPDATE OF chunk_id, role, context_hash, embedding, model, dim ON semantic_entries
        BEGIN
            UPDATE semantic_state SET seq = seq + 1;
            INSERT OR REPLACE INTO semantic_changes (chunk_id, seq)
                VALUES (old.chunk_id, (SELECT seq FROM semantic_state));
            INSERT OR REPLACE INTO semantic_changes (chunk_id, seq)
                VALUES (new.chunk_id, (SELECT seq FROM semantic_state));
        END;
        DROP TRIGGER semantic_entries_au;
        CREATE TRIGGER semantic_entries_au AFTER UPDATE OF chunk_id, text ON semantic_entries BEGIN
            INSERT INTO semantic_fts(semantic_fts, rowid, text)
                VALUES ('delete', old.chunk_id, old.text);
            INSERT INTO semantic_fts(rowid, text) VALUES (new.chunk_id, new.text);
        END;
        """
    )



@_migration
def m003_semantic_changes_upsert_safe(db: Database) -> None:
    """Change-log triggers that cannot conflict.

    m002's ``INSERT OR REPLACE`` inside the triggers inherits the conflict policy of the
    outer statement (SQLite's rule for trigger bodies), so an upsert of an existing entry
    (a re-embedded chunk) failed with a UNIQUE error.  Delete-then-insert has no conflict.
    """
    log = """DELETE FROM semantic_changes WHERE chunk_id = {ref}.chunk_id;
            INSERT INTO semantic_changes (chunk_id, seq)
                VALUES ({ref}.chunk_id, (SELECT seq FROM semantic_state));"""
    db.executescript(
        f"""
        DROP TRIGGER semantic_changes_ai;
        DROP TRIGGER semantic_changes_ad;
        DROP TRIGGER semantic_changes_au;
        CREATE TRIGGER semantic_changes_ai AFTER INSERT ON semantic_entries BEGIN
            UPDATE semantic_state SET seq = seq + 1, count = count + 1;
            {log.format(ref="new")}
        END;
        CREATE TRIGGER semantic_changes_ad AFTER DELETE ON semantic_entries BEGIN
            UPDATE semantic_state SET seq = seq + 1, count = count - 1;
            {log.format(ref="old")}
        END;
        CREATE TRIGGER semantic_changes_au
            AFTER UPDATE OF chunk_id, role, context_hash, embedding, model, dim ON semantic_entries
        BEGIN
            UPDATE semantic_state SET seq = seq + 1;
            {log.format(ref="old")}
            {log.format(ref="new")}
        END;
        """
    )


@_migration
def m004_row_checksums(db: Database) -> None:
    """A CRC-32 per row of the conversation tables, kept by triggers (see :mod:`integrity`).

    Computed here for the rows an older file already holds.
    """
    from .integrity import schema_sql

    # Two columns still had their first names here; m006 and m007 rename them.
    db.executescript(schema_sql(names={"chunk_index": "sentence_id", "brightness_at_prune": "brightness_at_deletion"}))


@_migration
def m005_answer_versions(db: Database) -> None:
    """Earlier versions of the last answer (Regenerate keeps them to flip back to).

    Tokens as in ``chunk_tokens``; ``question`` holds the wording of the question an
    answer was given to when the question was edited since (else NULL).
    """
    db.executescript(
        """
        CREATE TABLE answer_versions (
            id INTEGER PRIMARY KEY,
            user_turn_id INTEGER NOT NULL,
            created_at REAL NOT NULL,
            question TEXT,
            token_ids BLOB NOT NULL,
            brightness BLOB NOT NULL,
            text TEXT NOT NULL,
            text_lengths BLOB NOT NULL
        );
        CREATE INDEX answer_versions_by_question ON answer_versions (user_turn_id, created_at);
        """
    )


@_migration
def m006_chunk_index(db: Database) -> None:
    """``sentence_id`` becomes ``chunk_index``: it numbers a turn's paragraph chunks.

    ``RENAME COLUMN`` (SQLite >= 3.25) rewrites the unique index and the checksum triggers
    with it; the checksums are over values only, so they stay valid.
    """
    db.executescript(
        """
        ALTER TABLE chunks RENAME COLUMN sentence_id TO chunk_index;
        ALTER TABLE semantic_entries RENAME COLUMN sentence_id TO chunk_index;
        """
    )


@_migration
def m007_brightness_at_prune(db: Database) -> None:
    """``brightness_at_deletion`` becomes ``brightness_at_prune`` (one word per concept).

    As in m006, ``RENAME COLUMN`` rewrites the checksum triggers; the sums stay valid.
    """
    db.execute("ALTER TABLE chunks RENAME COLUMN brightness_at_deletion TO brightness_at_prune")


@_migration
def m008_recalls(db: Database) -> None:
    """What each user message recalled (:mod:`halo_weave.core.recall`), with checksums.

    One row per message and chunk it brought back; ``live`` is 1 while the chunk has not
    been pruned since (the mark the heatmap shows).  Files from before this migration
    have no rows: their messages show nothing recalled rather than a guess.
    """
    from .integrity import checksum_sql

    db.executescript(
        """
        CREATE TABLE recalls (
            id INTEGER PRIMARY KEY,
            turn_id INTEGER NOT NULL,
            chunk_id INTEGER NOT NULL,
            live INTEGER NOT NULL,
            UNIQUE (turn_id, chunk_id)
        );
        CREATE INDEX recalls_by_chunk ON recalls (chunk_id);
        """
        + checksum_sql("recalls")
    )


@_migration
def m009_branches(db: Database) -> None:
    """Stashed tails of the conversation (:mod:`.branches`): what an edited or regenerated
    earlier message replaced, kept to switch back to, with checksums.

    ``parent_turn_id`` is the turn the tail follows (-1: it starts at the first message);
    ``first_turn_id`` and ``created_at`` are its first turn's; ``tail`` holds its rows.
    """
    from .integrity import checksum_sql

    db.executescript(
        """
        CREATE TABLE branches (
            id INTEGER PRIMARY KEY,
            parent_turn_id INTEGER NOT NULL,
            first_turn_id INTEGER NOT NULL,
            created_at REAL NOT NULL,
            tail BLOB NOT NULL
        );
        CREATE INDEX branches_by_parent ON branches (parent_turn_id, first_turn_id);
        """
        + checksum_sql("branches")
    )



@_migration
def m010_document_turns(db: Database) -> None:
    """Turns and chunks may have the role ``document``: an attached file's paragraphs.

    No table changes (roles are text); recorded so that a Halo Weave from before documents
    refuses such a file as too new instead of failing on a role it does not know.
    """


@_migration
def m011_record_snapshot(db: Database) -> None:
    """The turn and chunk records kept as one binary row, read by opening instead of the
    tables while no record has changed since (:mod:`.record_snapshot`): a change counter
    kept by triggers on ``turns`` and ``chunks``, and the snapshot's table (empty until
    the file is next opened or closed after a change)."""
    from .record_snapshot import schema_sql

    db.executescript(schema_sql())


# ---------------------------------------------------------------------- token codec
_I4 = np.dtype("<i4")


def pack_tokens(
    token_ids: Sequence[int] | np.ndarray,
    texts: Sequence[str],
    brightness: Sequence[int] | np.ndarray,
) -> tuple[bytes, bytes, str, bytes]:
    """(token_ids blob, brightness blob, text, text_lengths blob) of one chunk."""
    lengths = np.fromiter(map(len, texts), _I4, len(texts))
    return (
        np.asarray(token_ids, _I4).tobytes(),
        np.asarray(brightness, _I4).tobytes(),
        "".join(texts),
        lengths.tobytes(),
    )


def pack_brightness(brightness: np.ndarray) -> bytes:
    return np.asarray(brightness, _I4).tobytes()


def unpack_tokens(ids_blob: bytes, brightness_blob: bytes, text: str, lengths_blob: bytes) -> ChunkTokens:
    """The inverse of :func:`pack_tokens` (arrays are writable copies)."""
    ends = np.cumsum(np.frombuffer(lengths_blob, _I4), dtype=np.int64).tolist()
    starts = [0, *ends[:-1]]
    return ChunkTokens(
        token_ids=np.frombuffer(ids_blob, _I4).astype(np.int32),
        texts=[text[a:b] for a, b in zip(starts, ends)],
        brightness=np.frombuffer(brightness_blob, _I4).astype(np.int32),
    )


def unpack_ints(blob: bytes) -> np.ndarray:
    """An int32 BLOB as a writable array."""
    return np.frombuffer(blob, _I4).astype(np.int32)


def unpack_token_rows(rows: Sequence[tuple]) -> tuple[np.ndarray, np.ndarray, ChunkTokens]:
    """Many ``(chunk_id, *packed)`` rows at once: (chunk ids, tokens of each, the tokens of
    all of them concatenated in row order)."""
    if not rows:
        empty = np.zeros(0, np.int32)
        return np.zeros(0, np.int64), np.zeros(0, np.int64), ChunkTokens(empty, [], empty.copy())
    ids, id_blobs, brightness_blobs, texts, length_blobs = zip(*rows)
    counts = np.fromiter(map(len, id_blobs), np.int64, len(rows)) // _I4.itemsize
    lengths = np.frombuffer(b"".join(length_blobs), _I4).tolist()
    text = "".join(texts)
    return (
        np.fromiter(ids, np.int64, len(rows)),
        counts,
        ChunkTokens(
            token_ids=np.frombuffer(b"".join(id_blobs), _I4).astype(np.int32),
            # The fastest split measured (~30k tokens per 30k-token context).
            texts=[text[a:b] for a, b in pairwise(accumulate(lengths, initial=0))],
            brightness=np.frombuffer(b"".join(brightness_blobs), _I4).astype(np.int32),
        ),
    )
