"""A damaged conversation file is noticed, reported by chunk, and opened read-only."""

from __future__ import annotations

import random
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from halo_weave.storage import conversation_loader, files, integrity
from halo_weave.store import ConversationStore, StoreDamaged, StoreError

from .helpers import build_conversation, what_the_user_sees

#: Flips per table: a fixed, seeded budget (the figure goes into the closing note).
FLIPS_PER_TABLE = 40
TABLES = ("chunk_tokens", "chunks", "turns", "meta", "tool_data", "row_checksums",
          "semantic_entries", "sqlite_schema", "record_snapshot")


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("orig") / "talk.halo.db"
    build_conversation(path)
    with ConversationStore.open(path, create=False) as store:
        seen = what_the_user_sees(store)
    return path, seen


def pages_of(path: Path) -> dict[str, list[int]]:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?immutable=1", uri=True)
    try:
        rows = conn.execute("SELECT name, pageno FROM dbstat").fetchall()
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    pages: dict[str, list[int]] = {}
    for name, pageno in rows:
        pages.setdefault(name, []).append(pageno)
    pages["page_size"] = [page_size]
    return pages


def content_start(data: bytes, page: int, page_size: int) -> int:
    """Where a b-tree page's cells begin: flips are aimed at stored rows, not free space."""
    header = (page - 1) * page_size + (100 if page == 1 else 0)
    start = int.from_bytes(data[header + 5 : header + 7], "big") or 65536
    return min(start, page_size - 1)


def outcome(path: Path, original_view: dict) -> str:
    """refused / detected / harmless / silent (text altered without a word)."""
    try:
        store = ConversationStore.open(path, create=False)
    except StoreError:
        return "refused"
    try:
        try:
            view = what_the_user_sees(store)
        except StoreDamaged:
            return "detected"
        except StoreError:  # refused while reading (a damaged schema), with words
            return "refused"
        except Exception as exc:  # noqa: BLE001 - counted, and the test fails on it
            return f"unclear {type(exc).__name__}: {exc}"[:120]
        if store.damage:
            return "detected"
        return "harmless" if view == original_view else "silent"
    finally:
        store.close()


def test_bit_flips_in_every_table_are_detected_or_harmless(original, tmp_path):
    source, view = original
    pages = pages_of(source)
    page_size = pages.pop("page_size")[0]
    rng = random.Random(17)
    data = source.read_bytes()
    tally: dict[str, Counter] = {}
    for table in TABLES:
        assert pages.get(table), f"no pages for {table}"
        counts = tally.setdefault(table, Counter())
        for n in range(FLIPS_PER_TABLE):
            page = rng.choice(pages[table])
            offset = (page - 1) * page_size + rng.randrange(content_start(data, page, page_size), page_size)
            flipped = bytearray(data)
            flipped[offset] ^= 1 << rng.randrange(8)
            copy = tmp_path / f"{table}-{n}.halo.db"
            copy.write_bytes(bytes(flipped))
            result = outcome(copy, view)
            counts[result] += 1
            if result != "harmless":
                sound, _ = files.check_file(copy)
                assert not sound, f"--check missed a flip that the app noticed ({table}, byte {offset})"
            for leftover in tmp_path.glob(f"{copy.name}*"):
                leftover.unlink()
    total = sum(tally.values(), Counter())
    print(f"\nbit flips: {sum(total.values())} in {len(TABLES)} tables: {dict(total)}")
    for table, counts in tally.items():
        print(f"  {table}: {dict(counts)}")
    bad = {t: {k: v for k, v in c.items() if k not in ("refused", "detected", "harmless")}
           for t, c in tally.items()}
    assert not any(bad.values()), bad


def flip_chunk_text(path: Path, chunk_id: int) -> None:
    """Change one character of a chunk's stored text behind the app's back (no triggers)."""
    conn = sqlite3.connect(path)
    text = conn.execute("SELECT text FROM chunk_tokens WHERE chunk_id = ?", (chunk_id,)).fetchone()[0]
    conn.execute("DROP TRIGGER chunk_tokens_sum_au")  # a foreign program knows nothing of them
    conn.execute("UPDATE chunk_tokens SET text = ? WHERE chunk_id = ?",
                 (("X" if text[0] != "X" else "Y") + text[1:], chunk_id))
    conn.commit()
    conn.close()


