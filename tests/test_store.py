"""The conversation file: exact rehydration, DB-first writes, refusals, chunk state."""

from __future__ import annotations

import dataclasses
import hashlib
import random
import sqlite3
from pathlib import Path

import pytest

from conversation_writer import (
    FRAMING, add_user, message, new_conversation, settings, stream_answer,
)
from halo_weave.store import (
    ConversationStore, StoreCorrupt, StoreForeign, StoreMissing, StoreRefused, StoreTooNew,
    list_conversations, new_conversation_path,
)


def snapshot(conv) -> dict:
    """Everything rehydration must reproduce."""
    table = {name: getattr(conv.table, name).tolist() for name in
             ("position", "token_id", "brightness", "chunk_id", "turn_id", "framing")}
    return {
        "system": (conv.system.text, conv.system.ids.tolist(), conv.system.texts),
        "counters": (conv.next_position, conv.next_turn_id, conv.next_chunk_id),
        "turns": {t: dataclasses.asdict(turn) for t, turn in conv.turns.items()},
        # resurrected_at is this session's ranking hint, not saved (see core/records.py).
        "chunks": {c: {k: v for k, v in dataclasses.asdict(chunk).items() if k != "resurrected_at"}
                   for c, chunk in conv.chunks.items()},
        "table": table,
        "texts": {c.id: conv.chunk_texts(c.id) for c in conv.live_chunks()},
        "pruned": {c: conv.chunk_tokens(c).text for c, chunk in conv.chunks.items() if not chunk.live},
    }


def chat(conv, store, rng, exchanges=4, **kw):
    """A few exchanges saved the way the app saves them."""
    for _ in range(exchanges):
        store.save_turn(conv, add_user(conv, message(rng, rng.randint(1, 3))))
        turn = stream_answer(conv, message(rng, rng.randint(2, 4)), store, rng=rng)
        store.save_turn(conv, turn)
        store.save_brightness(conv)
        store.save_chunks(conv, conv.prune_to_fit(**kw))


@pytest.fixture
def path(tmp_path) -> Path:
    return new_conversation_path(tmp_path)


@pytest.fixture
def store(path):
    store = ConversationStore.open(path)
    yield store
    store.close()


@pytest.fixture
def reopen():
    """Load a file in a fresh store, kept open (pruned chunks load lazily) until teardown."""
    stores = []

    def load(path: Path, **changes):
        stores.append(ConversationStore.open(path, create=False))
        return stores[-1].load(settings(**changes), FRAMING)

    yield load
    for store in stores:
        store.close()


def test_rehydration_is_exact_and_positions_continue(store, path, reopen):
    rng = random.Random(1)
    conv = new_conversation()
    store.save_system_prompt(conv)
    chat(conv, store, rng, exchanges=6, max_tokens=500)
    pinned = next(c for c in conv.live_chunks() if not c.framing and not c.anchor)
    store.save_chunks(conv, [conv.pin(pinned.id)])
    pruned = conv.graveyard()
    assert pruned, "the conversation should have pruned something"
    store.save_chunks(conv, conv.resurrect([pruned[-1].id]))
    before = snapshot(conv)
    store.close()

    again = reopen(path)
    assert snapshot(again) == before

    # The next turn continues after every position ever used, and survives a reopen too.
    with ConversationStore.open(path) as store2:
        rehydrated = store2.load(settings(), FRAMING)
        turn = add_user(rehydrated, "a question after the restart")
        store2.save_turn(rehydrated, turn)
        first = rehydrated.chunks[turn.chunk_ids[0]].start
        assert first == before["counters"][0]
        assert rehydrated.turns[turn.turn_id].turn_id == before["counters"][1]
        after = snapshot(rehydrated)
    assert snapshot(reopen(path)) == after


def test_pruned_history_stays_columns_until_it_is_used(store, path, reopen):
    rng = random.Random(4)
    conv = new_conversation()
    chat(conv, store, rng, exchanges=8, max_tokens=300)
    graveyard = [c.id for c in conv.graveyard()]
    assert len(graveyard) > 3
    store.close()

    again = reopen(path)
    live = again.live_chunks()
    # Only the live chunks are objects; pruned chunks and turns are numpy rows until asked for.
    assert again.chunks.materialised == len(live) and again.turns.materialised == 0
    assert len(again.chunks) == len(conv.chunks) and len(again.turns) == len(conv.turns)
    assert list(again.chunks) == sorted(conv.chunks, key=lambda c: conv.chunks[c].start)
    assert list(again.turns) == sorted(conv.turns)
    rows = again.graveyard()
    assert rows.ids == graveyard and again.chunks.materialised == len(live)
    oldest = rows[-1]
    assert oldest == conv.chunks[oldest.id] and again.chunks.materialised == len(live) + 1
    assert oldest.id in again.chunks and again.chunks[oldest.id] is oldest
    assert again.chunk_by_key(*oldest.key) is oldest
    assert again.turns[oldest.turn_id] == conv.turns[oldest.turn_id]
    assert again.turns.last("user") == max(t for t in conv.turns if conv.turns[t].role == "user")
    assert [c.key for c in again.resurrect([oldest.id])] == [c.key for c in conv.resurrect([oldest.id])]


def test_user_turn_is_in_the_file_before_it_is_shown(store, path, reopen):
    conv = new_conversation()
    turn = add_user(conv, "remember the number 4417\n\nand the colour teal")
    store.save_turn(conv, turn)
    # A second connection (another process would see the same) finds it complete.
    seen = reopen(path)
    assert seen.turns[turn.turn_id].complete
    assert "4417" in "".join(seen.chunk_text(c) for c in seen.turns[turn.turn_id].chunk_ids)


def test_streamed_batches_survive_a_crash_mid_answer(store, path, reopen):
    conv = new_conversation()
    store.save_turn(conv, add_user(conv, message(random.Random(2), 1)))
    turn = conv.begin_turn("assistant")
    words = [f" w{i}" for i in range(40)]
    for n, word in enumerate(words, 1):
        conv.append_token(1000 + n, word)
        if n % 16 == 0:
            store.save_stream_progress(conv)
    # The app dies here: 32 tokens were written in two batches, 8 were not.
    recovered = reopen(path)
    answer = recovered.turns[turn.turn_id]
    assert answer.complete
    text = "".join(recovered.chunk_text(c) for c in answer.chunk_ids)
    assert text == "<|im_start|>assistant\n" + "".join(words[:32]) + "<|im_end|>\n"
    suffix = recovered.chunks[answer.chunk_ids[-1]]
    assert suffix.framing and suffix.start == recovered.chunks[answer.chunk_ids[-2]].end
    assert recovered.next_position == suffix.end
    # The repair was written: a later open sees the same closed turn.
    assert snapshot(reopen(path)) == snapshot(recovered)


def test_crash_before_any_answer_token_drops_the_empty_turn(store, path, reopen):
    conv = new_conversation()
    store.save_turn(conv, add_user(conv, "hello"))
    conv.begin_turn("assistant")
    store.save_stream_progress(conv)  # only the prefix framing was written
    recovered = reopen(path)
    assert list(recovered.turns) == [0]
    assert recovered.next_position >= conv.next_position  # positions are never reused


def test_prune_resurrect_pin_and_prune_by_hand_are_persisted(store, path, reopen):
    rng = random.Random(3)
    conv = new_conversation()
    chat(conv, store, rng, exchanges=5, max_tokens=0)
    original = {c: conv.chunk_tokens(c) for c in conv.chunks}
    pruned = conv.prune_to_fit(300)
    store.save_chunks(conv, pruned)
    assert pruned

    loaded = reopen(path)
    for chunk in pruned:
        stored = loaded.chunks[chunk.id]
        assert not stored.live and stored.brightness_at_prune == chunk.brightness_at_prune

    # Resurrect in a later session: the tokens come back lazily from the file.
    with ConversationStore.open(path) as store2:
        conv2 = store2.load(settings(), FRAMING)
        target = next(c for c in conv2.graveyard() if not c.anchor)
        resurrected = conv2.resurrect([target.id])
        store2.save_chunks(conv2, resurrected)
        tokens = conv2.chunk_tokens(target.id)
        assert tokens.token_ids.tolist() == original[target.id].token_ids.tolist()
        assert tokens.texts == original[target.id].texts
        victim = next(c for c in conv2.live_chunks() if not c.framing and c.id != target.id)
        store2.save_chunks(conv2, [conv2.pin(target.id)])
        store2.save_chunks(conv2, conv2.prune_chunk(victim.id))
        expected = snapshot(conv2)
    final = reopen(path)
    assert snapshot(final) == expected
    assert final.chunks[target.id].pinned and final.chunks[target.id].live
    assert not final.chunks[victim.id].live
    assert (final.table.brightness[final.chunk_rows(final.chunks[target.id])] == 10000).all()