def test_damaged_live_chunk_is_named_and_the_rest_opens_read_only(original, tmp_path):
    source, view = original
    path = tmp_path / "talk.halo.db"
    shutil.copy(source, path)
    live = [i for i, c in view["chunks"].items() if c[2]]
    victim = live[len(live) // 2]
    flip_chunk_text(path, victim)
    with ConversationStore.open(path, create=False) as store:
        conv = store.load()
        assert [d.key for d in store.damage] == [victim]
        assert store.read_only
        message = str(store.refusal)
        assert f"chunk {victim}" in message and "read-only" in message and "--check" in message
        # The rest is there, as it was; the damaged chunk is not shown as live text.
        assert not conv.chunks[victim].live
        for i, chunk in view["chunks"].items():
            if i != victim and chunk[2]:
                assert "".join(conv.chunk_tokens(i).texts) == chunk[4]
        with pytest.raises(StoreDamaged, match=f"chunk {victim}"):
            store.save_tool_data("notes", {})
        with pytest.raises(StoreDamaged):
            conv.chunk_tokens(victim)  # resurrecting it would show altered text
    assert store.refusal is not None


def test_damaged_pruned_chunk_is_reported_when_read_back(original, tmp_path):
    source, view = original
    path = tmp_path / "talk.halo.db"
    shutil.copy(source, path)
    pruned = [i for i, c in view["chunks"].items() if not c[2]]
    flip_chunk_text(path, pruned[0])
    with ConversationStore.open(path, create=False) as store:
        conv = store.load()
        assert not store.damage and not store.read_only  # opening reads no pruned tokens
        with pytest.raises(StoreDamaged, match=f"chunk {pruned[0]}"):
            conv.resurrect([pruned[0]])
        assert store.read_only


def run_check(path: Path) -> subprocess.CompletedProcess:
    """``halo-weave --check FILE``, as a user runs it."""
    command = "import sys; from halo_weave.app import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", command, "--check", str(path)],
                          capture_output=True, text=True, timeout=120)


def test_check_command(original, tmp_path):
    source, view = original
    sound = run_check(source)
    assert sound.returncode == 0, sound.stdout + sound.stderr
    assert "is sound" in sound.stdout
    before = source.read_bytes()

    damaged = tmp_path / "damaged.halo.db"
    shutil.copy(source, damaged)
    victim = next(iter(view["chunks"]))
    flip_chunk_text(damaged, victim)
    result = run_check(damaged)
    assert result.returncode != 0 and f"chunk {victim}" in result.stdout

    notes = tmp_path / "notes.txt"
    notes.write_text("not a conversation")
    result = run_check(notes)
    assert result.returncode != 0 and "not a Halo Weave conversation" in result.stdout

    foreign = tmp_path / "photos.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    assert run_check(foreign).returncode != 0
    assert source.read_bytes() == before  # checking never writes
    assert not Path(f"{source}-wal").exists()


def test_older_file_gets_checksums_for_its_existing_chunks(original, tmp_path):
    source, view = original
    path = tmp_path / "old.halo.db"
    shutil.copy(source, path)
    conn = sqlite3.connect(path)  # make it look like a file from before m004
    for table in integrity.CHECKED:
        for suffix in ("ai", "au", "ad"):
            conn.execute(f"DROP TRIGGER {table}_sum_{suffix}")
    conn.execute("DROP TABLE row_checksums")
    conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'm004_row_checksums'")
    # ... and so from before m006 and m007 too: two columns still had their old names.
    conn.execute("DELETE FROM _sqlite_migrations WHERE name IN ('m006_chunk_index', 'm007_brightness_at_prune')")
    for table in ("chunks", "semantic_entries"):
        conn.execute(f"ALTER TABLE {table} RENAME COLUMN chunk_index TO sentence_id")
    conn.execute("ALTER TABLE chunks RENAME COLUMN brightness_at_prune TO brightness_at_deletion")
    conn.commit()
    conn.close()
    with ConversationStore.open(path, create=False) as store:
        assert what_the_user_sees(store) == view
        assert integrity.verify_all(store.conn) == []
        count = store.conn.execute("SELECT COUNT(*) FROM row_checksums WHERE tbl = 'chunk_tokens'").fetchone()[0]
        assert count == len(view["chunks"])
    flip_chunk_text(path, next(iter(view["chunks"])))
    assert run_check(path).returncode != 0


@pytest.mark.parametrize("column, change", [
    ("start", "start + 1"), ("pinned", "1 - pinned"), ("live", "2"), ("role", "'tool'"),
    ("turn_id", "CAST(CAST(turn_id AS TEXT) AS BLOB)"), ("live", "CAST(CAST(live AS TEXT) AS BLOB)"), ("brightness_at_prune", "NULL"),
])
def test_changed_chunk_record_is_found_by_the_summed_read(original, tmp_path, column, change):
    """Opening totals the chunk records' checksums from the columns it reads (numpy), not
    in SQL: a record changed behind the app's back is still named, whatever the change."""
    source, view = original
    path = tmp_path / "talk.halo.db"
    shutil.copy(source, path)
    with ConversationStore.open(path, create=False) as store:
        assert conversation_loader.records_and_check(store) is not None  # the summed read agrees on a sound file
    victim = sorted(view["chunks"])[3]
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER chunks_sum_au")
    conn.execute(f"UPDATE chunks SET {column} = {change} WHERE id = ?", (victim,))
    conn.commit()
    conn.close()
    with ConversationStore.open(path, create=False) as store:
        assert conversation_loader.records_and_check(store) is None
        store.load()
        assert [d.key for d in store.damage] == [victim] and store.read_only