def test_merge_is_persisted_and_drops_the_absorbed_index_entry(store, path, reopen):
    conv = new_conversation()
    store.save_system_prompt(conv)
    turn = add_user(conv, message(random.Random(4), 3))
    store.save_turn(conv, turn)
    first, second = conv.content_chunks(turn.turn_id)[:2]
    for chunk in (first, second):
        store.conn.execute(
            "INSERT INTO semantic_entries (chunk_id, turn_id, chunk_index, role, text, token_count,"
            " context_hash, updated_at) VALUES (?, ?, ?, ?, ?, ?, 'h', 0)",
            (chunk.id, *chunk.key, conv.chunk_text(chunk.id), chunk.token_count),
        )
    merged_text = conv.chunk_text(first.id) + conv.chunk_text(second.id)
    kept, absorbed = conv.merge_with_next(first.id)
    store.save_merge(conv, kept, absorbed)

    loaded = reopen(path)
    assert absorbed.id not in loaded.chunks
    assert loaded.chunk_text(kept.id) == merged_text
    assert snapshot(loaded) == snapshot(conv)
    entries = [r[0] for r in store.conn.execute("SELECT chunk_id FROM semantic_entries")]
    assert entries == [kept.id]
    hits = store.conn.execute(
        "SELECT rowid FROM semantic_fts WHERE semantic_fts MATCH ?", (merged_text.split()[0],)
    ).fetchall()
    assert hits == [(kept.id,)]


def test_tool_notes_and_meta_are_persisted(store, path):
    assert store.load_tool_data("notes") is None
    store.save_tool_data("notes", {"people": {"Ada": {"likes": ["tea", 3]}}})
    store.set_meta("embedding_model", "all-MiniLM-L6-v2")
    store.close()
    with ConversationStore.open(path) as again:
        assert again.load_tool_data("notes") == {"people": {"Ada": {"likes": ["tea", 3]}}}
        assert again.get_meta("embedding_model") == "all-MiniLM-L6-v2"
        assert again.get_meta("absent", 7) == 7


def test_chunk_texts_and_lazy_tokens(store):
    conv = new_conversation()
    turn = add_user(conv, "first paragraph " * 10 + "\n\n" + "second one " * 10)
    store.save_turn(conv, turn)
    ids = turn.chunk_ids
    texts = store.chunk_texts(ids)
    assert "".join(texts[c] for c in ids) == "".join(conv.chunk_text(c) for c in ids)
    tokens = store.load_chunk_tokens(ids[1:2])
    assert tokens[ids[1]].token_ids.tolist() == conv.chunk_tokens(ids[1]).token_ids.tolist()


# ---------------------------------------------------------------------- refusals
def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_refused(path: Path, error: type, words: str) -> None:
    before = digest(path)
    siblings = sorted(p.name for p in path.parent.iterdir())
    with pytest.raises(error) as caught:
        ConversationStore.open(path)
    assert isinstance(caught.value, StoreRefused)
    assert words in str(caught.value)
    assert digest(path) == before
    assert sorted(p.name for p in path.parent.iterdir()) == siblings


def saved_conversation(path: Path) -> None:
    with ConversationStore.open(path) as store:
        chat(new_conversation(), store, random.Random(5), exchanges=8, max_tokens=400)


def test_refuses_a_file_that_is_not_sqlite(path):
    path.write_bytes(b"these are my grocery notes, not a database\n" * 50)
    assert_refused(path, StoreCorrupt, "not an SQLite database")


def test_refuses_corrupt_bytes(path):
    saved_conversation(path)
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 6 * page
    data[3 * page + 8 : 4 * page] = bytes(random.Random(6).randbytes(page - 8))
    path.write_bytes(bytes(data))
    assert_refused(path, StoreCorrupt, "damaged")


def test_refuses_a_foreign_sqlite_file(path):
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO photos (name) VALUES ('beach.jpg')")
    conn.commit()
    conn.close()
    assert_refused(path, StoreForeign, "not a Halo Weave conversation")


def test_refuses_a_newer_schema(path):
    saved_conversation(path)
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) "
        "VALUES ('halo_weave', 'm042_from_the_future', '2031-01-01')"
    )
    conn.commit()
    conn.close()
    assert_refused(path, StoreTooNew, "newer version of Halo Weave")


def test_opening_a_missing_file_without_create(tmp_path):
    with pytest.raises(StoreMissing):
        ConversationStore.open(tmp_path / "nothing.halo.db", create=False)
    assert not (tmp_path / "nothing.halo.db").exists()


# ---------------------------------------------------------------------- the list
def test_list_conversations(tmp_path):
    first = new_conversation_path(tmp_path)
    with ConversationStore.open(first) as store:
        conv = new_conversation()
        store.save_turn(conv, add_user(conv, "Plan a three day walking trip through the Lake District please"))
    second = new_conversation_path(tmp_path)
    assert second != first
    ConversationStore.open(second).close()
    broken = new_conversation_path(tmp_path)
    broken.write_bytes(b"junk" * 100)

    listed = {s.path: s for s in list_conversations(tmp_path)}
    assert set(listed) == {first, second, broken}
    assert listed[first].title == "Plan a three day walking trip through the …"
    assert listed[first].turn_count == 1
    assert listed[first].token_count == len(conv.table)
    assert listed[second].title == "New conversation" and listed[second].error is None
    assert listed[broken].error


def test_save_calls_nest_inside_one_transaction(store, path, reopen):
    rng = random.Random(5)
    conv = new_conversation()
    store.save_system_prompt(conv)
    chat(conv, store, rng, exchanges=4, max_tokens=0)
    pruned = conv.prune_to_fit(300)
    assert pruned
    with store.transaction():
        store.save_chunks(conv, pruned)  # joins: nothing is committed yet
        store.set_meta("note", "one commit")
        assert store.conn.in_transaction
    assert not store.conn.in_transaction
    assert snapshot(reopen(path)) == snapshot(conv)

    # an exception leaving the outer block undoes what the nested saves wrote
    more = conv.prune_to_fit(150)
    assert more
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.save_chunks(conv, more)
            raise RuntimeError("boom")
    assert all(reopen(path).chunks[c.id].live for c in more)

    # a nested block that fails is undone alone
    with store.transaction():
        store.set_meta("kept", 1)
        with pytest.raises(RuntimeError):
            with store.transaction():
                store.set_meta("dropped", 1)
                raise RuntimeError("boom")
    assert (store.get_meta("kept"), store.get_meta("dropped")) == (1, None)


def test_an_index_entry_can_be_re_embedded_again_and_again(store):
    """Re-embedding a chunk (its answer arrived, it was merged, an import re-indexed it)
    upserts its entry; the change log that keeps the vector snapshot honest must not
    refuse the second write (it did: a UNIQUE error shown in the status bar)."""
    upsert = (
        "INSERT INTO semantic_entries (chunk_id, turn_id, chunk_index, role, text, token_count,"
        " context_hash, embedding, model, dim, updated_at) VALUES (7, 0, 0, 'user', 'x', 1, ?,"
        " x'0000803f', 'm', 1, 0) ON CONFLICT(chunk_id) DO UPDATE SET"
        " context_hash = excluded.context_hash, embedding = excluded.embedding"
    )
    for context in ("question only", "question + answer", "merged"):
        with store.transaction():
            store.conn.execute(upsert, (context,))
    rows = store.conn.execute("SELECT chunk_id FROM semantic_changes").fetchall()
    assert rows == [(7,)]
    assert store.conn.execute("SELECT context_hash FROM semantic_entries").fetchone() == ("merged",)


def test_closing_the_file_waits_for_a_worker_still_reading_it(path):
    """Opening another conversation closes this one while its memory may still be loading
    on a thread: the close waits for that read instead of pulling the file from under it."""
    import threading
    import time

    store = ConversationStore.open(path)
    reading, rows = threading.Event(), []

    def load_memory():
        with store.lock:  # as the semantic index reads the file
            reading.set()
            time.sleep(0.3)
            rows.append(store.conn.execute("SELECT count(*) FROM semantic_entries").fetchone())

    worker = threading.Thread(target=load_memory)
    worker.start()
    reading.wait()
    store.close()
    worker.join()
    assert rows == [(0,)], "the read finished on an open file"
    with pytest.raises(sqlite3.ProgrammingError):
        store.conn.execute("SELECT 1")
